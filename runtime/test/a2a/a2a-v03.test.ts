// A2A 0.3 clients on the JSON-RPC endpoint (docs/a2a.md#versions): the official A2A JS SDK of
// the 0.3 line (`@a2a-js/sdk` 0.3.14, its A2AClient, which sends no A2A-Version) against the
// ifp-runtime command over real TLS and a real nats-server, the test's application answering
// through the local API; the same task store as 1.0, and the same refusals.
import { spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { A2AClient } from "@a2a-js/sdk-0.3/client";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { NatsServer } from "../../../e2e/support/nats.ts";
import { httpsRequest } from "../../../e2e/support/https.ts";
import { toolPath } from "../../../e2e/tools/tools.ts";
import { waitFor } from "../../../e2e/support/ports.ts";
import type { ManagedProcess } from "../../../e2e/support/process.ts";
import { fetchWith, handedOffTo, localPostTo, spawnRuntime } from "../support/a2a-harness.ts";
import { startHandler, type Tls, withNatsAndTls } from "../support/agent-harness.ts";
import { identity, tempDir, writeAgentManifest, writeKey } from "../support/fixtures.ts";
import { onFreePorts } from "../support/free-ports.ts";

let nats: NatsServer;
let tls: Tls;
withNatsAndTls((n, t) => {
  nats = n;
  tls = t;
});

const self = identity("a2a-v03-agent");
const TOKEN = "a2a-v03-token-0123456789abcdef";
const OTHER_TOKEN = "a2a-v03-other-0123456789abcdef";
const MAX_BYTES = 16 * 1024;

let runtime: ManagedProcess;
let handler: Awaited<ReturnType<typeof startHandler>>;
let base: string;
let localApi: string;

beforeAll(async () => {
  handler = await startHandler();
  const dir = tempDir("ifp-a2a-v03-");
  runtime = await onFreePorts(["https", "localApi"], async ({ https: port, localApi: localPort }) => {
    base = `https://localhost:${port}`;
    localApi = `http://127.0.0.1:${localPort}`;
    writeAgentManifest(dir, {
      agentId: self.agentId,
      displayName: "A2A 0.3 test agent",
      baseUrl: base,
      capabilities: [{ name: "weather.forecast", description: "Tells the weather" }],
      handler: { url: handler.url, timeout: "3s" },
      // Push notification URLs on loopback may be registered (nothing listens there).
      network: { allowPrivateTargets: ["127.0.0.0/8"] },
      inbox: { maxMessageBytes: MAX_BYTES, rateLimit: { perSenderPerMinute: 5000, perAddressPerMinute: 5000 } },
      a2a: { enabled: true, authentication: { bearerTokenSecret: { name: "a2a-tokens" } }, waitFor: "5s" },
    });
    const keyFile = writeKey(dir, self);
    const spawn = { name: "ifp-runtime agent (a2a 0.3)", dir, keyFile, tls, port, localApiPort: localPort };
    return spawnRuntime({ ...spawn, natsUrl: nats.url, tokens: [TOKEN, OTHER_TOKEN] });
  });
}, 60_000);

afterAll(async () => {
  await runtime?.stop();
  await handler?.close();
});

/** The 0.3 SDK's client, found through the agent card (its `url`). */
const client03 = (token = TOKEN) =>
  A2AClient.fromCardUrl(`${base}/.well-known/agent-card.json`, { fetchImpl: fetchWith(tls.ca, token) });

const message03 = (text: string, extra: Record<string, unknown> = {}) => ({
  kind: "message" as const,
  messageId: randomUUID(),
  role: "user" as const,
  parts: [{ kind: "text" as const, text }],
  ...extra,
});

const handedOff = (taskId: string) => handedOffTo(handler, taskId);

const localPost = (path: string, body: unknown) => localPostTo(localApi, path, body);

/** A raw JSON-RPC POST; `version` the A2A-Version header, none by default (0.3). */
async function rpc(body: unknown, opts: { version?: string; token?: string | null } = {}) {
  const res = await httpsRequest(`${base}/a2a/v1`, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      ...(opts.version ? { "a2a-version": opts.version } : {}),
      ...(opts.token === null ? {} : { authorization: `Bearer ${opts.token ?? TOKEN}` }),
    },
    body: typeof body === "string" ? body : JSON.stringify(body),
    ca: tls.ca,
  });
  return { status: res.status, body: res.text ? res.json() : undefined };
}

