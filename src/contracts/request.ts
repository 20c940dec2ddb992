/**
 * The shapes that cross Flotilla's edges: the request a user submits and the reports that come
 * back. This module is imported by workflow code, so it must stay pure (no Node APIs, no I/O).
 */
import { z } from 'zod';
import { type ForgeAddress, forgeHost, forgeOfRemote, issueOfUrl, repoNameProblem } from './forge-address';
import { normalizeRepoPath, pathIsUnder, refNameProblem, repoPathProblem, repoUrlProblem } from './names';
import { dependencyProblems } from './plan';

/**
 * Maximum sizes, in characters. Everything here travels in workflow history (whose events are
 * capped at 2 MB by the server) and in prompts, so each field is bounded and the request as a
 * whole is too: a request over these limits is refused by `validate`, not by a failed start.
 */
export const MAX_CHARS = {
  objective: 20_000,
  /** Agents read prompts from files, so this bounds history, not the agent's command line. */
  prompt: 200_000,
  /** The request as JSON, all fields together: well under Temporal's 2 MiB payload limit. */
  request: 1_000_000,
  /** A resume message delivered to an agent (through a file, like a prompt). */
  message: 200_000,
  /** An approval's comment or a rejection's reason. */
  comment: 2_000,
  /** Who sent a message (`by`). */
  name: 100,
} as const;

/** Sub-tasks a plan may have (issue 19): the status, the plan gate and the result page beyond a hundred. */
export const MAX_SUB_TASKS = 1000;
/** Events a leader's history may hold before the run rolls over (limits.historyEvents). */
export const DEFAULT_HISTORY_EVENTS = 20_000;

/** Sub-task workflows a run keeps going at once (limits.maxParallel). */
export const MAX_PARALLEL = 256;

/** A string of at most `max` characters; the error says how long it was. */
export function boundedText(max: number) {
  return z.string().max(max, { error: (iss) => `is ${String(iss.input).length} characters; at most ${max}` });
}

const refName = z.string().superRefine((v, ctx) => {
  const problem = refNameProblem(v);
  if (problem) ctx.addIssue({ code: 'custom', message: `branch name ${problem}` });
});

const repoPath = z.string().superRefine((v, ctx) => {
  const problem = repoPathProblem(v);
  if (problem) ctx.addIssue({ code: 'custom', message: `path ${problem}` });
});

/** A sub-task id becomes part of a branch name and a workflow id, so it is kept plain. */
const subTaskId = z
  .string()
  .regex(
    /^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$/,
    'must be 1-63 letters, digits, "-" or "_", starting with a letter or digit',
  );

export const ShellAgent = z
  .object({
    kind: z.literal('shell'),
    /** Run with bash in the workspace; the prompt is in the file $FLOTILLA_PROMPT_FILE (and $FLOTILLA_PROMPT up to 32 KiB). */
    command: z.string().min(1, 'must not be empty'),
  })
  .strict();

export const ClaudeCodeAgent = z
  .object({
    kind: z.literal('claude-code'),
    /** A model name or alias; Claude Code's default otherwise. */
    model: z.string().min(1).optional(),
    /** Turn limit of every run (limits.maxTurns overrides it). */
    maxTurns: z.number().int().positive().optional(),
    /** Extra system instructions, after Flotilla's own. */
    appendSystemPrompt: z.string().optional(),
  })
  .strict();

export const CodexAgent = z
  .object({
    kind: z.literal('codex'),
    model: z.string().min(1).optional(),
    /** `key=value` settings passed to codex as `-c` (providers, reasoning effort). */
    config: z.array(z.string().min(1)).optional(),
  })
  .strict();

export const AgentSpec = z.discriminatedUnion('kind', [ShellAgent, ClaudeCodeAgent, CodexAgent]);
export type AgentSpec = z.infer<typeof AgentSpec>;

/** Minutes a limit may be: positive, at most a day. */
const limitMinutes = z
  .number()
  .positive()
  .max(24 * 60, 'must be at most 1440 minutes (a day)');

/**
 * Limits of one sub-task that override the request's for it: a subset of `limits`, under the
 * same names and with the same ranges.
 */
export const SubTaskLimits = z
  .object({
    /** Dollars this sub-task's agent may spend before it suspends (its budget slice). */
    subTaskBudgetUsd: z.number().positive('must be a positive number of dollars').optional(),
    /** Model turns one invocation of its agent may take before the sub-task suspends. */
    maxTurns: z.number().int().positive('must be at least 1').optional(),
    /** Wall-clock limit of one invocation of its agent. */
    agentTimeoutMinutes: limitMinutes.optional(),
  })
  .strict();
export type SubTaskLimits = z.infer<typeof SubTaskLimits>;

/**
 * A sub-task's own limits in a few words, for the plan gate and the Web UI: "budget $0.50, 3
 * turns, 5 min per invocation"; undefined when it gives none.
 */
export function subTaskLimitsLine(limits: SubTaskLimits = {}): string | undefined {
  const parts = [
    ...(limits.subTaskBudgetUsd === undefined ? [] : [`budget $${limits.subTaskBudgetUsd.toFixed(2)}`]),
    ...(limits.maxTurns === undefined ? [] : [`${limits.maxTurns} turns`]),
    ...(limits.agentTimeoutMinutes === undefined ? [] : [`${limits.agentTimeoutMinutes} min per invocation`]),
  ];
  return parts.length ? parts.join(', ') : undefined;
}
/** Candidates a best-of-N sub-task may run for each attempt. */
export const MAX_CANDIDATES = 8;

