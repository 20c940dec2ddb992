/**
 * OpenTelemetry tracing of runs, on only when an OTLP endpoint is configured with the standard
 * variables (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, or OTEL_EXPORTER_OTLP_ENDPOINT plus /v1/traces;
 * OTEL_EXPORTER_OTLP_HEADERS for a collector that wants a key; OTEL_SERVICE_NAME). Without one,
 * this module loads nothing: the OpenTelemetry packages are required inside startTracing.
 *
 * A trace follows a run from the client that starts it (`flotilla start`) through the leader
 * and sub-task workflows to every activity, using Temporal's own interceptors: the client's puts
 * the trace context in the workflow's headers, the workflows' (compiled into the workflow
 * bundle, see TRACED_WORKFLOW_MODULES) pass it on to children and activities and hand their
 * finished spans to the worker through a sink, the activities' continue it on the worker.
 */
import type { ActivityInterceptorsFactory, InjectedSinks } from '@temporalio/worker';
import type { WorkflowClientInterceptor } from '@temporalio/client';
import type { ReadableSpan, SpanProcessor } from '@opentelemetry/sdk-trace-base';
import { setting } from '../config/variables';

/** Where the workflow interceptors live: bundled into the workflow code of a traced worker. */
export const TRACED_WORKFLOW_MODULES = [
  require.resolve('@temporalio/interceptors-opentelemetry/lib/workflow-interceptors'),
];

export interface Tracing {
  /** The OTLP endpoint spans go to, for the worker's start line (without any credentials in the URL). */
  endpoint: string;
  clientInterceptors: WorkflowClientInterceptor[];
  activityInterceptors: ActivityInterceptorsFactory[];
  /** The sink through which workflow code, which cannot do I/O, hands over its finished spans. */
  sinks: InjectedSinks<import('@temporalio/interceptors-opentelemetry').OpenTelemetrySinks>;
  /** Sends the spans still buffered; call before the process exits. */
  flush(): Promise<void>;
}

/**
 * The traces endpoint the OTLP exporter will use, if the environment names one; an endpoint that
 * is not an http(s) URL is refused, naming its variable.
 */
export function tracesEndpoint(env: NodeJS.ProcessEnv = process.env): string | undefined {
  const traces = setting('OTEL_EXPORTER_OTLP_TRACES_ENDPOINT', env);
  if (traces) return traces;
  const base = setting('OTEL_EXPORTER_OTLP_ENDPOINT', env);
  return base && `${base.replace(/\/+$/, '')}/v1/traces`;
}

let started: Tracing | undefined;

/**
 * Tracing for this process, if an endpoint is configured; undefined (and nothing loaded) if not.
 * Once per process: the context manager and propagator it installs are global.
 */
export function startTracing(
  defaultServiceName: string,
  warn: (line: string) => void,
  env: NodeJS.ProcessEnv = process.env,
): Tracing | undefined {
  const endpoint = tracesEndpoint(env);
  if (!endpoint) return undefined;
  if (started) return started;
  const url = new URL(endpoint);
  const shown = `${url.protocol}//${url.host}${url.pathname}`;
  const { AsyncLocalStorageContextManager } =
    require('@opentelemetry/context-async-hooks') as typeof import('@opentelemetry/context-async-hooks');
  const { setGlobalErrorHandler } = require('@opentelemetry/core') as typeof import('@opentelemetry/core');
  const { OTLPTraceExporter } =
    require('@opentelemetry/exporter-trace-otlp-http') as typeof import('@opentelemetry/exporter-trace-otlp-http');
  const { Resource } = require('@opentelemetry/resources') as typeof import('@opentelemetry/resources');
  const { BasicTracerProvider, BatchSpanProcessor } =
    require('@opentelemetry/sdk-trace-base') as typeof import('@opentelemetry/sdk-trace-base');
  const otel =
    require('@temporalio/interceptors-opentelemetry') as typeof import('@temporalio/interceptors-opentelemetry');

  // An unreachable collector loses spans, never a run; said once per distinct reason, not every batch.
  const said = new Set<string>();
  setGlobalErrorHandler((err) => {
    const reason = `tracing: spans not exported to ${shown}: ${err instanceof Error ? err.message : String(err)}`;
    if (!said.has(reason)) warn(reason);
    said.add(reason);
  });
  const resource = new Resource({ 'service.name': setting('OTEL_SERVICE_NAME', env) ?? defaultServiceName });
  const processor = new BatchSpanProcessor(new OTLPTraceExporter({ url: endpoint }));
  const provider = new BasicTracerProvider({ resource });
  provider.addSpanProcessor(processor);
  // Global, because the interceptors read the active context and inject it through the global API.
  provider.register({ contextManager: new AsyncLocalStorageContextManager().enable() });
  const tracer = provider.getTracer('flotilla');
  started = {
    endpoint: shown,
    clientInterceptors: [new otel.OpenTelemetryWorkflowClientInterceptor({ tracer })],
    activityInterceptors: [
      (ctx) => ({
        inbound: new otel.OpenTelemetryActivityInboundInterceptor(ctx, { tracer }),
        outbound: new otel.OpenTelemetryActivityOutboundInterceptor(ctx),
      }),
    ],
    sinks: { exporter: otel.makeWorkflowExporter(withoutPayloads(processor), resource) },
    flush: () =>
      provider.forceFlush().catch((err: Error) => warn(`tracing: spans not exported to ${shown}: ${err.message}`)),
  };
  return started;
}

/**
 * Attributes a workflow span may carry. The workflow sink copies the whole WorkflowInfo into
 * each span, memo, search attributes and a previous run's result included: only identifiers
 * leave the worker.
 */
const SPAN_ATTRIBUTES = new Set([
  'temporalWorkflowId',
  'run_id',
  'temporalActivityId',
  'temporalUpdateId',
  'workflowId',
  'runId',
  'workflowType',
  'taskQueue',
  'namespace',
  'attempt',
]);

function withoutPayloads(next: SpanProcessor): SpanProcessor {
  return {
    onStart: (span, context) => next.onStart(span, context),
    onEnd: (span: ReadableSpan) => {
      const attributes = Object.fromEntries(
        Object.entries(span.attributes).filter(([k, v]) => SPAN_ATTRIBUTES.has(k) && typeof v !== 'object'),
      );
      next.onEnd({ ...span, spanContext: () => span.spanContext(), attributes });
    },
    forceFlush: () => next.forceFlush(),
    shutdown: () => next.shutdown(),
  };
}
