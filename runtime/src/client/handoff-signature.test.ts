import { describe, expect, it } from "vitest";
import { handoffSignatureProblem, signHandoff } from "./handoff-signature.ts";

const secret = "s3cret-of-at-least-16-chars";
const body = '{"headers":{"message_id":"m1"},"body":{"text":"hi"}}';
const now = Date.parse("2026-11-24T12:00:00Z");

describe("hand-off signature", () => {
  it("verifies what it signed, within five minutes either way", () => {
    const header = signHandoff(secret, body, now);
    expect(header).toMatch(/^t=1795521600,v1=[0-9a-f]{64}$/);
    expect(handoffSignatureProblem(secret, header, body, now)).toBeUndefined();
    expect(handoffSignatureProblem(secret, header, Buffer.from(body), now + 299_000)).toBeUndefined();
    expect(handoffSignatureProblem(secret, header, body, now - 299_000)).toBeUndefined();
  });

  it("refuses another secret, a changed body, an old or future time, and anything malformed, saying why", () => {
    const header = signHandoff(secret, body, now);
    expect(handoffSignatureProblem("another-secret-16chars", header, body, now)).toMatch(/does not match/);
    expect(handoffSignatureProblem(secret, header, body.replace("hi", "ho"), now)).toMatch(/does not match/);
    expect(handoffSignatureProblem(secret, header, body, now + 301_000)).toMatch(/more than 300 s from now/);
    expect(handoffSignatureProblem(secret, header, body, now - 301_000)).toMatch(/more than 300 s from now/);
    // A signature of the same body at another time does not fit this time.
    const v1 = header.split("v1=")[1];
    expect(handoffSignatureProblem(secret, `t=${now / 1000 + 1},v1=${v1}`, body, now)).toMatch(/does not match/);
    for (const bad of [undefined, "", ["t=1,v1=00"], "v1=abc", "t=abc,v1=" + "0".repeat(64), `t=${now / 1000},v1=${"0".repeat(63)}`, `t=${now / 1000},v1=${"g".repeat(64)}`]) {
      expect(handoffSignatureProblem(secret, bad as never, body, now)).toMatch(/no ifp-handoff-signature header|is not t=<seconds>,v1=<64 hex digits>/);
    }
  });
});
