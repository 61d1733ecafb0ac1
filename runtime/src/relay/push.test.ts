import { describe, expect, it } from "vitest";
import { classifyWebhookAnswer, pushBackoff } from "./push.ts";

describe("push backoff", () => {
  it("doubles from backoffDelay (exponential) or grows by it (linear), capped at an hour", () => {
    const exp = { backoff: "exponential" as const, backoffDelay: "1s" };
    expect([1, 2, 3, 4].map((n) => pushBackoff(exp, n))).toEqual([1000, 2000, 4000, 8000]);
    const lin = { backoff: "linear" as const, backoffDelay: "500ms" };
    expect([1, 2, 3].map((n) => pushBackoff(lin, n))).toEqual([500, 1000, 1500]);
    expect(pushBackoff(exp, 40)).toBe(3_600_000);
  });
});

describe("webhook answers", () => {
  const now = Date.parse("2026-03-04T12:00:00Z");
  it("takes a 2xx as delivered", () => {
    for (const s of [200, 201, 202, 204, 299])
      expect(classifyWebhookAnswer(s, null, now)).toEqual({ kind: "delivered" });
  });

  it("retries 408, 425, 429 and 5xx, no sooner than Retry-After", () => {
    for (const s of [408, 425, 429, 500, 502, 503, 504])
      expect(classifyWebhookAnswer(s, null, now).kind, String(s)).toBe("retry");
    expect(classifyWebhookAnswer(429, "7", now)).toEqual({
      kind: "retry",
      reason: "webhook answered 429",
      minDelayMs: 7000,
    });
    expect(classifyWebhookAnswer(503, "Wed, 04 Mar 2026 12:00:30 GMT", now)).toMatchObject({ minDelayMs: 30_000 });
    expect(classifyWebhookAnswer(503, "999999", now)).toMatchObject({ minDelayMs: 3_600_000 });
  });

  it("gives up at once on other 4xx and on redirects (spec 7.2 rule 3)", () => {
    for (const s of [400, 401, 403, 404, 410, 413, 422])
      expect(classifyWebhookAnswer(s, null, now)).toEqual({
        kind: "refused",
        reason: `webhook refused the message with ${s}`,
      });
    expect(classifyWebhookAnswer(302, null, now)).toEqual({
      kind: "refused",
      reason: "webhook answered 302 (redirects are not followed)",
    });
  });
});
