// More than one event loop (spec.runtime.workers), `ifp-runtime agent` run as a child process as
// users run it, over a real nats-server: two loops serve one port and both take requests (each
// counted in the one /metrics); a sender (and an address) spreading its messages over many
// connections, and so over both loops, gets no more than its limit; a message repeated over both loops is stored once;
// SIGTERM drains both loops and a loop that crashes stops the process, and in both cases every
// message answered 202 is in the inbox stream.
import { spawnSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { createServer, request } from "node:https";
import { join } from "node:path";
import { jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { connect } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { NatsServer } from "../../../e2e/support/nats.ts";
import { freePort } from "../../../e2e/support/ports.ts";
import { type ManagedProcess, spawnProcess } from "../../../e2e/support/process.ts";
import { waitFor } from "../../../e2e/support/wait.ts";
import { Conversations } from "../../src/agent/conversations.ts";
import { agentNames } from "../../src/agent/names.ts";
import { LOOKUP_DEFAULTS } from "../../src/discovery/keys.ts";
import type { Message } from "../../src/protocol/message.ts";
import type { AgentSpecInput } from "../../src/resources/agent.ts";
import { agentProcessArgs, type Tls, withNatsAndTls } from "../support/agent-harness.ts";
import {
  identity,
  peerOf,
  signed,
  tempDir,
  type TestIdentity,
  writeAgentManifest,
  writeKey,
} from "../support/fixtures.ts";

let nats: NatsServer;
let tls: Tls;
withNatsAndTls((n, t) => ([nats, tls] = [n, t]));

const BIN = new URL("../../bin/ifp-runtime.ts", import.meta.url).pathname;
const CRASH = new URL("../support/crash-worker.ts", import.meta.url).pathname;
const PER_SENDER = 20;
/** Identity lookups of new senders one address may cause a minute (LOOKUP_DEFAULTS.perAddressPerMinute). */
const LOOKUPS = LOOKUP_DEFAULTS.perAddressPerMinute;

const bob = identity("bob-agent");
const carol = identity("carol-agent");
const dave = identity("dave-agent");
const erin = identity("erin-agent");
const senders = [bob, carol, dave, erin];

interface Runtime {
  proc: ManagedProcess;
  url: string;
  metricsUrl: string;
  self: TestIdentity;
}

/** `ifp-runtime agent --workers 2` as a child process, once it listens; `crashFile` preloads crash-worker.ts. */
async function startRuntime(name: string, opts: { crashFile?: string; spec?: Omit<AgentSpecInput, "agentId"> } = {}) {
  const self = identity(name);
  const dir = tempDir();
  const spec: Omit<AgentSpecInput, "agentId"> = {
    peers: senders.map(peerOf),
    inbox: { rateLimit: { perSenderPerMinute: PER_SENDER, perAddressPerMinute: 100_000 } },
    runtime: { workers: 2 },
    ...opts.spec,
  };
  const metricsPort = await freePort();
  const args = agentProcessArgs({
    manifest: writeAgentManifest(dir, { agentId: self.agentId, ...spec }, name),
    key: writeKey(dir, self),
    port: await freePort(),
    tls,
    natsUrl: nats.url,
  });
  const proc = spawnProcess(
    `ifp-runtime agent ${name}`,
    process.execPath,
    [...(opts.crashFile ? ["--import", CRASH] : []), BIN, ...args, "--metrics-port", String(metricsPort)],
    { env: { ...process.env, IFP_LOG_LEVEL: "info", IFP_TEST_CRASH_FILE: opts.crashFile ?? "" } },
  );
  const listening = await waitFor(
    `${name} listening`,
    () => {
      if (proc.exit) throw new Error(`${name} ended: ${proc.log()}`);
      const line = proc
        .log()
        .split("\n")
        .find((l) => l.includes('"agent listening"'));
      return line ? (JSON.parse(line) as { url: string }) : undefined;
    },
    60_000,
  );
  const runtime: Runtime = { proc, url: listening.url, metricsUrl: `http://127.0.0.1:${metricsPort}`, self };
  await waitFor(`${name} ready`, async () => (await get(runtime, "/readyz")) === 200, 60_000);
  return runtime;
}

/** One request on a connection of its own (so that the kernel picks a loop for each); the status, or the error. */
function post(rt: Runtime, body: string): Promise<number | string> {
  return new Promise((resolve) => {
    const req = request(
      `${rt.url}/.well-known/agent/inbox`,
      {
        method: "POST",
        ca: tls.ca,
        agent: false,
        headers: { "content-type": "application/json", "content-length": String(Buffer.byteLength(body)) },
      },
      (res) => {
        res.resume();
        res.on("end", () => resolve(res.statusCode ?? 0));
      },
    );
    req.on("error", (e) => resolve((e as NodeJS.ErrnoException).code ?? e.message));
    req.setTimeout(20_000, () => req.destroy(new Error("timeout")));
    req.end(body);
  });
}

function get(rt: Runtime, path: string): Promise<number | string> {
  return new Promise((resolve) => {
    const req = request(`${rt.url}${path}`, { ca: tls.ca, agent: false }, (res) => {
      res.resume();
      res.on("end", () => resolve(res.statusCode ?? 0));
    });
    req.on("error", (e) => resolve((e as NodeJS.ErrnoException).code ?? e.message));
    req.end();
  });
}

/** The value of a sample of the runtime's /metrics (0 when absent). */
async function metric(rt: Runtime, sample: string): Promise<number> {
  const text = await (await fetch(`${rt.metricsUrl}/metrics`)).text();
  const line = text.split("\n").find((l) => l.startsWith(`${sample} `));
  return line ? Number(line.slice(sample.length + 1)) : 0;
}

const perWorker = (rt: Runtime) =>
  Promise.all(["0", "1"].map((w) => metric(rt, `ifp_worker_requests_total{worker="${w}",mode="agent"}`)));

/** What `send` resolves to, once both loops are seen to have taken some of its requests. */
async function overBothLoops<T>(rt: Runtime, send: () => Promise<T>): Promise<T> {
  const before = await perWorker(rt);
  const result = await send();
  const after = await perWorker(rt);
  expect(after[0]! - before[0]!, "requests the main loop took").toBeGreaterThan(0);
  expect(after[1]! - before[1]!, "requests loop 1 took").toBeGreaterThan(0);
  return result;
}

/** `count` signed messages from `from` to the runtime's agent. */
const messages = (rt: Runtime, from: TestIdentity, count: number): Message[] =>
  Array.from({ length: count }, (_, i) => signed(from, rt.self.agentId, { sequence: i + 1 }));

/** Post each message, `concurrency` at a time; the answers by message_id. */
async function postAll(rt: Runtime, all: Message[], concurrency = 8): Promise<Map<string, number | string>> {
  const answers = new Map<string, number | string>();
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < all.length) {
        const m = all[next++]!;
        answers.set(m.headers.message_id, await post(rt, JSON.stringify(m)));
      }
    }),
  );
  return answers;
}

