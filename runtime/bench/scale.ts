// What an Agent costs JetStream, up to 10,000 Agents. The JetStream objects of N Agents and M
// Relays are made by the project's own code, as the runtimes and the operator make them:
// - per Agent (the agent runtime's start-up, agent/main.ts, in its order): the inbox and outbox
//   streams through a StreamKeeper (its ledger in the ifp_agents bucket of the agent's own NATS
//   account, here one bucket per agent in one account), the
//   delivery-state, peer-capability and conversation KV buckets, the handler's consumer on the
//   inbox (an Agent with spec.handler, as the examples) and the sender's consumer on the outbox;
//   replicas "auto" (three on a cluster, one on a single server);
// - per Relay: its stream as the operator applies it (ensureReplicatedStream of
//   relayStreamConfig), then the relay runtime's StreamKeeper and its subscriptions bucket.
// `--layout shared` makes the same objects of the same code with shared names: one inbox stream
// (ifp.inbox.>) and one outbox stream (ifp.outbox.>) for every agent, one bucket of each kind
// shared by all, and per agent only its two consumers, filtered on its own subjects: one account
// of every agent, nothing kept apart. `--layout isolated` is the shared layout with the tenant
// boundary kept (scale-isolated.ts), in operator mode on one server or on three: a data account
// per tenant holding the shared streams (replicas "auto"), an account per agent importing only
// its own subjects, the agent's consumers (one replica) made in the data account. Agents are
// spread over a fixed number of tenants (`--tenants`, 20 by default, the same at every size:
// agent i is tenant i mod N's), so what a tenant owns (its streams, their Raft groups) grows with
// the tenants and not with the agents. `isolated` is the product's layout ("product": true), the
// chart's default; `per-agent` is its earlier one, which an install may still choose.
// On one nats-server and on a three-node cluster (loopback, stores under the system's temporary
// directory), at each size (agents added to reach it): the servers' RSS and open files, JetStream's
// own counts, the Raft groups each server runs (/raftz of every account with JetStream: the meta
// group and every stream's and consumer's of more than one replica), the time to create, the time
// to restart every server and have it ready again (/healthz?js-enabled-only=true, then /healthz
// with every stream it had loaded), on a cluster the time to restart one server of three until it
// is current again, the latency of a publish and its PubAck to one agent's inbox
// (InboxStore.accept), and every error JetStream answered on the way (recorded, never fatal).
// `npm run bench:scale` runs what an install is sized by: 1,000, 5,000 and 10,000 agents, the
// product's (isolated) layout first and then the per-agent one, on one server and on three, all
// within 40 minutes (`--total-deadline-min`): a run of the product's layout makes agents for at
// most 12 minutes (`--deadline-min`), one of a comparison layout for 4 (`--compare-deadline-min`).
// `-- --agents 1000,5000,10000 --relays 10 --cluster single,three [--layout isolated,per-agent,shared]
// [--tenants 20] [--concurrency 16] [--out FILE]` chooses. It prints a table per run and, at the
// end, each goal of the product's layout (goalsOf: met or not, with its figure), and writes
// .bench/scale.json (after every size, so a run cut short keeps what it measured; the goals in
// `goals`). Every loop and wait is bounded (a layout stops at its first bound, recorded as
// `boundedBy`); the servers are stopped and their stores deleted at the end.
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { pino, type Logger } from "pino";
import { startNats, startNatsCluster, type NatsServer } from "../../e2e/support/nats.ts";
import { stopAllProcesses } from "../../e2e/support/process.ts";
import { agentNames, type AgentNames } from "../src/agent/names.ts";
import { Conversations } from "../src/agent/conversations.ts";
import { DeliveryStates } from "../src/agent/outbound/delivery-state.ts";
import { HandlerHandoff } from "../src/agent/inbound/handoff.ts";
import { PeerCapabilityCache } from "../src/agent/inbound/inbound.ts";
import { OutboundDelivery } from "../src/agent/outbound/outbound.ts";
import { OutboxStore } from "../src/agent/outbound/outbox.ts";
import { InboxStore } from "../src/agent/inbound/store.ts";
import { relayNames, relayStreamConfig } from "../src/contract/relay-stream.ts";
import { DiscoveryClient } from "../src/discovery/client.ts";
import { Nats } from "../src/nats/connection.ts";
import { StreamKeeper } from "../src/nats/stream-keeper.ts";
import { ensureReplicatedStream } from "../src/nats/streams.ts";
import { HttpClient } from "../src/net/http-client.ts";
import { TargetPolicy } from "../src/net/targets.ts";
import { Agent } from "../src/resources/agent.ts";
import { parseDuration } from "../src/resources/fields.ts";
import { Relay } from "../src/resources/relay.ts";
import { Subscriptions } from "../src/relay/subscriptions.ts";
import { IsolatedInstall } from "./scale-isolated.ts";
import { createRuntimeMetrics } from "../src/server/metrics.ts";
import { errorMessage } from "../src/util/errors.ts";

export type Topology = "single" | "three";
export type Layout = "per-agent" | "shared" | "isolated";
const LAYOUTS: Layout[] = ["per-agent", "shared", "isolated"];
/** The layout the product uses. */
const PRODUCT_LAYOUT: Layout = "isolated";

export interface ScaleOptions {
  agents: number[];
  relays: number;
  clusters: Topology[];
  layouts: Layout[];
  /** Tenants the agents are spread over, the same at every size (agent i is tenant i mod N's). */
  tenants: number;
  /** Agents being made at once (runtimes starting together). */
  concurrency: number;
  /** Publishes timed at each size. */
  publishes: number;
  /** Bound on making the agents of one run (layout × topology) of the product's layout, all sizes together. */
  createDeadlineMs: number;
  /** The same for a run of a layout the product does not use (per-agent, shared): what keeps the comparison within the whole bench's bound. */
  compareDeadlineMs: number;
  /** No more agents are made once a server's RSS passes this (MiB per server, by topology; 0: none). */
  rssBudgetMiB: Record<Topology, number>;
  /**
   * Bound on the whole bench, every run together: no agent is made past it, and a restart waits
   * at most until it (none is started past it). The product's layout runs first.
   */
  totalDeadlineMs: number;
  /** Bound on one restart until ready. */
  restartDeadlineMs: number;
  /** Skip the restart (the smoke test). */
  restart: boolean;
  /** The servers' jetstream max_file_store ("default": the server's own, three quarters of the free disk). */
  maxFileStore: string;
  /** Called with the results so far after every size. */
  onProgress?: (r: ScaleResult) => void;
  log?: (line: string) => void;
}

