import { describe, expect, it } from "vitest";
import { RateLimiter } from "./ratelimit.ts";

const size = (rl: RateLimiter) => (rl as unknown as { buckets: Map<string, unknown> }).buckets.size;

describe("RateLimiter", () => {
  it("allows perMinute requests, then says when to retry, and refills evenly", () => {
    let now = 0;
    const rl = new RateLimiter(60, { now: () => now });
    for (let i = 0; i < 60; i++) expect(rl.take("a").ok).toBe(true);
    expect(rl.take("a")).toEqual({ ok: false, retryAfterSeconds: 1 });
    expect(rl.take("b").ok).toBe(true);
    now += 1000;
    expect(rl.take("a").ok).toBe(true);
    expect(rl.take("a").ok).toBe(false);
  });

  it("rounds Retry-After up to whole seconds for slow limits", () => {
    let now = 0;
    const rl = new RateLimiter(2, { now: () => now });
    rl.take("a");
    rl.take("a");
    expect(rl.take("a")).toEqual({ ok: false, retryAfterSeconds: 30 });
    now += 29_000;
    expect(rl.take("a")).toEqual({ ok: false, retryAfterSeconds: 1 });
  });

  it("never forgets an exhausted key to make room: rotating other keys does not reset a limit", () => {
    let now = 0;
    const rl = new RateLimiter(1, { now: () => now, maxKeys: 3 });
    expect(rl.take("busy").ok).toBe(true);
    for (let i = 0; i < 10; i++) {
      now += 1;
      rl.take(`k${i}`);
    }
    expect(rl.take("busy").ok).toBe(false);
    expect(size(rl)).toBeLessThanOrEqual(3);
  });

  it("stays bounded: at the bound a new key waits until the longest-idle bucket has refilled", () => {
    let now = 0;
    const rl = new RateLimiter(2, { now: () => now, maxKeys: 2 });
    expect(rl.take("a").ok).toBe(true);
    now += 10_000;
    expect(rl.take("b").ok).toBe(true);
    // "a" needs 30 s to refill its one token, 20 s of which are still to come.
    expect(rl.take("c")).toEqual({ ok: false, retryAfterSeconds: 20 });
    expect(size(rl)).toBe(2);
    now += 20_000;
    expect(rl.take("c").ok).toBe(true);
    expect(size(rl)).toBe(2);
    // "a" was forgotten only once full: it starts again with a whole allowance.
    now += 30_000;
    expect(rl.take("a").ok).toBe(true);
    expect(rl.take("a").ok).toBe(true);
    expect(rl.take("a").ok).toBe(false);
  });

  it("forgets idle keys even behind a busy one that came first", () => {
    let now = 0;
    const rl = new RateLimiter(1, { now: () => now, maxKeys: 2 });
    rl.take("busy");
    now += 1;
    rl.take("idle");
    now = 60_001;
    expect(rl.take("busy").ok).toBe(true);
    now += 1;
    // "idle" has refilled and makes room; "busy" has not, and stays limited.
    expect(rl.take("new").ok).toBe(true);
    expect(rl.take("busy").ok).toBe(false);
  });
});
