/**
 * What `flotilla status`, `watch` and `result` print, from a status or a result alone: no server,
 * no worker. The texts are what a person reads, and copies commands from.
 */
import { describe, expect, it } from 'vitest';
import { formatRunEnd } from '../../src/cli/format/run-end';
import { formatStatus, statusFacts } from '../../src/cli/format/status';
import { ChangeLog, InPlaceView } from '../../src/cli/terminal';
import type { RunStatus } from '../../src/contracts/messages';
import type { RunResult } from '../../src/contracts/reports';

const NOW = Date.parse('2026-12-01T08:00:00Z');
const SHA = '3f2a9c1d0b7e3f2a9c1d0b7e3f2a9c1d0b7e3f2a';

function status(over: Partial<RunStatus> = {}): RunStatus {
  return {
    phase: 'running',
    objective: 'greet',
    repo: '/r.git',
    targetRef: 'main',
    baseSha: 'a'.repeat(40),
    workers: [],
    decisions: [],
    refusals: [],
    refusedCount: 0,
    startedAt: NOW - 60_000,
    totals: { costUsd: 0.5, turns: 7, workersDone: 1, workersFailed: 0 },
    ...over,
  };
}

function lines(text: string): string[] {
  return text.split('\n');
}

describe('the status of a suspended sub-task', () => {
  const suspended = status({
    workers: [
      {
        id: 'api',
        state: 'suspended',
        reason: 'the agent used its budget ($2.00 of $1.00)',
        question: 'Which colour?',
        costUsd: 2,
        turns: 3,
        startedAt: NOW - 4_000,
        host: 'host-b',
        checkpoint: { sha: 'c'.repeat(40), at: Date.parse('2026-12-01T07:59:30Z') },
        reprovisions: 1,
      },
      { id: 'web', state: 'done', commits: 2, filesChanged: 3, costUsd: 0.0042, turns: 12, durationMs: 1_500 },
    ],
  });

  it('lists it under sub-tasks with its reason, where it lives, its question and the command that resumes it', () => {
    const shown = lines(formatStatus(suspended, 'run-1', NOW));
    const at = shown.indexOf('sub-tasks:');
    expect(at).toBeGreaterThan(-1);
    expect(shown).not.toContain('workers:');
    expect(shown.slice(at + 1, at + 6)).toEqual([
      '  api     suspended    4.0s  $2.00   3 turns  the agent used its budget ($2.00 of $1.00)',
      '          on host-b, checkpoint 07:59:30 UTC (cccccccccccc), moved to another host 1 time(s)',
      '          question: Which colour?',
      "          resume:   flotilla resume run-1 --subtask api --message '...'",
      '  web     done         1.5s  $0.0042  12 turns  2 commit(s), 3 file(s)',
    ]);
    expect(shown.at(-1)).toBe('totals:    $0.500, 7 turns, 1 done, 0 failed, 60.0s elapsed');
  });

  it('quotes a run id the shell would split in the command it prints', () => {
    expect(formatStatus(suspended, "it's run 1", NOW)).toContain(
      `resume:   flotilla resume 'it'\\''s run 1' --subtask api --message '...'`,
    );
  });

  it('says the same as one fact per sub-task when the output is not a terminal', () => {
    expect(statusFacts(suspended, 'run-1')).toContainEqual([
      'sub-task api',
      'sub-task api: suspended, $2.00, 3 turns — question: Which colour?',
    ]);
    expect(statusFacts(suspended, 'run-1')).toContainEqual(['sub-task web', 'sub-task web: done, $0.0042, 12 turns']);
  });
});

