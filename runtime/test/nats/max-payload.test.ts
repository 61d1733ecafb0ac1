// A NATS server whose max_payload is below maxMessageBytes: a message between the two is
// refused with 413 (final), never a 503 the sender would retry for ever.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startNats, type NatsServer } from "../../../e2e/support/nats.ts";
import { localhostTls } from "../../../e2e/support/tls.ts";
import { HttpClient } from "../../src/net/http-client.ts";
import type { RunningRelay } from "../../src/relay/main.ts";
import { runAgent, type Tls } from "../support/agent-harness.ts";
import { peerOf, signed } from "../support/fixtures.ts";
import { alice, bob, clientOf, runRelay, type RelayEnv } from "../support/relay-harness.ts";

let nats: NatsServer;
let tls: Tls;
let env: RelayEnv;
let relay: RunningRelay;

beforeAll(async () => {
  [nats, tls] = await Promise.all([startNats({ config: "max_payload: 262144\n" }), localhostTls()]);
  env = { nats, tls, http: new HttpClient({ extraCa: tls.ca }), close: async () => undefined };
  relay = await runRelay(env);
}, 60_000);

afterAll(async () => {
  await relay?.close();
  await env?.http.close();
  await nats?.close();
});

describe("NATS max_payload below maxMessageBytes", () => {
  it("the inbox answers 413 for a message NATS cannot carry, and takes one that fits", async () => {
    const b = await runAgent({ self: bob, natsUrl: nats.url, tls, spec: { peers: [peerOf(alice)] } });
    try {
      const large = signed(alice, "bob-agent", {}, "x".repeat(400_000));
      const res = await b.post(large);
      expect(res.status).toBe(413);
      expect(JSON.parse(res.text)).toMatchObject({ status: "error", code: "payload_too_large" });
      expect((await b.post(signed(alice, "bob-agent", {}, "x".repeat(100_000)))).status).toBe(202);
    } finally {
      await b.close();
    }
  });

  it("the relay's publish answers 413 the same way", async () => {
    const res = await clientOf(env, relay, alice).publish(signed(alice, "bob-agent", {}, "x".repeat(400_000)));
    expect(res.status).toBe(413);
    expect(JSON.parse(res.text)).toMatchObject({ code: "payload_too_large" });
    expect(
      (await clientOf(env, relay, alice).publish(signed(alice, "bob-agent", {}, "x".repeat(100_000)))).status,
    ).toBe(202);
  });
});
