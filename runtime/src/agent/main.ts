import { readFileSync, statSync } from "node:fs";
import { readFile } from "node:fs/promises";
import type { FastifyInstance } from "fastify";
import pino, { type Logger } from "pino";
import { loadManifest } from "../config/manifest.ts";
import { Nats, type NatsOptions } from "../nats/connection.ts";
import { isoSeconds } from "../protocol/documents.ts";
import { privateKeyFromPem, rawPublicKey } from "../protocol/keys.ts";
import { signMessage, type SigningKey } from "../protocol/signing.ts";
import { Verifier } from "../protocol/verify.ts";
import { Agent } from "../resources/agent.ts";
import { parseDuration } from "../resources/common.ts";
import { createRuntimeMetrics } from "../server/metrics.ts";
import { readTls, watchTls } from "../server/tls.ts";
import { buildAgentApp } from "./app.ts";
import { ANNOTATIONS, Documents } from "./documents.ts";
import { DiscoveryClient } from "../discovery/client.ts";
import { isNotFound } from "../nats/streams.ts";
import { HttpClient } from "../net/http-client.ts";
import { Message } from "../protocol/message.ts";
import { DeliveryStates } from "./delivery-state.ts";
import { HandlerDelivery } from "./handoff.ts";
import { PeerCapabilityCache, type InboundMeta, type Inspection } from "./inbound.ts";
import { buildLocalApi } from "./local-api.ts";
import { EventRecorder, Notifier } from "./notify.ts";
import { OutboundDelivery } from "./outbound.ts";
import { acceptVerified } from "./accept.ts";
import { announceCapabilities, RelayIntake, relayPublisher } from "./relays.ts";
import { agentNames } from "./names.ts";
import { OutboxStore } from "./outbox.ts";
import { errorReply } from "./replies.ts";
import { InboxStore } from "./store.ts";

export interface AgentOptions {
  manifest: string;
  port: number;
  host?: string;
  tlsCert: string;
  tlsKey: string;
  signingKey: string;
  nats: Omit<NatsOptions, "name">;
  /** Extra CA certificates (PEM) trusted for outbound HTTPS to peers and relays. */
  caFile?: string;
  /** Kubeconfig for Kubernetes Events outside a pod. */
  kubeconfig?: string;
  /** Overrides spec.localApi.port (0 picks a free port). */
  localApiPort?: number;
  logger?: Logger;
}

export interface RunningAgent {
  app: FastifyInstance;
  url: string;
  /** The local application API (loopback, plain HTTP). */
  localApiUrl: string;
  agent: Agent;
  nats: Nats;
  close(): Promise<void>;
}

