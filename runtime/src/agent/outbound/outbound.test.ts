import { describe, expect, it } from "vitest";
import { classify } from "./outbound.ts";

describe("classify (spec 7.2 rule 3)", () => {
  it("2xx is delivered", () => {
    expect(classify(202, null, "u", "")).toEqual({ kind: "delivered", via: "u", status: 202 });
  });
  it("5xx is retried on the schedule, never sooner than a Retry-After", () => {
    expect(classify(503, "30", "u", '{"status":"error","code":"unavailable","message":"down"}')).toEqual({
      kind: "retry",
      via: "u",
      status: 503,
      error: "503 unavailable: down",
      notBeforeMs: 30_000,
    });
    expect(classify(500, null, "u", "")).toEqual({ kind: "retry", via: "u", status: 500, error: "500" });
  });
  it("429, 425 and 408 wait for Retry-After and say so", () => {
    expect(classify(429, "7", "u", "")).toMatchObject({
      kind: "retry",
      afterMs: 7000,
      decision: expect.stringMatching(/Retry-After 7 s/),
    });
    expect(classify(425, "2", "u", "")).toMatchObject({
      kind: "retry",
      afterMs: 2000,
      decision: expect.stringMatching(/425 is not final/),
    });
    expect(classify(408, null, "u", "")).toMatchObject({
      kind: "retry",
      afterMs: undefined,
      decision: expect.stringMatching(/no Retry-After/),
    });
    expect(classify(429, "0", "u", "")).toMatchObject({ kind: "retry", afterMs: 1000 });
    const inTenSeconds = new Date(Date.now() + 10_000).toUTCString();
    const r = classify(429, inTenSeconds, "u", "");
    expect(r.kind === "retry" && r.afterMs).toBeGreaterThanOrEqual(9000);
  });
  it("every other 4xx is final", () => {
    for (const s of [400, 401, 404, 413, 415])
      expect(classify(s, null, "u", "")).toMatchObject({ kind: "failed", error: `${s}; a 4xx is never retried` });
  });
  it("a redirect is final, not followed and not retried for the whole window", () => {
    for (const s of [301, 302, 307, 308])
      expect(classify(s, null, "u", "")).toEqual({
        kind: "failed",
        via: "u",
        status: s,
        error: `${s}; redirects are not followed`,
      });
  });
});
