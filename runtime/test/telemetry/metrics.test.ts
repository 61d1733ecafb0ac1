// The runtime's Prometheus metrics, scraped from the plain-HTTP metrics listener of real agents
// and relays after a scripted exchange: every counter moves by exactly what was sent.
import { request as httpsRaw } from "node:https";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { httpsRequest } from "../../../e2e/support/https.ts";
import { waitFor } from "../../../e2e/support/ports.ts";
import { identity, peerOf, signed, type TestIdentity } from "../support/fixtures.ts";
import { runAgent, scrapeMetrics, startHandler, type Tls, withNatsAndTls } from "../support/agent-harness.ts";
import { metricValue } from "../support/probes.ts";
import {
  alice,
  baseUrl,
  bob,
  carol,
  clientOf,
  openWs,
  randomName,
  relayEnv,
  runRelay,
  type RelayEnv,
} from "../support/relay-harness.ts";
import { signRequest } from "../../src/protocol/http-signatures.ts";
import { connect, headers as natsHeaders } from "@nats-io/transport-node";
import { jetstream } from "@nats-io/jetstream";
import { relayNames } from "../../src/contract/relay-stream.ts";
import type { RunningRelay } from "../../src/relay/main.ts";
import type { NatsServer } from "../../../e2e/support/nats.ts";

const receiver = identity("metrics-agent");
const pete = identity("pete-agent");
let nats: NatsServer;
let tls: Tls;
withNatsAndTls((n, t) => ([nats, tls] = [n, t]));

/** A signed GET /relay/events held open once the relay answered 200; close() drops the connection. */
async function openEvents(env: RelayEnv, relay: RunningRelay, who: TestIdentity): Promise<{ close(): void }> {
  const url = `${baseUrl(relay)}/relay/events`;
  const headers = await signRequest({ method: "GET", url }, who.signing);
  return new Promise((resolve, reject) => {
    const req = httpsRaw(url, { headers, ca: env.tls.ca }, (res) => {
      if (res.statusCode !== 200) {
        res.resume();
        return reject(new Error(`GET /relay/events answered ${res.statusCode}`));
      }
      res.on("data", () => {});
      resolve({ close: () => req.destroy() });
    });
    req.on("error", reject);
    req.end();
  });
}

