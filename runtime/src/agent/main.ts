// The agent mode of the runtime (`ifp-runtime agent`, cli/runtime.ts): startAgent wires the
// manifest, keys, NATS streams and buckets, listeners, delivery workers and A2A together and
// starts them.
import { LastError } from "../nats/last-error.ts";
import { agentLastError } from "../contract/summary.ts";
import { agentInboxPrefix } from "../contract/nats-permissions.ts";
import type { FastifyInstance } from "fastify";
import type { Logger } from "pino";
import { createLogger } from "../telemetry/log-format.ts";
import { loadManifest } from "../config/manifest.ts";
import { DiscoveryClient } from "../discovery/client.ts";
import { EventRecorder } from "../kube/events.ts";
import { Nats, type NatsOptions } from "../nats/connection.ts";
import { errorMessage } from "../util/errors.ts";
import { caFileLogger, HttpClient } from "../net/http-client.ts";
import { TargetPolicy } from "../net/targets.ts";
import type { SigningKey } from "../protocol/signing.ts";
import { loadEncryptionKeys, loadKeyring, signingKeyCreated } from "./keyring.ts";
import { Agent } from "../resources/agent.ts";
import { parseDuration } from "../resources/fields.ts";
import { Lifecycle, retry } from "../server/lifecycle.ts";
import {
  backlogGauges,
  buildMetricsApp,
  createRuntimeMetrics,
  dependencyGauges,
  streamKeeperGauges,
} from "../server/metrics.ts";
import { OperatorStreams, StorageRefusedError, StreamKeeper, StreamMissingError } from "../nats/stream-keeper.ts";
import { consumerBacklog } from "../nats/backlog.ts";
import { layoutOf, type NatsLayoutName } from "../nats/layout.ts";
import { readTls, watchTls } from "../server/tls.ts";
import { acceptVerified, inspectionEffects, MAX_FUTURE_SKEW_MS } from "./inbound/accept.ts";
import { AppStream } from "./inbound/app-stream.ts";
import { type A2aFaceDeps, a2aFace } from "../a2a/face.ts";
import { A2aPeers, peerTokenFile } from "../a2a/peer.ts";
import { buildAgentApp } from "./app.ts";
import { DeliveryStates } from "./outbound/delivery-state.ts";
import { AgentEncryption } from "./encryption.ts";
import { Documents } from "./documents.ts";
import { HandlerHandoff, readHandoffSecret } from "./inbound/handoff.ts";
import { IdentityResolver, introductionTokenFile } from "./inbound/identity.ts";
import { Conversations } from "./conversations.ts";
import { PeerCapabilityCache } from "./inbound/inbound.ts";
import { InboxWatch } from "./local-api/routes/watch.ts";
import { buildLocalApi } from "./local-api/server.ts";
import { TokenFile } from "./local-api/auth.ts";
import { agentStoreKey } from "./names.ts";
import { Notifier } from "./outbound/notify.ts";
import { OutboundDelivery } from "./outbound/outbound.ts";
import { OutboxStore } from "./outbound/outbox.ts";
import { PeerCapabilityService } from "./peer-capabilities.ts";
import { announceCapabilities, RelayMailboxReader, relayPublisher, tellPeersCapabilities } from "./relays/relays.ts";
import { InboxStore, inboxRetentionMs } from "./inbound/store.ts";
import { buildInfo } from "../util/version.ts";
import type { InboxLimits } from "./inbound/routes/inbox.ts";
import { countRequests, InboxWorkers, type SharedState, workerCount } from "./workers.ts";

