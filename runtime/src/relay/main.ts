import { readFileSync } from "node:fs";
import type { FastifyInstance } from "fastify";
import pino, { type Logger } from "pino";
import { loadManifest } from "../config/manifest.ts";
import { Nats, type NatsOptions } from "../nats/connection.ts";
import { ensureStream } from "../nats/streams.ts";
import { HttpClient } from "../net/http-client.ts";
import { Verifier } from "../protocol/verify.ts";
import { Relay } from "../resources/relay.ts";
import { createRuntimeMetrics } from "../server/metrics.ts";
import { readTls, watchTls } from "../server/tls.ts";
import { buildRelayApp } from "./app.ts";
import { Mailboxes } from "./mailbox.ts";
import { WebhookPush } from "./push.ts";
import { relayNames, relayStreamConfig } from "./stream.ts";
import { Subscriptions } from "./subscriptions.ts";

export interface RelayOptions {
  manifest: string;
  port: number;
  host?: string;
  tlsCert: string;
  tlsKey: string;
  nats: Omit<NatsOptions, "name">;
  /** Extra CA certificates (PEM) trusted for webhook push; defaults to $IFP_CA_FILE. */
  caFile?: string;
  logger?: Logger;
}

export interface RunningRelay {
  app: FastifyInstance;
  url: string;
  relay: Relay;
  nats: Nats;
  close(): Promise<void>;
}

/**
 * Start the relay mode: listen on TLS at once (readiness reports NATS), then create or update
 * the Relay's stream as the manifest says, load subscriptions and start webhook push.
 */
export async function startRelay(opts: RelayOptions): Promise<RunningRelay> {
  const log = opts.logger ?? pino({ level: process.env.IFP_LOG_LEVEL ?? "info" });
  const relay = await loadManifest(opts.manifest, Relay);
  const names = relayNames(relay);
  const metrics = createRuntimeMetrics("relay");
  const caFile = opts.caFile ?? (process.env.IFP_CA_FILE || undefined);
  const http = new HttpClient({ extraCa: caFile ? readFileSync(caFile, "utf8") : undefined, userAgent: "ifp-relay" });
  const nats = new Nats({ ...opts.nats, name: `ifp-relay ${relay.metadata.name ?? relay.spec.url}` }, log);
  const mailboxes = new Mailboxes(nats, names);
  const subs = new Subscriptions(nats, names, log);
  const push = new WebhookPush({ nats, names, mailboxes, subs, delivery: relay.spec.delivery, http, relayUrl: relay.spec.url, log, metrics });
  const tlsFiles = { certFile: opts.tlsCert, keyFile: opts.tlsKey };
  let ready = false;

  const app = buildRelayApp({
    relay,
    verifier: new Verifier(relay.spec.agents),
    mailboxes,
    subs,
    metrics,
    logger: log,
    tls: readTls(tlsFiles),
    ready: () => ready && nats.isConnected,
  });
  const stopWatch = watchTls(app, tlsFiles, log);

  const abort = new AbortController();
  const started = (async () => {
    await nats.start(abort.signal);
    for (let delay = 500; ; delay = Math.min(delay * 2, 10_000)) {
      try {
        // The operator keeps the stream in line with the Relay too; both apply the same config.
        const { action } = await ensureStream(nats.jsm, relayStreamConfig(relay));
        if (action !== "unchanged") log.info({ stream: names.stream, action }, "relay stream applied");
        await subs.ensure();
        break;
      } catch (err) {
        if (abort.signal.aborted) return;
        log.warn({ err: (err as Error).message, retryInMs: delay }, "relay stream not ready yet");
        await new Promise((r) => setTimeout(r, delay));
      }
    }
    if (abort.signal.aborted) return;
    ready = true;
    push.start();
    log.info({ stream: names.stream, url: relay.spec.url }, "relay ready");
  })().catch((err) => {
    if (!abort.signal.aborted) log.error({ err }, "relay start failed");
  });

  await app.listen({ port: opts.port, host: opts.host ?? "0.0.0.0" });
  const address = app.server.address();
  const port = typeof address === "object" && address ? address.port : opts.port;
  const url = `https://${opts.host && opts.host !== "0.0.0.0" ? opts.host : "localhost"}:${port}`;
  log.info({ url }, "relay listening");
  return {
    app,
    url,
    relay,
    nats,
    async close() {
      abort.abort();
      stopWatch();
      await app.close();
      await push.stop();
      subs.close();
      await started;
      await nats.close();
      await http.close();
    },
  };
}
