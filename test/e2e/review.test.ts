/**
 * Review rounds and notifications out (issue 20), on the suite's dev server with shell agents and
 * a real HTTP receiver on loopback: `flotilla revise` starts a round whose commit is pushed to the
 * same branch with the compare-and-swap, each comment gets a reply, the round limit refuses more,
 * `flotilla finish` ends the run; webhooks hear gates, questions, rounds and the end, signed; a
 * receiver that is down fails nothing; hostile review messages are refused with a reason.
 */
import { type IncomingHttpHeaders, createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { simpleGit } from 'simple-git';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MessageRefused, awaitRun, resume } from '../../src/client/index';
import { revise } from '../../src/client/messages';
import { type RunStatus, approveSignal, finishSignal, reviseSignal, statusQuery } from '../../src/contracts/messages';
import { SIGNATURE_HEADER, verifySignature } from '../../src/webhooks/signature';
import { TestEnv } from '../support/env';
import { flotilla, waitFor } from '../support/processes';
import { makeRemote } from '../support/remotes';
import { describeReplay } from '../support/replay';
import { greet, reviewed, shellRequest, subTask, withGates } from '../support/requests';
import { historyHits, waitForStatus } from '../support/runs';

const SECRET = 'test-notify-secret-0123456789';
const HOOK_ENV = 'FLOTILLA_TEST_REVIEW_HOOK';

interface Delivery {
  headers: IncomingHttpHeaders;
  body: string;
  json: { event: string; runId: string; title: string; commands: string[] };
}

