// The gRPC binding of the A2A face (docs/a2a.md#grpc) as a gRPC client meets it: the
// ifp-runtime command with spec.a2a enabled and --a2a-grpc-port over real TLS and a real
// nats-server, called by a client that @grpc/proto-loader generates from the contract's
// a2a.proto, the errors' google.rpc.Status read from grpc-status-details-bin.
import { randomUUID } from "node:crypto";
import { join } from "node:path";
import { credentials, type Client, loadPackageDefinition, Metadata, type ServiceError, status } from "@grpc/grpc-js";
import { loadSync } from "@grpc/proto-loader";
import protobuf from "protobufjs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { NatsServer } from "../../../e2e/support/nats.ts";
import { httpsRequest } from "../../../e2e/support/https.ts";
import { waitFor } from "../../../e2e/support/ports.ts";
import type { ManagedProcess } from "../../../e2e/support/process.ts";
import { ClientFactory, ClientFactoryOptions, DefaultAgentCardResolver } from "@a2a-js/sdk/client";
import { GrpcTransportFactory } from "@a2a-js/sdk/client/grpc";
import { fetchWith, handedOffTo, localPostTo, spawnRuntime, userMessage } from "../support/a2a-harness.ts";
import { startHandler, type Tls, withNatsAndTls } from "../support/agent-harness.ts";
import { onFreePorts } from "../support/free-ports.ts";
import { identity, tempDir, writeAgentManifest, writeKey } from "../support/fixtures.ts";

const CONTRACT = new URL("../../src/contract/", import.meta.url).pathname;

let nats: NatsServer;
let tls: Tls;
withNatsAndTls((n, t) => {
  nats = n;
  tls = t;
});

const self = identity("a2a-grpc-agent");
const TOKEN = "a2a-grpc-token-0123456789abcdef";
const OTHER_TOKEN = "a2a-grpc-other-0123456789abcdef";
const LIMITED_TOKEN = "a2a-grpc-limited-0123456789abcd";
const PER_MINUTE = 30;
const MAX_MESSAGE_BYTES = 16 * 1024;

let runtime: ManagedProcess;
let handler: Awaited<ReturnType<typeof startHandler>>;
let port: number;
let grpcPort: number;
let localApi: string;
let client: Client & Record<string, any>;
/** Start the runtime (again), with the same store, ports and tokens. */
let start: () => Promise<void>;

// The client, generated at run time from the contract, as any proto-loader user makes it.
const definition = loadSync(join(CONTRACT, "a2a.proto"), {
  keepCase: false,
  longs: Number,
  enums: String,
  defaults: false,
  oneofs: true,
});
const A2AService = (loadPackageDefinition(definition) as any).lf.a2a.v1.A2AService;
const rpcRoot = protobuf.loadSync(join(CONTRACT, "google-rpc-status.proto"));

beforeAll(async () => {
  handler = await startHandler();
  const dir = tempDir("ifp-a2a-grpc-");
  // The ports are kept across the runtime's restarts in the tests.
  await onFreePorts(["https", "grpc", "localApi"], async (ports) => {
    [port, grpcPort] = [ports.https, ports.grpc];
    const localPort = ports.localApi;
    localApi = `http://127.0.0.1:${localPort}`;
    writeAgentManifest(dir, {
      agentId: self.agentId,
      displayName: "A2A gRPC test agent",
      baseUrl: `https://localhost:${port}`,
      handler: { url: handler.url, timeout: "3s" },
      inbox: { maxMessageBytes: MAX_MESSAGE_BYTES, rateLimit: { perSenderPerMinute: PER_MINUTE } },
      a2a: { enabled: true, authentication: { bearerTokenSecret: { name: "a2a-tokens" } }, waitFor: "5s" },
    });
    const keyFile = writeKey(dir, self);
    const spawn = { name: "ifp-runtime agent (a2a grpc)", dir, keyFile, tls, port, localApiPort: localPort };
    start = async () => {
      runtime = await spawnRuntime({
        ...spawn,
        natsUrl: nats.url,
        tokens: [TOKEN, OTHER_TOKEN, LIMITED_TOKEN],
        args: ["--a2a-grpc-port", String(grpcPort)],
      });
    };
    await start();
  });
  // The test CA's certificate names localhost.
  client = new A2AService(`localhost:${grpcPort}`, credentials.createSsl(Buffer.from(tls.ca)));
}, 60_000);

