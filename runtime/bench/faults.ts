// Faults, slow clients and a soak against the real runtimes, as users run them (the
// `ifp-runtime` command) on a real nats-server, on the product's NATS layout (`isolated`: nats-server
// in operator mode, the Agent on its tenant's shared streams with its own credential, the Relay on
// an account of its own; runtime-layouts.ts) or `--layout per-agent`: kill -9 of nats-server, of the agent runtime,
// of nats-server again after the agent's second start, and of the relay runtime in the middle
// of sustained traffic, each restarted, with every message
// answered 202 counted until it reached the handler or was pulled from the mailbox (lost = 0),
// the requests under way at the kill counted apart from those sent while the component was down
// (each refused at once: 503 or no connection, never 202);
// slow clients (slow headers, slow body, unfinished body) cut off without starving the others;
// and a fixed-length run at ~70% of the measured capacity with p99 and RSS at its start and end,
// held to SOAK_BOUND.
// `npm run test:faults [-- --layout per-agent]` prints a table and writes faults-results.json; IFP_FAULTS_LOAD_SECONDS,
// IFP_SOAK_SECONDS and IFP_SLOW_CLIENTS size it. Loopback only; every loop ends by itself.
import type { ChildProcess } from "node:child_process";
import { writeFileSync } from "node:fs";
import { Agent as HttpsAgent } from "node:https";
import { connect as tlsConnect, type TLSSocket } from "node:tls";
import type { NatsServer } from "../../e2e/support/nats.ts";
import { localhostTls } from "../../e2e/support/tls.ts";
import { freePort, waitFor } from "../../e2e/support/ports.ts";
import { startHandler } from "../test/support/agent-harness.ts";
import {
  identity,
  message,
  peerOf,
  signed,
  tempDir,
  writeAgentManifest,
  writeKey,
  writeRelayManifest,
} from "../test/support/fixtures.ts";
import { HttpClient } from "../src/net/http-client.ts";
import { RelayClient } from "../src/net/relay-client.ts";
import { signMessage } from "../src/protocol/signing.ts";
import { rssMiB, send, startRuntime } from "./hardening.ts";
import { layoutOf, startRuntimeNats, type RuntimeLayout } from "./runtime-layouts.ts";

export interface FaultResult {
  fault: string;
  sent: number;
  accepted: number;
  /** Answered 202 and never handed to the application (or pulled from the mailbox). */
  lost: number;
  /**
   * Requests under way when the component was killed (sent before it was known gone, answered
   * after the kill), by status (0: no connection), and the longest any of them was answered after the kill.
   */
  inFlightAtKill: Record<string, number>;
  inFlightLongestS: number;
  /** Requests sent while the component was down (whenever answered), by status, and the longest any of them waited. */
  duringOutage: Record<string, number>;
  outageLongestS: number;
  /**
   * 202 answers to requests sent while the component was down: must be 0 (202 means durable). A
   * request under way at the kill may be answered 202 after it (stored before the kill): it is
   * counted with the requests under way.
   */
  acceptedDuringOutage: number;
  /** From the kill until the first 202 after the restart. */
  recoveryS: number;
}

export interface SlowClientResult {
  kind: string;
  connections: number;
  /** Cut off by the server, and the longest it took. */
  closed: number;
  longestS: number;
}

export interface FaultsResult {
  /** The NATS layout the runtimes ran on. */
  layout: RuntimeLayout;
  faults: FaultResult[];
  slowClients: { results: SlowClientResult[]; others: { sent: number; ok: number; p99Ms: number } };
  soak: {
    seconds: number;
    capacityPerS: number;
    targetPerS: number;
    sent: number;
    errors: number;
    statuses: Record<string, number>;
    errorSamples: string[];
    p99Ms: { start: number; end: number };
    /**
     * The agent's RSS: before the run, at the end of its first tenth (start: the heap has grown to
     * the load by then) and at its end.
     */
    rssMiB: { before: number; start: number; end: number };
    /** The agent's RSS at the end of each tenth of the run, MiB. */
    rssTenthsMiB: number[];
    /** SOAK_BOUND applied to this run: the p99 and RSS the end may reach, and whether it stayed within. */
    bound: { p99Ms: number; rssMiB: number; within: boolean };
  };
  durationS: number;
}

