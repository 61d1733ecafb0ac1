import { describe, expect, it } from "vitest";
import { RateLimiter } from "./ratelimit.ts";

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

  it("keeps a bounded number of keys without forgetting exhausted ones first", () => {
    let now = 0;
    const rl = new RateLimiter(1, { now: () => now, maxKeys: 3 });
    rl.take("busy");
    for (let i = 0; i < 10; i++) {
      now += 1;
      rl.take(`k${i}`);
    }
    expect((rl as unknown as { buckets: Map<string, unknown> }).buckets.size).toBeLessThanOrEqual(3);
  });
});