export interface AgentOptions {
  manifest: string;
  port: number;
  host?: string;
  tlsCert: string;
  tlsKey: string;
  signingKey: string;
  /** The agent's X25519 encryption key (PKCS#8 PEM); without it the agent cannot receive encrypted messages. */
  encryptionKey?: string;
  nats: Omit<NatsOptions, "name">;
  /** Extra CA certificates (PEM) trusted for outbound HTTPS to peers and relays, besides the system roots; re-read when it changes. */
  caFile?: string;
  /** Kubeconfig for Kubernetes Events outside a pod. */
  kubeconfig?: string;
  /** Introduction tokens (IFP-5 level 0), one per line: the mounted spec.inbox.introductionTokens Secret. */
  introductionSecretFile?: string;
  /** Bearer tokens A2A callers may present, one per line: the mounted spec.a2a.authentication.bearerTokenSecret. */
  a2aTokenFile?: string;
  /** Bearer tokens presented to A2A agents this agent sends to: the mounted spec.a2a.peerTokenSecret. */
  a2aPeerTokenFile?: string;
  /** The hand-off secret (the Secret <name>-handoff): each hand-off to spec.handler.url is signed with it. */
  handoffSecretFile?: string;
  /** Port of the A2A face's gRPC binding (TLS, the serving certificate; 0 picks a free port); none when omitted or without spec.a2a. */
  a2aGrpcPort?: number;
  /** Overrides spec.localApi.port (0 picks a free port). */
  localApiPort?: number;
  /** Proxies (IPs or CIDR blocks) whose X-Forwarded-For is believed for per-address limits. */
  trustedProxies?: string[];
  /** Special addresses outbound requests may reach besides spec.network.allowPrivateTargets (--allow-private-targets). */
  allowPrivateTargets?: string[];
  /** Port of the local API's HTTPS listener for applications in other pods (0 picks a free port); needs localApiTokenFile. */
  localApiTlsPort?: number;
  /** File holding the bearer token that listener requires (re-read when it changes). */
  localApiTokenFile?: string;
  /** Port of the plain-HTTP /metrics listener (0 picks a free port); none when omitted. */
  metricsPort?: number;
  /**
   * Make the agent's streams again, empty, when they have gone missing from NATS (default: the
   * environment's IFP_RECREATE_MISSING_STREAMS=true; otherwise the agent waits, not ready, for them).
   */
  recreateMissingStreams?: boolean;
  /**
   * Where the Agent's JetStream objects are (`--nats-layout`): `per-agent` (the default), its own
   * account's streams, buckets and consumers, which it makes; `isolated`, its tenant's shared
   * streams reached through its account's imports (docs/scale.md).
   */
  natsLayout?: NatsLayoutName;
  /**
   * Event loops serving the HTTPS port (`--workers`; else spec.runtime.workers; else 1): the main
   * one and that many less one worker threads (workers.ts), started from `workerEntry`.
   */
  workers?: number | "auto";
  /** The module a worker thread runs (inbox-worker.ts's INBOX_WORKER); needed for more than one event loop. */
  workerEntry?: string | URL;
  logger?: Logger;
}

export interface RunningAgent {
  app: FastifyInstance;
  url: string;
  /** The local application API (loopback, plain HTTP). */
  localApiUrl: string;
  /** The local API's HTTPS listener with a bearer token, when one was asked for. */
  localApiTlsUrl?: string;
  /** The plain-HTTP metrics listener, when one was asked for. */
  metricsUrl?: string;
  /** The A2A face's gRPC port, when one was asked for. */
  a2aGrpcPort?: number;
  /** The application's message stream (no spec.handler). */
  appStream?: AppStream;
  agent: Agent;
  nats: Nats;
  /** Resolves when an event loop beside the main one ended without being asked to (spec.runtime.workers). */
  failed?: Promise<Error>;
  close(): Promise<void>;
}

/**
 * Start the agent mode: listen on TLS at once (readiness reports NATS), then connect NATS,
 * create the agent's streams and buckets, and start handing messages on. Only wiring: each
 * part is made by one of the functions below, in the order they depend on each other.
 */
