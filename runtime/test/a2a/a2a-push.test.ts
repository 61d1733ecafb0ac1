// A2A push notifications (docs/a2a.md#push-notifications) as A2A clients meet them: the
// ifp-runtime command with spec.a2a enabled over real TLS and a real nats-server, the official
// A2A JS SDK's client registering configs (inline with a message, and through the config
// methods of both bindings), and a real HTTPS receiver on loopback (allowed the documented way:
// spec.network.allowPrivateTargets) that gets each update of the task with its token.
import { randomUUID } from "node:crypto";
import { writeFileSync } from "node:fs";
import { createServer, type Server } from "node:https";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { httpsRequest } from "../../../e2e/support/https.ts";
import { waitFor } from "../../../e2e/support/ports.ts";
import type { ManagedProcess } from "../../../e2e/support/process.ts";
import { clientFactory, spawnRuntime, userMessage } from "../support/a2a-harness.ts";
import { type LayoutNats, withLayoutNatsAndTls } from "../support/a2a-layouts.ts";
import { startHandler, type Tls } from "../support/agent-harness.ts";
import { identity, tempDir, writeAgentManifest, writeKey } from "../support/fixtures.ts";
import { onFreePorts } from "../support/free-ports.ts";

let nats: LayoutNats;
let tls: Tls;
// On the layout the file asks for (a2a-push.isolated.test.ts: the isolated one).
withLayoutNatsAndTls((n, t) => {
  nats = n;
  tls = t;
});

const self = identity("a2a-push-agent");
const TOKEN = "a2a-push-token-0123456789abcdef";
const OTHER_TOKEN = "a2a-push-other-0123456789abcdef";

let runtime: ManagedProcess;
let handler: Awaited<ReturnType<typeof startHandler>>;
let base: string;
let localApi: string;
let dir: string;
let port: number;
let localPort: number;
let keyFile: string;

/** What the receiver got: one POST each. */
interface Received {
  path: string;
  headers: Record<string, string | string[] | undefined>;
  body: any;
}
let receiver: Server;
let hooks: string;
const received: Received[] = [];
/** The status the receiver answers for a path (default 200). */
const answers = new Map<string, (attempt: number) => number>();
const attempts = new Map<string, number>();
const at = (path: string) => received.filter((r) => r.path === path);

function manifest(allowPrivateTargets: string[]): void {
  writeAgentManifest(dir, {
    agentId: self.agentId,
    displayName: "A2A push test agent",
    capabilities: [{ name: "calendar.availability", description: "Tells when its owner is free" }],
    handler: { url: handler.url },
    network: { allowPrivateTargets },
    inbox: { rateLimit: { perSenderPerMinute: 5000, perAddressPerMinute: 5000 } },
    a2a: {
      enabled: true,
      authentication: { bearerTokenSecret: { name: "a2a-tokens" } },
      waitFor: "5s",
    },
  });
}

async function start(): Promise<void> {
  runtime = await spawnReplica(port, localPort);
}

/** A runtime of the agent on these ports, once ready (several are replicas of one agent). */
async function spawnReplica(httpsPort: number, localApiPort: number): Promise<ManagedProcess> {
  return spawnRuntime({
    name: "ifp-runtime agent (a2a push)",
    dir,
    keyFile,
    tls,
    natsUrl: nats.url,
    port: httpsPort,
    localApiPort,
    args: ["--a2a-token-file", join(dir, "a2a-tokens"), ...(await nats.runtimeArgs(self.agentId))],
    logLevel: "info",
  });
}