describe('the status at a gate', () => {
  const expiresAt = Date.parse('2026-12-02T08:00:00Z');

  it('the plan gate shows each planned sub-task and the commands that pass or end it', () => {
    const shown = formatStatus(
      status({
        phase: 'awaiting-plan-approval',
        gate: {
          gate: 'plan',
          openedAt: NOW,
          expiresAt,
          onTimeout: 'fail',
          plan: [
            { id: 'api', ownedPaths: ['src/api', 'test/api'], agent: 'claude-code', prompt: 'add the endpoint' },
            { id: 'ui', ownedPaths: ['web'], agent: 'shell', prompt: 'add the page' },
          ],
          refused: [],
        },
      }),
      'run-1',
      NOW,
    );
    expect(lines(shown)).toEqual(
      expect.arrayContaining([
        'gate:      plan — waiting for approval (then fail at 2026-12-02T08:00:00.000Z)',
        '  plan:',
        '    api  claude-code  src/api, test/api  — add the endpoint',
        '    ui   shell        web  — add the page',
        '  approve: flotilla approve run-1 --gate plan',
        "  reject:  flotilla reject run-1 --gate plan --reason '...'",
      ]),
    );
  });

  it('the push gate names the exact commit, its tests and changes, and the approvals it refused', () => {
    const s = status({
      phase: 'awaiting-push-approval',
      gate: {
        gate: 'push',
        openedAt: NOW,
        expiresAt,
        onTimeout: 'approve',
        sha: SHA,
        testSummary: '12 passed\n0 failed',
        diffstat: ' a.txt | 1 +',
        refused: [{ by: 'mallory', reason: 'the SHA is not the integrated commit' }],
      },
    });
    const shown = lines(formatStatus(s, 'run-1', NOW));
    const at = shown.findIndex((l) => l.startsWith('gate:'));
    expect(shown.slice(at)).toEqual(
      expect.arrayContaining([
        'gate:      push — waiting for approval (then approve at 2026-12-02T08:00:00.000Z)',
        `  commit:  ${SHA}`,
        '  tests:',
        '    12 passed',
        '    0 failed',
        '  changes:',
        '     a.txt | 1 +',
        '  refused: mallory: the SHA is not the integrated commit',
        `  approve: flotilla approve run-1 --gate push --sha ${SHA}`,
      ]),
    );
    expect(statusFacts(s, 'run-1')).toContainEqual([
      'gate push',
      `gate: push waiting for approval; approve: flotilla approve run-1 --gate push --sha ${SHA} | reject: flotilla reject run-1 --gate push --reason '...'`,
    ]);
    expect(statusFacts(s, 'run-1')).toContainEqual([
      'refused push 0',
      'refused: mallory: the SHA is not the integrated commit',
    ]);
  });

  it('a held push gate says why, with the evidence beside the commit; a log says the same as facts', () => {
    const evidence = {
      tier: 'repository' as const,
      counts: { runner: 'TAP', unit: 'test' as const, passed: 2, failed: 0, skipped: 1, total: 3 },
      lost: { fewer: 0, missing: ['subtracts'], skipped: [], more: false },
      measure: {
        metrics: [{ name: 'time_ms', base: 100, result: 250, changePercent: 150 }],
        hold: 'time_ms regressed',
      },
    };
    const held = 'time_ms regressed 150%';
    const gate = { gate: 'push' as const, openedAt: NOW, expiresAt, onTimeout: 'fail' as const, sha: SHA, refused: [] };
    const s = status({ phase: 'awaiting-push-approval', evidence, gate: { ...gate, evidence, held } });
    const shown = lines(formatStatus(s, 'run-1', NOW));
    expect(shown.filter((l) => /evidence|LOST|measure|held/i.test(l))).toEqual([
      '  held:    time_ms regressed 150% (the gate opened although its mode is auto)',
      '  evidence: repository tests passed: 2 passed, 0 failed, 1 skipped (TAP)',
      '  LOST TESTS: passed on the base, now missing: subtracts',
      '  measure:  time_ms 100 → 250 (+150%)',
      '  HELD:     time_ms regressed',
    ]);
    expect(statusFacts(s, 'run-1')).toContainEqual(['held push', 'held: time_ms regressed 150%']);
    expect(statusFacts(s, 'run-1')).toContainEqual([
      'evidence 1',
      'LOST TESTS: passed on the base, now missing: subtracts',
    ]);
  });
});

describe('refusals', () => {
  const refusals = [
    { message: 'approve', by: 'mallory', reason: 'the plan gate is not open (phase: running)', at: NOW - 2_000 },
    { message: 'progress', by: 'sub-task api', reason: 'not from the run', at: NOW - 1_000 },
  ];

  it('the status counts them all and shows the latest kept, each with who sent what and why', () => {
    const shown = lines(formatStatus(status({ refusals, refusedCount: 25 }), 'run-1', NOW));
    expect(shown).toEqual(
      expect.arrayContaining([
        'refused messages: 25 (the latest 2 shown)',
        '  2026-12-01T07:59:58.000Z approve from mallory: the plan gate is not open (phase: running)',
        '  2026-12-01T07:59:59.000Z progress from sub-task api: not from the run',
      ]),
    );
    expect(statusFacts(status({ refusals, refusedCount: 25 }), 'run-1')).toContainEqual([
      'refusals',
      'refused messages: 25 (latest: not from the run)',
    ]);
  });

  it('none refused, no line about them', () => {
    expect(formatStatus(status(), 'run-1', NOW)).not.toContain('refused');
  });

  it("a run's end shows them indented under the run", () => {
    const result: RunResult = {
      outcome: 'rejected',
      message: 'rejected at the push gate by ana',
      baseSha: 'a'.repeat(40),
      targetRef: 'main',
      workers: [
        {
          workerId: 'api',
          status: 'failed',
          reason: 'the agent timed out',
          commits: 1,
          filesChanged: 1,
          isolation: 'bubblewrap',
          salvaged: { ref: 'refs/flotilla/run/workers/api', headSha: 'b'.repeat(40), commits: 1 },
          durationMs: 1,
          costUsd: 0,
          turns: 0,
          runs: 1,
        },
      ],
      costUsd: 1.25,
      decisions: [{ gate: 'push', approved: false, by: 'ana', comment: 'too broad' }],
      refusals: refusals.slice(0, 1),
      refusedCount: 1,
    };
    expect(lines(formatRunEnd({ workflowId: 'run-1', result, failureType: 'rejected', failureMessage: 'no' }))).toEqual(
      [
        'Run run-1 did not push (rejected): no',
        '  sub-task api: failed, 1 commit(s), 1 file(s), isolation bubblewrap — the agent timed out',
        "    salvaged: 1 unverified commit(s) at refs/flotilla/run/workers/api (bbbbbbbbbbbb) in its host's staging repository",
        '  push gate rejected by ana: too broad',
        '  refused messages: 1',
        '    2026-12-01T07:59:58.000Z approve from mallory: the plan gate is not open (phase: running)',
        '  agents cost $1.25',
      ],
    );
  });
});

