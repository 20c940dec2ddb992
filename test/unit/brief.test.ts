/**
 * The brief every sub-task's agent is given: what it says, its bound at 100 sub-tasks, and how
 * each kind of agent receives it (a shell agent's files and variables, the prompt Claude Code
 * and Codex read). That it reaches each agent in a real run is test/e2e/brief.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { OTHERS_MAX_CHARS, brief, otherSubTaskLines } from '../../src/contracts/brief';
import { ClaudeCodeHarness } from '../../src/agents/claude-code';
import { CodexHarness } from '../../src/agents/codex';
import { ShellHarness } from '../../src/agents/shell';
import type { AgentTask } from '../../src/agents/types';

const plan = (n: number) =>
  Array.from({ length: n }, (_, i) => ({
    id: `t${i}`,
    ownedPaths: [`pkg/t${i}/`, `docs/t${i}.md`],
    prompt: `Write module ${i}, with a long explanation of what it should do and why it matters to everyone\nand more lines`,
  }));

const context = {
  ownedPaths: ['api/', 'src/routes.ts'],
  sharedPaths: ['CHANGELOG.md'],
  others: ['web (owns web/): Build the page'],
};
const task = (over: Partial<AgentTask> = {}): AgentTask => ({
  subTaskId: 'api',
  objective: 'Serve greetings',
  prompt: 'Add the endpoint',
  inputDir: '/scratch',
  brief: context,
  ...over,
});

describe('the brief', () => {
  it('states the objective, the sub-task, its paths, that anything else is refused, and the others', () => {
    expect(brief(task(), context)).toBe(
      [
        '===== BEGIN FLOTILLA BRIEF: sub-task "api" =====',
        'You are one of a team of coding agents working on one repository in parallel, each on a sub-task of its own.',
        '',
        "The team's objective:\nServe greetings",
        '',
        'Your sub-task, "api":\nAdd the endpoint',
        '',
        'Paths you own: api/, src/routes.ts',
        'Shared paths, which every sub-task may change too: CHANGELOG.md',
        'Change nothing outside these paths. When you finish, Flotilla checks every path your work changed: a change anywhere else is refused, and the sub-task fails naming it.',
        '',
        'The other sub-tasks, which other agents do (leave their work to them):',
        '- web (owns web/): Build the page',
        '===== END FLOTILLA BRIEF: sub-task "api" =====',
      ].join('\n'),
    );
  });

  it('says "." is the whole repository, and leaves out shared paths and others when there are none', () => {
    const text = brief(task(), { ownedPaths: ['.'], sharedPaths: [], others: [] });
    expect(text).toContain('Paths you own: . (the whole repository)\n');
    expect(text).not.toContain('Shared paths');
    expect(text).not.toContain('other sub-tasks');
  });

  it('lists every other sub-task of a small plan, one line each, itself left out', () => {
    expect(otherSubTaskLines(plan(3), 't1')).toEqual([
      't0 (owns pkg/t0/, docs/t0.md): Write module 0, with a long explanation of what it should do and why ...',
      't2 (owns pkg/t2/, docs/t2.md): Write module 2, with a long explanation of what it should do and why ...',
    ]);
  });

  it('shrinks the others of 100 sub-tasks to OTHERS_MAX_CHARS, saying how many it left out', () => {
    const lines = otherSubTaskLines(plan(100), 't0');
    const total = lines.join('\n').length;
    expect(total).toBeLessThanOrEqual(OTHERS_MAX_CHARS);
    expect(total).toBeGreaterThan(OTHERS_MAX_CHARS - 200);
    const shown = lines.length - 1;
    expect(lines[0]).toMatch(/^t1 \(owns /);
    expect(lines.at(-1)).toBe(`… and ${99 - shown} more sub-task(s)`);
    // One long line is clipped, not dropped.
    const huge = [{ id: 'big', ownedPaths: Array.from({ length: 500 }, (_, i) => `p${i}`), prompt: 'x' }];
    const [line] = otherSubTaskLines(huge, 'other');
    expect(line.length).toBeLessThanOrEqual(160);
    expect(line).toMatch(/^big \(owns p0, p1, .*chars\)$/);
  });
});

describe('each kind of agent is briefed', () => {
  it('Claude Code and Codex read the brief as their prompt; a resumed session only the follow-up', () => {
    for (const harness of [new ClaudeCodeHarness({ binary: 'claude' }), new CodexHarness({ binary: 'codex' })]) {
      const files = harness.invocation(task({ interrupted: true })).files;
      const input = Object.entries(files).find(([file]) => file.endsWith('agent-input.md'))![1];
      expect(input.startsWith(brief(task(), context))).toBe(true);
      expect(input).toContain('A previous attempt at this task was interrupted');
      const resumed = harness.invocation(task({ sessionId: 's1', message: 'go on' })).files;
      expect(Object.values(resumed).join('\n')).not.toContain('FLOTILLA BRIEF');
    }
  });

  it("an agent that is no sub-task's (planner, fixers) gets its prompt unchanged", () => {
    const files = new ClaudeCodeHarness({ binary: 'claude' }).invocation(task({ brief: undefined })).files;
    expect(files['/scratch/agent-input.md']).toBe('Add the endpoint');
  });

  it('a shell agent finds the brief and its paths in files and variables; its prompt stays the prompt', () => {
    const { env, files } = new ShellHarness('true').invocation(task());
    expect(env).toMatchObject({
      FLOTILLA_PROMPT: 'Add the endpoint',
      FLOTILLA_BRIEF: brief(task(), context),
      FLOTILLA_BRIEF_FILE: '/scratch/brief.md',
      FLOTILLA_OWNED_PATHS: 'api/\nsrc/routes.ts',
      FLOTILLA_OWNED_PATHS_FILE: '/scratch/owned-paths.txt',
      FLOTILLA_SHARED_PATHS: 'CHANGELOG.md',
      FLOTILLA_SHARED_PATHS_FILE: '/scratch/shared-paths.txt',
    });
    expect(files['/scratch/brief.md']).toBe(brief(task(), context));
    expect(files['/scratch/owned-paths.txt']).toBe('api/\nsrc/routes.ts');
  });
});