/**
 * The growth a soak may show between its first and its last tenth: p99 in the last tenth at most
 * 3 times that of the first plus 1 s (the slack absorbs a stall of a loaded machine in a short
 * window), and the agent's RSS at the end at most 48 MiB above its value at the end of the first
 * tenth. (The heap grows to the load in the first seconds and stays there: a 300 s run at 180
 * messages/s went 353 → 392 MiB in its first tenth and 392 → 396 MiB in the nine others.)
 */
export const SOAK_BOUND = { p99Factor: 3, p99SlackMs: 1000, rssGrowthMiB: 48 } as const;

export function soakBound(
  p99Ms: { start: number; end: number },
  rss: { start: number; end: number },
): { p99Ms: number; rssMiB: number; within: boolean } {
  const maxP99 = Math.round((p99Ms.start * SOAK_BOUND.p99Factor + SOAK_BOUND.p99SlackMs) * 10) / 10;
  const maxRss = rss.start + SOAK_BOUND.rssGrowthMiB;
  return { p99Ms: maxP99, rssMiB: maxRss, within: p99Ms.end <= maxP99 && rss.end <= maxRss };
}

/** How long a request sent while NATS is down, or under way when it is killed, may wait for its answer. */
export const OUTAGE_ANSWER_S = 3;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** kill -9, and wait until the process is gone. */
async function killed(child: ChildProcess): Promise<void> {
  const exited = new Promise<void>((r) =>
    child.exitCode !== null || child.signalCode !== null ? r() : child.once("exit", () => r()),
  );
  child.kill("SIGKILL");
  await exited;
}
const p99 = (xs: number[]) =>
  xs.length ? [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * 0.99))]! : 0;

interface Stack {
  nats: NatsServer;
  ca: string;
  inbox: string;
  relayUrl: string;
  agent: () => ChildProcess;
  relay: () => ChildProcess;
  restartAgent(): Promise<void>;
  restartRelay(): Promise<void>;
  handled: Set<string>;
  stop(): Promise<void>;
}

async function startStack(
  layout: RuntimeLayout,
): Promise<Stack & { sender: ReturnType<typeof identity>; self: ReturnType<typeof identity> }> {
  const dir = tempDir("ifp-faults-");
  const natsOf = await startRuntimeNats({ layout, dir });
  const nats = natsOf.server;
  const tls = await localhostTls();
  const sender = identity("faults-sender");
  const self = identity("faults-agent");
  const handler = await startHandler();
  const handled = new Set<string>();
  const [agentPort, relayPort] = await Promise.all([freePort(), freePort()]);
  const limits = { perSenderPerMinute: 10_000_000, perAddressPerMinute: 10_000_000, perSenderBytesPerHour: 1 << 30 };
  const agentManifest = writeAgentManifest(
    dir,
    {
      agentId: self.agentId,
      peers: [peerOf(sender)],
      // A hand-off the killed agent held comes again after this timeout and 30 s (the consumer's
      // ack wait): the application on loopback answers at once, 3 s is ample.
      handler: { url: handler.url, timeout: "3s" },
      inbox: { rateLimit: limits },
    },
    "agent",
  );
  const relayUrl = `https://localhost:${relayPort}`;
  const relaySpec = {
    url: relayUrl,
    agents: [peerOf(sender), peerOf(self)],
    limits: { perAgentPerMinute: 10_000_000, perAddressPerMinute: 10_000_000, perAgentBytesPerHour: 1 << 30 },
  };
  const relayManifest = writeRelayManifest(dir, relaySpec, "relay");
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
  const agentArgs = [
    "agent",
    "--manifest",
    agentManifest,
    "--port",
    String(agentPort),
    "--signing-key",
    writeKey(dir, self),
    "--local-api-port",
    "0",
    ...common,
    ...(await natsOf.agentArgs(self.agentId, 3_000)),
  ];
  const relayArgs = [
    "relay",
    "--manifest",
    relayManifest,
    "--port",
    String(relayPort),
    ...common,
    ...(await natsOf.relayArgs("relay", relaySpec)),
  ];
  const agentBase = `https://localhost:${agentPort}`;
  let agentProc = await startRuntime(agentArgs, `${agentBase}/readyz`, tls.ca);
  let relayProc = await startRuntime(relayArgs, `${relayUrl}/readyz`, tls.ca);
  // What reached the application, by message_id (the hand-off is at least once: a set).
  const seen = setInterval(() => {
    for (const r of handler.received.splice(0)) handled.add(r.body.headers.message_id);
  }, 50);
  return {
    nats,
    ca: tls.ca,
    inbox: `${agentBase}/.well-known/agent/inbox`,
    relayUrl,
    sender,
    self,
    handled,
    agent: () => agentProc,
    relay: () => relayProc,
    async restartAgent() {
      agentProc = await startRuntime(agentArgs, `${agentBase}/readyz`, tls.ca);
    },
    async restartRelay() {
      relayProc = await startRuntime(relayArgs, `${relayUrl}/readyz`, tls.ca);
    },
    async stop() {
      clearInterval(seen);
      for (const p of [agentProc, relayProc]) p.kill("SIGTERM");
      await handler.close();
      await natsOf.close();
    },
  };
}

