import type { AgentSpec } from '../spec';
import { ShellHarness } from './shell';
import type { Harness } from './types';

export function harnessFor(spec: AgentSpec): Harness {
  switch (spec.kind) {
    case 'shell':
      return new ShellHarness(spec.command);
  }
}
