// The relay mode of the runtime (`ifp-runtime relay`, cli/runtime.ts): startRelay wires the
// manifest, NATS, the mailboxes, subscriptions, webhook push and the listeners, and starts them.
import { LastError } from "../nats/last-error.ts";
import { relayLastError } from "../contract/summary.ts";
import { relayInboxPrefix } from "../contract/nats-permissions.ts";
import type { FastifyInstance } from "fastify";
import type { Logger } from "pino";
import { createLogger } from "../telemetry/log-format.ts";
import { loadManifest } from "../config/manifest.ts";
import { Nats, type NatsOptions } from "../nats/connection.ts";
import { StorageRefusedError, StreamKeeper, StreamMissingError } from "../nats/stream-keeper.ts";
import { caFileLogger, HttpClient } from "../net/http-client.ts";
import { DiscoveryClient } from "../discovery/client.ts";
import { KeyLookup } from "../discovery/keys.ts";
import { TargetPolicy } from "../net/targets.ts";
import { Verifier } from "../protocol/verify.ts";
import { Relay } from "../resources/relay.ts";
import { Lifecycle, retry } from "../server/lifecycle.ts";
import {
  backlogGauges,
  buildMetricsApp,
  createRuntimeMetrics,
  dependencyGauges,
  streamKeeperGauges,
} from "../server/metrics.ts";
import { streamBacklog } from "../nats/backlog.ts";
import { readTls, watchTls } from "../server/tls.ts";
import { buildRelayApp } from "./app.ts";
import { Mailboxes } from "./mailbox.ts";
import { WebhookPush } from "./push.ts";
import { relayNames, relayStreamConfig } from "../contract/relay-stream.ts";
import { Subscriptions } from "./subscriptions.ts";
import { buildInfo } from "../util/version.ts";

export interface RelayOptions {
  manifest: string;
  port: number;
  host?: string;
  tlsCert: string;
  tlsKey: string;
  nats: Omit<NatsOptions, "name">;
  /** Extra CA certificates (PEM) trusted for webhook push; defaults to $IFP_CA_FILE. */
  caFile?: string;
  /** Proxies (IPs or CIDR blocks) whose X-Forwarded-For is believed for per-address limits. */
  trustedProxies?: string[];
  /** Special addresses outbound requests may reach besides spec.network.allowPrivateTargets (--allow-private-targets). */
  allowPrivateTargets?: string[];
  /** Port of the plain-HTTP /metrics listener (0 picks a free port); none when omitted. */
  metricsPort?: number;
  logger?: Logger;
}

export interface RunningRelay {
  app: FastifyInstance;
  url: string;
  /** The plain-HTTP metrics listener, when one was asked for. */
  metricsUrl?: string;
  relay: Relay;
  nats: Nats;
  close(): Promise<void>;
}

/**
 * Start the relay mode: listen on TLS at once (readiness reports NATS), then create or update
 * the Relay's stream as the manifest says, load subscriptions and start webhook push. Only
 * wiring: each part is made by one of the functions below.
 */
export async function startRelay(opts: RelayOptions): Promise<RunningRelay> {
  const log =
    opts.logger ?? createLogger({ level: process.env.IFP_LOG_LEVEL ?? "info", component: "ifp-runtime-relay" });
  const relay = await loadManifest(opts.manifest, Relay);
  const metrics = createRuntimeMetrics("relay");
  const caFile = opts.caFile ?? (process.env.IFP_CA_FILE || undefined);
  const life = new Lifecycle(log);
  const parts = relayParts(relay, opts, caFile, life, metrics, log);
  const state = { ready: false };
  life.background("relay start-up", relayStartUp(relay, parts, state, log));
  const ready = () => state.ready && parts.nats.isConnected && parts.streams.missing().length === 0;
  try {
    return await listenRelay(
      relay,
      opts,
      { ...parts, keyLookup: strangersKeyLookup(relay, caFile, life, log) },
      {
        metrics,
        life,
        log,
        ready,
      },
    );
  } catch (err) {
    await life.close();
    throw err;
  }
}

type Metrics = ReturnType<typeof createRuntimeMetrics>;

