// Exponential backoff: the delay before attempt n, the one formula of every retry in the runtime
// and the operator, and Backoff, the waits of a loop that starts over after each failure.
import { setTimeout as sleep } from "node:timers/promises";

export interface BackoffOptions {
  /** The first wait (default 500 ms); it doubles after each further one… */
  initialMs?: number;
  /** …up to this (default 10 s). */
  maxMs?: number;
  /** Spreads each wait by up to this fraction either way (0.2: 80 % to 120 %); default none. */
  jitter?: number;
}

/**
 * The exponential delay before attempt `n` (n ≥ 1), the one formula of every retry: `initialMs`
 * doubled n − 1 times, at most `maxMs`, then spread by up to `jitter` either way (0.2: 80 % to
 * 120 %).
 */
export function exponentialDelay(n: number, opts: { initialMs: number; maxMs?: number; jitter?: number }): number {
  const base = Math.min(opts.maxMs ?? Number.POSITIVE_INFINITY, opts.initialMs * 2 ** Math.min(52, Math.max(0, n - 1)));
  return opts.jitter ? base * (1 - opts.jitter + Math.random() * 2 * opts.jitter) : base;
}

/**
 * The waits of a loop that starts over after each failure, for as long as it runs: exponential
 * from `initialMs` to `maxMs`, and back to `initialMs` once the loop works again (reset()).
 */
export class Backoff {
  private readonly initialMs: number;
  private readonly maxMs: number;
  private readonly jitter: number;
  /** Waits since the last reset(). */
  private waits = 0;

  constructor(opts: BackoffOptions = {}) {
    this.initialMs = opts.initialMs ?? 500;
    this.maxMs = opts.maxMs ?? 10_000;
    this.jitter = opts.jitter ?? 0;
  }

  /** The wait next() returns next, before jitter (for logs). */
  get delayMs(): number {
    return exponentialDelay(this.waits + 1, { initialMs: this.initialMs, maxMs: this.maxMs });
  }

  /** The wait before the next attempt; the one after it is twice as long, up to maxMs. */
  next(): number {
    this.waits++;
    return exponentialDelay(this.waits, { initialMs: this.initialMs, maxMs: this.maxMs, jitter: this.jitter });
  }

  /** The loop works again: the next wait is initialMs. */
  reset(): void {
    this.waits = 0;
  }

  /** Wait next(); an abort of `signal` ends the wait early, without an error. */
  async wait(signal?: AbortSignal): Promise<void> {
    await sleep(this.next(), undefined, { signal }).catch(() => {});
  }
}