export async function startAgent(opts: AgentOptions): Promise<RunningAgent> {
  const log =
    opts.logger ?? createLogger({ level: process.env.IFP_LOG_LEVEL ?? "info", component: "ifp-runtime-agent" });
  if ((opts.localApiTlsPort === undefined) !== (opts.localApiTokenFile === undefined)) {
    throw new Error("the local API's TLS listener needs both a port and a token file");
  }
  // Read now: a missing or short token is a start-up error, not a listener that refuses everyone.
  const localApiToken = opts.localApiTokenFile ? new TokenFile(opts.localApiTokenFile, log) : undefined;
  const self = await loadSelf(opts, log);
  const pool = inboxWorkers(self, opts, log);
  const life = new Lifecycle(log);
  const metrics = createRuntimeMetrics("agent");
  const outside = peersAndKeys(self, opts, life, log, pool?.shared);
  const stores = agentStores(self, opts, outside, life, metrics, log);
  const deliveries = agentDeliveries(self, opts, outside, stores, metrics, log);
  life.defer("deliveries", () => Promise.all(deliveries.all.map((d) => d?.stop())));
  const a2a = a2aOf(self, opts, outside, stores, log, pool?.shared.a2a && { ...pool.shared.a2a, pushes: true });
  if (a2a) life.defer("A2A push notifications", () => a2a.close());
  const state = { ready: false };
  life.background("agent start-up", startUp(self, outside, stores, deliveries, a2a, state, log));
  try {
    return await listen(
      opts,
      self,
      { outside, stores, deliveries, a2a, metrics, life, log, localApiToken, pool },
      () => state.ready && stores.nats.isConnected && stores.streams.missing().length === 0,
    );
  } catch (err) {
    await life.close();
    throw err;
  }
}

/** The manifest, the agent's keys and the documents it publishes. */
export async function loadSelf(opts: AgentOptions, log: Logger) {
  const agent = await loadManifest(opts.manifest, Agent);
  const spec = agent.spec;
  const keyring = await loadKeyring(opts.signingKey, spec.agentId, spec.signing.keyId);
  const ownEncryption = await loadEncryptionKeys(opts.encryptionKey, keyring, log);
  const documents = new Documents(
    agent,
    keyring.published ?? keyring.publicKey,
    signingKeyCreated(agent, opts.signingKey),
    undefined,
    ownEncryption.published,
  );
  const signing: SigningKey = keyring.signing;
  const layout = layoutOf(opts.natsLayout ?? "per-agent", opts.nats.credsFile);
  // What the layout does not serve is refused at start, not found missing later.
  const [refused] = layout.unsupported(spec);
  if (refused)
    throw new Error(
      `${refused.field} (${refused.why}) is not available on the ${layout.name} NATS layout (docs/scale.md#what-runs-on-the-isolated-layout)`,
    );
  return { agent, spec, signing, ownEncryption, documents, layout, names: layout.names(agentStoreKey(agent)) };
}
export type Self = Awaited<ReturnType<typeof loadSelf>>;

/** The worker threads beside the main event loop, when more than one loop serves the port. */
function inboxWorkers(self: Self, opts: AgentOptions, log: Logger): InboxWorkers | undefined {
  const count = workerCount(opts.workers ?? self.spec.runtime?.workers);
  if (count === 1) return undefined;
  if (!opts.workerEntry) throw new Error("more than one event loop needs the ifp-runtime command's worker module");
  return new InboxWorkers(count, self.spec, log);
}

/** The HTTP client, discovery, and who the senders are (their keys) and how bodies are encrypted. */
export function peersAndKeys(self: Self, opts: AgentOptions, life: Lifecycle, log: Logger, shared?: SharedState) {
  const { spec } = self;
  const targets = new TargetPolicy([...spec.network.allowPrivateTargets, ...(opts.allowPrivateTargets ?? [])]);
  const http = new HttpClient({ caFile: opts.caFile, onCaFileReload: caFileLogger(log), targets });
  life.defer("HTTP client", () => http.close());
  const discovery = new DiscoveryClient(http);
  if (spec.inbox.introductionTokens && !opts.introductionSecretFile)
    log.warn(
      "spec.inbox.introductionTokens is set but no --introduction-secret-file was given; no introduction token is accepted",
    );
  const introductionTokens = opts.introductionSecretFile
    ? introductionTokenFile(opts.introductionSecretFile, log)
    : undefined;
  // With more than one event loop, the lookup budget is the pod's (docs/scale.md#more-than-one-core).
  const budgets = shared?.lookups;
  const verifier = new IdentityResolver({ spec, discovery, introductionTokens, log, ...(budgets ? { budgets } : {}) });
  const { keys, revoked } = self.ownEncryption;
  const encryption = new AgentEncryption({ spec, discovery, keys, revoked, log });
  const peerUrls = new Map(spec.peers.filter((p) => p.url).map((p) => [p.agentId, p.url!]));
  return { http, targets, discovery, verifier, encryption, peerUrls };
}
export type Outside = ReturnType<typeof peersAndKeys>;

