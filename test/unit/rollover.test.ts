/**
 * What a rollover carries (src/workflows/leader/rollover.ts), without a server: the plan is
 * carried when it is no longer the request's (amendments add to the request's own array), and a
 * carry too large for one payload is not attempted. The rollover itself: test/e2e/rollover.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { type PlannedRequest, parseLeaderRequest } from '../../src/contracts/request';
import type { Rollover } from '../../src/contracts/rollover';
import { carryFits, planAsGiven, planDiff } from '../../src/workflows/leader/rollover';
import { shellRequest, subTask } from '../support/requests';

const planned = (ids: string[], prompt = 'p') =>
  parseLeaderRequest(
    shellRequest(
      '/tmp/r.git',
      ids.map((id) => ({ ...subTask(id, 'true'), prompt })),
    ),
  ) as PlannedRequest;

describe('rollover', () => {
  it("carries the plan only once it differs from the request's, an amendment pushed onto the request's own array included", () => {
    const req = planned(['a', 'b']);
    const given = planAsGiven(req);
    // The plan run's plan shares the request's array, as settle() gives it.
    const plan: PlannedRequest = { ...req, subTasks: req.subTasks };
    expect(planDiff(given, plan)).toEqual({});
    plan.subTasks.push({ ...plan.subTasks[0], id: 'extra' });
    expect(planDiff(given, plan).subTasks?.map((t) => t.id)).toEqual(['a', 'b', 'extra']);
    expect(planDiff(given, { ...plan, sharedPaths: ['shared'] }).sharedPaths).toEqual(['shared']);
  });

  it('does not attempt a carry the server would refuse as one payload', () => {
    const carry = { entries: [], notes: [], conflicts: [] } as unknown as Rollover;
    expect(carryFits(planned(['a']), carry)).toBe(true);
    // A plan that grew past what a request may hold (a planner's, amendments): 400 prompts of 4,000 characters.
    const one = planned(['a']);
    const subTasks = Array.from({ length: 400 }, (_, i) => ({
      ...one.subTasks[0],
      id: `t${i}`,
      prompt: 'x'.repeat(4_000),
    }));
    const huge: PlannedRequest = { ...one, subTasks };
    expect(carryFits(huge, carry)).toBe(false);
  });
});