/** The message_ids stored in the runtime's inbox stream. */
async function stored(rt: Runtime): Promise<string[]> {
  const nc = await connect({ servers: nats.url });
  try {
    const jsm = await jetstreamManager(nc);
    const stream = agentNames(rt.self.agentId).inboxStream;
    const { state } = await jsm.streams.info(stream);
    const ids: string[] = [];
    for (let seq = state.first_seq; seq <= state.last_seq && state.messages > 0; seq++) {
      const m = await jsm.streams.getMessage(stream, { seq }).catch(() => undefined);
      if (m) ids.push((m.json() as Message).headers.message_id);
    }
    return ids;
  } finally {
    await nc.close();
  }
}

describe("--workers and spec.runtime.workers refused", () => {
  it("exits 2 for a count that is not 1 to 64 or auto, or in relay mode; 1 beside spec.a2a", async () => {
    const dir = tempDir();
    const self = identity("refused-agent");
    const run = (spec: Omit<AgentSpecInput, "agentId">, ...more: string[]) =>
      spawnSync(
        process.execPath,
        [
          ...[
            BIN,
            more.includes("relay") ? "relay" : "agent",
            "--manifest",
            writeAgentManifest(dir, { agentId: self.agentId, ...spec }),
          ],
          ...["--port", "0", "--signing-key", writeKey(dir, self), "--metrics-port", "0"],
          ...["--tls-cert", tls.files.cert, "--tls-key", tls.files.key, "--nats", nats.url, ...more],
        ],
        { encoding: "utf8", timeout: 30_000 },
      );
    for (const bad of ["0", "65", "1.5", "two", "-1"]) {
      const r = run({}, `--workers=${bad}`);
      expect(r.status, bad).toBe(2);
      expect(r.stderr).toMatch(/--workers must be a whole number from 1 to 64 or auto/);
    }
    const a2a = run({ a2a: { enabled: true } }, "--workers", "2");
    expect(a2a.status).toBe(1);
    expect(a2a.stdout + a2a.stderr).toMatch(/does not serve spec\.a2a yet/);
    const relay = run({}, "--workers", "2", "relay");
    expect(relay.status).toBe(2);
    expect(relay.stderr).toMatch(/--workers is of the agent mode/);
  });
});

