import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { describe, expect, it } from "vitest";
import { lean } from "./informer.ts";
import { StringPool } from "./string-pool.ts";

setFlagsFromString("--expose-gc");
const gc = runInNewContext("gc") as () => void;

/** The length of each object's value: large enough that the copies outweigh the heap's noise (a megabyte or so). */
const VALUE = 4000;

/** Heap growth while `n` objects parsed from JSON, each with a VALUE-character value of its own copy, are kept. */
function heapGrowth(n: number, keep: (obj: { metadata: { name: string; labels: Record<string, string> } }) => unknown) {
  const text = JSON.stringify({ metadata: { name: "x", labels: { shared: "c".repeat(VALUE) } } });
  const kept: unknown[] = [];
  gc();
  const before = process.memoryUsage().heapUsed;
  for (let i = 0; i < n; i++) kept.push(keep(JSON.parse(text)));
  gc();
  const grown = process.memoryUsage().heapUsed - before;
  expect(kept).toHaveLength(n);
  return grown;
}

describe("the strings cached objects share", () => {
  it("are held once: objects parsed apart with an equal value take little more than the objects", () => {
    const copies = heapGrowth(5000, (o) => lean(o, { internAll: (x: unknown) => x } as unknown as StringPool));
    const pool = new StringPool(4 * 1024 * 1024, VALUE);
    const pooled = heapGrowth(5000, (o) => lean(o, pool));
    // Each copy holds its value's bytes (one byte a character), whatever else the heap does meanwhile.
    expect(copies).toBeGreaterThan(0.8 * 5000 * VALUE);
    expect(pooled).toBeLessThan(copies / 4);
  });

  it("keeps every value, in objects and arrays, and Dates as they are", () => {
    const at = new Date(0);
    const obj = { metadata: { name: "a", labels: { k: "v" } }, spec: { args: ["--x", "y"], n: 3, at, none: null } };
    expect(lean(structuredClone(obj), new StringPool())).toEqual(obj);
    expect(new StringPool().internAll(obj).spec.at).toBe(at);
  });

  it("stays within its bound whatever passes through it, and never holds a long string", () => {
    const pool = new StringPool(10_000, 100);
    for (let i = 0; i < 5_000; i++) pool.intern(`unique-${i}-${"u".repeat(50)}`);
    expect(pool.size).toBeGreaterThan(0);
    expect(pool.size).toBeLessThanOrEqual(10_000);
    const before = pool.size;
    const long = "l".repeat(101);
    expect(pool.intern(long)).toBe(long);
    expect(pool.size).toBe(before);
  });
});
