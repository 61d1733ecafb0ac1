import pino from "pino";
import { describe, expect, it } from "vitest";
import { Lifecycle, retry } from "./lifecycle.ts";

const log = pino({ level: "silent" });

describe("retry", () => {
  it("calls again after each failure, waiting longer each time, until it resolves", async () => {
    const waits: number[] = [];
    let calls = 0;
    const value = await retry(
      async () => {
        if (++calls < 4) throw new Error(`failure ${calls}`);
        return "done";
      },
      { signal: new AbortController().signal, initialMs: 5, maxMs: 12, onError: (_err, ms) => waits.push(ms) },
    );
    expect(value).toBe("done");
    expect(waits).toEqual([5, 10, 12]);
  });

  it("stops in the middle of a wait when its signal is aborted", async () => {
    const abort = new AbortController();
    let calls = 0;
    const started = Date.now();
    const run = retry(
      async () => {
        calls++;
        throw new Error("never works");
      },
      { signal: abort.signal, initialMs: 60_000, onError: () => abort.abort() },
    );
    await expect(run).rejects.toMatchObject({ name: "AbortError" });
    expect(calls).toBe(1);
    expect(Date.now() - started).toBeLessThan(30_000);
  });
});

describe("Lifecycle", () => {
  it("stops in reverse order of start, after aborting and awaiting background work, and goes on past a failure", async () => {
    const life = new Lifecycle(log);
    const order: string[] = [];
    life.defer("nats", () => order.push("nats"));
    life.defer("consumers", () => {
      order.push("consumers");
      throw new Error("could not stop");
    });
    life.background("start-up", async (signal) => {
      await new Promise((r) => signal.addEventListener("abort", r));
      // Work that takes 10 ms to wind down once aborted, by a timer of its own (the work's clock,
      // not a wait of the test): close() must await it.
      await new Promise((r) => setTimeout(r, 10));
      order.push("start-up ended");
    });
    life.defer("listener", async () => order.push("listener"));
    await Promise.all([life.close(), life.close()]);
    expect(order).toEqual(["listener", "start-up ended", "consumers", "nats"]);
  });
});