afterAll(async () => {
  client?.close();
  await runtime?.stop();
  await handler?.close();
});

const auth = (token: string | undefined, extra: Record<string, string> = {}) => {
  const md = new Metadata();
  // What a 1.0 client sends (section 3.6): without it the request is read as 0.3.
  md.set("a2a-version", "1.0");
  if (token) md.set("authorization", `Bearer ${token}`);
  for (const [k, v] of Object.entries(extra)) md.set(k, v);
  return md;
};

/** A unary call: its response, or the ServiceError it failed with. */
function call<T = any>(method: string, request: unknown, md: Metadata = auth(TOKEN)): Promise<T> {
  return new Promise((resolve, reject) =>
    client[method](request, md, { deadline: Date.now() + 20_000 }, (err: ServiceError | null, res: T) =>
      err ? reject(err) : resolve(res),
    ),
  );
}

async function failure(p: Promise<unknown>): Promise<ServiceError> {
  try {
    await p;
  } catch (err) {
    return err as ServiceError;
  }
  throw new Error("the call succeeded");
}

/** The google.rpc.ErrorInfo of a failed call's status details. */
function errorInfo(err: ServiceError): { reason: string; domain: string; metadata?: Record<string, string> } {
  const bin = err.metadata.get("grpc-status-details-bin")[0] as Buffer;
  expect(bin, `status details of: ${err.code} ${err.details}`).toBeInstanceOf(Buffer);
  const st = rpcRoot.lookupType("google.rpc.Status").toObject(rpcRoot.lookupType("google.rpc.Status").decode(bin)) as {
    code: number;
    details: { typeUrl: string; value: Uint8Array }[];
  };
  expect(st.code).toBe(err.code);
  expect(st.details[0]!.typeUrl).toBe("type.googleapis.com/google.rpc.ErrorInfo");
  const info = rpcRoot.lookupType("google.rpc.ErrorInfo");
  return info.toObject(info.decode(st.details[0]!.value)) as any;
}

const message = (text: string, extra: Record<string, unknown> = {}) => ({
  message: { messageId: randomUUID(), role: "ROLE_USER", parts: [{ text }], ...extra },
  configuration: { returnImmediately: true },
});

async function localPost(path: string, body: unknown) {
  expect((await localPostTo(localApi, path, body)).status).toBe(200);
}

