import type { AgentSpec } from '../contracts/request';
import { CLAUDE_MODEL_API, ClaudeCodeHarness, claudeCodeRequirements } from './claude-code';
import { CODEX_MODEL_API, CodexHarness, codexRequirements } from './codex';
import { ShellHarness, shellRequirements } from './shell';
import type { AgentRequirements, Harness } from './types';

/** The model APIs of every agent kind, for a sandbox that must allow them all up front (E2B). */
export const MODEL_APIS = [CLAUDE_MODEL_API, CODEX_MODEL_API];

/** What a worker needs to run each kind of agent: one function per harness. */
export const REQUIREMENTS: Record<AgentSpec['kind'], () => AgentRequirements> = {
  shell: shellRequirements,
  'claude-code': claudeCodeRequirements,
  codex: codexRequirements,
};

export function harnessFor(spec: AgentSpec): Harness {
  switch (spec.kind) {
    case 'shell':
      return new ShellHarness(spec.command);
    case 'claude-code':
      return new ClaudeCodeHarness({
        model: spec.model,
        maxTurns: spec.maxTurns,
        appendSystemPrompt: spec.appendSystemPrompt,
      });
    case 'codex':
      return new CodexHarness({ model: spec.model, config: spec.config });
  }
}
