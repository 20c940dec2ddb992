/**
 * Whole runs with real agent CLIs and planners: the real Claude Code binary in every worker's
 * sandbox, talking to the scripted model server on loopback; a planner agent that splits the
 * objective; budgets that stop a run. Real dev server, real git, real sandboxes.
 */
import { readFile, readdir } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { formatStatus } from '../../src/cli/format/status';
import { brief } from '../../src/contracts/brief';
import { awaitRun } from '../../src/client/index';
import { resumeSignal, statusQuery } from '../../src/contracts/messages';
import type { LeaderRequestInput } from '../../src/contracts/request';
import { TestEnv } from '../support/env';
import { ModelServer, userTexts } from '../support/model-server';
import { makeRemote } from '../support/remotes';
import { describeReplay } from '../support/replay';
import { shell, shellRequest, subTask, writeAgent } from '../support/requests';
import { waitForStatus } from '../support/runs';

let env: TestEnv;
let server: ModelServer;
const saved = { url: process.env.ANTHROPIC_BASE_URL, key: process.env.ANTHROPIC_API_KEY };

beforeAll(async () => {
  server = await ModelServer.start();
  // The worker runs in this process: its environment is where agents' keys come from.
  process.env.ANTHROPIC_BASE_URL = server.url;
  process.env.ANTHROPIC_API_KEY = 'test-key';
  env = await TestEnv.start();
});
afterAll(() => {
  if (saved.url === undefined) delete process.env.ANTHROPIC_BASE_URL;
  else process.env.ANTHROPIC_BASE_URL = saved.url;
  if (saved.key === undefined) delete process.env.ANTHROPIC_API_KEY;
  else process.env.ANTHROPIC_API_KEY = saved.key;
});

/** Sub-tasks for the default agent, Claude Code with network on, each scripted as E2E-<id>. */
function claudeRequest(url: string, ids: string[], fields: Partial<LeaderRequestInput> = {}) {
  const tasks = ids.map((id) => ({ id, prompt: `Task E2E-${id}: write ${id}/greeting.txt`, ownedPaths: [id] }));
  return shellRequest(url, tasks, {
    testCmd: 'cat */greeting.txt',
    agent: { kind: 'claude-code' },
    sandbox: { network: true },
    ...fields,
  });
}

describe('real Claude Code workers', () => {
  it('three Claude Code workers edit their sandboxes and the run pushes their changes; cost and turns show', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const ids = ['ant', 'bee', 'cat'];
    for (const id of ids) {
      server.script(`E2E-${id}`, [
        {
          text: 'Writing it.',
          tools: [
            { name: 'Write', input: { file_path: `/workspace/${id}/greeting.txt`, content: `hello from ${id}\n` } },
          ],
        },
        { text: `Wrote ${id}/greeting.txt.` },
      ]);
    }
    const handle = await env.start(claudeRequest(remote.url, ids));
    const end = await awaitRun(handle);
    expect(end.failureMessage).toBeUndefined();
    expect(end.result?.outcome).toBe('pushed');
    for (const id of ids) expect(await remote.show('main', `${id}/greeting.txt`)).toBe(`hello from ${id}\n`);
    const status = await handle.query(statusQuery);
    for (const w of status.workers) {
      expect(w.turns).toBe(2);
      expect(w.costUsd).toBeGreaterThan(0);
    }
    expect(status.totals.costUsd).toBeCloseTo(status.workers.reduce((s, w) => s + w.costUsd, 0));
    expect(end.result?.costUsd).toBeGreaterThan(0);
    // Each agent's prompt was its brief: the objective, its own sub-task and paths, the other two.
    for (const id of ids) {
      const first = server.requests.find((r) => r.conversation === `E2E-${id}` && r.step === 0)!;
      const others = ids.filter((o) => o !== id).map((o) => `${o} (owns ${o}): Task E2E-${o}: write ${o}/greeting.txt`);
      const told = brief(
        { objective: 'a test run', subTaskId: id, prompt: `Task E2E-${id}: write ${id}/greeting.txt` },
        { ownedPaths: [id], sharedPaths: [], others },
      );
      expect(userTexts(first.body).join('\n')).toContain(told);
    }
  });

  it('a worker whose model asks a question suspends, and resumes with the answer in the same session', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    server.script('E2E-ask', [
      { text: 'I need a decision first.\nNEEDS_ANSWER: which greeting?' },
      { tools: [{ name: 'Write', input: { file_path: '/workspace/ask/greeting.txt', content: 'hello, as asked\n' } }] },
      { text: 'Done.' },
    ]);
    const handle = await env.start(claudeRequest(remote.url, ['ask']));
    const suspended = await waitForStatus(handle, 'the question', (s) => s.workers[0].state === 'suspended');
    expect(suspended.workers[0].question).toBe('which greeting?');
    expect(suspended.workers[0].turns).toBe(1);
    await handle.signal(resumeSignal, { workerId: 'ask', message: 'Say hello, as asked.' });
    const end = await awaitRun(handle);
    expect(end.result?.outcome).toBe('pushed');
    expect(await remote.show('main', 'ask/greeting.txt')).toBe('hello, as asked\n');
    const turns = server.requests.filter((r) => r.conversation === 'E2E-ask');
    // The resumed request carries the earlier conversation and the answer, in the same session.
    const resumed = turns[1];
    expect(userTexts(resumed.body).join('\n')).toContain('Say hello, as asked.');
    expect(JSON.stringify(resumed.body.messages)).toContain('which greeting?');
    expect(resumed.headers['x-claude-code-session-id']).toBe(turns[0].headers['x-claude-code-session-id']);
    const report = end.result?.workers[0];
    expect(report).toMatchObject({ runs: 2, turns: 3 });
  });
});

