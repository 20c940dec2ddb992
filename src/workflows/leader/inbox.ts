/**
 * The leader's inbox: every message a run accepts from people (approve, reject, pause, resume,
 * and the amendments of a living plan: addSubTask, cancelSubTask, retrySubTask) and from its own
 * sub-task workflows (workerProgress). Each message is parsed with its schema
 * and checked against the run's state by one function, whether it comes as a signal or as an
 * update:
 *
 * - as an update, a refused message is refused by the validator: the caller gets the reason and
 *   nothing is written to history;
 * - as a signal, a refused message is recorded as a bounded refusal in the status and the result.
 *
 * No handler throws into the workflow: a bad payload can never fail a workflow task.
 */
import {
  type ChildWorkflowHandle,
  condition,
  setDefaultSignalHandler,
  setHandler,
  workflowInfo,
} from '@temporalio/workflow';
import type { SignalDefinition, UpdateDefinition } from '@temporalio/common';
import type { z } from 'zod';
import { permanent } from '../../contracts/failures';
import type { GateDecision } from '../../contracts/reports';
import {
  AddSubTaskInput,
  ApproveInput,
  CancelSubTaskInput,
  PauseInput,
  REFUSALS_KEPT,
  REFUSAL_MAX_CHARS,
  RejectInput,
  ResumeInput,
  RetrySubTaskInput,
  type RunStatus,
  SubTaskProgress,
  type SubTaskState,
  type SubTaskStatus,
  addSubTaskSignal,
  addSubTaskUpdate,
  approveSignal,
  approveUpdate,
  cancelSubTaskSignal,
  cancelSubTaskUpdate,
  parseMessage,
  pauseSignal,
  pauseUpdate,
  rejectSignal,
  rejectUpdate,
  resumeSignal,
  resumeUpdate,
  retrySubTaskSignal,
  retrySubTaskUpdate,
  planPartSignal,
  pullRequestActivitySignal,
  subTaskProgressSignal,
  finishSignal,
  finishUpdate,
  reviseSignal,
  reviseUpdate,
} from '../../contracts/messages';
import { PlanPartInput } from '../../contracts/plan-parts';
import type { NotifyEvent } from '../../contracts/request';
import { FinishInput, ReviseInput } from '../../contracts/review';
import { clip } from '../../contracts/text';
import type { workerWorkflow } from '../subtask/subtask';
import type { Amendable } from './amendments';
import type { PlanParts } from './plan-parts';
import type { Reviewable } from './review';

type SubTaskHandle = ChildWorkflowHandle<typeof workerWorkflow>;

/** What the inbox shares with the leader. */
export interface Crew {
  status: RunStatus;
  /** Sub-task workflows that have started, by sub-task id. */
  children: Map<string, SubTaskHandle>;
  /** Each child's progress token (from its input) → its status line. */
  tokens: Map<string, SubTaskStatus>;
  /** Set when the run is over, so that handlers waiting on a sub-task stop waiting. */
  over: boolean;
  /** The decision at the open gate, once somebody took it. */
  decision?: GateDecision;
  /** A living plan (PATCHES.livingPlan): one that can be amended while it runs. */
  living: boolean;
  /** The plan while it runs, which takes amendments. */
  plan?: Amendable;
  /** limits.autoResume: resumes a sub-task suspended on its budget slice while the run's budget has room. */
  autoResume?: (line: SubTaskStatus, sliceUsd: number) => Promise<void>;
  /** The review phase, once the run has pushed (request.review). */
  review?: Reviewable;
  /** Has the PR's reader read it now (pr-review.ts), while a run on a pull request waits for review. */
  readPullRequest?: () => void;
  /** Tells the request's webhooks (request.notify), when it has any. */
  notify?: (event: NotifyEvent, title: string, commands: string[]) => void;
  /** The parts of a plan sent in parts (request.planParts), as they arrive. */
  planParts?: PlanParts;
}

interface Message<I> {
  name: string;
  signal: SignalDefinition<[I]>;
  update: UpdateDefinition<string, [I]>;
  schema: z.ZodType<I>;
  /** Why the run refuses the message now, or undefined. Pure: it also runs as the update's validator. */
  check(input: I): string | undefined;
  /** Acts on an accepted message; returns what was done, or throws a MessageRefused failure. */
  apply(input: I): string | Promise<string>;
  /** A gate message: its refusals are also listed on the open gate. */
  gate?: boolean;
}

const ENDED: SubTaskState[] = ['done', 'failed', 'cancelled', 'dropped'];
const KNOWN = 'approve, reject, pause, resume, addSubTask, cancelSubTask, retrySubTask, revise, finish, planPart';

