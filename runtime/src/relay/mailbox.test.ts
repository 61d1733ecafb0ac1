import { JetStreamApiError } from "@nats-io/jetstream";
import { headers } from "@nats-io/transport-node";
import { describe, expect, it } from "vitest";
import { isFull } from "../nats/streams.ts";
import { isExpired, relayFull, COPY_HEADERS } from "./mailbox.ts";

describe("a full relay", () => {
  it("is recognised from JetStream's refusals under discard new", () => {
    expect(
      isFull(new JetStreamApiError({ code: 503, err_code: 10077, description: "maximum messages exceeded" })),
    ).toBe(true);
    expect(isFull(new JetStreamApiError({ code: 503, err_code: 10078, description: "maximum bytes exceeded" }))).toBe(
      true,
    );
    expect(isFull(new JetStreamApiError({ code: 503, err_code: 10047, description: "insufficient resources" }))).toBe(
      true,
    );
    // A write beyond the account's JetStream limits: the runtime's account is full.
    expect(
      isFull(
        new JetStreamApiError({ code: 400, err_code: 10002, description: "resource limits exceeded for account" }),
      ),
    ).toBe(true);
    expect(isFull(new Error("maximum messages exceeded"))).toBe(true);
    expect(isFull(new Error("TIMEOUT"))).toBe(false);
    expect(isFull(new JetStreamApiError({ code: 503, err_code: 10039, description: "jetstream not enabled" }))).toBe(
      false,
    );
  });

  it("answers 503 relay_full with Retry-After", () => {
    const e = relayFull("full");
    expect([e.statusCode, e.code, e.headers["retry-after"]]).toEqual([503, "relay_full", "30"]);
  });
});

describe("expiry", () => {
  it("follows Ifp-Expires-At, and a copy without it does not expire", () => {
    const h = headers();
    h.set(COPY_HEADERS.expiresAt, "2026-03-04T12:00:00.000Z");
    expect(isExpired(h, Date.parse("2026-03-04T11:59:59Z"))).toBe(false);
    expect(isExpired(h, Date.parse("2026-03-04T12:00:00Z"))).toBe(true);
    expect(isExpired(headers(), Date.now())).toBe(false);
    expect(isExpired(undefined, Date.now())).toBe(false);
  });
});
