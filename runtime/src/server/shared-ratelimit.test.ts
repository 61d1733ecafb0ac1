import { Worker } from "node:worker_threads";
import { describe, expect, it } from "vitest";
import { RateLimiter } from "./ratelimit.ts";
import type { ProtocolError } from "../protocol/errors.ts";
import { SharedNonces, SharedRateLimiter } from "./shared-ratelimit.ts";

describe("SharedRateLimiter", () => {
  it("decides every take and give as RateLimiter does, Retry-After included", () => {
    let now = 1_000_000;
    const options = { now: () => now, windowMs: 60_000 };
    const shared = SharedRateLimiter.create(30, options);
    const local = new RateLimiter(30, options);
    // A fixed pseudo-random walk: five keys, costs of 1–3, a give now and then, time in steps.
    let seed = 7;
    const next = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
    for (let i = 0; i < 5000; i++) {
      now += Math.floor(next() * 400);
      const key = `k${Math.floor(next() * 5)}`;
      const cost = 1 + Math.floor(next() * 3);
      if (next() < 0.1) {
        shared.give(key, cost);
        local.give(key, cost);
      } else expect(shared.take(key, cost), `step ${i}`).toEqual(local.take(key, cost));
    }
  });

  it("takes a cost (a byte quota per hour) and gives tokens back", () => {
    let now = 1_000_000;
    const rl = SharedRateLimiter.create(1000, { now: () => now, windowMs: 3_600_000 });
    expect(rl.take("s", 600).ok).toBe(true);
    expect(rl.take("s", 600)).toEqual({ ok: false, retryAfterSeconds: 720 });
    rl.give("s", 600);
    expect(rl.take("s", 1000).ok).toBe(true);
    now += 3_600_000;
    expect(rl.take("s", 5000).ok).toBe(true);
  });

  it("never forgets a key still limited: a flood of new keys waits instead of wiping it out", () => {
    let now = 1_000_000;
    const rl = SharedRateLimiter.create(1, { now: () => now, maxKeys: 1 });
    expect(rl.take("busy").ok).toBe(true);
    let refused = 0;
    for (let i = 0; i < 5000; i++) if (!rl.take(`k${i}`).ok) refused++;
    // 1,024 slots: most of the flood finds its window taken by buckets still refilling.
    expect(refused).toBeGreaterThan(3000);
    expect(rl.take("busy").ok).toBe(false);
    now += 60_000;
    expect(rl.take("busy").ok).toBe(true);
    expect(rl.take("another").ok).toBe(true);
  });

  it("is one limit for every thread attached: four threads racing for one key get exactly its tokens", async () => {
    // One clock for all: no refill while they race, so the count is exact.
    const now = Date.now();
    const rl = SharedRateLimiter.create(200_000, { now: () => now });
    const start = new Int32Array(new SharedArrayBuffer(4));
    const code = `
      const { workerData, parentPort } = require("node:worker_threads");
      const { SharedRateLimiter } = require(workerData.module);
      const rl = new SharedRateLimiter(workerData.shared, () => workerData.now);
      parentPort.postMessage("set");
      Atomics.wait(workerData.start, 0, 0);
      let granted = 0;
      for (let i = 0; i < 100_000; i++) if (rl.take("one sender").ok) granted++;
      parentPort.postMessage(granted);`;
    const module = new URL("./shared-ratelimit.ts", import.meta.url).pathname;
    const workers = Array.from(
      { length: 4 },
      () => new Worker(code, { eval: true, workerData: { module, shared: rl.shared, now, start } }),
    );
    const message = (w: Worker) =>
      new Promise<unknown>((resolve, reject) => {
        w.once("message", resolve);
        w.once("error", reject);
      });
    await Promise.all(workers.map(message));
    const granted = workers.map(message);
    Atomics.store(start, 0, 1);
    Atomics.notify(start, 0);
    const counts = (await Promise.all(granted)) as number[];
    // 400,000 asked for 200,000 tokens, all at once.
    expect(counts.reduce((a, b) => a + b, 0)).toBe(200_000);
  });
});

describe("SharedNonces", () => {
  /** The status a nonce is answered with: 0 when taken. */
  const status = (nonces: SharedNonces, nonce: string) => {
    try {
      nonces.use("alice#key-1", nonce);
      return 0;
    } catch (err) {
      return (err as ProtocolError).statusCode;
    }
  };

  it("takes a nonce once, in any loop attached, until any signature with it is too old", () => {
    let now = 1_000_000_000;
    const one = new SharedNonces({ now: () => now });
    const other = new SharedNonces({ shared: one.buckets.shared, now: () => now });
    expect(status(one, "n-0000001")).toBe(0);
    expect(status(other, "n-0000001")).toBe(401);
    expect(status(one, "n-0000001")).toBe(401);
    // Another key's same nonce is its own.
    expect(() => other.use("bob#key-1", "n-0000001")).not.toThrow();
    // A signature lives 300 s from a created up to 300 s ahead: the nonce is kept 601 s.
    now += 600_000;
    expect(status(other, "n-0000001")).toBe(401);
    now += 1_000;
    expect(status(other, "n-0000001")).toBe(0);
  });

  it("answers 503 (sign again) once a nonce's slots are all held, never taking a replay", () => {
    const now = 1_000_000_000;
    const nonces = new SharedNonces({ maxKeys: 1024, now: () => now });
    const answers = Array.from({ length: 2000 }, (_, i) => status(nonces, `nonce-${i}`));
    const taken = answers.filter((s) => s === 0).length;
    // 1,024 slots: most are taken before a window is full.
    expect(taken).toBeGreaterThan(700);
    expect(taken).toBeLessThanOrEqual(1024);
    expect(answers.filter((s) => s !== 0 && s !== 503)).toEqual([]);
    // Every nonce taken is refused again as a replay.
    const again = answers.flatMap((s, i) => (s === 0 ? [status(nonces, `nonce-${i}`)] : []));
    expect(new Set(again)).toEqual(new Set([401]));
  });
});