/** Registers every handler of the leader. Call it before the workflow's first await. */
export function openInbox(crew: Crew): void {
  const inbox = new Inbox(crew);
  inbox.register(inbox.approve());
  inbox.register(inbox.reject());
  inbox.register(inbox.pause());
  inbox.register(inbox.resume());
  inbox.register(inbox.addSubTask());
  inbox.register(inbox.cancelSubTask());
  inbox.register(inbox.retrySubTask());
  inbox.register(inbox.revise());
  inbox.register(inbox.finish());
  setHandler(subTaskProgressSignal, (raw: unknown) => inbox.progress(raw));
  setHandler(planPartSignal, (raw: unknown) => inbox.planPart(raw));
  // Carries nothing to validate; a run not reading a PR has no reader, and ignores it.
  setHandler(pullRequestActivitySignal, () => crew.readPullRequest?.());
  setDefaultSignalHandler((name: string, ...args: unknown[]) =>
    inbox.refuse(name, args[0], `unknown signal "${clip(name, 100)}" (known: ${KNOWN})`),
  );
}

class Inbox {
  private readonly status: RunStatus;

  constructor(private readonly crew: Crew) {
    this.status = crew.status;
  }

  /** The message as a signal and as an update, both held to its schema and its check. */
  register<I>(m: Message<I>): void {
    setHandler(m.signal, async (raw: unknown) => {
      const admitted = this.admit(m, raw);
      if (!admitted.ok) return this.refuse(m.name, raw, admitted.reason, m.gate);
      try {
        await m.apply(admitted.value);
      } catch (err) {
        this.refuse(m.name, raw, err instanceof Error ? err.message : String(err), m.gate);
      }
    });
    setHandler(
      m.update,
      async (raw: unknown) => {
        // Validators do not run on replay, so the handler checks again: same state, same verdict.
        const admitted = this.admit(m, raw);
        if (!admitted.ok) throw permanent('MessageRefused', admitted.reason);
        return m.apply(admitted.value);
      },
      {
        validator: (raw: unknown) => {
          const admitted = this.admit(m, raw);
          if (!admitted.ok) throw permanent('MessageRefused', admitted.reason);
        },
      },
    );
  }

  /** Records a refused signal in the status (and on the open gate, for a gate message): bounded, never thrown. */
  refuse(message: string, raw: unknown, reason: string, gate = false): void {
    const { status } = this;
    const by = senderOf(raw);
    const kept = clip(reason, REFUSAL_MAX_CHARS);
    status.refusedCount++;
    status.refusals = [...status.refusals, { message: clip(message, 100), by, reason: kept, at: Date.now() }].slice(
      -REFUSALS_KEPT,
    );
    if (gate && status.gate) status.gate.refused = [...status.gate.refused, { by, reason: kept }].slice(-REFUSALS_KEPT);
  }

  /** A part of the plan (request.planParts): taken if its digest is the one named for it, else refused. */
  planPart(raw: unknown): void {
    const parsed = parseMessage(PlanPartInput, raw);
    if (!parsed.ok) return this.refuse('planPart', raw, parsed.reason);
    const { planParts } = this.crew;
    const why = planParts ? planParts.take(parsed.value) : 'this run was not started with planParts';
    if (why) this.refuse('planPart', raw, why);
  }

  private admit<I>(m: Message<I>, raw: unknown): { ok: true; value: I } | { ok: false; reason: string } {
    const parsed = parseMessage(m.schema, raw);
    if (!parsed.ok) return parsed;
    const why = m.check(parsed.value);
    return why === undefined ? parsed : { ok: false, reason: why };
  }

  // ---- Gates ----

  approve(): Message<ApproveInput> {
    const { status, crew } = this;
    return {
      name: 'approve',
      signal: approveSignal,
      update: approveUpdate,
      schema: ApproveInput,
      gate: true,
      check: (a) => {
        const problem = this.gateProblem(a.gate);
        if (problem || a.gate !== 'push') return problem;
        const sha = status.gate!.sha;
        return a.sha === sha ? undefined : `approval names ${a.sha ?? 'no commit'}, but the commit to push is ${sha}`;
      },
      apply: (a) => {
        crew.decision = {
          gate: a.gate,
          approved: true,
          by: a.by ?? 'unknown',
          comment: a.comment,
          sha: status.gate!.sha,
        };
        return `approved the ${a.gate} gate`;
      },
    };
  }

