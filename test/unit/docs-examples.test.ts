/**
 * The docs' examples are what a reader copies, so each must be a request the parser accepts.
 * Every YAML or JSON block in README.md and docs/*.md is one of two things:
 *
 * - a request (it has an `objective`), which must validate as it stands;
 * - a fragment of one (every top-level key is a request field, as in a `gates:` snippet), which
 *   must validate once merged into a minimal request.
 *
 * Anything else in a yaml or json fence fails: show other data in another fence (text, sh, toml).
 * A failure names the file and the line where the block starts.
 *
 * docs/architecture.md must also map every folder of the code, so that no folder is left off it.
 */
import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import YAML from 'yaml';
import { describe, expect, it } from 'vitest';
import { loadRequestFile } from '../../src/client/request-file';
import { LeaderRequest, RequestError, parseLeaderRequest } from '../../src/contracts/request';

const ROOT = path.join(__dirname, '../..');

interface Block {
  /** The markdown file, relative to the repository root. */
  file: string;
  /** The line (1-based) of the block's first line of content. */
  line: number;
  lang: string;
  text: string;
}

const OPENING = /^(\s*)(`{3,}|~{3,})\s*([^\s`]*)/;

/** The fenced code blocks of a markdown text; an indented fence (in a list item) is dedented. */
function codeBlocks(file: string, markdown: string): Block[] {
  const blocks: Block[] = [];
  let open: { indent: number; fence: string; lang: string; line: number; body: string[] } | undefined;
  markdown.split('\n').forEach((line, i) => {
    if (!open) {
      const m = OPENING.exec(line);
      if (m) open = { indent: m[1].length, fence: m[2], lang: m[3].toLowerCase(), line: i + 2, body: [] };
      return;
    }
    const trimmed = line.trim();
    if (/^(`+|~+)$/.test(trimmed) && trimmed.startsWith(open.fence)) {
      blocks.push({ file, line: open.line, lang: open.lang, text: open.body.join('\n') });
      open = undefined;
      return;
    }
    open.body.push(line.slice(Math.min(open.indent, line.length - line.trimStart().length)));
  });
  return blocks;
}

/** What a fragment is merged into: the least a request needs. */
const MINIMAL = {
  objective: 'a fragment of the docs, checked inside a minimal request',
  repo: { url: 'https://github.com/acme/shop.git' },
  agent: { kind: 'shell', command: 'true' },
  testCmd: 'true',
  subTasks: [{ id: 'one', prompt: 'do it', ownedPaths: ['one'] }],
};

const REQUEST_FIELDS = new Set(Object.keys(LeaderRequest.shape));

function parse(block: Block): unknown {
  return block.lang === 'json' ? JSON.parse(block.text) : YAML.parse(block.text);
}

/** Why a request or fragment block is a bad example, or undefined when it validates. */
function problemOf(block: Block): string | undefined {
  const where = `${block.file}:${block.line}`;
  let value: unknown;
  try {
    value = parse(block);
  } catch (err) {
    return `${where}: not valid ${block.lang.toUpperCase()}: ${(err as Error).message}`;
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value))
    return `${where}: neither a request nor a fragment of one (not a mapping); use another fence for other data`;
  const unknown = Object.keys(value).filter((k) => !REQUEST_FIELDS.has(k));
  const isRequest = 'objective' in value;
  if (!isRequest && unknown.length)
    return `${where}: neither a request (no objective) nor a fragment of one (not request fields: ${unknown.join(', ')})`;
  try {
    parseLeaderRequest(isRequest ? value : { ...MINIMAL, ...value });
    return undefined;
  } catch (err) {
    if (!(err instanceof RequestError)) throw err;
    return `${where}: ${isRequest ? 'the request' : 'the fragment, in a minimal request,'} is refused: ${err.problems.join('; ')}`;
  }
}

function markdownFiles(): string[] {
  const docs = readdirSync(path.join(ROOT, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`);
  return ['README.md', ...docs.sort()];
}

const examples = markdownFiles().flatMap((file) =>
  codeBlocks(file, readFileSync(path.join(ROOT, file), 'utf8')).filter((b) => ['yaml', 'yml', 'json'].includes(b.lang)),
);

describe('the examples in README.md and docs/', () => {
  it('include whole requests in the README and in docs/request.md', () => {
    const requests = (file: string) =>
      examples.filter((b) => b.file === file && (parse(b) as { objective?: unknown }).objective);
    expect(requests('README.md').length).toBeGreaterThan(0);
    expect(requests('docs/request.md').length).toBeGreaterThan(0);
  });

  it.each(examples.map((b) => [`${b.file}:${b.line}`, b] as const))('%s validates', (_where, block) => {
    expect(problemOf(block)).toBeUndefined();
  });

  it('examples/request.yaml validates', () => {
    expect(loadRequestFile(path.join(ROOT, 'examples/request.yaml')).subTasks?.length).toBeGreaterThan(0);
  });
});

describe('the example checker', () => {
  const doc = [
    '# Title',
    '```yaml',
    'gates: { plan: { mode: sometimes } }',
    '```',
    '  ```yml',
    '  objective: indented in a list item',
    '  repo: { url: https://github.com/a/b.git }',
    '  testCmd: "true"',
    '  agent: { kind: shell, command: "true" }',
    '  ```',
    '```json',
    '{ "phase": "running" }',
    '```',
    '```sh',
    'echo not checked',
    '```',
  ].join('\n');
  const blocks = codeBlocks('x.md', doc);

  it('finds every fenced block, with the line it starts on', () => {
    expect(blocks.map((b) => [b.line, b.lang])).toEqual([
      [3, 'yaml'],
      [6, 'yml'],
      [12, 'json'],
      [15, 'sh'],
    ]);
  });

  it('names the file, the line and the field of a bad fragment', () => {
    expect(problemOf(blocks[0])).toMatch(
      /^x\.md:3: the fragment, in a minimal request, is refused: gates\.plan\.mode: /,
    );
  });

  it('accepts a whole request, indented in a list item', () => {
    expect(problemOf(blocks[1])).toBeUndefined();
  });

  it('refuses a block that is neither a request nor a fragment of one', () => {
    expect(problemOf(blocks[2])).toBe(
      'x.md:12: neither a request (no objective) nor a fragment of one (not request fields: phase)',
    );
  });
});

/** Every folder under the mapped roots, as `src/git/`; the release directories of test/history are data. */
function folders(dir: string): string[] {
  const here = readdirSync(path.join(ROOT, dir), { withFileTypes: true }).filter((e) => e.isDirectory());
  if (dir === 'test/history') return [`${dir}/`];
  return [`${dir}/`, ...here.flatMap((e) => folders(`${dir}/${e.name}`))];
}

describe('docs/architecture.md', () => {
  const map = readFileSync(path.join(ROOT, 'docs/architecture.md'), 'utf8');
  const all = ['src', 'test', 'bench', 'scripts', 'examples'].flatMap(folders);

  it.each(all)('maps %s', (folder) => {
    expect(map).toContain(`\`${folder}\``);
  });
});