/**
 * What the inbox needs, in every event loop that serves it (workers.ts): NATS, the inbox and
 * outbox streams, the conversation records and what the inspection of a message does.
 */
export function inboxParts(
  self: Self,
  opts: AgentOptions,
  outside: Outside,
  life: Lifecycle,
  metrics: Metrics,
  log: Logger,
) {
  const { spec, names, layout } = self;
  const replicas = spec.durability.replicas ?? "auto";
  const nats = new Nats(
    { inboxPrefix: agentInboxPrefix(spec.agentId), replicas, layout, ...opts.nats, name: `ifp-agent ${spec.agentId}` },
    log,
  );
  life.defer("NATS", () => nats.close());
  const inbox = new InboxStore(nats, names, parseDuration(spec.inbox.replayWindow), spec.inbox.maxBytes, replicas);
  // Before NATS closes, after the servers: what the runtime reserved of its inbox's byte count and did not use.
  life.defer("inbox byte count and look back record", () => inbox.close());
  const outbox = new OutboxStore(nats, names, replicas);
  const states = new DeliveryStates(nats, names.outboxStateBucket);
  const peerCaps = new PeerCapabilityCache(nats, names, log);
  const conversations = new Conversations(nats, names.conversationsBucket, {
    temperatures: new Map(spec.peers.filter((p) => p.temperature).map((p) => [p.agentId, p.temperature!])),
    deliveries: states,
    sequenceCheck: spec.inbox.sequenceCheck,
    onRetry: () => metrics.conversationCasRetries.inc(),
  });
  const peerCapabilities = new PeerCapabilityService({
    store: peerCaps,
    discovery: outside.discovery,
    peerUrls: outside.peerUrls,
    log,
  });
  const onAccepted = inspectionEffects({
    self: { agentId: spec.agentId, displayName: spec.displayName },
    signing: self.signing,
    outbox,
    peers: peerCapabilities,
  });
  return { nats, replicas, inbox, outbox, states, peerCaps, conversations, peerCapabilities, onAccepted };
}
export type InboxParts = ReturnType<typeof inboxParts>;

/** NATS, the agent's streams and buckets, and where trouble is told (Events, the last error). */
function agentStores(self: Self, opts: AgentOptions, outside: Outside, life: Lifecycle, metrics: Metrics, log: Logger) {
  const { spec, names, agent, layout } = self;
  const parts = inboxParts(self, opts, outside, life, metrics, log);
  const { nats } = parts;
  // Backlog read at scrape time: what the sender still has to deliver, and (with a handler) what it has yet to take.
  backlogGauges(metrics, () => layout.queueBacklog(nats, names.outboxStream, names.senderConsumer), "outbox");
  if (spec.handler)
    backlogGauges(metrics, () => consumerBacklog(nats, names.inboxStream, names.handlerConsumer), "inbox");
  const events = EventRecorder.fromEnvironment("ifp-runtime", log, opts.kubeconfig);
  // Counts of repeated Events still waiting are written before the process goes.
  life.defer("Events", async () => events?.flush());
  const lastError = new LastError(nats, agentLastError(agentStoreKey(agent)), log);
  life.defer("last error", () => lastError.flush());
  const notifier = new Notifier(agent, events, outside.http, log, lastError);
  const streams = layout.makesStreams
    ? new StreamKeeper(nats, log, {
        ledger: { bucket: names.kvBucket, key: `${names.kvKey}.jetstream` },
        recreateMissing: opts.recreateMissingStreams ?? process.env.IFP_RECREATE_MISSING_STREAMS === "true",
        report: (reason, message) => notifier.trouble(reason, message),
      })
    : new OperatorStreams();
  life.defer("stream checks", () => streams.stop());
  streamKeeperGauges(metrics, streams);
  dependencyGauges(metrics, { natsConnected: () => nats.isConnected, certFile: opts.tlsCert });
  return { ...parts, notifier, streams };
}
type Stores = ReturnType<typeof agentStores>;
type Metrics = ReturnType<typeof createRuntimeMetrics>;