beforeAll(async () => {
  handler = await startHandler();
  dir = tempDir("ifp-a2a-push-");
  receiver = createServer({ cert: tls.cert, key: tls.key }, (req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      const path = req.url ?? "";
      const n = (attempts.get(path) ?? 0) + 1;
      attempts.set(path, n);
      const status = answers.get(path)?.(n) ?? 200;
      if (status === 200) {
        let body: unknown;
        try {
          body = JSON.parse(Buffer.concat(chunks).toString());
        } catch {
          body = Buffer.concat(chunks).toString();
        }
        received.push({ path, headers: req.headers, body });
      }
      res.writeHead(status).end();
    });
  });
  await new Promise<void>((r) => receiver.listen(0, "127.0.0.1", r));
  hooks = `https://localhost:${(receiver.address() as { port: number }).port}`;
  manifest(["127.0.0.0/8"]);
  keyFile = writeKey(dir, self);
  writeFileSync(join(dir, "a2a-tokens"), `${TOKEN}\n${OTHER_TOKEN}\n`);
  // The ports are kept across the runtime's restarts in the tests.
  await onFreePorts(["https", "localApi"], async (ports) => {
    [port, localPort] = [ports.https, ports.localApi];
    base = `https://localhost:${port}`;
    localApi = `http://127.0.0.1:${localPort}`;
    await start();
  });
}, 60_000);

afterAll(async () => {
  await runtime?.stop();
  await handler?.close();
  await new Promise((r) => receiver?.close(r));
});

/**
 * Every push config of the task has delivered the task's last revision, with no retry due and no
 * lease held (the records beside the task in the agent's bucket): no push of it is on its way.
 */
async function pushesSettled(taskId: string): Promise<boolean> {
  const { kv, keys, close } = await nats.tasks(self.agentId);
  try {
    const [taskKey] = await keys(`t.*.${taskId}`);
    const task = taskKey ? await kv.get(taskKey) : null;
    if (!task) return false;
    for (const key of await keys(`p.*.${taskId}.*`)) {
      const e = await kv.get(key);
      if (e?.operation !== "PUT") continue;
      const r = e.json<{ rev: number; retry?: unknown; lease?: unknown }>();
      if (r.rev !== task.revision || r.retry || r.lease) return false;
    }
    return true;
  } finally {
    await close();
  }
}
const settled = (taskId: string) => waitFor("the task's pushes settled", () => pushesSettled(taskId), 15_000);

const client = (preferred: "JSONRPC" | "HTTP+JSON", token = TOKEN) =>
  clientFactory(tls.ca, token, preferred).createFromUrl(base);

const config = (url: string, extra: Partial<Record<"id" | "taskId" | "token", string>> = {}, auth?: string) => ({
  tenant: "",
  id: extra.id ?? "",
  taskId: extra.taskId ?? "",
  url,
  token: extra.token ?? "",
  authentication: auth ? { scheme: "Bearer", credentials: auth } : undefined,
});

