/**
 * The reports that come back from a run: small summaries and references only, since they live
 * in workflow history. Pure: workflow code imports it.
 */
import type { ChecksReport, CiFixVerdict } from './checks';
import type { Evidence } from './evidence';
import type { GateName } from './request';
import type { ReviewReport } from './review';

// ---- Reports: small summaries and references only; they live in workflow history. ----

/** How a sub-task's commands were isolated: bubblewrap, an E2B microVM, or not at all. */
export type Isolation = 'bubblewrap' | 'e2b' | 'none';

export interface SubTaskReport {
  /** The sub-task's id (the field's name predates "sub-task" and lives in histories). */
  workerId: string;
  status: 'done' | 'failed' | 'cancelled';
  /** Why it failed, in one or two lines. */
  reason?: string;
  /**
   * It failed because a person did not answer it in time (a suspension that expired): a new
   * attempt would only ask again, so the living plan does not retry it.
   */
  unanswered?: boolean;
  /** Staging ref holding the sub-task's commits, and its head. */
  ref?: string;
  headSha?: string;
  /** Commits on top of the base, and the number of files they change. */
  commits: number;
  filesChanged: number;
  /** Paths changed outside ownedPaths (capped), when the scope check failed. */
  outOfScope?: string[];
  /**
   * The work a failed invocation left, collected into the staging repository so a person can
   * recover it. Unverified: no tests ran on it, and nothing builds on it.
   */
  salvaged?: { ref: string; headSha: string; commits: number };
  /** Why that work could not be collected, when it could not. */
  salvageFailed?: string;
  isolation: Isolation;
  exitCode?: number;
  /** Artifact holding the agent's full output; `tail` is its last lines. */
  logRef?: string;
  tail?: string;
  durationMs: number;
  /** Dollars the agent reported (or that its tokens cost), over all its runs. */
  costUsd: number;
  turns: number;
  /** Invocations of the agent (a name in histories): more than one when it was suspended and resumed, or moved. */
  runs: number;
  /** The host its sandbox lived on last (runs started before host affinity: absent). */
  host?: string;
  /** Its last checkpoint of work in progress, when one was made. */
  checkpoint?: Checkpoint;
  /** Sandboxes re-provisioned on another host because the one holding it was lost, oldest first. */
  reprovisions?: Reprovision[];
  /** The first lines of its agent's final message: what the sub-tasks that depend on it are told it did. */
  summary?: string;
  /** The integration head it started from, when not the base (it had dependencies, waited for an overlap, or was retried). */
  seedSha?: string;
  /** A CI-fix round's attempt: how its agent mapped the failing checks, or why the mapping was refused. */
  ciFix?: CiFixVerdict;
}

/** The staging ref the run merges finished sub-tasks onto, and the commit it is at. */
export interface IntegrationHead {
  ref: string;
  sha: string;
}

/** A sub-task that will not run, and why. */
export interface Dropped {
  id: string;
  reason: string;
}

/**
 * One candidate of a best-of-N sub-task (`subTasks[].attempts`): how its trial on the integration
 * head ended, how large and costly it was, and the staging ref that keeps it.
 */
export interface CandidateResult {
  /** The sub-task it is a candidate for. */
  subTask: string;
  /** Its own id: `<sub-task>.candidate<k>`, or `<sub-task>.attempt<n>.candidate<k>` for a later attempt. */
  id: string;
  /** Its agent's kind, and model when one is named. */
  agent: string;
  /** Absent while it runs or is tried; passed: merged cleanly onto the head and the tests passed there. */
  outcome?: 'passed' | 'failed';
  /** The candidate integrated (the passing one `select` preferred). */
  selected?: boolean;
  /** Why it failed. */
  reason?: string;
  /** Lines its merge adds and removes on the integration head (git diff --numstat). */
  linesChanged?: number;
  costUsd: number;
  /** Its merge onto the head, kept whatever its outcome: `refs/flotilla/<run key>/candidates/<id>`. */
  ref?: string;
  sha?: string;
}

/** A change to a running plan, with who sent it. */
export interface Amendment {
  kind: 'add' | 'cancel' | 'retry';
  subTaskId: string;
  by: string;
  at: number;
  /** The reason of a cancel, the message of a retry (clipped). */
  note?: string;
}

/** A WIP commit of a sub-task's workspace in the staging store (refs/flotilla/<run key>/checkpoints/<sub-task>). */
export interface Checkpoint {
  sha: string;
  /** Milliseconds since the epoch. */
  at: number;
}

/** A sandbox moved because its host was lost: from where, to where, why, and from which checkpoint. */
export interface Reprovision {
  from: string;
  to: string;
  reason: string;
  /** The checkpoint the new sandbox started from; absent: from the start. */
  fromCheckpoint?: string;
}

/**
 * 'unchanged': every sub-task succeeded without changing anything, so there was nothing to push.
 * 'run-timeout': the run ran past limits.runTimeoutMinutes.
 * 'pr-opened': the tested commit was pushed to the run's PR branch and the pull request is open (land: pr).
 */
export type RunOutcome =
  | 'pushed'
  | 'unchanged'
  | 'pr-opened'
  | 'failed'
  | 'conflict'
  | 'tests-failed'
  /** The integrated tree lost tests against the base, and policy.testCount is refuse. */
  | 'tests-removed'
  | 'raced'
  | 'rejected'
  | 'run-timeout';

