import { describe, expect, it } from "vitest";
import { classifyAnswer } from "./answer.ts";

describe("classifyAnswer (spec 7.2 rule 3)", () => {
  const now = Date.parse("2026-03-04T12:00:00Z");
  it.each([
    [200, null, { kind: "delivered" }],
    [202, "30", { kind: "delivered" }],
    [299, null, { kind: "delivered" }],
    [408, null, { kind: "later" }],
    [425, "3", { kind: "later", retryAfterMs: 3000 }],
    [429, "7", { kind: "later", retryAfterMs: 7000 }],
    [429, "Wed, 04 Mar 2026 12:00:30 GMT", { kind: "later", retryAfterMs: 30_000 }],
    [429, "soon", { kind: "later" }],
    [500, null, { kind: "retry" }],
    [503, "30", { kind: "retry", retryAfterMs: 30_000 }],
    [599, null, { kind: "retry" }],
    [301, null, { kind: "final", redirect: true }],
    [302, "5", { kind: "final", redirect: true }],
    [307, null, { kind: "final", redirect: true }],
    [308, null, { kind: "final", redirect: true }],
    [400, null, { kind: "final", redirect: false }],
    [401, null, { kind: "final", redirect: false }],
    [404, null, { kind: "final", redirect: false }],
    [410, null, { kind: "final", redirect: false }],
    [413, "5", { kind: "final", redirect: false }],
    [422, null, { kind: "final", redirect: false }],
    [100, null, { kind: "final", redirect: false }],
    [600, null, { kind: "final", redirect: false }],
  ] as const)("%i (Retry-After %s)", (status, retryAfter, want) => {
    expect(classifyAnswer(status, retryAfter, now)).toEqual(want);
  });
});