/** The HTTP client, NATS, the mailboxes, the subscriptions, the stream keeper and webhook push. */
function relayParts(
  relay: Relay,
  opts: RelayOptions,
  caFile: string | undefined,
  life: Lifecycle,
  metrics: Metrics,
  log: Logger,
) {
  const names = relayNames(relay);
  const targets = new TargetPolicy([...relay.spec.network.allowPrivateTargets, ...(opts.allowPrivateTargets ?? [])]);
  const http = new HttpClient({ caFile, onCaFileReload: caFileLogger(log), userAgent: "ifp-relay", targets });
  life.defer("HTTP client", () => http.close());
  const natsOptions = {
    inboxPrefix: relayInboxPrefix(relay),
    replicas: relay.spec.retention.replicas,
    ...opts.nats,
    name: `ifp-relay ${relay.metadata.name ?? relay.spec.url}`,
  };
  const nats = new Nats(natsOptions, log);
  life.defer("NATS", () => nats.close());
  const mailboxes = new Mailboxes(nats, names, (path) => metrics.relayExpired.inc({ path }));
  backlogGauges(metrics, () => streamBacklog(nats, names.stream), "relay_mailbox");
  const subs = new Subscriptions(nats, names, log);
  const lastError = new LastError(nats, relayLastError(relay), log);
  const streams = new StreamKeeper(nats, log, {
    ledger: { bucket: names.kvBucket, key: "jetstream" },
    recreateMissing: process.env.IFP_RECREATE_MISSING_STREAMS === "true",
    report: (reason, message) => lastError.record(`${reason}: ${message}`),
  });
  life.defer("stream checks", () => streams.stop());
  streamKeeperGauges(metrics, streams);
  dependencyGauges(metrics, { natsConnected: () => nats.isConnected, certFile: opts.tlsCert });
  const delivery = relay.spec.delivery;
  const push = new WebhookPush({
    nats,
    names,
    mailboxes,
    subs,
    delivery,
    http,
    relayUrl: relay.spec.url,
    log,
    metrics,
    lastError,
  });
  life.defer("webhook push", async () => {
    await push.stop();
    await lastError.flush();
    subs.close();
  });
  return { names, targets, nats, mailboxes, subs, streams, push };
}
type RelayParts = ReturnType<typeof relayParts>;

/** The start-up that waits for NATS: the Relay's stream and the subscriptions, then webhook push. */
function relayStartUp(relay: Relay, parts: RelayParts, state: { ready: boolean }, log: Logger) {
  const { nats, streams, subs, push, names } = parts;
  return async (signal: AbortSignal) => {
    await nats.start(signal);
    await retry(
      async () => {
        // The operator keeps the stream in line with the Relay too; both apply the same config.
        const { action } = await streams.ensure(relayStreamConfig(relay), relay.spec.retention.replicas);
        if (action !== "unchanged") log.info({ stream: names.stream, action }, "relay stream applied");
        await subs.ensure();
      },
      {
        signal,
        onError: (err, retryInMs) =>
          err instanceof StreamMissingError || err instanceof StorageRefusedError
            ? undefined
            : log.warn({ err: err.message, retryInMs }, "relay stream not ready yet"),
      },
    );
    state.ready = true;
    streams.start();
    push.start();
    log.info({ stream: names.stream, url: relay.spec.url }, "relay ready");
  };
}

/**
 * Keys of senders the relay does not serve (spec.publishers): identity documents fetched through
 * the outbound address checks, stricter than for webhooks: only the special addresses the Relay
 * itself allows (spec.network.allowPrivateTargets), not the install's cluster networks
 * (--allow-private-targets), so that a stranger's agent id cannot reach inside the cluster.
 */
function strangersKeyLookup(relay: Relay, caFile: string | undefined, life: Lifecycle, log: Logger): KeyLookup {
  const lookupHttp = new HttpClient({
    caFile,
    userAgent: "ifp-relay",
    targets: new TargetPolicy(relay.spec.network.allowPrivateTargets),
  });
  life.defer("identity lookups", () => lookupHttp.close());
  return new KeyLookup({
    discovery: new DiscoveryClient(lookupHttp),
    limits: { totalPerMinute: relay.spec.publishers.limits.lookupsPerMinute },
    log,
  });
}

/** The relay's HTTPS app, built and listening, and the metrics listener when one is asked for. */
async function listenRelay(
  relay: Relay,
  opts: RelayOptions,
  parts: RelayParts & { keyLookup: KeyLookup },
  run: { metrics: Metrics; life: Lifecycle; log: Logger; ready: () => boolean },
): Promise<RunningRelay> {
  const { metrics, life, log, ready } = run;
  const tlsFiles = { certFile: opts.tlsCert, keyFile: opts.tlsKey };
  const app = buildRelayApp({
    relay,
    verifier: new Verifier(relay.spec.agents),
    keyLookup: parts.keyLookup,
    mailboxes: parts.mailboxes,
    subs: parts.subs,
    metrics,
    logger: log,
    tls: readTls(tlsFiles),
    trustedProxies: opts.trustedProxies,
    targets: parts.targets,
    ready,
  });
  life.defer("TLS watch", watchTls(app, tlsFiles, log));
  const host = opts.host ?? "0.0.0.0";
  const url = await life.listen(app, { name: "HTTPS server", scheme: "https", port: opts.port, host });
  const metricsUrl =
    opts.metricsPort === undefined
      ? undefined
      : await life.listen(buildMetricsApp(metrics), { name: "metrics", scheme: "http", port: opts.metricsPort, host });
  log.info({ url, metricsUrl, ...buildInfo() }, "relay listening");
  return { app, url, metricsUrl, relay, nats: parts.nats, close: () => life.close() };
}