/**
 * Sustained load for `seconds` from `concurrency` workers; `fault` runs once, a third of the way
 * in. Should the restart take longer than the rest (a loaded machine), the load goes on until
 * the first 202 after it, for at most 60 s more.
 */
async function underLoad(
  name: string,
  seconds: number,
  concurrency: number,
  request: (agent: HttpsAgent) => Promise<{ id: string; status: number }>,
  fault: (outage: { killing(): void; down(): void; up(): void }) => Promise<void>,
): Promise<{ result: Omit<FaultResult, "lost">; accepted: Set<string> }> {
  const agent = new HttpsAgent({ keepAlive: true, maxSockets: concurrency });
  const accepted = new Set<string>();
  const inFlightAtKill: Record<string, number> = {};
  const duringOutage: Record<string, number> = {};
  let inFlightLongest = 0;
  let outageLongest = 0;
  let sent = 0;
  let down = false;
  let outageOver = false;
  let killedAt = 0;
  let recoveredAt = 0;
  let acceptedDuringOutage = 0;
  const end = Date.now() + seconds * 1000;
  const going = () => Date.now() < end || (!recoveredAt && Date.now() < end + 60_000);
  const workers = Array.from({ length: concurrency }, async () => {
    while (going()) {
      const startedDown = down;
      const beforeOutage = !down && !outageOver;
      const t = Date.now();
      const { id, status } = await request(agent);
      const answered = Date.now();
      sent++;
      if (status === 202) accepted.add(id);
      if (startedDown) {
        // Sent during the outage: refused at once, never a 202 (202 means durable).
        duringOutage[status] = (duringOutage[status] ?? 0) + 1;
        outageLongest = Math.max(outageLongest, answered - t);
      } else if (beforeOutage && killedAt && answered >= killedAt) {
        // Under way at the kill: answered (202 if it was stored before, 503 or no connection otherwise) without waiting for the component to come back.
        inFlightAtKill[status] = (inFlightAtKill[status] ?? 0) + 1;
        inFlightLongest = Math.max(inFlightLongest, answered - killedAt);
      }
      if (status === 202 && startedDown) acceptedDuringOutage++;
      if (status === 202 && restarted && !recoveredAt) recoveredAt = Date.now();
      // No connection (the runtime killed): do not spin.
      if (status === 0) await sleep(50);
    }
  });
  let restarted = false;
  const faulted = (async () => {
    await sleep((seconds * 1000) / 3);
    await fault({
      killing: () => {
        killedAt = Date.now();
      },
      down: () => {
        down = true;
      },
      up: () => {
        down = false;
        outageOver = true;
        restarted = true;
      },
    });
  })();
  await Promise.all([...workers, faulted]);
  agent.destroy();
  const s = (ms: number) => Math.round(ms / 100) / 10;
  return {
    result: {
      fault: name,
      sent,
      accepted: accepted.size,
      inFlightAtKill,
      inFlightLongestS: s(inFlightLongest),
      duringOutage,
      outageLongestS: s(outageLongest),
      acceptedDuringOutage,
      recoveryS: recoveredAt ? s(recoveredAt - killedAt) : -1,
    },
    accepted,
  };
}

