import { createHmac } from "node:crypto";
import { describe, expect, it } from "vitest";
import {
  HANDOFF_SIGNED_HEADERS,
  handoffSignatureProblem,
  handoffSigningBase,
  signHandoff,
  type HandoffHeaders,
} from "./handoff-signature.ts";

const secret = "s3cret-of-at-least-16-chars";
const body = '{"headers":{"message_id":"m1"},"body":{"text":"hi"}}';
const now = Date.parse("2026-11-24T12:00:00Z");
const handed: HandoffHeaders = {
  "idempotency-key": "pete-agent m1",
  "ifp-message-id": "m1",
  "ifp-sender": "pete-agent",
  "ifp-auth-level": "2",
  "ifp-auth-source": "peers",
  "ifp-delivery-attempt": "1",
};
/** A request's headers as Node gives them to the application. */
const request = (signature: string, h: Record<string, string | string[]> = handed as Record<string, string>) => ({
  "content-type": "application/json; charset=utf-8",
  ...h,
  "ifp-handoff-signature": signature,
});

describe("hand-off signature (scheme v2)", () => {
  it("signs the documented base string: scheme, time, the hand-off headers in order, a blank line, the body", () => {
    expect(handoffSigningBase(1795521600, handed)).toBe(
      "ifp-handoff-v2\n1795521600\n" +
        "idempotency-key:pete-agent m1\nifp-message-id:m1\nifp-sender:pete-agent\nifp-auth-level:2\nifp-auth-source:peers\nifp-encrypted:\nifp-delivery-attempt:1\n\n",
    );
    const header = signHandoff(secret, handed, body, now);
    const mac = createHmac("sha256", secret)
      .update(handoffSigningBase(1795521600, handed) + body)
      .digest("hex");
    expect(header).toBe(`t=1795521600,v2=${mac}`);
  });

  it("verifies what it signed, within five minutes either way, from Node headers or a Fetch Headers", () => {
    const header = signHandoff(secret, handed, body, now);
    expect(handoffSignatureProblem(secret, request(header), body, now)).toBeUndefined();
    expect(handoffSignatureProblem(secret, request(header), Buffer.from(body), now + 299_000)).toBeUndefined();
    expect(handoffSignatureProblem(secret, request(header), body, now - 299_000)).toBeUndefined();
    expect(handoffSignatureProblem(secret, new Headers(request(header)), body, now)).toBeUndefined();
    // Header names in another case are the same headers.
    expect(
      handoffSignatureProblem(
        secret,
        { "IFP-SENDER": "pete-agent", ...request(header), "ifp-sender": undefined },
        body,
        now,
      ),
    ).toBeUndefined();
  });

  it("refuses each signed header changed, added or dropped", () => {
    const encrypted = { ...handed, "ifp-encrypted": "x25519-a256gcm" };
    const header = signHandoff(secret, encrypted, body, now);
    expect(handoffSignatureProblem(secret, request(header, encrypted), body, now)).toBeUndefined();
    for (const name of HANDOFF_SIGNED_HEADERS) {
      const changed = { ...encrypted, [name]: `${encrypted[name]}x` };
      expect(handoffSignatureProblem(secret, request(header, changed), body, now), name).toMatch(/does not match/);
      const { [name]: _, ...dropped } = encrypted;
      expect(handoffSignatureProblem(secret, request(header, dropped), body, now), name).toMatch(/does not match/);
    }
    // A clear message's hand-off claimed to have been encrypted.
    const clear = signHandoff(secret, handed, body, now);
    expect(handoffSignatureProblem(secret, request(clear, encrypted), body, now)).toMatch(/does not match/);
    expect(handoffSignatureProblem(secret, request(clear, { ...handed, "ifp-auth-level": "3" }), body, now)).toMatch(
      /does not match/,
    );
  });

  it("refuses a signed header sent twice", () => {
    const header = signHandoff(secret, handed, body, now);
    expect(
      handoffSignatureProblem(
        secret,
        request(header, { ...handed, "ifp-sender": ["pete-agent", "mallory"] } as never),
        body,
        now,
      ),
    ).toMatch(/ifp-sender appears more than once/);
    expect(handoffSignatureProblem(secret, { ...request(header), "Ifp-Sender": "mallory" }, body, now)).toMatch(
      /ifp-sender appears more than once/,
    );
  });

  it("refuses the v1 scheme, which covers the body only", () => {
    const t = Math.floor(now / 1000);
    const v1 = createHmac("sha256", secret).update(`${t}.`).update(body).digest("hex");
    expect(handoffSignatureProblem(secret, request(`t=${t},v1=${v1}`), body, now)).toMatch(
      /scheme v1, which does not cover the headers; only v2 is accepted/,
    );
  });

  it("refuses another secret, a changed body, an old or future time, and anything malformed, saying why", () => {
    const header = signHandoff(secret, handed, body, now);
    expect(handoffSignatureProblem("another-secret-16chars", request(header), body, now)).toMatch(/does not match/);
    expect(handoffSignatureProblem(secret, request(header), body.replace("hi", "ho"), now)).toMatch(/does not match/);
    expect(handoffSignatureProblem(secret, request(header), body, now + 301_000)).toMatch(/more than 300 s from now/);
    expect(handoffSignatureProblem(secret, request(header), body, now - 301_000)).toMatch(/more than 300 s from now/);
    // A signature of the same hand-off at another time does not fit this time.
    const v2 = header.split("v2=")[1];
    expect(handoffSignatureProblem(secret, request(`t=${now / 1000 + 1},v2=${v2}`), body, now)).toMatch(
      /does not match/,
    );
    expect(handoffSignatureProblem(secret, request(`t=${now / 1000},t=${now / 1000 + 1},v2=${v2}`), body, now)).toMatch(
      /names t more than once/,
    );
    for (const bad of [
      "",
      "v2=abc",
      `t=abc,v2=${"0".repeat(64)}`,
      `t=${now / 1000},v2=${"0".repeat(63)}`,
      `t=${now / 1000},v2=${"g".repeat(64)}`,
    ]) {
      expect(handoffSignatureProblem(secret, request(bad), body, now)).toMatch(
        /no ifp-handoff-signature header|is not t=<seconds>,v2=<64 hex digits>/,
      );
    }
    expect(handoffSignatureProblem(secret, handed as Record<string, string>, body, now)).toMatch(
      /no ifp-handoff-signature header/,
    );
    expect(
      handoffSignatureProblem(secret, request(header, { ...handed, "ifp-sender": 7 } as never), body, now),
    ).toMatch(/is not text/);
    // The signature header alone, as the v1 verifier took it: refused, saying what to pass.
    expect(handoffSignatureProblem(secret, header as never, body, now)).toMatch(/pass all of the request's headers/);
    expect(handoffSignatureProblem(secret, undefined as never, body, now)).toMatch(/pass all of the request's headers/);
  });
});