/** What hands messages on: to spec.handler.url (or the application's stream), to peers, from relays. */
function agentDeliveries(
  self: Self,
  opts: AgentOptions,
  outside: Outside,
  stores: Stores,
  metrics: Metrics,
  log: Logger,
) {
  const { spec, names, signing } = self;
  const { nats, notifier } = stores;
  const handoff = handlerHandoff(self, opts, outside, stores, metrics, log);
  // Without a handler the application reads its messages from the local API's stream.
  const appStream = spec.handler ? undefined : new AppStream(nats, names, log, metrics);
  const outbound = new OutboundDelivery({
    nats,
    names,
    states: stores.states,
    http: outside.http,
    discovery: outside.discovery,
    log,
    metrics,
    options: {
      backoffMs: spec.outbound.backoff.map(parseDuration),
      retryForMs: parseDuration(spec.outbound.retryFor),
      resiliency: {
        failureThreshold: spec.outbound.resiliency.failureThreshold,
        coolDownMs: parseDuration(spec.outbound.resiliency.coolDown),
        maxInFlight: spec.outbound.resiliency.maxInFlight,
        timeoutMs: parseDuration(spec.outbound.resiliency.timeout),
      },
      peerUrls: outside.peerUrls,
      peerRelays: new Map(spec.peers.filter((p) => p.relay?.urls.length).map((p) => [p.agentId, p.relay!])),
      ownRelays: spec.relay?.urls ?? [],
      relayAllowed: (message, url, agent) => outside.encryption.plaintextRelayAllowed(message, url, agent),
      plaintextThrough: (message, url) => outside.encryption.plaintextThrough(message, url),
    },
    relay: relayPublisher(signing, outside.http, { timeoutMs: parseDuration(spec.outbound.resiliency.timeout) }),
    a2a: a2aPeers(self, opts, outside, stores, log),
    onGiveUp: (record, r) => notifier.undeliverable(record, r),
  });
  const intake = relayMailboxReader(self, outside, stores, metrics, log);
  return { handoff, appStream, outbound, intake, all: [handoff, outbound, intake, appStream] };
}
type Deliveries = ReturnType<typeof agentDeliveries>;

/** Sending to A2A agents: their answers go through the same inbox stream and hand-off as IFP messages. */
function a2aPeers(self: Self, opts: AgentOptions, outside: Outside, stores: Stores, log: Logger) {
  if (self.spec.a2a.peerTokenSecret && !opts.a2aPeerTokenFile)
    log.warn("spec.a2a.peerTokenSecret is set but no --a2a-peer-token-file was given; no bearer token is presented");
  return new A2aPeers({
    http: outside.http,
    signing: self.signing,
    ...(opts.a2aPeerTokenFile ? { bearerFor: peerTokenFile(opts.a2aPeerTokenFile, log) } : {}),
    handOff: async (message, m) => {
      const meta = { signer: m.sender, authLevel: m.authLevel, source: m.source, handoff: true };
      await stores.inbox.accept(message, m.messageId, { ...meta, conversationId: m.conversationId }, m.sender);
    },
    log,
  });
}

