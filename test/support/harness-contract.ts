/**
 * The contract every agent Harness must pass. Activities drive each agent CLI through this one
 * interface: its invocation starts the agent in a sandbox, its parser turns the output into
 * progress and an outcome (final message, question, cost, session). Anything a harness gets
 * wrong here (a lost prompt, a session a resume cannot continue, a session's total billed to one
 * invocation, a failure that reads like success) breaks runs in ways that are hard to see from
 * the outside. Each harness runs its real CLI in a real local sandbox (with network, so the
 * egress proxy lets it reach the scripted model server), driven by the same scripts.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { validSessionId } from '../../src/agents/carry-over';
import type { AgentOutcome, AgentTask, Harness, OutputParser } from '../../src/agents/types';
import { modelApiRules } from '../../src/sandbox/egress/rules';
import { LocalSandboxProvider } from '../../src/sandbox/local/provider';
import type { Sandbox } from '../../src/sandbox/types';
import { ModelServer, type RecordedRequest, userTexts } from './model-server';
import { tempDir } from './temp';

export interface AgentRun {
  outcome: AgentOutcome;
  exitCode: number;
  output: string;
  /** The requests the model server received during this invocation. */
  requests: RecordedRequest[];
}

/** Where agents run in tests: the scripted model server, and local sandboxes holding a small git repository. */
export class AgentLab {
  private constructor(
    readonly server: ModelServer,
    private readonly provider: LocalSandboxProvider,
  ) {}

  /** Both the server and the sandboxes' directory are released when the test file ends. */
  static async start(): Promise<AgentLab> {
    return new AgentLab(await ModelServer.start(), new LocalSandboxProvider(tempDir('agents')));
  }

  /** A networked sandbox whose workspace is a git repository with one commit. */
  async sandbox(key: string): Promise<Sandbox> {
    const sandbox = await this.provider.provision(key, { network: true });
    const seed = await sandbox.exec(
      'git init -q -b main && git config user.email agent@example.com && git config user.name Agent && ' +
        'echo "# demo" > README.md && git add -A && git commit -qm init',
      { timeoutMs: 30_000 },
    );
    expect(seed.exitCode, seed.output).toBe(0);
    return sandbox;
  }

  /**
   * Runs one invocation the way the agent activity does: its files written, passEnv copied from
   * the "host" environment, whose base URL the egress proxy then lets through.
   */
  async run(
    sandbox: Sandbox,
    harness: Harness,
    task: Partial<AgentTask> & { prompt: string },
    hostEnv: Record<string, string>,
    opts: { sessionCostUsd?: number; watch?: (parser: OutputParser, chunk: string) => void } = {},
  ): Promise<AgentRun> {
    const invocation = harness.invocation({
      subTaskId: 'w1',
      objective: 'test the harnesses',
      inputDir: sandbox.scratch,
      ...task,
    });
    for (const [file, content] of Object.entries(invocation.files)) await sandbox.writeFile(file, content);
    const env = { ...invocation.env };
    for (const name of harness.passEnv) if (hostEnv[name] !== undefined) env[name] = hostEnv[name];
    const parser = harness.parser(opts.sessionCostUsd);
    const firstRequest = this.server.requests.length;
    const result = await sandbox.exec(invocation.command, {
      env,
      timeoutMs: 45_000,
      onOutput: (chunk) => {
        parser.push(chunk);
        opts.watch?.(parser, chunk);
      },
      egress: modelApiRules(harness.modelApi, hostEnv),
    });
    return {
      outcome: parser.finish(result.exitCode),
      exitCode: result.exitCode,
      output: result.output,
      requests: this.server.requests.slice(firstRequest),
    };
  }

  /** Every user text the model was given in its latest request of conversation `key`. */
  heardBy(key: string): string {
    const latest = this.server.requests.filter((r) => r.conversation === key).at(-1);
    return latest ? userTexts(latest.body).join('\n') : '';
  }
}

/** What the agent does in one invocation. */
export interface ScriptedInvocation {
  /** Files it writes in the workspace (path relative to it, and content), one tool call each, in order. */
  writes?: Record<string, string>;
  /** Its final message. */
  say?: string;
  /** A question it ends by asking (after `say`). */
  ask?: string;
  /** Instead of a final message, its model API refuses with this error, and the agent fails. */
  error?: string;
}

/** One harness under the contract, and how to script its agent. */
export interface HarnessSubject {
  /** The worker's environment the harness's passEnv draws from (API keys, base URLs). */
  hostEnv(): Record<string, string>;
  /**
   * The harness to invoke for the conversation whose prompts contain `key`, its agent scripted
   * to do `invocations` one after another, the later ones as resumes of the first's session.
   */
  scripted(key: string, invocations: ScriptedInvocation[], sandbox: Sandbox): Harness;
  /** Everything the agent has been given in conversation `key`: prompts and resume messages. */
  heard(key: string, sandbox: Sandbox): Promise<string>;
}