/** Every sample's labels: none may carry a message id or an agent id. */
function labelValues(text: string): string[] {
  return [...text.matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((m) => m[2]!);
}

describe("agent metrics", () => {
  it("counts accepted, duplicate, signature failures and rate-limited POSTs exactly, on the metrics port only", async () => {
    const handler = await startHandler();
    const agent = await runAgent({
      self: receiver,
      natsUrl: nats.url,
      tls,
      spec: { peers: [peerOf(pete)], handler: { url: handler.url }, inbox: { rateLimit: { perSenderPerMinute: 3 } } },
    });
    try {
      // Not on the TLS protocol port, where peers could read it.
      expect((await agent.get("/metrics")).status).toBe(404);

      const m1 = signed(pete, "metrics-agent");
      expect((await agent.post(m1)).status).toBe(202);
      expect((await agent.post(m1)).status).toBe(202); // duplicate
      const tampered = signed(pete, "metrics-agent");
      tampered.body.text = "changed in transit";
      expect((await agent.post(tampered)).status).toBe(401);
      const m2 = signed(pete, "metrics-agent");
      expect((await agent.post(m2)).status).toBe(202);
      const m3 = signed(pete, "metrics-agent");
      expect((await agent.post(m3)).status).toBe(429); // the fourth verified POST of this sender in a minute

      await waitFor("both handed on", () => handler.received.length === 2);
      await waitFor(
        "handler deliveries counted",
        async () => metricValue(await agent.scrape(), "ifp_handler_deliveries_total", { result: "delivered" }) === 2,
      );
      const text = await agent.scrape();
      const v = (name: string, labels: Record<string, string> = {}) => metricValue(text, name, labels);
      expect(v("ifp_inbox_messages_accepted_total")).toBe(2);
      expect(v("ifp_inbox_duplicates_total")).toBe(1);
      expect(v("ifp_inbox_signature_failures_total")).toBe(1);
      expect(v("ifp_inbox_rate_limited_total", { limit: "sender" })).toBe(1);
      expect(v("ifp_inbox_rate_limited_total", { limit: "address" })).toBe(0);
      expect(v("ifp_inbox_requests_total", { result: "accepted", status: "202" })).toBe(2);
      expect(v("ifp_inbox_requests_total", { result: "duplicate", status: "202" })).toBe(1);
      expect(v("ifp_inbox_requests_total", { result: "invalid_signature", status: "401" })).toBe(1);
      expect(v("ifp_inbox_requests_total", { result: "rate_limited", status: "429" })).toBe(1);
      expect(v("ifp_inbox_requests_total")).toBe(5);
      expect(v("ifp_inbox_request_duration_seconds_count")).toBe(5);
      expect(v("ifp_inbox_request_size_bytes_count")).toBe(5);
      expect(v("ifp_handler_delivery_lag_seconds_count")).toBe(2);
      // Backlog read from NATS at scrape time: nothing left for the handler, nothing queued to send.
      expect(text).toMatch(/^ifp_inbox_depth\{mode="agent"\} 0$/m);
      expect(text).toMatch(/^ifp_outbox_depth\{mode="agent"\} 0$/m);
      expect(text).toMatch(/^ifp_inbox_oldest_age_seconds\{mode="agent"\} 0$/m);

      const values = labelValues(text);
      for (const m of [m1, m2, m3, tampered]) expect(values).not.toContain(m.headers.message_id);
      expect(values.some((x) => x.includes("pete") || x.includes("metrics-agent"))).toBe(false);
    } finally {
      await agent.close();
      await handler.close();
    }
  });

  it("answers 404 on the metrics port for anything but GET /metrics", async () => {
    const agent = await runAgent({
      self: identity("metrics-probe-agent"),
      natsUrl: nats.url,
      tls,
      spec: { peers: [] },
    });
    try {
      const base = agent.metricsUrl!;
      expect(base).toMatch(/^http:\/\//);
      for (const path of [
        "/",
        "/healthz",
        "/.well-known/agent/inbox",
        "/metrics/../etc/passwd",
        `/${"x".repeat(5000)}`,
      ]) {
        const res = await fetch(`${base}${path}`);
        expect(res.status, path).toBe(404);
        await res.text();
      }
      const post = await fetch(`${base}/metrics`, { method: "POST", body: "x".repeat(10_000) });
      expect(post.status).toBe(404);
      await post.text();
      // The TLS port does not serve it either, under any method.
      expect((await httpsRequest(`${agent.url}/metrics`, { ca: tls.ca })).status).toBe(404);
    } finally {
      await agent.close();
    }
  });
});

describe("relay metrics", () => {
  let env: RelayEnv;
  let relay: RunningRelay;
  const relayName = randomName();
  beforeAll(async () => {
    env = await relayEnv();
    relay = await runRelay(env, {}, relayName);
  });
  afterAll(async () => {
    await relay?.close();
    await env?.close();
  });

  it("counts publish, retrieve and ack exactly, and shows the mailbox depth and connections", async () => {
    expect((await httpsRequest(`${relay.url}/metrics`, { ca: env.tls.ca })).status).toBe(404);
    const before = await scrapeMetrics(relay.metricsUrl);
    expect(metricValue(before, "ifp_relay_mailbox_depth")).toBe(0);

    const a = clientOf(env, relay, alice);
    const b = clientOf(env, relay, bob);
    const m1 = signed(alice, "bob-agent");
    const m2 = signed(alice, "bob-agent");
    expect((await a.publish(m1)).status).toBe(202);
    expect((await a.publish(m2)).status).toBe(202);
    let text = await scrapeMetrics(relay.metricsUrl);
    expect(metricValue(text, "ifp_relay_mailbox_depth")).toBe(2);
    expect(metricValue(text, "ifp_relay_mailbox_oldest_age_seconds")).toBeGreaterThanOrEqual(0);

    expect((await b.pull()).messages).toHaveLength(2);
    expect(await b.ack(m1.headers.message_id)).toBe(true);
    expect(await b.ack(m1.headers.message_id)).toBe(false);
    const ws = await openWs(env, relay, bob);
    await waitFor(
      "the WebSocket counted",
      async () =>
        metricValue(await scrapeMetrics(relay.metricsUrl), "ifp_relay_connections", { transport: "websocket" }) === 1,
    );

    text = await scrapeMetrics(relay.metricsUrl);
    const op = (operation: string, result: string) =>
      metricValue(text, "ifp_relay_operations_total", { operation, result });
    expect(op("publish", "ok")).toBe(2);
    expect(op("retrieve", "ok")).toBe(1);
    expect(op("ack", "ok")).toBe(1);
    expect(op("ack", "not_found")).toBe(1);
    expect(metricValue(text, "ifp_relay_mailbox_depth")).toBe(1);
    expect(labelValues(text)).not.toContain(m1.headers.message_id);
    expect(labelValues(text).some((x) => x.includes("alice") || x.includes("bob"))).toBe(false);

    // The copy still waiting (m2) is pushed over the WebSocket.
    await waitFor("m2 over the WebSocket", () => ws.messages().length === 1);
    expect(
      metricValue(await scrapeMetrics(relay.metricsUrl), "ifp_relay_deliveries_total", {
        transport: "websocket",
        result: "sent",
      }),
    ).toBe(1);

    ws.close();
    await waitFor(
      "the WebSocket closed",
      async () =>
        metricValue(await scrapeMetrics(relay.metricsUrl), "ifp_relay_connections", { transport: "websocket" }) === 0,
    );
  });

  it("counts each open SSE and WebSocket stream by transport while it is open, and none after it closes", async () => {
    const connections = async () => {
      const text = await scrapeMetrics(relay.metricsUrl);
      return {
        sse: metricValue(text, "ifp_relay_connections", { transport: "sse" }),
        websocket: metricValue(text, "ifp_relay_connections", { transport: "websocket" }),
      };
    };
    const settled = (want: { sse: number; websocket: number }) =>
      waitFor(`connections ${JSON.stringify(want)}`, async () => {
        const have = await connections();
        return have.sse === want.sse && have.websocket === want.websocket;
      });
    await settled({ sse: 0, websocket: 0 });

    const bobEvents = await openEvents(env, relay, bob);
    const carolEvents = await openEvents(env, relay, carol);
    await settled({ sse: 2, websocket: 0 });
    const ws = await openWs(env, relay, alice);
    await settled({ sse: 2, websocket: 1 });

    // The client goes away: the relay sees the socket close and counts the stream no more.
    bobEvents.close();
    await settled({ sse: 1, websocket: 1 });
    await ws.close();
    await settled({ sse: 1, websocket: 0 });
    carolEvents.close();
    await settled({ sse: 0, websocket: 0 });
  });

  it("passes over a stored copy whose ttl_seconds ran out before JetStream removed it, and counts it", async () => {
    // A copy as the relay stores it, whose Ifp-Expires-At has passed but which is still in the
    // stream (JetStream's own TTL removes copies only about a second later).
    const names = relayNames({ metadata: { name: relayName }, spec: { url: "https://localhost" } } as never);
    const stale = signed(alice, "bob-agent");
    const nc = await connect({ servers: env.nats.url });
    try {
      const h = natsHeaders();
      h.set("Ifp-Recipient", "bob-agent");
      h.set("Ifp-Message-Id", stale.headers.message_id);
      h.set("Ifp-Expires-At", new Date(Date.now() - 1000).toISOString());
      await jetstream(nc).publish(names.copy("bob-agent", stale.headers.message_id), JSON.stringify(stale), {
        headers: h,
      });
    } finally {
      await nc.close();
    }
    const before = metricValue(await scrapeMetrics(relay.metricsUrl), "ifp_relay_expired_total", { path: "retrieve" });
    const pulled = await clientOf(env, relay, bob).pull();
    expect(pulled.messages.map((m) => m.headers.message_id)).not.toContain(stale.headers.message_id);
    expect(metricValue(await scrapeMetrics(relay.metricsUrl), "ifp_relay_expired_total", { path: "retrieve" })).toBe(
      before + 1,
    );
  });
});