/** Until every accepted id is in `arrived` (or `timeoutMs` passed): how many never arrived. */
async function missing(accepted: Set<string>, arrived: () => Set<string>, timeoutMs: number): Promise<number> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const got = arrived();
    const lost = [...accepted].filter((id) => !got.has(id)).length;
    if (lost === 0 || Date.now() > deadline) return lost;
    await sleep(250);
  }
}

async function slowClients(
  stack: Stack & { sender: ReturnType<typeof identity>; self: ReturnType<typeof identity> },
  count: number,
): Promise<FaultsResult["slowClients"]> {
  const url = new URL(stack.inbox);
  const kinds = ["slow headers", "slow body", "unfinished body"] as const;
  const results: SlowClientResult[] = [];
  const sockets: { kind: string; socket: TLSSocket; opened: number; closed?: number }[] = [];
  const head = `POST ${url.pathname} HTTP/1.1\r\nHost: ${url.host}\r\nContent-Type: application/json\r\n`;
  for (const kind of kinds) {
    for (let i = 0; i < count; i++) {
      const socket = tlsConnect({ host: "127.0.0.1", port: Number(url.port), servername: "localhost", ca: stack.ca });
      const entry = { kind, socket, opened: Date.now() } as {
        kind: string;
        socket: TLSSocket;
        opened: number;
        closed?: number;
      };
      socket.on("close", () => (entry.closed ??= Date.now()));
      socket.on("error", () => {});
      // Read whatever the server answers (a 408, say) before it closes: a paused socket that
      // was written to never sees the close that follows.
      socket.resume();
      socket.once("secureConnect", () =>
        socket.write(kind === "slow headers" ? head : `${head}Content-Length: 100000\r\n\r\n{"ifp":4,`),
      );
      sockets.push(entry);
    }
  }
  // A byte every 2 s from the slow ones; nothing more from the unfinished ones.
  const drip = setInterval(() => {
    for (const s of sockets)
      if (!s.closed && s.kind !== "unfinished body" && s.socket.writable)
        s.socket.write(s.kind === "slow headers" ? "X" : " ");
  }, 2000);
  // Meanwhile the others: signed messages, one at a time per worker, for as long as any slow one is open (at most 90 s).
  const agent = new HttpsAgent({ keepAlive: true, maxSockets: 4 });
  const latencies: number[] = [];
  let ok = 0;
  const until = Date.now() + 90_000;
  await Promise.all(
    Array.from({ length: 4 }, async () => {
      while (Date.now() < until && sockets.some((s) => !s.closed)) {
        const t = performance.now();
        const status = await send(
          agent,
          stack.ca,
          stack.inbox,
          "POST",
          { "content-type": "application/json" },
          JSON.stringify(signed(stack.sender, stack.self.agentId)),
        );
        latencies.push(performance.now() - t);
        if (status === 202) ok++;
        await sleep(20);
      }
    }),
  );
  clearInterval(drip);
  agent.destroy();
  for (const kind of kinds) {
    const mine = sockets.filter((s) => s.kind === kind);
    const closed = mine.filter((s) => s.closed);
    results.push({
      kind,
      connections: mine.length,
      closed: closed.length,
      longestS: Math.round(Math.max(0, ...closed.map((s) => s.closed! - s.opened)) / 100) / 10,
    });
  }
  for (const s of sockets) s.socket.destroy();
  return { results, others: { sent: latencies.length, ok, p99Ms: Math.round(p99(latencies) * 10) / 10 } };
}