export interface ServerSample {
  server: string;
  rssMiB: number;
  /** Peak RSS of the process (VmHWM). */
  peakRssMiB: number;
  fds: number;
  /** /varz mem and cpu. */
  varzMemMiB: number;
  cpuPercent: number;
  /** /jsz: what this server holds. */
  streams: number;
  consumers: number;
  messages: number;
  storeMiB: number;
  memStoreMiB: number;
  apiTotal: number;
  apiErrors: number;
  /** JetStream's count of replicated assets on this server (/jsz ha_assets, a cluster). */
  haAssets?: number;
  /** The Raft groups this server runs, as /raftz lists them for every account with JetStream (a cluster). */
  raftGroups?: number;
}

export interface RestartOneResult {
  /** The server restarted (the others kept running). */
  server: string;
  stopS: number;
  /** From starting it until it listens for clients. */
  listeningS: number;
  /** … until it answers /healthz (every stream and consumer current), sees the meta leader and holds as many streams as before. */
  currentS: number;
  timedOut: boolean;
  after: ServerSample;
}

export interface RestartResult {
  /** SIGTERM of every server until all exited. */
  stopS: number;
  /** From starting them until every server listens for clients. */
  listeningS: number;
  /** … until every server answers /healthz?js-enabled-only=true. */
  jsEnabledS: number;
  /** … until every server answers /healthz (its streams and consumers current) and holds as many streams as before. */
  loadedS: number;
  /** The restart did not finish within its deadline (then loadedS is that deadline). */
  timedOut: boolean;
  /** From starting the servers until the bench's own client (the product's Nats) is connected again. */
  clientReconnectS: number;
  /** Whether that client was connected again before the restart's deadline. */
  clientReconnected: boolean;
  afterRestart: ServerSample[];
}

export interface SizeResult {
  layout: Layout;
  /** Whether this is the layout the product uses. */
  product: boolean;
  cluster: Topology;
  /** Agents asked for at this size, and made (every object of theirs). */
  agents: number;
  made: number;
  failed: number;
  relays: number;
  /** Seconds to make the agents added for this size, and per agent made. */
  createS: number;
  createMsPerAgent: number;
  /** Streams, consumers and KV buckets of the whole install, as JetStream counts them. */
  streams: number;
  consumers: number;
  servers: ServerSample[];
  publish: { n: number; p50Ms: number; p99Ms: number; maxMs: number; errors: number };
  restart?: RestartResult;
  /** On a cluster: one server of three restarted, the others running. */
  restartOne?: RestartOneResult;
  /** Tenants of the run (the isolated layout's data accounts; the per-agent names' teams). */
  tenants: number;
  /** Errors by kind (agent names removed), with the step that met them. */
  errors: Record<string, number>;
  /** Every 250 agents on the way to this size: agents made, seconds into the run, each server's RSS. */
  progress: { made: number; s: number; rssMiB: number[] }[];
  /** Why this size was not completed, when it was not. */
  boundedBy?: string;
}

export interface ScaleResult {
  date: string;
  machine: { cpus: number; memGiB: number; loadAvg1: number };
  natsServer: string;
  options: Omit<ScaleOptions, "onProgress" | "log">;
  /** Objects per agent in each layout, by the code that makes them. */
  perAgent: Record<Layout, { streams: number; buckets: number; consumers: number; sharedKeys: number }>;
  runs: SizeResult[];
  /** Each goal of an install's sizing (goalsOf), met or not, with its figure. */
  goals: Goal[];
}

/** One goal of the product's layout: what it asks, whether the run met it, the figure measured. */
export interface Goal {
  goal: string;
  met: boolean;
  figure: string;
}

/** What an install of the product's layout is sized by (the bench's goals, docs/scale.md). */
export const GOALS = {
  /** Peak RSS of one server holding every Agent, MiB. */
  singleRssMiB: 1536,
  /** Seconds until a restarted server has every stream loaded. */
  singleLoadedS: 30,
  /** Agents made a second, on one server, over every size. */
  singleAgentsPerS: 100,
  /** Peak RSS of each of three servers, MiB. */
  threeRssMiB: 4096,
  /** Seconds until one restarted server of three is current again. */
  threeCurrentS: 60,
  /** How far the PubAck latency (p50) at the largest size may be from the smallest's: the larger at most this times the smaller. */
  latencyRatio: 1.2,
} as const;

const MIB = 1024 * 1024;
const MONITOR = /Starting http monitor on [^\s]+:(\d+)/;

const AGENT_SPEC = Agent.parse({
  apiVersion: "ifp.dev/v1alpha1",
  kind: "Agent",
  metadata: { name: "bench", namespace: "bench" },
  spec: { agentId: "https://bench.example/agent", handler: { url: "http://127.0.0.1:8080" } },
}).spec;

/** An Agent's JetStream names in a layout: its own (the product's), or the shared streams and buckets. */
export function namesFor(layout: Layout, key: string): AgentNames {
  const n = agentNames(key);
  // Each runtime has a NATS account of its own (docs/security.md), so each has its own ifp_agents
  // bucket (the stream ledger, the documents, the last error): one stream per agent, which one
  // account of many agents would share. Its name here is the agent's, to count it as it is made.
  if (layout === "per-agent") return { ...n, kvBucket: `ifp_agents_${n.kvKey}` };
  return {
    ...n,
    inboxStream: "IFP_INBOX",
    inboxSubjects: "ifp.inbox.>",
    handlerConsumer: `handler_${n.kvKey}`,
    outboxStream: "IFP_OUTBOX",
    outboxSubjects: "ifp.outbox.>",
    senderConsumer: `sender_${n.kvKey}`,
    outboxStateBucket: "ifp_outbox",
    peersBucket: "ifp_peers",
    conversationsBucket: "ifp_conv",
  };
}

function agentKey(i: number, tenants: number): string {
  return `team-${i % tenants}/agent-${i}`;
}