const call = (method: string, params: unknown, id: number | string = 1) => ({ jsonrpc: "2.0", id, method, params });

describe("an A2A 0.3 client (the official JS SDK 0.3)", () => {
  it("finds the JSON-RPC endpoint in the card: its url, preferredTransport and a 0.3 interface", async () => {
    const card = (await (await client03()).getAgentCard()) as any;
    expect(card).toMatchObject({ url: `${base}/a2a/v1`, preferredTransport: "JSONRPC", protocolVersion: "0.3.0" });
    expect(card.supportedInterfaces).toContainEqual({
      url: `${base}/a2a/v1`,
      protocolBinding: "JSONRPC",
      protocolVersion: "0.3",
    });
    // A 1.0 client asks for 1.0's card, which has none of 0.3's fields; another version is 400.
    const v10 = await httpsRequest(`${base}/.well-known/agent-card.json`, {
      headers: { "a2a-version": "1.0" },
      ca: tls.ca,
    });
    expect(v10.json()).not.toHaveProperty("url");
    expect(v10.headers.vary).toMatch(/a2a-version/);
    const byQuery = await httpsRequest(`${base}/.well-known/agent-card.json?A2A-Version=1.0`, { ca: tls.ca });
    expect(byQuery.text).toBe(v10.text);
    // An empty A2A-Version is 0.3 (section 3.6.2).
    const empty = await httpsRequest(`${base}/.well-known/agent-card.json`, {
      headers: { "a2a-version": "" },
      ca: tls.ca,
    });
    expect(empty.json()).toMatchObject({ url: `${base}/a2a/v1`, protocolVersion: "0.3.0" });
    const other = await httpsRequest(`${base}/.well-known/agent-card.json`, {
      headers: { "a2a-version": "9" },
      ca: tls.ca,
    });
    expect(other.status).toBe(400);
    expect(other.json().error).toMatchObject({ code: 400, details: [{ reason: "VERSION_NOT_SUPPORTED" }] });
  });

  it("sends a message, gets the task with the application's answer in 0.3's shapes, and the same task is 1.0's", async () => {
    const client = await client03();
    const sent = (await client.sendMessage({
      message: message03("hello from 0.3", {
        parts: [
          { kind: "text", text: "hello from 0.3" },
          { kind: "data", data: { city: "Oslo" } },
          { kind: "file", file: { uri: "https://example.org/a.png", mimeType: "image/png", name: "a.png" } },
        ],
      }),
      configuration: { blocking: false, acceptedOutputModes: ["text/plain"] },
    })) as any;
    expect(sent.error).toBeUndefined();
    const task = sent.result;
    expect(task).toMatchObject({ kind: "task", status: { state: "submitted" } });
    expect(task.history[0]).toMatchObject({
      kind: "message",
      role: "user",
      parts: [{ kind: "text" }, { kind: "data" }, { kind: "file" }],
    });
    const handed = await handedOff(task.id);
    expect(handed.body.body.text).toBe("hello from 0.3");
    expect(handed.body.body.parts).toEqual([
      { content_type: "application/json", content: { city: "Oslo" } },
      { content_type: "image/png", name: "a.png", content: "https://example.org/a.png" },
    ]);
    await localPost(`/a2a/tasks/${task.id}`, {
      artifact: { name: "forecast", parts: [{ data: [1, 2] }, { text: "sunny" }] },
    });
    await localPost("/outbox", {
      in_reply_to: handed.body.headers.message_id,
      to: handed.body.headers.from.agent,
      phase: "response",
      text: "sunny in Oslo",
    });
    const got = ((await client.getTask({ id: task.id })) as any).result;
    expect(got).toMatchObject({
      kind: "task",
      id: task.id,
      contextId: task.contextId,
      status: {
        state: "completed",
        message: { kind: "message", role: "agent", parts: [{ kind: "text", text: "sunny in Oslo" }] },
      },
    });
    // A data part 0.3 cannot carry as an object goes wrapped, as the official SDKs wrap it.
    expect(got.artifacts[0].parts).toEqual([
      { kind: "data", data: { value: [1, 2] }, metadata: { data_part_compat: true } },
      { kind: "text", text: "sunny" },
    ]);
    // One store: the 1.0 binding sees the same task, in 1.0's form.
    const v10 = await rpc(call("GetTask", { id: task.id }), { version: "1.0" });
    expect(v10.body.result).toMatchObject({ id: task.id, status: { state: "TASK_STATE_COMPLETED" } });
    expect(v10.body.result.history[0].role).toBe("ROLE_USER");
    // A repeated messageId is the same task, whichever version repeats it.
    const again = (await client.sendMessage({
      message: { ...task.history[0], taskId: undefined, contextId: undefined },
      configuration: { blocking: false },
    })) as any;
    expect(again.result.id).toBe(task.id);
  });

  it("streams a message: the task, then kind-tagged artifact and status updates, the last one final", async () => {
    const client = await client03();
    const events: any[] = [];
    for await (const e of client.sendMessageStream({ message: message03("stream it") })) {
      events.push(e);
      if (events.length === 1) {
        const id = (e as any).id;
        await handedOff(id);
        await localPost(`/a2a/tasks/${id}`, { state: "TASK_STATE_WORKING", artifact: { name: "n", text: "part" } });
        await localPost(`/a2a/tasks/${id}`, { state: "TASK_STATE_COMPLETED", message: { text: "done" } });
      }
    }
    expect(events[0]).toMatchObject({ kind: "task", status: { state: "submitted" } });
    const kinds = events.slice(1).map((e) => e.kind);
    expect(kinds).toContain("artifact-update");
    expect(events.find((e) => e.kind === "artifact-update").artifact.parts).toEqual([{ kind: "text", text: "part" }]);
    const last = events.at(-1);
    expect(last).toMatchObject({ kind: "status-update", final: true, status: { state: "completed" } });
    expect(events.filter((e) => e.kind === "status-update" && e.final)).toHaveLength(1);
  });

  it("resubscribes to a task, cancels it (the stream ends with canceled), and a second cancel is -32002", async () => {
    const client = await client03();
    const task = (
      (await client.sendMessage({ message: message03("cancel me"), configuration: { blocking: false } })) as any
    ).result;
    const events: any[] = [];
    const following = (async () => {
      for await (const e of client.resubscribeTask({ id: task.id })) events.push(e);
    })();
    await waitFor("the resubscription's first event", async () => events.length > 0);
    const canceled = ((await client.cancelTask({ id: task.id })) as any).result;
    expect(canceled).toMatchObject({ kind: "task", id: task.id, status: { state: "canceled" } });
    await following;
    expect(events.at(-1)).toMatchObject({ kind: "status-update", final: true, status: { state: "canceled" } });
    const second = (await client.cancelTask({ id: task.id })) as any;
    expect(second.error).toMatchObject({ code: -32002 });
    // tasks/resubscribe of a finished task: unsupported, as SubscribeToTask's.
    expect((await rpc(call("tasks/resubscribe", { id: task.id }))).body.error).toMatchObject({ code: -32004 });
  });

  it("registers, reads, lists and deletes push notification configs in 0.3's shape", async () => {
    const client = await client03();
    const hook = {
      id: "hook-1",
      url: "https://127.0.0.1:9/hook",
      token: "tok-1",
      authentication: { schemes: ["Bearer"], credentials: "secret-1" },
    };
    const task = ((await client.sendMessage({ message: message03("push"), configuration: { blocking: false } })) as any)
      .result;
    const set = (await client.setTaskPushNotificationConfig({
      taskId: task.id,
      pushNotificationConfig: hook,
    })) as any;
    expect(set.result).toEqual({
      taskId: task.id,
      pushNotificationConfig: hook,
    });
    const got = (await client.getTaskPushNotificationConfig({
      id: task.id,
      pushNotificationConfigId: "hook-1",
    } as any)) as any;
    expect(got.result.pushNotificationConfig.url).toBe("https://127.0.0.1:9/hook");
    const listed = (await client.listTaskPushNotificationConfig({ id: task.id })) as any;
    expect(listed.result.map((c: any) => c.pushNotificationConfig.id)).toEqual(["hook-1"]);
    const deleted = (await client.deleteTaskPushNotificationConfig({
      id: task.id,
      pushNotificationConfigId: "hook-1",
    })) as any;
    expect(deleted.result).toBeNull();
    expect(((await client.listTaskPushNotificationConfig({ id: task.id })) as any).result).toEqual([]);
    // The metadata address is refused as in 1.0, and nothing is kept.
    const refused = (await client.setTaskPushNotificationConfig({
      taskId: task.id,
      pushNotificationConfig: { url: "https://169.254.169.254/latest" },
    })) as any;
    expect(refused.error).toMatchObject({ code: -32602 });
    expect(((await client.listTaskPushNotificationConfig({ id: task.id })) as any).result).toEqual([]);
  });

  it("another caller's task is -32001 for every 0.3 method", async () => {
    const mine = (
      (await (await client03()).sendMessage({ message: message03("mine"), configuration: { blocking: false } })) as any
    ).result;
    const other = await client03(OTHER_TOKEN);
    expect(((await other.getTask({ id: mine.id })) as any).error).toMatchObject({ code: -32001 });
    expect(((await other.cancelTask({ id: mine.id })) as any).error).toMatchObject({ code: -32001 });
    expect(((await other.listTaskPushNotificationConfig({ id: mine.id })) as any).error).toMatchObject({
      code: -32001,
    });
    const followUp = (await other.sendMessage({ message: message03("into yours", { taskId: mine.id }) })) as any;
    expect(followUp.error).toMatchObject({ code: -32001 });
  });
});