  reject(): Message<RejectInput> {
    return {
      name: 'reject',
      signal: rejectSignal,
      update: rejectUpdate,
      schema: RejectInput,
      gate: true,
      check: (r) => this.gateProblem(r.gate),
      apply: (r) => {
        this.crew.decision = { gate: r.gate, approved: false, by: r.by ?? 'unknown', comment: r.reason };
        return `rejected the ${r.gate} gate; the run ends without pushing`;
      },
    };
  }

  private gateProblem(gate: string): string | undefined {
    const { status, crew } = this;
    const open = status.gate?.gate;
    if (open !== gate)
      return `the ${gate} gate is not open (${open ? `the ${open} gate is` : `phase: ${status.phase}`})`;
    if (crew.decision)
      return `the ${gate} gate was already ${crew.decision.approved ? 'approved' : 'rejected'} by ${crew.decision.by}`;
    return undefined;
  }

  // ---- Sub-tasks: pause and resume are forwarded to the sub-task's workflow ----

  pause(): Message<PauseInput> {
    return {
      name: 'pause',
      signal: pauseSignal,
      update: pauseUpdate,
      schema: PauseInput,
      check: (p) => this.subTaskProblem(p.workerId, ['queued', 'running'], 'paused'),
      apply: async (p) => {
        const send = () => this.forward(p.workerId, (child) => child.signal(pauseSignal, p));
        if (!this.crew.children.has(p.workerId)) {
          // Not started yet: the pause reaches it as soon as it starts; the caller need not wait.
          send().catch((err) => this.refuse('pause', p, err instanceof Error ? err.message : String(err)));
          return `worker ${p.workerId} has not started; it is paused as soon as it does`;
        }
        await send();
        return this.settled(p.workerId, 'running');
      },
    };
  }

  resume(): Message<ResumeInput> {
    return {
      name: 'resume',
      signal: resumeSignal,
      update: resumeUpdate,
      schema: ResumeInput,
      check: (r) => this.subTaskProblem(r.workerId, ['suspended'], 'resumed'),
      apply: async (r) => {
        await this.forward(r.workerId, (child) => child.signal(resumeSignal, r));
        return this.settled(r.workerId, 'suspended');
      },
    };
  }

  private lineOf(id: string): SubTaskStatus | undefined {
    return this.status.workers.find((w) => w.id === id);
  }

  // The words "worker" and "workers" here are the ones people, the CLI's --worker and the tests have always read.
  private subTaskProblem(id: string, allowed: SubTaskState[], verb: string): string | undefined {
    const { status } = this;
    const line = this.lineOf(id);
    if (!line && status.workers.length === 0)
      return `no worker "${clip(id, 100)}" in this run yet: its plan is not settled (phase: ${status.phase})`;
    if (!line)
      return `no worker "${clip(id, 100)}" in this run (workers: ${status.workers.map((w) => w.id).join(', ')})`;
    if (!allowed.includes(line.state))
      return `worker ${id} is ${line.state}; only a ${allowed.join(' or ')} worker can be ${verb}`;
    return undefined;
  }

  /**
   * Sends to a sub-task's workflow once it has started. A child that ends first, or has already
   * closed, gets nothing: that is a refusal, never a failure of the leader.
   */
  private async forward(id: string, send: (child: SubTaskHandle) => Promise<void>): Promise<void> {
    const { crew } = this;
    await condition(() => crew.children.has(id) || ENDED.includes(this.lineOf(id)!.state) || crew.over);
    const child = crew.children.get(id);
    const ended = `worker ${id} is ${this.lineOf(id)!.state}; nothing to do`;
    if (!child || ENDED.includes(this.lineOf(id)!.state)) throw permanent('MessageRefused', ended);
    try {
      await send(child);
    } catch {
      throw permanent('MessageRefused', `worker ${id} had already finished`);
    }
  }

  /** Waits until the sub-task leaves `state` (or the run ends), and says where it is now. */
  private async settled(id: string, state: SubTaskState): Promise<string> {
    const line = this.lineOf(id)!;
    await condition(() => line.state !== state || this.crew.over);
    return `worker ${id} is ${line.state}`;
  }

  // ---- Amendments of a living plan: the plan itself says what it accepts ----

  addSubTask(): Message<AddSubTaskInput> {
    return this.amendment('addSubTask', addSubTaskSignal, addSubTaskUpdate, AddSubTaskInput, {
      check: (plan, a) => plan.addProblem(a),
      apply: (plan, a) => plan.add(a),
    });
  }