/** The shared pieces every agent's objects are made with: one connection, as many runtimes' would make the same calls. */
interface Maker {
  nats: Nats;
  http: HttpClient;
  discovery: DiscoveryClient;
  metrics: ReturnType<typeof createRuntimeMetrics>;
  log: Logger;
}

/** One agent's objects, in the order agent/main.ts makes them at start-up. */
export async function makeAgent(m: Maker, layout: Layout, key: string, step: { name: string }): Promise<void> {
  const names = namesFor(layout, key);
  const replicas = AGENT_SPEC.durability.replicas ?? "auto";
  const keeper = new StreamKeeper(m.nats, m.log, {
    ledger: { bucket: names.kvBucket, key: `${names.kvKey}.jetstream` },
  });
  step.name = "inbox stream";
  await new InboxStore(
    m.nats,
    names,
    parseDuration(AGENT_SPEC.inbox.replayWindow),
    AGENT_SPEC.inbox.maxBytes,
    replicas,
  ).ensure(keeper);
  step.name = "outbox stream";
  await new OutboxStore(m.nats, names, replicas).ensure(keeper);
  step.name = "delivery-state bucket";
  const states = new DeliveryStates(m.nats, names.outboxStateBucket);
  await states.ensure();
  step.name = "peers bucket";
  await new PeerCapabilityCache(m.nats, names, m.log).ensure();
  step.name = "conversations bucket";
  await new Conversations(m.nats, names.conversationsBucket, { deliveries: states }).ensure();
  step.name = "handler consumer";
  await new HandlerHandoff(
    m.nats,
    names,
    m.http,
    {
      url: AGENT_SPEC.handler!.url,
      timeoutMs: parseDuration(AGENT_SPEC.handler!.timeout),
      deadLetterAfterMs: parseDuration(AGENT_SPEC.handler!.deadLetterAfter),
    },
    m.log,
    m.metrics,
    {},
  ).ensureConsumer();
  step.name = "sender consumer";
  await new OutboundDelivery({
    nats: m.nats,
    names,
    states,
    http: m.http,
    discovery: m.discovery,
    log: m.log,
    metrics: m.metrics,
    options: {
      backoffMs: AGENT_SPEC.outbound.backoff.map(parseDuration),
      retryForMs: parseDuration(AGENT_SPEC.outbound.retryFor),
      peerUrls: new Map(),
    },
    onGiveUp: async () => {},
  }).ensureConsumer();
}

/** One Relay's objects: its stream as the operator applies it, then the relay runtime's start-up. */
export async function makeRelay(m: Maker, i: number): Promise<Subscriptions> {
  const relay = Relay.parse({
    apiVersion: "ifp.dev/v1alpha1",
    kind: "Relay",
    metadata: { name: `relay-${i}`, namespace: "relays" },
    spec: {
      url: `https://relay-${i}.example`,
      retention: { maxAge: "72h", maxBytes: 1073741824, maxMessages: 100000, storage: "file", duplicateWindow: "48h" },
      agents: [],
    },
  });
  const want = relayStreamConfig(relay);
  await ensureReplicatedStream(m.nats.jsm, want, relay.spec.retention.replicas, m.nats.placement);
  const names = relayNames(relay);
  const keeper = new StreamKeeper(m.nats, m.log, { ledger: { bucket: names.kvBucket, key: "jetstream" } });
  await keeper.ensure(want, relay.spec.retention.replicas);
  const subs = new Subscriptions(m.nats, names, m.log);
  await subs.ensure();
  // Open for the run, as a running relay keeps it: its watch is an ephemeral consumer.
  return subs;
}

/** An error's kind: its message without the names of agents and streams. */
export function errorKind(step: string, err: unknown): string {
  const msg = errorMessage(err)
    .replace(/team-\d+_2Fagent-\d+/g, "<agent>")
    .replace(/IFP_(INBOX|OUTBOX)_\S+/g, "IFP_$1_<agent>")
    .replace(/ifp_(outbox|peers|conv)_\S+/g, "ifp_$1_<agent>")
    .replace(/\d{3,}/g, "N");
  return `${step}: ${msg}`.slice(0, 300);
}

// ---- The servers ----

interface Deployment {
  topology: Topology;
  nodes: NatsServer[];
  names: string[];
  url: string;
  close(): Promise<void>;
}

const GRACE_MS = 180_000;
const START_TIMEOUT_MS = 600_000;

/**
 * The servers' JetStream file-store limit. Every stream with max_bytes reserves that much of it
 * when it is placed (an agent's inbox 1 GiB by default, spec.inbox.maxBytes; a relay's its
 * spec.retention.maxBytes), and nats-server's default is three quarters of the free disk: with
 * that default a server holds about as many agents as it has GiB of store, and JetStream refuses
 * the next with "insufficient storage". `--max-file-store` (default 1P) lifts it, so that the rest
 * is measured; `--max-file-store default` keeps the server's own.
 */
function jetstreamConfig(maxFileStore: string): string {
  return maxFileStore === "default" ? "" : `jetstream { max_file_store: ${maxFileStore} }\n`;
}

async function deploy(topology: Topology, maxFileStore: string): Promise<Deployment> {
  if (topology === "single") {
    const s = await startNats({
      config: `http: "127.0.0.1:-1"\n${jetstreamConfig(maxFileStore)}`,
      graceMs: GRACE_MS,
      startTimeoutMs: START_TIMEOUT_MS,
    });
    return { topology, nodes: [s], names: ["n0"], url: s.url, close: () => s.close() };
  }
  const c = await startNatsCluster({
    graceMs: GRACE_MS,
    startTimeoutMs: START_TIMEOUT_MS,
    config: jetstreamConfig(maxFileStore),
  });
  return { topology, nodes: c.nodes, names: c.names, url: c.url, close: () => c.close() };
}

/** Each server process's monitoring port, read from its log once. */
const monitorPorts = new Map<NatsServer, { pid: number; port: number }>();
function monitorPort(node: NatsServer): number | undefined {
  const pid = node.pid;
  if (pid === undefined) return undefined;
  const known = monitorPorts.get(node);
  if (known?.pid === pid) return known.port;
  // The ring may have moved past the line (a server restoring thousands of streams logs each):
  // then the last one of the log file, to which every start of the server appends.
  let port = Number(MONITOR.exec(node.log())?.[1] ?? 0);
  if (!port) {
    try {
      const all = [...readFileSync(join(node.storeDir, "nats-server.log"), "utf8").matchAll(new RegExp(MONITOR, "g"))];
      port = Number(all.at(-1)?.[1] ?? 0);
    } catch {
      // no log file yet
    }
  }
  if (!port) return undefined;
  monitorPorts.set(node, { pid, port });
  return port;
}

