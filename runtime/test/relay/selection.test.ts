import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LocalApiClient } from "../../src/client/local.ts";
import { relayOrder } from "../../src/agent/outbound/outbound.ts";
import { RelayClient } from "../../src/net/relay-client.ts";
import type { RunningRelay } from "../../src/relay/main.ts";
import { identity, message, peerOf, signed } from "../support/fixtures.ts";
import { runAgent, startHandler } from "../support/agent-harness.ts";
import { baseUrl, relayEnv, runRelay, waitFor, type RelayEnv } from "../support/relay-harness.ts";

const alice = identity("alice-agent");
const bob = identity("bob-agent");
const carol = identity("carol-agent");

let env: RelayEnv;
// r1 does not serve bob; r2 does not serve carol.
let r1: RunningRelay;
let r2: RunningRelay;
beforeAll(async () => {
  env = await relayEnv();
  r1 = await runRelay(env, { agents: [peerOf(alice), peerOf(carol)] });
  r2 = await runRelay(env, { agents: [peerOf(alice), peerOf(bob)] });
});
afterAll(async () => {
  await Promise.all([r1?.close(), r2?.close()]);
  await env?.close();
});

describe("relay selection (IFP-8 2.3)", () => {
  it("takes relays from the peer's documents, moves on after a refusal, and gives each relay only its recipients", async () => {
    const handler = await startHandler();
    // Bob's inbox is unreachable (its baseUrl points nowhere); his documents name both relays, r1 first.
    const b = await runAgent({
      self: bob,
      natsUrl: env.nats.url,
      tls: env.tls,
      spec: {
        baseUrl: "https://localhost:1",
        peers: [peerOf(alice)],
        relay: { urls: [baseUrl(r1), baseUrl(r2)], pollInterval: "300ms", receive: "poll" },
        handler: { url: handler.url },
      },
    });
    const a = await runAgent({
      self: alice,
      natsUrl: env.nats.url,
      tls: env.tls,
      spec: {
        peers: [
          { ...peerOf(bob), url: b.url.replace("127.0.0.1", "localhost") },
          { ...peerOf(carol), relay: { urls: [baseUrl(r1)] } },
        ],
        outbound: { backoff: ["300ms"], retryFor: "30s" },
        // Both relays are this deployment's own, so clear messages may go through them.
        encryption: { relayTrust: [r1, r2].map((r) => ({ url: baseUrl(r), level: "self-operated" as const })) },
      },
    });
    try {
      const local = new LocalApiClient(a.localApiUrl);
      const sent = await local.send({ to: ["bob-agent", "carol-agent"], text: "to two agents on different relays" });
      const record = await waitFor(
        "both delivered",
        async () => {
          const r = await local.status(sent.message_id);
          return r.recipients.every((x) => x.state === "delivered") ? r : undefined;
        },
        30_000,
      );
      expect(record.recipients).toEqual([
        expect.objectContaining({ agent: "bob-agent", via: `relay:${baseUrl(r2)}` }),
        expect.objectContaining({ agent: "carol-agent", via: `relay:${baseUrl(r1)}` }),
      ]);
      const got = await waitFor("bob's handler", () =>
        handler.received.find((r) => r.body.headers.message_id === sent.message_id),
      );
      expect(got.body.trace.received).toEqual([expect.objectContaining({ by: "relay:https://localhost" })]);
      // Carol's copy waits at r1, the signed headers.to unchanged; r2 stored nothing for carol.
      const atR1 = (await new RelayClient(baseUrl(r1), carol.signing, env.http).pull()).messages;
      expect(atR1.map((m) => m.headers.message_id)).toEqual([sent.message_id]);
      expect(atR1[0]!.headers.to).toEqual([{ agent: "bob-agent" }, { agent: "carol-agent" }]);
    } finally {
      await Promise.all([a.close(), b.close()]);
      await handler.close();
    }
  });

  it("refuses a recipient narrowing that is not a direct recipient of the message", async () => {
    const relay = new RelayClient(baseUrl(r2), alice.signing, env.http);
    const m = signed(alice, ["bob-agent", "topic:gossip.exchange"]);
    const bad = async (recipients: string[]) => {
      const res = await relay.publish(m, recipients);
      return { status: res.status, code: (JSON.parse(res.text) as { code: string }).code };
    };
    expect(await bad(["mallory-agent"])).toEqual({ status: 400, code: "invalid_format" });
    expect(await bad(["topic:gossip.exchange"])).toEqual({ status: 400, code: "invalid_format" });
    expect(await bad(Array.from({ length: 101 }, () => "bob-agent"))).toEqual({ status: 400, code: "invalid_format" });
    // Narrowed to a recipient the relay does not serve: 404, as without narrowing.
    expect(
      (
        await new RelayClient(baseUrl(r1), alice.signing, env.http).publish(
          signed(alice, ["bob-agent", "carol-agent"]),
          ["bob-agent"],
        )
      ).status,
    ).toBe(404);
    const ok = await relay.publish(m, ["bob-agent"]);
    expect(ok.status).toBe(202);
    expect(JSON.parse(ok.text)).toMatchObject({ recipients: 1 });
  });

  it("tries a peer's relays in the order its preference gives: as listed with any, spread by message_id with spread", async () => {
    // r3 and r2 both serve bob and both take alice's messages; bob has no https route.
    const r3 = await runRelay(env, { agents: [peerOf(alice), peerOf(bob)] });
    const relays = [baseUrl(r3), baseUrl(r2)];
    /** Send each message_id from an alice whose spec.peers gives bob the relays with this preference; the `via` of each. */
    const sendWith = async (preference: string, ids: string[]) => {
      const a = await runAgent({
        self: alice,
        natsUrl: env.nats.url,
        tls: env.tls,
        spec: {
          peers: [{ ...peerOf(bob), relay: { urls: relays, preference } }],
          outbound: { backoff: ["300ms"], retryFor: "30s" },
          encryption: { relayTrust: relays.map((url) => ({ url, level: "self-operated" as const })) },
        },
      });
      try {
        const local = new LocalApiClient(a.localApiUrl);
        for (const id of ids)
          await local.send(message("alice-agent", "bob-agent", { message_id: id, phase: "context" }, id));
        return await Promise.all(
          ids.map((id) =>
            waitFor(
              `${id} delivered`,
              async () => {
                const r = await local.status(id);
                return r.state === "delivered" ? r.recipients[0]!.via : undefined;
              },
              30_000,
            ),
          ),
        );
      } finally {
        await a.close();
      }
    };
    /** The message_ids waiting for bob at a relay, of those given. */
    const heldAt = async (relay: RunningRelay, ids: string[]) =>
      (await new RelayClient(baseUrl(relay), bob.signing, env.http).pull({ limit: 100 })).messages
        .map((m) => m.headers.message_id)
        .filter((id) => ids.includes(id))
        .sort();
    try {
      // any: always the first relay listed, which is up.
      const listed = Array.from({ length: 4 }, (_, i) => `msg:preference-any-${i}`);
      expect(await sendWith("any", listed)).toEqual(listed.map(() => `relay:${relays[0]}`));
      // spread: each message starts at the relay its message_id picks; these ids pick both.
      const spread = Array.from({ length: 8 }, (_, i) => `msg:preference-spread-${i}`);
      const firsts = spread.map((id) => relayOrder({ urls: relays, preference: "spread" }, id)[0]!);
      expect(new Set(firsts)).toEqual(new Set(relays));
      expect(await sendWith("spread", spread)).toEqual(firsts.map((u) => `relay:${u}`));
      // The copies are where the delivery records say, and nowhere else.
      const all = [...listed, ...spread];
      expect(await heldAt(r3, all)).toEqual([...listed, ...spread.filter((_, i) => firsts[i] === relays[0])].sort());
      expect(await heldAt(r2, all)).toEqual(spread.filter((_, i) => firsts[i] === relays[1]).sort());
    } finally {
      await r3.close();
    }
  });

  it("orders relays by preference", () => {
    const urls = ["https://a", "https://b", "https://c"];
    expect(relayOrder({ urls, preference: "any" }, "msg:1")).toEqual(urls);
    expect(relayOrder({ urls }, "msg:1")).toEqual(urls);
    expect(relayOrder({ urls, preference: "something-else" }, "msg:1")).toEqual(urls);
    expect(relayOrder({ urls: [...urls, "https://a"] }, "msg:1")).toEqual(urls);
    const starts = new Set(
      Array.from({ length: 30 }, (_, i) => relayOrder({ urls, preference: "spread" }, `msg:${i}`)[0]),
    );
    expect(starts.size).toBe(3);
    for (let i = 0; i < 5; i++)
      expect([...relayOrder({ urls, preference: "spread" }, `msg:${i}`)].sort()).toEqual(urls);
  });
});
