import type { AgentSpec } from '../spec';
import { ClaudeCodeHarness } from './claude-code';
import { CodexHarness } from './codex';
import { ShellHarness } from './shell';
import type { Harness } from './types';

export function harnessFor(spec: AgentSpec): Harness {
  switch (spec.kind) {
    case 'shell':
      return new ShellHarness(spec.command);
    case 'claude-code':
      return new ClaudeCodeHarness({ model: spec.model, maxTurns: spec.maxTurns, appendSystemPrompt: spec.appendSystemPrompt });
    case 'codex':
      return new CodexHarness({ model: spec.model, config: spec.config });
  }
}