describe("two event loops behind one port", () => {
  let rt: Runtime;
  beforeAll(async () => {
    rt = await startRuntime("workers-agent");
  }, 90_000);
  afterAll(async () => {
    await rt?.proc.stop();
  });

  it("both loops take requests, each counted, and /metrics adds them up", async () => {
    const before = await perWorker(rt);
    // Twenty connections: the kernel gives each loop some of them.
    const answers = await overBothLoops(rt, () => postAll(rt, messages(rt, bob, PER_SENDER)));
    expect([...answers.values()]).toEqual(Array(PER_SENDER).fill(202));
    const after = await perWorker(rt);
    expect(after[0]! - before[0]! + (after[1]! - before[1]!)).toBe(PER_SENDER);
    // Counted in the loop that accepted each, added up in the main loop's /metrics.
    expect(await metric(rt, 'ifp_inbox_messages_accepted_total{mode="agent"}')).toBe(PER_SENDER);
    expect(await stored(rt)).toHaveLength(PER_SENDER);
  });

  it("a sender spreading its messages over many connections, and so both loops, gets no more than its limit", async () => {
    const answers = [...(await overBothLoops(rt, () => postAll(rt, messages(rt, carol, 3 * PER_SENDER), 12))).values()];
    expect(answers.filter((s) => s === 202)).toHaveLength(PER_SENDER);
    expect(answers.filter((s) => s === 429)).toHaveLength(2 * PER_SENDER);
  });

  it("a message repeated over both loops is stored once, each repeat answered 202", async () => {
    const [m] = messages(rt, dave, 1);
    const answers = await overBothLoops(rt, () =>
      Promise.all(Array.from({ length: 12 }, () => post(rt, JSON.stringify(m)))),
    );
    expect(answers).toEqual(Array(12).fill(202));
    expect((await stored(rt)).filter((id) => id === m!.headers.message_id)).toHaveLength(1);
    expect(await metric(rt, 'ifp_inbox_duplicates_total{mode="agent"}')).toBe(11);
  });

  it("a conversation's messages arriving over both loops at once are all in its record, the loops' collisions retried and counted", async () => {
    const conversation = "conv:both-loops";
    const all = Array.from({ length: PER_SENDER }, (_, i) =>
      signed(erin, rt.self.agentId, { conversation_id: conversation, sequence: i + 1 }),
    );
    const answers = await overBothLoops(rt, () => postAll(rt, all, 12));
    expect([...answers.values()]).toEqual(Array(PER_SENDER).fill(202));
    const nc = await connect({ servers: nats.url });
    try {
      const kv = await new Kvm(nc).open(agentNames(rt.self.agentId).conversationsBucket);
      const record = (await kv.get(Conversations.key(erin.agentId, conversation)))!.json() as {
        last_sequence_in: number;
        recent: { message_id: string }[];
      };
      expect(record.last_sequence_in).toBe(PER_SENDER);
      expect(record.recent.map((m) => m.message_id).sort()).toEqual(all.map((m) => m.headers.message_id).sort());
    } finally {
      await nc.close();
    }
    expect(await metric(rt, 'ifp_conversation_cas_retries_total{mode="agent"}')).toBeGreaterThan(0);
  });
});

describe("the per-address limit across two event loops", () => {
  it("holds for one address over many connections, and so both loops", async () => {
    const rt = await startRuntime("address-agent", {
      spec: { inbox: { rateLimit: { perSenderPerMinute: 100_000, perAddressPerMinute: PER_SENDER } } },
    });
    try {
      const answers = [...(await overBothLoops(rt, () => postAll(rt, messages(rt, bob, 3 * PER_SENDER), 12))).values()];
      expect(answers.filter((s) => s === 202)).toHaveLength(PER_SENDER);
      expect(answers.filter((s) => s === 429)).toHaveLength(2 * PER_SENDER);
      expect(await metric(rt, 'ifp_inbox_rate_limited_total{limit="address",mode="agent"}')).toBe(2 * PER_SENDER);
    } finally {
      await rt.proc.stop();
    }
  }, 120_000);
});

