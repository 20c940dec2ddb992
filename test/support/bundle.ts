/**
 * The suite's workflow bundle, made once by the global setup: every worker a test runs in its
 * own process, and every replay, uses it instead of running webpack again. (Worker processes a
 * test spawns bundle for themselves, as `flotilla worker` does from a checkout.)
 */
import { inject } from 'vitest';

/** The workflow code as a worker without tracing runs it. */
export const workflowBundle = () => ({ codePath: inject('workflowBundle') });

/** The same code with OpenTelemetry's workflow interceptors, as a worker with tracing on runs it. */
export const tracedWorkflowBundle = () => ({ codePath: inject('tracedWorkflowBundle') });