describe('budgets and large text in whole runs', () => {
  it('a Claude Code worker past its budget is stopped mid-run and suspends saying so; more budget lets it finish', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const tick = {
      name: 'Bash',
      input: { command: 'mkdir -p budget && echo tick >> budget/ticks.txt', description: 'Tick' },
    };
    server.script('E2E-budget', [
      ...Array.from({ length: 12 }, () => ({ tools: [tick] })),
      {
        tools: [
          { name: 'Write', input: { file_path: '/workspace/budget/greeting.txt', content: 'hello within budget\n' } },
        ],
      },
      { text: 'Done.' },
    ]);
    const handle = await env.start(claudeRequest(remote.url, ['budget'], { limits: { workerBudgetUsd: 0.02 } }));
    const { workers } = await waitForStatus(
      handle,
      'the budget to stop the agent',
      (s) => s.workers[0].state === 'suspended',
      60_000,
    );
    const suspended = workers[0];
    expect(suspended.reason).toMatch(/^the agent used its budget \(\$0\.0\d of \$0\.02\)$/);
    // Stopped mid-run: a dozen replies were scripted before the end, it got through a few.
    expect(suspended.turns).toBeGreaterThan(1);
    expect(suspended.turns).toBeLessThan(8);
    expect(suspended.costUsd).toBeGreaterThan(0.02);

    await handle.signal(resumeSignal, { workerId: 'budget', addBudgetUsd: 1 });
    const end = await awaitRun(handle);
    expect(end.result?.outcome).toBe('pushed');
    expect(await remote.show('main', 'budget/greeting.txt')).toBe('hello within budget\n');
    expect(end.result?.workers[0].runs).toBe(2);
    expect(end.result?.workers[0].costUsd).toBeGreaterThan(suspended.costUsd);
  });

  // Over Linux's 128 KiB limit for one argument or variable, which failed such runs with E2BIG.
  // (1 MB goes through each adapter in agents.test.ts; in a whole run the prompt rides in several
  // history events, and a 1 MB one makes a history page too big for a default client to fetch.)
  it('a shell worker gets a 200 KB prompt and a 200 KB answer, in files', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const prompt = 'p'.repeat(200_000);
    const answer = 'a'.repeat(200_000);
    const command = [
      'if [ -z "${FLOTILLA_RESUME_MESSAGE_FILE:-}" ]; then echo \'::flotilla {"question": "and then?"}\'; exit 0; fi',
      'mkdir -p big',
      'wc -c < "$FLOTILLA_PROMPT_FILE" > big/sizes.txt',
      'wc -c < "$FLOTILLA_RESUME_MESSAGE_FILE" >> big/sizes.txt',
      'echo "variables: ${FLOTILLA_PROMPT+prompt}${FLOTILLA_RESUME_MESSAGE+message}" >> big/sizes.txt',
    ].join('\n');
    const handle = await env.start(shellRequest(remote.url, [subTask('big', command, { prompt })]));
    await waitForStatus(handle, 'the question', (s) => s.workers[0].state === 'suspended');
    await handle.signal(resumeSignal, { workerId: 'big', message: answer });
    const end = await awaitRun(handle);
    expect(end.failureMessage).toBeUndefined();
    expect(end.result?.outcome).toBe('pushed');
    expect(await remote.show('main', 'big/sizes.txt')).toBe('200000\n200000\nvariables: \n');
  });
});

