import { describe, expect, it } from "vitest";
import { encodeToken, nanos } from "./nats.ts";

describe("encodeToken", () => {
  it("keeps simple ids readable and escapes everything NATS treats specially", () => {
    expect(encodeToken("pete-agent")).toBe("pete-agent");
    expect(encodeToken("a.b*c>d e")).toBe("a_2Eb_2Ac_3Ed_20e");
    expect(encodeToken("under_score")).toBe("under_5Fscore");
    expect(encodeToken("https://x.example/a")).toMatch(/^[A-Za-z0-9_-]+$/);
  });

  it("is injective on distinct ids and bounded in length", () => {
    expect(encodeToken("a.b")).not.toBe(encodeToken("a_2Eb"));
    const long = encodeToken("x".repeat(500));
    expect(long.length).toBeLessThanOrEqual(96);
    expect(long).not.toBe(encodeToken(`${"x".repeat(499)}y`));
  });
});

describe("nanos", () => {
  it("turns milliseconds into JetStream's whole nanoseconds", () => {
    expect(nanos(1500)).toBe(1_500_000_000);
    expect(nanos(0.0000004)).toBe(0);
  });
});
