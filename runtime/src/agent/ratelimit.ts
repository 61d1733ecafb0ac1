/**
 * Token buckets keyed by sender (or client address): `perMinute` tokens, refilled evenly.
 * In memory, per process: each replica enforces the limit on what it receives.
 */
export class RateLimiter {
  private readonly buckets = new Map<string, { tokens: number; at: number }>();
  private readonly capacity: number;
  private readonly perMs: number;
  private readonly maxKeys: number;
  private readonly now: () => number;

  constructor(perMinute: number, opts: { maxKeys?: number; now?: () => number } = {}) {
    this.capacity = perMinute;
    this.perMs = perMinute / 60_000;
    this.maxKeys = opts.maxKeys ?? 100_000;
    this.now = opts.now ?? Date.now;
  }

  /** Take one token. When none is left, returns the whole seconds until one is. */
  take(key: string): { ok: true } | { ok: false; retryAfterSeconds: number } {
    const now = this.now();
    let b = this.buckets.get(key);
    if (!b) {
      if (this.buckets.size >= this.maxKeys) this.sweep(now);
      b = { tokens: this.capacity, at: now };
      this.buckets.set(key, b);
    } else {
      b.tokens = Math.min(this.capacity, b.tokens + (now - b.at) * this.perMs);
      b.at = now;
    }
    if (b.tokens >= 1) {
      b.tokens -= 1;
      return { ok: true };
    }
    return { ok: false, retryAfterSeconds: Math.max(1, Math.ceil((1 - b.tokens) / this.perMs / 1000)) };
  }

  /** Forget buckets that have refilled completely; they behave exactly like new ones. */
  private sweep(now: number): void {
    for (const [k, b] of this.buckets) {
      if (b.tokens + (now - b.at) * this.perMs >= this.capacity) this.buckets.delete(k);
    }
    if (this.buckets.size >= this.maxKeys) {
      // Still full of active keys: drop the oldest entries rather than grow without bound.
      let n = this.buckets.size - this.maxKeys + 1;
      for (const k of this.buckets.keys()) {
        if (n-- <= 0) break;
        this.buckets.delete(k);
      }
    }
  }
}