describe('a real Codex worker', () => {
  it('runs in a full run through a configured provider and its priced cost shows', async () => {
    const saved = { key: process.env.OPENAI_API_KEY, url: process.env.OPENAI_BASE_URL };
    process.env.OPENAI_API_KEY = 'test-key';
    // The request's provider names a loopback server: only because the worker's own configuration
    // names the same endpoint does the sandbox's proxy let Codex reach it.
    process.env.OPENAI_BASE_URL = `${server.url}/v1`;
    try {
      const remote = await makeRemote({ 'README.md': 'x\n' });
      server.script('E2E-codex', [
        {
          tools: [
            {
              name: 'exec_command',
              input: { cmd: 'mkdir -p cx && echo "hello from codex" > cx/greeting.txt', workdir: '/workspace' },
            },
          ],
        },
        { text: 'Wrote cx/greeting.txt.' },
      ]);
      const provider = `model_providers.local={name="local",base_url="${server.url}/v1",env_key="OPENAI_API_KEY",wire_api="responses"}`;
      const end = await env.run({
        objective: 'a greeting by codex',
        repo: { url: remote.url, baseRef: 'main' },
        testCmd: 'cat cx/greeting.txt',
        sandbox: { network: true },
        subTasks: [
          {
            id: 'cx',
            prompt: 'Task E2E-codex: write cx/greeting.txt',
            ownedPaths: ['cx'],
            agent: { kind: 'codex', model: 'gpt-5.5', config: [provider, 'model_provider=local'] },
          },
        ],
      });
      expect(end.failureMessage).toBeUndefined();
      expect(end.result?.outcome).toBe('pushed');
      expect(await remote.show('main', 'cx/greeting.txt')).toBe('hello from codex\n');
      expect(end.result?.workers[0].costUsd).toBeGreaterThan(0);
      expect(end.result?.workers[0].turns).toBe(1);
      const first = server.requests.find((r) => r.conversation === 'E2E-codex' && r.step === 0)!;
      const told = userTexts(first.body).join('\n');
      expect(told).toContain('===== BEGIN FLOTILLA BRIEF: sub-task "cx" =====');
      expect(told).toContain("The team's objective:\na greeting by codex\n");
      expect(told).toContain('Your sub-task, "cx":\nTask E2E-codex: write cx/greeting.txt\n');
      expect(told).toContain('Paths you own: cx\n');
    } finally {
      for (const [name, value] of [
        ['OPENAI_API_KEY', saved.key],
        ['OPENAI_BASE_URL', saved.url],
      ] as const) {
        if (value === undefined) delete process.env[name];
        else process.env[name] = value;
      }
    }
  });
});

describe('the brief', () => {
  it('a shell agent finds its brief, and its paths one a line, in files and variables; a retry is told why', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n', 'CHANGELOG.md': '' });
    const keep = [
      'mkdir -p "$FLOTILLA_SUBTASK_ID"',
      'cp "$FLOTILLA_BRIEF_FILE" "$FLOTILLA_SUBTASK_ID/brief.md"',
      'printf "%s|%s|%s" "$FLOTILLA_OWNED_PATHS" "$(cat "$FLOTILLA_SHARED_PATHS_FILE")" "${FLOTILLA_BRIEF:+set}" > "$FLOTILLA_SUBTASK_ID/vars.txt"',
      'git add -A && git commit -qm brief',
    ].join(' && ');
    const request = shellRequest(
      remote.url,
      [
        subTask('left', keep, { prompt: 'Write the left half.' }),
        subTask('right', `if grep -q 'This is attempt 2' "$FLOTILLA_BRIEF_FILE"; then ${keep}; else exit 3; fi`, {
          ownedPaths: ['right', 'docs/right.md'],
        }),
      ],
      { objective: 'two halves', sharedPaths: ['CHANGELOG.md'] },
    );
    const end = await env.run(request);
    expect(end.failureMessage).toBeUndefined();
    expect(end.result?.outcome).toBe('pushed');
    expect(await remote.show('main', 'left/brief.md')).toBe(
      brief(
        { objective: 'two halves', subTaskId: 'left', prompt: 'Write the left half.' },
        {
          ownedPaths: ['left'],
          sharedPaths: ['CHANGELOG.md'],
          others: ['right (owns right, docs/right.md): do right'],
        },
      ),
    );
    expect(await remote.show('main', 'left/vars.txt')).toBe('left|CHANGELOG.md|set');
    expect(await remote.show('main', 'right/vars.txt')).toBe('right\ndocs/right.md|CHANGELOG.md|set');
    const right = await remote.show('main', 'right/brief.md');
    expect(right).toContain('Your sub-task, "right":\ndo right\n');
    expect(right).toMatch(
      /This is attempt 2[^]*the agent exited with code 3[^]*Paths you own: right, docs\/right\.md\n/,
    );
    expect(right).toContain('- left (owns left): Write the left half.\n');
  });
});