/** A webhook receiver on loopback that keeps every delivery. */
async function receiver(): Promise<{ url: string; got: Delivery[]; close(): Promise<void> }> {
  const got: Delivery[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      got.push({ headers: req.headers, body, json: JSON.parse(body) as Delivery['json'] });
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/hooks/private-path-token`,
    got,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

/** A port nothing listens on: a receiver that is down. */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

let env: TestEnv;
let hook: Awaited<ReturnType<typeof receiver>>;
beforeAll(async () => {
  process.env.FLOTILLA_NOTIFY_SECRET = SECRET;
  hook = await receiver();
  process.env[HOOK_ENV] = hook.url;
  env = await TestEnv.start();
});
afterAll(async () => {
  delete process.env.FLOTILLA_NOTIFY_SECRET;
  delete process.env[HOOK_ENV];
  await hook.close();
});

const of = (runId: string) => hook.got.filter((d) => d.json.runId === runId);
const events = (runId: string) => of(runId).map((d) => d.json.event);
const inReview = (s: RunStatus) => s.phase === 'review' && s.review?.waiting === true;

describe('review rounds', () => {
  it('revise starts a round pushed to the same branch; two rounds, the limit refuses a third, finish ends the run', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const request = shellRequest(remote.url, [reviewed('a'), reviewed('b')], {
      review: { rounds: 2 },
      notify: [{ urlEnv: HOOK_ENV }],
    });
    const handle = await env.start(request);
    const id = handle.workflowId;
    const first = await waitForStatus(handle, 'the review phase', inReview);
    const pushed1 = (await remote.head())!;
    expect(first.review?.headSha).toBe(pushed1);
    expect(first.review?.commands).toContain(`flotilla finish ${id}`);
    expect((await flotilla(env.taskQueue, ['status', id])).out).toContain(`flotilla revise ${id} --comment`);

    const r1 = await flotilla(env.taskQueue, [
      'revise',
      id,
      '--comment',
      'please say bonjour',
      '--path',
      'a/greeting.txt',
      '--line',
      '1',
      '--by',
      'ana',
    ]);
    expect(r1.err).toBe('');
    expect(r1.out).toContain('review round 1 starts: its comments go to sub-task(s) a');
    const after1 = await waitForStatus(handle, 'round 1 to end', (s) => inReview(s) && s.review!.rounds.length === 1);
    const round1 = after1.review!.rounds[0];
    const pushed2 = (await remote.head())!;
    expect(round1).toMatchObject({ round: 1, by: 'ana', outcome: 'pushed', pushedSha: pushed2 });
    expect(round1.subTasks).toEqual([
      expect.objectContaining({ subTaskId: 'a', attemptId: 'a.attempt2', state: 'changed', filesChanged: 1 }),
    ]);
    expect(round1.replies).toEqual([
      {
        commentId: '1.1',
        author: 'ana',
        path: 'a/greeting.txt',
        line: 1,
        reply: `changed 1 file(s) (sub-task a) in ${pushed2}`,
      },
    ]);
    // The round's commit is on top of the first push (the compare-and-swap expected it), and holds the comment.
    await simpleGit(remote.url).raw(['merge-base', '--is-ancestor', pushed1, pushed2]);
    expect(await remote.show('main', 'a/review.txt')).toBe('please say bonjour\n');
    expect(await remote.show('main', 'b/greeting.txt')).toBe('hello from b\n');

    await expect(
      revise(env.client, id, {
        comments: [{ body: 'please wave', path: 'b/greeting.txt', kind: 'comment' }],
        by: 'bo',
      }),
    ).resolves.toContain('sub-task(s) b');
    const after2 = await waitForStatus(handle, 'round 2 to end', (s) => inReview(s) && s.review!.rounds.length === 2);
    expect(after2.review!.rounds[1]).toMatchObject({ outcome: 'pushed', pushedSha: await remote.head() });
    expect(await remote.show('main', 'b/review.txt')).toBe('please wave\n');

    const third = await flotilla(env.taskQueue, ['revise', id, '--comment', 'one more']);
    expect(third.code).toBe(2);
    expect(third.err).toContain(
      `refused: the run has taken its 2 review round(s) (review.rounds); end it with flotilla finish ${id}`,
    );

    expect((await flotilla(env.taskQueue, ['finish', id, '--by', 'ana', '--reason', 'approved'])).err).toBe('');
    const end = await awaitRun(handle);
    expect(end.result?.outcome).toBe('pushed');
    expect(end.result?.message).toContain('2 review round(s), 2 pushed; review ended by ana');
    expect(end.result?.pushedSha).toBe(await remote.head());
    expect(end.result?.review?.rounds.map((r) => r.outcome)).toEqual(['pushed', 'pushed']);

    // The webhook heard the wait for review, each round and the end, each signed, with the commands that answer.
    await waitFor('the end notification', async () => (events(id).includes('run-ended') ? true : undefined));
    expect(events(id)).toEqual([
      'gate',
      'review-round-started',
      'review-round-ended',
      'review-round-started',
      'review-round-ended',
      'run-ended',
    ]);
    expect(of(id)[0].json.commands).toContain(`flotilla finish ${id}`);
    for (const d of of(id))
      expect(verifySignature(SECRET, d.body, d.headers[SIGNATURE_HEADER.toLowerCase()] as string)).toBe(true);
    // The URL came from the worker's environment: it is nowhere in the run's history.
    expect(historyHits(await handle.fetchHistory(), 'private-path-token')).toEqual([]);
  });

  it('a revision whose agent fails pushes nothing, keeps what was pushed, and the run still finishes', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const failing = subTask(
      'one',
      `if printf '%s\\n' "$FLOTILLA_PROMPT" | grep -q '^\\[comment '; then echo 'cannot revise' >&2; exit 3; fi; mkdir -p one && echo hi > one/hi.txt && git add -A && git commit -qm one`,
    );
    const handle = await env.start(shellRequest(remote.url, [failing], { review: { rounds: 3 } }));
    const id = handle.workflowId;
    await waitForStatus(handle, 'the review phase', inReview);
    const pushed = await remote.head();
    await revise(env.client, id, { comments: [{ body: 'change it', path: 'one/hi.txt', kind: 'comment' }], by: 'ana' });
    const s = await waitForStatus(handle, 'the round to end', (x) => inReview(x) && x.review!.rounds.length === 1);
    const round = s.review!.rounds[0];
    expect(round).toMatchObject({ outcome: 'unchanged', message: 'no sub-task changed anything' });
    expect(round.subTasks).toEqual([expect.objectContaining({ subTaskId: 'one', state: 'failed' })]);
    expect(round.replies[0].reply).toMatch(/^no change: sub-task one failed \(/);
    expect(await remote.head()).toBe(pushed);
    await handle.signal(finishSignal, { by: 'ana' });
    const end = await awaitRun(handle);
    expect(end.result?.outcome).toBe('pushed');
    expect(end.result?.pushedSha).toBe(pushed);
    expect(end.result?.message).toContain('1 review round(s), 0 pushed; review ended by ana');
  });

  it('a comment on no path goes to the first sub-task, run by review.reviser', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const reviser = {
      kind: 'shell' as const,
      command: 'mkdir -p one && echo revised > one/reviser.txt && git add -A && git commit -qm revised',
    };
    const handle = await env.start(
      shellRequest(remote.url, [greet('one'), greet('two')], { review: { rounds: 1, reviser } }),
    );
    await waitForStatus(handle, 'the review phase', inReview);
    const answer = await revise(env.client, handle.workflowId, { comments: [{ body: 'add a note', kind: 'comment' }] });
    expect(answer).toContain('its comments go to sub-task(s) one');
    await waitForStatus(handle, 'the round to end', (x) => inReview(x) && x.review!.rounds.length === 1);
    expect(await remote.show('main', 'one/reviser.txt')).toBe('revised\n');
    await handle.signal(finishSignal, {});
    expect((await awaitRun(handle)).result?.review?.rounds[0].outcome).toBe('pushed');
  });

  it('refuses hostile and untimely review messages with a reason, as updates and as signals', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const handle = await env.start(
      shellRequest(remote.url, [greet('one')], { ...withGates('plan'), review: { rounds: 1 } }),
    );
    const id = handle.workflowId;
    await waitForStatus(handle, 'the plan gate', (s) => s.phase === 'awaiting-plan-approval');
    const send = (raw: unknown) =>
      revise(env.client, id, raw as never).then(
        () => 'accepted',
        (err: unknown) => (err instanceof MessageRefused ? err.reason : String(err)),
      );
    expect(await send({ comments: [{ body: 'x' }] })).toMatch(
      /^the run is not in its review phase \(phase: awaiting-plan-approval\)/,
    );
    await handle.signal(approveSignal, { gate: 'plan', by: 'ana' });
    await waitForStatus(handle, 'the review phase', inReview);

    const cases: [unknown, RegExp][] = [
      [null, /^invalid message: /],
      [{ comments: [] }, /comments: must hold at least one comment/],
      [{ comments: Array.from({ length: 21 }, () => ({ body: 'x' })) }, /comments: at most 20 comments per round/],
      [{ comments: [{ body: '' }] }, /comments\[0\]\.body: must not be empty/],
      [{ comments: [{ body: 'x'.repeat(4_001) }] }, /comments\[0\]\.body/],
      [{ comments: [{ body: 'x', line: -1 }] }, /comments\[0\]\.line/],
      [{ comments: [{ body: 'x', extra: true }] }, /extra/],
      [{ comments: [{ body: 'ok', kind: 'approved' }] }, /^only approvals: there is nothing to revise$/],
    ];
    for (const [raw, reason] of cases) expect(await send(raw), JSON.stringify(raw).slice(0, 80)).toMatch(reason);
    // A bad signal is recorded, never thrown; the run still takes a good message after it.
    await handle.signal(reviseSignal, { comments: 'nope' } as never);
    await handle.signal(finishSignal, { by: 'ana', reason: 'done' });
    const end = await awaitRun(handle);
    expect(end.result?.outcome).toBe('pushed');
    expect(end.result?.review?.rounds).toEqual([]);
    expect(end.result?.refusals.some((r) => r.message === 'revise' && /comments/.test(r.reason))).toBe(true);
  });
});

describe('notifications', () => {
  it('a webhook hears the gate and the question with the commands that answer them; a receiver that is down fails nothing', async () => {
    const remote = await makeRemote({ 'README.md': 'x\n' });
    const down = await closedPort();
    const asker = subTask(
      'asker',
      `if [ -n "\${FLOTILLA_RESUME_MESSAGE:-}" ]; then mkdir -p asker && printf '%s\\n' "$FLOTILLA_RESUME_MESSAGE" > asker/answer.txt && git add -A && git commit -qm answer; else echo '::flotilla {"question": "Which colour?"}'; fi`,
    );
    const handle = await env.start(
      shellRequest(remote.url, [asker], {
        ...withGates('plan'),
        notify: [
          { urlEnv: HOOK_ENV, events: ['gate', 'question', 'run-ended'] },
          { url: `http://127.0.0.1:${down}/down/secret-path` },
        ],
      }),
    );
    const id = handle.workflowId;
    await waitFor('the gate notification', async () => (events(id).includes('gate') ? true : undefined));
    expect(of(id)[0].json.commands).toEqual([
      `flotilla approve ${id} --gate plan`,
      `flotilla reject ${id} --gate plan --reason "why"`,
    ]);
    await handle.signal(approveSignal, { gate: 'plan', by: 'ana' });
    await waitFor('the question notification', async () => (events(id).includes('question') ? true : undefined));
    const question = of(id).find((d) => d.json.event === 'question')!.json;
    expect(question.title).toBe('sub-task asker asks: Which colour?');
    expect(question.commands).toEqual([`flotilla resume ${id} --subtask asker --message "your answer"`]);
    await resume(env.client, id, { workerId: 'asker', message: 'green', by: 'ana' });

    const end = await awaitRun(handle);
    expect(end.result?.outcome).toBe('pushed');
    expect(events(id)).toEqual(['gate', 'question', 'run-ended']);
    const s = await handle.query(statusQuery);
    expect(s.notifications?.sent).toBe(3);
    // The receiver that was down is a note, naming its origin only (a path may be the secret).
    expect(s.notifications?.failed.length).toBe(3);
    expect(s.notifications?.failed[0]).toMatchObject({ event: 'gate', to: `http://127.0.0.1:${down}/…` });
    expect(s.notifications?.failed[0].reason).toContain('could not connect');
    expect(JSON.stringify(s)).not.toContain('secret-path');
    // A delivery whose body was changed does not verify.
    const d = of(id)[0];
    expect(
      verifySignature(SECRET, d.body.replace('gate', 'gatf'), d.headers[SIGNATURE_HEADER.toLowerCase()] as string),
    ).toBe(false);
  });
});

describeReplay(() => env, 2);
