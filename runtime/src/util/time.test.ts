import { describe, expect, it } from "vitest";
import { isoSeconds } from "./time.ts";

describe("isoSeconds", () => {
  it("drops the fraction of a second and keeps UTC", () => {
    expect(isoSeconds(new Date("2026-03-04T12:00:01.999Z"))).toBe("2026-03-04T12:00:01Z");
    expect(isoSeconds(new Date(Date.UTC(2026, 0, 2, 3, 4, 5)))).toBe("2026-01-02T03:04:05Z");
  });
});