/** Start the agent mode: load everything, listen on TLS, connect NATS, hand messages on. */
export async function startAgent(opts: AgentOptions): Promise<RunningAgent> {
  const log = opts.logger ?? pino({ level: process.env.IFP_LOG_LEVEL ?? "info" });
  const agent = await loadManifest(opts.manifest, Agent);
  const spec = agent.spec;
  const privateKey = privateKeyFromPem(await readFile(opts.signingKey));
  const signing: SigningKey = { agentId: spec.agentId, keyId: spec.signing.keyId, privateKey };
  const keyCreated =
    agent.metadata.annotations?.[ANNOTATIONS.signingKeyCreated] ??
    agent.metadata.creationTimestamp ??
    isoSeconds(statSync(opts.signingKey).mtime);
  const documents = new Documents(agent, rawPublicKey(privateKey), keyCreated);
  const verifier = new Verifier(spec.peers);
  const names = agentNames(spec.agentId);
  const metrics = createRuntimeMetrics("agent");
  const tlsFiles = { certFile: opts.tlsCert, keyFile: opts.tlsKey };

  const nats = new Nats({ ...opts.nats, name: `ifp-agent ${spec.agentId}` }, log);
  const inbox = new InboxStore(nats, names, parseDuration(spec.inbox.replayWindow));
  const outbox = new OutboxStore(nats, names);
  let ready = false;


  const http = new HttpClient({ extraCa: opts.caFile ? readFileSync(opts.caFile, "utf8") : undefined });
  const discovery = new DiscoveryClient(http);
  const states = new DeliveryStates(nats, names.outboxStateBucket);
  const peerCaps = new PeerCapabilityCache(nats, names, log);
  const notifier = new Notifier(agent, EventRecorder.create(agent, log, opts.kubeconfig), log);

  const handoff = spec.handler
    ? new HandlerDelivery(
        nats,
        names,
        {
          url: spec.handler.url,
          timeoutMs: parseDuration(spec.handler.timeout),
          deadLetterAfterMs: parseDuration(spec.handler.deadLetterAfter),
        },
        log,
        metrics,
        { onDeadLetter: (messageId, reason) => void notifier.handlerDeadLetter(messageId, reason) },
      )
    : undefined;

  const onAccepted = async (message: Message, meta: InboundMeta, result: Inspection) => {
    if (result.capabilities) {
      await peerCaps.put(meta.sender, {
        agent_id: meta.sender,
        document: result.capabilities,
        source: "greeting",
        message_id: message.headers.message_id,
        learned_at: new Date().toISOString(),
      });
    }
    if (result.error) {
      const reply = errorReply(message, { agentId: spec.agentId, displayName: spec.displayName }, result.error);
      await outbox.enqueue(signMessage(reply, signing));
    }
  };

  const app = buildAgentApp({
    agent,
    documents,
    verifier,
    store: inbox,
    onAccepted,
    metrics,
    logger: log,
    tls: readTls(tlsFiles),
    ready: () => ready && nats.isConnected,
  });
  const stopWatch = watchTls(app, tlsFiles, log);

  const outbound = new OutboundDelivery({
    nats,
    names,
    states,
    http,
    discovery,
    log,
    metrics,
    options: {
      backoffMs: spec.outbound.backoff.map(parseDuration),
      retryForMs: parseDuration(spec.outbound.retryFor),
      peerUrls: new Map(spec.peers.filter((p) => p.url).map((p) => [p.agentId, p.url!])),
      peerRelays: new Map(spec.peers.filter((p) => p.relay?.urls.length).map((p) => [p.agentId, p.relay!.urls])),
    },
    relay: relayPublisher(signing, http),
    onGiveUp: (record, r) => notifier.undeliverable(record, r),
  });

  const intake = spec.relay?.urls.length
    ? new RelayIntake({
        urls: spec.relay.urls,
        signing,
        http,
        verifier,
        requireSignature: spec.inbox.requireSignature,
        accept: (raw, message, verified) => acceptVerified({ agent, store: inbox, onAccepted }, raw, message, verified),
        intervalMs: parseDuration(spec.relay.pollInterval),
        log,
        metrics,
      })
    : undefined;

  const received = async (messageId: string): Promise<Message | undefined> => {
    try {
      const m = await nats.jsm.streams.getMessage(names.inboxStream, { last_by_subj: names.inbox(messageId) });
      return m ? Message.parse(m.json()) : undefined;
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw err;
    }
  };
  const localApi = buildLocalApi({ agent, signing, documents, outbox, states, peers: peerCaps, received, logger: log });

  const abort = new AbortController();
  const started = (async () => {
    await nats.start(abort.signal);
    for (let delay = 500; ; delay = Math.min(delay * 2, 10_000)) {
      try {
        await inbox.ensure();
        await outbox.ensure();
        await states.ensure();
        await peerCaps.ensure();
        if ((await documents.syncUpdated(nats, names, log)) && spec.relay?.urls.length) {
          void announceCapabilities({ urls: spec.relay.urls, signing, http, document: documents.capabilityDocument.doc, displayName: spec.displayName, log });
        }
        break;
      } catch (err) {
        if (abort.signal.aborted) return;
        log.warn({ err: (err as Error).message }, "JetStream streams not ready yet");
        await new Promise((r) => setTimeout(r, delay));
      }
    }
    ready = true;
    handoff?.start();
    outbound.start();
    intake?.start();
    log.info({ agentId: spec.agentId, stream: names.inboxStream }, "agent ready");
  })().catch((err) => {
    if (!abort.signal.aborted) log.error({ err }, "agent start failed");
  });

  await app.listen({ port: opts.port, host: opts.host ?? "0.0.0.0" });
  const address = app.server.address();
  const port = typeof address === "object" && address ? address.port : opts.port;
  const url = `https://${opts.host && opts.host !== "0.0.0.0" ? opts.host : "localhost"}:${port}`;
  await localApi.listen({ port: opts.localApiPort ?? spec.localApi.port, host: "127.0.0.1" });
  const localAddress = localApi.server.address();
  const localApiUrl = `http://127.0.0.1:${typeof localAddress === "object" && localAddress ? localAddress.port : spec.localApi.port}`;
  log.info({ url, localApiUrl, agentId: spec.agentId }, "agent listening");

  return {
    app,
    url,
    localApiUrl,
    agent,
    nats,
    async close() {
      abort.abort();
      stopWatch();
      await Promise.all([app.close(), localApi.close()]);
      await Promise.all([handoff?.stop(), outbound.stop(), intake?.stop()]);
      await started;
      await nats.close();
      await http.close();
    },
  };
}