/** The official Go SDK's 0.3 client (a2a-go v0.3.3, e2e/tools/a2a-go03): its JSON lines as it prints them. */
function goClient(op: string, arg = "", onLine?: (line: any) => void): Promise<{ code: number; lines: any[] }> {
  const child = spawn(toolPath("a2a-go03"), [op, arg], {
    env: { ...process.env, A2A_BASE: base, A2A_TOKEN: TOKEN, A2A_CA: tls.files.ca },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const lines: any[] = [];
  let buffered = "";
  let stderr = "";
  child.stdout.on("data", (c: Buffer) => {
    buffered += c.toString();
    for (let i = buffered.indexOf("\n"); i >= 0; i = buffered.indexOf("\n")) {
      const line = JSON.parse(buffered.slice(0, i));
      buffered = buffered.slice(i + 1);
      lines.push(line);
      onLine?.(line);
    }
  });
  child.stderr.on("data", (c: Buffer) => {
    stderr += c.toString();
  });
  return new Promise((resolve) =>
    child.on("close", (code) => {
      if (code !== 0) lines.push({ stderr });
      resolve({ code: code ?? -1, lines });
    }),
  );
}

describe("an A2A 0.3 client (the official Go SDK, a2a-go v0.3.3)", () => {
  it("parses the 0.3 card, sends a message, gets the task, streams, resubscribes and cancels", async () => {
    const card = await goClient("card");
    expect(card.code, JSON.stringify(card.lines)).toBe(0);
    expect(card.lines[0]).toMatchObject({
      url: `${base}/a2a/v1`,
      preferredTransport: "JSONRPC",
      protocolVersion: "0.3.0",
    });
    expect(card.lines[0].securitySchemes.bearer).toMatchObject({ type: "http", scheme: "Bearer" });

    const sent = await goClient("send", "hello from Go");
    expect(sent.code, JSON.stringify(sent.lines)).toBe(0);
    const task = sent.lines[0];
    expect(task).toMatchObject({ kind: "task", status: { state: "submitted" } });
    const handed = await handedOff(task.id);
    expect(handed.body.body.text).toBe("hello from Go");
    await localPost(`/a2a/tasks/${task.id}`, { state: "TASK_STATE_COMPLETED", message: { text: "hi, Go" } });
    const got = await goClient("get", task.id);
    expect(got.lines[0]).toMatchObject({
      id: task.id,
      status: { state: "completed", message: { role: "agent", parts: [{ kind: "text", text: "hi, Go" }] } },
    });

    // A stream: the task, then the application's updates, the last one final.
    const answered = new Set<string>();
    const streamed = await goClient("stream", "stream from Go", (line) => {
      const id = line.event?.id;
      if (line.type === "*a2a.Task" && id && !answered.has(id)) {
        answered.add(id);
        void (async () => {
          await handedOff(id);
          await localPost(`/a2a/tasks/${id}`, { state: "TASK_STATE_WORKING", artifact: { name: "a", text: "draft" } });
          await localPost(`/a2a/tasks/${id}`, { state: "TASK_STATE_COMPLETED", message: { text: "streamed" } });
        })();
      }
    });
    expect(streamed.code, JSON.stringify(streamed.lines)).toBe(0);
    expect(streamed.lines.map((l) => l.type)).toEqual([
      "*a2a.Task",
      "*a2a.TaskArtifactUpdateEvent",
      "*a2a.TaskStatusUpdateEvent",
      "*a2a.TaskStatusUpdateEvent",
    ]);
    expect(streamed.lines.at(-1).event).toMatchObject({ final: true, status: { state: "completed" } });

    // Resubscribed to an open task, which is then canceled: the stream ends with canceled.
    const open = (await goClient("send", "to be canceled")).lines[0];
    let subscribed = false;
    const following = goClient("resubscribe", open.id, () => {
      subscribed = true;
    });
    await waitFor("the Go client's resubscription", async () => subscribed);
    const canceled = await goClient("cancel", open.id);
    expect(canceled.lines[0]).toMatchObject({ id: open.id, status: { state: "canceled" } });
    const resubscribed = await following;
    expect(resubscribed.lines.at(-1).event).toMatchObject({ final: true, status: { state: "canceled" } });
    // A second cancel is the SDK's TaskNotCancelable error.
    const again = await goClient("cancel", open.id);
    expect(again.code).toBe(1);
    expect(again.lines[0].error).toMatch(/cancel/i);
    expect(again.lines[0].error).not.toMatch(/decode/);
  });
});

describe("0.3 abuse", () => {
  const send03 = (message: unknown, configuration?: unknown) =>
    rpc(call("message/send", { message, ...(configuration ? { configuration } : {}) }));

  it("refuses fields of 1.0 in a 0.3 request (and 0.3's in a 1.0 one) as invalid params, with no task made", async () => {
    const before = handler.received.length;
    const mixed = [
      // 1.0's role under 0.3
      { ...message03("x"), role: "ROLE_USER" },
      // a 1.0 part (no kind) under 0.3
      { ...message03("x"), parts: [{ text: "x" }] },
      // a 0.3 part with a 1.0 field beside
      { ...message03("x"), parts: [{ kind: "text", text: "x", mediaType: "text/plain" }] },
      // a file part holding both bytes and uri
      { ...message03("x"), parts: [{ kind: "file", file: { bytes: "AA==", uri: "https://e.org/x" } }] },
      // a data part that is not an object
      { ...message03("x"), parts: [{ kind: "data", data: [1] }] },
      // no kind on the message
      { messageId: randomUUID(), role: "user", parts: [{ kind: "text", text: "x" }] },
      // a 0.3 message sent as an agent
      { ...message03("x"), role: "agent" },
    ];
    for (const m of mixed) {
      const res = await send03(m);
      expect(res.status, JSON.stringify(m)).toBe(200);
      expect(res.body.error, JSON.stringify(m)).toMatchObject({ code: -32602 });
    }
    // 1.0's returnImmediately in a 0.3 configuration.
    expect((await send03(message03("x"), { returnImmediately: true })).body.error).toMatchObject({ code: -32602 });
    // 0.3's message under A2A-Version: 1.0.
    const as10 = await rpc(call("SendMessage", { message: message03("x") }), { version: "1.0" });
    expect(as10.body.error).toMatchObject({ code: -32602 });
    expect(handler.received.length).toBe(before);
  });

  it("an unknown 0.3 method, a 1.0 method without A2A-Version and a 0.3 method with it are -32601 saying which version has it", async () => {
    expect((await rpc(call("tasks/list", {}))).body.error).toMatchObject({
      code: -32601,
      message: /0\.3 has no method tasks\/list/,
    });
    expect((await rpc(call("__proto__", {}))).body.error).toMatchObject({ code: -32601 });
    expect((await rpc(call("constructor", {}))).body.error).toMatchObject({ code: -32601 });
    expect((await rpc(call("SendMessage", {}))).body.error).toMatchObject({
      code: -32601,
      message: /A2A-Version: 1\.0/,
    });
    expect((await rpc(call("message/send", {}), { version: "1.0" })).body.error).toMatchObject({
      code: -32601,
      message: /method of A2A 0\.3.*SendMessage/,
    });
    expect((await rpc(call("agent/getAuthenticatedExtendedCard", {}))).body.error).toMatchObject({ code: -32007 });
    // A version neither 1.x nor 0.3 is refused before the caller is looked at.
    expect((await rpc(call("message/send", {}), { version: "0.2", token: null })).body.error).toMatchObject({
      code: -32009,
    });
  });

  it("oversized, deep, malformed and unauthenticated 0.3 bodies get the refusals 1.0 gets", async () => {
    const big = call("message/send", { message: message03("x".repeat(MAX_BYTES + 1)) });
    const deep = `${'{"a":'.repeat(200)}1${"}".repeat(200)}`;
    for (const [what, body, token] of [
      ["oversized", big, TOKEN],
      ["deep", deep, TOKEN],
      ["not JSON", "{", TOKEN],
      ["a batch", [call("tasks/get", { id: "x" })], TOKEN],
      ["no token", call("tasks/get", { id: "x" }), null],
      ["a wrong token", call("tasks/get", { id: "x" }), "wrong-token-0123456789abcdef"],
    ] as const) {
      const v03 = await rpc(body, { token });
      const v10 = await rpc(body, { token, version: "1.0" });
      expect(v03.status, what).toBe(v10.status);
      expect(v03.body.error.code, what).toBe(v10.body.error.code);
      // 0.3's data is one object: the ErrorInfo that 1.0's list holds first.
      expect(v03.body.error.data, what).toEqual(v10.body.error.data[0]);
    }
    expect((await rpc(big)).status).toBe(413);
    expect((await rpc(call("tasks/get", { id: "x" }), { token: null })).status).toBe(401);
    // Params of the wrong type are invalid params, never a 5xx.
    for (const params of [null, [], "x", { id: 7 }, { id: "x", historyLength: -1 }])
      expect((await rpc(call("tasks/get", params))).body.error.code, JSON.stringify(params)).toBe(-32602);
  });
});
