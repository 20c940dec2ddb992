/**
 * The Dockerfile and .dockerignore as a builder reads them, for tests that check or assemble the
 * image without a Docker engine: stages of instructions, and which paths of the context the
 * builder never sees.
 */
import { readFileSync } from 'node:fs';

export interface Instruction {
  /** FROM, RUN, COPY...: upper case. */
  keyword: string;
  /** The rest of the instruction, continuation lines joined. */
  args: string;
}

export interface Stage {
  /** The image it starts from. */
  base: string;
  /** Its name (`FROM x AS name`), if it has one. */
  name?: string;
  instructions: Instruction[];
}

/** The stages of a Dockerfile, in order; comments and blank lines dropped, continuations joined. */
export function parseDockerfile(text: string): Stage[] {
  const logical = text
    .split('\n')
    .filter((line) => !/^\s*#/.test(line))
    .join('\n')
    .replace(/\\\n/g, ' ')
    .split('\n')
    .map((line) => line.trim())
    .filter(Boolean);
  const stages: Stage[] = [];
  for (const line of logical) {
    const [, keyword, args] = /^(\S+)\s+(.*)$/.exec(line) ?? ['', line, ''];
    const instruction = { keyword: keyword.toUpperCase(), args: args.replace(/\s+/g, ' ').trim() };
    if (instruction.keyword === 'FROM') {
      const [base, as, name] = instruction.args.split(' ');
      stages.push({ base, name: as?.toUpperCase() === 'AS' ? name : undefined, instructions: [] });
    } else {
      if (!stages.length) throw new Error(`Dockerfile: ${instruction.keyword} before the first FROM`);
      stages.at(-1)!.instructions.push(instruction);
    }
  }
  return stages;
}

/** A COPY's parts: `--from` (a stage's name), its sources, and its destination. */
export function parseCopy(args: string): { from?: string; sources: string[]; dest: string } {
  if (args.startsWith('[')) throw new Error(`COPY ${args}: the JSON form is not read here`);
  const words = args.split(' ');
  const flags = words.filter((w) => w.startsWith('--'));
  const unknown = flags.filter((f) => !f.startsWith('--from='));
  if (unknown.length) throw new Error(`COPY ${args}: ${unknown.join(' ')} is not read here`);
  const paths = words.filter((w) => !w.startsWith('--'));
  return { from: flags[0]?.slice('--from='.length), sources: paths.slice(0, -1), dest: paths.at(-1)! };
}

/** The patterns of a .dockerignore file. */
export function readDockerignore(file: string): string[] {
  const patterns = readFileSync(file, 'utf8')
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line && !line.startsWith('#'));
  const exceptions = patterns.filter((p) => p.startsWith('!'));
  if (exceptions.length) throw new Error(`.dockerignore: exceptions (${exceptions.join(' ')}) are not read here`);
  return patterns;
}

/**
 * Whether the builder never sees `rel` (a path relative to the context): a pattern matches it or
 * one of its parent directories, `*` and `?` within one path segment, `**` across them, as
 * Docker matches them.
 */
export function dockerIgnored(patterns: string[], rel: string): boolean {
  const segments = rel.split('/');
  const prefixes = segments.map((_, i) => segments.slice(0, i + 1).join('/'));
  return patterns.some((pattern) => {
    const re = new RegExp(
      `^${pattern
        .replace(/^\/+|\/+$/g, '')
        .replace(/[.+^${}()|[\]\\]/g, '\\$&')
        .replace(/\*\*/g, '\0')
        .replace(/\*/g, '[^/]*')
        .replace(/\?/g, '[^/]')
        .replace(/\0/g, '.*')}$`,
    );
    return prefixes.some((p) => re.test(p));
  });
}