async function soak(
  stack: Stack & { sender: ReturnType<typeof identity>; self: ReturnType<typeof identity> },
  seconds: number,
): Promise<FaultsResult["soak"]> {
  const agent = new HttpsAgent({ keepAlive: true, maxSockets: 16 });
  const samples: string[] = [];
  const post = async () => {
    const t = performance.now();
    const status = await send(
      agent,
      stack.ca,
      stack.inbox,
      "POST",
      { "content-type": "application/json" },
      JSON.stringify(signed(stack.sender, stack.self.agentId)),
      (body) => {
        if (samples.length < 5) samples.push(`${new Date().toISOString()} ${body.slice(0, 200)}`);
      },
    );
    return { status, ms: performance.now() - t };
  };
  // Capacity: 16 workers as fast as they go for 5 s.
  let probed = 0;
  const probeEnd = Date.now() + 5000;
  await Promise.all(
    Array.from({ length: 16 }, async () => {
      while (Date.now() < probeEnd) if ((await post()).status === 202) probed++;
    }),
  );
  const capacityPerS = probed / 5;
  const targetPerS = Math.max(1, Math.round(capacityPerS * 0.7));
  await sleep(1000);
  const rssBefore = rssMiB(stack.agent().pid!);
  const rssTenths: number[] = [];
  const sampling = setInterval(() => rssTenths.push(rssMiB(stack.agent().pid!)), (seconds * 1000) / 10);
  const started = Date.now();
  const end = started + seconds * 1000;
  const window = Math.max(1000, (seconds * 1000) / 10);
  const first: number[] = [];
  const last: number[] = [];
  let sent = 0;
  let errors = 0;
  const statuses: Record<string, number> = {};
  const inFlight = new Set<Promise<void>>();
  // Paced: one request every 1/target s, whatever the answers take (open model), at most 64 in flight.
  for (let i = 0; Date.now() < end; i++) {
    const due = started + (i * 1000) / targetPerS;
    if (due > Date.now()) await sleep(due - Date.now());
    if (inFlight.size >= 64) await Promise.race(inFlight);
    const at = Date.now();
    const p = post().then(({ status, ms }) => {
      sent++;
      statuses[status] = (statuses[status] ?? 0) + 1;
      if (status !== 202) errors++;
      if (at - started < window) first.push(ms);
      else if (end - at < window) last.push(ms);
    });
    inFlight.add(p);
    void p.finally(() => inFlight.delete(p));
  }
  await Promise.all(inFlight);
  agent.destroy();
  const p99Ms = { start: Math.round(p99(first) * 10) / 10, end: Math.round(p99(last) * 10) / 10 };
  clearInterval(sampling);
  const rss = { before: rssBefore, start: rssTenths[0] ?? rssBefore, end: rssMiB(stack.agent().pid!) };
  return {
    seconds,
    capacityPerS: Math.round(capacityPerS),
    targetPerS,
    sent,
    errors,
    statuses,
    errorSamples: samples,
    p99Ms,
    rssMiB: rss,
    rssTenthsMiB: rssTenths.slice(0, 10),
    bound: soakBound(p99Ms, rss),
  };
}

/** 3. The relay runtime killed under publishes; then the mailbox pulled and acknowledged until empty. */
async function relayKill(
  stack: Stack & { sender: ReturnType<typeof identity>; self: ReturnType<typeof identity> },
  seconds: number,
  concurrency: number,
): Promise<FaultResult> {
  const http = new HttpClient({ extraCa: stack.ca });
  try {
    const publisher = new RelayClient(stack.relayUrl, stack.sender.signing, http);
    const recipient = new RelayClient(stack.relayUrl, stack.self.signing, http);
    const relayRun = await underLoad(
      "kill -9 relay runtime",
      seconds,
      concurrency,
      async () => {
        const m = signMessage(message(stack.sender.agentId, stack.self.agentId), stack.sender.signing);
        const r = await publisher.publish(m).catch(() => ({ status: 0 }));
        return { id: m.headers.message_id, status: r.status };
      },
      async (o) => {
        o.killing();
        await killed(stack.relay());
        o.down();
        await sleep(2000);
        o.up();
        await stack.restartRelay();
      },
    );
    const pulled = new Set<string>();
    for (let i = 0; i < 10_000; i++) {
      const page = await recipient.pull({ limit: 100 });
      if (!page.messages.length) break;
      for (const m of page.messages) pulled.add(m.headers.message_id);
      await recipient.ackMany(page.messages.map((m) => m.headers.message_id));
    }
    return { ...relayRun.result, lost: [...relayRun.accepted].filter((id) => !pulled.has(id)).length };
  } finally {
    await http.close();
  }
}