/** The hand-off to spec.handler.url, signed with the hand-off secret; none without a handler. */
function handlerHandoff(
  self: Self,
  opts: AgentOptions,
  outside: Outside,
  stores: Stores,
  metrics: Metrics,
  log: Logger,
) {
  const handler = self.spec.handler;
  // Read now: a missing or short secret is a start-up error, not hand-offs nobody can check.
  const handoffSecret = opts.handoffSecretFile ? readHandoffSecret(opts.handoffSecretFile) : undefined;
  if (handler && !handoffSecret)
    log.warn(
      "no --handoff-secret-file: hand-offs to spec.handler.url are not signed, and the application cannot tell them from anyone else's requests (docs/agent.md#hand-off-signature)",
    );
  if (!handler) return undefined;
  return new HandlerHandoff(
    stores.nats,
    self.names,
    outside.http,
    {
      url: handler.url,
      timeoutMs: parseDuration(handler.timeout),
      deadLetterAfterMs: parseDuration(handler.deadLetterAfter),
      ...(handoffSecret ? { secret: handoffSecret } : {}),
    },
    log,
    metrics,
    { onDeadLetter: (messageId, reason) => void stores.notifier.handlerDeadLetter(messageId, reason) },
  );
}

/** The reader of the agent's mailboxes on its own relays (spec.relay); none without relays. */
function relayMailboxReader(self: Self, outside: Outside, stores: Stores, metrics: Metrics, log: Logger) {
  const { agent, spec, signing } = self;
  if (!spec.relay?.urls.length) return undefined;
  const { inbox, onAccepted, conversations } = stores;
  const { encryption } = outside;
  const replayWindowMs = parseDuration(spec.inbox.replayWindow);
  return new RelayMailboxReader({
    urls: spec.relay.urls,
    signing,
    http: outside.http,
    verifier: outside.verifier,
    requireSignature: spec.inbox.requireSignature,
    accept: (raw, message, verified) =>
      acceptVerified({ agent, store: inbox, onAccepted, conversations, encryption }, raw, message, verified),
    encryption,
    admission: {
      agentId: spec.agentId,
      replayWindowMs,
      replayWindowText: spec.inbox.replayWindow,
      maxFutureSkewMs: MAX_FUTURE_SKEW_MS,
      retentionMs: inboxRetentionMs(replayWindowMs),
      now: Date.now,
    },
    intervalMs: parseDuration(spec.relay.pollInterval),
    topics: spec.relay.topics,
    mode: spec.relay.receive,
    log,
    metrics,
  });
}

/**
 * The A2A face (spec.a2a): its messages go through the same inbox stream and hand-off. `loops`:
 * what it shares with the other event loops serving the port (workers.ts), when there are some.
 */
export function a2aOf(
  self: Self,
  opts: AgentOptions,
  outside: Outside,
  stores: InboxParts,
  log: Logger,
  loops?: A2aFaceDeps["loops"],
) {
  if (!self.spec.a2a.enabled) return undefined;
  return a2aFace({
    agent: self.agent,
    signing: self.signing,
    nats: stores.nats,
    bucket: self.names.a2aTasksBucket,
    tokenFile: opts.a2aTokenFile,
    lookupKey: (agentId, keyId, address) => outside.verifier.lookup(agentId, keyId, address),
    handOff: async (message, m) => {
      const meta = { signer: m.sender, authLevel: m.authLevel, source: m.source, handoff: true };
      await stores.inbox.accept(message, m.messageId, { ...meta, conversationId: m.conversationId }, m.sender);
    },
    http: outside.http,
    targets: outside.targets,
    log,
    ...(loops ? { loops } : {}),
  });
}
type A2a = ReturnType<typeof a2aOf>;

/**
 * The start-up that waits for NATS: the streams and buckets, the capability document's
 * announcement, then the consumers. Retried until it works; `state.ready` once it has.
 */
