import { createServer } from "node:https";
import type { AddressInfo } from "node:net";
import pino from "pino";
import { describe, expect, it } from "vitest";
import type { NatsServer } from "../../../e2e/support/nats.ts";
import { consistently, waitFor } from "../../../e2e/support/ports.ts";
import { DeliveryStates } from "../../src/agent/outbound/delivery-state.ts";
import { agentNames } from "../../src/agent/names.ts";
import { OutboundDelivery } from "../../src/agent/outbound/outbound.ts";
import { OutboxStore } from "../../src/agent/outbound/outbox.ts";
import { DiscoveryClient } from "../../src/discovery/client.ts";
import { Nats } from "../../src/nats/connection.ts";
import { HttpClient } from "../../src/net/http-client.ts";
import { createRuntimeMetrics } from "../../src/server/metrics.ts";
import { type Tls, withNatsAndTls } from "../support/agent-harness.ts";
import { identity, signed } from "../support/fixtures.ts";
import { outboxSettled } from "../support/probes.ts";

let nats: NatsServer;
let tls: Tls;
withNatsAndTls((n, t) => ([nats, tls] = [n, t]));

/** Inboxes that take `delayMs` to answer 202 and count the POSTs each gets. */
async function slowPeers(n: number, delayMs: number) {
  const posts = new Array<number>(n).fill(0);
  const servers = await Promise.all(
    posts.map(async (_p, i) => {
      const server = createServer({ cert: tls.cert, key: tls.key }, (req, res) => {
        req.resume();
        req.on("end", () => {
          if (req.method !== "POST") return res.writeHead(404).end();
          posts[i]!++;
          setTimeout(
            () => res.writeHead(202, { "content-type": "application/json" }).end('{"status":"accepted"}'),
            delayMs,
          );
        });
      });
      await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
      return server;
    }),
  );
  return {
    posts,
    urls: servers.map((s) => `https://localhost:${(s.address() as AddressInfo).port}`),
    close: () => Promise.all(servers.map((s) => new Promise<void>((r) => s.close(() => r())))),
  };
}

describe("outbound delivery and the acknowledgement wait", () => {
  it("delivers a message whose recipients together take longer than ack_wait exactly once to each", async () => {
    const self = identity("slow-sender");
    const names = agentNames(self.agentId);
    const log = pino({ level: process.env.IFP_TEST_LOG ?? "silent" });
    const conn = new Nats({ url: nats.url, name: "ack-wait test" }, log);
    await conn.start();
    const peers = await slowPeers(4, 1_200);
    const http = new HttpClient({ extraCa: tls.ca });
    const outbox = new OutboxStore(conn, names);
    const states = new DeliveryStates(conn, names.outboxStateBucket);
    await outbox.ensure();
    await states.ensure();
    const recipients = peers.urls.map((_u, i) => `peer-${i}`);
    const delivery = new OutboundDelivery({
      nats: conn,
      names,
      states,
      http,
      discovery: new DiscoveryClient(http),
      log,
      metrics: createRuntimeMetrics("agent"),
      // Four recipients of 1.2 s each, one after the other: 4.8 s of work in a 1.5 s ack_wait.
      options: {
        backoffMs: [60_000],
        retryForMs: 3600_000,
        peerUrls: new Map(recipients.map((r, i) => [r, peers.urls[i]!])),
        ackWaitMs: 1_500,
      },
      onGiveUp: async () => {},
    });
    try {
      const m = signed(self, recipients);
      await outbox.enqueue(m);
      delivery.start();
      const done = await waitFor(
        "every recipient delivered",
        async () => {
          const r = await states.get(m.headers.message_id);
          return r?.recipients.every((x) => x.state === "delivered") ? r : undefined;
        },
        30_000,
        200,
      );
      expect(done.recipients.map((r) => r.attempts)).toEqual([1, 1, 1, 1]);
      // Acknowledged, so never redelivered; and well past another ack_wait, nothing is sent twice.
      await waitFor("the outbox settled", () => outboxSettled(nats.url, self.agentId), 15_000);
      await consistently("one post to each recipient", () => peers.posts.every((n) => n === 1), 2_000, 100);
    } finally {
      await delivery.stop();
      await http.close();
      await conn.close();
      await peers.close();
    }
  });
});