async function monitor(node: NatsServer, path: string, timeoutMs = 10_000): Promise<{ status: number; body: any }> {
  const port = monitorPort(node);
  if (!port) return { status: 0, body: undefined };
  try {
    const res = await fetch(`http://127.0.0.1:${port}${path}`, { signal: AbortSignal.timeout(timeoutMs) });
    return { status: res.status, body: await res.json().catch(() => undefined) };
  } catch {
    return { status: 0, body: undefined };
  }
}

function procStatus(pid: number | undefined, field: string): number {
  if (pid === undefined) return 0;
  try {
    const m = new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(readFileSync(`/proc/${pid}/status`, "utf8"));
    return m ? Number(m[1]) * 1024 : 0;
  } catch {
    return 0;
  }
}

function openFiles(pid: number | undefined): number {
  if (pid === undefined) return 0;
  try {
    return readdirSync(`/proc/${pid}/fd`).length;
  } catch {
    return 0;
  }
}

const round = (x: number, d = 1) => Math.round(x * 10 ** d) / 10 ** d;

/**
 * The Raft groups a server runs: /raftz lists them by account, the system account's (the meta
 * group) when asked for none, an account's own (its streams' and consumers' of more than one
 * replica) when asked for it; so the system account's and those of every account with JetStream.
 */
async function raftGroups(node: NatsServer): Promise<number> {
  const accounts: { id: string }[] = (await monitor(node, "/jsz?accounts=true", 60_000)).body?.account_details ?? [];
  const groups = new Set<string>();
  for (const acc of [undefined, ...accounts.map((a) => a.id)]) {
    const raftz = (await monitor(node, acc ? `/raftz?acc=${encodeURIComponent(acc)}` : "/raftz", 60_000)).body ?? {};
    for (const [account, named] of Object.entries(raftz as Record<string, Record<string, unknown>>))
      for (const name of Object.keys(named ?? {})) groups.add(`${account}/${name}`);
  }
  return groups.size;
}

async function sampleOne(d: Deployment, i: number): Promise<ServerSample> {
  const node = d.nodes[i]!;
  const varz = (await monitor(node, "/varz")).body ?? {};
  const jsz = (await monitor(node, "/jsz", 60_000)).body ?? {};
  return {
    server: d.names[i]!,
    rssMiB: round(procStatus(node.pid, "VmRSS") / MIB),
    peakRssMiB: round(procStatus(node.pid, "VmHWM") / MIB),
    fds: openFiles(node.pid),
    varzMemMiB: round((varz.mem ?? 0) / MIB),
    cpuPercent: round(varz.cpu ?? 0),
    streams: jsz.streams ?? 0,
    consumers: jsz.consumers ?? 0,
    messages: jsz.messages ?? 0,
    storeMiB: round((jsz.storage ?? 0) / MIB),
    memStoreMiB: round((jsz.memory ?? 0) / MIB),
    apiTotal: jsz.api?.total ?? 0,
    apiErrors: jsz.api?.errors ?? 0,
    ...(d.topology === "three" ? { haAssets: jsz.ha_assets ?? 0, raftGroups: await raftGroups(node) } : {}),
  };
}

/**
 * The streams and consumers of the whole install: one server's count, or on a cluster the
 * distinct ones of every server's (a consumer of one replica is on one server only).
 */
async function installCounts(d: Deployment): Promise<{ streams: number; consumers: number }> {
  if (d.nodes.length === 1) {
    const jsz = (await monitor(d.nodes[0]!, "/jsz", 60_000)).body ?? {};
    return { streams: jsz.streams ?? 0, consumers: jsz.consumers ?? 0 };
  }
  const streams = new Set<string>();
  const consumers = new Set<string>();
  for (const node of d.nodes) {
    const jsz = (await monitor(node, "/jsz?accounts=true&streams=true&consumers=true", 120_000)).body ?? {};
    for (const acc of jsz.account_details ?? [])
      for (const st of acc.stream_detail ?? []) {
        streams.add(`${acc.id}/${st.name}`);
        for (const c of st.consumer_detail ?? []) consumers.add(`${acc.id}/${st.name}/${c.name}`);
      }
  }
  return { streams: streams.size, consumers: consumers.size };
}

async function sample(d: Deployment): Promise<ServerSample[]> {
  return Promise.all(d.nodes.map((_, i) => sampleOne(d, i)));
}

/** Until `check` holds or the deadline passes; the seconds since `t0`, and whether it held. */
async function until(check: () => Promise<boolean>, t0: number, deadline: number): Promise<[number, boolean]> {
  for (;;) {
    if (await check().catch(() => false)) return [(performance.now() - t0) / 1000, true];
    if (performance.now() > deadline) return [(performance.now() - t0) / 1000, false];
    await new Promise((r) => setTimeout(r, 250));
  }
}

async function restartAll(
  d: Deployment,
  connected: () => boolean | Promise<boolean>,
  deadlineMs: number,
): Promise<RestartResult> {
  const before = await sample(d);
  const t0 = performance.now();
  await Promise.all(d.nodes.map((n) => n.stop()));
  const stopS = (performance.now() - t0) / 1000;
  const t1 = performance.now();
  const deadline = t1 + deadlineMs;
  // restart() resolves once the server listens and takes a client connection; the bench's own
  // client (the product's Nats, with its reconnection backoff) is timed from the same moment.
  const client = until(async () => connected(), t1, t1 + deadlineMs);
  await Promise.all(d.nodes.map((n) => n.restart()));
  // The monitoring port of each new process, before its log ring moves on.
  for (const n of d.nodes) monitorPort(n);
  const listeningS = (performance.now() - t1) / 1000;
  const [jsEnabledS, jsOk] = await until(
    async () =>
      (await Promise.all(d.nodes.map((n) => monitor(n, "/healthz?js-enabled-only=true")))).every(
        (r) => r.status === 200,
      ),
    t1,
    deadline,
  );
  const [loadedS, loadedOk] = jsOk
    ? await until(
        async () => {
          const health = await Promise.all(d.nodes.map((n) => monitor(n, "/healthz", 30_000)));
          if (!health.every((r) => r.status === 200)) return false;
          const jsz = await Promise.all(d.nodes.map((n) => monitor(n, "/jsz", 60_000)));
          return jsz.every((r, i) => (r.body?.streams ?? -1) >= before[i]!.streams);
        },
        t1,
        deadline,
      )
    : [jsEnabledS, false];
  const [clientS, clientOk] = await client;
  return {
    clientReconnectS: round(clientS),
    clientReconnected: clientOk,
    stopS: round(stopS),
    listeningS: round(listeningS),
    jsEnabledS: round(jsEnabledS),
    loadedS: round(loadedS),
    timedOut: !(jsOk && loadedOk),
    afterRestart: await sample(d),
  };
}

