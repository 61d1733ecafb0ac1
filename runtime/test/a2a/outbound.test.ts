// Sending to A2A agents (docs/a2a.md#sending-to-an-a2a-agent): an application posts to its
// runtime's local API with `to: {a2a: <card URL>}`; the ifp-runtime command (a real process, a
// real nats-server, real TLS) fetches the card, sends, follows the task and hands the answer
// back. The agents on the other side: the official A2A JS SDK's server (@a2a-js/sdk
// DefaultRequestHandler, InMemoryTaskStore, its Express handlers), another ifp-runtime's A2A
// face, and scripted servers for what no honest agent answers.
import { spawn } from "node:child_process";
import { createPublicKey } from "node:crypto";
import { createServer, type Server } from "node:https";
import type { AddressInfo } from "node:net";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { AgentEvent, type AgentExecutor, DefaultRequestHandler, InMemoryTaskStore } from "@a2a-js/sdk/server";
import { agentCardHandler, jsonRpcHandler, restHandler, UserBuilder } from "@a2a-js/sdk/server/express";
import express from "express";
import { jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { NatsServer } from "../../../e2e/support/nats.ts";
import { waitFor } from "../../../e2e/support/ports.ts";
import type { ManagedProcess } from "../../../e2e/support/process.ts";
import pino from "pino";
import { signCard } from "../../src/a2a/card.ts";
import { A2aPeers, peerReplyId, peerTokenFile } from "../../src/a2a/peer.ts";
import { LocalApiClient } from "../../src/client/local.ts";
import { HttpClient } from "../../src/net/http-client.ts";
import { TargetPolicy } from "../../src/net/targets.ts";
import { verifyRequest } from "../../src/protocol/http-signatures.ts";
import { spawnRuntime } from "../support/a2a-harness.ts";
import { runAgent, startHandler, type Tls, withNatsAndTls } from "../support/agent-harness.ts";
import {
  identity,
  LOOPBACK_TARGETS,
  peerOf,
  signed,
  tempDir,
  writeAgentManifest,
  writeKey,
} from "../support/fixtures.ts";
import { onFreePorts } from "../support/free-ports.ts";
import { record, send, untilState } from "../support/outbox-harness.ts";
import { consumerSettled, consumerSettledAt, handOffsSettled } from "../support/probes.ts";
import { agentNames } from "../../src/contract/agent-names.ts";

let nats: NatsServer;
let tls: Tls;
withNatsAndTls((n, t) => {
  nats = n;
  tls = t;
});

const sender = identity("a2a-sender");
const cardKey = identity("https://localhost/card-signer");
const PEER_TOKEN = "sdk-agent-token-0123456789abcdef";

let runtime: ManagedProcess;
let startSender: () => Promise<void>;
let handler: Awaited<ReturnType<typeof startHandler>>;
let localApi: string;
let sdk: {
  server: Server;
  base: string;
  requests: { path: string; headers: Record<string, unknown>; body: any }[];
  down(): Promise<void>;
  up(): Promise<void>;
};

const part = (text: string) => ({
  content: { $case: "text" as const, value: text },
  metadata: undefined,
  filename: "",
  mediaType: "",
});
const agentMessage = (id: string, contextId: string, taskId: string, text: string) =>
  ({
    messageId: id,
    contextId,
    taskId,
    role: 2,
    parts: [part(text)],
    metadata: undefined,
    extensions: [],
    referenceTaskIds: [],
  }) as never;

/** Whether the sender has read task `taskId` from the SDK agent (GetTask, over JSON-RPC or HTTP+JSON). */
const askedAfter = (taskId: string) =>
  sdk.requests.some(
    (q) => (q.body?.method === "GetTask" && q.body?.params?.id === taskId) || q.path.endsWith(`/tasks/${taskId}`),
  );

/** The SDK agent: what it does depends on the text it gets. */
const executor: AgentExecutor = {
  async execute(ctx, bus) {
    const p = ctx.userMessage.parts[0] as { content?: { $case: string; value: unknown } };
    const text = p?.content?.$case === "text" ? String(p.content.value) : "";
    const { taskId, contextId } = ctx;
    if (text.startsWith("message:")) {
      bus.publish(AgentEvent.message(agentMessage(`m-${taskId}`, contextId, "", `You said ${text.slice(8)}`)));
      bus.finished();
      return;
    }
    const task = ctx.task ?? {
      id: taskId,
      contextId,
      status: { state: 1, message: undefined, timestamp: undefined },
      artifacts: [],
      history: [ctx.userMessage],
      metadata: undefined,
    };
    bus.publish(AgentEvent.task(task as never));
    const status = (state: number, message?: unknown) =>
      bus.publish(
        AgentEvent.statusUpdate({
          taskId,
          contextId,
          status: { state, message, timestamp: undefined },
          metadata: undefined,
        } as never),
      );
    if (text.startsWith("forever")) {
      status(2); // WORKING, and never more
      return;
    }
    if (text.startsWith("city?")) {
      status(6, agentMessage(`q-${taskId}`, contextId, taskId, "Which city?")); // INPUT_REQUIRED
      bus.finished();
      return;
    }
    // The test agent's work ends once the sender has asked after the task (GetTask) and found it
    // WORKING: the sender is seen to follow a task that was not done when SendMessage answered.
    await waitFor(`the sender to ask after task ${taskId}`, () => askedAfter(taskId), 30_000);
    bus.publish(
      AgentEvent.artifactUpdate({
        taskId,
        contextId,
        artifact: {
          artifactId: "forecast",
          name: "forecast",
          description: "",
          parts: [
            {
              content: { $case: "data", value: { city: text, sky: "clear" } },
              metadata: undefined,
              filename: "",
              mediaType: "application/json",
            },
          ],
          metadata: undefined,
          extensions: [],
        },
        append: false,
        lastChunk: true,
        metadata: undefined,
      } as never),
    );
    status(3, agentMessage(`done-${taskId}`, contextId, taskId, `Weather for ${text}: clear`)); // COMPLETED
    bus.finished();
  },
  async cancelTask() {},
};

/** A signed card (the way the A2A face signs its own), optionally changed after signing. */
async function signedCard(base: string, rpcUrl: string, tamper = false, jwksBase = base) {
  const card = {
    name: "signed-sdk-agent",
    description: "An agent whose card is signed",
    supportedInterfaces: [{ url: rpcUrl, protocolBinding: "JSONRPC", protocolVersion: "1.0" }],
    version: "1.0.0",
    capabilities: { streaming: false },
    defaultInputModes: ["text/plain"],
    defaultOutputModes: ["text/plain"],
    skills: [],
  };
  const signature = await signCard(card, cardKey.signing, `${jwksBase}/signed/jwks.json`);
  return { ...card, ...(tamper ? { name: "someone else" } : {}), signatures: [signature] };
}

async function startSdkAgent(): Promise<typeof sdk> {
  const app = express();
  const server = createServer({ cert: tls.cert, key: tls.key }, app);
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const { port } = server.address() as AddressInfo;
  const base = `https://localhost:${port}`;
  const card = {
    name: "sdk-agent",
    description: "The A2A JS SDK's server",
    supportedInterfaces: [
      { url: `${base}/grpc`, protocolBinding: "GRPC", tenant: "", protocolVersion: "1.0" },
      { url: `${base}/rpc`, protocolBinding: "JSONRPC", tenant: "", protocolVersion: "1.0" },
      { url: `${base}/rest`, protocolBinding: "HTTP+JSON", tenant: "", protocolVersion: "1.0" },
    ],
    version: "1.0.0",
    capabilities: { streaming: true, pushNotifications: false, extensions: [], extendedAgentCard: false },
    securitySchemes: {},
    securityRequirements: [],
    defaultInputModes: ["text/plain"],
    defaultOutputModes: ["text/plain"],
    skills: [],
    signatures: [],
  };
  const handler = new DefaultRequestHandler(card as never, new InMemoryTaskStore(), executor);
  const requests: typeof sdk.requests = [];
  app.use((req, _res, next) => {
    requests.push({ path: req.path, headers: req.headers, body: undefined });
    next();
  });
  app.use("/.well-known/agent-card.json", agentCardHandler({ agentCardProvider: handler }));
  app.get("/rest-card.json", (_req, res) => {
    res.json({
      ...card,
      supportedInterfaces: [{ url: `${base}/rest`, protocolBinding: "HTTP+JSON", protocolVersion: "1.0" }],
    });
  });
  app.use("/rpc", express.raw({ type: "*/*" }), (req, _res, next) => {
    const raw = req.body as Buffer;
    requests.at(-1)!.body = JSON.parse(raw.toString());
    void verifyRequest({ method: req.method, url: `${base}/rpc`, headers: req.headers, body: raw }, async () =>
      createPublicKey(sender.signing.privateKey),
    ).then(
      () => Object.assign(requests.at(-1)!, { signatureVerified: true }),
      (err: Error) => Object.assign(requests.at(-1)!, { signatureVerified: err.message }),
    );
    req.body = JSON.parse(raw.toString());
    next();
  });
  app.use("/rpc", jsonRpcHandler({ requestHandler: handler, userBuilder: UserBuilder.noAuthentication }));
  app.use("/rest", restHandler({ requestHandler: handler, userBuilder: UserBuilder.noAuthentication }));
  // What no honest agent answers.
  app.get("/big/agent-card.json", (_req, res) => {
    res.json({ ...card, description: "x".repeat(70 * 1024) });
  });
  app.get("/nointerface/agent-card.json", (_req, res) => {
    res.json({
      ...card,
      supportedInterfaces: [
        { url: `${base}/grpc`, protocolBinding: "GRPC", protocolVersion: "1.0" },
        { url: `${base}/rpc`, protocolBinding: "JSONRPC", protocolVersion: "0.3" },
        { url: `http://localhost:${port}/rpc`, protocolBinding: "JSONRPC", protocolVersion: "1.0" },
      ],
    });
  });
  app.get("/garbage/agent-card.json", (_req, res) => {
    res.json({
      ...card,
      supportedInterfaces: [{ url: `${base}/garbage/rpc`, protocolBinding: "JSONRPC", protocolVersion: "1.0" }],
    });
  });
  app.post("/garbage/rpc", (_req, res) => {
    res.type("text/html").send("<html>upstream hiccup</html>");
  });
  app.get("/failing/agent-card.json", (_req, res) => {
    res.json({
      ...card,
      supportedInterfaces: [{ url: `${base}/failing/rpc`, protocolBinding: "JSONRPC", protocolVersion: "1.0" }],
    });
  });
  app.post("/failing/rpc", (_req, res) => {
    res.status(503).json({ error: "down for maintenance" });
  });
  app.get("/signed/agent-card.json", async (_req, res) => {
    res.json(await signedCard(base, `${base}/rpc`));
  });
  app.get("/tampered/agent-card.json", async (_req, res) => {
    res.json(await signedCard(base, `${base}/rpc`, true));
  });
  app.get("/foreign-jku/agent-card.json", async (_req, res) => {
    // Signed, with its JWKS named on another origin (the same server by its IP address).
    res.json(await signedCard(base, `${base}/rpc`, false, `https://127.0.0.1:${port}`));
  });
  app.get("/locked/agent-card.json", (_req, res) => {
    res.json({
      ...card,
      supportedInterfaces: [{ url: `${base}/locked/rpc`, protocolBinding: "JSONRPC", protocolVersion: "1.0" }],
    });
  });
  app.post("/locked/rpc", (_req, res) => {
    res.status(401).json({ jsonrpc: "2.0", id: 1, error: { code: -32600, message: "who are you?" } });
  });
  app.get("/signed/jwks.json", (_req, res) => {
    const jwk = createPublicKey(cardKey.signing.privateKey).export({ format: "jwk" });
    res.json({ keys: [{ ...jwk, kid: `${cardKey.agentId}#${cardKey.keyId}`, alg: "EdDSA" }] });
  });
  return {
    server,
    base,
    requests,
    /** Stop answering (connections refused), and answer again on the same port. */
    down: async () => {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    },
    up: () => new Promise<void>((r) => server.listen(port, "127.0.0.1", r)),
  };
}

beforeAll(async () => {
  handler = await startHandler();
  sdk = await startSdkAgent();
  const dir = tempDir("ifp-a2a-out-");
  const tokens = join(dir, "a2a-peer-tokens");
  writeFileSync(tokens, `${sdk.base}/.well-known/agent-card.json/ ${PEER_TOKEN}\n`);
  writeAgentManifest(dir, {
    agentId: sender.agentId,
    handler: { url: handler.url },
    outbound: { backoff: ["300ms"], retryFor: "10s", resiliency: { failureThreshold: 3, coolDown: "1s" } },
  });
  // Each start on ports chosen then (nothing names them but `localApi`), so that a restart
  // never finds one taken by another test's server while the runtime was down.
  startSender = () =>
    onFreePorts(["https", "localApi"], async ({ https: port, localApi: localPort }) => {
      runtime = await spawnRuntime({
        name: "ifp-runtime agent (a2a sender)",
        dir,
        keyFile: writeKey(dir, sender),
        tls,
        natsUrl: nats.url,
        port,
        localApiPort: localPort,
        args: ["--a2a-peer-token-file", tokens],
      });
      localApi = `http://127.0.0.1:${localPort}`;
    });
  await startSender();
}, 60_000);

afterAll(async () => {
  await runtime?.stop();
  await handler?.close();
  await new Promise((r) => sdk?.server.close(r));
});

/**
 * `then()`, called at once at the first NAK that the sender consumer sends the server from now on
 * for the outbox message `id`, asking for it again in more than `minMs` (seen on its subject,
 * $JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>…, with the delay in nanoseconds); resolves
 * once what it started has.
 */
async function atNak(id: string, minMs: number, then: () => Promise<unknown>, timeoutMs = 30_000): Promise<void> {
  const n = agentNames(sender.agentId);
  const nc = await connect({ servers: nats.url });
  try {
    const jsm = await jetstreamManager(nc);
    const { state } = await jsm.streams.info(n.outboxStream);
    let seq = state.last_seq;
    while (seq >= state.first_seq) {
      const m = await jsm.streams.getMessage(n.outboxStream, { seq }).catch(() => undefined);
      if (m?.json<{ headers: { message_id: string } }>().headers.message_id === id) break;
      seq--;
    }
    if (seq < state.first_seq) throw new Error(`${id} is not in ${n.outboxStream}`);
    let done = false;
    await new Promise<unknown>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no NAK of ${id} for more than ${minMs} ms`)), timeoutMs);
      nc.subscribe("$JS.ACK.>", {
        callback: (_err, m) => {
          const t = m.subject.split(".");
          const at = t.findIndex((token, i) => token === n.outboxStream && t[i + 1] === n.senderConsumer);
          const nak = /^-NAK (\{.*\})$/.exec(m.string());
          if (at < 0 || Number(t[at + 3]) !== seq || !nak) return;
          if (Number(JSON.parse(nak[1]!).delay) / 1e6 <= minMs) return;
          if (done) return;
          done = true;
          clearTimeout(timer);
          resolve(then());
        },
      });
    });
  } finally {
    await nc.close();
  }
}

/**
 * The record of the outbound message `id` once delivered and its task followed to completed:
 * delivered when SendMessage answered, which may be before the task ended.
 */
const untilCompleted = (id: string) =>
  waitFor(`${id} delivered and its task completed`, async () => {
    const r = await record(localApi, id);
    return r?.state === "delivered" && r.recipients[0].a2a?.state === "TASK_STATE_COMPLETED" ? r : undefined;
  });

/** Whether the SDK's agent got the message `id` (since request number `from`). */
const sentToSdk = (id: string, from = 0) =>
  sdk.requests.slice(from).some((q) => q.body?.params?.message?.messageId === id);

/** The hand-off answering the outbound message `id`. */
async function answerTo(id: string, timeoutMs = 20_000) {
  let found: (typeof handler.received)[number] | undefined;
  await waitFor(
    `the answer to ${id}`,
    async () => {
      found = handler.received.find((r) => r.body.headers.thread?.in_reply_to === id);
      return found !== undefined;
    },
    timeoutMs,
  );
  return found!;
}

describe("sending to the A2A JS SDK's server", () => {
  it("sends over JSON-RPC, follows the task to completed and hands its message and artifact back as a reply", async () => {
    const card = `${sdk.base}/.well-known/agent-card.json`;
    const sent = await send(localApi, { to: { a2a: card }, text: "Lisbon", conversation_id: "conv:weather" });
    expect(sent.status).toBe(202);
    const id = sent.body.message_id;
    expect(sent.body.message.headers.to).toEqual([{ agent: `a2a:${card}` }]);
    const done = await untilCompleted(id);
    const r = done.recipients[0];
    expect(r).toMatchObject({
      agent: `a2a:${card}`,
      state: "delivered",
      via: `${sdk.base}/rpc`,
      a2a: { interface: `${sdk.base}/rpc`, binding: "JSONRPC", card_signed: false, state: "TASK_STATE_COMPLETED" },
    });
    expect(r.decision).toMatch(/^task .+ TASK_STATE_COMPLETED$/);
    const answer = await answerTo(id);
    expect(answer.headers["ifp-sender"]).toBe(`a2a:${card}`);
    expect(answer.headers["ifp-auth-source"]).toBe("a2a-peer:card");
    expect(answer.body.headers).toMatchObject({
      message_id: peerReplyId(id),
      from: { agent: `a2a:${card}`, display: "sdk-agent" },
      to: [{ agent: sender.agentId }],
      conversation_id: "conv:weather",
      phase: "reply",
      thread: { in_reply_to: id },
      extensions: {
        a2a: {
          origin: "a2a-peer",
          task_id: r.a2a.task_id,
          context_id: r.a2a.context_id,
          state: "TASK_STATE_COMPLETED",
          artifact_ids: ["forecast"],
        },
      },
    });
    expect(answer.body.body.text).toBe("Weather for Lisbon: clear");
    expect(answer.body.body.parts).toEqual([
      { content_type: "application/json", name: "forecast", content: { city: "Lisbon", sky: "clear" } },
    ]);
    // What the SDK got: messageId the IFP message_id, A2A-Version 1.0, signed as the A2A face verifies.
    const call = sdk.requests.find((q) => q.body?.params?.message?.messageId === id)!;
    expect(call.body).toMatchObject({
      method: "SendMessage",
      params: { message: { role: "ROLE_USER", parts: [{ text: "Lisbon" }] } },
    });
    expect(call.headers["a2a-version"]).toBe("1.0");
    expect(call.headers.authorization).toBe(`Bearer ${PEER_TOKEN}`);
    expect(call.headers["signature-input"]).toContain(`keyid="${sender.agentId}#key-1"`);
    await waitFor("the signature checked", async () => "signatureVerified" in call, 5_000);
    expect((call as { signatureVerified?: unknown }).signatureVerified).toBe(true);
  });

  it("takes the recipient's id in a list as well: a2a: and the card's URL", async () => {
    const card = `${sdk.base}/.well-known/agent-card.json`;
    const sent = await send(localApi, { to: [`a2a:${card}`], text: "message:listed" });
    expect(sent.status).toBe(202);
    const done = await untilState(localApi, sent.body.message_id, "delivered");
    expect(done.recipients).toMatchObject([{ agent: `a2a:${card}`, state: "delivered", a2a: { state: "MESSAGE" } }]);
    expect((await answerTo(sent.body.message_id)).body.body.text).toBe("You said listed");
  });

  it("hands a direct message answer back, and uses HTTP+JSON when the card offers only that", async () => {
    const sent = await send(localApi, { to: { a2a: `${sdk.base}/rest-card.json` }, text: "message:hi" });
    const done = await untilState(localApi, sent.body.message_id, "delivered");
    expect(done.recipients[0].a2a).toMatchObject({ binding: "HTTP+JSON", state: "MESSAGE" });
    // No token line names this card or its origin: none is presented (the signature still is).
    const rest = sdk.requests.find((q) => q.path === "/rest/message:send")!;
    expect(rest.headers.authorization).toBeUndefined();
    expect(rest.headers["signature-input"]).toContain(sender.agentId);
    const answer = await answerTo(sent.body.message_id);
    expect(answer.body.body.text).toBe("You said hi");
    expect(answer.body.headers.extensions.a2a.state).toBe("MESSAGE");
  });

  it("stops at input-required, and the application's reply continues the same task", async () => {
    const card = `${sdk.base}/.well-known/agent-card.json`;
    const sent = await send(localApi, { to: { a2a: card }, text: "city?" });
    const first = await untilState(localApi, sent.body.message_id, "delivered");
    expect(first.recipients[0].a2a.state).toBe("TASK_STATE_INPUT_REQUIRED");
    const question = await answerTo(sent.body.message_id);
    expect(question.body.body.text).toBe("Which city?");
    // The reply goes back to the A2A agent (the question's sender), into its task.
    const reply = await send(localApi, { in_reply_to: question.body.headers.message_id, text: "Porto" });
    expect(reply.status).toBe(202);
    expect(reply.body.message.headers.to).toEqual([{ agent: `a2a:${card}` }]);
    expect(reply.body.message.headers.extensions.a2a).toEqual({
      context_id: first.recipients[0].a2a.context_id,
      task_id: first.recipients[0].a2a.task_id,
    });
    const second = await untilState(localApi, reply.body.message_id, "delivered");
    expect(second.recipients[0].a2a).toMatchObject({
      task_id: first.recipients[0].a2a.task_id,
      state: "TASK_STATE_COMPLETED",
    });
    expect((await answerTo(reply.body.message_id)).body.body.text).toBe("Weather for Porto: clear");
  });

  it("follows a task that never ends only until the message's ttl, then says so", async () => {
    const sent = await send(localApi, {
      to: { a2a: `${sdk.base}/.well-known/agent-card.json` },
      text: "forever",
      ttl_seconds: 4,
    });
    const t0 = Date.now();
    const done = await untilState(localApi, sent.body.message_id, "delivered", 20_000);
    expect(Date.now() - t0).toBeLessThan(10_000);
    expect(done.recipients[0].a2a.state).toBe("TASK_STATE_WORKING");
    expect(done.recipients[0].decision).toMatch(
      /still TASK_STATE_WORKING after following it for \d+ s; not followed further/,
    );
    const answer = await answerTo(sent.body.message_id);
    expect(answer.body.headers.extensions.a2a.state).toBe("TASK_STATE_WORKING");
  });

  it("verifies a signed card, and refuses one changed after signing, naming why", async () => {
    const good = await send(localApi, { to: { a2a: `${sdk.base}/signed/agent-card.json` }, text: "Oslo" });
    const ok = await untilState(localApi, good.body.message_id, "delivered");
    expect(ok.recipients[0].a2a.card_signed).toBe(true);
    expect((await answerTo(good.body.message_id)).headers["ifp-auth-source"]).toBe("a2a-peer:signed-card");

    const before = sdk.requests.length;
    const bad = await send(localApi, { to: { a2a: `${sdk.base}/tampered/agent-card.json` }, text: "Oslo" });
    const refused = await untilState(localApi, bad.body.message_id, "failed");
    expect(refused.recipients[0].last_error).toMatch(
      /agent card .* is refused: its signature signature 1 .* does not verify/,
    );
    expect(refused.recipients[0].attempts).toBe(1);
    expect(sentToSdk(bad.body.message_id, before)).toBe(false);
  });
});

describe("ifp send --local-api --a2a", () => {
  const IFP = new URL("../../bin/ifp.ts", import.meta.url).pathname;
  const ifp = (...args: string[]) =>
    new Promise<{ status: number | null; stdout: string; stderr: string }>((resolve) => {
      const child = spawn(process.execPath, [IFP, ...args], { stdio: ["ignore", "pipe", "pipe"] });
      let stdout = "";
      let stderr = "";
      child.stdout.on("data", (c: Buffer) => (stdout += c));
      child.stderr.on("data", (c: Buffer) => (stderr += c));
      const timer = setTimeout(() => child.kill("SIGKILL"), 60_000);
      child.on("close", (status) => {
        clearTimeout(timer);
        resolve({ status, stdout, stderr });
      });
    });

  it("queues through the runtime and, with --wait, ends once the A2A agent took it", async () => {
    const card = `${sdk.base}/.well-known/agent-card.json`;
    const r = await ifp("send", "--local-api", localApi, "--a2a", card, "--text", "Madrid", "--wait", "20");
    expect(r.stderr).toContain(`queueing a message to the A2A agent of ${card}`);
    expect(r.status).toBe(0);
    const [queued, record] = r.stdout.trim().split("\n");
    expect(queued).toMatch(/^202 /);
    const id = JSON.parse(queued!.slice(4)).message_id;
    expect(JSON.parse(record!)).toMatchObject({ message_id: id, state: "delivered" });
    expect((await answerTo(id)).body.body.text).toBe("Weather for Madrid: clear");
  });

  it("takes one recipient, and --a2a only through a local API", async () => {
    const both = await ifp("send", "--local-api", localApi, "--a2a", "https://x/c.json", "--to", "bob", "--text", "hi");
    expect(both.status).toBe(2);
    expect(both.stderr).toContain("send takes one recipient: --to AGENT_ID or --a2a CARD_URL");
    const direct = await ifp("send", "--a2a", "https://x/c.json", "--text", "hi");
    expect(direct.status).toBe(2);
    expect(direct.stderr).toContain("--a2a sends through the agent's runtime");
    const plain = await ifp("send", "--local-api", localApi, "--a2a", "http://x/c.json", "--text", "hi");
    expect(plain.status).toBe(1);
    expect(plain.stdout).toMatch(/^400 .*the agent card's URL must be an https URL/);
  });
});

describe("durability", () => {
  it("keeps a message through a runtime killed while the agent is down, and delivers it once after the restart", async () => {
    const card = `${sdk.base}/.well-known/agent-card.json`;
    // The sender reads the card once while the agent is up, and keeps it.
    const first = await send(localApi, { to: { a2a: card }, text: "message:before the outage" });
    await untilState(localApi, first.body.message_id, "delivered");
    await sdk.down();
    try {
      const sent = await send(localApi, { to: { a2a: card }, text: "Rome" });
      expect(sent.status).toBe(202);
      const id = sent.body.message_id;
      const retrying = await untilState(localApi, id, "retrying");
      // The card is kept: the SendMessage is what cannot connect.
      expect(retrying.recipients[0].last_error).toMatch(/^network error: .*ECONNREFUSED/);
      // Killed while the message waits for its next attempt, never during one: a delivery cut
      // short is handed out again only after the sender consumer's ack wait (5 minutes). An
      // attempt ends with its NAK to the server, which names when to come again: the kill comes
      // as soon as a NAK is seen that leaves long enough to kill the runtime in.
      await atNak(id, 150, () => runtime.stop({ signal: "SIGKILL" }));
      await sdk.up();
      await startSender();
      const done = await untilCompleted(id);
      expect(done.recipients[0].a2a.state).toBe("TASK_STATE_COMPLETED");
      expect((await answerTo(id)).body.body.text).toBe("Weather for Rome: clear");
      // Nothing left to send or to hand on: a second SendMessage or answer would have come by now.
      const n = agentNames(sender.agentId);
      await waitFor(
        "the outbox and the hand-offs settled",
        async () =>
          (await consumerSettledAt(nats.url, n.outboxStream, n.senderConsumer)) &&
          (await handOffsSettled(nats.url, sender.agentId)),
        15_000,
      );
      expect(handler.received.filter((r) => r.body.headers.thread?.in_reply_to === id)).toHaveLength(1);
      expect(sdk.requests.filter((q) => q.body?.params?.message?.messageId === id)).toHaveLength(1);
    } finally {
      if (!sdk.server.listening) await sdk.up();
    }
  });
});

describe("the circuit of an A2A agent", () => {
  it("opens while the agent is down, listed under its recipient id, and closes once a probe gets through", async () => {
    const card = `${sdk.base}/.well-known/agent-card.json`;
    const mine = async () =>
      (await new LocalApiClient(localApi).circuits()).circuits.find((c) => c.destination === `a2a:${card}`);
    await sdk.down();
    try {
      const sent = await send(localApi, { to: { a2a: card }, text: "Oslo" });
      expect(sent.status).toBe(202);
      const id = sent.body.message_id;
      const open = await waitFor("the A2A agent's circuit to open", mine, 10_000);
      expect(open).toMatchObject({ state: "open", failures: 3 });
      await sdk.up();
      const done = await untilCompleted(id);
      expect(done.recipients[0].a2a.state).toBe("TASK_STATE_COMPLETED");
      expect(await mine()).toBeUndefined();
    } finally {
      if (!sdk.server.listening) await sdk.up();
    }
  });
});

describe("what no honest A2A agent answers", () => {
  it("refuses a card over the size cap, a card with no usable interface, without sending", async () => {
    const before = sdk.requests.length;
    const big = await send(localApi, { to: { a2a: `${sdk.base}/big/agent-card.json` }, text: "hi" });
    const none = await send(localApi, { to: { a2a: `${sdk.base}/nointerface/agent-card.json` }, text: "hi" });
    const a = await untilState(localApi, big.body.message_id, "failed");
    const b = await untilState(localApi, none.body.message_id, "failed");
    expect(a.recipients[0].last_error).toMatch(
      /agent card at .* is refused: the answer declares \d+ bytes, more than the 65536 allowed$/,
    );
    expect(b.recipients[0].last_error).toMatch(
      /names no usable interface .* GRPC 1\.0 at .*; JSONRPC 0\.3 at .*; JSONRPC 1\.0 at http:\/\//,
    );
    expect(sentToSdk(big.body.message_id, before) || sentToSdk(none.body.message_id, before)).toBe(false);
  });

  it("refuses a signature whose JWKS is on another origin, and a peer answering 401, at the first attempt", async () => {
    const foreign = await send(localApi, { to: { a2a: `${sdk.base}/foreign-jku/agent-card.json` }, text: "hi" });
    const locked = await send(localApi, { to: { a2a: `${sdk.base}/locked/agent-card.json` }, text: "hi" });
    const f = await untilState(localApi, foreign.body.message_id, "failed");
    const l = await untilState(localApi, locked.body.message_id, "failed");
    expect(f.recipients[0].last_error).toMatch(
      /names the JWKS https:\/\/127\.0\.0\.1:\d+\/signed\/jwks\.json, which is not at the card's own origin/,
    );
    expect(sentToSdk(foreign.body.message_id)).toBe(false);
    expect(l.recipients[0]).toMatchObject({
      attempts: 1,
      last_status: 401,
      a2a: { interface: `${sdk.base}/locked/rpc` },
    });
    expect(l.recipients[0].last_error).toBe("SendMessage answered 401 who are you?; a 4xx is never retried");
  });

  it("retries a peer answering garbage or 503, then gives up with the reason", async () => {
    const garbage = await send(localApi, { to: { a2a: `${sdk.base}/garbage/agent-card.json` }, text: "hi" });
    const failing = await send(localApi, { to: { a2a: `${sdk.base}/failing/agent-card.json` }, text: "hi" });
    const g = await untilState(localApi, garbage.body.message_id, "undeliverable", 20_000);
    const f = await untilState(localApi, failing.body.message_id, "undeliverable", 20_000);
    expect(g.recipients[0].attempts).toBeGreaterThan(1);
    expect(g.recipients[0].last_error).toMatch(
      /answer to SendMessage is not JSON .*still failing after the 10 s retry window/,
    );
    expect(f.recipients[0].attempts).toBeGreaterThan(1);
    expect(f.recipients[0].last_error).toMatch(/SendMessage answered 503/);
    expect(sdk.requests.filter((q) => q.path === "/garbage/rpc").length).toBe(g.recipients[0].attempts);
  });

  it("refuses bad input at the local API: a card URL that is not https", async () => {
    const plain = await send(localApi, { to: { a2a: "http://localhost/.well-known/agent-card.json" }, text: "hi" });
    expect(plain.status).toBe(400);
    expect(plain.body.code).toBe("invalid_format");
    const notUrl = await send(localApi, { to: { a2a: "not a url" }, text: "hi" });
    expect(notUrl.status).toBe(400);
    const whole = await send(localApi, {
      headers: { to: [{ agent: "a2a:ftp://x" }], phase: "context" },
      body: { text: "hi" },
    });
    expect(whole.status).toBe(400);
    expect(whole.body.message).toMatch(/an A2A recipient is a2a: and the https URL of its agent card/);
    const extra = await send(localApi, {
      to: { a2a: `${sdk.base}/.well-known/agent-card.json`, agent: "x" },
      text: "hi",
    });
    expect(extra.status).toBe(400);
  });
});

describe("sending to another ifp-runtime's A2A face", () => {
  const peer = identity("a2a-face-agent");
  let face: Awaited<ReturnType<typeof runAgent>>;
  let faceApp: Awaited<ReturnType<typeof startHandler>>;
  let guarded: Awaited<ReturnType<typeof runAgent>>;

  beforeAll(async () => {
    faceApp = await startHandler();
    [face, guarded] = await Promise.all([
      onFreePorts(["https"], ({ https }) =>
        runAgent({
          self: peer,
          natsUrl: nats.url,
          tls,
          port: https,
          spec: {
            baseUrl: `https://localhost:${https}`,
            peers: [peerOf(sender)],
            handler: { url: faceApp.url },
            a2a: { enabled: true, waitFor: "1s" },
          },
        }),
      ),
      // What a user writes who allows no special address (the default): loopback is refused.
      runAgent({
        self: identity("guarded-sender"),
        natsUrl: nats.url,
        tls,
        spec: { network: { allowPrivateTargets: [] } },
      }),
    ]);
  });
  afterAll(async () => {
    await Promise.all([face?.close(), guarded?.close()]);
    await faceApp?.close();
  });

  it("verifies its signed card, is taken at level 2 by its signature, and brings back the application's answer", async () => {
    const port = new URL(face.url).port;
    const card = `https://localhost:${port}/.well-known/agent-card.json`;
    const sent = await send(localApi, { to: { a2a: card }, text: "Are you free on Tuesday?" });
    expect(sent.status).toBe(202);
    // The peer's application gets it as an A2A message from this agent, verified by its key.
    let got: (typeof faceApp.received)[number] | undefined;
    await waitFor("the A2A face's hand-off", async () => {
      got = faceApp.received.find((r) => r.body.headers.extensions?.a2a?.message_id === sent.body.message_id);
      return got !== undefined;
    });
    expect(got!.headers["ifp-sender"]).toBe(sender.agentId);
    expect(got!.headers["ifp-auth-level"]).toBe("2");
    expect(got!.body.body.text).toBe("Are you free on Tuesday?");
    // Its application answers through its local API: the task completes with the answer.
    const res = await fetch(`${face.localApiUrl}/outbox`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ in_reply_to: got!.body.headers.message_id, text: "Tuesday works" }),
    });
    expect(res.status).toBe(202);
    const done = await untilState(localApi, sent.body.message_id, "delivered");
    expect(done.recipients[0].a2a).toMatchObject({
      binding: "JSONRPC",
      card_signed: true,
      state: "TASK_STATE_COMPLETED",
    });
    const answer = await answerTo(sent.body.message_id);
    expect(answer.body.body.text).toBe("Tuesday works");
    expect(answer.headers["ifp-auth-level"]).toBe("1");
  });

  it("sends a retry with the same messageId, which the face takes as the same message: one task, one hand-off", async () => {
    const port = new URL(face.url).port;
    const card = `https://localhost:${port}/.well-known/agent-card.json`;
    const handedOff: Record<string, unknown>[] = [];
    const http = new HttpClient({
      caFile: tls.files.ca,
      targets: new TargetPolicy(LOOPBACK_TARGETS.allowPrivateTargets),
    });
    const peers = new A2aPeers({
      http,
      signing: sender.signing,
      handOff: async (m) => void handedOff.push(m),
      log: pino({ level: "silent" }),
      limits: { followForMs: 2_000 },
    });
    try {
      const message = signed(sender, `a2a:${card}`, { phase: "context" }, "Lunch on Friday?");
      const first = await peers.deliver(message, `a2a:${card}`);
      const again = await peers.deliver(message, `a2a:${card}`);
      expect(first).toMatchObject({ kind: "delivered", a2a: { state: "TASK_STATE_SUBMITTED" } });
      expect(again.kind).toBe("delivered");
      expect((again as { a2a: { task_id: string } }).a2a.task_id).toBe(
        (first as { a2a: { task_id: string } }).a2a.task_id,
      );
      // The face handed on what it stored, and every hand-off is acknowledged: a second one would be among them.
      const n = agentNames(peer.agentId);
      await waitFor(
        "the face's hand-offs settled",
        async () =>
          faceApp.received.some((r) => r.body.headers.extensions?.a2a?.message_id === message.headers.message_id) &&
          (await consumerSettled(face.nats.jsm, n.inboxStream, n.handlerConsumer)),
        15_000,
      );
      const got = faceApp.received.filter(
        (r) => r.body.headers.extensions?.a2a?.message_id === message.headers.message_id,
      );
      expect(got).toHaveLength(1);
      expect(handedOff).toHaveLength(2);
    } finally {
      await http.close();
    }
  });

  it("refuses a card on loopback when spec.network.allowPrivateTargets does not allow it, without a request", async () => {
    const before = sdk.requests.length;
    const sent = await send(guarded.localApiUrl, {
      to: { a2a: `${sdk.base}/.well-known/agent-card.json` },
      text: "hi",
    });
    expect(sent.status).toBe(202);
    const done = await untilState(guarded.localApiUrl, sent.body.message_id, "failed");
    expect(done.recipients[0].last_error).toMatch(
      /agent card at .* is refused as a target: localhost resolves to .*not allowed by spec\.network\.allowPrivateTargets/,
    );
    expect(sdk.requests.length).toBe(before);
  });
});

describe("the peer token file", () => {
  it("picks a card's own line, else its origin's, and refuses short or malformed lines", () => {
    const dir = tempDir("ifp-a2a-tokens-");
    const file = join(dir, "tokens");
    writeFileSync(
      file,
      [
        "https://a.example/.well-known/agent-card.json card-token-0123456789",
        "https://a.example origin-token-0123456789",
        "https://b.example short",
        "not-a-url some-token-0123456789",
        "https://c.example token-0123456789abcdef extra",
      ].join("\n"),
    );
    const errors: unknown[] = [];
    const log = pino({ level: "error" }, { write: (l: string) => void errors.push(JSON.parse(l)) });
    const bearer = peerTokenFile(file, log);
    expect(bearer("https://a.example/.well-known/agent-card.json")).toBe("card-token-0123456789");
    expect(bearer("https://a.example/other/card.json")).toBe("origin-token-0123456789");
    expect(bearer("https://a.example:8443/.well-known/agent-card.json")).toBeUndefined();
    expect(bearer("https://b.example/.well-known/agent-card.json")).toBeUndefined();
    expect(bearer("https://c.example/.well-known/agent-card.json")).toBeUndefined();
    expect(errors.length).toBeGreaterThan(0);
  });
});