/** The run's pull request (land: pr): where it is, and the branch it proposes. */
export interface PullRequestRef {
  number: number;
  url: string;
  branch: string;
  /** The branch it merges into. */
  base: string;
  /** What became of it, once the run saw it merged or closed (land: pr with review). */
  state?: 'merged' | 'closed';
}

/** The issue the run works on (`issue:`). */
export interface IssueRef {
  number: number;
  url: string;
  title: string;
}

export interface ConflictReport {
  workerId: string;
  /** Earlier sub-tasks whose changes touch the same files. */
  conflictsWith: string[];
  files: string[];
}

export interface RunResult {
  outcome: RunOutcome;
  message: string;
  baseSha: string;
  targetRef: string;
  /** Every sub-task's report, redone ones included (a name in histories); at most 100 of them, see workersOmitted. */
  workers: SubTaskReport[];
  /**
   * Set when the run had more reports than the result carries: `workers` holds the failed and
   * cancelled first, then the rest in order, and the reports query (`reportsQuery`, paged) gives
   * every one; awaitRun reads them all back into `workers`.
   */
  workersOmitted?: { count: number; total: number; byStatus: Partial<Record<SubTaskReport['status'], number>> };
  /** How the run's sandboxes were isolated ('none' only when the worker was started with the opt-out). */
  isolation?: Isolation;
  integratedSha?: string;
  pushedSha?: string;
  /** The pull request the run opened or reused (land: pr). */
  pullRequest?: PullRequestRef;
  /** The issue the run took its objective from. */
  issue?: IssueRef;
  /** The integration head as the run left it, and the sub-tasks merged onto it, in merge order. */
  head?: IntegrationHead & { integrated: string[] };
  /** Sub-tasks left out, and why (never silently). */
  dropped?: Dropped[];
  /** Every candidate of the best-of-N sub-tasks, with its result (subTasks[].attempts). */
  candidates?: CandidateResult[];
  /** Every amendment of the running plan, with who sent it (the latest AMENDMENTS_KEPT). */
  amendments?: Amendment[];
  /** The failed run this one continued, reusing its work. */
  continues?: string;
  conflict?: ConflictReport;
  /** The last test run; with hidden tests, their names and contents are redacted from its output. */
  test?: { exitCode: number; tail: string; logRef: string };
  /** How strong the passing tests are, their counts against the base's, flaky runs, the measurement. */
  evidence?: Evidence;
  /** Dollars spent by every agent of the run. */
  costUsd: number;
  /** Who passed each manual gate, or how it expired. */
  decisions: GateDecision[];
  planning?: PlanningReport;
  /** Every attempt at a conflicting merge or failing tests, when there was one. */
  integration?: IntegrationReport;
  /** Messages the run refused (the latest few) and how many in all. */
  refusals: Refusal[];
  refusedCount: number;
  /** The review phase's rounds, each comment's reply, and how it ended (request.review). */
  review?: ReviewReport;
  /** The PR's checks on the last pushed commit, and the CI-fix rounds (land.checks). */
  checks?: ChecksReport;
}

/** Who sent a message and what happened to it, when it was refused. Bounded: a run keeps the latest few (REFUSALS_KEPT, contracts/messages.ts). */
export interface Refusal {
  /** The signal or update name, as sent. */
  message: string;
  by: string;
  reason: string;
  at: number;
}

export interface GateDecision {
  gate: GateName;
  approved: boolean;
  by: string;
  comment?: string;
  /** For the push gate: the integrated commit that was approved. */
  sha?: string;
  /** Set when the gate decided by itself because nobody did in time. */
  expired?: boolean;
}

/** How the plan was settled; shown in status and the result. */
export interface PlanningReport {
  /** request: the caller's sub-tasks. planner: an agent's valid proposal. fallback: one sub-task with the whole objective. */
  source: 'request' | 'planner' | 'fallback';
  attempts: number;
  costUsd: number;
  /** Why the planner's last proposal was refused, when it was. */
  problems: string[];
  /** Rounds of onFailure: replan taken so far; their cost is in costUsd. */
  replans?: number;
}

/**
 * One try at getting the integrated tree right. resolve: a resolver round on a conflicting
 * merge. redispatch: the conflicting sub-task redone on top of the integrated tree. repair: a
 * repair round on failing tests.
 */
export interface IntegrationAttempt {
  kind: 'resolve' | 'redispatch' | 'repair';
  /** The sub-task whose merge conflicted (resolve, redispatch). */
  workerId?: string;
  /** Counted per conflicting sub-task for resolve, per run for repair. */
  round: number;
  state: 'running' | 'succeeded' | 'failed';
  /** The conflicting files (resolve, redispatch). */
  files?: string[];
  /** The tail of the failing output the round set out to fix (repair). */
  failed?: string;
  /** Why it did not succeed. */
  reason?: string;
  /** What it changed. */
  diffstat?: string;
  costUsd: number;
  /** The agent's full output (resolve, repair). */
  logRef?: string;
  /** The child workflow that redid the sub-task (redispatch). */
  workflowId?: string;
  durationMs?: number;
}

export interface IntegrationReport {
  attempts: IntegrationAttempt[];
  /** Dollars spent by resolver and repair agents. A redone sub-task counts with the sub-tasks (its attempt shows its cost too). */
  costUsd: number;
  /** What test runs committed or changed in their checkout: discarded, never pushed. */
  discarded?: string[];
}
