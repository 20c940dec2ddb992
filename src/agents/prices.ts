/**
 * Prices for agents that report tokens rather than dollars (Codex). Rates are list prices in USD
 * per million tokens, as OpenAI published them in 2026; update them here when they change.
 *
 * A model is looked up by its exact name, else by the longest entry it extends with a dash
 * ("gpt-5.4-mini-2026-03-05" is priced as gpt-5.4-mini). Any other model is priced as
 * DEFAULT_PRICE, the current flagship's rate: an unknown model overstates cost rather than
 * hiding it, so a budget errs on the side of stopping early.
 */

export interface TokenPrice {
  input: number;
  cachedInput: number;
  output: number;
}

export interface TokenUsage {
  /** All input tokens, cached ones included (as OpenAI counts them). */
  inputTokens: number;
  /** The part of inputTokens served from the prompt cache. */
  cachedInputTokens?: number;
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

export function priceFor(model: string | undefined): TokenPrice {
  // Providers' routed names ("openai/gpt-5.4") price as the model itself.
  const name = (model ?? '').split('/').pop()!.toLowerCase();
  let best: string | undefined;
  for (const key of Object.keys(PRICES)) {
    if ((name === key || name.startsWith(`${key}-`)) && (!best || key.length > best.length)) best = key;
  }
  return best ? PRICES[best] : DEFAULT_PRICE;
}

/** Dollars for `usage` on `model`. */
export function priceTokens(model: string | undefined, usage: TokenUsage): number {
  const price = priceFor(model);
  const nonNegative = (n: number | undefined) => (typeof n === 'number' && Number.isFinite(n) && n > 0 ? n : 0);
  const input = nonNegative(usage.inputTokens);
  const cached = Math.min(nonNegative(usage.cachedInputTokens), input);
  const output = nonNegative(usage.outputTokens);
  return ((input - cached) * price.input + cached * price.cachedInput + output * price.output) / 1_000_000;
}
