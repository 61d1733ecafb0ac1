// The runtime's Prometheus metrics (agent and relay modes), with bounded labels only; the gauges
// read at scrape time (backlogs, streams, NATS, certificate expiry); the plain-HTTP /metrics server.
import { X509Certificate } from "node:crypto";
import { readFileSync } from "node:fs";
import Fastify, { type FastifyInstance } from "fastify";
import { AggregatorRegistry, Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from "prom-client";
import { buildInfo } from "../util/version.ts";

/** Default port of the plain-HTTP metrics listener (--metrics-port; 0 disables it). */
export const METRICS_PORT = 9090;

/**
 * The runtime's Prometheus metrics, one registry per process. Every label takes values from a
 * fixed set (results, error codes, operations, transports): never a message_id, an agent id or a
 * URL, so the number of series stays bounded whatever peers send.
 */
export function createRuntimeMetrics(mode: "agent" | "relay") {
  const registry = new Registry();
  registry.setDefaultLabels({ mode });
  collectDefaultMetrics({ register: registry });
  const registers = [registry];
  new Gauge({
    name: "ifp_build_info",
    help: "Always 1; the runtime's version and the commit it was built from, as labels",
    labelNames: ["version", "commit"],
    registers,
  }).set(buildInfo(), 1);
  return {
    registry,
    inbox: new Counter({
      name: "ifp_inbox_requests_total",
      help: "Inbox POSTs by result (accepted, duplicate or an error code) and HTTP status",
      labelNames: ["result", "status"],
      registers,
    }),
    inboxAccepted: new Counter({
      name: "ifp_inbox_messages_accepted_total",
      help: "Messages newly accepted into the inbox (repeats not counted)",
      registers,
    }),
    inboxDuplicates: new Counter({
      name: "ifp_inbox_duplicates_total",
      help: "Repeated deliveries of an already accepted message, absorbed with 202",
      registers,
    }),
    inboxSignatureFailures: new Counter({
      name: "ifp_inbox_signature_failures_total",
      help: "Inbox POSTs refused because the signature did not verify",
      registers,
    }),
    inboxRateLimited: new Counter({
      name: "ifp_inbox_rate_limited_total",
      help: "Inbox POSTs refused by a rate limit, by limit (address or sender)",
      labelNames: ["limit"],
      registers,
    }),
    conversationCasRetries: new Counter({
      name: "ifp_conversation_cas_retries_total",
      help: "Writes of a conversation record tried again because another replica or event loop wrote it in between (compare-and-set)",
      registers,
    }),
    inboxLatency: new Histogram({
      name: "ifp_inbox_request_duration_seconds",
      help: "Time to answer an inbox POST, by result",
      labelNames: ["result"],
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
      registers,
    }),
    inboxSize: new Histogram({
      name: "ifp_inbox_request_size_bytes",
      help: "Size of inbox POST bodies as sent (Content-Length)",
      buckets: [256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304],
      registers,
    }),
    handler: new Counter({
      name: "ifp_handler_deliveries_total",
      help: "Deliveries of accepted messages to spec.handler.url by result (expired: also those the local API's message stream did not hand out)",
      labelNames: ["result"],
      registers,
    }),
    handlerLag: new Histogram({
      name: "ifp_handler_delivery_lag_seconds",
      help: "Time from acceptance to successful hand-off to spec.handler.url",
      buckets: [0.01, 0.05, 0.1, 0.5, 1, 5, 15, 60, 300, 3600],
      registers,
    }),
    deadLetters: new Counter({
      name: "ifp_dead_letters_total",
      help: "Messages moved to a dead-letter subject",
      labelNames: ["source"],
      registers,
    }),
    relay: new Counter({
      name: "ifp_relay_operations_total",
      help: "Relay operations by operation and result",
      labelNames: ["operation", "result"],
      registers,
    }),
    relayDeliveries: new Counter({
      name: "ifp_relay_deliveries_total",
      help: "Stored copies handed to recipients by push, by transport (webhook, sse, websocket) and result",
      labelNames: ["transport", "result"],
      registers,
    }),
    relayRedeliveries: new Counter({
      name: "ifp_relay_redeliveries_total",
      help: "Webhook push attempts after the first for the same copy",
      labelNames: ["transport"],
      registers,
    }),
    relayExpired: new Counter({
      name: "ifp_relay_expired_total",
      help: "Stored copies passed over because their ttl_seconds ran out before they were handed out, by path (retrieve, stream, push)",
      labelNames: ["path"],
      registers,
    }),
    relayConnections: new Gauge({
      name: "ifp_relay_connections",
      help: "Open streaming connections to the relay, by transport",
      labelNames: ["transport"],
      registers,
    }),
    outbound: new Counter({
      name: "ifp_outbound_deliveries_total",
      help: "Outbound message delivery attempts by result",
      labelNames: ["result"],
      registers,
    }),
    outboundPlaintextRelay: new Counter({
      name: "ifp_outbound_plaintext_relay_total",
      help: "Outbound messages handed with their body in the clear to a relay not marked trusted or self-operated (spec.encryption)",
      registers,
    }),
    // The one label that is a URL: a destination has a series only while its circuit is open or
    // half-open (agent/outbound/breakers.ts), so the series are the destinations failing now.
    outboundCircuitState: new Gauge({
      name: "ifp_outbound_circuit_state",
      help: "State of the circuit of an outbound destination (inbox or relay URL) that is not closed: 1 half-open, 2 open",
      labelNames: ["destination"],
      registers,
    }),
    outboundCircuitRejections: new Counter({
      name: "ifp_outbound_circuit_rejections_total",
      help: "Outbound attempts not made because of a destination's resiliency: its circuit open, its probe under way (half-open), or its in-flight cap reached (busy)",
      labelNames: ["reason"],
      registers,
    }),
    handlerLatency: new Histogram({
      name: "ifp_handler_delivery_seconds",
      help: "Time for spec.handler.url to answer",
      buckets: [0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10],
      registers,
    }),
  };
}
export type RuntimeMetrics = ReturnType<typeof createRuntimeMetrics>;

/**
 * A gauge read from NATS at scrape time (stream depth, oldest message age). A failing read
 * leaves the gauge unset for that scrape rather than failing the whole scrape.
 */
export function backlogGauges(
  metrics: RuntimeMetrics,
  read: () => Promise<{ depth: number; oldestAgeSeconds: number } | undefined>,
  prefix: "inbox" | "outbox" | "relay_mailbox",
): void {
  let last: Promise<{ depth: number; oldestAgeSeconds: number } | undefined> | undefined;
  // Both gauges are collected in the same scrape: one read serves them.
  const sample = () =>
    (last ??= read()
      .catch(() => undefined)
      .finally(() => {
        last = undefined;
      }));
  new Gauge({
    name: `ifp_${prefix}_depth`,
    help: `Messages waiting in the ${prefix.replace("_", " ")} (stream messages not yet delivered)`,
    registers: [metrics.registry],
    async collect() {
      const s = await sample();
      if (s) this.set(s.depth);
    },
  });
  new Gauge({
    name: `ifp_${prefix}_oldest_age_seconds`,
    help: `Age of the oldest message waiting in the ${prefix.replace("_", " ")} (0 when empty)`,
    registers: [metrics.registry],
    async collect() {
      const s = await sample();
      if (s) this.set(s.oldestAgeSeconds);
    },
  });
}

/**
 * Gauges of the streams a runtime keeps (StreamKeeper): each stream it made that NATS no longer
 * has (1 while missing; the runtime is not ready then), and each stream whose replicas are not
 * those asked for (`durability.replicas`, `retention.replicas`) with the replicas it has.
 */
export function streamKeeperGauges(
  metrics: RuntimeMetrics,
  keeper: { missing(): string[]; unmet(): { object: string; asked: number | "auto"; actual: number }[] },
): void {
  new Gauge({
    name: "ifp_jetstream_stream_missing",
    help: "1 for each JetStream stream this runtime made that NATS no longer has (the runtime is not ready while any is missing)",
    labelNames: ["stream"],
    registers: [metrics.registry],
    collect() {
      this.reset();
      for (const stream of keeper.missing()) this.set({ stream }, 1);
    },
  });
  new Gauge({
    name: "ifp_jetstream_replicas_unmet",
    help: "Replicas a stream has where they are not those asked for (the JetStream deployment cannot hold them), by stream and replicas asked",
    labelNames: ["stream", "asked"],
    registers: [metrics.registry],
    collect() {
      this.reset();
      for (const u of keeper.unmet())
        this.set({ stream: u.object.replace(/^stream /, ""), asked: String(u.asked) }, u.actual);
    },
  });
}

/**
 * Gauges of what a runtime depends on, read at scrape time: whether its NATS connection is up
 * (0 while it is down or reconnecting), and when the serving certificate in its certificate
 * file expires (the file it reloads; a scrape that cannot read it keeps the last value).
 */
export function dependencyGauges(
  metrics: RuntimeMetrics,
  deps: { natsConnected: () => boolean; certFile: string },
): void {
  new Gauge({
    name: "ifp_nats_connected",
    help: "1 while the runtime's NATS connection is up, 0 while it is down or reconnecting",
    registers: [metrics.registry],
    collect() {
      this.set(deps.natsConnected() ? 1 : 0);
    },
  });
  new Gauge({
    name: "ifp_tls_certificate_expiry_timestamp_seconds",
    help: "When the runtime's serving certificate expires, in seconds since the epoch (its certificate file, read at each scrape)",
    registers: [metrics.registry],
    collect() {
      try {
        this.set(Date.parse(new X509Certificate(readFileSync(deps.certFile)).validTo) / 1000);
      } catch {
        // The value of the last scrape that could read it stays.
      }
    },
  });
}

/**
 * The metrics listener: plain HTTP, GET /metrics only, on its own port so that nothing reaching
 * the TLS protocol port (peers, relays' clients) can read it.
 */
/** A registry's metrics as getMetricsAsJSON gives them, for another registry to add up. */
export type MetricsJson = Awaited<ReturnType<Registry["getMetricsAsJSON"]>>;

export function buildMetricsApp(metrics: RuntimeMetrics, others?: () => Promise<MetricsJson[]>): FastifyInstance {
  const app = Fastify({
    logger: false,
    forceCloseConnections: true,
    requestTimeout: 10_000,
  }) as unknown as FastifyInstance;
  app.get("/metrics", async (_req, reply) => {
    reply.type(metrics.registry.contentType);
    if (!others) return metrics.registry.metrics();
    // The other event loops' counters and histograms added to this one's (spec.runtime.workers).
    const all = [await metrics.registry.getMetricsAsJSON(), ...(await others())];
    return AggregatorRegistry.aggregate(all).metrics();
  });
  app.setNotFoundHandler((_req, reply) =>
    reply.code(404).type("text/plain; charset=utf-8").send("not found; the metrics are at /metrics\n"),
  );
  return app;
}
