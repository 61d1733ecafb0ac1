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
 * The waits of a loop that starts over after each failure, for as long as it runs: exponential
 * from `initialMs` to `maxMs`, and back to `initialMs` once the loop works again (reset()).
 */
export class Backoff {
  private readonly initialMs: number;
  private readonly maxMs: number;
  private readonly jitter: number;
  private current: number;

  constructor(opts: BackoffOptions = {}) {
    this.initialMs = opts.initialMs ?? 500;
    this.maxMs = opts.maxMs ?? 10_000;
    this.jitter = opts.jitter ?? 0;
    this.current = this.initialMs;
  }

  /** The wait next() returns next, before jitter (for logs). */
  get delayMs(): number {
    return this.current;
  }

  /** The wait before the next attempt; the one after it is twice as long, up to maxMs. */
  next(): number {
    const base = this.current;
    this.current = Math.min(base * 2, this.maxMs);
    return this.jitter ? base * (1 - this.jitter + Math.random() * 2 * this.jitter) : base;
  }

  /** The loop works again: the next wait is initialMs. */
  reset(): void {
    this.current = this.initialMs;
  }

  /** Wait next(); an abort of `signal` ends the wait early, without an error. */
  async wait(signal?: AbortSignal): Promise<void> {
    await sleep(this.next(), undefined, { signal }).catch(() => {});
  }
}