export async function runFaults(
  opts: {
    loadSeconds?: number;
    concurrency?: number;
    slowClients?: number;
    soakSeconds?: number;
    layout?: RuntimeLayout;
  } = {},
): Promise<FaultsResult> {
  const seconds = opts.loadSeconds ?? 20;
  const concurrency = opts.concurrency ?? 8;
  const layout = opts.layout ?? "isolated";
  const started = Date.now();
  const stack = await startStack(layout);
  try {
    const inboxPost = async (agent: HttpsAgent) => {
      const m = signed(stack.sender, stack.self.agentId);
      return {
        id: m.headers.message_id,
        status: await send(
          agent,
          stack.ca,
          stack.inbox,
          "POST",
          { "content-type": "application/json" },
          JSON.stringify(m),
        ),
      };
    };
    const faults: FaultResult[] = [];

    // 1. nats-server killed (kill -9) and started again on the same port and store.
    const killNats = async (o: { killing(): void; down(): void; up(): void }) => {
      const pid = stack.nats.pid!;
      o.killing();
      process.kill(pid, "SIGKILL");
      await waitFor("nats-server gone", async () => !alive(pid), 10_000, 20);
      // The outage: from the moment the process is gone until it is started again.
      o.down();
      await sleep(3000);
      o.up();
      await stack.nats.restart();
    };
    const natsRun = await underLoad("kill -9 nats-server", seconds, concurrency, inboxPost, killNats);
    faults.push({ ...natsRun.result, lost: await missing(natsRun.accepted, () => stack.handled, 60_000) });

    // 2. The agent runtime killed and started again.
    const agentRun = await underLoad("kill -9 agent runtime", seconds, concurrency, inboxPost, async (o) => {
      o.killing();
      await killed(stack.agent());
      o.down();
      await sleep(2000);
      o.up();
      await stack.restartAgent();
    });
    // While its accepted messages are counted (a hand-off the killed agent held comes again only
    // after the consumer's ack wait), 3. and 4. run: the relay killed under publishes, and slow
    // clients held against the restarted agent's inbox. None touches another's runtime, and the
    // slow ones take the request timeout (30 s) to be cut off whatever else runs.
    const slowRun = slowClients(stack, opts.slowClients ?? 10);
    slowRun.catch(() => {}); // awaited below; not unhandled should another part throw first
    const [agentLost, relayFault] = await Promise.all([
      missing(agentRun.accepted, () => stack.handled, 60_000),
      relayKill(stack, seconds, concurrency),
    ]);
    faults.push({ ...agentRun.result, lost: agentLost });
    const slow = await slowRun;

    // 2b. nats-server killed again, now that the agent has started a second time against its
    // streams (a routine pod restart, then a NATS restart): every stream must load again. After
    // the slow clients, whose others must all be answered 202.
    const secondStartRun = await underLoad("kill -9 nats (2nd start)", seconds, concurrency, inboxPost, killNats);
    faults.push({
      ...secondStartRun.result,
      lost: await missing(secondStartRun.accepted, () => stack.handled, 90_000),
    });
    faults.push(relayFault);

    const soaked = await soak(stack, opts.soakSeconds ?? 60);
    return {
      layout,
      faults,
      slowClients: slow,
      soak: soaked,
      durationS: Math.round((Date.now() - started) / 100) / 10,
    };
  } finally {
    await stack.stop();
  }
}

