/** Reconnection back-off: exponential, with full jitter. Milliseconds. */
export interface BackoffOptions {
  /** The first attempt's upper bound (default 250 ms). */
  base?: number;
  /** Growth per attempt (default 2). */
  factor?: number;
  /** The largest upper bound (default 10 s). */
  cap?: number;
}

/**
 * The delay before reconnection attempt `attempt` (0 for the first): a uniformly random time
 * in [0, min(cap, base * factor^attempt)) ("full jitter"). `random` answers in [0, 1).
 */
export function backoffDelay(attempt: number, options: BackoffOptions = {}, random: () => number = Math.random): number {
  const base = options.base ?? 250;
  const factor = options.factor ?? 2;
  const cap = options.cap ?? 10_000;
  const bound = Math.min(cap, base * factor ** Math.max(0, attempt));
  return random() * bound;
}
