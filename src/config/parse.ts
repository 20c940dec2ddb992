/**
 * The parsers of environment variables: each takes the raw value (undefined when unset) and the
 * variable's name, and returns the setting or throws a ConfigError naming the variable, in one
 * line (the worker and the CLI exit 2 on it).
 */
import { type Stats, statSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
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
      throw new ConfigError(`${name}: must be one of ${allowed.join(', ')}, not "${value}"`);
    return value as T;
  };
}

/** Entries separated by `separator`, empty ones dropped. */
export function list(separator: RegExp | string, fallback = ''): Parser<string[]> {
  return (raw) => (raw ?? fallback).split(separator).filter((e) => e.trim() !== '');
}

/** An http(s) URL, or undefined when unset or empty; `what` says what it is for, with an example. */
export function httpUrl(what: string): Parser<string | undefined> {
  return (raw, name) => {
    if (!raw) return undefined;
    const url = URL.parse(raw);
    if (!url || !/^https?:$/.test(url.protocol))
      throw new ConfigError(`${name} must be an http:// or https:// URL ${what}; not "${raw}"`);
    return raw;
  };
}

/** A value that must not be empty when set; `fallback` when unset. */
export function nonEmptyOr(fallback: string): Parser<string> {
  return (raw, name) => {
    if (raw === undefined) return fallback;
    if (raw.trim() === '') throw new ConfigError(`${name} must not be empty; unset it for the default "${fallback}"`);
    return raw;
  };
}

/**
 * A directory, made later if it does not exist: the path, resolved. Whatever exists there, or
 * the nearest part of the path that exists, must be a directory (/dev/null is not).
 */
export function directoryOr(fallback: () => string): Parser<string> {
  return (raw, name) => {
    const dir = path.resolve(raw || fallback());
    for (let at = dir; ; at = path.dirname(at)) {
      let stats: Stats | undefined;
      try {
        stats = existing(at);
      } catch (err) {
        throw new ConfigError(`${name}: ${dir} cannot be used: ${(err as Error).message}`);
      }
      if (stats?.isDirectory()) return dir;
      if (stats) {
        const where = at === dir ? dir : `${dir}: ${at}`;
        throw new ConfigError(`${name} must be a directory, and ${where} is a file or a device, not a directory`);
      }
      if (at === path.dirname(at)) return dir;
    }
  };
}

/** What is at `file`, or undefined when nothing is (below a file too: ENOTDIR). */
function existing(file: string): Stats | undefined {
  try {
    return statSync(file);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR') return undefined;
    throw err;
  }
}

const DNS_NAME = /^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*\.?$/;

/** `host` of "host:port": a DNS name, an IPv4 address, or an IPv6 address in brackets. */
function isHost(host: string): boolean {
  const v6 = /^\[(.*)\]$/.exec(host)?.[1];
  return v6 !== undefined ? net.isIPv6(v6) : DNS_NAME.test(host);
}

/** "host" or "host:port" with a port from 1 to 65535, lowercased; undefined when it is neither. */
function hostAndPort(entry: string): { host: string; port?: number } | undefined {
  const m = /^(.*?)(?::(\d{1,5}))?$/.exec(entry.toLowerCase())!;
  const port = m[2] === undefined ? undefined : Number(m[2]);
  if (!isHost(m[1]) || (port !== undefined && (port < 1 || port > 65535))) return undefined;
  return { host: m[1], port };
}

/**
 * Hosts networked sandboxes may also reach (FLOTILLA_EGRESS_ALLOW): "name", "name:port",
 * "*.domain", an IPv4 address or a bracketed IPv6 one, each with or without a port. A wildcard
 * alone, a CIDR range or a URL is refused: the proxy matches none of them, so the operator would
 * believe a host reachable that is not.
 */
export const egressEntries: Parser<string[]> = (raw, name) =>
  list(/[\s,]+/)(raw, name).map((entry) => {
    const hostname = entry.startsWith('*.') ? entry.slice(2) : entry;
    if (!hostAndPort(hostname))
      throw new ConfigError(
        `${name}: "${entry}" is not a host name, host:port, *.domain or [IPv6 address]:port (wildcards alone, CIDR ranges and URLs are not matched)`,
      );
    return entry;
  });

/**
 * Hosts that may receive the git token (FLOTILLA_GIT_TOKEN_HOSTS), as an https URL's host is
 * compared: lowercase, and without port 443, which a URL's host leaves out. A value that could
 * never equal one (a URL, a wildcard, ":443") is refused, or the token would silently never be sent.
 */
export const tokenHosts: Parser<string[]> = (raw, name) =>
  list(',', 'github.com')(raw, name).map((entry) => {
    const parsed = hostAndPort(entry.trim());
    if (!parsed)
      throw new ConfigError(
        `${name}: "${entry.trim()}" can never match a host; give host or host:port, such as github.com or git.corp:8443`,
      );
    if (parsed.port === 443)
      throw new ConfigError(
        `${name}: "${entry.trim()}" can never match a host, since https URLs leave out port 443; give ${parsed.host}`,
      );
    return entry.trim().toLowerCase();
  });

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
    throw new ConfigError(`FLOTILLA_SANDBOX_UIDS must be "first-last" with 1000 <= first <= last (got "${text}")`);
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
      throw new ConfigError(`FLOTILLA_SANDBOX_MAX_LIMITS: unknown limit "${name}" (known: ${LIMIT_NAMES.join(', ')})`);
    if (!/^[1-9]\d*$/.test(value ?? ''))
      throw new ConfigError(
        `FLOTILLA_SANDBOX_MAX_LIMITS: ${name} must be a positive whole number (got "${value ?? ''}")`,
      );
    caps[name as LimitName] = Number(value);
  }
  return caps;
}
