// Scale-out: a three-node JetStream cluster on loopback, on the product's NATS layout (`isolated`:
// operator mode, the Agent on its tenant's shared streams, made with three replicas as the
// operator makes them on a cluster, its consumers one; the Relay on an account of its own;
// runtime-layouts.ts) or `--layout per-agent`, the agent's and the relay's streams
// with three replicas, and two replicas of each runtime (the `ifp-runtime` command, as users run
// them, each given every node's URL). Under sustained signed traffic — to the inbox through both
// agent replicas, and published, pulled and acknowledged through both relay replicas — the node
// that leads the relay's stream (and, moved there beforehand, the agent's inbox stream) is killed
// with SIGKILL a third of the way in, and started again once every runtime replica has answered
// 202 without it (a third of the run at the least). Every message answered 202 is counted by
// message_id until the handler got it or it was pulled from the mailbox (lost = 0), and a 202
// answered while the stream had no quorum of current replicas for the whole time the request was
// handled (a stream info every 250 ms) is counted apart: it must be 0.
// `npm run test:cluster [-- --layout per-agent]` prints a table and writes cluster-results.json; IFP_CLUSTER_LOAD_SECONDS
// (default 30), IFP_CLUSTER_CONCURRENCY (workers per flow, default 4), IFP_CLUSTER_MAX_DOWN_SECONDS
// (default 45) and IFP_CLUSTER_REPLICAS (3, or 1 to see what one replica does: per-agent only, the
// isolated layout's replicas are the operator's) size it.
// Loopback only; every loop ends by itself.
import { mkdirSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { join } from "node:path";
import { Agent as HttpsAgent } from "node:https";
import { fileURLToPath } from "node:url";
import { jetstreamManager, type JetStreamManager, type StreamInfo } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import type { NatsCluster } from "../../e2e/support/nats.ts";
import { releaseDir, spawnProcess, tempDir, type ManagedProcess } from "../../e2e/support/process.ts";
import { localhostTls } from "../../e2e/support/tls.ts";
import { freePort, waitFor } from "../../e2e/support/ports.ts";
import {
  identity,
  message,
  peerOf,
  signed,
  writeAgentManifest,
  writeKey,
  writeRelayManifest,
  type TestIdentity,
} from "../test/support/fixtures.ts";
import { HttpClient } from "../src/net/http-client.ts";
import { RelayClient } from "../src/net/relay-client.ts";
import { signMessage } from "../src/protocol/signing.ts";
import { send } from "./hardening.ts";
import { layoutOf, startRuntimeNats, type RuntimeLayout, type RuntimeNats } from "./runtime-layouts.ts";

const RUNTIME_BIN = fileURLToPath(new URL("../bin/ifp-runtime.ts", import.meta.url));
/** The agent's hand-off timeout (spec.handler.timeout, the CRD's default): its consumer's ack wait is 30 s more. */
const HANDLER_TIMEOUT_MS = 10_000;
/** How often the streams' replicas are looked at, and how long one look may take. */
const SAMPLE_MS = 250;
const SAMPLE_TIMEOUT_MS = 2_000;

export interface ReplicaResult {
  replica: string;
  sent: number;
  accepted: number;
  /** Agent: messages this replica handed to the handler; relay: messages pulled through it. */
  delivered: number;
  /** From the kill until this replica's first 202 to a request sent after it (-1: none). */
  recoveryS: number;
  /** 202 answers to requests sent while the node was down. */
  acceptedWhileDown: number;
  /** 202 answers to requests sent after the node was started again. */
  acceptedAfterRestart: number;
}

export interface FlowResult {
  flow: string;
  sent: number;
  accepted: number;
  /** Answered 202 and never handed to the handler (agent) or never pulled (relay). */
  lost: number;
  /** Answers to requests sent while the node was down, by status (0: no answer). */
  whileDown: Record<string, number>;
  /** 202 answers to requests sent while the node was down: the runtime went on without it. */
  acceptedWhileDown: number;
  /**
   * 202 answers to requests handled entirely while the stream had no quorum of current
   * replicas (or no leader): must be 0, a 202 means the message is stored durably.
   */
  acceptedNotDurable: number;
  /** Time within the run the stream had no quorum, as sampled. */
  notDurableS: number;
  /** From the kill until the first 202 to a request sent after it, over both replicas (-1: none). */
  recoveryS: number;
  /** Statuses of every answer. */
  statuses: Record<string, number>;
  /** A few distinct refusals (phase, status, the start of the body). */
  refusals: string[];
  replicas: ReplicaResult[];
}

export interface ClusterResult {
  /** The NATS layout the runtimes ran on. */
  layout: RuntimeLayout;
  nodes: number;
  /** Stream replicas asked of the runtimes (spec.durability.replicas, spec.retention.replicas). */
  streamReplicas: number;
  runtimeReplicas: number;
  seconds: number;
  concurrency: number;
  killed: {
    node: string;
    /** What the killed node led or held when it was killed. */
    led: string[];
    held: string[];
    /** How long it was down, and from its start until it was healthy again (JetStream caught up). */
    downS: number;
    rejoinS: number;
  };
  flows: FlowResult[];
  /** Every node healthy (its streams current) at the end. */
  clusterHealthyAtEnd: boolean;
  durationS: number;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const secs = (ms: number) => Math.round(ms / 100) / 10;
const bump = (m: Record<string, number>, k: string | number) => (m[k] = (m[k] ?? 0) + 1);

/** A runtime process (the `ifp-runtime` command), its output kept and printed when a test fails. */
async function startRuntime(name: string, args: string[], readyUrl: string, ca: string): Promise<ManagedProcess> {
  const p = spawnProcess(name, process.execPath, [RUNTIME_BIN, ...args], {
    env: { ...process.env, IFP_LOG_LEVEL: "warn" },
  });
  const agent = new HttpsAgent();
  try {
    await waitFor(
      `${name} ready`,
      async () => {
        if (p.exit) throw new Error(`${name} exited:\n${p.log().slice(-2000)}`);
        return (await send(agent, ca, readyUrl, "GET", {})) === 200;
      },
      120_000,
      250,
    );
  } catch (err) {
    await p.stop({ graceMs: 2_000 });
    throw err;
  } finally {
    agent.destroy();
  }
  return p;
}

/** One handler application for both agent replicas; each replica is told its own path so the run can see which one handed a message on. */
async function sharedHandler() {
  const got: { path: string; id: string }[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      try {
        got.push({ path: req.url ?? "", id: JSON.parse(Buffer.concat(chunks).toString()).headers.message_id });
        res.writeHead(200).end();
      } catch {
        res.writeHead(400).end();
      }
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const addr = server.address();
  const base = `http://127.0.0.1:${typeof addr === "object" && addr ? addr.port : 0}`;
  return {
    base,
    got,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

interface Observer {
  nc: NatsConnection;
  jsm: JetStreamManager;
}

/**
 * Stream info through connections pinned to one node, with a short timeout: of the inbox's
 * stream and of the relay's (one connection on per-agent, one per account on isolated).
 */
async function pinnedObserver(nats: RuntimeNats, url: string): Promise<{ inbox: Observer; relay: Observer }> {
  const observer = async (what: "inbox" | "relay") => {
    const nc = await nats.observe(what, url);
    return { nc, jsm: await jetstreamManager(nc, { timeout: SAMPLE_TIMEOUT_MS }) };
  };
  const inbox = await observer("inbox");
  return { inbox, relay: nats.layout === "per-agent" ? inbox : await observer("relay") };
}

/** Whether a stream has a leader and a quorum of current replicas. */
export function hasQuorum(info: Pick<StreamInfo, "config" | "cluster">): boolean {
  const r = Math.max(1, info.config.num_replicas ?? 1);
  const c = info.cluster;
  if (!c?.leader) return false;
  const current = 1 + (c.replicas ?? []).filter((p) => p.current && !p.offline).length;
  return current >= Math.floor(r / 2) + 1;
}

interface Sample {
  start: number;
  end: number;
  durable: boolean;
}

/**
 * Whether [from, to] lies within a run of samples that all found the stream without a quorum:
 * one such sample ended at or before `from`, another started at or after `to`, and no sample
 * in between found a quorum.
 */
export function withinNotDurable(samples: Sample[], from: number, to: number): boolean {
  const before = samples.filter((s) => s.end <= from).at(-1);
  const after = samples.find((s) => s.start >= to);
  if (!before || !after || before.durable || after.durable) return false;
  return !samples.some((s) => s.durable && s.end > before.end && s.start < after.start);
}

function notDurableMs(samples: Sample[]): number {
  let total = 0;
  for (let i = 1; i < samples.length; i++)
    if (!samples[i - 1]!.durable && !samples[i]!.durable) total += samples[i]!.start - samples[i - 1]!.start;
  return total;
}

interface Answer {
  replica: number;
  id: string;
  status: number;
  sentAt: number;
  answeredAt: number;
}

interface Stack {
  nats: RuntimeNats;
  cluster: NatsCluster;
  ca: string;
  sender: TestIdentity;
  self: TestIdentity;
  inboxes: string[];
  relayUrls: string[];
  handler: Awaited<ReturnType<typeof sharedHandler>>;
  runtimes: ManagedProcess[];
  stop(): Promise<void>;
}

async function startStack(replicas: number, layout: RuntimeLayout): Promise<Stack> {
  const dir = tempDir("ifp-cluster-");
  const nats = await startRuntimeNats({ layout, dir, clusterSize: 3 });
  const cluster = nats.cluster!;
  const stopped: (() => Promise<void>)[] = [() => nats.close(), async () => releaseDir(dir)];
  const runtimes: ManagedProcess[] = [];
  try {
    const tls = await localhostTls();
    const sender = identity("cluster-sender");
    const self = identity("cluster-agent");
    const handler = await sharedHandler();
    stopped.unshift(handler.close);
    const agentPorts = await Promise.all([freePort(), freePort()]);
    const relayPorts = await Promise.all([freePort(), freePort()]);
    const limits = { perSenderPerMinute: 10_000_000, perAddressPerMinute: 10_000_000, perSenderBytesPerHour: 1 << 30 };
    const common = [
      "--host",
      "127.0.0.1",
      "--metrics-port",
      "0",
      "--tls-cert",
      tls.files.cert,
      "--tls-key",
      tls.files.key,
    ];
    // The same Agent (same name, same streams, same credential) twice; only the handler's path differs.
    const agentNats = await nats.agentArgs(self.agentId, HANDLER_TIMEOUT_MS);
    const agentArgs = agentPorts.map((port, i) => {
      const sub = join(dir, `r${i + 1}`);
      mkdirSync(sub);
      const manifest = writeAgentManifest(
        sub,
        {
          agentId: self.agentId,
          peers: [peerOf(sender)],
          handler: { url: `${handler.base}/r${i + 1}`, timeout: `${HANDLER_TIMEOUT_MS / 1000}s` },
          inbox: { rateLimit: limits },
          durability: { replicas: replicas as 1 | 3 },
        },
        "agent",
      );
      return [
        "agent",
        "--manifest",
        manifest,
        "--port",
        String(port),
        "--signing-key",
        writeKey(sub, self),
        "--local-api-port",
        "0",
        ...common,
        ...agentNats,
      ];
    });
    const relayUrls = relayPorts.map((p) => `https://localhost:${p}`);
    const relaySpec = {
      url: relayUrls[0]!,
      agents: [peerOf(sender), peerOf(self)],
      limits: { perAgentPerMinute: 10_000_000, perAddressPerMinute: 10_000_000, perAgentBytesPerHour: 1 << 30 },
      retention: { replicas: replicas as 1 | 3 },
    };
    const relayManifest = writeRelayManifest(dir, relaySpec, "relay");
    const relayNats = await nats.relayArgs("relay", relaySpec);
    const relayArgs = (port: number) => [
      "relay",
      "--manifest",
      relayManifest,
      "--port",
      String(port),
      ...common,
      ...relayNats,
    ];
    const agentBase = agentPorts.map((p) => `https://localhost:${p}`);
    // The first of each creates the streams; the second joins them.
    runtimes.push(await startRuntime("agent r1", agentArgs[0]!, `${agentBase[0]}/readyz`, tls.ca));
    runtimes.push(await startRuntime("relay r1", relayArgs(relayPorts[0]!), `${relayUrls[0]}/readyz`, tls.ca));
    runtimes.push(
      ...(await Promise.all([
        startRuntime("agent r2", agentArgs[1]!, `${agentBase[1]}/readyz`, tls.ca),
        startRuntime("relay r2", relayArgs(relayPorts[1]!), `${relayUrls[1]}/readyz`, tls.ca),
      ])),
    );
    return {
      nats,
      cluster,
      ca: tls.ca,
      sender,
      self,
      inboxes: agentBase.map((b) => `${b}/.well-known/agent/inbox`),
      relayUrls,
      handler,
      runtimes,
      async stop() {
        await Promise.all(runtimes.map((p) => p.stop({ graceMs: 5_000 })));
        for (const s of stopped) await s();
      },
    };
  } catch (err) {
    await Promise.all(runtimes.map((p) => p.stop({ graceMs: 2_000 })));
    for (const s of stopped) await s();
    throw err;
  }
}

/** The streams of this run, found by prefix (the cluster is the run's own). */
async function streamNamed(jsm: JetStreamManager, prefix: string): Promise<StreamInfo> {
  for await (const s of jsm.streams.list()) if (s.config.name.startsWith(prefix)) return s;
  throw new Error(`no stream ${prefix}*`);
}

/** Move a stream's leadership to `node` (a few stepdowns at most); whether it got there. */
async function leadOn(nc: NatsConnection, jsm: JetStreamManager, stream: string, node: string): Promise<boolean> {
  for (let i = 0; i < 5; i++) {
    if ((await jsm.streams.info(stream)).cluster?.leader === node) return true;
    await nc
      .request(`$JS.API.STREAM.LEADER.STEPDOWN.${stream}`, JSON.stringify({ placement: { preferred: node } }), {
        timeout: 5_000,
      })
      .catch(() => undefined);
    await waitFor(
      `a leader of ${stream}`,
      async () => (await jsm.streams.info(stream)).cluster?.leader,
      20_000,
      200,
    ).catch(() => undefined);
  }
  return (await jsm.streams.info(stream)).cluster?.leader === node;
}

/**
 * `maxDownS`: the longest the killed node stays down waiting for every runtime replica to answer
 * 202 without it (default 45 s).
 */
export async function runCluster(
  opts: { seconds?: number; concurrency?: number; replicas?: number; maxDownS?: number; layout?: RuntimeLayout } = {},
): Promise<ClusterResult> {
  const seconds = opts.seconds ?? 30;
  const maxDownMs = (opts.maxDownS ?? 45) * 1000;
  const concurrency = opts.concurrency ?? 4;
  const replicas = opts.replicas ?? 3;
  const layout = opts.layout ?? "isolated";
  if (layout === "isolated" && replicas !== 3)
    throw new Error("on the isolated layout the streams' replicas are the operator's (three on a cluster)");
  const started = Date.now();
  const stack = await startStack(replicas, layout);
  const observers: { inbox: Observer; relay: Observer }[] = [];
  const http = new HttpClient({ extraCa: stack.ca, timeoutMs: 30_000 });
  try {
    const { cluster } = stack;
    observers.push(...(await Promise.all(cluster.nodes.map((n) => pinnedObserver(stack.nats, n.url)))));
    const o0 = observers[0]!;
    const inboxStream = (await streamNamed(o0.inbox.jsm, stack.nats.inboxStream)).config.name;
    const relayStream = (await streamNamed(o0.relay.jsm, "IFP_RELAY_")).config.name;
    // The node to kill: the leader of the relay's stream (with one replica, the node holding
    // it); the agent's inbox stream is led from there too where it can be moved (more than one
    // replica), so that both flows lose their stream leader at the kill.
    const target = cluster.indexOf((await o0.relay.jsm.streams.info(relayStream)).cluster?.leader);
    if (target < 0) throw new Error(`the relay's stream ${relayStream} has no leader`);
    if (replicas > 1) await leadOn(o0.inbox.nc, o0.inbox.jsm, inboxStream, cluster.names[target]!);
    // Stream info through a node that stays up all along.
    const observer = observers[(target + 1) % observers.length]!;
    const allStreams: StreamInfo[] = [];
    for (const o of new Set([observer.inbox, observer.relay]))
      for await (const s of o.jsm.streams.list()) allStreams.push(s);
    const led = allStreams.filter((s) => s.cluster?.leader === cluster.names[target]).map((s) => s.config.name);
    const held = allStreams
      .filter(
        (s) =>
          s.cluster?.leader === cluster.names[target] ||
          s.cluster?.replicas?.some((r) => r.name === cluster.names[target]),
      )
      .map((s) => s.config.name);

    // Durability of the two streams, sampled all along.
    const samples: Record<string, Sample[]> = { [inboxStream]: [], [relayStream]: [] };
    const sampledBy: Record<string, JetStreamManager> = {
      [inboxStream]: observer.inbox.jsm,
      [relayStream]: observer.relay.jsm,
    };
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        await Promise.all(
          Object.entries(samples).map(async ([name, list]) => {
            const start = Date.now();
            const durable = await sampledBy[name]!.streams.info(name).then(hasQuorum, () => false);
            list.push({ start, end: Date.now(), durable });
          }),
        );
        await sleep(SAMPLE_MS);
      }
    })();

    // The run's clock: kill a third of the way in; start the node again once every runtime
    // replica answered 202 to a request sent after the kill, and a third of the run passed.
    let killedAt = 0;
    let restartedAt = 0;
    let upAt = 0;
    const end = Date.now() + seconds * 1000;
    const answers: { inbox: Answer[]; publish: Answer[] } = { inbox: [], publish: [] };
    const recoveredAll = () =>
      killedAt > 0 &&
      [answers.inbox, answers.publish].every((list) =>
        [0, 1].every((r) => list.some((a) => a.replica === r && a.status === 202 && a.sentAt > killedAt)),
      );
    const servedAfterRestart = () =>
      upAt > 0 &&
      [answers.inbox, answers.publish].every((list) =>
        [0, 1].every((r) => list.some((a) => a.replica === r && a.status === 202 && a.sentAt > upAt)),
      );
    // Past the planned end, the load goes on until every replica served after the restart (at most 60 s more).
    const going = () => Date.now() < end || (!servedAfterRestart() && Date.now() < Math.max(end, upAt) + 60_000);

    const inboxAgents = stack.inboxes.map(() => new HttpsAgent({ keepAlive: true, maxSockets: concurrency }));
    const publishers = stack.relayUrls.map((u) => new RelayClient(u, stack.sender.signing, http));
    const recipients = stack.relayUrls.map((u) => new RelayClient(u, stack.self.signing, http));
    const refusals: Record<"inbox" | "publish", Map<string, string>> = { inbox: new Map(), publish: new Map() };
    const phase = () =>
      !killedAt ? "before the kill" : !restartedAt ? "while down" : !upAt ? "during the restart" : "after the restart";
    const refused = (flow: "inbox" | "publish", status: number, body: string) => {
      const key = `${phase()} ${status} ${body.replace(/msg:[\w-]+/g, "msg:…").slice(0, 120)}`;
      if (refusals[flow].size < 8 && !refusals[flow].has(key))
        refusals[flow].set(key, `${key}${body.length > 120 ? "…" : ""}`);
    };
    const pulled = new Map<string, number>();
    const pulledBy = [0, 0];
    const pullStatuses: Record<string, number> = {};

    const worker = (flow: "inbox" | "publish", w: number) => async () => {
      const r = w % 2;
      const conversation = `conv:cluster-${flow}-${w}`;
      for (let seq = 1; going(); seq++) {
        const sentAt = Date.now();
        let id: string;
        let status: number;
        if (flow === "inbox") {
          const m = signed(stack.sender, stack.self.agentId, { conversation_id: conversation, sequence: seq });
          id = m.headers.message_id;
          let body = "";
          status = await send(
            inboxAgents[r]!,
            stack.ca,
            stack.inboxes[r]!,
            "POST",
            { "content-type": "application/json" },
            JSON.stringify(m),
            (b) => (body = b),
          );
          if (status !== 202) refused(flow, status, body);
        } else {
          const m = signMessage(
            message(stack.sender.agentId, stack.self.agentId, { conversation_id: conversation, sequence: seq }),
            stack.sender.signing,
          );
          id = m.headers.message_id;
          const res = await publishers[r]!.publish(m).catch((err: Error) => ({ status: 0, text: err.message }));
          status = res.status;
          if (status !== 202) refused(flow, status, res.text);
        }
        answers[flow].push({ replica: r, id, status, sentAt, answeredAt: Date.now() });
        // Refused: do not spin.
        if (status !== 202) await sleep(100);
      }
    };
    /** Pull and acknowledge through relay replica `r` until `until()` says stop. */
    const puller = (r: number, until: () => boolean) => async () => {
      while (until()) {
        try {
          const page = await recipients[r]!.pull({ limit: 100 });
          bump(pullStatuses, 200);
          for (const m of page.messages) {
            if (!pulled.has(m.headers.message_id)) pulledBy[r]!++;
            pulled.set(m.headers.message_id, r);
          }
          if (page.messages.length)
            await recipients[r]!.ackMany(page.messages.map((m) => m.headers.message_id)).catch(() =>
              bump(pullStatuses, "ack failed"),
            );
          else await sleep(100);
        } catch (err) {
          bump(pullStatuses, (err as { status?: number }).status ?? 0);
          await sleep(200);
        }
      }
    };

    let downMs = 0;
    let rejoinMs = 0;
    let faultError: unknown;
    const fault = (async () => {
      await sleep((seconds * 1000) / 3);
      killedAt = Date.now();
      await cluster.kill(target);
      const minDown = killedAt + (seconds * 1000) / 3;
      await waitFor(
        "every runtime replica to answer 202 without the killed node",
        () => Date.now() >= minDown && recoveredAll(),
        maxDownMs,
        100,
      ).catch(() => undefined);
      restartedAt = Date.now();
      downMs = restartedAt - killedAt;
      await cluster.restart(target, 120_000);
      upAt = Date.now();
      rejoinMs = upAt - restartedAt;
    })().catch((err) => {
      // The load ends by itself (at most a minute past its end); the error is thrown after it.
      faultError = err;
    });
    const load = [
      ...Array.from({ length: concurrency }, (_, w) => worker("inbox", w)()),
      ...Array.from({ length: concurrency }, (_, w) => worker("publish", w)()),
      ...[0, 1].map((r) => puller(r, going)()),
    ];
    await Promise.all([fault, ...load]);
    for (const a of inboxAgents) a.destroy();
    if (faultError) throw faultError;

    // Every message answered 202 handed on or pulled, or a minute passed.
    const acceptedIds = (list: Answer[]) => new Set(list.filter((a) => a.status === 202).map((a) => a.id));
    const inboxAccepted = acceptedIds(answers.inbox);
    const publishAccepted = acceptedIds(answers.publish);
    const handed = () => new Set(stack.handler.got.map((g) => g.id));
    const drainUntil = Date.now() + 60_000;
    const drained = () => [...publishAccepted].every((id) => pulled.has(id));
    await Promise.all([
      waitFor(
        "every accepted message handed on",
        () => [...inboxAccepted].every((id) => handed().has(id)),
        60_000,
        250,
      ).catch(() => undefined),
      ...[0, 1].map((r) => puller(r, () => !drained() && Date.now() < drainUntil)()),
    ]);
    sampling = false;
    await sampler;
    const clusterHealthyAtEnd = await cluster.ready(30_000).then(
      () => true,
      () => false,
    );

    const got = handed();
    const deliveredBy = (r: number) =>
      new Set(stack.handler.got.filter((g) => g.path === `/r${r + 1}`).map((g) => g.id)).size;
    const flow = (
      name: string,
      list: Answer[],
      refusalSamples: Map<string, string>,
      accepted: Set<string>,
      arrived: (id: string) => boolean,
      stream: string,
      delivered: (r: number) => number,
    ): FlowResult => {
      const whileDown: Record<string, number> = {};
      const statuses: Record<string, number> = {};
      for (const a of list) {
        bump(statuses, a.status);
        if (a.sentAt >= killedAt && a.sentAt < restartedAt) bump(whileDown, a.status);
      }
      const firstAfterKill = (r?: number) => {
        const a = list
          .filter((x) => x.status === 202 && x.sentAt > killedAt && (r === undefined || x.replica === r))
          .sort((x, y) => x.answeredAt - y.answeredAt)[0];
        return a ? secs(a.answeredAt - killedAt) : -1;
      };
      return {
        flow: name,
        sent: list.length,
        accepted: accepted.size,
        lost: [...accepted].filter((id) => !arrived(id)).length,
        whileDown,
        acceptedWhileDown: whileDown["202"] ?? 0,
        acceptedNotDurable: list.filter(
          (a) => a.status === 202 && withinNotDurable(samples[stream]!, a.sentAt, a.answeredAt),
        ).length,
        notDurableS: secs(notDurableMs(samples[stream]!)),
        recoveryS: firstAfterKill(),
        statuses,
        refusals: [...refusalSamples.values()],
        replicas: [0, 1].map((r) => ({
          replica: `${name.split(" ")[0]} r${r + 1}`,
          sent: list.filter((a) => a.replica === r).length,
          accepted: list.filter((a) => a.replica === r && a.status === 202).length,
          delivered: delivered(r),
          recoveryS: firstAfterKill(r),
          acceptedWhileDown: list.filter(
            (a) => a.replica === r && a.status === 202 && a.sentAt >= killedAt && a.sentAt < restartedAt,
          ).length,
          acceptedAfterRestart: list.filter((a) => a.replica === r && a.status === 202 && upAt > 0 && a.sentAt > upAt)
            .length,
        })),
      };
    };
    return {
      layout,
      nodes: cluster.nodes.length,
      streamReplicas: replicas,
      runtimeReplicas: 2,
      seconds,
      concurrency,
      killed: { node: cluster.names[target]!, led, held, downS: secs(downMs), rejoinS: secs(rejoinMs) },
      flows: [
        flow(
          "agent inbox",
          answers.inbox,
          refusals.inbox,
          inboxAccepted,
          (id) => got.has(id),
          inboxStream,
          deliveredBy,
        ),
        flow(
          "relay publish/pull/ack",
          answers.publish,
          refusals.publish,
          publishAccepted,
          (id) => pulled.has(id),
          relayStream,
          (r) => pulledBy[r]!,
        ),
      ],
      clusterHealthyAtEnd,
      durationS: secs(Date.now() - started),
    };
  } finally {
    await http.close();
    await Promise.all(
      observers.flatMap((o) => [...new Set([o.inbox, o.relay])].map((x) => x.nc.close().catch(() => {}))),
    );
    await stack.stop();
  }
}

export function table(r: ClusterResult): string {
  const flowLine = (f: FlowResult) =>
    `${f.flow.padEnd(22)} | ${String(f.sent).padStart(5)} | ${String(f.accepted).padStart(5)} | ${String(f.lost).padStart(4)} | ` +
    `${JSON.stringify(f.whileDown).padEnd(31)} | ${String(f.acceptedNotDurable).padStart(18)} | ${String(f.notDurableS).padStart(11)} | ${f.recoveryS}`;
  const replicaLine = (x: ReplicaResult) =>
    `${x.replica.padEnd(10)} | ${String(x.sent).padStart(5)} | ${String(x.accepted).padStart(5)} | ${String(x.delivered).padStart(20)} | ${String(x.acceptedWhileDown).padStart(14)} | ${String(x.recoveryS).padStart(17)} | ${x.acceptedAfterRestart}`;
  return [
    `${r.layout} NATS layout, ${r.nodes}-node JetStream cluster, streams with ${r.streamReplicas} replica(s), ${r.runtimeReplicas} replicas of each runtime, ${r.seconds} s of load, ${r.concurrency} workers per flow`,
    `kill -9 of ${r.killed.node} (leader of ${r.killed.led.join(", ") || "nothing"}; holding ${r.killed.held.length} streams), down ${r.killed.downS} s, healthy ${r.killed.rejoinS} s after its restart`,
    "",
    "flow                   | sent  | 202   | lost | answers while the node was down | 202 without quorum | no quorum s | back after s",
    "-----------------------|-------|-------|------|---------------------------------|--------------------|-------------|-------------",
    ...r.flows.map(flowLine),
    "",
    "replica    | sent  | 202   | handed on / pulled   | 202 while down | back after kill s | 202 after restart",
    "-----------|-------|-------|----------------------|----------------|-------------------|------------------",
    ...r.flows.flatMap((f) => f.replicas.map(replicaLine)),
    "",
    ...r.flows.flatMap((f) => f.refusals.map((x) => `${f.flow} refused ${x}`)),
    `cluster healthy at the end: ${r.clusterHealthyAtEnd ? "yes" : "NO"}; duration ${r.durationS} s`,
  ].join("\n");
}

/** What the run must show: nothing lost, no 202 without a quorum, every replica served and came back. */
export function failures(r: ClusterResult): string[] {
  const out: string[] = [];
  for (const f of r.flows) {
    if (f.lost !== 0) out.push(`${f.flow}: ${f.lost} lost`);
    if (f.acceptedNotDurable !== 0) out.push(`${f.flow}: ${f.acceptedNotDurable} answered 202 without a quorum`);
    for (const x of f.replicas) {
      if (x.accepted === 0 || x.delivered === 0)
        out.push(`${x.replica}: took no traffic (202 ${x.accepted}, handed on / pulled ${x.delivered})`);
      if (x.recoveryS < 0) out.push(`${x.replica}: no 202 after the kill`);
      if (x.acceptedAfterRestart === 0) out.push(`${x.replica}: no 202 after the node's restart`);
    }
  }
  if (!r.clusterHealthyAtEnd) out.push("the cluster was not healthy at the end");
  return out;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const num = (name: string) => (process.env[name] ? Number(process.env[name]) : undefined);
  const result = await runCluster({
    seconds: num("IFP_CLUSTER_LOAD_SECONDS"),
    concurrency: num("IFP_CLUSTER_CONCURRENCY"),
    replicas: num("IFP_CLUSTER_REPLICAS"),
    maxDownS: num("IFP_CLUSTER_MAX_DOWN_SECONDS"),
    layout: layoutOf(process.argv.slice(2)),
  });
  process.stdout.write(`${table(result)}\n`);
  writeFileSync("cluster-results.json", `${JSON.stringify(result, null, 2)}\n`);
  process.stdout.write("wrote cluster-results.json\n");
  const failed = failures(result);
  for (const f of failed) process.stdout.write(`FAILED: ${f}\n`);
  process.exitCode = failed.length ? 1 : 0;
}
