/**
 * Prices for token counts: Codex reports tokens rather than dollars, and Claude Code's streamed
 * replies carry tokens long before its own dollar total arrives at the end of an invocation. Rates are
 * list prices in USD per million tokens, as OpenAI and Anthropic published them in 2026; update
 * them here when they change.
 *
 * A model is looked up by its exact name, else by the longest entry it extends with a dash
 * ("gpt-5.4-mini-2026-03-05" is priced as gpt-5.4-mini, "claude-sonnet-4-5-20250929" as
 * claude-sonnet-4-5). Any other model is priced as its vendor's default, the current flagship's
 * rate: an unknown model overstates cost rather than hiding it, so a budget errs on the side of
 * stopping early.
 */

export interface TokenPrice {
  input: number;
  cachedInput: number;
  output: number;
  /** Writing the prompt cache (Anthropic bills it apart); input rate when absent. */
  cacheWrite?: number;
}

export interface TokenUsage {
  /** All input tokens, cached ones included (as OpenAI counts them). */
  inputTokens: number;
  /** The part of inputTokens served from the prompt cache. */
  cachedInputTokens?: number;
  /** Input tokens written to the prompt cache, counted apart from inputTokens (Anthropic). */
  cacheWriteTokens?: number;
  /** All output tokens, reasoning included. */
  outputTokens: number;
}

export const PRICES: Readonly<Record<string, TokenPrice>> = {
  'gpt-5.5': { input: 5, cachedInput: 0.5, output: 30 },
  'gpt-5.4': { input: 2.5, cachedInput: 0.25, output: 15 },
  'gpt-5.4-mini': { input: 0.75, cachedInput: 0.075, output: 4.5 },
  'gpt-5.4-nano': { input: 0.2, cachedInput: 0.02, output: 1.25 },
  'gpt-5.2': { input: 1.75, cachedInput: 0.175, output: 14 },
  'gpt-5.1': { input: 1.25, cachedInput: 0.125, output: 10 },
  'gpt-5': { input: 1.25, cachedInput: 0.125, output: 10 },
  'gpt-5-mini': { input: 0.25, cachedInput: 0.025, output: 2 },
};

export const DEFAULT_PRICE: TokenPrice = PRICES['gpt-5.5'];

/** Claude models; cachedInput is a cache read. */
export const CLAUDE_PRICES: Readonly<Record<string, TokenPrice>> = {
  'claude-opus-4-5': { input: 5, cachedInput: 0.5, cacheWrite: 6.25, output: 25 },
  'claude-opus-4-1': { input: 15, cachedInput: 1.5, cacheWrite: 18.75, output: 75 },
  'claude-opus-4': { input: 15, cachedInput: 1.5, cacheWrite: 18.75, output: 75 },
  'claude-sonnet-4-5': { input: 3, cachedInput: 0.3, cacheWrite: 3.75, output: 15 },
  'claude-sonnet-4': { input: 3, cachedInput: 0.3, cacheWrite: 3.75, output: 15 },
  'claude-haiku-4-5': { input: 1, cachedInput: 0.1, cacheWrite: 1.25, output: 5 },
};

export const DEFAULT_CLAUDE_PRICE: TokenPrice = CLAUDE_PRICES['claude-opus-4-5'];

export function priceFor(model: string | undefined, table = PRICES, fallback = DEFAULT_PRICE): TokenPrice {
  // Providers' routed names ("openai/gpt-5.4") price as the model itself.
  const name = (model ?? '').split('/').pop()!.toLowerCase();
  let best: string | undefined;
  for (const key of Object.keys(table)) {
    if ((name === key || name.startsWith(`${key}-`)) && (!best || key.length > best.length)) best = key;
  }
  return best ? table[best] : fallback;
}

const nonNegative = (n: number | undefined) => (typeof n === 'number' && Number.isFinite(n) && n > 0 ? n : 0);

/** Dollars for `usage` at `price`. */
export function priceUsage(price: TokenPrice, usage: TokenUsage): number {
  const input = nonNegative(usage.inputTokens);
  const cached = Math.min(nonNegative(usage.cachedInputTokens), input);
  const written = nonNegative(usage.cacheWriteTokens);
  const output = nonNegative(usage.outputTokens);
  return (
    ((input - cached) * price.input +
      cached * price.cachedInput +
      written * (price.cacheWrite ?? price.input) +
      output * price.output) /
    1_000_000
  );
}

/** Dollars for `usage` on an OpenAI `model`. */
export function priceTokens(model: string | undefined, usage: TokenUsage): number {
  return priceUsage(priceFor(model), usage);
}

/**
 * Dollars for one Claude reply's usage as the Messages API reports it: input_tokens excludes
 * the cache reads and writes, which come as their own counts.
 */
export function priceClaudeReply(
  model: string | undefined,
  usage: { input?: number; cacheRead?: number; cacheWrite?: number; output?: number },
): number {
  const cacheRead = nonNegative(usage.cacheRead);
  return priceUsage(priceFor(model, CLAUDE_PRICES, DEFAULT_CLAUDE_PRICE), {
    inputTokens: nonNegative(usage.input) + cacheRead,
    cachedInputTokens: cacheRead,
    cacheWriteTokens: usage.cacheWrite,
    outputTokens: nonNegative(usage.output),
  });
}