  cancelSubTask(): Message<CancelSubTaskInput> {
    return this.amendment('cancelSubTask', cancelSubTaskSignal, cancelSubTaskUpdate, CancelSubTaskInput, {
      check: (plan, c) => plan.cancelProblem(c),
      apply: (plan, c) => plan.cancel(c),
    });
  }

  retrySubTask(): Message<RetrySubTaskInput> {
    return this.amendment('retrySubTask', retrySubTaskSignal, retrySubTaskUpdate, RetrySubTaskInput, {
      check: (plan, r) => plan.retryProblem(r),
      apply: (plan, r) => plan.retry(r),
    });
  }

  private amendment<I>(
    name: string,
    signal: SignalDefinition<[I]>,
    update: UpdateDefinition<string, [I]>,
    schema: z.ZodType<I>,
    on: {
      check(plan: Amendable, input: I): string | undefined;
      apply(plan: Amendable, input: I): string | Promise<string>;
    },
  ): Message<I> {
    return {
      name,
      signal,
      update,
      schema,
      check: (input) => {
        const plan = this.crew.plan;
        return plan ? on.check(plan, input) : this.notAmendable();
      },
      apply: (input) => on.apply(this.crew.plan!, input),
    };
  }

  private notAmendable(): string {
    if (!this.crew.living) return 'this run started on a release whose plans cannot be amended';
    return `the plan is not running yet (phase: ${this.status.phase}); amend it once it runs`;
  }

  // ---- The review phase: the phase itself says what it accepts ----

  revise(): Message<ReviseInput> {
    const eventOf = (review: Reviewable, r: ReviseInput) => review.commentsEvent(r);
    return {
      name: 'revise',
      signal: reviseSignal,
      update: reviseUpdate,
      schema: ReviseInput,
      check: (r) => (this.crew.review ? this.crew.review.problem(eventOf(this.crew.review, r)) : this.notInReview()),
      apply: (r) => this.crew.review!.take(eventOf(this.crew.review!, r)),
    };
  }

  finish(): Message<FinishInput> {
    const eventOf = (f: FinishInput) => ({
      kind: 'finish' as const,
      by: f.by ?? 'unknown',
      reason: f.reason ?? 'finished by a person',
    });
    return {
      name: 'finish',
      signal: finishSignal,
      update: finishUpdate,
      schema: FinishInput,
      check: (f) => (this.crew.review ? this.crew.review.problem(eventOf(f)) : this.notInReview()),
      apply: (f) => this.crew.review!.take(eventOf(f)),
    };
  }

  private notInReview(): string {
    return `the run is not in its review phase (phase: ${this.status.phase}); a run reviews only with request.review, once it has pushed`;
  }

  // ---- Progress from the run's own sub-task workflows, and nobody else ----

  progress(raw: unknown): void | Promise<void> {
    const parsed = parseMessage(SubTaskProgress, raw);
    if (!parsed.ok) return this.refuse('workerProgress', raw, parsed.reason);
    const p = parsed.value;
    const line = this.crew.tokens.get(p.token);
    if (!line || line.id !== p.id)
      return this.refuse(
        'workerProgress',
        raw,
        `progress for worker "${clip(p.id, 100)}" that does not come from that worker`,
      );
    if (line.state === 'running' || line.state === 'suspended') {
      const asked = p.state === 'suspended' && p.question !== undefined && p.question !== line.question;
      if (asked) this.askPeople(line.id, p.question!);
      Object.assign(line, {
        state: p.state,
        reason: p.reason,
        question: p.question,
        costUsd: p.costUsd,
        turns: p.turns,
      });
      // Where its sandbox is: sent by sub-tasks of runs with host affinity only.
      if (p.host !== undefined)
        Object.assign(line, { host: p.host, checkpoint: p.checkpoint, reprovisions: p.reprovisions });
      if (p.state === 'suspended' && p.budgetSliceUsd !== undefined)
        return this.crew.autoResume?.(line, p.budgetSliceUsd);
    }
  }

  /** A sub-task's agent asked a question: the webhooks hear it, with the command that answers it. */
  private askPeople(id: string, question: string): void {
    const answer = `flotilla resume ${workflowInfo().workflowId} --subtask ${id} --message "your answer"`;
    this.crew.notify?.('question', `sub-task ${id} asks: ${clip(question, 500)}`, [answer]);
  }
}

/** Who sent a message, as far as its payload says; a sender's name is bounded like any text. */
function senderOf(raw: unknown): string {
  const by = raw !== null && typeof raw === 'object' && 'by' in raw ? (raw as { by: unknown }).by : undefined;
  return typeof by === 'string' && by !== '' ? clip(by, 100) : 'unknown';
}