export const SubTask = z
  .object({
    id: subTaskId,
    prompt: boundedText(MAX_CHARS.prompt).min(1, 'must not be empty'),
    /** Paths (files or directories, relative to the repository root) this sub-task may change. */
    ownedPaths: z.array(repoPath).min(1, 'must list at least one path'),
    /** Overrides the request's default agent for this sub-task. */
    agent: AgentSpec.optional(),
    /**
     * Sub-tasks that must be integrated before this one starts; it then starts from the
     * integration head that holds them, and its agent is told what they changed. None by default.
     */
    dependsOn: z.array(subTaskId).max(100, 'at most 100 dependencies').optional(),
    /** Overrides the request's limits for this sub-task: its budget slice, turn limit and agent timeout. */
    limits: SubTaskLimits.optional(),
    // Best of N (issue 18): these three together.
    /**
     * Independent candidates run at once for each attempt, each in its own sub-task workflow and
     * sandbox (each counted by maxParallel and the budget); each is merged onto the integration
     * head and tested, and the passing one `select` prefers is integrated. 1 by default.
     */
    attempts: z
      .number()
      .int()
      .min(1, 'must be at least 1')
      .max(MAX_CANDIDATES, `must be at most ${MAX_CANDIDATES}`)
      .optional(),
    /** One agent per candidate, in order (at most `attempts`); the rest take the sub-task's agent. */
    agents: z.array(AgentSpec).min(1, 'must list at least one agent').optional(),
    /** Which passing candidate is integrated: the one with the fewest lines changed (default), or the cheapest. */
    select: z.enum(['smallest', 'cheapest']).optional(),
  })
  .strict()
  .superRefine((task, ctx) => {
    const n = task.attempts ?? 1;
    if (task.agents && task.agents.length > n)
      ctx.addIssue({
        code: 'custom',
        path: ['agents'],
        message: `lists ${task.agents.length} agents but attempts is ${n}: at most one agent per attempt`,
      });
  });
export type SubTask = z.infer<typeof SubTask>;

/** The longest a run waits for a person (a gate, a suspended sub-task): a year, in minutes. */
export const MAX_WAIT_MINUTES = 365 * 24 * 60;

/**
 * Minutes a wait for a person may be: positive, at most a year. Unbounded, a wait outgrows
 * Temporal's timers and JavaScript's dates, and the run can neither wait nor be shown.
 */
const waitMinutes = z.number().positive().max(MAX_WAIT_MINUTES, `must be at most ${MAX_WAIT_MINUTES} minutes (a year)`);

/**
 * Limits renamed when "worker" came to mean only the worker process: old name → new name. The
 * old names are still accepted (giving both is an error) and `deprecatedFields` names them.
 */
export const RENAMED_LIMITS = [
  ['workerTimeoutMinutes', 'agentTimeoutMinutes'],
  ['workerBudgetUsd', 'subTaskBudgetUsd'],
] as const;

const DEFAULT_AGENT_TIMEOUT_MINUTES = 30;

const LimitFields = z
  .object({
    /** Sub-tasks running at once. Default 4: enough parallelism without starving a laptop. */
    maxParallel: z.number().int().min(1).max(MAX_PARALLEL).default(4),
    /** Wall-clock limit of one invocation of an agent. Default 30 minutes. */
    agentTimeoutMinutes: limitMinutes.optional().meta({ default: DEFAULT_AGENT_TIMEOUT_MINUTES }),
    workerTimeoutMinutes: limitMinutes
      .optional()
      .meta({ deprecated: true, description: 'Deprecated: the old name of agentTimeoutMinutes.' }),
    /** Limit of the setup and test commands. Default 10 minutes. */
    commandTimeoutMinutes: limitMinutes.default(10),
    /** Dollars one sub-task's agent may spend before it suspends for more. Unlimited by default. */
    subTaskBudgetUsd: z.number().positive().optional(),
    workerBudgetUsd: z
      .number()
      .positive()
      .optional()
      .meta({ deprecated: true, description: 'Deprecated: the old name of subTaskBudgetUsd.' }),
    /**
     * Dollars all agents of the run may spend. Once spent, no new sub-task starts and the run
     * ends as failed. Without subTaskBudgetUsd, each sub-task's slice is this divided by the sub-tasks.
     */
    runBudgetUsd: z.number().positive().optional(),
    /** Model turns one invocation may take before the sub-task suspends. Unlimited by default. */
    maxTurns: z.number().int().positive().optional(),
    /** How long a suspended sub-task waits for `resume` before it fails. Default one day; at most a year. */
    suspendTimeoutMinutes: waitMinutes.default(24 * 60),
    /**
     * A worker process that stops heartbeating for this long is presumed dead and its activity
     * is retried elsewhere. Default 30 s: quick failover without flapping on a busy machine.
     */
    heartbeatTimeoutSeconds: z.number().int().min(2).max(600).default(30),
    /**
     * How long an activity waits for the host that holds its sandbox to pick it up before that
     * host counts as lost and the sandbox is re-provisioned elsewhere. Default 5 minutes: a
     * restart of the host's worker is not a loss.
     */
    hostTimeoutSeconds: z
      .number()
      .int()
      .min(2)
      .max(24 * 3600)
      .default(300),
    /** How often a running agent's work in progress is checkpointed to the staging store. Default 5 minutes. */
    checkpointIntervalSeconds: z
      .number()
      .int()
      .min(1)
      .max(24 * 3600)
      .default(300),
    /**
     * New attempts a failed sub-task gets (each from the integration head, told why the last one
     * failed) before the request's onFailure decides. Default 1: an agent that failed once often
     * succeeds when told why.
     */
    retries: z.number().int().min(0).max(5).default(1),
    /**
     * Run the tests after each merge onto the integration head, not only on the final tree: a
     * merge whose tests fail is not kept, and its sub-task counts as failed. Default false: the
     * tests run once, on the final tree.
     */
    testEachMerge: z.boolean().default(false),
    /** Rounds of onFailure: replan a run may take before a failure ends it. Default 2. */
    replans: z.number().int().min(0).max(10).default(2),
    // Early stops (issue 18): an agent that goes quiet or loops is stopped, not waited for.
    /**
     * Minutes an agent may print nothing before it is stopped, its work checkpointed, and the
     * attempt failed as "idle for N minutes". Fractions allowed. Off by default: a long, silent
     * tool call (a test suite) is not a hang; agentTimeoutMinutes bounds every invocation anyway.
     */
    idleMinutes: limitMinutes.optional(),
    /**
     * Consecutive checkpoints (see checkpointIntervalSeconds) with an unchanged workspace and no
     * new output progress (turns, tool calls, cost, or a different last line) after which the
     * agent is stopped as stalled. Off by default.
     */
    stallCheckpoints: z.number().int().min(1).max(1000).optional(),
    /**
     * The whole run's deadline, in minutes from its start (gates and suspensions included). Past
     * it, what runs is cancelled, nothing is pushed and the run fails as `run-timeout`; what was
     * integrated stays on the integration head for `flotilla continue`. None by default.
     */
    runTimeoutMinutes: waitMinutes.optional(),
    /**
     * A sub-task suspended on its budget slice resumes by itself with another slice while the
     * run's budget (runBudgetUsd, which it needs) has room; a person is asked only once it has
     * none. Default false: every suspension waits for a person.
     */
    autoResume: z.boolean().optional().meta({ default: false }),
    /**
     * Times a failing test run is run again, each in the test sandbox reset as new, before its failure
     * counts; a pass after a failure is marked flaky, the failing output kept. Default 0: a
     * failure counts at once (a retry costs a whole test run, and can hide a real failure).
     */
    flakyRetries: z.number().int().min(0).max(5).optional().meta({ default: 0 }),
    /**
     * Events the leader's history may hold before the run rolls over: once it has integrated a
     * sub-task and nothing runs, it continues as new with its plan, its integration head and what
     * each sub-task did, in a fresh history of the same workflow id. Default 20,000 (Temporal
     * refuses a history past 51,200); a run of 1,000 sub-tasks holds about 8,000.
     */
    historyEvents: z.number().int().min(50).max(40_000).optional().meta({ default: DEFAULT_HISTORY_EVENTS }),
  })
  .strict();

