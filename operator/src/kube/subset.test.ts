import { describe, expect, it } from "vitest";
import { isSubset } from "./subset.ts";

describe("isSubset", () => {
  it("ignores fields the server added and compares the ones we own", () => {
    expect(isSubset({ a: 1, b: { c: "x" } }, { a: 1, b: { c: "x", d: 2 }, e: 3 })).toBe(true);
    expect(isSubset({ a: 1 }, { a: 2 })).toBe(false);
    expect(isSubset({ l: [{ n: 1 }] }, { l: [{ n: 1, p: "TCP" }] })).toBe(true);
    expect(isSubset({ l: [{ n: 1 }] }, { l: [{ n: 1 }, { n: 2 }] })).toBe(false);
    expect(isSubset({ a: undefined }, {})).toBe(true);
    expect(isSubset({ a: {} }, {})).toBe(false);
  });
});
