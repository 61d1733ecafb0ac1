import { describe, expect, it } from "vitest";
import { backoffDelay, classify } from "./outbound.ts";

describe("classify (spec 7.2 rule 3)", () => {
  it("2xx is delivered", () => {
    expect(classify(202, null, "u", "")).toEqual({ kind: "delivered", via: "u", status: 202 });
  });
  it("5xx is retried on the schedule", () => {
    expect(classify(503, "30", "u", '{"status":"error","code":"unavailable","message":"down"}')).toMatchObject({
      kind: "retry",
      status: 503,
      error: "503 unavailable: down",
    });
  });
  it("429 and 408 wait for Retry-After and say so", () => {
    expect(classify(429, "7", "u", "")).toMatchObject({ kind: "retry", afterMs: 7000, decision: expect.stringMatching(/Retry-After 7 s/) });
    expect(classify(408, null, "u", "")).toMatchObject({ kind: "retry", afterMs: undefined, decision: expect.stringMatching(/no Retry-After/) });
    const inTenSeconds = new Date(Date.now() + 10_000).toUTCString();
    const r = classify(429, inTenSeconds, "u", "");
    expect(r.kind === "retry" && r.afterMs).toBeGreaterThanOrEqual(9000);
  });
  it("every other 4xx is final", () => {
    for (const s of [400, 401, 404, 413, 415]) expect(classify(s, null, "u", "").kind).toBe("failed");
  });
});

describe("backoffDelay", () => {
  const schedule = [60_000, 300_000, 1_800_000, 3_600_000];
  it("follows IFP-6's 1m, 5m, 30m, then hourly", () => {
    const mid = () => 0.5;
    expect([1, 2, 3, 4, 5, 20].map((n) => backoffDelay(schedule, n, mid))).toEqual([60_000, 300_000, 1_800_000, 3_600_000, 3_600_000, 3_600_000]);
  });
  it("jitters by at most 10%", () => {
    expect(backoffDelay(schedule, 1, () => 0)).toBe(54_000);
    expect(backoffDelay(schedule, 1, () => 0.999999)).toBeLessThanOrEqual(66_000);
  });
});