/** Limits as a history may hold them: requests parsed before the renames carry only the old names. */
export type LimitsInHistory = z.output<typeof LimitFields>;

/**
 * `limits` under the current names only: an old name's value moves to its new name. The parse
 * does this for every request; the leader does it again on a request parsed by an older
 * release, whose history holds the old names.
 */
export function currentLimits(limits: LimitsInHistory) {
  const { maxParallel, workerTimeoutMinutes, agentTimeoutMinutes, workerBudgetUsd, subTaskBudgetUsd, ...rest } = limits;
  const budget = subTaskBudgetUsd ?? workerBudgetUsd;
  // In the schema's order, so that `flotilla request` prints the limits as they are documented.
  return {
    maxParallel,
    agentTimeoutMinutes: agentTimeoutMinutes ?? workerTimeoutMinutes ?? DEFAULT_AGENT_TIMEOUT_MINUTES,
    ...rest,
    ...(budget !== undefined && { subTaskBudgetUsd: budget }),
  };
}

export const Limits = LimitFields.superRefine((limits, ctx) => {
  for (const [old, now] of RENAMED_LIMITS) {
    if (limits[old] === undefined || limits[now] === undefined) continue;
    ctx.addIssue({
      code: 'custom',
      path: [old],
      message: `is the old name of limits.${now}, which is given too; give only limits.${now}`,
    });
  }
  checkAutoResume(limits, ctx);
}).transform(currentLimits);

/** Auto-resume stops at the run's budget: without one, a sub-task would resume without end. */
function checkAutoResume(limits: LimitsInHistory, ctx: z.RefinementCtx): void {
  if (limits.autoResume && limits.runBudgetUsd === undefined)
    ctx.addIssue({
      code: 'custom',
      path: ['autoResume'],
      message: 'needs limits.runBudgetUsd: a sub-task resumes by itself only while the run budget has room',
    });
}

/** The limits one sub-task runs under: its own (`task.limits`) where it gives them, the request's otherwise. */
export function limitsOfSubTask(limits: Limits, task: Pick<SubTask, 'limits'>) {
  return {
    agentTimeoutMinutes: task.limits?.agentTimeoutMinutes ?? limits.agentTimeoutMinutes,
    maxTurns: task.limits?.maxTurns ?? limits.maxTurns,
  };
}
export type Limits = z.output<typeof Limits>;

/**
 * One line per deprecated field `input` uses, saying what replaces it:
 * "limits.workerTimeoutMinutes is deprecated; use limits.agentTimeoutMinutes". Never throws.
 */