export function harnessContract(name: string, lab: () => AgentLab, subject: HarnessSubject): void {
  const run = (
    sandbox: Sandbox,
    harness: Harness,
    task: Partial<AgentTask> & { prompt: string },
    sessionCostUsd?: number,
  ) => lab().run(sandbox, harness, task, subject.hostEnv(), { sessionCostUsd });
  const key = (label: string) => `${name.replace(/\W+/g, '-').toUpperCase()}-${label}`;

  describe(`harness contract: ${name}`, () => {
    describe('an invocation that edits the workspace and finishes', () => {
      const conversation = key('EDIT');
      const prompt = `Task ${conversation}: add a greeting (it's 'quoted' $HOME \`here\`).`;
      let sandbox: Sandbox;
      let harness: Harness;
      let done: AgentRun;
      beforeAll(async () => {
        sandbox = await lab().sandbox(conversation.toLowerCase());
        harness = subject.scripted(
          conversation,
          [{ writes: { 'src/greeting.txt': 'hello\n', 'src/farewell.txt': 'bye\n' }, say: 'Added the greeting.' }],
          sandbox,
        );
        done = await run(sandbox, harness, { prompt });
      });

      it('starts the agent in the workspace with its prompt verbatim, and the agent edits it', async () => {
        expect(done.exitCode, done.output).toBe(0);
        expect(await subject.heard(conversation, sandbox)).toContain(prompt);
        const text = async (file: string) =>
          Buffer.from(await sandbox.readFile(`${sandbox.workspace}/${file}`)).toString();
        expect(await text('src/greeting.txt')).toBe('hello\n');
        expect(await text('src/farewell.txt')).toBe('bye\n');
      });

      it('parses the output into an outcome: the final message, its turns and tool calls, nothing stopped it', () => {
        expect(done.outcome).toMatchObject({
          finalMessage: 'Added the greeting.',
          toolCalls: 2,
          hitTurnLimit: false,
          hitBudget: false,
        });
        expect(done.outcome.question).toBeUndefined();
        expect(done.outcome.turns).toBeGreaterThanOrEqual(1);
      });

      it('reports what the invocation cost and the session it can be resumed in', () => {
        expect(done.outcome.costUsd).toBeGreaterThan(0);
        expect(validSessionId(done.outcome.sessionId)).toBe(done.outcome.sessionId);
      });

      it('parses the same output to the same outcome however it is cut into chunks', () => {
        for (const size of [1, 7, done.output.length]) {
          const parser = harness.parser();
          for (let i = 0; i < done.output.length; i += size) parser.push(done.output.slice(i, i + size));
          expect(parser.finish(done.exitCode), `chunks of ${size}`).toEqual(done.outcome);
        }
      });
    });

    describe('a session that asks, and is resumed with the answer', () => {
      const conversation = key('ASK');
      const prompt = `Task ${conversation}: paint the fence.`;
      let sandbox: Sandbox;
      let asked: AgentRun;
      let resumed: AgentRun;
      beforeAll(async () => {
        sandbox = await lab().sandbox(conversation.toLowerCase());
        const harness = subject.scripted(
          conversation,
          [
            { writes: { 'primer.txt': 'grey\n' }, say: 'Primed it.', ask: 'which colour?' },
            { writes: { 'colour.txt': 'blue\n' }, say: 'Painted it blue.' },
          ],
          sandbox,
        );
        asked = await run(sandbox, harness, { prompt });
        const { sessionId, costUsd } = asked.outcome;
        resumed = await run(sandbox, harness, { prompt, sessionId, message: 'Blue, please.' }, costUsd);
      });

      it('ends the first invocation with the question', () => {
        expect(asked.exitCode, asked.output).toBe(0);
        expect(asked.outcome.question).toBe('which colour?');
      });

      it('continues the same session, with the answer reaching the agent', async () => {
        expect(resumed.exitCode, resumed.output).toBe(0);
        expect(resumed.outcome).toMatchObject({ sessionId: asked.outcome.sessionId, finalMessage: 'Painted it blue.' });
        expect(resumed.outcome.question).toBeUndefined();
        expect(await subject.heard(conversation, sandbox)).toContain('Blue, please.');
        expect(Buffer.from(await sandbox.readFile(`${sandbox.workspace}/colour.txt`)).toString()).toBe('blue\n');
      });

      it("costs the resumed invocation alone, not the session's total", () => {
        // Both invocations made the same replies; a parser that billed the session would double it.
        expect(resumed.outcome.costUsd).toBeGreaterThan(asked.outcome.costUsd * 0.5);
        expect(resumed.outcome.costUsd).toBeLessThan(asked.outcome.costUsd * 1.5);
      });
    });

    it('a failing agent exits non-zero, with an outcome that says why', async () => {
      const conversation = key('FAIL');
      const sandbox = await lab().sandbox(conversation.toLowerCase());
      const reason = 'scripted failure: the model is not available';
      const harness = subject.scripted(conversation, [{ error: reason }], sandbox);
      const failed = await run(sandbox, harness, { prompt: `Task ${conversation}: try.` });
      expect(failed.exitCode).not.toBe(0);
      expect(failed.outcome.finalMessage).toContain(reason);
      expect(failed.outcome.question).toBeUndefined();
    });
  });
}
