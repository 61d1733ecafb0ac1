import { isIP } from "node:net";

/**
 * Token buckets keyed by sender (or client address): `perMinute` tokens, refilled evenly.
 * In memory, per process: each replica enforces the limit on what it receives.
 *
 * The table is bounded (`maxKeys`) without ever forgetting a key that is still limited: only
 * buckets that have refilled completely — which behave exactly like new ones — are dropped.
 * The map is kept in order of last use, so those are found at its front at a constant cost
 * per new key (any bucket idle for a minute is full). When the table is full of buckets still
 * refilling, a new key is refused like an exhausted one, with the time until the longest-idle
 * bucket is full: under a flood of more than `maxKeys` keys a minute newcomers wait, rather
 * than the flood wiping out the limits of the keys already known.
 */
export class RateLimiter {
  private readonly buckets = new Map<string, { tokens: number; at: number }>();
  private readonly capacity: number;
  private readonly perMs: number;
  private readonly maxKeys: number;
  private readonly now: () => number;

  /**
   * `perMinute` tokens per minute; with `windowMs`, that many tokens per window instead (a
   * byte quota per hour: `new RateLimiter(bytes, { windowMs: 3_600_000 })`).
   */
  constructor(perMinute: number, opts: { maxKeys?: number; now?: () => number; windowMs?: number } = {}) {
    this.capacity = perMinute;
    this.perMs = perMinute / (opts.windowMs ?? 60_000);
    this.maxKeys = opts.maxKeys ?? 100_000;
    this.now = opts.now ?? Date.now;
  }

  /**
   * Take `cost` tokens (one by default; a cost above the capacity takes a full bucket). When
   * not enough are left, none are taken, and the answer is the whole seconds until they are.
   */
  take(key: string, cost = 1): { ok: true } | { ok: false; retryAfterSeconds: number } {
    cost = Math.min(cost, this.capacity);
    const now = this.now();
    let b = this.buckets.get(key);
    if (b) {
      b.tokens = this.level(b, now);
      b.at = now;
      // Most recently used last: the front of the map is where full buckets gather.
      this.buckets.delete(key);
      this.buckets.set(key, b);
    } else {
      this.forgetFull(now);
      if (this.buckets.size >= this.maxKeys) {
        const [oldest] = this.buckets.values();
        return { ok: false, retryAfterSeconds: this.seconds(this.capacity - this.level(oldest!, now)) };
      }
      b = { tokens: this.capacity, at: now };
      this.buckets.set(key, b);
    }
    if (b.tokens >= cost) {
      b.tokens -= cost;
      return { ok: true };
    }
    return { ok: false, retryAfterSeconds: this.seconds(cost - b.tokens) };
  }

  private level(b: { tokens: number; at: number }, now: number): number {
    return Math.min(this.capacity, b.tokens + (now - b.at) * this.perMs);
  }

  /** Whole seconds (at least one) until `tokens` more have been refilled. */
  private seconds(tokens: number): number {
    return Math.max(1, Math.ceil(tokens / this.perMs / 1000));
  }

  /** Drop the least recently used buckets for as long as they have refilled completely. */
  private forgetFull(now: number): void {
    for (const [k, b] of this.buckets) {
      if (this.level(b, now) < this.capacity) return;
      this.buckets.delete(k);
    }
  }
}

/**
 * The key of a per-address limit: the address fastify resolved for the request (through
 * trusted proxies only, see createServer's trustedProxies), IPv4-mapped IPv6 written as IPv4.
 * When that is no address at all — a malformed X-Forwarded-For entry a trusted proxy passed
 * on — the peer's own address is used, so that made-up values cannot open fresh buckets.
 */
export function clientAddress(req: { ip: string; socket?: { remoteAddress?: string } }): string {
  const fold = (a: string) => (a.toLowerCase().startsWith("::ffff:") && isIP(a.slice(7)) === 4 ? a.slice(7) : a);
  if (isIP(req.ip)) return fold(req.ip);
  const peer = req.socket?.remoteAddress;
  return peer && isIP(peer) ? fold(peer) : "unknown";
}
