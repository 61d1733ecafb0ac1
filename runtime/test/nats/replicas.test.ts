// Several replicas of one runtime on one nats-server, sharing its durable consumers and KV:
// each message is handed on, delivered and pushed once across them, and what one replica
// learns (subscriptions, webhook registrations, the capability set's `updated`) the other uses.
import { createServer as createHttpServer, type Server } from "node:http";
import { createServer as createHttpsServer } from "node:https";
import { jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { NatsServer } from "../../../e2e/support/nats.ts";
import { consistently, waitFor } from "../../../e2e/support/wait.ts";
import { agentNames } from "../../src/agent/names.ts";
import { LocalApiClient } from "../../src/client/local.ts";
import { HttpClient } from "../../src/net/http-client.ts";
import type { RunningRelay } from "../../src/relay/main.ts";
import { runAgent, type Tls, withNatsAndTls } from "../support/agent-harness.ts";
import { identity, peerOf, signed, tempDir } from "../support/fixtures.ts";
import { handOffsSettled, outboxSettled } from "../support/probes.ts";
import {
  alice,
  bob,
  carol,
  clientOf,
  pushSettled,
  randomName,
  runRelay,
  webhook,
  type RelayEnv,
} from "../support/relay-harness.ts";

let nats: NatsServer;
let tls: Tls;
withNatsAndTls((n, t) => ([nats, tls] = [n, t]));

/** How many times each value occurs. */
const tally = (values: string[]) => values.reduce((m, v) => m.set(v, (m.get(v) ?? 0) + 1), new Map<string, number>());
const onlyOnce = (values: string[]) => [...tally(values).values()].every((n) => n === 1);

/** A plain HTTP handler for both replicas; it records which replica (path) handed each message on. */
async function sharedHandler() {
  const got: { path: string; messageId: string }[] = [];
  const server: Server = createHttpServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      got.push({ path: req.url ?? "", messageId: JSON.parse(Buffer.concat(chunks).toString()).headers.message_id });
      res.writeHead(200).end();
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const addr = server.address();
  const base = `http://127.0.0.1:${typeof addr === "object" && addr ? addr.port : 0}`;
  return { base, got, close: () => new Promise<void>((r) => server.close(() => r())) };
}

/** A peer's HTTPS inbox that takes everything and records the message ids. */
async function acceptingPeer() {
  const got: string[] = [];
  const server = createHttpsServer({ cert: tls.cert, key: tls.key }, (req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      // Only the inbox: the discovery documents (identity, capabilities) are not served.
      if (!req.url?.endsWith("/inbox")) return void res.writeHead(404).end();
      got.push(JSON.parse(Buffer.concat(chunks).toString()).headers.message_id);
      res.writeHead(202, { "content-type": "application/json" }).end('{"status":"accepted"}');
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const addr = server.address();
  return {
    url: `https://localhost:${typeof addr === "object" && addr ? addr.port : 0}`,
    got,
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}

describe("two replicas of one Agent", () => {
  const self = identity("replicated-agent");
  const pete = identity("pete-agent");
  const quinn = identity("quinn-agent");
  let handler: Awaited<ReturnType<typeof sharedHandler>>;
  let peer: Awaited<ReturnType<typeof acceptingPeer>>;
  let r1: Awaited<ReturnType<typeof runAgent>>;
  let r2: Awaited<ReturnType<typeof runAgent>>;

  beforeAll(async () => {
    [handler, peer] = await Promise.all([sharedHandler(), acceptingPeer()]);
    // Each replica is told a different path of the same handler only so that the test can
    // see which one handed a message on; everything else in the manifests is the same.
    const spec = (path: string) => ({
      capabilities: [{ name: "gossip.exchange", description: "Gossip" }],
      peers: [peerOf(pete), { ...peerOf(quinn), url: peer.url }],
      handler: { url: `${handler.base}${path}` },
      outbound: { backoff: ["300ms"], retryFor: "30s" },
    });
    r1 = await runAgent({ self, dir: tempDir(), natsUrl: nats.url, tls, spec: spec("/r1") });
    // The second replica starts in a later second: without agreement its `updated` would differ.
    const started = new Date().toISOString().slice(0, 19);
    await waitFor("the next second", () => new Date().toISOString().slice(0, 19) !== started, 2_000, 20);
    r2 = await runAgent({ self, dir: tempDir(), natsUrl: nats.url, tls, spec: spec("/r2") });
  });
  afterAll(async () => {
    await Promise.all([r1?.close(), r2?.close()]);
    await Promise.all([handler?.close(), peer?.close()]);
  });

  it("publishes the same capability document, `updated` included, from both", async () => {
    const [d1, d2] = await Promise.all([
      r1.get("/.well-known/agent/capabilities"),
      r2.get("/.well-known/agent/capabilities"),
    ]);
    expect(d1.json().updated).toBe(d2.json().updated);
    expect(d1.headers.etag).toBe(d2.headers.etag);
  });

  it("hands each of 50 inbound messages to the handler exactly once across both, each replica taking a share", async () => {
    // Both replicas are pulling from the shared consumer before the messages arrive.
    const nc = await connect({ servers: nats.url });
    try {
      const jsm = await jetstreamManager(nc);
      const names = agentNames(self.agentId);
      await waitFor(
        "both replicas to pull",
        async () => (await jsm.consumers.info(names.inboxStream, names.handlerConsumer)).num_waiting >= 2,
        20_000,
        100,
      );
    } finally {
      await nc.close();
    }
    const sent: string[] = [];
    for (let i = 0; i < 50; i++) {
      const m = signed(pete, self.agentId);
      sent.push(m.headers.message_id);
      expect((await (i % 2 ? r2 : r1).post(m)).status).toBe(202);
    }
    await waitFor(
      "every message handed on",
      () => sent.every((id) => handler.got.some((g) => g.messageId === id)),
      30_000,
    );
    // The witness: the shared consumer holds nothing unacknowledged or waiting, so nothing is handed on again.
    await waitFor("the hand-offs settled", () => handOffsSettled(nats.url, self.agentId), 15_000);
    await consistently("no message handed on twice", () => onlyOnce(handler.got.map((g) => g.messageId)), 1_500);
    expect(handler.got).toHaveLength(50);
    const byReplica = tally(handler.got.map((g) => g.path));
    expect(byReplica.get("/r1")).toBeGreaterThan(0);
    expect(byReplica.get("/r2")).toBeGreaterThan(0);
  });

  it("delivers each outbound message once, whichever replica queued it", async () => {
    const ids: string[] = [];
    for (let i = 0; i < 10; i++) {
      const sent = await new LocalApiClient((i % 2 ? r2 : r1).localApiUrl).send({
        to: quinn.agentId,
        phase: "greeting",
        text: `hello ${i}`,
      });
      ids.push(sent.message_id);
    }
    await waitFor("every message delivered", () => ids.every((id) => peer.got.includes(id)), 30_000);
    await waitFor("the outbox settled", () => outboxSettled(nats.url, self.agentId), 15_000);
    await consistently("no message delivered twice", () => onlyOnce(peer.got), 1_500);
    expect(peer.got.sort()).toEqual([...ids].sort());
    // Either replica reports the delivery of any of them: the records are shared.
    const record = await new LocalApiClient(r2.localApiUrl).status(ids[0]!);
    expect(record).toMatchObject({ state: "delivered" });
  });
});

describe("two replicas of one Relay", () => {
  let env: RelayEnv;
  let a: RunningRelay;
  let b: RunningRelay;
  beforeAll(async () => {
    env = { nats, tls, http: new HttpClient({ extraCa: tls.ca }) } as RelayEnv;
    const name = randomName("replicated");
    [a, b] = await Promise.all([runRelay(env, {}, name), runRelay(env, {}, name)]);
  });
  afterAll(async () => {
    await Promise.all([a?.close(), b?.close()]);
    await env?.http.close();
  });

  it("shares topic subscriptions: subscribed through one, used by the other", async () => {
    await clientOf(env, a, bob).subscribe(["replicas.news"]);
    await waitFor(
      "replica b to know the subscription",
      async () => (await clientOf(env, b, bob).subscriptions()).topics.includes("replicas.news"),
      10_000,
    );
    const m = signed(alice, "topic:replicas.news");
    expect(JSON.parse((await clientOf(env, b, alice).publish(m)).text)).toMatchObject({ recipients: 1 });
    expect((await clientOf(env, a, bob).pull()).messages.map((x) => x.headers.message_id)).toEqual([
      m.headers.message_id,
    ]);
    await clientOf(env, a, bob).ack(m.headers.message_id);

    await clientOf(env, b, bob).unsubscribe(["replicas.news"]);
    await waitFor(
      "replica a to forget it",
      async () => (await clientOf(env, a, bob).subscriptions()).topics.length === 0,
      10_000,
    );
    expect(
      JSON.parse((await clientOf(env, a, alice).publish(signed(alice, "topic:replicas.news"))).text),
    ).toMatchObject({ recipients: 0 });
  });

  it("pushes each message once to a webhook registered through one replica", async () => {
    const hook = await webhook(env, () => 200);
    try {
      await clientOf(env, a, carol).registerWebhook(hook.url);
      await waitFor(
        "replica b to know the webhook",
        async () => (await clientOf(env, b, carol).subscriptions()).push?.webhook === hook.url,
        10_000,
      );
      const sent: string[] = [];
      for (let i = 0; i < 30; i++) {
        const m = signed(i % 2 ? alice : bob, carol.agentId);
        sent.push(m.headers.message_id);
        expect((await clientOf(env, i % 2 ? b : a, i % 2 ? alice : bob).publish(m)).status).toBe(202);
      }
      const pushed = () => hook.calls.map((c) => c.body.headers.message_id as string);
      await waitFor("every message pushed", () => sent.every((id) => pushed().includes(id)), 30_000);
      await waitFor("carol's push consumer settled", () => pushSettled(env, a, carol), 15_000);
      await consistently("no message pushed twice", () => onlyOnce(pushed()), 1_500);
      expect(pushed().sort()).toEqual([...sent].sort());
      expect((await clientOf(env, b, carol).pull()).messages).toEqual([]);
    } finally {
      await clientOf(env, b, carol).registerWebhook(null);
      await hook.close();
    }
  });
});