/**
 * One server of a cluster restarted while the others run (a rolling restart's step): SIGTERM,
 * start again on its store, until it answers /healthz (every stream and consumer it holds
 * current), sees the meta leader among all the cluster's peers and holds as many streams as
 * before.
 */
async function restartOne(d: Deployment, i: number, deadlineMs: number): Promise<RestartOneResult> {
  const node = d.nodes[i]!;
  const before = await sampleOne(d, i);
  const t0 = performance.now();
  await node.stop();
  const stopS = (performance.now() - t0) / 1000;
  const t1 = performance.now();
  await node.restart();
  monitorPort(node);
  const listeningS = (performance.now() - t1) / 1000;
  const [currentS, ok] = await until(
    async () => {
      if ((await monitor(node, "/healthz", 30_000)).status !== 200) return false;
      const jsz = (await monitor(node, "/jsz", 60_000)).body;
      return (
        !!jsz?.meta_cluster?.leader && jsz.meta_cluster.cluster_size === d.nodes.length && jsz.streams >= before.streams
      );
    },
    t1,
    t1 + deadlineMs,
  );
  return {
    server: d.names[i]!,
    stopS: round(stopS),
    listeningS: round(listeningS),
    currentS: round(currentS),
    timedOut: !ok,
    after: await sampleOne(d, i),
  };
}

// ---- Publish + PubAck to one agent's inbox ----

function percentile(sorted: number[], p: number): number {
  if (!sorted.length) return 0;
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
}

/** The publishes made before those timed, at each size: a tenth as many (stored as the others). */
export const warmUps = (n: number) => Math.ceil(n / 10);

/** The timed publishes start one every this many milliseconds (or as soon as the one before answered, when later). */
const PUBLISH_PACE_MS = 5;

/**
 * `n` calls of `publish` (each with a new message_id and its IFP message), one at a time, timed,
 * after warmUps(n) untimed: the server's work left from making the agents, and the first
 * requests of a connection, are not what a publish costs at that size. The timed ones are paced
 * (PUBLISH_PACE_MS), so that 1,000 of them sample five seconds of the machine rather than the
 * moment after the agents were made: on a machine shared with other work the p50 of one size
 * and of the next are then taken over the same kind of stretch.
 */
async function timeEach(
  n: number,
  publish: (messageId: string, raw: Record<string, unknown>) => Promise<unknown>,
): Promise<SizeResult["publish"]> {
  const body = "x".repeat(2048);
  const times: number[] = [];
  let errors = 0;
  let start = 0;
  for (let i = -warmUps(n); i < n; i++) {
    if (i === 0) start = performance.now();
    const due = start + i * PUBLISH_PACE_MS - performance.now();
    if (i > 0 && due > 0) await new Promise((r) => setTimeout(r, due));
    const messageId = `msg:bench-${Date.now()}-${i}`;
    const raw = {
      ifp: 4,
      headers: { message_id: messageId, date: new Date().toISOString(), from: { agent: "bench-sender" } },
      body: { text: body },
    };
    const t = performance.now();
    try {
      await publish(messageId, raw);
      if (i >= 0) times.push(performance.now() - t);
    } catch {
      if (i >= 0) errors++;
    }
  }
  times.sort((a, b) => a - b);
  return {
    n: times.length,
    p50Ms: round(percentile(times, 50), 2),
    p99Ms: round(percentile(times, 99), 2),
    maxMs: round(times.at(-1) ?? 0, 2),
    errors,
  };
}

async function timePublishes(m: Maker, layout: Layout, n: number, tenants: number): Promise<SizeResult["publish"]> {
  const names = namesFor(layout, agentKey(0, tenants));
  const inbox = new InboxStore(m.nats, names, parseDuration(AGENT_SPEC.inbox.replayWindow), -1, "auto");
  return timeEach(n, (messageId, raw) =>
    inbox.accept(raw, messageId, { signer: "bench-sender", authLevel: 2, handoff: true }, "bench-sender"),
  );
}

/** The same, through agent 0's own runtime credential and imports: a JetStream publish of the message on its inbox subject. */
async function timeIsolatedPublishes(
  client: ReturnType<IsolatedInstall["runtimeClient"]>,
  n: number,
): Promise<SizeResult["publish"]> {
  const { js, inbox } = await client;
  return timeEach(n, (messageId, raw) => js.publish(inbox(messageId), JSON.stringify(raw)));
}

// ---- One run: a layout on a topology, sizes ascending ----

