/** Request validation: every refusal names the field and the reason; the JSON Schema agrees. */
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import Ajv from 'ajv';
import { describe, expect, it } from 'vitest';
import YAML from 'yaml';
import { loadRequestFile } from '../../src/client/index';
import { RequestError, parseLeaderRequest } from '../../src/contracts/request';
import { repoUrlProblem } from '../../src/contracts/names';
import { tempDir } from '../support/temp';

const ROOT = path.join(__dirname, '../..');

const valid = () => ({
  objective: 'o',
  repo: { url: 'https://example.com/a/b.git', baseRef: 'main' },
  testCmd: 'true',
  agent: { kind: 'shell', command: 'true' },
  subTasks: [
    { id: 'a', prompt: 'p', ownedPaths: ['src/a'] },
    { id: 'b', prompt: 'p', ownedPaths: ['src/b', 'docs/b.md'] },
  ],
});

function problems(mutate: (r: any) => void): string[] {
  const r = valid();
  mutate(r);
  try {
    parseLeaderRequest(r);
  } catch (err) {
    if (err instanceof RequestError) return err.problems;
    throw err;
  }
  return [];
}

describe('parseLeaderRequest', () => {
  it('accepts a valid request and fills defaults', () => {
    const req = parseLeaderRequest(valid());
    expect(req.limits).toEqual({
      maxParallel: 4,
      agentTimeoutMinutes: 30,
      commandTimeoutMinutes: 10,
      suspendTimeoutMinutes: 1440,
      heartbeatTimeoutSeconds: 30,
      hostTimeoutSeconds: 300,
      checkpointIntervalSeconds: 300,
    });
    expect(req.gates.plan).toEqual({ mode: 'auto', timeoutMinutes: 10080, onTimeout: 'fail' });
    expect(req.sandbox).toEqual({ provider: 'local', network: false });
    expect(req.sharedPaths).toEqual([]);
  });

  it.each<[string, (r: any) => void, string]>([
    ['missing objective', (r) => delete r.objective, 'objective: is required'],
    ['a negative sandbox limit', (r) => (r.sandbox = { limits: { memoryMiB: -1 } }), 'sandbox.limits.memoryMiB: '],
    ['a fractional sandbox limit', (r) => (r.sandbox = { limits: { processes: 1.5 } }), 'sandbox.limits.processes: '],
    [
      'an unknown sandbox limit',
      (r) => (r.sandbox = { limits: { diskMiB: 5 } }),
      'sandbox.limits: unknown field(s) "diskMiB"',
    ],
    ['empty sub-task list', (r) => (r.subTasks = []), 'subTasks: must list at least one sub-task'],
    ['duplicate ids', (r) => (r.subTasks[1].id = 'a'), 'subTasks[1].id: duplicate id "a" (also subTasks[0])'],
    ['a bad id', (r) => (r.subTasks[0].id = 'a/b'), 'subTasks[0].id: must be 1-63 letters'],
    [
      'nested owned paths',
      (r) => (r.subTasks[1].ownedPaths = ['src/a/x.ts']),
      'subTasks[1].ownedPaths[0]: "src/a/x.ts" overlaps "src/a"',
    ],
    [
      'the whole repo next to another owner',
      (r) => (r.subTasks[1].ownedPaths = ['.']),
      'subTasks[1].ownedPaths[0]: "." overlaps "src/a"',
    ],
    [
      'an absolute path',
      (r) => (r.subTasks[0].ownedPaths = ['/etc']),
      'subTasks[0].ownedPaths[0]: path must be relative',
    ],
    [
      'a .. path',
      (r) => (r.subTasks[0].ownedPaths = ['src/../../x']),
      'subTasks[0].ownedPaths[0]: path must not contain ".."',
    ],
    [
      'a .git path',
      (r) => (r.subTasks[0].ownedPaths = ['.git/hooks']),
      'subTasks[0].ownedPaths[0]: path must not reach into .git/',
    ],
    [
      'a shared path that is owned',
      (r) => (r.sharedPaths = ['src']),
      'sharedPaths[0]: "src" overlaps "src/a" owned by sub-task "a"',
    ],
    [
      'a URL as an allowed host',
      (r) => (r.sandbox = { network: true, allowHosts: ['https://x.org/'] }),
      'sandbox.allowHosts[0]: must be a host name, host:port or *.domain',
    ],
    [
      'a loopback name as an allowed host',
      (r) => (r.sandbox = { network: true, allowHosts: ['x.org', 'localhost:8080'] }),
      'sandbox.allowHosts[1]: "localhost:8080" is a loopback or private name; sandboxes never reach those',
    ],
    [
      'a private domain as an allowed host',
      (r) => (r.sandbox = { network: true, allowHosts: ['*.corp.internal'] }),
      'sandbox.allowHosts[0]: "*.corp.internal" is a loopback or private name; sandboxes never reach those',
    ],
    [
      'a loopback address as an allowed host',
      (r) => (r.sandbox = { network: true, allowHosts: ['127.0.0.1:5432'] }),
      'sandbox.allowHosts[0]: "127.0.0.1:5432" is a loopback, private or link-local address; sandboxes never reach those',
    ],
    [
      'a private address as an allowed host',
      (r) => (r.sandbox = { network: true, allowHosts: ['172.31.255.1'] }),
      'sandbox.allowHosts[0]: "172.31.255.1" is a loopback, private or link-local address; sandboxes never reach those',
    ],
    [
      'a link-local address as an allowed host',
      (r) => (r.sandbox = { network: true, allowHosts: ['169.254.169.254'] }),
      'sandbox.allowHosts[0]: "169.254.169.254" is a loopback, private or link-local address; sandboxes never reach those',
    ],
    [
      'a numeric name that resolves to loopback',
      (r) => (r.sandbox = { network: true, allowHosts: ['2130706433'] }),
      'sandbox.allowHosts[0]: "2130706433" is not a dotted IPv4 address (write one as a.b.c.d)',
    ],
    [
      'allowed hosts without network',
      (r) => (r.sandbox = { allowHosts: ['x.org'] }),
      'sandbox.allowHosts: applies only with network: true',
    ],
    [
      'an ext:: remote',
      (r) => (r.repo.url = 'ext::ssh -oProxyCommand=x'),
      'repo.url: repository uses the transport helper "ext::"',
    ],
    ['an fd:: remote', (r) => (r.repo.url = 'fd::3'), 'repo.url: repository uses the transport helper "fd::"'],
    ['plain http', (r) => (r.repo.url = 'http://example.com/x.git'), 'repo.url: repository uses plain http'],
    ['a relative path', (r) => (r.repo.url = 'repo'), 'repo.url: repository must be an https:// or ssh:// URL'],
    ['an option-like URL', (r) => (r.repo.url = '--upload-pack=evil'), 'repo.url: repository must not start with "-"'],
    ['a branch with ..', (r) => (r.repo.baseRef = 'a..b'), 'repo.baseRef: branch name contains ".."'],
    [
      'a branch ending in .lock',
      (r) => (r.repo.targetRef = 'x.lock'),
      'repo.targetRef: branch name has a component ending with ".lock"',
    ],
    ['a full ref', (r) => (r.repo.targetRef = 'refs/heads/x'), 'repo.targetRef: branch name must be a branch name'],
    [
      'no agent at all',
      (r) => delete r.agent,
      'subTasks[0].agent: is required when the request has no default "agent"',
    ],
    ['an unknown agent kind', (r) => (r.agent = { kind: 'gpt', command: 'x' }), 'agent.kind'],
    ['an unknown field', (r) => (r.tests = 'npm test'), '(request): unknown field(s) "tests"'],
    ['a zero maxParallel', (r) => (r.limits = { maxParallel: 0 }), 'limits.maxParallel: Too small'],
  ])('refuses %s', (_what, mutate, expected) => {
    const found = problems(mutate);
    expect(found.join('\n')).toContain(expected);
  });

  it('accepts public names and addresses as allowed hosts, next to the ranges it refuses', () => {
    const allowHosts = [
      'x.org',
      '*.example.com',
      'registry.local-mirror.io:8443',
      '172.32.0.1',
      '8.8.8.8:53',
      '100.128.0.1',
    ];
    expect(problems((r) => (r.sandbox = { network: true, allowHosts }))).toEqual([]);
  });

  it('lists every field problem at once', () => {
    const found = problems((r) => {
      delete r.testCmd;
      r.subTasks[1].id = 'b c';
      r.repo.url = 'ext::x';
    });
    expect(found).toHaveLength(3);
  });
});