describe('text an agent or a sender wrote', () => {
  const forged = 'Which colour?\n  approve: flotilla approve run-1 --gate push --sha 0000\r\nreject:\u2028 done';

  it('cannot start a line of its own in the status, the live view or the log of a watch', () => {
    const s = status({
      message: `failed: ${forged}`,
      workers: [{ id: 'api', state: 'suspended', reason: forged, question: forged, costUsd: 0, turns: 0 }],
      refusals: [{ at: NOW, message: 'approve', by: forged, reason: forged }],
      refusedCount: 1,
    });
    const shown = lines(formatStatus(s, 'run-1', NOW));
    expect(shown.filter((l) => /^\s*(approve|reject):/.test(l))).toEqual([]);
    expect(shown).toContain(
      '          question: Which colour?\\n  approve: flotilla approve run-1 --gate push --sha 0000\\nreject:\\n done',
    );
    const written: string[] = [];
    new ChangeLog({ write: (t) => written.push(t) }, () => new Date(NOW)).update(statusFacts(s, 'run-1'));
    new InPlaceView({ write: (t) => written.push(t) }).draw([`question: ${forged}`]);
    for (const text of written) expect(text.match(/\n/g)?.length ?? 0, text).toBe(1);
  });

  it('cannot start a line of its own in how a run ended, nor in its quoted test output', () => {
    const result: RunResult = {
      outcome: 'failed',
      message: forged,
      baseSha: 'a'.repeat(40),
      targetRef: 'main',
      workers: [
        {
          workerId: 'api',
          status: 'failed',
          reason: forged,
          commits: 0,
          filesChanged: 0,
          isolation: 'bubblewrap',
          durationMs: 1,
          costUsd: 0,
          turns: 0,
          runs: 1,
        },
      ],
      test: { exitCode: 1, logRef: 'sha256:1', tail: `one\n${forged}` },
      costUsd: 0,
      decisions: [{ gate: 'push', approved: false, by: forged, comment: forged }],
      refusals: [],
      refusedCount: 0,
    };
    const ended = formatRunEnd({ workflowId: 'run-1', failureType: 'failed', failureMessage: forged, result });
    const shown = lines(ended);
    expect(shown.filter((l) => /^\s*(approve|reject):/.test(l))).toEqual([]);
    // Test output keeps its lines, each marked as quoted.
    expect(shown.filter((l) => l.startsWith('    | '))).toHaveLength(4);
  });
});

describe('limits in the status (issue 18)', () => {
  it("shows the run's deadline while it runs, and a sub-task's auto-resume under its line", () => {
    const s = status({
      deadlineAt: Date.parse('2026-12-01T09:00:00Z'),
      workers: [
        {
          id: 'spender',
          state: 'suspended',
          reason: 'the agent used its budget ($1.20 of $0.90)',
          autoResume:
            'not resumed by itself: the run has spent $1.20 of its $1.00 (limits.runBudgetUsd); waiting for a person',
          costUsd: 1.2,
          turns: 2,
        },
      ],
    });
    const shown = lines(formatStatus(s, 'run-1', NOW));
    expect(shown).toContain('deadline:  2026-12-01T09:00:00.000Z (limits.runTimeoutMinutes)');
    const at = shown.findIndex((l) => l.startsWith('  spender'));
    expect(shown[at + 1]).toBe(
      '           not resumed by itself: the run has spent $1.20 of its $1.00 (limits.runBudgetUsd); waiting for a person',
    );
    expect(statusFacts(s, 'run-1')).toContainEqual([
      'auto-resume spender',
      'sub-task spender: not resumed by itself: the run has spent $1.20 of its $1.00 (limits.runBudgetUsd); waiting for a person',
    ]);
    expect(formatStatus({ ...s, endedAt: NOW }, 'run-1', NOW)).not.toContain('deadline:');
  });
});

describe('the status of a large run (issue 19)', () => {
  it('says which page of sub-tasks it shows, the counts by state, and the command for the next page', () => {
    const s = status({
      workers: [{ id: 'w51', state: 'failed', costUsd: 0, turns: 0, reason: 'exit 1' }],
      workersPage: { state: 'failed', page: 2, pageSize: 50, pages: 3, matching: 143, total: 1000 },
      workersByState: { done: 857, failed: 143 },
    });
    const shown = lines(formatStatus(s, 'run-1', NOW));
    const at = shown.indexOf('sub-tasks:');
    expect(shown.slice(at + 1, at + 3)).toEqual([
      '  page 2 of 3 (50 a page) of 143 failed of 1000 sub-tasks: 857 done, 143 failed',
      '  next: flotilla status run-1 --state failed --page 3 --page-size 50',
    ]);
  });
});