describe("the A2A gRPC binding", () => {
  it("is named in the agent card with protocolBinding GRPC", async () => {
    const res = await httpsRequest(`https://localhost:${port}/.well-known/agent-card.json`, { ca: tls.ca });
    const card = res.json() as { supportedInterfaces: { url: string; protocolBinding: string }[] };
    expect(card.supportedInterfaces).toContainEqual({
      url: `localhost:${grpcPort}`,
      protocolBinding: "GRPC",
      protocolVersion: "1.0",
    });
  });

  it("serves the official A2A JS SDK's gRPC client, which finds the binding in the card", async () => {
    const factory = new ClientFactory(
      ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
        transports: [new GrpcTransportFactory({ grpcChannelCredentials: credentials.createSsl(Buffer.from(tls.ca)) })],
        cardResolver: new DefaultAgentCardResolver({ fetchImpl: fetchWith(tls.ca, undefined) }),
        // The default options bring the HTTP bindings' transports too: gRPC is chosen.
        preferredTransports: ["GRPC"],
      }),
    );
    const sdk = await factory.createFromUrl(`https://localhost:${port}`);
    const opts = { serviceParameters: { authorization: `Bearer ${TOKEN}` } };
    const sent = (await sdk.sendMessage(userMessage("hello from the SDK"), opts)) as any;
    expect(sent.status.state).toBe(1); // TASK_STATE_SUBMITTED
    await waitFor("the hand-off", async () =>
      handler.received.some((r) => r.body.headers.extensions?.a2a?.task_id === sent.id),
    );
    const events: any[] = [];
    const following = (async () => {
      for await (const e of sdk.resubscribeTask({ id: sent.id, tenant: "" }, opts)) events.push(e.payload);
    })();
    await waitFor("the subscription's first event", async () => events.length > 0);
    await localPost(`/a2a/tasks/${sent.id}`, { state: "TASK_STATE_COMPLETED", message: { text: "hello back" } });
    await following;
    expect(events[0].$case).toBe("task");
    expect(events.at(-1).value.status.state).toBe(3); // TASK_STATE_COMPLETED
    const got = (await sdk.getTask({ id: sent.id, historyLength: undefined, tenant: "" }, opts)) as any;
    expect(got.status.message.parts[0].content.value).toBe("hello back");
    expect(got.history[0].parts[0].content.value).toBe("hello from the SDK");
    const listed = (await sdk.listTasks(
      { tenant: "", contextId: sent.contextId, status: 0, pageToken: "" } as any,
      opts,
    )) as any;
    expect(listed.tasks.map((t: any) => t.id)).toEqual([sent.id]);
    // Without the token the SDK gets the status it maps to its own error.
    await expect(sdk.getTask({ id: sent.id, historyLength: undefined, tenant: "" })).rejects.toThrow();
  });

  it("sends a message: the task is stored, handed off with its data and metadata, and answered", async () => {
    const sent = await call("SendMessage", {
      message: {
        messageId: randomUUID(),
        role: "ROLE_USER",
        parts: [{ text: "hello over gRPC" }, { data: { structValue: { fields: { n: { numberValue: 3 } } } } }],
        metadata: { fields: { trace: { stringValue: "t-1" } } },
      },
      configuration: { returnImmediately: true },
    });
    expect(sent.payload).toBe("task");
    const task = sent.task;
    expect(task.status.state).toBe("TASK_STATE_SUBMITTED");
    expect(Number(task.status.timestamp.seconds)).toBeGreaterThan(1_700_000_000);
    let handed: (typeof handler.received)[number] | undefined;
    await waitFor("the hand-off", async () => {
      handed = handler.received.find((r) => r.body.headers.extensions?.a2a?.task_id === task.id);
      return handed !== undefined;
    });
    expect(handed!.body.body.text).toBe("hello over gRPC");
    expect(handed!.body.body.parts[0]).toMatchObject({ content_type: "application/json", content: { n: 3 } });
    expect(handed!.body.headers.extensions.a2a.metadata).toEqual({ trace: "t-1" });

    await localPost(`/a2a/tasks/${task.id}`, { state: "TASK_STATE_COMPLETED", message: { text: "hi back" } });
    const got = await call("GetTask", { id: task.id });
    expect(got.id).toBe(task.id);
    expect(got.status.state).toBe("TASK_STATE_COMPLETED");
    expect(got.status.message.parts[0].text).toBe("hi back");
    expect(got.history.map((m: { role: string }) => m.role)).toEqual(["ROLE_USER", "ROLE_AGENT"]);
  });

  it("a repeated messageId is the same task", async () => {
    const req = message("once");
    const [a, b] = [await call("SendMessage", req), await call("SendMessage", req)];
    expect(b.task.id).toBe(a.task.id);
  });

  it("keeps each caller's tasks its own: listing, getting, cancelling", async () => {
    const mine = (await call("SendMessage", message("mine"))).task;
    const listed = await call("ListTasks", {}, auth(TOKEN));
    expect(listed.tasks.map((t: { id: string }) => t.id)).toContain(mine.id);
    const own = (await call("SendMessage", message("theirs"), auth(OTHER_TOKEN))).task;
    const theirs = await call("ListTasks", {}, auth(OTHER_TOKEN));
    expect(theirs.tasks.map((t: { id: string }) => t.id)).toEqual([own.id]);
    expect(theirs.totalSize).toBe(1);
    const got = await failure(call("GetTask", { id: mine.id }, auth(OTHER_TOKEN)));
    expect(got.code).toBe(status.NOT_FOUND);
    expect(errorInfo(got)).toMatchObject({ reason: "TASK_NOT_FOUND", domain: "a2a-protocol.org" });
    const cancel = await failure(call("CancelTask", { id: mine.id }, auth(OTHER_TOKEN)));
    expect(cancel.code).toBe(status.NOT_FOUND);
    expect((await call("GetTask", { id: mine.id })).status.state).toBe("TASK_STATE_SUBMITTED");
  });

  it("cancels a task, and refuses to cancel it twice with FAILED_PRECONDITION", async () => {
    const task = (await call("SendMessage", message("to cancel"))).task;
    const canceled = await call("CancelTask", { id: task.id });
    expect(canceled.status.state).toBe("TASK_STATE_CANCELED");
    const again = await failure(call("CancelTask", { id: task.id }));
    expect(again.code).toBe(status.FAILED_PRECONDITION);
    expect(errorInfo(again).reason).toBe("TASK_NOT_CANCELABLE");
  });

  it("streams a sent message's task until it completes", async () => {
    const events: any[] = [];
    const stream = client.SendStreamingMessage(message("stream me"), auth(TOKEN));
    const ended = new Promise<void>((resolve, reject) => {
      stream.on("data", (e: unknown) => events.push(e));
      stream.on("end", resolve);
      stream.on("error", reject);
    });
    await waitFor("the stream's first event", async () => events.length > 0);
    expect(events[0].payload).toBe("task");
    const id = events[0].task.id;
    await localPost(`/a2a/tasks/${id}`, { state: "TASK_STATE_WORKING" });
    await localPost(`/a2a/tasks/${id}`, { state: "TASK_STATE_COMPLETED", message: { text: "done" } });
    await ended;
    const states = events.slice(1).map((e) => e.statusUpdate?.status.state);
    expect(states).toContain("TASK_STATE_WORKING");
    expect(states.at(-1)).toBe("TASK_STATE_COMPLETED");
    // A finished task has nothing to follow.
    const sub = client.SubscribeToTask({ id }, auth(TOKEN));
    const err = await new Promise<ServiceError>((resolve) => sub.on("error", resolve));
    expect(err.code).toBe(status.UNIMPLEMENTED);
    expect(errorInfo(err).reason).toBe("UNSUPPORTED_OPERATION");
  });

  it("refuses a call without a bearer token, or with a wrong one, with UNAUTHENTICATED", async () => {
    const none = await failure(call("ListTasks", {}, auth(undefined)));
    expect(none.code).toBe(status.UNAUTHENTICATED);
    expect(errorInfo(none).reason).toBe("UNAUTHENTICATED");
    const wrong = await failure(call("SendMessage", message("no"), auth("not-a-token-of-this-agent-at-all")));
    expect(wrong.code).toBe(status.UNAUTHENTICATED);
  });

  it("refuses invalid params, an unsupported A2A-Version, the extended card and a metadata-address push receiver", async () => {
    const bad = await failure(call("SendMessage", { message: { messageId: randomUUID(), role: "ROLE_USER" } }));
    expect(bad.code).toBe(status.INVALID_ARGUMENT);
    expect(errorInfo(bad).reason).toBe("INVALID_PARAMS");
    const version = await failure(call("ListTasks", {}, auth(TOKEN, { "a2a-version": "7.0" })));
    expect(version.code).toBe(status.UNIMPLEMENTED);
    expect(errorInfo(version).reason).toBe("VERSION_NOT_SUPPORTED");
    const card = await failure(call("GetExtendedAgentCard", {}));
    expect(card.code).toBe(status.FAILED_PRECONDITION);
    expect(errorInfo(card).reason).toBe("EXTENDED_AGENT_CARD_NOT_CONFIGURED");
    // The push notification methods run the HTTP bindings' checks: no metadata address as a receiver.
    const task = (await call("SendMessage", message("push me"))).task;
    const push = await failure(
      call("CreateTaskPushNotificationConfig", { taskId: task.id, url: "https://169.254.169.254/hook", token: "t" }),
    );
    expect(push.code).toBe(status.INVALID_ARGUMENT);
    expect(push.details).toMatch(/refused: .*special address/);
    expect(errorInfo(push).reason).toBe("INVALID_PARAMS");
    const configs = await call("ListTaskPushNotificationConfigs", { taskId: task.id });
    expect(configs.configs ?? []).toEqual([]);
  });

  it("refuses bytes that are no request message, and a timestamp no date can hold, with INVALID_ARGUMENT", async () => {
    const raw = await failure(
      new Promise((resolve, reject) =>
        client.makeUnaryRequest(
          "/lf.a2a.v1.A2AService/SendMessage",
          (b: Buffer) => b,
          (b: Buffer) => b,
          Buffer.from([0x12, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x01]),
          auth(TOKEN),
          (err: ServiceError | null, res?: unknown) => (err ? reject(err) : resolve(res)),
        ),
      ),
    );
    expect(raw.code).toBe(status.INVALID_ARGUMENT);
    expect(errorInfo(raw).reason).toBe("INVALID_REQUEST");
    const far = await failure(call("ListTasks", { statusTimestampAfter: { seconds: 1e15 } }));
    expect(far.code).toBe(status.INVALID_ARGUMENT);
  });

  it("refuses a message larger than spec.inbox.maxMessageBytes with RESOURCE_EXHAUSTED, before any hand-off", async () => {
    const before = handler.received.length;
    const big = message("x".repeat(MAX_MESSAGE_BYTES + 1024));
    const err = await failure(call("SendMessage", big));
    expect(err.code).toBe(status.RESOURCE_EXHAUSTED);
    expect(err.details).toMatch(/larger than max/i);
    expect(handler.received.length).toBe(before);
  });

  it("holds the caller to its requests per minute, one budget with the HTTP bindings", async () => {
    let served = 0;
    let refused: ServiceError | undefined;
    // A method that is no task read (reads have a budget of their own, ten times as large), answered
    // FAILED_PRECONDITION once admitted.
    for (let i = 0; i < PER_MINUTE + 5 && !refused; i++) {
      try {
        await call("GetExtendedAgentCard", {}, auth(LIMITED_TOKEN));
        served++;
      } catch (err) {
        if ((err as ServiceError).code === status.RESOURCE_EXHAUSTED) refused = err as ServiceError;
        else served++;
      }
    }
    expect(served).toBe(PER_MINUTE);
    expect(refused!.code).toBe(status.RESOURCE_EXHAUSTED);
    const info = errorInfo(refused!);
    expect(info.reason).toBe("RATE_LIMITED");
    expect(Number(info.metadata?.retryAfterSeconds)).toBeGreaterThan(0);
    // The JSON-RPC binding counts the same budget.
    const rpc = await httpsRequest(`https://localhost:${port}/a2a/v1`, {
      method: "POST",
      headers: { "content-type": "application/json", "a2a-version": "1.0", authorization: `Bearer ${LIMITED_TOKEN}` },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "GetExtendedAgentCard", params: {} }),
      ca: tls.ca,
    });
    expect(rpc.status).toBe(429);
    // Its task reads (polling) draw on their own budget, and are still served.
    await expect(call("ListTasks", {}, auth(LIMITED_TOKEN))).resolves.toHaveProperty("nextPageToken");
    expect((await failure(call("GetTask", { id: "no-such-task" }, auth(LIMITED_TOKEN)))).code).toBe(status.NOT_FOUND);
    // Another caller is not held to it.
    await call("ListTasks", {}, auth(OTHER_TOKEN));
  });

  it("a runtime killed after answering a SendMessage loses neither the task nor its hand-off", async () => {
    await handler.down();
    const { task } = await call("SendMessage", message("survive over gRPC"));
    expect(task.status.state).toBe("TASK_STATE_SUBMITTED");
    await runtime.stop({ signal: "SIGKILL" });
    await handler.up();
    await start();
    const got = await call("GetTask", { id: task.id });
    expect(got.status.state).toBe("TASK_STATE_SUBMITTED");
    // The killed runtime held the hand-off: it comes again once its consumer's ack wait (the
    // handler's timeout and 30 s) has passed.
    const handed = await handedOffTo(handler, task.id, 60_000);
    expect(handed.body.body.text).toBe("survive over gRPC");
  }, 120_000);

  // Last: it stops the runtime.
  it("an open stream ends when the runtime closes, without holding its shutdown", async () => {
    const task = (await call("SendMessage", message("stay open"))).task;
    const events: any[] = [];
    const sub = client.SubscribeToTask({ id: task.id }, auth(TOKEN));
    const ended = new Promise<string>((resolve) => {
      sub.on("data", (e: unknown) => events.push(e));
      sub.on("end", () => resolve("end"));
      sub.on("error", (err: ServiceError) => resolve(`error ${err.code} ${err.details}`));
    });
    await waitFor("the stream's first event", async () => events.length > 0);
    expect(events[0].task.id).toBe(task.id);
    const started = Date.now();
    const exit = await runtime.stop({ graceMs: 20_000 });
    expect(exit).toMatchObject({ code: 0 });
    expect(await ended).toBe("end");
    expect(Date.now() - started).toBeLessThan(4_000);
  });
});