async function run(
  layout: Layout,
  topology: Topology,
  opts: ScaleOptions,
  emit: (r: SizeResult) => void,
  log: (line: string) => void,
  onVersion: (v: string) => void,
  endAt: number,
): Promise<void> {
  const install =
    layout === "isolated"
      ? await IsolatedInstall.start({
          http: `http: "127.0.0.1:-1"\n`,
          jetstream: jetstreamConfig(opts.maxFileStore),
          graceMs: GRACE_MS,
          startTimeoutMs: START_TIMEOUT_MS,
          ...(topology === "three" ? { clusterSize: 3 } : {}),
        })
      : undefined;
  const d: Deployment = install
    ? {
        topology,
        nodes: install.nodes,
        names: install.nodes.map((_, i) => `n${i}`),
        url: install.url,
        close: () => install.close(),
      }
    : await deploy(topology, opts.maxFileStore);
  onVersion((await monitor(d.nodes[0]!, "/varz")).body?.version ?? "");
  const silent: Logger = pino({ level: "silent" });
  const nats = new Nats({ url: d.url, name: "ifp-bench-scale", replicas: "auto" }, silent);
  const http = new HttpClient({ targets: new TargetPolicy([]) });
  const m: Maker = {
    nats,
    http,
    discovery: new DiscoveryClient(http),
    metrics: createRuntimeMetrics("agent"),
    log: silent,
  };
  const runStart = performance.now();
  const runBoundMs = layout === PRODUCT_LAYOUT ? opts.createDeadlineMs : opts.compareDeadlineMs;
  const deadline = Math.min(runStart + runBoundMs, endAt);
  const progress: SizeResult["progress"] = [];
  let made = 0;
  let failed = 0;
  const relaySubs: Subscriptions[] = [];
  // Agent 0's runtime client on the isolated layout: one connection for every size, as a runtime keeps its own.
  let publisher: ReturnType<IsolatedInstall["runtimeClient"]> | undefined;
  try {
    // The isolated layout's agents are made by the operator's users (IsolatedInstall); its relays are not measured.
    if (!install) await nats.start();
    const relayErrors: Record<string, number> = {};
    for (let i = 0; i < (install ? 0 : opts.relays); i++) {
      await makeRelay(m, i)
        .then((subs) => relaySubs.push(subs))
        .catch((err) => {
          const k = errorKind("relay", err);
          relayErrors[k] = (relayErrors[k] ?? 0) + 1;
        });
    }
    let next = 0;
    for (const size of opts.agents) {
      const errors: Record<string, number> = { ...relayErrors };
      for (const k of Object.keys(relayErrors)) delete relayErrors[k];
      const t0 = performance.now();
      const madeBefore = made;
      let boundedBy: string | undefined;
      const worker = async () => {
        for (;;) {
          if (performance.now() > deadline) {
            boundedBy ??=
              deadline === endAt
                ? `the creation deadline of the whole bench (${opts.totalDeadlineMs / 60_000} min) passed`
                : `the creation deadline (${runBoundMs / 60_000} min for the run) passed`;
            return;
          }
          if (boundedBy || next >= size) return;
          const i = next++;
          // A runtime retries its start-up until it works; here three tries, each error counted.
          let ok = false;
          for (let attempt = 1; attempt <= 3 && !ok; attempt++) {
            const step = { name: "start" };
            try {
              const key = agentKey(i, opts.tenants);
              if (install) await install.makeAgent(key, step);
              else await makeAgent(m, layout, key, step);
              ok = true;
            } catch (err) {
              const k = errorKind(step.name, err);
              errors[k] = (errors[k] ?? 0) + 1;
              await new Promise((r) => setTimeout(r, 1000 * attempt));
            }
          }
          if (ok) made++;
          else failed++;
          if ((made + failed) % 250 === 0) {
            const rss = d.nodes.map((n) => round(procStatus(n.pid, "VmRSS") / MIB));
            const at = { made, s: round((performance.now() - runStart) / 1000), rssMiB: rss };
            progress.push(at);
            log(
              `  ${layout} ${topology}: ${made} agents made, ${failed} failed, ${at.s} s into the run, RSS ${rss.join("/")} MiB`,
            );
            const budget = opts.rssBudgetMiB[topology];
            if (budget && rss.some((x) => x > budget))
              boundedBy ??= `a server's RSS passed the budget of ${budget} MiB per server on ${topology === "single" ? "one server" : "three"}`;
          }
        }
      };
      await Promise.all(Array.from({ length: opts.concurrency }, worker));
      const createS = (performance.now() - t0) / 1000;
      const servers = await sample(d);
      // Timed on agent 0, the first made: none when no agent was (each publish an error).
      const publish = await (made === 0
        ? Promise.reject(new Error("no agent was made"))
        : install
          ? timeIsolatedPublishes((publisher ??= install.runtimeClient(agentKey(0, opts.tenants))), opts.publishes)
          : timePublishes(m, layout, opts.publishes, opts.tenants)
      ).catch((err: unknown) => {
        const k = errorKind("publish", err);
        errors[k] = (errors[k] ?? 0) + 1;
        return { n: 0, p50Ms: 0, p99Ms: 0, maxMs: 0, errors: opts.publishes };
      });
      const counts = await installCounts(d);
      const r: SizeResult = {
        layout,
        product: layout === PRODUCT_LAYOUT,
        cluster: topology,
        agents: size,
        made,
        failed,
        relays: install ? 0 : opts.relays,
        createS: round(createS),
        createMsPerAgent: made > madeBefore ? round((createS * 1000) / (made - madeBefore), 2) : 0,
        ...counts,
        servers,
        publish,
        errors,
        tenants: Math.min(opts.tenants, made),
        progress: progress.splice(0),
        ...(boundedBy ? { boundedBy } : {}),
      };
      log(
        `  ${layout} ${topology} ${size}: made ${made} in ${r.createS} s; RSS ${servers.map((s) => s.rssMiB).join("/")} MiB; restarting`,
      );
      // A restart waits at most its own bound, and never past the whole bench's.
      const restartBound = () => {
        const left = endAt - performance.now();
        return left > 0 ? Math.min(opts.restartDeadlineMs, left) : 0;
      };
      const bound = (ms: number) =>
        ms < opts.restartDeadlineMs
          ? `the deadline of the whole bench (${opts.totalDeadlineMs / 60_000} min)`
          : `${ms / 60_000} min`;
      if (opts.restart && !restartBound())
        r.boundedBy ??= `no restart: the deadline of the whole bench (${opts.totalDeadlineMs / 60_000} min) passed`;
      if (opts.restart && d.nodes.length > 1 && restartBound()) {
        const ms = restartBound();
        r.restartOne = await restartOne(d, d.nodes.length - 1, ms);
        if (r.restartOne.timedOut) r.boundedBy ??= `a restarted server was not current again within ${bound(ms)}`;
      }
      if (opts.restart && restartBound()) {
        const ms = restartBound();
        r.restart = await restartAll(d, () => (install ? install.connected() : nats.isConnected), ms);
        if (r.restart.timedOut) r.boundedBy ??= `the restart did not have every stream loaded within ${bound(ms)}`;
      }
      emit(r);
      log(table([r]));
      if (r.boundedBy || failed > size / 10) {
        if (!r.boundedBy) r.boundedBy = `${failed} agents could not be made`;
        break;
      }
    }
  } finally {
    for (const subs of relaySubs) subs.close();
    await nats.close().catch(() => {});
    await http.close();
    await d.close();
  }
}

