import type { AgentSpec } from '../contracts/request';
import { CLAUDE_MODEL_API, ClaudeCodeHarness } from './claude-code';
import { CODEX_MODEL_API, CodexHarness } from './codex';
import { ShellHarness } from './shell';
import type { Harness } from './types';

/** The model APIs of every agent kind, for a sandbox that must allow them all up front (E2B). */
export const MODEL_APIS = [CLAUDE_MODEL_API, CODEX_MODEL_API];

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