async function localPost(path: string, body: unknown) {
  const res = await fetch(`${localApi}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as any };
}

async function rpc(method: string, params: unknown, token = TOKEN) {
  const res = await httpsRequest(`${base}/a2a/v1`, {
    method: "POST",
    headers: { "content-type": "application/json", "a2a-version": "1.0", authorization: `Bearer ${token}` },
    body: JSON.stringify({ jsonrpc: "2.0", id: 7, method, params }),
    ca: tls.ca,
  });
  return { status: res.status, body: res.json() as any };
}

async function rest(method: string, path: string, body?: unknown, token = TOKEN) {
  const res = await httpsRequest(`${base}/a2a/rest${path}`, {
    method,
    headers: {
      authorization: `Bearer ${token}`,
      "a2a-version": "1.0",
      ...(body ? { "content-type": "application/json" } : {}),
    },
    ...(body ? { body: JSON.stringify(body) } : {}),
    ca: tls.ca,
  });
  return { status: res.status, body: res.text ? (res.json() as any) : undefined };
}

/** A submitted task of the caller (raw JSON-RPC). */
async function newTask(token = TOKEN): Promise<string> {
  const r = await rpc(
    "SendMessage",
    {
      message: { messageId: randomUUID(), role: "ROLE_USER", parts: [{ text: "a task" }] },
      configuration: { returnImmediately: true },
    },
    token,
  );
  expect(r.body.result?.task?.id, JSON.stringify(r.body)).toBeTruthy();
  return r.body.result.task.id;
}

async function waitForPushes(path: string, n: number, timeoutMs = 15_000): Promise<Received[]> {
  await waitFor(`${n} push notifications at ${path}`, async () => at(path).length >= n, timeoutMs);
  return at(path);
}

describe("push notification configs through the official SDK", () => {
  it("the card says pushNotifications: true", async () => {
    const card = (await httpsRequest(`${base}/.well-known/agent-card.json`, { ca: tls.ca })).json();
    expect(card.capabilities.pushNotifications).toBe(true);
  });

  it("JSON-RPC: a config inline with the message gets every status and artifact change, with its token", async () => {
    const c = await client("JSONRPC");
    const task = (await c.sendMessage(
      userMessage("notify me", { push: config(`${hooks}/inline`, { token: "inline-token-1" }) }),
    )) as any;
    expect(task.status.state).toBe(1);
    expect(
      (await localPost(`/a2a/tasks/${task.id}`, { state: "TASK_STATE_WORKING", artifact: { text: "a draft" } })).status,
    ).toBe(200);
    expect(
      (await localPost(`/a2a/tasks/${task.id}`, { state: "TASK_STATE_COMPLETED", message: { text: "done" } })).status,
    ).toBe(200);
    const pushes = await waitForPushes("/inline", 3);
    // The events of the task's stream, in order, as StreamResponse objects.
    expect(pushes.map((p) => Object.keys(p.body)[0])).toEqual(["artifactUpdate", "statusUpdate", "statusUpdate"]);
    expect(pushes[0]!.body.artifactUpdate).toMatchObject({
      taskId: task.id,
      artifact: { parts: [{ text: "a draft" }] },
    });
    expect(pushes.slice(1).map((p) => p.body.statusUpdate.status.state)).toEqual([
      "TASK_STATE_WORKING",
      "TASK_STATE_COMPLETED",
    ]);
    for (const p of pushes) {
      expect(p.headers["x-a2a-notification-token"]).toBe("inline-token-1");
      expect(p.headers["content-type"]).toBe("application/a2a+json");
      expect(p.headers.authorization).toBeUndefined();
    }
    // The inline config is the task's own (its id the task's), listed like any other.
    const listed = await c.listTaskPushNotificationConfig({ tenant: "", taskId: task.id, pageSize: 0, pageToken: "" });
    expect(listed.configs.map((x) => [x.id, x.url, x.token])).toEqual([[task.id, `${hooks}/inline`, "inline-token-1"]]);
  });

  it("inline with a follow-up message: only the changes after it are pushed, none of the task's earlier ones", async () => {
    const taskId = await newTask();
    await localPost(`/a2a/tasks/${taskId}`, { state: "TASK_STATE_WORKING", artifact: { text: "earlier" } });
    await localPost(`/a2a/tasks/${taskId}`, { state: "TASK_STATE_INPUT_REQUIRED", message: { text: "which day?" } });
    const followUp = await rpc("SendMessage", {
      message: { messageId: randomUUID(), taskId, role: "ROLE_USER", parts: [{ text: "Tuesday" }] },
      configuration: { returnImmediately: true, taskPushNotificationConfig: { url: `${hooks}/followup`, token: "f" } },
    });
    expect(followUp.body.result.task.status.state).toBe("TASK_STATE_SUBMITTED");
    await localPost(`/a2a/tasks/${taskId}`, { state: "TASK_STATE_COMPLETED" });
    await waitForPushes("/followup", 1);
    await settled(taskId);
    expect(at("/followup").map((p) => p.body.statusUpdate?.status.state)).toEqual(["TASK_STATE_COMPLETED"]);
  });

  it("HTTP+JSON: create, get, list and delete configs; each gets the updates with its token and Bearer credentials", async () => {
    const c = await client("HTTP+JSON");
    const task = (await c.sendMessage(userMessage("set me up"))) as any;
    const a = await c.createTaskPushNotificationConfig(
      config(`${hooks}/rest-a`, { id: "cfg-a", taskId: task.id, token: "token-a" }, "credentials-a"),
    );
    expect(a).toMatchObject({ id: "cfg-a", taskId: task.id, url: `${hooks}/rest-a`, token: "token-a" });
    expect(a.authentication).toEqual({ scheme: "Bearer", credentials: "credentials-a" });
    await c.createTaskPushNotificationConfig(
      config(`${hooks}/rest-b`, { id: "cfg-b", taskId: task.id, token: "token-b" }),
    );
    const got = await c.getTaskPushNotificationConfig({ tenant: "", taskId: task.id, id: "cfg-b" });
    expect(got).toMatchObject({ id: "cfg-b", url: `${hooks}/rest-b`, token: "token-b" });
    const listed = await c.listTaskPushNotificationConfig({ tenant: "", taskId: task.id, pageSize: 0, pageToken: "" });
    expect(listed.configs.map((x) => x.id)).toEqual(["cfg-a", "cfg-b"]);

    await localPost(`/a2a/tasks/${task.id}`, { state: "TASK_STATE_WORKING" });
    const [pa] = await waitForPushes("/rest-a", 1);
    const [pb] = await waitForPushes("/rest-b", 1);
    expect(pa!.headers.authorization).toBe("Bearer credentials-a");
    expect(pa!.headers["x-a2a-notification-token"]).toBe("token-a");
    expect(pb!.headers["x-a2a-notification-token"]).toBe("token-b");
    expect(pb!.body.statusUpdate).toMatchObject({ taskId: task.id, status: { state: "TASK_STATE_WORKING" } });

    // Deleted: the next update reaches cfg-b only.
    await c.deleteTaskPushNotificationConfig({ tenant: "", taskId: task.id, id: "cfg-a" });
    const after = await c.listTaskPushNotificationConfig({ tenant: "", taskId: task.id, pageSize: 0, pageToken: "" });
    expect(after.configs.map((x) => x.id)).toEqual(["cfg-b"]);
    await localPost(`/a2a/tasks/${task.id}`, { state: "TASK_STATE_COMPLETED" });
    await waitForPushes("/rest-b", 2);
    await settled(task.id);
    expect(at("/rest-a")).toHaveLength(1);
    await expect(c.getTaskPushNotificationConfig({ tenant: "", taskId: task.id, id: "cfg-a" })).rejects.toThrow();
  });

  it("JSON-RPC: the config methods by name, a replaced config keeps one entry, pages", async () => {
    const taskId = await newTask();
    for (const id of ["p1", "p2", "p3"]) {
      const r = await rpc("CreateTaskPushNotificationConfig", { taskId, id, url: `${hooks}/${id}` });
      expect(r.body.result).toEqual({ id, taskId, url: `${hooks}/${id}` });
    }
    // The same id again: replaced, not added.
    const again = await rpc("CreateTaskPushNotificationConfig", { taskId, id: "p1", url: `${hooks}/p1b`, token: "t" });
    expect(again.body.result).toMatchObject({ id: "p1", url: `${hooks}/p1b`, token: "t" });
    const page1 = await rpc("ListTaskPushNotificationConfigs", { taskId, pageSize: 2 });
    expect(page1.body.result.configs.map((c: any) => c.id)).toEqual(["p1", "p2"]);
    const page2 = await rpc("ListTaskPushNotificationConfigs", {
      taskId,
      pageSize: 2,
      pageToken: page1.body.result.nextPageToken,
    });
    expect(page2.body.result).toEqual({ configs: [expect.objectContaining({ id: "p3" })], nextPageToken: "" });
    expect((await rpc("DeleteTaskPushNotificationConfig", { taskId, id: "p2" })).body.result).toEqual({});
    const left = await rpc("ListTaskPushNotificationConfigs", { taskId });
    expect(left.body.result.configs.map((c: any) => c.id)).toEqual(["p1", "p3"]);
    // REST paths answer the same.
    const viaRest = await rest("GET", `/tasks/${taskId}/pushNotificationConfigs/p3`);
    expect(viaRest).toEqual({ status: 200, body: { id: "p3", taskId, url: `${hooks}/p3` } });
    expect((await rest("DELETE", `/tasks/${taskId}/pushNotificationConfigs/p3`)).status).toBe(200);
    expect((await rest("GET", `/tasks/${taskId}/pushNotificationConfigs/p3`)).status).toBe(404);
  });
});

describe("refused configs", () => {
  it("a private, loopback-outside-the-allowed-blocks, metadata or plaintext URL, or one that does not resolve", async () => {
    const taskId = await newTask();
    const cases: [string, RegExp][] = [
      ["https://169.254.169.254/latest/meta-data", /refused: .*special address/],
      ["https://10.1.2.3/hook", /refused: .*special address/],
      ["https://[::1]/hook", /refused: .*special address/],
      ["https://[::ffff:169.254.169.254]/hook", /refused: .*special address/],
      [`http://localhost:${new URL(hooks).port}/plain`, /refused: .*only https/],
      ["https://no-such-host.invalid/hook", /does not resolve/],
      ["not a url", /refused: .*not a URL/],
    ];
    for (const [url, why] of cases) {
      const r = await rpc("CreateTaskPushNotificationConfig", { taskId, url });
      expect(r.status, url).toBe(200);
      expect(r.body.error, url).toMatchObject({ code: -32602, data: [{ reason: "INVALID_PARAMS" }] });
      expect(r.body.error.message, url).toMatch(why);
    }
    // The HTTP+JSON binding: 400 with a google.rpc.Status.
    const viaRest = await rest("POST", `/tasks/${taskId}/pushNotificationConfigs`, {
      taskId,
      url: "https://169.254.169.254/",
    });
    expect(viaRest.status).toBe(400);
    expect(viaRest.body.error.details[0].reason).toBe("INVALID_PARAMS");
    // Nothing was kept.
    expect((await rpc("ListTaskPushNotificationConfigs", { taskId })).body.result.configs).toEqual([]);
  });

  it("inline with a message: refused before the message is accepted", async () => {
    const before = handler.received.length;
    const messageId = randomUUID();
    const r = await rpc("SendMessage", {
      message: { messageId, role: "ROLE_USER", parts: [{ text: "never handed on" }] },
      configuration: { returnImmediately: true, taskPushNotificationConfig: { url: "https://10.0.0.1/" } },
    });
    expect(r.body.error).toMatchObject({ code: -32602 });
    expect(r.body.error.message).toMatch(/push notification URL refused/);
    // Had it been accepted, its hand-off would be among those delivered and acknowledged by now.
    await waitFor("every hand-off acknowledged", () => nats.handOffsSettled(self.agentId), 15_000);
    expect(handler.received.slice(before).some((h) => h.body.body.text === "never handed on")).toBe(false);
    expect(
      (await rpc("ListTasks", {})).body.result.tasks.every((t: any) => t.history?.[0]?.messageId !== messageId),
    ).toBe(true);
  });

  it("another caller's task is not found, for every method and both bindings", async () => {
    const taskId = await newTask();
    expect(
      (await rpc("CreateTaskPushNotificationConfig", { taskId, id: "mine", url: `${hooks}/mine` })).body.result,
    ).toBeTruthy();
    for (const [method, params] of [
      ["CreateTaskPushNotificationConfig", { taskId, url: `${hooks}/theirs` }],
      ["GetTaskPushNotificationConfig", { taskId, id: "mine" }],
      ["ListTaskPushNotificationConfigs", { taskId }],
      ["DeleteTaskPushNotificationConfig", { taskId, id: "mine" }],
    ] as const) {
      const r = await rpc(method, params, OTHER_TOKEN);
      expect(r.body.error, method).toMatchObject({ code: -32001, data: [{ reason: "TASK_NOT_FOUND" }] });
    }
    expect((await rest("GET", `/tasks/${taskId}/pushNotificationConfigs`, undefined, OTHER_TOKEN)).status).toBe(404);
    expect((await rest("DELETE", `/tasks/${taskId}/pushNotificationConfigs/mine`, undefined, OTHER_TOKEN)).status).toBe(
      404,
    );
    // Still there for its owner.
    expect((await rpc("GetTaskPushNotificationConfig", { taskId, id: "mine" })).body.result.url).toBe(`${hooks}/mine`);
  });

  it("at most 10 configs per task", async () => {
    const taskId = await newTask();
    for (let i = 0; i < 10; i++)
      expect(
        (await rpc("CreateTaskPushNotificationConfig", { taskId, id: `c${i}`, url: `${hooks}/many` })).body.result,
      ).toBeTruthy();
    const eleventh = await rpc("CreateTaskPushNotificationConfig", { taskId, id: "c10", url: `${hooks}/many` });
    expect(eleventh.body.error).toMatchObject({ code: -32602 });
    expect(eleventh.body.error.message).toMatch(/has 10 push notification configs, the most it may have/);
    // Replacing one of the ten is no eleventh.
    expect(
      (await rpc("CreateTaskPushNotificationConfig", { taskId, id: "c3", url: `${hooks}/many2` })).body.result,
    ).toBeTruthy();
  });

  it("bad params", async () => {
    const taskId = await newTask();
    const bad: [unknown, RegExp][] = [
      [{ taskId }, /url/],
      [{ taskId, url: 42 }, /url/],
      [{ url: `${hooks}/x` }, /taskId is required/],
      [{ taskId, url: `${hooks}/x`, token: "two words" }, /token: visible ASCII/],
      [{ taskId, url: `${hooks}/x`, token: "a\r\nx-injected: 1" }, /token/],
      [
        { taskId, url: `${hooks}/x`, authentication: { scheme: "Basic", credentials: "dTpw" } },
        /only the Bearer scheme/,
      ],
      [{ taskId, url: `${hooks}/x`, authentication: { scheme: "Bearer" } }, /credentials/],
      [{ taskId, id: "a/b", url: `${hooks}/x` }, /id/],
      [{ taskId, url: `https://localhost/${"x".repeat(2100)}` }, /url/],
    ];
    for (const [params, why] of bad) {
      const r = await rpc("CreateTaskPushNotificationConfig", params);
      expect(r.body.error, JSON.stringify(params).slice(0, 80)).toMatchObject({ code: -32602 });
      expect(r.body.error.message).toMatch(why);
    }
    for (const [method, params] of [
      ["GetTaskPushNotificationConfig", { taskId }],
      ["DeleteTaskPushNotificationConfig", { id: "x" }],
      ["ListTaskPushNotificationConfigs", { taskId, pageSize: 1000 }],
      ["ListTaskPushNotificationConfigs", { taskId, pageToken: "not-a-token" }],
    ] as const)
      expect((await rpc(method, params)).body.error, method).toMatchObject({ code: -32602 });
    // An unknown config of one's own task: not found.
    expect((await rpc("GetTaskPushNotificationConfig", { taskId, id: "nope" })).body.error.code).toBe(-32001);
    // An unknown task: not found.
    expect(
      (await rpc("CreateTaskPushNotificationConfig", { taskId: randomUUID(), url: `${hooks}/x` })).body.error.code,
    ).toBe(-32001);
  });
});