describe('planner', () => {
  const planAgent = (plan: unknown) => shell(`printf '%s' '${JSON.stringify(plan)}' > "$FLOTILLA_PLAN_FILE"`);
  // Planned sub-tasks run the default agent: it writes <worker id>/greeting.txt.
  const worker = shell('mkdir -p "$FLOTILLA_WORKER_ID" && echo hello > "$FLOTILLA_WORKER_ID/greeting.txt"');

  it('with no sub-tasks, a planner proposes them and the run carries them out', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const plan = {
      subTasks: [
        { id: 'left', prompt: 'left side', ownedPaths: ['left'] },
        { id: 'right', prompt: 'right side', ownedPaths: ['right'] },
      ],
    };
    const end = await env.run({
      objective: 'two greetings',
      repo: { url: remote.url, baseRef: 'main' },
      testCmd: 'test -f left/greeting.txt && test -f right/greeting.txt',
      agent: worker,
      planner: planAgent(plan),
    });
    expect(end.result?.outcome).toBe('pushed');
    expect(end.result?.planning).toMatchObject({ source: 'planner', attempts: 1 });
    // In the order they ended, which the two race for.
    expect(end.result?.workers.map((w) => w.workerId).sort()).toEqual(['left', 'right']);
    expect(await remote.show('main', 'right/greeting.txt')).toBe('hello\n');
  });

  it('a planner that cannot write anything: it sees a read-only checkout', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const sneaky = shell(
      `echo pwned > README.md; printf '%s' '{"subTasks":[{"id":"a","prompt":"p","ownedPaths":["a"]}]}' > "$FLOTILLA_PLAN_FILE"`,
    );
    const end = await env.run({
      objective: 'o',
      repo: { url: remote.url, baseRef: 'main' },
      testCmd: 'true',
      agent: worker,
      planner: sneaky,
    });
    expect(end.result?.outcome).toBe('pushed');
    expect(await remote.show('main', 'README.md')).toBe('x\n');
    // The planner really tried, and its log says the write was refused.
    const files = (await readdir(path.join(env.dataDir, 'artifacts'))).filter((f) => f.endsWith('.log'));
    const logs = await Promise.all(files.map((f) => readFile(path.join(env.dataDir, 'artifacts', f), 'utf8')));
    expect(logs.filter((log) => log.includes('README.md: Read-only file system'))).toHaveLength(1);
  });

  it('an invalid plan is retried once with the reasons, then the run falls back to one worker and says so', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const cyclic = {
      subTasks: [
        { id: 'a', prompt: 'p', ownedPaths: ['src/a'], dependsOn: ['b'] },
        { id: 'b', prompt: 'p', ownedPaths: ['src/b'], dependsOn: ['a'] },
      ],
    };
    const handle = await env.start({
      objective: 'one greeting',
      repo: { url: remote.url, baseRef: 'main' },
      testCmd: 'true',
      agent: worker,
      planner: planAgent(cyclic),
    });
    const end = await awaitRun(handle);
    expect(end.result?.outcome).toBe('pushed');
    expect(end.result?.planning).toMatchObject({ source: 'fallback', attempts: 2 });
    expect(end.result?.planning?.problems.join('\n')).toContain(
      'subTasks[0].dependsOn: the dependencies form a cycle: a → b → a',
    );
    expect(end.result?.workers.map((w) => w.workerId)).toEqual(['objective']);
    expect(formatStatus(await handle.query(statusQuery), handle.workflowId)).toContain(
      'fell back to one sub-task with the whole objective',
    );
  });
});

describe('run budget', () => {
  it('a run past its total starts no new worker and ends clearly', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const spender = `${writeAgent('first/greeting.txt', 'hi')} && echo '::flotilla {"costUsd": 2}'`;
    const end = await env.run(
      shellRequest(remote.url, [subTask('first', spender), subTask('second', spender)], {
        limits: { maxParallel: 1, runBudgetUsd: 1, workerBudgetUsd: 10 },
      }),
    );
    expect(end.failureType).toBe('failed');
    expect(end.failureMessage).toContain("second: not started: the run's budget of $1.00 is spent ($2.00)");
    expect(end.result?.costUsd).toBe(2);
  });
});

describeReplay(() => env, 5);
