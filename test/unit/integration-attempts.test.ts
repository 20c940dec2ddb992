/** Integration attempts as the status shows them, and the lines that end an integration. Pure: no server. */
import { describe, expect, it } from 'vitest';
import type { TestRun } from '../../src/activities/integration';
import type { IntegrationReport } from '../../src/contracts/reports';
import { type PlannedRequest, parseLeaderRequest } from '../../src/contracts/request';
import { conflictLine, how, repairablePaths, track } from '../../src/workflows/integration/attempts';

describe('track', () => {
  it('shows an attempt as running at once, and settles it with its cost in the integration’s', () => {
    const report: IntegrationReport = { attempts: [], costUsd: 0 };
    const { attempt, end } = track(report, { kind: 'repair', round: 1, failed: 'boom' });
    expect(report.attempts).toEqual([{ kind: 'repair', round: 1, failed: 'boom', state: 'running', costUsd: 0 }]);
    end('succeeded', { costUsd: 0.25, diffstat: '1 file changed' });
    expect(attempt).toMatchObject({ state: 'succeeded', costUsd: 0.25, diffstat: '1 file changed' });
    expect(attempt.durationMs).toBeGreaterThanOrEqual(0);
    expect(report.costUsd).toBe(0.25);
  });

  it("leaves a redone sub-task's cost out: the sub-tasks' total counts it", () => {
    const report: IntegrationReport = { attempts: [], costUsd: 0 };
    track(report, { kind: 'redispatch', workerId: 'a', round: 1 }).end('failed', { costUsd: 2, reason: 'no' });
    expect(report.attempts[0]).toMatchObject({ state: 'failed', costUsd: 2, reason: 'no' });
    expect(report.costUsd).toBe(0);
  });
});

describe('lines', () => {
  it('say how the tests failed', () => {
    expect(how({ timedOut: false, exitCode: 3 } as TestRun)).toBe('exited with code 3');
    expect(how({ timedOut: true, exitCode: 137 } as TestRun)).toBe('timed out');
  });

  it('say which sub-task conflicts with which, in which files', () => {
    expect(conflictLine({ workerId: 'b', conflictsWith: ['a', 'c'], files: ['x.ts', 'y.ts'] })).toBe(
      'worker b conflicts with a, c in x.ts, y.ts',
    );
    expect(conflictLine({ workerId: 'b', conflictsWith: [], files: ['x.ts'] })).toBe(
      'worker b conflicts with earlier workers in x.ts',
    );
  });
});

describe('repairablePaths', () => {
  it("is every sub-task's owned paths and the shared ones, normalized, once each", () => {
    const req = parseLeaderRequest({
      objective: 'o',
      repo: { url: 'https://example.com/a.git' },
      testCmd: 'true',
      agent: { kind: 'shell', command: 'true' },
      subTasks: [
        { id: 'a', prompt: 'p', ownedPaths: ['src/a/', './docs/a.md'] },
        { id: 'b', prompt: 'p', ownedPaths: ['src//b'] },
      ],
      sharedPaths: ['CHANGELOG.md'],
    }) as PlannedRequest;
    expect(repairablePaths(req)).toEqual(['src/a', 'docs/a.md', 'src/b', 'CHANGELOG.md']);
  });
});