export function table(r: FaultsResult): string {
  return [
    `NATS layout ${r.layout}`,
    "fault                    | sent  | 202   | lost | in flight at the kill: answers, longest | sent while down: answers, longest | 202 while down | recovery s",
    "-------------------------|-------|-------|------|-----------------------------------------|-----------------------------------|----------------|-----------",
    ...r.faults.map(
      (f) =>
        `${f.fault.padEnd(24)} | ${String(f.sent).padStart(5)} | ${String(f.accepted).padStart(5)} | ${String(f.lost).padStart(4)} | ` +
        `${`${JSON.stringify(f.inFlightAtKill)} ${f.inFlightLongestS} s`.padEnd(39)} | ${`${JSON.stringify(f.duringOutage)} ${f.outageLongestS} s`.padEnd(33)} | ${String(f.acceptedDuringOutage).padStart(14)} | ${f.recoveryS}`,
    ),
    "",
    "slow client       | connections | cut off | longest s",
    "------------------|-------------|---------|----------",
    ...r.slowClients.results.map(
      (s) =>
        `${s.kind.padEnd(17)} | ${String(s.connections).padStart(11)} | ${String(s.closed).padStart(7)} | ${s.longestS}`,
    ),
    `meanwhile others: ${r.slowClients.others.ok}/${r.slowClients.others.sent} accepted, p99 ${r.slowClients.others.p99Ms} ms`,
    "",
    `soak ${r.soak.seconds} s at ${r.soak.targetPerS}/s (70% of ${r.soak.capacityPerS}/s measured): ${r.soak.sent} sent, ${r.soak.errors} not 202 ${JSON.stringify(r.soak.statuses)}, ` +
      `p99 ${r.soak.p99Ms.start} → ${r.soak.p99Ms.end} ms, agent RSS ${r.soak.rssMiB.start} → ${r.soak.rssMiB.end} MiB ` +
      `(${r.soak.rssMiB.before} before; each tenth: ${r.soak.rssTenthsMiB.join(" ")})`,
    `soak bound (end ≤ ${SOAK_BOUND.p99Factor} × start p99 + ${SOAK_BOUND.p99SlackMs} ms, RSS ≤ start + ${SOAK_BOUND.rssGrowthMiB} MiB): ` +
      `p99 ≤ ${r.soak.bound.p99Ms} ms, RSS ≤ ${r.soak.bound.rssMiB} MiB: ${r.soak.bound.within ? "within" : "EXCEEDED"}`,
    ...r.soak.errorSamples.map((e) => `  not 202: ${e}`),
    `duration ${r.durationS} s`,
  ].join("\n");
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const num = (name: string) => (process.env[name] ? Number(process.env[name]) : undefined);
  const result = await runFaults({
    loadSeconds: num("IFP_FAULTS_LOAD_SECONDS"),
    soakSeconds: num("IFP_SOAK_SECONDS"),
    slowClients: num("IFP_SLOW_CLIENTS"),
    layout: layoutOf(process.argv.slice(2)),
  });
  process.stdout.write(`${table(result)}\n`);
  writeFileSync("faults-results.json", `${JSON.stringify(result, null, 2)}\n`);
  process.stdout.write("wrote faults-results.json\n");
  const slowOk = result.slowClients.results.every((s) => s.closed === s.connections);
  // What was sent while a component was down is refused (503, or no connection); while NATS was
  // down, at once, and what was under way at its kill is answered without waiting for it to return.
  const nats = result.faults[0]!;
  const refusedAtOnce =
    result.faults.every((f) => Object.keys(f.duringOutage).every((s) => s === "503" || s === "0")) &&
    nats.outageLongestS <= OUTAGE_ANSWER_S &&
    nats.inFlightLongestS <= OUTAGE_ANSWER_S;
  process.exitCode =
    result.faults.some((f) => f.lost !== 0 || f.acceptedDuringOutage !== 0) ||
    !refusedAtOnce ||
    !slowOk ||
    result.soak.errors > 0 ||
    !result.soak.bound.within
      ? 1
      : 0;
}
