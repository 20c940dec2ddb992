/** Request validation: every refusal names the field and the reason; the JSON Schema agrees. */
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import Ajv from 'ajv';
import { describe, expect, it } from 'vitest';
import YAML from 'yaml';
import { loadRequestFile } from '../../src/client/index';
import { MAX_REQUEST_FILE_BYTES } from '../../src/client/request-file';
import { parseLeaderRequest } from '../../src/contracts/request';
import { isSubTaskWorkflowId, repoUrlProblem } from '../../src/contracts/names';
import { tempDir } from '../support/temp';
import { requestProblems } from '../support/requests';

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
  return requestProblems(r);
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
      retries: 1,
      testEachMerge: false,
      replans: 2,
    });
    expect(req.onFailure).toBe('fail');
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
    ['no attempts', (r) => (r.subTasks[0].attempts = 0), 'subTasks[0].attempts: must be at least 1'],
    ['too many attempts', (r) => (r.subTasks[0].attempts = 9), 'subTasks[0].attempts: must be at most 8'],
    ['fractional attempts', (r) => (r.subTasks[0].attempts = 1.5), 'subTasks[0].attempts: expected int'],
    [
      'more agents than attempts',
      (r) => Object.assign(r.subTasks[1], { attempts: 2, agents: [r.agent, r.agent, r.agent] }),
      'subTasks[1].agents: lists 3 agents but attempts is 2: at most one agent per attempt',
    ],
    [
      'agents without attempts',
      (r) => (r.subTasks[1].agents = [r.agent, r.agent]),
      'subTasks[1].agents: lists 2 agents but attempts is 1: at most one agent per attempt',
    ],
    [
      'an unknown select',
      (r) => Object.assign(r.subTasks[0], { attempts: 2, select: 'fastest' }),
      'subTasks[0].select: ',
    ],
    ['duplicate ids', (r) => (r.subTasks[1].id = 'a'), 'subTasks[1].id: duplicate id "a" (also subTasks[0])'],
    ['a bad id', (r) => (r.subTasks[0].id = 'a/b'), 'subTasks[0].id: must be 1-63 letters'],
    [
      'a dependency on an unknown sub-task',
      (r) => (r.subTasks[1].dependsOn = ['zz']),
      'subTasks[1].dependsOn[0]: unknown sub-task "zz" (known: a, b)',
    ],
    [
      'a sub-task depending on itself',
      (r) => (r.subTasks[0].dependsOn = ['a']),
      'subTasks[0].dependsOn[0]: "a" is this sub-task itself; it cannot depend on itself',
    ],
    [
      'a dependency listed twice',
      (r) => (r.subTasks[1].dependsOn = ['a', 'a']),
      'subTasks[1].dependsOn[1]: "a" is listed twice',
    ],
    [
      'a dependency cycle',
      (r) => {
        r.subTasks.push({ id: 'c', prompt: 'p', ownedPaths: ['c'], dependsOn: ['b'] });
        r.subTasks[0].dependsOn = ['c'];
        r.subTasks[1].dependsOn = ['a'];
      },
      'subTasks[0].dependsOn: the dependencies form a cycle: a → c → b → a',
    ],
    [
      'replanning without a planner',
      (r) => {
        delete r.agent;
        r.subTasks.forEach((t: any) => (t.agent = { kind: 'shell', command: 'true' }));
        r.onFailure = 'replan';
      },
      'onFailure: is "replan", which needs an agent to plan: give a "planner" or a default "agent"',
    ],
    ['an unknown failure policy', (r) => (r.onFailure = 'retry'), 'onFailure: Invalid option'],
    ['too many retries', (r) => (r.limits = { retries: 6 }), 'limits.retries: Too big'],
    ['a run to continue without its id', (r) => (r.continues = {}), 'continues.runId: is required'],
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
    [
      'a gate that waits for ever',
      (r) => (r.gates = { push: { mode: 'manual', timeoutMinutes: 1.5e11 } }),
      'gates.push.timeoutMinutes: must be at most 525600 minutes (a year)',
    ],
    [
      'a gate that waits infinitely',
      (r) => (r.gates = { plan: { mode: 'manual', timeoutMinutes: Infinity } }),
      'gates.plan.timeoutMinutes: expected number, got Infinity',
    ],
    [
      'a suspension that waits for ever',
      (r) => (r.limits = { suspendTimeoutMinutes: 1e12 }),
      'limits.suspendTimeoutMinutes: must be at most 525600 minutes (a year)',
    ],
    [
      'a suspension of NaN minutes',
      (r) => (r.limits = { suspendTimeoutMinutes: NaN }),
      'limits.suspendTimeoutMinutes: expected number, got NaN',
    ],
    [
      'an agent timeout over a day',
      (r) => (r.limits = { agentTimeoutMinutes: 1441 }),
      'limits.agentTimeoutMinutes: must be at most 1440 minutes (a day)',
    ],
    [
      'an infinite command timeout',
      (r) => (r.limits = { commandTimeoutMinutes: -Infinity }),
      'limits.commandTimeoutMinutes: expected number, got -Infinity',
    ],
    ['a huge host timeout', (r) => (r.limits = { hostTimeoutSeconds: 1e15 }), 'limits.hostTimeoutSeconds: Too big'],
    [
      'a huge checkpoint interval',
      (r) => (r.limits = { checkpointIntervalSeconds: 1e15 }),
      'limits.checkpointIntervalSeconds: Too big',
    ],
    [
      'a huge heartbeat timeout',
      (r) => (r.limits = { heartbeatTimeoutSeconds: 1e9 }),
      'limits.heartbeatTimeoutSeconds: Too big',
    ],
  ])('refuses %s', (_what, mutate, expected) => {
    const found = problems(mutate);
    expect(found.join('\n')).toContain(expected);
  });

  it('accepts the longest waits, a year at a gate and a year suspended', () => {
    const year = 365 * 24 * 60;
    const req = parseLeaderRequest({
      ...valid(),
      limits: { suspendTimeoutMinutes: year },
      gates: { plan: { mode: 'manual', timeoutMinutes: year }, push: { mode: 'manual', timeoutMinutes: year } },
    });
    expect([req.limits.suspendTimeoutMinutes, req.gates.plan.timeoutMinutes, req.gates.push.timeoutMinutes]).toEqual([
      year,
      year,
      year,
    ]);
  });

  it('accepts owned paths that overlap: such sub-tasks are scheduled one after the other', () => {
    expect(problems((r) => (r.subTasks[1].ownedPaths = ['src/a/x.ts']))).toEqual([]);
    expect(problems((r) => (r.subTasks[1].ownedPaths = ['.']))).toEqual([]);
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

describe('the size of a plan (issue 19)', () => {
  const tasks = (n: number) =>
    Array.from({ length: n }, (_, i) => ({ id: `t${i}`, prompt: 'p', ownedPaths: [`t${i}`] }));

  it('takes 1,000 sub-tasks and 256 at once, and refuses one more of each, naming the field', () => {
    expect(problems((r) => Object.assign(r, { subTasks: tasks(1000), limits: { maxParallel: 256 } }))).toEqual([]);
    expect(problems((r) => (r.subTasks = tasks(1001)))).toEqual(['subTasks: at most 1000 sub-tasks']);
    expect(problems((r) => (r.limits = { maxParallel: 257 }))).toEqual([
      expect.stringMatching(/^limits\.maxParallel: .*256/),
    ]);
  });
});

describe('repository locations', () => {
  it.each([
    'https://github.com/a/b.git',
    'ssh://git@host:22/a/b.git',
    'git@github.com:a/b.git',
    '/srv/git/b.git',
    'file:///srv/git/b.git',
    'ssh://git@host/-odd-path.git',
  ])('accepts %s', (url) => expect(repoUrlProblem(url)).toBeUndefined());

  it.each(['ssh://-oProxyCommand=touch%20x/y.git', 'ssh://git@-oProxyCommand=x/y.git', 'git@-oProxyCommand=x:y.git'])(
    'refuses %s, whose user or host ssh would read as an option',
    (url) =>
      expect(repoUrlProblem(url)).toBe('names a user or host starting with "-", which ssh would read as an option'),
  );

  it.each(['HEAD', 'FETCH_HEAD', 'ORIG_HEAD', 'MERGE_HEAD'])(
    'refuses %s as a branch: git keeps it for a ref of its own',
    (ref) => {
      expect(problems((r) => (r.repo.targetRef = ref))).toEqual([
        `repo.targetRef: branch name is "${ref}", a name git keeps for a ref of its own, not a branch`,
      ]);
      expect(problems((r) => (r.repo.baseRef = ref))[0]).toMatch(/^repo\.baseRef: branch name is /);
    },
  );
});

describe('request files', () => {
  it('names the file and the parse error of broken YAML', () => {
    const file = path.join(tempDir('spec'), 'broken.yaml');
    // A flow map that never closes.
    writeFileSync(file, 'objective: greet\nsubTasks: [\n  {id: one, prompt: hi\n');
    expect(() => loadRequestFile(file)).toThrow(`${file} is not valid YAML: `);
    expect(() => loadRequestFile(file)).toThrow(/must be sufficiently indented and end with a \} at line 4, column 1/);
  });

  const fileWith = (name: string, text: string) => {
    const file = path.join(tempDir('spec'), name);
    writeFileSync(file, text);
    return file;
  };

  it('refuses a key given twice, in JSON and in YAML, rather than keep the last', () => {
    const json = JSON.stringify({ ...valid(), testCmd: 'true' }).replace(
      '"testCmd":"true"',
      '"testCmd":"true","testCmd":"false"',
    );
    expect(() => loadRequestFile(fileWith('twice.json', json))).toThrow(
      /twice\.json is not valid JSON: the key "testCmd" appears twice in one object \(line 1\)/,
    );
    const nested = JSON.stringify(valid(), null, 2).replace(
      '"baseRef": "main"',
      '"baseRef": "main",\n    "base\\u0052ef": "dev"',
    );
    expect(() => loadRequestFile(fileWith('nested.json', nested))).toThrow(
      /the key "baseRef" appears twice in one object \(line 6\)/,
    );
    const yaml = `${YAML.stringify(valid())}testCmd: "false"\n`;
    expect(() => loadRequestFile(fileWith('twice.yaml', yaml))).toThrow(
      /twice\.yaml is not valid YAML: Map keys must be unique/,
    );
  });

  it('keeps the same key in different objects, and a key-like string that is a value', () => {
    const req = { ...valid(), objective: 'id: "a"' };
    expect(loadRequestFile(fileWith('fine.json', JSON.stringify(req))).subTasks!.map((t) => t.id)).toEqual(['a', 'b']);
  });

  it('refuses a YAML tag nothing resolves, such as !!js/function, rather than read it as a string', () => {
    const yaml = YAML.stringify(valid()).replace('testCmd: "true"', 'testCmd: !!js/function "function () {}"');
    expect(yaml).toContain('!!js/function');
    expect(() => loadRequestFile(fileWith('tag.yaml', yaml))).toThrow(
      /tag\.yaml is not valid YAML: Unresolved tag: tag:yaml\.org,2002:js\/function at line/,
    );
  });

  it("refuses an empty repository URL rather than make it the request file's directory", () => {
    const file = fileWith('empty.json', JSON.stringify({ ...valid(), repo: { url: '' } }));
    expect(() => loadRequestFile(file)).toThrow('repo.url: repository is empty');
  });

  it('refuses a file over the size limit without reading past it, and a directory', () => {
    const big = fileWith('big.json', ' '.repeat(MAX_REQUEST_FILE_BYTES + 1));
    expect(() => loadRequestFile(big)).toThrow(
      `cannot read request file ${big}: it is larger than ${MAX_REQUEST_FILE_BYTES} bytes`,
    );
    const dir = tempDir('spec');
    expect(() => loadRequestFile(dir)).toThrow(
      `cannot read request file ${dir}: it is a directory, not a regular file`,
    );
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

describe('sub-task workflow ids', () => {
  it.each(['a', 'a.attempt2', 'a.candidate3', 'a.attempt2.candidate8'])('accepts %s', (id) =>
    expect(isSubTaskWorkflowId(id)).toBe(true),
  );
  it.each(['a.candidate', 'a.candidate3.attempt2', '.candidate1', 'a/b.candidate1', 'a.candidate1.candidate2'])(
    'refuses %s',
    (id) => expect(isSubTaskWorkflowId(id)).toBe(false),
  );
});
