import { describe, expect, it } from "vitest";
import { Backoff, exponentialDelay } from "./backoff.ts";

describe("Backoff", () => {
  it("doubles each wait up to the maximum, and starts again from the first after reset()", () => {
    const b = new Backoff({ initialMs: 100, maxMs: 500 });
    expect(b.delayMs).toBe(100);
    expect([b.next(), b.next(), b.next(), b.next()]).toEqual([100, 200, 400, 500]);
    expect(b.delayMs).toBe(500);
    b.reset();
    expect([b.delayMs, b.next()]).toEqual([100, 100]);
  });

  it("waits 500 ms doubling to 10 s by default", () => {
    const b = new Backoff();
    const waits = Array.from({ length: 7 }, () => b.next());
    expect(waits).toEqual([500, 1_000, 2_000, 4_000, 8_000, 10_000, 10_000]);
  });

  it("spreads each wait within the jitter around its step", () => {
    const b = new Backoff({ initialMs: 1_000, maxMs: 4_000, jitter: 0.2 });
    for (const step of [1_000, 2_000, 4_000, 4_000]) {
      const wait = b.next();
      expect(wait).toBeGreaterThanOrEqual(step * 0.8);
      expect(wait).toBeLessThanOrEqual(step * 1.2);
    }
  });

  it("waits, and ends the wait early without an error when its signal is aborted", async () => {
    const short = new Backoff({ initialMs: 20 });
    const before = Date.now();
    await short.wait();
    expect(Date.now() - before).toBeGreaterThanOrEqual(15);
    expect(short.delayMs).toBe(40);

    const long = new Backoff({ initialMs: 60_000 });
    const abort = new AbortController();
    const started = Date.now();
    const waiting = long.wait(abort.signal);
    abort.abort();
    await expect(waiting).resolves.toBeUndefined();
    expect(Date.now() - started).toBeLessThan(30_000);
  });
});

describe("exponentialDelay", () => {
  it("doubles from the first delay up to the maximum, whatever the attempt", () => {
    const d = (n: number) => exponentialDelay(n, { initialMs: 250, maxMs: 3_000 });
    expect([0, 1, 2, 3, 4, 5, 1_000, 1e9].map(d)).toEqual([250, 250, 500, 1_000, 2_000, 3_000, 3_000, 3_000]);
    expect(exponentialDelay(11, { initialMs: 1 })).toBe(1_024);
  });

  it("spreads by the jitter either way and never past it", () => {
    for (let i = 0; i < 200; i++) {
      const v = exponentialDelay(3, { initialMs: 100, maxMs: 10_000, jitter: 0.2 });
      expect(v).toBeGreaterThanOrEqual(320);
      expect(v).toBeLessThanOrEqual(480);
    }
  });
});
