/**
 * `flotilla init`: a starter flotilla.yaml for the repository it runs in, with what can be
 * found out (remote, default branch, test command) filled in and the rest marked TODO.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import YAML from 'yaml';
import { SCHEMA_FILE } from './schema';
import type { AgentSpec } from '../contracts/request';

export interface RepoFacts {
  root: string;
  /** The origin remote, or the repository's own path when it has none. */
  url: string;
  baseRef: string;
  testCmd?: string;
  setupCmd?: string;
}

function git(dir: string, ...args: string[]): string | undefined {
  const r = spawnSync('git', ['-C', dir, ...args], { encoding: 'utf8' });
  return r.status === 0 ? r.stdout.trim() || undefined : undefined;
}

/** The branch work starts from: the remote's default branch, else the one checked out. */
function defaultBranch(root: string): string {
  const remoteHead = git(root, 'symbolic-ref', '--short', 'refs/remotes/origin/HEAD');
  if (remoteHead) return remoteHead.replace(/^origin\//, '');
  return git(root, 'symbolic-ref', '--short', 'HEAD') ?? 'main';
}

function read(file: string): string | undefined {
  return existsSync(file) ? readFileSync(file, 'utf8') : undefined;
}

/** npm's placeholder for a package without tests. */
const NPM_NO_TEST = /no test specified/;

/** The test command of the usual project layouts, and the setup it needs. */
export function detectCommands(root: string): { testCmd?: string; setupCmd?: string } {
  const pkg = read(path.join(root, 'package.json'));
  if (pkg) {
    let test: unknown;
    try {
      test = (JSON.parse(pkg) as { scripts?: { test?: unknown } }).scripts?.test;
    } catch {
      test = undefined;
    }
    if (typeof test === 'string' && !NPM_NO_TEST.test(test)) {
      return { testCmd: 'npm test', setupCmd: existsSync(path.join(root, 'package-lock.json')) ? 'npm ci' : undefined };
    }
  }
  if (existsSync(path.join(root, 'pyproject.toml'))) return { testCmd: 'python3 -m pytest' };
  const makefile = read(path.join(root, 'Makefile')) ?? read(path.join(root, 'makefile'));
  if (makefile && /^test\s*:/m.test(makefile)) return { testCmd: 'make test' };
  if (existsSync(path.join(root, 'Cargo.toml'))) return { testCmd: 'cargo test' };
  if (existsSync(path.join(root, 'go.mod'))) return { testCmd: 'go test ./...' };
  return {};
}

/** What init can learn about the repository containing `dir`; undefined outside one. */
export function repoFacts(dir: string): RepoFacts | undefined {
  const root = git(dir, 'rev-parse', '--show-toplevel');
  if (!root) return undefined;
  return {
    root,
    url: git(root, 'remote', 'get-url', 'origin') ?? root,
    baseRef: defaultBranch(root),
    ...detectCommands(root),
  };
}

/** The starter request, as YAML with a schema line for editors and comments where to edit. */
export function starterRequest(facts: RepoFacts, agent: AgentSpec): string {
  const needsNetwork = agent.kind !== 'shell' || facts.setupCmd !== undefined;
  const request = {
    objective: 'TODO: what the team of agents should achieve',
    repo: { url: facts.url, baseRef: facts.baseRef },
    agent,
    ...(facts.setupCmd ? { setupCmd: facts.setupCmd } : {}),
    testCmd: facts.testCmd ?? "echo 'flotilla.yaml: set testCmd to the command that runs your tests' >&2; exit 1",
    subTasks: [{ id: 'first', prompt: 'TODO: what this agent should do', ownedPaths: ['.'] }],
    limits: { maxParallel: 2, runBudgetUsd: 5 },
    sandbox: { provider: 'local', network: needsNetwork },
  };
  const doc = new YAML.Document(request);
  doc.commentBefore = [
    ` yaml-language-server: $schema=${SCHEMA_FILE}`,
    ' A Flotilla request: check it with `flotilla validate flotilla.yaml`, run it with `flotilla start flotilla.yaml`.',
    ' Split the work into sub-tasks whose ownedPaths do not overlap; leave subTasks out to let the agent plan.',
  ].join('\n');
  return doc.toString();
}