export function deprecatedFields(input: unknown): string[] {
  const limits = isRecord(input) && isRecord(input.limits) ? input.limits : {};
  return RENAMED_LIMITS.filter(([old]) => limits[old] !== undefined).map(
    ([old, now]) => `limits.${old} is deprecated; use limits.${now}`,
  );
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

/** Bytes a file in a sub-task's commits may have unless the request allows more (GitHub refuses over 100 MiB). */
export const DEFAULT_MAX_FILE_BYTES = 100 * 1024 * 1024;
/** Files one sub-task's commits may change unless the request allows more. */
export const DEFAULT_MAX_CHANGED_FILES = 20_000;

/**
 * What a sub-task's commits may contain. Each rule is checked on the host, on the imported commits;
 * a sub-task that breaks one fails, saying which file and why.
 */
export const CommitPolicy = z
  .object({
    /** Largest file (blob) any of the sub-task's commits may add. Default 100 MiB. */
    maxFileBytes: z.number().int().positive().default(DEFAULT_MAX_FILE_BYTES),
    /** Most files one sub-task may change. Default 20,000. */
    maxChangedFiles: z.number().int().positive().default(DEFAULT_MAX_CHANGED_FILES),
    /** Allow symbolic links whose target is outside the repository (absolute, up through "..", or into .git). */
    allowExternalSymlinks: z.boolean().default(false),
    /** Allow submodules and other gitlinks (commits of another repository). */
    allowSubmodules: z.boolean().default(false),
    /**
     * What a running agent's change outside its paths (found at a checkpoint) does. stop: the
     * agent is stopped and the attempt fails naming the paths. revert: those changes are undone
     * in the workspace (restored from the base, new files removed), the agent is told, and it
     * goes on. Default stop. Either way the sub-task's final work is checked as always.
     */
    outOfScope: z.enum(['stop', 'revert']).default('stop'),
    /**
     * When the integrated tree has fewer tests than the base, or tests that passed on the base
     * are skipped or missing: warn (shown at the push gate and in the result) or refuse (the run
     * fails as tests-removed, naming them). Default warn.
     */
    testCount: z.enum(['warn', 'refuse']).optional().meta({ default: 'warn' }),
  })
  .strict();
export type CommitPolicy = z.infer<typeof CommitPolicy>;

export const Gate = z
  .object({
    /** auto: pass straight through. manual: wait for an approve or reject signal. */
    mode: z.enum(['auto', 'manual']).default('auto'),
    /** How long a manual gate waits. Default: a week; at most a year. */
    timeoutMinutes: waitMinutes.default(7 * 24 * 60),
    /** What an expired gate does. Default: fail, since nobody approved. */
    onTimeout: z.enum(['fail', 'approve']).default('fail'),
  })
  .strict();
export type Gate = z.infer<typeof Gate>;
export type GateName = 'plan' | 'push';
const autoGate = { mode: 'auto' as const, timeoutMinutes: 7 * 24 * 60, onTimeout: 'fail' as const };

const ALLOW_HOST =
  /^(\*\.)?[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*(:\d{1,5})?$/;
/** IPv4 ranges a sandbox never reaches (see blockedAddresses in src/sandbox/egress/rules.ts), as [first octets, prefix length]. */
const LOCAL_V4: [number[], number][] = [
  [[0], 8],
  [[10], 8],
  [[100, 64], 10],
  [[127], 8],
  [[169, 254], 16],
  [[172, 16], 12],
  [[192, 0, 0], 24],
  [[192, 168], 16],
  [[224], 4],
  [[240], 4],
];
/** Names that are this host or a private network by definition (RFC 6761, 6762, 8375, ICANN's .internal). */
const LOCAL_NAME = /(^|\.)(localhost|local|internal|home\.arpa)$/;

/**
 * Why an allowHosts entry names a loopback, private or link-local host, which the egress proxy
 * refuses whatever the request says: refused here, where the request is written, not at run time.
 */
function localHostProblem(entry: string): string | undefined {
  const name = entry.replace(/:\d+$/, '').replace(/^\*\./, '').toLowerCase().replace(/\.$/, '');
  if (LOCAL_NAME.test(name)) return `"${entry}" is a loopback or private name; sandboxes never reach those`;
  if (!/^[\d.]+$/.test(name)) return undefined;
  const octets = name.split('.').map(Number);
  if (octets.length !== 4 || octets.some((o) => o > 255))
    return `"${entry}" is not a dotted IPv4 address (write one as a.b.c.d)`;
  const value = octets.reduce((v, o) => v * 256 + o, 0);
  const local = LOCAL_V4.some(([first, bits]) => {
    const start = [...first, 0, 0, 0].slice(0, 4).reduce((v, o) => v * 256 + o, 0);
    return Math.floor(value / 2 ** (32 - bits)) === Math.floor(start / 2 ** (32 - bits));
  });
  return local ? `"${entry}" is a loopback, private or link-local address; sandboxes never reach those` : undefined;
}

/**
 * Resource limits of one sandbox (enforced by the local provider). Each one left out takes the
 * worker's default; each one given is capped at the worker's maximum.
 */
export const SandboxLimitsSpec = z
  .object({
    /** Size of the sandbox's private /tmp (a tmpfs, so host memory). Default 256. */
    tmpMiB: z.number().int().positive().optional(),
    /** Bytes in the workspace and scratch directories together, and the largest file. Default 4096. */
    workspaceMiB: z.number().int().positive().optional(),
    /** Files and directories in the workspace and scratch directories. Default 100,000. */
    workspaceFiles: z.number().int().positive().optional(),
    /** Processes (and threads) running at once. Default 1024. */
    processes: z.number().int().positive().optional(),
    /** Memory of all the sandbox's processes together. Default 4096. */
    memoryMiB: z.number().int().positive().optional(),
  })
  .strict();
export type SandboxLimitsRequest = z.infer<typeof SandboxLimitsSpec>;

export const SandboxSpec = z
  .object({
    /** local: directories on the worker's host (bubblewrap). e2b: E2B cloud sandboxes (E2B_API_KEY). */
    provider: z.enum(['local', 'e2b']).default('local'),
    /** The E2B template; it needs bash, git and the agent CLIs. Default: E2B's "base". */
    template: z.string().min(1).optional(),
    /** Agents get no network unless asked: a shell agent rarely needs it. */
    network: z.boolean().default(false),
    /**
     * Hosts sandboxes may reach besides the package registries and the agents' model APIs:
     * "name" (ports 80 and 443), "name:port" or "*.domain". Never a loopback, private or
     * link-local address, whatever the name resolves to.
     */
    allowHosts: z
      .array(
        z
          .string()
          .regex(ALLOW_HOST, 'must be a host name, host:port or *.domain')
          .superRefine((entry, ctx) => {
            const problem = localHostProblem(entry);
            if (problem) ctx.addIssue({ code: 'custom', message: problem });
          }),
      )
      .max(100)
      .optional(),
    limits: SandboxLimitsSpec.optional(),
  })
  .strict();

/** An agent that fixes the integrated tree (a conflicted merge, failing tests), within bounds. */
export const FixerSpec = z
  .object({
    agent: AgentSpec,
    /** Invocations: per conflicting sub-task for the resolver, per run for repair. Default 2. */
    maxRounds: z.number().int().min(1).max(10).default(2),
    /** Dollars all its invocations together may spend. Unlimited by default. */
    budgetUsd: z.number().positive().optional(),
  })
  .strict();
export type FixerSpec = z.infer<typeof FixerSpec>;

/**
 * Hidden tests live in a repository of their own: the worker fetches them host-side, so the
 * request (and workflow history) names only where they are, never their paths or contents.
 * Every file of `ref` is placed at the same path of the integrated tree for the test runs.
 */
const repoUrl = z.string().superRefine((v, ctx) => {
  const problem = repoUrlProblem(v);
  if (problem) ctx.addIssue({ code: 'custom', message: `repository ${problem}` });
});

export const OracleSpec = z
  .object({
    // Optional here so that the old form gets its own message rather than "repo is required".
    repo: repoUrl.optional(),
    ref: refName.default('main'),
    /** The old inline form, refused: its contents would sit in workflow history. */
    files: z.unknown().optional(),
  })
  .strict()
  .superRefine((o, ctx) => {
    if (o.files !== undefined) {
      ctx.addIssue({
        code: 'custom',
        path: ['files'],
        message:
          'is no longer accepted (oracle contents would be stored in workflow history); put the hidden tests in a repository and name it with oracle: { repo: <url>, ref: <branch> }',
      });
    } else if (o.repo === undefined) ctx.addIssue({ code: 'custom', path: ['repo'], message: 'is required' });
  })
  .transform(({ repo, ref }) => ({ repo: repo!, ref }));

/** The measure command, and when a regression of one of its metrics holds the push for a person. */
const MeasureSpec = z
  .object({
    cmd: z.string().min(1, 'must not be empty'),
    /**
     * Holds the push (the push gate opens even when its mode is auto, saying why) when `metric`
     * is worse than the base's by more than `maxPercent` percent; `direction` says which way is
     * worse (default lower-is-better: a time, a size).
     */
    holdOnRegression: z
      .object({
        metric: z.string().regex(/^[A-Za-z][\w.:/-]{0,63}$/, 'must be a metric name as the command prints it'),
        maxPercent: z.number().min(0, 'must be 0 or more'),
        direction: z.enum(['lower-is-better', 'higher-is-better']).optional(),
      })
      .strict()
      .optional(),
  })
  .strict();
/** Review rounds after the push (request.review). */
export const ReviewSpec = z
  .object({
    /** Revision rounds the run takes at most (the one home of this limit). Default 3. */
    rounds: z.number().int().min(1).max(20).default(3),
    /** The agent of comments on no path, or on a path no sub-task owns; default the first sub-task's agent. */
    reviser: AgentSpec.optional(),
    /** How long the run waits for the next comment before it ends with its last push. Default a week. */
    timeoutMinutes: waitMinutes.default(7 * 24 * 60),
    /**
     * With land: pr, seconds between two reads of the PR's reviews and comments (a webhook
     * receiver on the worker makes the run read at once). Default 30.
     */
    pollSeconds: z.number().int().min(1, 'must be at least 1').max(3600, 'must be at most 3600').default(30),
  })
  .strict();
export type ReviewSpec = z.infer<typeof ReviewSpec>;

/** What a notification is sent for. */
export const NOTIFY_EVENTS = ['gate', 'question', 'review-round-started', 'review-round-ended', 'run-ended'] as const;
export type NotifyEvent = (typeof NOTIFY_EVENTS)[number];

const ENV_NAME = /^[A-Z_][A-Z0-9_]{0,99}$/;

/**
 * A webhook. `url` sits in the run's history and status, so it may hold no secret; a secret URL
 * (Slack's webhooks are) is named by `urlEnv`, a variable of the worker's environment.
 */
export const NotifySpec = z
  .object({
    url: z
      .string()
      .max(2_000)
      .superRefine((v, ctx) => {
        const problem = notifyUrlProblem(v);
        if (problem) ctx.addIssue({ code: 'custom', message: problem });
      })
      .optional(),
    urlEnv: z.string().regex(ENV_NAME, 'must be an environment variable name (A-Z, 0-9, _)').optional(),
    format: z.enum(['json', 'slack']).default('json'),
    /** The events sent; default all of them. */
    events: z.array(z.enum(NOTIFY_EVENTS)).min(1, 'must name at least one event').optional(),
  })
  .strict()
  .superRefine((n, ctx) => {
    if ((n.url === undefined) === (n.urlEnv === undefined))
      ctx.addIssue({ code: 'custom', path: ['url'], message: 'give exactly one of url and urlEnv' });
  });
export type NotifySpec = z.infer<typeof NotifySpec>;

/**
 * Why a webhook URL is refused: https only, or http to this host's loopback (a local receiver,
 * tests), and never credentials. The URL is not repeated: it may hold the very secret refused.
 */
export function notifyUrlProblem(url: string): string | undefined {
  const m = /^(https?):\/\/([^/?#]*)([/?#].*)?$/i.exec(url);
  if (!m || /[\x00-\x20]/.test(url)) return 'must be an https:// URL (or http:// to 127.0.0.1, [::1] or localhost)';
  const [, scheme, authority] = m;
  if (authority.includes('@'))
    return 'must not contain credentials (user:password@); name a secret URL with urlEnv instead';
  const host = authority.replace(/:\d+$/, '').toLowerCase();
  if (host === '') return 'must name a host';
  if (scheme.toLowerCase() === 'http' && !['127.0.0.1', '[::1]', 'localhost'].includes(host))
    return 'uses plain http to a host other than loopback; use https';
  return undefined;
}

// ---- Landing as a pull request, and starting from an issue (issue 20) ----

/** Where the forge's REST API is: an http(s) URL without credentials, query or fragment. */
const apiUrl = z.string().superRefine((v, ctx) => {
  let url: URL | undefined;
  try {
    url = new URL(v);
  } catch {
    url = undefined;
  }
  if (!url || !/^https?:$/.test(url.protocol) || url.username || url.password || url.search || url.hash)
    ctx.addIssue({ code: 'custom', message: `"${v}" is not an http(s) URL without credentials, query or fragment` });
});

export const ForgeSpec = z
  .object({
    kind: z.literal('github'),
    /** owner/name of the repository on the forge. */
    repo: z.string().superRefine((v, ctx) => {
      const problem = repoNameProblem(v);
      if (problem) ctx.addIssue({ code: 'custom', message: problem });
    }),
    /** The REST API's base URL. Default https://api.github.com; GitHub Enterprise: https://<host>/api/v3. */
    baseUrl: apiUrl.optional(),
  })
  .strict();

/**
 * Checks after the push (land: pr): the run waits for the forge's checks on each commit it pushes
 * to the PR's branch; failing ones start a bounded CI-fix round (leader/checks.ts).
 */
export const ChecksSpec = z
  .object({
    /** CI-fix rounds the run takes at most; 0 waits and reports only. Default 2. */
    rounds: z.number().int().min(0, 'must be 0 or more').max(10, 'must be at most 10').default(2),
    /** How long the run waits for a pushed commit's checks to complete. Default 60. */
    timeoutMinutes: waitMinutes.default(60),
    /** How often the run reads the checks while it waits. Default 30. */
    pollSeconds: z.number().min(1, 'must be at least 1 second').max(3600, 'must be at most 3600 seconds').default(30),
    /** The agent of a CI-fix round; default the agent of the sub-task that takes it (the first integrated one). */
    fixer: AgentSpec.optional(),
  })
  .strict();
export type ChecksSpec = z.infer<typeof ChecksSpec>;

const LandPr = z
  .object({
    kind: z.literal('pr'),
    /** The branch the tested commit is pushed to, which the PR proposes. Default flotilla/<run id>. */
    branch: refName.optional(),
    /** Open the PR as a draft. Default false. */
    draft: z.boolean().default(false),
    labels: z.array(boundedText(50).min(1, 'must not be empty')).max(20, 'at most 20 labels').optional(),
    /** Logins of people, or org/team for a team. */
    reviewers: z
      .array(
        z.string().regex(/^[A-Za-z0-9][A-Za-z0-9-]{0,38}(\/[A-Za-z0-9_.-]{1,100})?$/, 'must be a login or org/team'),
      )
      .max(15, 'at most 15 reviewers')
      .optional(),
    /** The PR's title. Default: the issue's title, or the objective's first line. */
    title: boundedText(256).min(1, 'must not be empty').optional(),
    /** Wait for the PR's checks after each push, and fix failing ones in CI-fix rounds (ChecksSpec); absent: the run ends once the PR is open. */
    checks: ChecksSpec.optional(),
  })
  .strict();

/**
 * How the tested commit lands. push (the default): to repo.targetRef, with a compare-and-swap.
 * pr: to a branch of its own (with the same compare-and-swap), proposed as a pull request into
 * repo.targetRef; the run ends once the PR is open, or with `review` once it is merged or closed.
 * `pr` alone is `{ kind: pr }`.
 */
export const LandSpec = z
  .union([
    z.enum(['push', 'pr']),
    z.discriminatedUnion('kind', [z.object({ kind: z.literal('push') }).strict(), LandPr]),
  ])
  .transform((v) =>
    v === 'pr' ? { kind: 'pr' as const, draft: false } : v === 'push' ? { kind: 'push' as const } : v,
  );
export type LandSpec = z.output<typeof LandSpec>;

/** An issue's page on the forge: https://<host>/<owner>/<name>/issues/<n>. */
const issueUrl = boundedText(1000).superRefine((v, ctx) => {
  if (!issueOfUrl(v))
    ctx.addIssue({
      code: 'custom',
      message: `"${v}" is not an issue URL (https://<host>/<owner>/<name>/issues/<number>)`,
    });
});

/** The forge of a request: its `forge` field, or the forge its https remote URL is on. */
export function forgeOf(req: { repo: { url: string }; forge?: ForgeAddress }): ForgeAddress | undefined {
  return req.forge ?? forgeOfRemote(req.repo.url);
}

/**
 * The forge and number of a request's issue: on the request's forge (the issue's own repository
 * there), or, without one, on the forge the issue's URL names.
 */
export function issueOf(req: { repo: { url: string }; forge?: ForgeAddress; issue?: string }) {
  const issue = req.issue === undefined ? undefined : issueOfUrl(req.issue);
  if (!issue) return undefined;
  const forge = forgeOf(req);
  if (forge && forgeHost(forge) === issue.host) return { forge: { ...forge, repo: issue.repo }, number: issue.number };
  // Without a forge of its own the run reads the issue where its https URL says.
  const named =
    forge || !req.issue!.startsWith('https:') ? undefined : forgeOfRemote(`https://${issue.host}/${issue.repo}`);
  return named && { forge: named, number: issue.number };
}

/** A PR and an issue need a forge; a PR's branch is not the one it merges into. */
function checkForge(req: RequestFields, ctx: z.RefinementCtx): void {
  const forge = forgeOf(req);
  if (req.land?.kind === 'pr' && !forge)
    ctx.addIssue({
      code: 'custom',
      path: ['land'],
      message: `is pr, which needs a forge: repo.url is not an https URL of github.com or GitHub Enterprise; name one with forge: { kind: github, repo: owner/name }`,
    });
  const into = req.repo.targetRef ?? req.repo.baseRef;
  if (req.land?.kind === 'pr' && req.land.branch === into)
    ctx.addIssue({
      code: 'custom',
      path: ['land', 'branch'],
      message: `is "${into}", the branch the PR merges into; give another`,
    });
  if (req.issue !== undefined && issueOfUrl(req.issue) && !issueOf(req))
    ctx.addIssue({
      code: 'custom',
      path: ['issue'],
      message: forge
        ? `is on ${issueOfUrl(req.issue)!.host}, not on the run's forge (${forgeHost(forge)})`
        : 'is not an https URL, and the run names no forge to read it from (give forge: { kind: github, repo, baseUrl })',
    });
  if (!req.objective && req.issue === undefined)
    ctx.addIssue({ code: 'custom', path: ['objective'], message: 'is required unless the request names an issue' });
}

const RequestFields = z
  .object({
    /** What the run is for. With `issue`, optional: the issue's title and body become the objective, and this is added to it. */
    objective: boundedText(MAX_CHARS.objective).default(''),
    repo: z
      .object({
        url: repoUrl,
        baseRef: refName.default('main'),
        /** Where the result is pushed. Defaults to baseRef. */
        targetRef: refName.optional(),
      })
      .strict(),
    /** The plan. Without it, a planner agent proposes one (see `planner`). */
    subTasks: z
      .array(SubTask)
      .min(1, 'must list at least one sub-task')
      .max(MAX_SUB_TASKS, `at most ${MAX_SUB_TASKS} sub-tasks`)
      .optional(),
    /** The agent that plans when subTasks is absent; defaults to `agent`. It sees a read-only checkout. */
    planner: AgentSpec.optional(),
    /**
     * Paths every sub-task may change besides its own (a route table, a changelog). Changes to
     * them meet in integration, where overlapping edits are conflicts.
     */
    sharedPaths: z.array(repoPath).default([]),
    /**
     * Resolves a sub-task's conflicting merge in the integration sandbox; when it cannot, the
     * sub-task is redone once on top of the integrated tree. Without it a conflict ends the run.
     */
    resolver: FixerSpec.optional(),
    /** Fixes the integrated tree when the tests fail on it. Without it failing tests end the run. */
    repair: FixerSpec.optional(),
    /**
     * Hidden tests: fetched host-side and written, read-only, only into the test sandbox while
     * the tests run; never shown to an agent, committed, pushed or put in workflow history.
     */
    oracle: OracleSpec.optional(),
    /** The agent each sub-task runs unless it names its own. */
    agent: AgentSpec.optional(),
    testCmd: z.string().min(1, 'must not be empty'),
    setupCmd: z.string().min(1).optional(),
    /**
     * An observe-only command (a benchmark, a coverage script) run after the tests on the base and
     * on the result, printing `name value` lines; the two are compared at the push gate.
     */
    measure: MeasureSpec.optional(),
    // A prefault, parsed like a given value: zod leaves the default of a transformed schema out of the JSON Schema.
    limits: Limits.prefault({
      maxParallel: 4,
      agentTimeoutMinutes: DEFAULT_AGENT_TIMEOUT_MINUTES,
      commandTimeoutMinutes: 10,
      suspendTimeoutMinutes: 24 * 60,
      heartbeatTimeoutSeconds: 30,
      hostTimeoutSeconds: 300,
      checkpointIntervalSeconds: 300,
      retries: 1,
      testEachMerge: false,
      replans: 2,
    }),
    /** Where people approve: the plan before sub-tasks start, the tested result before the push. */
    gates: z
      .object({ plan: Gate.default(autoGate), push: Gate.default(autoGate) })
      .strict()
      .default({ plan: autoGate, push: autoGate }),
    sandbox: SandboxSpec.default({ provider: 'local', network: false }),
    /** What sub-tasks' commits may contain: file sizes and counts, symlinks, submodules. */
    policy: CommitPolicy.prefault({}),
    /**
     * What a sub-task that still fails after its retries does to the run. fail: the run ends,
     * what runs is cancelled, nothing is pushed. continue: the run goes on without it (and
     * without what depends on it), and says what was dropped. replan: the planner proposes the
     * remaining sub-tasks on the integration head (limits.replans rounds). Default fail.
     */
    onFailure: z.enum(['fail', 'replan', 'continue']).default('fail'),
    /**
     * The failed run this run continues (`flotilla continue`): what it integrated and every
     * finished sub-task's verified commits are reused, checked on the host; only the rest runs.
     */
    continues: z
      .object({ runId: boundedText(1000).regex(/^[^\x00-\x1f]+$/, 'must be a workflow id') })
      .strict()
      .optional(),
    // ---- Review rounds and notifications (issue 20) ----
    /**
     * Review rounds: after the push the run waits in the review phase for comments (`flotilla
     * revise`, and with land: pr the PR's review comments); each batch starts a revision round
     * pushed to the same branch, until `flotilla finish`, the timeout, or (land: pr) the PR merged
     * or closed ends it; the round limit and the budget bound the rounds. Absent: the run ends at
     * its push (land: pr: once its PR is open).
     */
    review: ReviewSpec.optional(),
    /** Webhooks told when the run needs a person or ends (JSON, or Slack's shape); never fail the run. */
    notify: z.array(NotifySpec).max(10, 'at most 10 webhooks').optional(),
    // ---- issue 20: pull requests and issues ----
    /** How the tested commit lands: push (default) or pr (a pull request; see LandSpec). */
    land: LandSpec.optional(),
    /** The forge (GitHub) of the repository, when repo.url does not say it (an ssh or file remote, a test double). */
    forge: ForgeSpec.optional(),
    /** An issue to work on: its title and body become the objective, the run comments its link there, and a PR closes it. */
    issue: issueUrl.optional(),
  })
  .strict();

type RequestFields = z.output<typeof RequestFields>;

/** The rules across fields, in the order their problems are listed. */
export const LeaderRequest = RequestFields.superRefine((req, ctx) => {
  const size = JSON.stringify(req).length;
  if (size > MAX_CHARS.request)
    ctx.addIssue({ code: 'custom', message: `is ${size} characters as JSON; at most ${MAX_CHARS.request}` });
  checkSubTasks(req, ctx);
  checkDependencies(req, ctx);
  checkRoles(req, ctx);
  checkPaths(req, ctx);
  checkForge(req, ctx);
});

/** A plan or a way to make one; unique ids; an agent for every sub-task, with the network it needs. */
function checkSubTasks(req: RequestFields, ctx: z.RefinementCtx): void {
  if (!req.subTasks && !req.planner && !req.agent) {
    ctx.addIssue({
      code: 'custom',
      path: ['subTasks'],
      message: 'is required when the request has neither a "planner" nor a default "agent"',
    });
  }
  const seen = new Map<string, number>();
  (req.subTasks ?? []).forEach((t, i) => {
    const first = seen.get(t.id);
    if (first !== undefined) {
      ctx.addIssue({
        code: 'custom',
        path: ['subTasks', i, 'id'],
        message: `duplicate id "${t.id}" (also subTasks[${first}])`,
      });
    } else seen.set(t.id, i);
    const agent = t.agent ?? req.agent;
    if (!agent) {
      ctx.addIssue({
        code: 'custom',
        path: ['subTasks', i, 'agent'],
        message: 'is required when the request has no default "agent"',
      });
    } else if (agent.kind !== 'shell' && !req.sandbox.network) {
      ctx.addIssue({
        code: 'custom',
        path: ['sandbox', 'network'],
        message: `must be true: sub-task "${t.id}" runs ${agent.kind}, which calls its model API from the sandbox`,
      });
    }
  });
}

/** The planner and the fixers need the network for a model API; allowed hostnames need the network at all. */
function checkRoles(req: RequestFields, ctx: z.RefinementCtx): void {
  for (const [role, agent] of [
    ['planner', req.planner],
    ['resolver', req.resolver?.agent],
    ['repair agent', req.repair?.agent],
    ['reviser', req.review?.reviser],
    ['CI fixer', req.land?.kind === 'pr' ? req.land.checks?.fixer : undefined],
  ] as const) {
    if (agent && agent.kind !== 'shell' && !req.sandbox.network) {
      ctx.addIssue({
        code: 'custom',
        path: ['sandbox', 'network'],
        message: `must be true: the ${role} runs ${agent.kind}, which calls its model API from the sandbox`,
      });
    }
  }
  if (req.sandbox.allowHosts?.length && !req.sandbox.network) {
    ctx.addIssue({ code: 'custom', path: ['sandbox', 'allowHosts'], message: 'applies only with network: true' });
  }
}

/**
 * A path is owned or shared, never both. Owned paths of different sub-tasks may overlap: such
 * sub-tasks are run one after the other (src/contracts/plan.ts), never at once.
 */
function checkPaths(req: RequestFields, ctx: z.RefinementCtx): void {
  const subTasks = req.subTasks ?? [];
  const owners: { task: number; path: string }[] = [];
  subTasks.forEach((t, task) => t.ownedPaths.forEach((p) => owners.push({ task, path: normalizeRepoPath(p) })));
  req.sharedPaths.forEach((raw, i) => {
    const shared = normalizeRepoPath(raw);
    const owner = owners.find((o) => pathIsUnder(shared, o.path) || pathIsUnder(o.path, shared));
    if (owner) {
      ctx.addIssue({
        code: 'custom',
        path: ['sharedPaths', i],
        message: `"${shared || '.'}" overlaps "${owner.path || '.'}" owned by sub-task "${subTasks[owner.task].id}"; a path is either owned or shared`,
      });
    }
  });
}

/** Dependencies name other sub-tasks of the plan and never form a cycle; replanning needs a planner. */
function checkDependencies(req: RequestFields, ctx: z.RefinementCtx): void {
  for (const p of dependencyProblems(req.subTasks ?? []))
    ctx.addIssue({
      code: 'custom',
      path: ['subTasks', p.index, 'dependsOn', ...(p.dep === undefined ? [] : [p.dep])],
      message: p.message,
    });
  if (req.onFailure === 'replan' && !req.planner && !req.agent)
    ctx.addIssue({
      code: 'custom',
      path: ['onFailure'],
      message: 'is "replan", which needs an agent to plan: give a "planner" or a default "agent"',
    });
}
export type LeaderRequest = z.infer<typeof LeaderRequest>;
/** A request whose plan is settled: given by the caller or proposed by the planner. */
export type PlannedRequest = LeaderRequest & { subTasks: SubTask[] };
export type LeaderRequestInput = z.input<typeof LeaderRequest>;

/**
 * Why `task` cannot join the plan of `req` (its id, paths, dependencies and agent, the plan's
 * size), in the words a request with it would be refused in; empty when it can.
 */
export function additionProblems(req: PlannedRequest, task: SubTask): string[] {
  const parsed = LeaderRequest.safeParse({ ...req, subTasks: [...req.subTasks, task] }, { reportInput: true });
  if (parsed.success) return [];
  const at = `subTasks[${req.subTasks.length}]`;
  return describeIssues(parsed.error.issues).map((p) => (p.startsWith(at) ? `subTask${p.slice(at.length)}` : p));
}

/** A sub-task's agent: its own, the request's default, or (a planned sub-task without either) the planner's. */
export function agentOf(req: LeaderRequest, task: SubTask): AgentSpec {
  // Validation guarantees one of them: a sub-task without an agent needs a default, a request without sub-tasks a planner or a default.
  return (task.agent ?? req.agent ?? req.planner)!;
}

export class RequestError extends Error {
  constructor(readonly problems: string[]) {
    super(`invalid request:\n  - ${problems.join('\n  - ')}`);
    this.name = 'RequestError';
  }
}

function formatPath(path: readonly PropertyKey[], root: string): string {
  let out = '';
  for (const p of path) out += typeof p === 'number' ? `[${p}]` : `${out ? '.' : ''}${String(p)}`;
  return out || root;
}

/** What a value is, in the words of an error message: "a string", "null", "an array". */
function kindOf(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'number' && !Number.isFinite(value)) return String(value);
  const t = typeof value;
  return /^[aeiou]/.test(t) ? `an ${t}` : `a ${t}`;
}

/** One line per problem, naming the field and the real reason. Issues must carry their input (`reportInput`). */
export function describeIssues(issues: readonly z.core.$ZodIssue[], root = '(request)'): string[] {
  return issues.map((issue) => {
    const where = formatPath(issue.path, root);
    // With reportInput, a missing field is the only issue without an input.
    if ((issue.code === 'invalid_type' || issue.code === 'invalid_value') && issue.input === undefined)
      return `${where}: is required`;
    if (issue.code === 'invalid_type') return `${where}: expected ${issue.expected}, got ${kindOf(issue.input)}`;
    if (issue.code === 'unrecognized_keys')
      return `${where}: unknown field(s) ${issue.keys.map((k) => `"${k}"`).join(', ')}`;
    return `${where}: ${issue.message}`;
  });
}

/** Parses and validates a request; throws RequestError naming every bad field and why. */
export function parseLeaderRequest(input: unknown): LeaderRequest {
  const result = LeaderRequest.safeParse(input, { reportInput: true });
  if (result.success) return result.data;
  throw new RequestError(describeIssues(result.error.issues));
}
