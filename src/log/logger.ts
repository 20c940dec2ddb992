/**
 * The worker's logs: Flotilla's own lines, and everything the Temporal SDK logs (its own
 * messages and the replay-safe `log` of workflows and activities), through one pino logger on
 * stderr. Quiet by default: the SDK's internals (the webpack report, state changes) only with
 * --verbose, and a failed workflow is one line, not a stack trace; its outcome is the run's
 * result, which the CLI reports.
 */
import { parseArgs } from 'node:util';
import { type LogLevel, type LogMetadata, type Logger, Runtime } from '@temporalio/worker';
import pino from 'pino';
import pretty from 'pino-pretty';
import { oneOf } from '../config/parse';
import { LOG_FORMATS, type LOG_LEVELS, setting } from '../config/variables';

export interface LogOptions {
  level: (typeof LOG_LEVELS)[number];
  format: (typeof LOG_FORMATS)[number];
}

/** --verbose and --log-format win over FLOTILLA_LOG_LEVEL and FLOTILLA_LOG_FORMAT. */
export function logOptions(args: string[], env: NodeJS.ProcessEnv = process.env): LogOptions {
  const { values } = parseArgs({ args, options: { verbose: { type: 'boolean' }, 'log-format': { type: 'string' } } });
  const level = values.verbose ? 'debug' : setting('FLOTILLA_LOG_LEVEL', env);
  const flag = values['log-format'];
  const format =
    flag !== undefined ? oneOf(LOG_FORMATS, 'text')(flag, '--log-format') : setting('FLOTILLA_LOG_FORMAT', env);
  return { level, format };
}

export function createLogger(opts: LogOptions): pino.Logger {
  const destination =
    opts.format === 'json'
      ? pino.destination({ fd: 2, sync: true })
      : pretty({
          destination: 2,
          sync: true,
          singleLine: true,
          // Keep an error's message on its line (stacks are already gone unless --verbose).
          errorLikeObjectKeys: [],
          colorize: false,
          translateTime: 'SYS:HH:MM:ss',
          // Identifiers a reader of one worker's terminal does not need on every line.
          ignore: 'pid,hostname,namespace,taskQueue,runId,sdkComponent,taskToken,attempt,isLocal',
        });
  return pino({ level: opts.level, base: undefined }, destination);
}

const RANK: Record<LogLevel, number> = { TRACE: 0, DEBUG: 1, INFO: 2, WARN: 3, ERROR: 4 };
const PINO: Record<LogLevel, 'trace' | 'debug' | 'info' | 'warn' | 'error'> = {
  TRACE: 'trace',
  DEBUG: 'debug',
  INFO: 'info',
  WARN: 'warn',
  ERROR: 'error',
};

/** The SDK's Logger interface, writing to pino. */
export class SdkLogger implements Logger {
  constructor(
    private readonly out: pino.Logger,
    private readonly verbose: boolean,
  ) {}

  log(level: LogLevel, message: string, meta: LogMetadata = {}): void {
    const internal = meta.sdkComponent === 'worker' || meta.sdkComponent === 'core';
    if (internal && !this.verbose && RANK[level] < RANK.WARN) return;
    this.out[PINO[level]](this.verbose ? meta : withoutStacks(meta), message);
  }

  trace(message: string, meta?: LogMetadata): void {
    this.log('TRACE', message, meta);
  }
  debug(message: string, meta?: LogMetadata): void {
    this.log('DEBUG', message, meta);
  }
  info(message: string, meta?: LogMetadata): void {
    this.log('INFO', message, meta);
  }
  warn(message: string, meta?: LogMetadata): void {
    this.log('WARN', message, meta);
  }
  error(message: string, meta?: LogMetadata): void {
    this.log('ERROR', message, meta);
  }
}

/** Errors reduced to their message: an expected failure (a rejected plan) is not a crash. */
function withoutStacks(meta: LogMetadata): LogMetadata {
  return Object.fromEntries(Object.entries(meta).map(([k, v]) => [k, v instanceof Error ? v.message : v]));
}

/**
 * Routes the SDK's logs, and the Rust core's (forwarded), to `out`. Must run before anything
 * touches the Temporal runtime (a connection, a worker).
 */
export function installSdkLogger(out: pino.Logger, opts: LogOptions): void {
  const verbose = opts.level === 'debug';
  Runtime.install({
    logger: new SdkLogger(out, verbose),
    telemetryOptions: { logging: { forward: {}, filter: { core: verbose ? 'INFO' : 'WARN', other: 'ERROR' } } },
  });
}
