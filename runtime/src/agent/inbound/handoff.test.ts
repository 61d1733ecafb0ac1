// The hand-off's clock for a message with ttl_seconds: when it has expired, and how long a refused
// hand-off waits before the next try.
import { describe, expect, it } from "vitest";
import { expiredFor, retryDelay } from "./handoff.ts";

const message = (headers: Record<string, unknown>) => new TextEncoder().encode(JSON.stringify({ headers }));
const date = "2026-03-01T10:00:00.000Z";
const at = Date.parse(date);

describe("a refused hand-off's next try", () => {
  it("waits the backoff for a message without ttl_seconds, or one that cannot be read", () => {
    expect(retryDelay(60_000, message({ date }), at)).toBe(60_000);
    expect(retryDelay(60_000, new TextEncoder().encode("{"), at)).toBe(60_000);
  });

  it("waits no longer than the message has to live, so that it is set aside when it expires", () => {
    const m = message({ date, ttl_seconds: 8 });
    expect(retryDelay(60_000, m, at + 3_000)).toBe(5_000);
    expect(retryDelay(1_000, m, at + 3_000)).toBe(1_000);
    expect(retryDelay(60_000, m, at + 9_000)).toBe(0);
    expect(expiredFor(m, at + 7_999)).toBeUndefined();
    expect(expiredFor(m, at + 8_000)).toMatch(/^expired: ttl_seconds 8 from 2026-03-01T10:00:00.000Z passed/);
  });
});
