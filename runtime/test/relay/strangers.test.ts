// A relay open to senders it does not serve (spec.publishers, docs/relay.md): a stranger whose key
// the relay finds by lookup — a did:key, or an https agent id's identity document over verified
// TLS — delivers to an agent the relay serves; it can never read, acknowledge or subscribe; the
// policy, the deny list and the quotas refuse with the documented errors; identity lookups go
// through the relay's outbound address checks. Real nats-server, real relays, real HTTPS.
import { createServer, type Server } from "node:https";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import WebSocket from "ws";
import { signRequest } from "../../src/protocol/http-signatures.ts";
import { didKeyFromPublicKey } from "../../src/protocol/did-key.ts";
import type { RelaySpecInput } from "../../src/resources/relay.ts";
import { httpsRequest } from "../../../e2e/support/https.ts";
import { startRelay } from "../../src/relay/main.ts";
import { identity, peerOf, signed, tempDir, writeRelayManifest, type TestIdentity } from "../support/fixtures.ts";
import {
  alice,
  baseUrl,
  bob,
  clientOf,
  ids,
  openWs,
  randomName,
  readSse,
  relayEnv,
  runRelay,
  waitFor,
  type RelayEnv,
} from "../support/relay-harness.ts";
import { withRuntimeLog } from "../support/runtime-log.ts";

let env: RelayEnv;
const relays: Awaited<ReturnType<typeof runRelay>>[] = [];
/** A relay serving alice and bob, with `spec` besides. */
const relayWith = async (spec: Partial<RelaySpecInput> = {}) => {
  const r = await runRelay(env, { agents: [peerOf(alice), peerOf(bob)], ...spec });
  relays.push(r);
  return r;
};

/** A fresh did:key sender: anyone can make one; the relay finds its key in its id. */
function didSender(): TestIdentity {
  const id = identity("placeholder");
  const did = didKeyFromPublicKey(id.publicKey);
  return { ...id, agentId: did, signing: { ...id.signing, agentId: did } };
}

/** An https server on loopback that serves identity documents for the ids it is given, and counts its requests. */
let docs: Server;
let docsBase = "";
const served = new Map<string, TestIdentity>();
let docRequests = 0;

beforeAll(async () => {
  env = await relayEnv();
  docs = createServer({ cert: env.tls.cert, key: env.tls.key }, (req, res) => {
    docRequests++;
    const agentId = `${docsBase}${(req.url ?? "").replace(/\/\.well-known\/agent\/identity$/, "")}`;
    const who = served.get(agentId);
    if (!who) return res.writeHead(404).end();
    res.writeHead(200, { "content-type": "application/json" });
    res.end(
      JSON.stringify({
        ifp: 5,
        agent_id: agentId,
        keys: [{ key_id: who.keyId, type: "ed25519", public_key: who.publicKey, status: "active" }],
      }),
    );
  });
  await new Promise<void>((r) => docs.listen(0, "127.0.0.1", r));
  const addr = docs.address();
  docsBase = `https://localhost:${typeof addr === "object" && addr ? addr.port : 0}`;
}, 60_000);

afterAll(async () => {
  await Promise.all(relays.map((r) => r.close()));
  docs?.closeAllConnections();
  await new Promise<void>((r) => (docs ? docs.close(() => r()) : r()));
  await env?.close();
});

/** An https stranger whose identity document the test server serves. */
function httpsSender(path: string): TestIdentity {
  const id = identity(`${docsBase}/${path}`);
  served.set(id.agentId, id);
  return id;
}

const body = (text: string) => JSON.parse(text) as { status: string; code: string; message: string };