describe("the identity-lookup budget across two event loops", () => {
  it("is the pod's: fresh senders spread over many connections, and so both loops, get no more lookups than one budget", async () => {
    // Identity documents nobody has: each lookup is one fetch here, answered 404.
    const fetched: string[] = [];
    const documents = createServer({ cert: tls.cert, key: tls.key }, (req, res) => {
      fetched.push(req.url ?? "");
      res.writeHead(404).end();
    });
    await new Promise<void>((r) => documents.listen(0, "127.0.0.1", r));
    const address = documents.address();
    const base = `https://localhost:${typeof address === "object" && address ? address.port : 0}`;
    const rt = await startRuntime("lookups-agent");
    try {
      const strangers = Array.from({ length: 4 * LOOKUPS }, (_, i) =>
        signed(identity(`${base}/u${i}`), rt.self.agentId),
      );
      // Two at a time: never more in flight than one loop's two lookups per address, so every
      // refusal is the budget's, not the concurrency bound's.
      const started = Date.now();
      const answers = [...(await overBothLoops(rt, () => postAll(rt, strangers, 2))).values()];
      // The budget refills evenly (LOOKUPS a minute) while the messages are posted.
      const refilled = Math.ceil(((Date.now() - started) / 60_000) * LOOKUPS);
      expect(fetched.length).toBeGreaterThanOrEqual(LOOKUPS);
      expect(fetched.length).toBeLessThanOrEqual(LOOKUPS + refilled);
      expect(new Set(fetched).size).toBe(fetched.length);
      expect(answers.filter((s) => s === 401)).toHaveLength(fetched.length);
      expect(answers.filter((s) => s === 429)).toHaveLength(strangers.length - fetched.length);
    } finally {
      await rt.proc.stop();
      documents.closeAllConnections();
      await new Promise((r) => documents.close(r));
    }
  }, 120_000);
});

/** Messages posted until `stop()`, 8 at a time, over connections of their own; what each got. */
function steadyLoad(rt: Runtime, from: TestIdentity) {
  const answers = new Map<string, number | string>();
  let stopping = false;
  let seq = 0;
  const running = Promise.all(
    Array.from({ length: 8 }, async () => {
      while (!stopping) {
        const m = signed(from, rt.self.agentId, { sequence: ++seq });
        const status = await post(rt, JSON.stringify(m));
        answers.set(m.headers.message_id, status);
        if (typeof status === "string") await new Promise((r) => setTimeout(r, 20));
      }
    }),
  );
  return {
    answers,
    accepted: () => [...answers].filter(([, s]) => s === 202).map(([id]) => id),
    stop: async () => {
      stopping = true;
      await running;
    },
  };
}

describe("the end of a process of two event loops", () => {
  it("SIGTERM drains both loops: exit 0, and every message answered 202 is stored", async () => {
    const rt = await startRuntime("drained-agent", {
      spec: { inbox: { rateLimit: { perSenderPerMinute: 100_000, perAddressPerMinute: 100_000 } } },
    });
    const load = steadyLoad(rt, bob);
    await waitFor("both loops taking requests", async () => (await perWorker(rt)).every((n) => n >= 10), 30_000);
    rt.proc.proc.kill("SIGTERM");
    const exit = await rt.proc.exited;
    await load.stop();
    expect(exit).toMatchObject({ code: 0 });
    expect(rt.proc.log()).toContain('"msg":"shutting down"');
    // The worker's own drain: its listener closed, its requests answered, its NATS connection
    // closed, and then it ended by itself (code 0; one stopped by force ends with 1).
    expect(rt.proc.log()).toMatch(/"worker":1,"code":0,"msg":"event loop stopped"/);
    const accepted = load.accepted();
    expect(accepted.length).toBeGreaterThan(10);
    const ids = new Set(await stored(rt));
    expect(accepted.filter((id) => !ids.has(id))).toEqual([]);
  }, 120_000);

  it("a loop that crashes stops the process (exit 1), and every message answered 202 is stored", async () => {
    const crashFile = join(tempDir(), "crash");
    const rt = await startRuntime("crashed-agent", {
      crashFile,
      spec: { inbox: { rateLimit: { perSenderPerMinute: 100_000, perAddressPerMinute: 100_000 } } },
    });
    const load = steadyLoad(rt, carol);
    await waitFor("both loops taking requests", async () => (await perWorker(rt)).every((n) => n >= 10), 30_000);
    writeFileSync(crashFile, "");
    const exit = await rt.proc.exited;
    await load.stop();
    expect(exit).toMatchObject({ code: 1 });
    expect(rt.proc.log()).toContain("an event loop failed; shutting down");
    expect(rt.proc.log()).toContain("event loop 1 crashed (test)");
    const accepted = load.accepted();
    expect(accepted.length).toBeGreaterThan(10);
    const ids = new Set(await stored(rt));
    expect(accepted.filter((id) => !ids.has(id))).toEqual([]);
  }, 120_000);
});