export async function runScale(opts: ScaleOptions): Promise<ScaleResult> {
  const log = opts.log ?? ((line: string) => console.log(line));
  const { onProgress: _p, log: _l, ...recorded } = opts;
  const result: ScaleResult = {
    date: new Date().toISOString(),
    machine: {
      cpus: (await import("node:os")).cpus().length,
      memGiB: round((await import("node:os")).totalmem() / 1024 ** 3),
      loadAvg1: round((await import("node:os")).loadavg()[0]!, 2),
    },
    natsServer: "",
    options: recorded,
    perAgent: {
      "per-agent": { streams: 2, buckets: 4, consumers: 2, sharedKeys: 0 },
      shared: { streams: 0, buckets: 0, consumers: 2, sharedKeys: 1 },
      isolated: { streams: 0, buckets: 0, consumers: 2, sharedKeys: 1 },
    },
    runs: [],
    goals: [],
  };
  const endAt = performance.now() + opts.totalDeadlineMs;
  // The product's layout first, so that a comparison's bounds cannot take its share of the whole bench's.
  const layouts = [...opts.layouts].sort((a, b) => Number(b === PRODUCT_LAYOUT) - Number(a === PRODUCT_LAYOUT));
  for (const layout of layouts) {
    for (const topology of opts.clusters) {
      log(`${layout} on ${topology === "single" ? "one nats-server" : "a three-node cluster"}`);
      await run(
        layout,
        topology,
        opts,
        (r) => {
          result.runs.push(r);
          result.goals = goalsOf(result.runs, opts.agents);
          opts.onProgress?.(result);
        },
        log,
        (v) => (result.natsServer ||= v),
        endAt,
      );
    }
  }
  return result;
}

const fmt = (n: number) => n.toLocaleString("en-US");

/**
 * The goals, from the runs of the product's layout: on one server and on three, at the largest
 * size asked for (10,000 by default), every Agent made, peak RSS, restart, creation rate, Raft
 * groups; and one agent's PubAck latency (p50) at the smallest and the largest size.
 */
export function goalsOf(runs: SizeResult[], sizes: number[]): Goal[] {
  const largest = Math.max(...sizes);
  const smallest = Math.min(...sizes);
  const goals: Goal[] = [];
  const ofRun = (cluster: Topology) => runs.filter((r) => r.product && r.cluster === cluster);
  const peak = (rs: SizeResult[]) =>
    Math.max(
      0,
      ...rs
        .flatMap((r) => [
          ...r.servers,
          ...(r.restart?.afterRestart ?? []),
          ...(r.restartOne ? [r.restartOne.after] : []),
        ])
        .map((s) => s.peakRssMiB),
    );
  const latency = (cluster: Topology, where: string) => {
    const small = ofRun(cluster).find((r) => r.agents === smallest);
    const large = ofRun(cluster).find((r) => r.agents === largest);
    const goal = `${where}: one agent's PubAck p50 at ${fmt(smallest)} and ${fmt(largest)} Agents within ${Math.round((GOALS.latencyRatio - 1) * 100)} % of each other`;
    if (!small?.publish.n || !large?.publish.n || smallest === largest)
      return goals.push({ goal, met: false, figure: "not measured at both sizes" });
    const ratio = large.publish.p50Ms / small.publish.p50Ms;
    const met = Math.max(ratio, 1 / ratio) <= GOALS.latencyRatio;
    goals.push({
      goal,
      met,
      figure: `${small.publish.p50Ms} ms and ${large.publish.p50Ms} ms, ratio ${round(ratio, 2)}`,
    });
  };
  for (const cluster of ["single", "three"] as const) {
    const rs = ofRun(cluster);
    if (!rs.length) continue;
    const where = cluster === "single" ? "one server" : "three servers";
    const top = rs.find((r) => r.agents === largest);
    const last = rs.at(-1)!;
    goals.push({
      goal: `${where}: ${fmt(largest)} Agents made, none failed`,
      met: !!top && top.made >= largest && top.failed === 0,
      figure: `${fmt(last.made)} made, ${last.failed} failed${last.boundedBy ? ` (${last.boundedBy})` : ""}`,
    });
    const rssBound = cluster === "single" ? GOALS.singleRssMiB : GOALS.threeRssMiB;
    goals.push({
      goal: `${where}: peak RSS ≤ ${fmt(rssBound)} MiB${cluster === "three" ? " per server" : ""}`,
      met: !!top && peak(rs) <= rssBound,
      figure: `${fmt(peak(rs))} MiB`,
    });
    if (cluster === "single") {
      const loaded = top?.restart;
      goals.push({
        goal: `${where}: after a restart, loaded in ≤ ${GOALS.singleLoadedS} s`,
        met: !!loaded && !loaded.timedOut && loaded.loadedS <= GOALS.singleLoadedS,
        figure: loaded ? `${loaded.loadedS} s${loaded.timedOut ? " (timed out)" : ""}` : "not measured",
      });
      const createS = rs.reduce((n, r) => n + r.createS, 0);
      const rate = createS > 0 ? last.made / createS : 0;
      goals.push({
        goal: `${where}: creation ≥ ${GOALS.singleAgentsPerS} Agents/s`,
        met: !!top && rate >= GOALS.singleAgentsPerS,
        figure: `${round(rate)} Agents/s (${fmt(last.made)} in ${round(createS)} s; the last size's ${last.createMsPerAgent > 0 ? round(1000 / last.createMsPerAgent) : 0}/s)`,
      });
    } else {
      const one = top?.restartOne;
      goals.push({
        goal: `${where}: a restarted server current again in ≤ ${GOALS.threeCurrentS} s`,
        met: !!one && !one.timedOut && one.currentS <= GOALS.threeCurrentS,
        figure: one ? `${one.currentS} s${one.timedOut ? " (timed out)" : ""}` : "not measured",
      });
      const groups = (r: SizeResult | undefined) => r?.servers.map((s) => s.raftGroups ?? -1) ?? [];
      const first = groups(rs[0]);
      const end = groups(top);
      goals.push({
        goal: `${where}: Raft groups reported, not growing with the Agents`,
        met: !!top && first.every((g) => g >= 0) && Math.max(...end) <= Math.max(...first),
        figure: rs.map((r) => `${groups(r).join("/")} at ${fmt(r.agents)}`).join(", "),
      });
    }
    latency(cluster, where);
  }
  return goals;
}

