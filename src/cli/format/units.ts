/** Amounts as people read them: dollars, seconds, short SHAs. */

/** Dollars; under a dollar with more digits, since agents' spends are often a few cents. */
export function usd(n: number): string {
  if (n === 0 || n >= 1) return `$${n.toFixed(2)}`;
  if (n < 0.0001) return '<$0.0001';
  return `$${n.toFixed(n < 0.01 ? 4 : 3)}`;
}

export function seconds(ms?: number): string {
  return ms === undefined ? '' : `${(ms / 1000).toFixed(1)}s`;
}

export function shortSha(sha?: string): string {
  return sha ? sha.slice(0, 12) : '-';
}
