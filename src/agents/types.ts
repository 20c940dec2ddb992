/**
 * How Flotilla drives one kind of coding agent. Each agent CLI has its own adapter beside this
 * file; activities only ever see this interface.
 */
export interface AgentTask {
  workerId: string;
  objective: string;
  prompt: string;
  /** In-sandbox path of a file holding the prompt, for agents that prefer reading a file. */
  promptFile: string;
}

export interface AgentInvocation {
  /** Run with `bash -c` in the workspace. */
  command: string;
  /** Variables the agent needs, and nothing else: the sandbox adds only PATH, HOME and LANG. */
  env: Record<string, string>;
}

export interface Harness {
  readonly kind: string;
  invocation(task: AgentTask): AgentInvocation;
}
