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
import { type ManagedProcess, spawnProcess } from "../../../e2e/support/process.ts";
import { waitFor } from "../../../e2e/support/wait.ts";
import { Conversations } from "../../src/agent/conversations.ts";
import { agentNames } from "../../src/agent/names.ts";
import { LOOKUP_DEFAULTS } from "../../src/discovery/keys.ts";
import type { Message } from "../../src/protocol/message.ts";
import { signRequest } from "../../src/protocol/http-signatures.ts";
import type { AgentSpecInput } from "../../src/resources/agent.ts";
import { agentProcessArgs, type Tls, withNatsAndTls } from "../support/agent-harness.ts";
import { onFreePorts } from "../support/free-ports.ts";
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
  localApiUrl: string;
  metricsUrl: string;
  self: TestIdentity;
}

/** `ifp-runtime agent --workers 2` as a child process, once it listens; `crashFile` preloads crash-worker.ts. */
async function startRuntime(
  name: string,
  opts: { crashFile?: string; spec?: Omit<AgentSpecInput, "agentId">; args?: string[] } = {},
) {
  const self = identity(name);
  const dir = tempDir();
  const key = writeKey(dir, self);
  // `--metrics-port 0` is no metrics listener: both ports are chosen (again when one was taken).
  const runtime = await onFreePorts(["https", "metrics"], async (ports): Promise<Runtime> => {
    const spec: Omit<AgentSpecInput, "agentId"> = {
      // Request signatures to the A2A face name this authority.
      baseUrl: `https://localhost:${ports.https}`,
      peers: senders.map(peerOf),
      inbox: { rateLimit: { perSenderPerMinute: PER_SENDER, perAddressPerMinute: 100_000 } },
      runtime: { workers: 2 },
      ...opts.spec,
    };
    const manifest = writeAgentManifest(dir, { agentId: self.agentId, ...spec }, name);
    const args = agentProcessArgs({ manifest, key, port: ports.https, tls, natsUrl: nats.url });
    const proc = spawnProcess(
      `ifp-runtime agent ${name}`,
      process.execPath,
      [
        ...(opts.crashFile ? ["--import", CRASH] : []),
        ...[BIN, ...args, ...(opts.args ?? []), "--metrics-port", String(ports.metrics)],
      ],
      { env: { ...process.env, IFP_LOG_LEVEL: "info", IFP_TEST_CRASH_FILE: opts.crashFile ?? "" } },
    );
    const listening = await waitFor(
      `${name} listening`,
      () => {
        if (proc.exit) return "ended";
        const line = proc
          .log()
          .split("\n")
          .find((l) => l.includes('"agent listening"'));
        return line ? (JSON.parse(line) as { url: string; localApiUrl: string }) : undefined;
      },
      60_000,
    ).catch(async (err: unknown) => {
      await proc.stop();
      throw err;
    });
    // Its log says EADDRINUSE when a port was taken meanwhile.
    if (listening === "ended") throw new Error(`${name} ended: ${proc.log()}`);
    return {
      proc,
      url: listening.url,
      localApiUrl: listening.localApiUrl,
      metricsUrl: `http://127.0.0.1:${ports.metrics}`,
      self,
    };
  });
  await waitFor(`${name} ready`, async () => (await get(runtime, "/readyz")) === 200, 60_000);
  return runtime;
}

/**
 * One request on a connection of its own (so that the kernel picks a loop for each): its status
 * and body (a stream's, once it ended), or the error.
 */
function call(
  rt: Runtime,
  path: string,
  opts: { method?: string; headers?: Record<string, string>; body?: string } = {},
): Promise<{ status: number | string; text: string }> {
  const { method = "GET", headers = {}, body } = opts;
  return new Promise((resolve) => {
    const length = body === undefined ? {} : { "content-length": String(Buffer.byteLength(body)) };
    const req = request(
      `${rt.url}${path}`,
      { method, ca: tls.ca, agent: false, headers: { ...headers, ...length } },
      (res) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (chunk: string) => (text += chunk));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, text }));
      },
    );
    req.on("error", (e) => resolve({ status: (e as NodeJS.ErrnoException).code ?? e.message, text: "" }));
    req.setTimeout(20_000, () => req.destroy(new Error("timeout")));
    req.end(body);
  });
}

/** A message posted to the inbox: the status, or the error. */
const post = async (rt: Runtime, body: string) =>
  (
    await call(rt, "/.well-known/agent/inbox", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body,
    })
  ).status;

