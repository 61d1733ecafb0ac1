// The agent's relay poll acknowledges the messages of a page it made durable with one signed
// POST /relay/messages/ack, and a relay without it (404 or 405) with one DELETE per message. On a
// real nats-server and a real relay over TLS.
import { createServer, request, type Server } from "node:https";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RelayClient } from "../../src/net/relay-client.ts";
import type { RunningRelay } from "../../src/relay/main.ts";
import { runAgent, scrapeMetrics, startHandler } from "../support/agent-harness.ts";
import { peerOf, signed } from "../support/fixtures.ts";
import { metricValue } from "../support/probes.ts";
import { alice, baseUrl, bob, relayEnv, runRelay, waitFor, type RelayEnv } from "../support/relay-harness.ts";

let env: RelayEnv;
let relay: RunningRelay;

beforeAll(async () => {
  env = await relayEnv();
  relay = await runRelay(env);
}, 60_000);
afterAll(async () => {
  await relay?.close();
  await env?.close();
});

/** The acknowledgement requests the relay answered: a DELETE or a whole POST /relay/messages/ack counts one. */
const ackRequests = async () =>
  metricValue(await scrapeMetrics(relay.metricsUrl), "ifp_relay_operations_total", { operation: "ack", result: "ok" });

describe("the agent's relay poll", () => {
  it("acknowledges a page of messages with one request, each handed on once", async () => {
    const n = 20;
    const sent = Array.from({ length: n }, (_, i) => signed(bob, "alice-agent", {}, `page ${i}`));
    const bobAtRelay = new RelayClient(baseUrl(relay), bob.signing, env.http);
    for (const m of sent) expect((await bobAtRelay.publish(m)).status).toBe(202);
    const before = await ackRequests();
    const handler = await startHandler();
    const a = await runAgent({
      self: alice,
      natsUrl: env.nats.url,
      tls: env.tls,
      spec: {
        peers: [peerOf(bob)],
        relay: { urls: [baseUrl(relay)], pollInterval: "200ms", receive: "poll" },
        handler: { url: handler.url },
      },
    });
    try {
      await waitFor(
        "the mailbox emptied",
        async () => (await new RelayClient(baseUrl(relay), alice.signing, env.http).pull()).messages.length === 0,
      );
      expect((await ackRequests()) - before).toBe(1);
      await waitFor("every message handed on", () => handler.received.length >= n || undefined);
      expect(handler.received.map((r) => r.body.headers.message_id).sort()).toEqual(
        sent.map((m) => m.headers.message_id).sort(),
      );
    } finally {
      await a.close();
      await handler.close();
    }
  });

  for (const status of [404, 405]) {
    it(`acknowledges each message with a DELETE at a relay that answers ${status} to the batch, and keeps to that`, async () => {
      const older = await olderRelay(status);
      try {
        const bobAtRelay = new RelayClient(older.url, bob.signing, env.http);
        const publish = async (label: string) => {
          const page = Array.from({ length: 5 }, (_, i) => signed(bob, "alice-agent", {}, `${label} ${i}`));
          for (const m of page) expect((await bobAtRelay.publish(m)).status).toBe(202);
          return page;
        };
        const first = await publish("first");
        const handler = await startHandler();
        const a = await runAgent({
          self: alice,
          natsUrl: env.nats.url,
          tls: env.tls,
          spec: {
            peers: [peerOf(bob)],
            relay: { urls: [older.url], pollInterval: "200ms", receive: "poll" },
            handler: { url: handler.url },
          },
        });
        const aliceAtRelay = new RelayClient(older.url, alice.signing, env.http);
        const emptied = () =>
          waitFor("the mailbox emptied", async () => (await aliceAtRelay.pull()).messages.length === 0);
        try {
          await emptied();
          // One try of the batch, then one DELETE for each message of the page.
          expect(older.batchTries()).toBe(1);
          expect(older.deletes()).toBe(first.length);
          // Remembered: the next page goes straight to DELETEs.
          const second = await publish("second");
          await waitFor("the second page taken", () => older.deletes() >= first.length + second.length || undefined);
          await emptied();
          expect(older.batchTries()).toBe(1);
          expect(older.deletes()).toBe(first.length + second.length);
          await waitFor("every message handed on", () => handler.received.length >= 10 || undefined);
          expect(handler.received.map((r) => r.body.headers.message_id).sort()).toEqual(
            [...first, ...second].map((m) => m.headers.message_id).sort(),
          );
        } finally {
          await a.close();
          await handler.close();
        }
      } finally {
        await older.close();
      }
    });
  }
});

/**
 * A relay of an older kind: a real relay behind an HTTPS front that answers `status` to
 * POST /relay/messages/ack and passes every other request on as it came (the relay's spec.url
 * is the front's, so the signatures made for it hold).
 */
async function olderRelay(status: number) {
  let deletes = 0;
  let batchTries = 0;
  let target = 0;
  const front: Server = createServer({ cert: env.tls.cert, key: env.tls.key }, (req, res) => {
    if (req.method === "POST" && req.url?.startsWith("/relay/messages/ack")) {
      batchTries++;
      req.resume();
      res.writeHead(status, { "content-type": "application/json" });
      res.end(JSON.stringify({ status: "error", code: "not_found", message: "no such route" }));
      return;
    }
    if (req.method === "DELETE") deletes++;
    const out = request(
      {
        host: "127.0.0.1",
        port: target,
        method: req.method,
        path: req.url,
        headers: req.headers,
        ca: env.tls.ca,
        servername: "localhost",
      },
      (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      },
    );
    out.on("error", () => res.destroy());
    req.pipe(out);
  });
  await new Promise<void>((resolve) => front.listen(0, "127.0.0.1", resolve));
  const url = `https://localhost:${(front.address() as AddressInfo).port}`;
  const inner = await runRelay(env, { url });
  target = Number(new URL(inner.url).port);
  return {
    url,
    deletes: () => deletes,
    batchTries: () => batchTries,
    close: async () => {
      await new Promise<void>((resolve) => front.close(() => resolve()));
      front.closeAllConnections();
      await inner.close();
    },
  };
}
