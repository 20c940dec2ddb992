/**
 * The request gives durations in minutes and seconds; Temporal and the activities take
 * milliseconds. These are the only conversions, so that every place rounds the same way.
 */

/** Whole milliseconds in `n` minutes (a request may give fractions of a minute). */
export function msOfMinutes(n: number): number {
  return Math.round(n * 60_000);
}

/** Milliseconds in `n` seconds; absent stays absent (a request parsed before the field existed). */
export function msOfSeconds(n: number): number;
export function msOfSeconds(n: number | undefined): number | undefined;
export function msOfSeconds(n: number | undefined): number | undefined {
  return n === undefined ? undefined : n * 1000;
}

/** `ms` in whole minutes, for a message. */
export function wholeMinutes(ms: number): number {
  return Math.round(ms / 60_000);
}

/**
 * The longest timer a workflow sets: a century, far beyond any wait a request may ask for (a
 * year). A history from a release that accepted any number keeps its value, and this keeps it
 * from asking Temporal for a timer it refuses, which would fail every workflow task of the run.
 */
const LONGEST_TIMER_MS = 100 * 365 * 24 * 3_600_000;

/** `ms`, at most the longest timer a workflow sets. */
export function timerMs(ms: number): number {
  return Math.min(ms, LONGEST_TIMER_MS);
}