function startUp(
  self: Self,
  outside: Outside,
  stores: Stores,
  deliveries: Deliveries,
  a2a: A2a,
  state: { ready: boolean },
  log: Logger,
) {
  const { spec, names, documents } = self;
  const { nats, streams } = stores;
  // The peers of recent conversations are told through their inboxes, durably: queued in the
  // outbox (once per change: the ids derive from it) before the change is recorded, so a crash
  // in between finds the change again at the next start.
  const tellPeers = async () => {
    const { signing, documents } = self;
    await tellPeersCapabilities({
      peers: await stores.conversations.recentPeers(spec.agentId),
      signing,
      document: documents.capabilityDocument.doc,
      displayName: spec.displayName,
      outbox: stores.outbox,
      log,
    });
  };
  const ensureAll = async (signal: AbortSignal) => {
    await stores.inbox.ensure(streams);
    await stores.outbox.ensure(streams);
    await stores.states.ensure();
    await stores.peerCaps.ensure();
    await stores.conversations.ensure();
    await deliveries.appStream?.ensure();
    await a2a?.ensure();
    if (await documents.syncUpdated(nats, names, log, tellPeers)) announce(self, outside, nats, log, signal);
  };
  return async (signal: AbortSignal) => {
    await nats.start(signal);
    await retry(() => ensureAll(signal), {
      signal,
      // A missing stream, or one JetStream has no storage for, was said by the keeper; it is
      // looked for (or asked for) again.
      onError: (err, retryInMs) =>
        err instanceof StreamMissingError || err instanceof StorageRefusedError
          ? undefined
          : log.warn({ err: err.message, retryInMs }, "JetStream streams not ready yet"),
    });
    state.ready = true;
    streams.start();
    deliveries.handoff?.start();
    deliveries.outbound.start();
    deliveries.intake?.start();
    log.info({ agentId: spec.agentId, stream: names.inboxStream }, "agent ready");
  };
}

/**
 * A changed capability document, announced on the agent's own relays (spec 6), in the
 * background until each relay took it or refused it for good; then recorded as announced, so
 * that a runtime stopped before that announces it again at its next start.
 */
function announce(self: Self, outside: Outside, nats: Nats, log: Logger, signal: AbortSignal): void {
  const { spec, documents, names } = self;
  if (!spec.relay?.urls.length) return;
  void announceCapabilities({
    urls: spec.relay.urls,
    signing: self.signing,
    http: outside.http,
    document: documents.capabilityDocument.doc,
    displayName: spec.displayName,
    log,
    signal,
  })
    .then(() => (signal.aborted ? undefined : documents.markAnnounced(nats, names)))
    .catch((err) => log.warn({ err: errorMessage(err) }, "could not record the capability document as announced"));
}

interface Wired {
  outside: Outside;
  stores: Stores;
  deliveries: Deliveries;
  a2a: A2a;
  metrics: Metrics;
  life: Lifecycle;
  log: Logger;
  localApiToken: TokenFile | undefined;
  pool?: InboxWorkers;
}

/**
 * The agent's public HTTPS server without the A2A face, its certificate followed as it changes:
 * what every event loop serving the port runs (workers.ts).
 */
export function publicApp(
  opts: AgentOptions,
  self: Self,
  w: { outside: Outside; stores: InboxParts; metrics: Metrics; life: Lifecycle; log: Logger },
  ready: () => boolean,
  limits?: InboxLimits,
) {
  const { agent, documents } = self;
  const { inbox, conversations, onAccepted } = w.stores;
  const { verifier, encryption } = w.outside;
  const tlsFiles = { certFile: opts.tlsCert, keyFile: opts.tlsKey };
  const app = buildAgentApp({
    ...{ agent, documents, verifier, store: inbox, conversations, onAccepted, encryption, ready, limits },
    ...{ metrics: w.metrics, logger: w.log, tls: readTls(tlsFiles), trustedProxies: opts.trustedProxies },
  });
  w.life.defer("TLS watch", watchTls(app, tlsFiles, w.log));
  return app;
}

