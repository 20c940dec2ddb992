/**
 * Every `patched()` id in Flotilla's workflows. A patch keeps a run started on an older release
 * on the code path it started on: `patched(id)` is true for runs that start on a release that
 * has it, and false when a run from before replays (its history has no marker for the id).
 *
 * The ids are recorded in histories, so they never change, and a patch is removed only once no
 * run started before it can still be in flight (the replay fixtures, test/history/v*, say which
 * releases must still replay). Every `patched()` call takes its id from here.
 */

export interface Patch {
  /** The id `patched()` records in history. */
  readonly id: string;
  /** The release that added it (the landings are listed by `issues stops`), and its commit. */
  readonly since: string;
  /** What runs started before it keep doing on replay. */
  readonly before: string;
}

export const PATCHES = {
  requestParsedByActivity: {
    id: 'request-parsed-by-activity',
    since: 'second landing (stop 13, issue 11), 03d5698',
    before: 'the leader parses and defaults the request in the workflow itself',
  },
  planValidatedByActivity: {
    id: 'plan-validated-by-activity',
    since: 'second landing (stop 13, issue 11), f8cad4f',
    before: "the planner's activity returns the sub-tasks as the agent wrote them; the leader validates them",
  },
  salvageFailedAgentRuns: {
    id: 'salvage-failed-agent-runs',
    since: 'second landing (stop 13, issue 11), 4f6df6b and 70d1d15',
    before:
      "a failed invocation's sandbox is destroyed without collecting its work, and an agent activity that fails for good fails the sub-task workflow with its error",
  },
  searchAttributes: {
    id: 'search-attributes',
    since: 'third landing (stop 14, issue 9), cc60329',
    before: "the leader upserts no search attributes (the run's namespace may not have them)",
  },
  hostAffinity: {
    id: 'host-affinity',
    since: 'third landing (stop 14, issue 9), 4cb7040',
    before:
      'every activity goes to the shared task queue: no host is claimed, nothing is checkpointed, no sandbox moves',
  },
  livingPlan: {
    id: 'living-plan',
    since: 'fourth landing (issue 17), the living plan',
    before:
      'the fixed plan (leader/fixed-plan.ts): every sub-task starts from the base at once, integration begins once the last has ended, any failure ends the run, and the plan cannot be amended',
  },
  progressInBackground: {
    id: 'progress-in-background',
    since: 'fifth landing (issue 19), the progress signal off the critical path',
    before:
      'a sub-task waits for the leader to have each progress signal before its next step (a round trip before provisioning its sandbox)',
  },
  earlyStops: {
    id: 'early-stops',
    since: 'issue 18 (wave 3)',
    before:
      "a running agent's checkpoints are not checked: its scope is checked only once it has finished, and neither silence (limits.idleMinutes) nor a stall (limits.stallCheckpoints) stops it",
  },
  runLimits: {
    id: 'run-limits',
    since: 'issue 18 (wave 3), in the landing of limits per sub-task and per run',
    before:
      'no run deadline (limits.runTimeoutMinutes) and no auto-resume (limits.autoResume): every suspension waits for a person',
  },
  bestOf: {
    id: 'best-of-n',
    since: 'issue 18 (wave 3), the landing with best of N',
    before: 'a sub-task with attempts above 1 runs one sub-task workflow per attempt, as if attempts were 1',
  },
  testEvidence: {
    id: 'test-evidence',
    since: 'issue 18 (wave 3) landing: evidence a reviewer can weigh',
    before:
      'the base is not tested, a failing test run counts at once (no flaky retries), no measure command runs, and the result carries no evidence tier',
  },
  reviewRounds: {
    id: 'review-rounds',
    since: 'issue 20 (wave 3)',
    before:
      'a run ends at its push (no review phase, no revision rounds) and sends no notifications (request.review and request.notify did not exist)',
  },
  pullRequests: {
    id: 'pull-requests',
    since: 'issue 20 (wave 3), a landing of its own: pull requests and issues in',
    before:
      'a run takes its objective from the request alone and lands by pushing to the target ref (requests before it had no land or issue field)',
  },
  keptSandboxes: {
    id: 'integration-sandboxes-kept',
    since: 'issue 19 (wave 4): integration that costs the change',
    before:
      'the test sandbox is provisioned and checked out when the first test run needs it, after the merges, and the base is tested then; the leader destroys the integration sandboxes itself before the push (a terminated leader leaves them behind), and a flaky retry gets a new test sandbox',
  },
  runMirrorPerRun: {
    id: 'run-mirror-per-run',
    since: 'issue 19 (wave 4): a lighter path per sub-task',
    before:
      "the leader does nothing for the run's mirrors as it ends: each host removed a run's mirror with the last sandbox that used it, so a run's planner, sub-tasks and integration could each make it again",
  },
  pullRequestReview: {
    id: 'pull-request-review',
    since: 'issue 20 (wave 4), review rounds on the pull request',
    before:
      'a run with land: pr ends once its PR is open (outcome pr-opened): it neither polls the PR for review comments nor updates its body (requests before it could not ask for review with land: pr)',
  },
  prChecks: {
    id: 'pr-checks',
    since: 'issue 20 (wave 4), item 4: checks after the push',
    before:
      'a run with land: pr ends once its PR is open: it reads no checks and takes no CI-fix round (requests before it had no land.checks field)',
  },
  thousandSubTasks: {
    id: 'thousand-sub-tasks',
    since: 'issue 19 (wave 5): 1,000 sub-tasks in one run',
    before:
      'an amendment may bring a plan to 100 sub-tasks, the cap of its day (a result of at most 100 reports is carried whole either way)',
  },
  rollover: {
    id: 'rollover',
    since: 'issue 19 (wave 6): a bounded leader history',
    before:
      "a run's whole life is one history, however long it grows (a run of 1,000 sub-tasks holds about 8,000 events of the server's 51,200)",
  },
  carryByReference: {
    id: 'carry-by-reference',
    since: 'issue 19 (wave 7): every payload under 64 KiB at 1,000 sub-tasks',
    before:
      "a run that rolls over puts what it carries into the next run's input (241 KiB at 1,000 sub-tasks), not the run and a page count to read it back by the carry query",
  },
} as const satisfies Record<string, Patch>;
