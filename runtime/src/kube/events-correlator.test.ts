import { describe, expect, it } from "vitest";
import { COMBINED_PREFIX, EventCorrelator } from "./events.ts";

describe("EventCorrelator", () => {
  const obj = (name: string) => ({ kind: "Agent", metadata: { name, namespace: "team", uid: `u-${name}` } });

  it("makes an Event once, counts repeats within the window, and makes it again after the window", () => {
    let now = 0;
    const c = new EventCorrelator({ windowMs: 1_000 }, () => now);
    const first = c.correlate(obj("a"), "Warning", "R", "m");
    expect(first.action).toBe("create");
    c.tracked.set(first.key, { namespace: "team", event: {} as never, count: 1, written: 1, last: now, objectKey: "" });
    expect(c.correlate(obj("a"), "Warning", "R", "m").action).toBe("count");
    expect(c.correlate(obj("b"), "Warning", "R", "m").action).toBe("create");
    now = 2_000;
    expect(c.correlate(obj("a"), "Warning", "R", "m").action).toBe("create");
  });

  it("combines messages past maxSimilar of one object, type and reason", () => {
    const c = new EventCorrelator({ maxSimilar: 2 }, () => 0);
    expect(c.correlate(obj("a"), "Warning", "R", "m1")).toMatchObject({ action: "create", message: "m1" });
    expect(c.correlate(obj("a"), "Warning", "R", "m2")).toMatchObject({ action: "create", message: "m2" });
    expect(c.correlate(obj("a"), "Warning", "R", "m3")).toMatchObject({
      action: "create",
      message: `${COMBINED_PREFIX}m3`,
    });
    // A message already seen keeps its own Event; another reason is another group.
    expect(c.correlate(obj("a"), "Warning", "R", "m1")).toMatchObject({ message: "m1" });
    expect(c.correlate(obj("a"), "Warning", "S", "m3")).toMatchObject({ message: "m3" });
  });

  it("refills an object's bucket by one token per refillMs up to the burst", () => {
    let now = 0;
    const c = new EventCorrelator({ burst: 2, refillMs: 100 }, () => now);
    const k = EventCorrelator.objectKey(obj("a"));
    expect([c.take(k), c.take(k), c.take(k)]).toEqual([true, true, false]);
    expect(c.waitMs(k)).toBe(100);
    now = 150;
    expect(c.waitMs(k)).toBe(0);
    expect([c.take(k), c.take(k)]).toEqual([true, false]);
    now = 10_000;
    expect([c.take(k), c.take(k), c.take(k)]).toEqual([true, true, false]);
    expect(c.take(EventCorrelator.objectKey(obj("b")))).toBe(true);
  });

  it("keeps its tables bounded", () => {
    const c = new EventCorrelator({ maxTracked: 3 }, () => 0);
    for (let i = 0; i < 50; i++) c.correlate(obj(`o${i}`), "Normal", "R", "m");
    // biome-ignore lint/complexity/useLiteralKeys: private tables, read by the test only
    expect(c["buckets"].size).toBeLessThanOrEqual(3);
    // biome-ignore lint/complexity/useLiteralKeys: private tables, read by the test only
    expect(c["similar"].size).toBeLessThanOrEqual(3);
  });
});