describe('repository locations', () => {
  it.each([
    'https://github.com/a/b.git',
    'ssh://git@host:22/a/b.git',
    'git@github.com:a/b.git',
    '/srv/git/b.git',
    'file:///srv/git/b.git',
  ])('accepts %s', (url) => expect(repoUrlProblem(url)).toBeUndefined());
});

describe('request files', () => {
  it('names the file and the parse error of broken YAML', () => {
    const file = path.join(tempDir('spec'), 'broken.yaml');
    // A flow map that never closes.
    writeFileSync(file, 'objective: greet\nsubTasks: [\n  {id: one, prompt: hi\n');
    expect(() => loadRequestFile(file)).toThrow(`${file} is not valid YAML: `);
    expect(() => loadRequestFile(file)).toThrow(/must be sufficiently indented and end with a \} at line 4, column 1/);
  });

  it('names the file and the parse error of broken JSON', () => {
    expect(() => loadRequestFile(path.join(__dirname, 'request.test.ts'))).toThrow(
      /request\.test\.ts is not valid JSON: /,
    );
  });
});

describe('fixers and hidden tests', () => {
  it("refuses inline oracle files, saying what to use instead, and checks the fixers' bounds", () => {
    expect(
      problems((r) => {
        r.resolver = { agent: { kind: 'shell', command: 'true' }, maxRounds: 0 };
        r.repair = { maxRounds: 2 };
        r.oracle = { files: { 'h/t.sh': 'exit 0' } };
      }),
    ).toEqual([
      'resolver.maxRounds: Too small: expected number to be >=1',
      'repair.agent: is required',
      'oracle.files: is no longer accepted (oracle contents would be stored in workflow history); ' +
        'put the hidden tests in a repository and name it with oracle: { repo: <url>, ref: <branch> }',
    ]);
  });
});

describe('the JSON Schema', () => {
  it('the committed JSON Schema validates the example request and rejects a misspelled field', () => {
    const schema = JSON.parse(readFileSync(path.join(ROOT, 'schema/request.schema.json'), 'utf8'));
    const validate = new Ajv({ strict: false }).compile(schema);
    const good = YAML.parse(readFileSync(path.join(ROOT, 'examples/request.yaml'), 'utf8'));
    expect(validate(good), JSON.stringify(validate.errors)).toBe(true);
    expect(validate({ ...good, testCommand: 'npm test' })).toBe(false);
    expect(validate.errors).toContainEqual(
      expect.objectContaining({ keyword: 'additionalProperties', params: { additionalProperty: 'testCommand' } }),
    );
    expect(validate({ ...good, repo: { ...good.repo, baseref: 'main' } })).toBe(false);
    expect(validate.errors).toContainEqual(
      expect.objectContaining({ instancePath: '/repo', params: { additionalProperty: 'baseref' } }),
    );
  });
});