const get = async (rt: Runtime, path: string) => (await call(rt, path)).status;

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
  it("exits 2 for a count that is not 1 to 64 or auto, or in relay mode", async () => {
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

const TOKEN = "workers-a2a-token-0123456789abcdef";
const LIMITED_TOKEN = "workers-a2a-limited-0123456789abcdef";
/** Each test's caller its own: each spends its own limit of A2A_PER_CALLER requests a minute. */
const PUSH_TOKEN = "workers-a2a-pushes-0123456789abcdef";
const signer = identity("a2a-signer-agent");
const A2A_PER_CALLER = 40;
const STREAMS = 16;
const bearer = (token: string) => ({ authorization: `Bearer ${token}` });
const A2A_HEADERS = { "content-type": "application/json", "a2a-version": "1.0" };

/** A JSON-RPC call to the A2A face on a connection of its own: the status and the parsed answer. */
async function rpc(rt: Runtime, method: string, params: unknown, headers: Record<string, string> = bearer(TOKEN)) {
  const body = JSON.stringify({ jsonrpc: "2.0", id: 1, method, params });
  const res = await call(rt, "/a2a/v1", { method: "POST", headers: { ...A2A_HEADERS, ...headers }, body });
  return { status: res.status, body: res.text ? JSON.parse(res.text) : undefined };
}

const sendParams = (messageId: string) => ({
  message: { messageId, role: "ROLE_USER", parts: [{ text: `hello ${messageId}` }] },
  configuration: { returnImmediately: true },
});

describe("the A2A face over two event loops", () => {
  let rt: Runtime;
  beforeAll(async () => {
    const tokens = join(tempDir(), "a2a-tokens");
    writeFileSync(tokens, `${TOKEN}\n${LIMITED_TOKEN}\n${PUSH_TOKEN}\n`);
    rt = await startRuntime("a2a-workers-agent", {
      spec: {
        peers: [...senders, signer].map(peerOf),
        inbox: { rateLimit: { perSenderPerMinute: A2A_PER_CALLER, perAddressPerMinute: 100_000 } },
        a2a: { enabled: true, authentication: { bearerTokenSecret: { name: "a2a-tokens" } } },
      },
      args: ["--a2a-token-file", tokens, "--a2a-grpc-port", "0"],
    });
  }, 90_000);
  afterAll(async () => {
    await rt?.proc.stop();
  });

  it("a SendMessage repeated over both loops makes one task and one hand-off; the task is read and followed through either loop", async () => {
    const sent = await overBothLoops(rt, () =>
      Promise.all(Array.from({ length: 12 }, () => rpc(rt, "SendMessage", sendParams("repeated-over-loops")))),
    );
    expect(sent.map((r) => r.status)).toEqual(Array(12).fill(200));
    const ids = new Set(sent.map((r) => r.body.result.task.id as string));
    expect(ids.size).toBe(1);
    const [taskId] = ids;
    expect((await stored(rt)).filter((id) => id.startsWith(`a2a-${taskId}-`))).toHaveLength(1);

    const read = await overBothLoops(rt, () =>
      Promise.all(Array.from({ length: 12 }, () => rpc(rt, "GetTask", { id: taskId }))),
    );
    expect(read.map((r) => [r.status, r.body.result.id])).toEqual(Array(12).fill([200, taskId]));

    // Streams of the task opened on both loops, then the application (the main loop's local API) completes it.
    const before = await perWorker(rt);
    const streams = Array.from({ length: STREAMS }, () =>
      call(rt, `/a2a/rest/tasks/${taskId}:subscribe`, { headers: { ...bearer(TOKEN), "a2a-version": "1.0" } }),
    );
    await waitFor(
      "the streams opened on both loops",
      async () => {
        const now = await perWorker(rt);
        return now[0]! - before[0]! + (now[1]! - before[1]!) >= STREAMS;
      },
      15_000,
    );
    const after = await perWorker(rt);
    expect(after[0]! - before[0]!, "streams the main loop took").toBeGreaterThan(0);
    expect(after[1]! - before[1]!, "streams loop 1 took").toBeGreaterThan(0);
    const done = await fetch(`${rt.localApiUrl}/a2a/tasks/${taskId}`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ state: "TASK_STATE_COMPLETED", message: { text: "done" } }),
    });
    expect(done.status).toBe(200);
    for (const stream of await Promise.all(streams)) {
      expect(stream.status).toBe(200);
      const events = stream.text
        .split("\n")
        .filter((l) => l.startsWith("data:"))
        .map((l) => JSON.parse(l.slice(5)));
      expect(events[0].task.id).toBe(taskId);
      expect(events.at(-1).statusUpdate.status.state).toBe("TASK_STATE_COMPLETED");
    }
  }, 60_000);

  it("the card every loop serves names the gRPC binding the main loop serves", async () => {
    const cards = await overBothLoops(rt, () =>
      Promise.all(
        Array.from({ length: 12 }, () =>
          call(rt, "/.well-known/agent-card.json", { headers: { "a2a-version": "1.0" } }),
        ),
      ),
    );
    const grpc = cards.map(
      (c) =>
        (
          JSON.parse(c.text) as { supportedInterfaces: { url: string; protocolBinding: string }[] }
        ).supportedInterfaces.find((i) => i.protocolBinding === "GRPC")?.url,
    );
    expect(grpc[0]).toMatch(/^localhost:\d+$/);
    expect(grpc).toEqual(Array(12).fill(grpc[0]));
  });

  it("push notification configs made through either loop are delivered, each change once", async () => {
    const pushed: { path: string; body: any }[] = [];
    const hooks = createServer({ cert: tls.cert, key: tls.key }, (req, res) => {
      let text = "";
      req.setEncoding("utf8");
      req.on("data", (c: string) => (text += c));
      req.on("end", () => {
        pushed.push({ path: req.url ?? "", body: JSON.parse(text) });
        res.writeHead(200).end();
      });
    });
    await new Promise<void>((r) => hooks.listen(0, "127.0.0.1", r));
    const hooksUrl = `https://localhost:${(hooks.address() as { port: number }).port}`;
    try {
      const tasks = await Promise.all(
        Array.from(
          { length: 8 },
          async (_, i) =>
            (await rpc(rt, "SendMessage", sendParams(`pushed-${i}`), bearer(PUSH_TOKEN))).body.result.task.id as string,
        ),
      );
      const made = await overBothLoops(rt, () =>
        Promise.all(
          tasks.map((taskId) =>
            rpc(rt, "CreateTaskPushNotificationConfig", { taskId, url: `${hooksUrl}/${taskId}` }, bearer(PUSH_TOKEN)),
          ),
        ),
      );
      expect(made.map((r) => r.status)).toEqual(Array(8).fill(200));
      for (const taskId of tasks) {
        const done = await fetch(`${rt.localApiUrl}/a2a/tasks/${taskId}`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ state: "TASK_STATE_COMPLETED" }),
        });
        expect(done.status).toBe(200);
      }
      const completed = (taskId: string) =>
        pushed.filter((p) => p.path === `/${taskId}` && p.body.statusUpdate?.status.state === "TASK_STATE_COMPLETED");
      await waitFor("every task's completion pushed", async () => tasks.every((t) => completed(t).length > 0), 30_000);
      for (const taskId of tasks) expect(completed(taskId)).toHaveLength(1);
    } finally {
      hooks.closeAllConnections();
      await new Promise((r) => hooks.close(r));
    }
  }, 60_000);

  it("a signed request replayed over both loops is taken once", async () => {
    // The authority of spec.baseUrl, which the signature covers.
    const url = `https://localhost:${new URL(rt.url).port}/a2a/v1`;
    const body = JSON.stringify({ jsonrpc: "2.0", id: 2, method: "SendMessage", params: sendParams("signed-once") });
    const headers = await signRequest({ method: "POST", url, headers: A2A_HEADERS, body }, signer.signing);
    const answers = await overBothLoops(rt, () =>
      Promise.all(Array.from({ length: 12 }, () => call(rt, "/a2a/v1", { method: "POST", headers, body }))),
    );
    expect(
      answers.filter((a) => a.status === 200),
      JSON.stringify(answers[0]),
    ).toHaveLength(1);
    const replays = answers.filter((a) => a.status === 401);
    expect(replays).toHaveLength(11);
    for (const r of replays) expect(JSON.parse(r.text).error.message).toMatch(/taken before/);
  }, 60_000);

  it("a caller spreading its requests over both loops gets no more than its limit", async () => {
    const answers = await overBothLoops(rt, () =>
      Promise.all(
        Array.from({ length: 3 * A2A_PER_CALLER }, (_, i) =>
          rpc(rt, "SendMessage", sendParams(`limited-${i}`), bearer(LIMITED_TOKEN)),
        ),
      ),
    );
    expect(answers.filter((a) => a.status === 200)).toHaveLength(A2A_PER_CALLER);
    const refused = answers.filter((a) => a.status === 429);
    expect(refused).toHaveLength(2 * A2A_PER_CALLER);
    expect(refused[0]!.body.error.message).toMatch(`rate limit of ${A2A_PER_CALLER} requests per minute`);
  }, 60_000);
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
        // A sender's own pace after a connection that failed (20 ms): the load's clock, not a wait.
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
