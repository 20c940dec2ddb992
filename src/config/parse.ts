/**
 * The parsers of environment variables: each takes the raw value (undefined when unset) and the
 * variable's name, and returns the setting or throws an error naming the variable. Most throw a
 * ConfigError (the CLI's exit 2); the log settings and the sandbox uids and caps throw a plain
 * Error, as their readers always did, so a worker refusing them still exits 1.
 */
import type { SandboxLimitsRequest } from '../contracts/request';
import { ConfigError } from './error';

export type Parser<T> = (raw: string | undefined, name: string) => T;

/** A value, or undefined when unset or empty. */
export const text: Parser<string | undefined> = (raw) => raw || undefined;

/** A value as given, the empty string included; undefined when unset. */
export const value: Parser<string | undefined> = (raw) => raw;

/** A value as given, the empty string included; `fallback` when unset. */
export function valueOr(fallback: string): Parser<string> {
  return (raw) => raw ?? fallback;
}

/** A value, or `fallback` when unset or empty. */
export function textOr(fallback: string): Parser<string> {
  return (raw) => raw || fallback;
}

/** On when exactly "1". */
export const flag: Parser<boolean> = (raw) => raw === '1';

/** On when set to anything but the empty string (as NO_COLOR is). */
export const present: Parser<boolean> = (raw) => raw !== undefined && raw !== '';

/** One of `allowed`; `fallback` only when unset (an empty value is refused). */
export function oneOf<T extends string>(allowed: readonly T[], fallback: T): Parser<T> {
  return (raw, name) => {
    const value = raw ?? fallback;
    if (!(allowed as readonly string[]).includes(value))
      throw new Error(`${name}: must be one of ${allowed.join(', ')}, not "${value}"`);
    return value as T;
  };
}

/** Entries separated by `separator`, empty ones dropped. */
export function list(separator: RegExp | string, fallback = ''): Parser<string[]> {
  return (raw) => (raw ?? fallback).split(separator).filter((e) => e.trim() !== '');
}

/** An http(s) URL, or undefined when unset or empty. */
export const httpUrl: Parser<string | undefined> = (raw, name) => {
  if (!raw) return undefined;
  const url = URL.parse(raw);
  if (!url || !/^https?:$/.test(url.protocol))
    throw new ConfigError(
      `${name} must be an http:// or https:// URL (OTLP over HTTP), such as http://localhost:4318; not "${raw}"`,
    );
  return raw;
};

/** A value matching `pattern`, or undefined when unset or empty; `shape` says what it must be. */
export function matching(pattern: RegExp, shape: string): Parser<string | undefined> {
  return (raw, name) => {
    if (!raw) return undefined;
    if (!pattern.test(raw)) throw new ConfigError(`${name} must be ${shape}, not "${raw}"`);
    return raw;
  };
}

/** A port whose successor + 1000 is a port too (the embedded server's Web UI). */
export function port(fallback: number): Parser<number> {
  return (raw, name) => {
    if (raw === undefined || raw === '') return fallback;
    const n = Number(raw);
    if (!Number.isInteger(n) || n < 1 || n > 65535 - 1000)
      throw new ConfigError(
        `${name} must be a port number from 1 to 64535 (the Web UI uses port + 1000), not "${raw}"`,
      );
    return n;
  };
}

const UNITS: Record<string, number> = { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** "7d", "12h", "30m", "45s" or "0": milliseconds, or an error naming the option (or variable). */
export function parseAge(text: string, field = '--older-than'): number {
  const m = /^(\d+)([smhd])?$/.exec(text.trim());
  if (!m || (!m[2] && m[1] !== '0'))
    throw new Error(
      `${field} must be a whole number with a unit (s, m, h or d), such as 7d or 12h, or 0; not "${text}"`,
    );
  return Number(m[1]) * UNITS[m[2] ?? 's'];
}

/** A retention age longer than 0, as given and in milliseconds; undefined when unset or blank. */
export const retentionAge: Parser<{ text: string; ms: number } | undefined> = (raw, name) => {
  const text = raw?.trim();
  if (!text) return undefined;
  let ms: number;
  try {
    ms = parseAge(text, name);
  } catch (err) {
    throw new ConfigError((err as Error).message);
  }
  if (ms === 0)
    throw new ConfigError(
      `${name} must be longer than 0, such as 7d or 12h; unset FLOTILLA_RETENTION to turn retention off`,
    );
  return { text, ms };
};

/** Host uids for sandboxes, "first-last" (FLOTILLA_SANDBOX_UIDS). */
export function parseUidRange(text: string | undefined): { first: number; count: number } {
  const m = /^(\d+)-(\d+)$/.exec(text ?? '200000-265535');
  const [first, last] = m ? [Number(m[1]), Number(m[2])] : [NaN, NaN];
  if (!(first >= 1000 && last >= first && last < 2 ** 32 - 1)) {
    throw new Error(`FLOTILLA_SANDBOX_UIDS must be "first-last" with 1000 <= first <= last (got "${text}")`);
  }
  return { first, count: last - first + 1 };
}

/** Every limit a request may ask a sandbox for (sandbox.limits), each of which the worker may cap. */
const LIMITS: Record<LimitName, true> = {
  tmpMiB: true,
  workspaceMiB: true,
  workspaceFiles: true,
  processes: true,
  memoryMiB: true,
};
type LimitName = keyof SandboxLimitsRequest;
const LIMIT_NAMES = Object.keys(LIMITS);

/** The worker's caps from "memoryMiB=8192,processes=512" (FLOTILLA_SANDBOX_MAX_LIMITS). */
export function parseMaxLimits(text: string | undefined): Partial<Record<LimitName, number>> {
  const caps: Partial<Record<LimitName, number>> = {};
  for (const item of (text ?? '').split(',').filter((x) => x.trim())) {
    const [name, value] = item.split('=').map((x) => x.trim());
    if (!LIMIT_NAMES.includes(name))
      throw new Error(`FLOTILLA_SANDBOX_MAX_LIMITS: unknown limit "${name}" (known: ${LIMIT_NAMES.join(', ')})`);
    if (!/^[1-9]\d*$/.test(value ?? ''))
      throw new Error(`FLOTILLA_SANDBOX_MAX_LIMITS: ${name} must be a positive whole number (got "${value ?? ''}")`);
    caps[name as LimitName] = Number(value);
  }
  return caps;
}
