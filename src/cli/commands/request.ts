/** Commands on a request file that need no server: validate, request, schema, init. */
import { existsSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { Option } from 'commander';
import type { AgentSpec, LeaderRequest } from '../../contracts/request';
import { EXIT, UsageError } from '../exit';
import { requestSummary } from '../format/request';
import { load } from '../lazy';
import { type AddCommand, example } from '../options';
import { say, warn } from '../output';

/** The request in `file`, validated; each deprecated field it names is a warning, not an error. */
export function readRequest(file: string, fields?: Record<string, unknown>): LeaderRequest {
  const { request, deprecated } = load.requestFile().loadRequest(file, fields);
  for (const line of deprecated) warn(line);
  return request;
}

async function validateCommand(file: string): Promise<number> {
  const req = readRequest(file);
  say(
    `Request is valid: ${requestSummary(req)} on ${req.repo.url} (${req.repo.baseRef} → ${req.repo.targetRef ?? req.repo.baseRef}).`,
  );
  return EXIT.ok;
}

async function requestCommand(file: string, o: { json?: boolean }): Promise<number> {
  const req = readRequest(file);
  process.stdout.write(o.json ? `${JSON.stringify(req)}\n` : load.yaml().stringify(req));
  return EXIT.ok;
}

async function schemaCommand(): Promise<number> {
  process.stdout.write(load.schema().requestJsonSchemaText());
  return EXIT.ok;
}

interface InitOptions {
  file: string;
  agent: AgentSpec['kind'];
  command?: string;
  force?: boolean;
}

async function initCommand(o: InitOptions): Promise<number> {
  const { repoFacts, starterRequest } = load.init();
  const facts = repoFacts(process.cwd());
  if (!facts)
    throw new UsageError(
      'not inside a git repository: run `flotilla init` in the repository the agents should work on',
    );
  if (o.agent === 'shell' && !o.command) throw new UsageError('--command is required with --agent shell');
  if (o.agent !== 'shell' && o.command) throw new UsageError('--command goes with --agent shell only');
  const file = path.resolve(o.file);
  if (existsSync(file) && !o.force) throw new UsageError(`${file} exists; pass --force to overwrite it`);
  const agent: AgentSpec = o.agent === 'shell' ? { kind: 'shell', command: o.command! } : { kind: o.agent };
  writeFileSync(file, starterRequest(facts, agent));
  say(
    `Wrote ${file}: repository ${facts.url}, base ${facts.baseRef}, tests ${facts.testCmd ? `\`${facts.testCmd}\`` : 'not found (set testCmd)'}.`,
  );
  say(`Edit the TODOs, then: flotilla validate ${o.file} && flotilla start ${o.file}`);
  return EXIT.ok;
}

export const validate: AddCommand = (program, run) =>
  program
    .command('validate')
    .description('check a request without starting anything')
    .argument('<request>', 'the request file')
    .addHelpText('after', example('flotilla validate flotilla.yaml'))
    .action((file) => run(validateCommand(file)));

export const request: AddCommand = (program, run) =>
  program
    .command('request')
    .description('print a request validated, with its defaults filled in (YAML, or JSON for the Temporal CLI)')
    .argument('<request>', 'the request file')
    .option('--json', 'print JSON, as `temporal workflow start --input-file` takes it')
    .addHelpText(
      'after',
      example(
        'flotilla request flotilla.yaml --json > request.json',
        'temporal workflow start --type leaderWorkflow --task-queue flotilla --input-file request.json',
      ),
    )
    .action((file, o) => run(requestCommand(file, o)));

export const schema: AddCommand = (program, run) =>
  program
    .command('schema')
    .description("print the request's JSON Schema (for editors; the package ships it as schema/request.schema.json)")
    .addHelpText('after', example('flotilla schema > request.schema.json'))
    .action(() => run(schemaCommand()));

export const init: AddCommand = (program, run) =>
  program
    .command('init')
    .description('write a starter request for the git repository in this directory')
    .option('--file <file>', 'where to write it', 'flotilla.yaml')
    .addOption(
      new Option('--agent <kind>', 'the agent of every sub-task')
        .choices(['claude-code', 'codex', 'shell'])
        .default('claude-code'),
    )
    .option('--command <command>', 'with --agent shell: the command the agent runs')
    .option('--force', 'overwrite an existing file')
    .addHelpText('after', example('flotilla init', 'flotilla init --agent shell --command ./scripts/my-agent.sh'))
    .action((o) => run(initCommand(o)));