describe("relay: senders it does not serve (spec.publishers)", () => {
  it("by default takes a did:key stranger's message for an agent it serves, which only that agent reads and acknowledges", async () => {
    const relay = await relayWith();
    const stranger = didSender();
    const s = clientOf(env, relay, stranger);
    const m = signed(stranger, "bob-agent");
    const res = await s.publish(m);
    expect(res.status, res.text).toBe(202);
    expect(body(res.text)).toMatchObject({ status: "accepted", recipients: 1, stored: 1 });
    // A batch too.
    const batched = signed(stranger, "bob-agent");
    expect((await s.publishMany([batched])).results).toMatchObject([
      { status: 202, message_id: batched.headers.message_id },
    ]);

    const { messages } = await clientOf(env, relay, bob).pull();
    expect(ids(messages)).toEqual([m.headers.message_id, batched.headers.message_id]);
    expect(messages[0]!.trace!.received).toEqual([
      { by: "relay:https://localhost", with: "https+ifp-4", at: expect.any(String), from: stranger.agentId },
    ]);

    // Reading, acknowledging, deleting, subscribing, dead letters, event streams: never the stranger's.
    const refused = async (p: Promise<{ status: number; text: string }>) => {
      const r = await p;
      expect(r.status, r.text).toBe(401);
      expect(body(r.text)).toMatchObject({
        status: "error",
        code: "unknown_sender",
        message: expect.stringMatching(/only they read, acknowledge and subscribe/),
      });
    };
    await refused(s.request("GET", "/relay/messages"));
    await refused(s.request("DELETE", `/relay/messages/${encodeURIComponent(m.headers.message_id)}`));
    await refused(s.request("POST", "/relay/messages/ack", { message_ids: [m.headers.message_id] }));
    await refused(s.request("POST", "/relay/subscribe", { subscribe: { topics: ["gossip.exchange"] } }));
    await refused(s.request("GET", "/relay/subscribe"));
    await refused(s.request("GET", "/relay/dead-letters"));
    await expect(readSse(env, relay, stranger, { count: 1 })).rejects.toThrow(/status 401/);
    const wsUrl = `${baseUrl(relay).replace("https", "wss")}/relay/ws?push=off`;
    const wsHeaders = await signRequest({ method: "GET", url: wsUrl.replace("wss", "https") }, stranger.signing);
    const upgrade = await new Promise<number>((resolve, reject) => {
      const ws = new WebSocket(wsUrl, { headers: wsHeaders, ca: env.tls.ca });
      ws.once("open", () => (ws.close(), resolve(101)));
      ws.once("unexpected-response", (_q, r) => (r.resume(), resolve(r.statusCode ?? 0)));
      ws.once("error", reject);
    });
    expect(upgrade).toBe(401);
    // bob's copies are untouched by all of that.
    expect(ids((await clientOf(env, relay, bob).pull()).messages)).toEqual([
      m.headers.message_id,
      batched.headers.message_id,
    ]);

    // Not an agent the relay serves: nothing stored, as for any sender.
    const elsewhere = await s.publish(signed(stranger, "carol-agent"));
    expect([elsewhere.status, body(elsewhere.text).code]).toEqual([404, "not_found"]);
    // Topics are the served agents' by default.
    await clientOf(env, relay, alice).subscribe(["gossip.exchange"]);
    const topic = await s.publish(signed(stranger, "topic:gossip.exchange"));
    expect([topic.status, body(topic.text).code]).toEqual([404, "not_found"]);
    expect((await clientOf(env, relay, alice).pull()).messages).toEqual([]);
  });

  it("finds an https stranger's key in its identity document, and refuses a name it cannot look up", async () => {
    const relay = await relayWith();
    const stranger = httpsSender("agents/erin");
    const res = await clientOf(env, relay, stranger).publish(signed(stranger, "alice-agent"));
    expect(res.status, res.text).toBe(202);
    const [got] = (await clientOf(env, relay, alice).pull()).messages;
    expect(got!.trace!.received![0]!.from).toBe(stranger.agentId);

    // Signed with another key than the document lists.
    const forger = { ...identity("x"), agentId: stranger.agentId };
    forger.signing = { ...forger.signing, agentId: stranger.agentId };
    const forged = await clientOf(env, relay, forger).publish(signed(forger, "alice-agent"));
    expect([forged.status, body(forged.text).code]).toEqual([401, "invalid_signature"]);
    // No document there.
    const ghost = identity(`${docsBase}/agents/ghost`);
    const lost = await clientOf(env, relay, ghost).publish(signed(ghost, "alice-agent"));
    expect([lost.status, body(lost.text).code]).toEqual([401, "unknown_sender"]);
    // A simple name: nothing to look up, refused without a request.
    const before = docRequests;
    const nobody = identity("nobody-agent");
    const named = await clientOf(env, relay, nobody).publish(signed(nobody, "alice-agent"));
    expect([named.status, body(named.text).code]).toEqual([401, "unknown_sender"]);
    expect(docRequests).toBe(before);
  });

  it("looks identities up only where outbound requests may go: a loopback agent id is never fetched", async () => {
    const relay = await relayWith({ network: { allowPrivateTargets: [] } });
    const stranger = httpsSender("agents/internal");
    const before = docRequests;
    const res = await clientOf(env, relay, stranger).publish(signed(stranger, "bob-agent"));
    expect(res.status, res.text).toBe(401);
    expect(body(res.text)).toMatchObject({
      code: "unknown_sender",
      message: expect.stringMatching(/could not be obtained/),
    });
    // The answer does not describe what the fetch met, and nothing reached the server.
    expect(body(res.text).message).not.toMatch(/127\.0\.0\.1|refused|loopback/i);
    expect(docRequests).toBe(before);
    // A did:key needs no request and is still taken.
    const did = didSender();
    expect((await clientOf(env, relay, did).publish(signed(did, "bob-agent"))).status).toBe(202);
  });

  it("does not look identities up in the install's cluster networks (--allow-private-targets), which webhooks may reach", async () => {
    const dir = tempDir();
    const manifest = writeRelayManifest(
      dir,
      { url: "https://localhost", agents: [peerOf(alice), peerOf(bob)], network: { allowPrivateTargets: [] } },
      randomName(),
    );
    const relay = await withRuntimeLog("relay with cluster networks (in-process)", (logger) =>
      startRelay({
        manifest,
        port: 0,
        host: "127.0.0.1",
        tlsCert: env.tls.files.cert,
        tlsKey: env.tls.files.key,
        nats: { url: env.nats.url },
        caFile: env.tls.files.ca,
        allowPrivateTargets: ["127.0.0.0/8", "::1/128"],
        logger,
      }),
    );
    try {
      await waitFor(
        "relay ready",
        async () => (await httpsRequest(`${relay.url}/readyz`, { ca: env.tls.ca })).status === 200,
      );
      const stranger = httpsSender("agents/cluster");
      const before = docRequests;
      const res = await clientOf(env, relay, stranger).publish(signed(stranger, "bob-agent"));
      expect([res.status, body(res.text).code]).toEqual([401, "unknown_sender"]);
      expect(docRequests).toBe(before);
      // Webhooks still reach the cluster networks: a registration on loopback is taken.
      expect((await clientOf(env, relay, bob).registerWebhook(`${docsBase}/hook`)).push?.webhook).toBe(
        `${docsBase}/hook`,
      );
    } finally {
      await relay.close();
    }
  });

  it("refuses senders on the policy's deny side with 401, and serves its own agents whatever the policy", async () => {
    const denied = didSender();
    const allowed = didSender();
    const https = httpsSender("agents/frank");
    const cases: [RelaySpecInput["publishers"], TestIdentity, number, string][] = [
      [{ policy: "registered" }, allowed, 401, "unknown_sender"],
      [{ deny: { agentIds: [denied.agentId] } }, denied, 401, "unknown_sender"],
      [{ deny: { agentIds: [denied.agentId] } }, allowed, 202, ""],
      [{ deny: { domains: ["localhost"] } }, https, 401, "unknown_sender"],
      [{ policy: "selector", allow: { agentIds: [allowed.agentId] } }, allowed, 202, ""],
      [{ policy: "selector", allow: { agentIds: [allowed.agentId] } }, denied, 401, "unknown_sender"],
      [{ policy: "selector", allow: { domains: ["localhost"] } }, https, 202, ""],
      [{ minAuthLevel: 2 }, allowed, 401, "insufficient_auth_level"],
      [{ minAuthLevel: 2 }, https, 202, ""],
    ];
    for (const [publishers, who, status, code] of cases) {
      const r = await relayWith({ publishers });
      const res = await clientOf(env, r, who).publish(signed(who, "bob-agent"));
      expect(res.status, `${JSON.stringify(publishers)} ${who.agentId}: ${res.text}`).toBe(status);
      if (code) expect(body(res.text).code).toBe(code);
      expect((await clientOf(env, r, alice).publish(signed(alice, "bob-agent"))).status).toBe(202);
      await r.close();
      relays.splice(relays.indexOf(r), 1);
    }
  }, 120_000);

  it("denies a host on spec.publishers.deny.domains however the id writes it (a trailing dot, upper case) before any lookup", async () => {
    const relay = await relayWith({ publishers: { deny: { domains: ["localhost"] } } });
    for (const host of ["localhost.", "LOCALHOST.", "LocalHost"]) {
      const who = httpsSender(`agents/${randomName()}`);
      const id = who.agentId.replace("//localhost", `//${host}`);
      const dotted = { ...who, agentId: id, signing: { ...who.signing, agentId: id } };
      served.set(id, dotted);
      const before = docRequests;
      const res = await clientOf(env, relay, dotted).publish(signed(dotted, "bob-agent"));
      expect([res.status, body(res.text).code], `${id}: ${res.text}`).toEqual([401, "unknown_sender"]);
      expect(body(res.text).message, id).toBe(`${id} may not publish here (spec.publishers.deny)`);
      expect(docRequests, `${id} was looked up`).toBe(before);
    }
  });

  it("holds strangers to their quotas: requests per minute, bytes per hour, copies stored, and per recipient", async () => {
    const relay = await relayWith({
      limits: { maxMessageBytes: 8 * 1024 },
      publishers: {
        limits: {
          perSenderPerMinute: 4,
          perSenderBytesPerHour: 16 * 1024,
          perSenderStored: 3,
          perRecipientPerMinute: 5,
        },
      },
    });
    const publish = (who: TestIdentity, text = "hi") =>
      clientOf(env, relay, who).publish(signed(who, "bob-agent", {}, text));
    const expect429 = async (p: ReturnType<typeof publish>, what: RegExp) => {
      const res = await p;
      expect(res.status, res.text).toBe(429);
      expect(Number(res.retryAfter)).toBeGreaterThan(0);
      expect(body(res.text)).toMatchObject({ code: "rate_limited", message: expect.stringMatching(what) });
    };

    // Copies stored: 3, then refused.
    const a = didSender();
    for (let i = 0; i < 3; i++) expect((await publish(a)).status).toBe(202);
    await expect429(publish(a), /perSenderStored/);
    // Requests per minute: the fifth request of a sender is refused before anything else.
    await expect429(publish(a), /perSenderPerMinute|requests per minute/);

    // Bytes per hour: two messages of about 7 KiB fit in 16 KiB, a third does not.
    const b = didSender();
    const big = "x".repeat(6 * 1024 + 512);
    expect((await publish(b, big)).status).toBe(202);
    expect((await publish(b, big)).status).toBe(202);
    await expect429(publish(b, big), /perSenderBytesPerHour/);
    // Over maxMessageBytes: 413, as for any sender.
    const huge = await publish(didSender(), "x".repeat(9 * 1024));
    expect([huge.status, body(huge.text).code]).toEqual([413, "payload_too_large"]);

    // Per recipient: bob has taken 5 strangers' messages this minute; a new stranger is refused for bob...
    const c = didSender();
    for (let i = 0; i < 3; i++) await expect429(publish(c), /perRecipientPerMinute/);
    // ...and a refused message spent none of its sender's quotas (3 copies stored at most): alice still takes it.
    expect((await clientOf(env, relay, c).publish(signed(c, "alice-agent"))).status).toBe(202);
    // The agents the relay serves are not held to the strangers' quotas.
    expect((await clientOf(env, relay, alice).publish(signed(alice, "bob-agent"))).status).toBe(202);
  });

  it("refuses a stranger with 503 relay_full when the relay is full, like anyone, and counts only copies stored", async () => {
    const relay = await relayWith({
      retention: { maxMessages: 2 },
      publishers: { limits: { perSenderStored: 2, streamShare: 100 } },
    });
    const first = didSender();
    const m = signed(first, "bob-agent");
    expect((await clientOf(env, relay, first).publish(m)).status).toBe(202);
    // The sender's retry finds its copy there: nothing more stored, nothing more counted...
    const again = await clientOf(env, relay, first).publish(m);
    expect([again.status, body(again.text)]).toEqual([202, expect.objectContaining({ stored: 0, duplicates: 1 })]);
    // ...so a second message of its own still fits in its two copies, and fills the relay.
    expect((await clientOf(env, relay, first).publish(signed(first, "alice-agent"))).status).toBe(202);
    const second = didSender();
    const n = signed(second, "bob-agent");
    for (let i = 0; i < 2; i++) {
      const res = await clientOf(env, relay, second).publish(n);
      expect([res.status, body(res.text).code, res.retryAfter]).toEqual([503, "relay_full", "30"]);
    }
    // Once there is room, the refused message goes in: the 503s spent none of its two copies' quota.
    expect(await clientOf(env, relay, bob).ack(m.headers.message_id)).toBe(true);
    expect((await clientOf(env, relay, second).publish(n)).status).toBe(202);
  });

  it("keeps the stream's room for the agents it serves: 32 fresh keys fill only the strangers' share (streamShare)", async () => {
    // 20 messages, half of them the strangers' at most; no per-sender or per-network quota binds first.
    const relay = await relayWith({ retention: { maxMessages: 20 }, publishers: { limits: { streamShare: 50 } } });
    const codes: number[] = [];
    for (let i = 0; i < 32; i++) {
      const s = didSender();
      const res = await clientOf(env, relay, s).publish(signed(s, "bob-agent"));
      codes.push(res.status);
      if (res.status !== 202) {
        expect(res.status, res.text).toBe(429);
        expect(body(res.text)).toMatchObject({ code: "rate_limited", message: expect.stringMatching(/streamShare/) });
      }
    }
    expect(codes.filter((c) => c === 202)).toHaveLength(10);
    // The served agents still have the other half: none of alice's ten publishes is refused relay_full.
    for (let i = 0; i < 10; i++) {
      const res = await clientOf(env, relay, alice).publish(signed(alice, "bob-agent"));
      expect(res.status, res.text).toBe(202);
    }
    // The share is of the stream as it stands: once bob has read and acknowledged, strangers have room again.
    const { messages } = await clientOf(env, relay, bob).pull();
    expect(messages).toHaveLength(20);
    for (const m of messages) expect(await clientOf(env, relay, bob).ack(m.headers.message_id)).toBe(true);
    const late = didSender();
    await waitFor("strangers' share read again", async () => {
      const res = await clientOf(env, relay, late).publish(signed(late, "bob-agent"));
      return res.status === 202;
    });
  });

  it("keeps the stream's bytes for the agents it serves too: 40 fresh keys' 4 KiB messages fill only half of a 96 KiB stream", async () => {
    const relay = await relayWith({
      retention: { maxBytes: 96 * 1024 },
      limits: { maxMessageBytes: 8 * 1024 },
      publishers: { limits: { streamShare: 50 } },
    });
    const text = "x".repeat(4 * 1024);
    const codes: number[] = [];
    for (let i = 0; i < 40; i++) {
      const s = didSender();
      const res = await clientOf(env, relay, s).publish(signed(s, "bob-agent", {}, text));
      codes.push(res.status);
      if (res.status !== 202) {
        expect(res.status, res.text).toBe(429);
        expect(body(res.text)).toMatchObject({ code: "rate_limited", message: expect.stringMatching(/streamShare/) });
      }
    }
    // About 4.6 KiB a copy as JetStream counts it: at most 48 KiB of them, never the whole stream.
    const stored = codes.filter((c) => c === 202).length;
    expect(stored).toBeGreaterThanOrEqual(8);
    expect(stored).toBeLessThanOrEqual(10);
    // The served agents have the other half: nine of alice's publishes of the same size are all taken.
    for (let i = 0; i < 9; i++) {
      const res = await clientOf(env, relay, alice).publish(signed(alice, "bob-agent", {}, text));
      expect(res.status, res.text).toBe(202);
    }
  });

  it("holds fresh keys from one client network to one budget (perNetworkPerMinute), and all strangers to another (totalPerMinute)", async () => {
    const relay = await relayWith({
      publishers: { limits: { perSenderPerMinute: 5, perSenderStored: 5, perNetworkPerMinute: 8 } },
    });
    const outcome: string[] = [];
    for (let i = 0; i < 32; i++) {
      const s = didSender();
      const res = await clientOf(env, relay, s).publish(signed(s, "bob-agent"));
      outcome.push(res.status === 202 ? "stored" : `${res.status} ${body(res.text).message}`);
    }
    expect(outcome.filter((o) => o === "stored")).toHaveLength(8);
    expect(outcome.slice(8)).toEqual(
      Array.from({ length: 24 }, () => expect.stringMatching(/^429 .*perNetworkPerMinute/)),
    );
    // The served agents are not held to it.
    expect((await clientOf(env, relay, alice).publish(signed(alice, "bob-agent"))).status).toBe(202);

    const all = await relayWith({ publishers: { limits: { perNetworkPerMinute: 100, totalPerMinute: 6 } } });
    const stored: number[] = [];
    for (let i = 0; i < 8; i++) {
      const s = didSender();
      stored.push((await clientOf(env, all, s).publish(signed(s, "alice-agent"))).status);
    }
    expect(stored).toEqual([202, 202, 202, 202, 202, 202, 429, 429]);
  });

  it("counts every copy against a stranger's quotas: perSenderStored by copies, perSenderBytesPerHour by bytes × copies", async () => {
    const relay = await relayWith({
      limits: { maxMessageBytes: 8 * 1024 },
      publishers: { limits: { perSenderStored: 3, perSenderBytesPerHour: 16 * 1024 } },
    });
    const both = ["alice-agent", "bob-agent"];
    const a = didSender();
    const first = await clientOf(env, relay, a).publish(signed(a, both));
    expect([first.status, body(first.text)]).toEqual([202, expect.objectContaining({ recipients: 2, stored: 2 })]);
    // Two more copies would be four: refused, though it is the sender's second message.
    const second = await clientOf(env, relay, a).publish(signed(a, both));
    expect([second.status, body(second.text).message]).toEqual([429, expect.stringMatching(/perSenderStored/)]);
    // One more copy fits.
    expect((await clientOf(env, relay, a).publish(signed(a, "bob-agent"))).status).toBe(202);

    // About 6.6 KiB to two recipients is about 13 KiB of the 16 KiB an hour: one more copy is over.
    const b = didSender();
    const big = "x".repeat(6 * 1024);
    expect((await clientOf(env, relay, b).publish(signed(b, both, {}, big))).status).toBe(202);
    const over = await clientOf(env, relay, b).publish(signed(b, "bob-agent", {}, big));
    expect([over.status, body(over.text).message]).toEqual([429, expect.stringMatching(/perSenderBytesPerHour/)]);
  });

  it("lets strangers publish to topics when spec.publishers.topics says so", async () => {
    const relay = await relayWith({ publishers: { topics: true } });
    await clientOf(env, relay, alice).subscribe(["gossip.exchange"]);
    const stranger = didSender();
    const res = await clientOf(env, relay, stranger).publish(signed(stranger, "topic:gossip.exchange"));
    expect(body(res.text)).toMatchObject({ status: "accepted", recipients: 1 });
    expect((await clientOf(env, relay, alice).pull()).messages.map((m) => m.headers.from.agent)).toEqual([
      stranger.agentId,
    ]);
  });

  it("names the transport a message came by in its trace entry: wss+ifp-4 for a WebSocket publish", async () => {
    const relay = await relayWith();
    const session = await openWs(env, relay, alice, undefined, { push: "off" });
    const m = signed(alice, "bob-agent");
    session.send({ type: "publish", message: m });
    await waitFor("the answer", () => session.answerTo(m.headers.message_id));
    await session.close();
    const [got] = (await clientOf(env, relay, bob).pull()).messages;
    expect(got!.trace!.received).toEqual([
      { by: "relay:https://localhost", with: "wss+ifp-4", at: expect.any(String), from: "alice-agent" },
    ]);
  });
});