describe("delivery", () => {
  it("a receiver that fails first and works later gets the update (retried with backoff)", async () => {
    answers.set("/flaky", (n) => (n <= 2 ? 503 : 200));
    const taskId = await newTask();
    await rpc("CreateTaskPushNotificationConfig", { taskId, url: `${hooks}/flaky`, token: "flaky-token" });
    const t0 = Date.now();
    await localPost(`/a2a/tasks/${taskId}`, { state: "TASK_STATE_WORKING" });
    const [p] = await waitForPushes("/flaky", 1, 30_000);
    expect(attempts.get("/flaky")).toBe(3);
    // Two waits: about 1 s and 2 s (±20 %).
    expect(Date.now() - t0).toBeGreaterThan(2_000);
    expect(p!.body.statusUpdate.status.state).toBe("TASK_STATE_WORKING");
    expect(p!.headers["x-a2a-notification-token"]).toBe("flaky-token");
  });

  it("an event the receiver refuses (4xx) is given up at once, and the next one still sent", async () => {
    answers.set("/refuses", (n) => (n === 1 ? 400 : 200));
    const taskId = await newTask();
    await rpc("CreateTaskPushNotificationConfig", { taskId, url: `${hooks}/refuses` });
    await localPost(`/a2a/tasks/${taskId}`, { state: "TASK_STATE_WORKING" });
    await waitFor("the refusal", async () => attempts.get("/refuses") === 1, 10_000);
    await localPost(`/a2a/tasks/${taskId}`, { state: "TASK_STATE_COMPLETED" });
    const [p] = await waitForPushes("/refuses", 1);
    expect(p!.body.statusUpdate.status.state).toBe("TASK_STATE_COMPLETED");
    expect(attempts.get("/refuses")).toBe(2);
  });

  it("a runtime killed while a push is pending delivers it after the restart", async () => {
    let up = false;
    answers.set("/down", () => (up ? 200 : 503));
    const taskId = await newTask();
    await rpc("CreateTaskPushNotificationConfig", { taskId, url: `${hooks}/down` });
    await localPost(`/a2a/tasks/${taskId}`, { state: "TASK_STATE_WORKING", artifact: { text: "kept" } });
    // Killed once the failed attempt is recorded (its retry due, the config's lease let go): a
    // runtime killed during a POST holds the lease for its 60 s (docs/a2a.md), longer than this waits.
    // This task's line: the runtime's log also holds the earlier tests' retries.
    const retrying = new RegExp(`"taskId":"${taskId}".*push notification failed; retrying`);
    await waitFor("a first failed attempt, recorded", async () => retrying.test(runtime.log()), 15_000);
    await runtime.stop({ signal: "SIGKILL" });
    up = true;
    await start();
    const pushes = await waitForPushes("/down", 2, 30_000);
    expect(pushes.map((p) => Object.keys(p.body)[0])).toEqual(["artifactUpdate", "statusUpdate"]);
    expect(pushes[0]!.body.artifactUpdate.artifact.parts[0].text).toBe("kept");
    expect(pushes[1]!.body.statusUpdate.status.state).toBe("TASK_STATE_WORKING");
  }, 90_000);

  it("two replicas of the agent push each update once", async () => {
    const replica = await onFreePorts(["https", "localApi"], (ports) => spawnReplica(ports.https, ports.localApi));
    try {
      const taskId = await newTask();
      await rpc("CreateTaskPushNotificationConfig", { taskId, url: `${hooks}/replicas` });
      for (const state of ["TASK_STATE_WORKING", "TASK_STATE_INPUT_REQUIRED", "TASK_STATE_WORKING"])
        await localPost(`/a2a/tasks/${taskId}`, { state });
      await localPost(`/a2a/tasks/${taskId}`, { state: "TASK_STATE_COMPLETED", artifact: { text: "the end" } });
      const pushes = await waitForPushes("/replicas", 5);
      // Every update delivered and recorded, no lease held: a second copy, had both replicas sent it, came before.
      await settled(taskId);
      expect(at("/replicas").map((p) => p.body.statusUpdate?.status.state ?? "artifact")).toEqual([
        "TASK_STATE_WORKING",
        "TASK_STATE_INPUT_REQUIRED",
        "TASK_STATE_WORKING",
        "artifact",
        "TASK_STATE_COMPLETED",
      ]);
      expect(pushes).toHaveLength(5);
    } finally {
      await replica.stop();
    }
  }, 60_000);

  it("the address is checked again when pushing: a receiver no longer allowed is not reached", async () => {
    const taskId = await newTask();
    await rpc("CreateTaskPushNotificationConfig", { taskId, url: `${hooks}/rebound` });
    // The same name, now resolving to an address the agent may not reach (here: loopback no longer allowed).
    await runtime.stop();
    manifest([]);
    await start();
    try {
      await localPost(`/a2a/tasks/${taskId}`, { state: "TASK_STATE_WORKING" });
      await waitFor(
        "the push given up",
        async () =>
          runtime
            .log()
            .split("\n")
            .some((l) => l.includes("A2A push notification given up") && l.includes("refused as a target")),
        15_000,
      );
      expect(at("/rebound")).toEqual([]);
      expect(attempts.get("/rebound")).toBeUndefined();
    } finally {
      await runtime.stop();
      manifest(["127.0.0.0/8"]);
      await start();
    }
  }, 90_000);
});