/** The agent's HTTPS endpoints and the local API (its TLS listener too, when asked for), built. */
function agentApps(opts: AgentOptions, self: Self, w: Wired, ready: () => boolean) {
  const { agent, signing } = self;
  const { inbox, conversations, peerCapabilities, outbox, states } = w.stores;
  const { encryption } = w.outside;
  const tlsFiles = { certFile: opts.tlsCert, keyFile: opts.tlsKey };
  const pool = w.pool;
  const app = pool
    ? publicApp(opts, self, w, pool.shared.podReady.bind(pool.shared), pool.shared.limits)
    : publicApp(opts, self, w, ready);
  if (pool) {
    w.life.defer("readiness", pool.shared.report(0, ready));
    countRequests(app, w.metrics, 0);
  }
  w.a2a?.register(app);
  const localDeps = {
    agent,
    signing,
    encryption,
    documents: self.documents,
    outbox: w.a2a ? w.a2a.replies(peerCapabilities.gate(outbox)) : peerCapabilities.gate(outbox),
    states: w.a2a ? w.a2a.deliveries(states) : states,
    redrive: (id: string) => states.redrive(id, (message, dedupId) => outbox.requeue(message, dedupId)),
    circuits: () => w.deliveries.outbound.circuits(),
    peers: peerCapabilities,
    received: inbox.received.bind(inbox),
    conversations,
    stream: w.deliveries.appStream,
    watch: new InboxWatch(w.stores.nats, self.names, w.log, w.stores.inbox),
    logger: w.log,
  };
  const localApi = buildLocalApi(localDeps);
  const localApiTls = w.localApiToken
    ? buildLocalApi(localDeps, { tls: readTls(tlsFiles), token: w.localApiToken })
    : undefined;
  if (localApiTls) w.life.defer("local API TLS watch", watchTls(localApiTls, tlsFiles, w.log));
  for (const api of [localApi, localApiTls]) if (api) w.a2a?.registerLocal(api);
  return { app, localApi, localApiTls };
}

/** Listen: the HTTPS server, the local API (loopback; and TLS when asked for), the metrics. */
async function listen(opts: AgentOptions, self: Self, w: Wired, ready: () => boolean): Promise<RunningAgent> {
  const { app, localApi, localApiTls } = agentApps(opts, self, w, ready);
  const { life, log } = w;
  const host = opts.host ?? "0.0.0.0";
  // Before the HTTPS server: the card it serves names the gRPC port.
  const grpc =
    w.a2a && opts.a2aGrpcPort !== undefined
      ? await w.a2a.serveGrpc(opts.a2aGrpcPort, host, { certFile: opts.tlsCert, keyFile: opts.tlsKey })
      : undefined;
  if (grpc) life.defer("A2A gRPC server", () => grpc.close());
  const url = await life.listen(app, {
    name: "HTTPS server",
    scheme: "https",
    port: opts.port,
    host,
    ...(w.pool ? { reusePort: true } : {}),
  });
  if (w.pool) {
    const { logger: _, ...clonable } = opts;
    // After the main loop's listener: stopped before it, each worker drained.
    life.defer("event loops", () => w.pool?.close());
    await w.pool.start(opts.workerEntry!, Number(new URL(url).port), clonable, grpc?.port);
  }
  const localApiPort = opts.localApiPort ?? self.spec.localApi.port;
  const localApiUrl = await life.listen(localApi, {
    name: "local API",
    scheme: "http",
    port: localApiPort,
    host: "127.0.0.1",
  });
  const localApiTlsUrl = localApiTls
    ? await life.listen(localApiTls, { name: "local API (TLS)", scheme: "https", port: opts.localApiTlsPort!, host })
    : undefined;
  const metricsUrl =
    opts.metricsPort === undefined
      ? undefined
      : await life.listen(buildMetricsApp(w.metrics, w.pool && (() => w.pool!.metrics())), {
          name: "metrics",
          scheme: "http",
          port: opts.metricsPort,
          host,
        });
  const agentId = self.spec.agentId;
  const a2aGrpcPort = grpc?.port;
  log.info({ url, localApiUrl, localApiTlsUrl, metricsUrl, a2aGrpcPort, agentId, ...buildInfo() }, "agent listening");
  const { agent } = self;
  const { appStream } = w.deliveries;
  return {
    app,
    url,
    localApiUrl,
    localApiTlsUrl,
    metricsUrl,
    a2aGrpcPort,
    appStream,
    agent,
    nats: w.stores.nats,
    ...(w.pool ? { failed: w.pool.failed } : {}),
    close: () => life.close(),
  };
}
