/** Any shell command as an agent: the prompt arrives in $FLOTILLA_PROMPT and $FLOTILLA_PROMPT_FILE. */
import type { AgentTask, Harness, AgentInvocation } from './types';

export class ShellHarness implements Harness {
  readonly kind = 'shell';

  constructor(private readonly command: string) {}

  invocation(task: AgentTask): AgentInvocation {
    return {
      command: this.command,
      env: {
        FLOTILLA_PROMPT: task.prompt,
        FLOTILLA_PROMPT_FILE: task.promptFile,
        FLOTILLA_WORKER_ID: task.workerId,
        FLOTILLA_OBJECTIVE: task.objective,
      },
    };
  }
}