/** The goals, a line each. */
export function goalLines(goals: Goal[]): string {
  return goals.map((g) => `${g.met ? "met    " : "NOT MET"}  ${g.goal}: ${g.figure}`).join("\n");
}

export function table(runs: SizeResult[]): string {
  const head =
    "layout    | servers | agents | made   | create s | ms/agent | streams | consumers | RSS MiB per server | fds per server | Raft groups per server | restart: js s · loaded s | one of three: current s | PubAck p50 · p99 ms | errors";
  const rows = runs.map((r) =>
    [
      r.layout.padEnd(9),
      r.cluster.padEnd(7),
      String(r.agents).padStart(6),
      String(r.made).padStart(6),
      String(r.createS).padStart(8),
      String(r.createMsPerAgent).padStart(8),
      String(r.streams).padStart(7),
      String(r.consumers).padStart(9),
      r.servers
        .map((s) => s.rssMiB)
        .join(" / ")
        .padEnd(18),
      r.servers
        .map((s) => s.fds)
        .join(" / ")
        .padEnd(14),
      (r.servers.some((s) => s.raftGroups !== undefined)
        ? r.servers.map((s) => s.raftGroups ?? "-").join(" / ")
        : "-"
      ).padEnd(22),
      (r.restart
        ? `${r.restart.jsEnabledS} · ${r.restart.loadedS}${r.restart.timedOut ? " (timed out)" : ""}`
        : "-"
      ).padEnd(24),
      (r.restartOne ? `${r.restartOne.currentS}${r.restartOne.timedOut ? " (timed out)" : ""}` : "-").padEnd(23),
      `${r.publish.p50Ms} · ${r.publish.p99Ms}`.padEnd(19),
      String(Object.values(r.errors).reduce((a, b) => a + b, 0)),
    ].join(" | "),
  );
  return [head, ...rows].join("\n");
}

function parseArgs(argv: string[]): ScaleOptions {
  const flag = (name: string, dflt: string) => {
    const i = argv.indexOf(`--${name}`);
    return i >= 0 && argv[i + 1] ? argv[i + 1]! : dflt;
  };
  const list = (s: string) =>
    s
      .split(",")
      .map((x) => x.trim())
      .filter(Boolean);
  const agents = list(flag("agents", "1000,5000,10000")).map(Number);
  if (agents.some((n) => !Number.isInteger(n) || n < 1)) throw new Error("--agents takes positive integers");
  agents.sort((a, b) => a - b);
  const clusters = list(flag("cluster", "single,three")) as Topology[];
  if (clusters.some((c) => c !== "single" && c !== "three")) throw new Error("--cluster takes single and/or three");
  const layouts = list(flag("layout", "isolated,per-agent")) as Layout[];
  if (layouts.some((l) => !LAYOUTS.includes(l))) throw new Error(`--layout takes ${LAYOUTS.join(", ")}`);
  const tenants = Number(flag("tenants", "20"));
  if (!Number.isInteger(tenants) || tenants < 1) throw new Error("--tenants takes a positive integer");
  return {
    agents,
    relays: Number(flag("relays", "10")),
    clusters,
    layouts,
    tenants,
    concurrency: Number(flag("concurrency", "16")),
    publishes: Number(flag("publishes", "1000")),
    createDeadlineMs: Number(flag("deadline-min", "12")) * 60_000,
    compareDeadlineMs: Number(flag("compare-deadline-min", "4")) * 60_000,
    totalDeadlineMs: Number(flag("total-deadline-min", "40")) * 60_000,
    rssBudgetMiB: (() => {
      const [single, three] = list(flag("rss-budget-mib", "1536,4096")).map(Number);
      if (![single, three].every((n) => Number.isInteger(n) && n! >= 0))
        throw new Error("--rss-budget-mib takes two whole numbers: one server's, each of three's (0: none)");
      return { single: single!, three: three! };
    })(),
    restartDeadlineMs: Number(flag("restart-deadline-min", "2")) * 60_000,
    restart: !argv.includes("--no-restart"),
    maxFileStore: flag("max-file-store", "1P"),
  };
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const argv = process.argv.slice(2);
  const i = argv.indexOf("--out");
  const out = i >= 0 ? argv[i + 1]! : ".bench/scale.json";
  const opts = parseArgs(argv);
  mkdirSync(dirname(out), { recursive: true });
  // The results of an earlier run of other layouts or topologies are kept beside this one's.
  let earlier: SizeResult[] = [];
  try {
    earlier = (JSON.parse(readFileSync(out, "utf8")) as ScaleResult).runs.filter(
      (r) => !(opts.layouts.includes(r.layout) && opts.clusters.includes(r.cluster)),
    );
  } catch {
    // none yet
  }
  const write = (r: ScaleResult) =>
    writeFileSync(out, `${JSON.stringify({ ...r, runs: [...earlier, ...r.runs] }, null, 2)}\n`);
  const stop = async () => {
    await stopAllProcesses(10_000);
    process.exit(130);
  };
  process.once("SIGINT", stop);
  process.once("SIGTERM", stop);
  try {
    const r = await runScale({ ...opts, onProgress: write });
    write(r);
    const bounded = r.runs
      .filter((x) => x.boundedBy)
      .map(
        (x) =>
          `${x.layout} on ${x.cluster === "single" ? "one server" : "three"} stopped at ${fmt(x.made)} of ${fmt(x.agents)}: ${x.boundedBy}\n`,
      );
    console.log(
      `\n${table(r.runs)}\n${bounded.join("")}\nGoals (the product's ${PRODUCT_LAYOUT} layout):\n${goalLines(r.goals)}\nwritten ${out}`,
    );
  } finally {
    await stopAllProcesses(10_000);
  }
}
