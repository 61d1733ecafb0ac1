import { describe, expect, it } from "vitest";
import { consistently, waitFor } from "../../../e2e/support/wait.ts";
import { WorkQueue, type WorkQueueObserver } from "./workqueue.ts";

describe("WorkQueue", () => {
  it("collapses adds and never runs a key twice at once", async () => {
    const q = new WorkQueue();
    const seen: string[] = [];
    let concurrent = 0;
    let maxConcurrent = 0;
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    q.add("a");
    q.add("a");
    q.add("b");
    const run = q.run(4, async (key) => {
      concurrent++;
      maxConcurrent = Math.max(maxConcurrent, concurrent);
      seen.push(key);
      // The first run of "a" is added again while it runs, and holds until the test lets it end.
      if (key === "a" && seen.filter((k) => k === "a").length === 1) {
        q.add("a");
        await held;
      }
      concurrent--;
    });
    // "b" ran to its end on another worker meanwhile: a free worker was there to run "a" again.
    await waitFor("b processed", () => seen.includes("b") && concurrent === 1, 10_000, 5);
    await consistently("a not run again while it runs", () => seen.filter((k) => k === "a").length === 1, 200, 20);
    release();
    // Processed: "a" twice (the add during its run), "b" once; then no third run of either.
    await waitFor(
      "both keys processed",
      () => seen.filter((k) => k === "a").length === 2 && seen.includes("b"),
      10_000,
      5,
    );
    await consistently("no further runs", () => seen.length === 3, 300, 20);
    q.shutDown();
    await run;
    expect(seen.filter((k) => k === "a")).toHaveLength(2);
    expect(seen.filter((k) => k === "b")).toHaveLength(1);
    expect(maxConcurrent).toBeLessThanOrEqual(2);
  });

  it("backs off per key and forgets on success", () => {
    const q = new WorkQueue({ baseDelayMs: 100, maxDelayMs: 1000 });
    const d1 = q.addRateLimited("k");
    const d2 = q.addRateLimited("k");
    const d5 = [q.addRateLimited("k"), q.addRateLimited("k"), q.addRateLimited("k")].at(-1)!;
    expect(d1).toBeGreaterThanOrEqual(80);
    expect(d1).toBeLessThanOrEqual(120);
    expect(d2).toBeGreaterThanOrEqual(160);
    expect(d5).toBeLessThanOrEqual(1200);
    q.forget("k");
    expect(q.addRateLimited("k")).toBeLessThanOrEqual(120);
    q.shutDown();
  });

  it("counts an add during a key's pass when it is made, so that adds equal finished passes only once all asked for is done", async () => {
    const counts = { added: 0, finished: 0, active: 0, depth: 0 };
    const observer: WorkQueueObserver = {
      added: (depth) => {
        counts.added++;
        counts.depth = depth;
      },
      requeued: (depth) => (counts.depth = depth),
      taken: (depth) => (counts.depth = depth),
      worked: () => {},
      retried: () => {},
      active: (n) => (counts.active = n),
    };
    const q = new WorkQueue({ observer });
    let release!: () => void;
    let passes = 0;
    q.add("a");
    const run = q.run(2, async () => {
      if (passes === 0) await new Promise<void>((r) => (release = r));
      passes++;
      counts.finished = passes;
    });
    await waitFor("a's first pass in flight", () => counts.active === 1, 10_000, 5);
    // Asked for again during its pass: counted at once, queued once the pass ends.
    q.add("a");
    q.add("a");
    expect(counts).toMatchObject({ added: 2, depth: 0, active: 1 });
    release();
    await waitFor("both passes done", () => passes === 2 && counts.active === 0, 10_000, 5);
    expect(counts).toMatchObject({ added: 2, finished: 2, depth: 0 });
    q.shutDown();
    await run;
  });
});
