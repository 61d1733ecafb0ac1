import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { NatsServer } from "../../../e2e/support/nats.ts";
import { Relay } from "../../src/resources/relay.ts";
import { Agent } from "../../src/resources/agent.ts";
import { agentNames } from "../../src/agent/names.ts";
import { runAgent, type Tls, withNatsAndTls } from "../support/agent-harness.ts";
import { identity, peerOf, signed } from "../support/fixtures.ts";
import { alice, bob, carol, clientOf, relayEnv, runRelay, type RelayEnv } from "../support/relay-harness.ts";
import { jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";

let nats: NatsServer;
let tls: Tls;
withNatsAndTls((n, t) => ([nats, tls] = [n, t]));

const KB = 1024;
const text = (bytes: number) => "x".repeat(bytes);

describe("inbox quotas", () => {
  const senders = [identity("quota-a"), identity("quota-b"), identity("quota-c"), identity("quota-d")];

  it("refuses new messages with 503 inbox_full when the inbox holds spec.inbox.maxBytes, and keeps every message it answered 202", async () => {
    const self = identity("small-inbox");
    const agent = await runAgent({
      self,
      natsUrl: nats.url,
      tls,
      spec: {
        peers: senders.map(peerOf),
        inbox: { maxBytes: 1024 * KB, rateLimit: { perSenderPerMinute: 1000, perSenderBytesPerHour: 100 * 1024 * KB } },
      },
    });
    const nc = await connect({ servers: nats.url });
    try {
      const statuses: number[] = [];
      let full: Awaited<ReturnType<typeof agent.post>> | undefined;
      for (let i = 0; i < 30 && !full; i++) {
        const res = await agent.post(signed(senders[i % senders.length]!, self.agentId, {}, text(100 * KB)));
        statuses.push(res.status);
        if (res.status !== 202) full = res;
      }
      expect(full?.status).toBe(503);
      expect(JSON.parse(full!.text)).toMatchObject({ status: "error", code: "inbox_full" });
      expect(Number(full!.headers["retry-after"])).toBeGreaterThan(0);
      const accepted = statuses.filter((s) => s === 202).length;
      expect(accepted).toBeGreaterThanOrEqual(5);
      // Nothing answered 202 was dropped to make room (discard: new).
      const info = await (await jetstreamManager(nc)).streams.info(agentNames(self.agentId).inboxStream);
      expect(info.config).toMatchObject({ max_bytes: 1024 * KB, discard: "new" });
      expect(info.state.messages).toBe(accepted);
    } finally {
      await nc.close();
      await agent.close();
    }
  });

  it("gives each sender a byte quota per hour: 429 with Retry-After past it, other senders unaffected", async () => {
    const self = identity("quota-inbox");
    const [a, b] = senders as [ReturnType<typeof identity>, ReturnType<typeof identity>];
    const agent = await runAgent({
      self,
      natsUrl: nats.url,
      tls,
      spec: {
        peers: [peerOf(a), peerOf(b)],
        inbox: { rateLimit: { perSenderPerMinute: 1000, perSenderBytesPerHour: 200 * KB } },
      },
    });
    try {
      const statuses: number[] = [];
      for (let i = 0; i < 4; i++) statuses.push((await agent.post(signed(a, self.agentId, {}, text(60 * KB)))).status);
      expect(statuses).toEqual([202, 202, 202, 429]);
      const refused = await agent.post(signed(a, self.agentId, {}, text(60 * KB)));
      expect(refused.status).toBe(429);
      expect(JSON.parse(refused.text)).toMatchObject({
        code: "rate_limited",
        message: expect.stringMatching(/byte quota/),
      });
      expect(Number(refused.headers["retry-after"])).toBeGreaterThan(0);
      expect((await agent.post(signed(b, self.agentId, {}, text(60 * KB)))).status).toBe(202);
      // A small message from the same sender still fits what is left.
      expect((await agent.post(signed(a, self.agentId, {}, "small"))).status).toBe(202);
    } finally {
      await agent.close();
    }
  });

  it("has sane defaults: an inbox of 64 MiB (reserved in the NATS store: docs/reliability.md) and 64 MiB per sender and hour", () => {
    const a = Agent.parse({
      apiVersion: "ifp.dev/v1alpha1",
      kind: "Agent",
      metadata: { name: "a" },
      spec: { agentId: "a" },
    });
    expect(a.spec.inbox.maxBytes).toBe(64 * 1024 * KB);
    expect(a.spec.inbox.rateLimit.perSenderBytesPerHour).toBe(64 * 1024 * KB);
  });
});

describe("relay quotas", () => {
  let env: RelayEnv;
  beforeAll(async () => {
    env = await relayEnv();
  });
  afterAll(async () => {
    await env?.close();
  });

  it("counts a topic's fan-out against the publisher's byte quota", async () => {
    const relay = await runRelay(env, { limits: { perAgentBytesPerHour: 300 * KB } });
    try {
      await clientOf(env, relay, bob).subscribe(["gossip.news"]);
      await clientOf(env, relay, carol).subscribe(["gossip.news"]);
      const topicMessage = () => signed(alice, "topic:gossip.news", {}, text(60 * KB));
      // Two copies each: 120 KB, 240 KB, then past 300 KB.
      const statuses: number[] = [];
      for (let i = 0; i < 3; i++) statuses.push((await clientOf(env, relay, alice).publish(topicMessage())).status);
      expect(statuses).toEqual([202, 202, 429]);
      const refused = await clientOf(env, relay, alice).publish(topicMessage());
      expect(refused.status).toBe(429);
      expect(JSON.parse(refused.text)).toMatchObject({
        code: "rate_limited",
        message: expect.stringMatching(/2 copies/),
      });
      expect(Number(refused.retryAfter)).toBeGreaterThan(0);
      // Another publisher has its own quota.
      expect((await clientOf(env, relay, bob).publish(signed(bob, alice.agentId, {}, text(60 * KB)))).status).toBe(202);
    } finally {
      await relay.close();
    }
  });

  it("is not unlimited by default: a stream of 1 GiB, 256 MiB per agent and hour", () => {
    const r = Relay.parse({
      apiVersion: "ifp.dev/v1alpha1",
      kind: "Relay",
      metadata: { name: "r" },
      spec: { url: "https://relay.example.com" },
    });
    expect(r.spec.retention.maxBytes).toBe(1024 * 1024 * KB);
    expect(r.spec.limits.perAgentBytesPerHour).toBe(256 * 1024 * KB);
  });
});
