// The A2A endpoints on the agent's HTTPS listener (docs/a2a.md): the signed agent card and the
// JWKS it points at, the JSON-RPC binding (POST /a2a/v1) and the HTTP+JSON binding (/a2a/rest/…).
// Cheapest checks first, as for the IFP inbox: the per-address limit when the request arrives,
// the body's size (the agent's maxMessageBytes), media type and JSON, then the caller (bearer
// token or RFC 9421 signature, 401), the per-caller limits (429), then the method.
import type { FastifyError, FastifyInstance, FastifyPluginAsync, FastifyReply, FastifyRequest } from "fastify";
import type { ServerResponse } from "node:http";
import type { ZodType } from "zod";
import { ProtocolError } from "../protocol/errors.ts";
import { MAX_JSON_DEPTH, nestedDeeperThan, type SigningKey } from "../protocol/signing.ts";
import type { Agent } from "../resources/agent.ts";
import { A2aAdmission } from "./admission.ts";
import type { A2aCallers, Caller } from "./callers.ts";
import { A2A_CARD_PATH, A2A_JSONRPC_PATH, A2A_JWKS_PATH, A2A_REST_PATH } from "../contract/a2a.ts";
import { ownBaseUrl } from "../net/own-base.ts";
import { type CardCache, jwks } from "./card.ts";
import type { A2aPush } from "./push.ts";
import type { A2aService, StreamEvent } from "./service.ts";
import {
  A2aError,
  Artifact,
  GetTaskRequest,
  issues,
  ListPushConfigsRequest,
  ListTasksRequest,
  Part,
  PushConfigIdRequest,
  SendMessageRequest,
  TaskIdRequest,
  TaskStateSchema,
} from "./wire.ts";
import { z } from "zod";
import { errorTo03, eventTo03, isV03TaskRead, V03_METHODS, v03Method } from "./v03.ts";

export interface A2aRouteDeps {
  agent: Agent;
  service: A2aService;
  push: A2aPush;
  callers: A2aCallers;
  cards: CardCache;
  signing: SigningKey;
  now?: () => number;
  /** The checks before a method, shared with the gRPC binding (one budget per caller); made here when absent. */
  admission?: A2aAdmission;
}

type Binding = "jsonrpc" | "rest";

declare module "fastify" {
  interface FastifyContextConfig {
    /** The A2A binding of the route, for the shape of its errors. */
    a2a?: Binding;
  }
}

interface A2aState {
  caller?: Caller;
  rawBody?: Buffer;
  rpcId?: string | number | null;
  /** The A2A version negotiated (JSON-RPC serves 0.3 too, v03.ts). */
  version?: "1.0" | "0.3";
}
const state = new WeakMap<FastifyRequest, A2aState>();
const of = (req: FastifyRequest): A2aState => {
  let s = state.get(req);
  if (!s) state.set(req, (s = {}));
  return s;
};

/** The A2A routes; registered on the agent's app when spec.a2a.enabled. */
export const a2aRoutes: FastifyPluginAsync<A2aRouteDeps> = async (app, deps) => {
  const spec = deps.agent.spec;
  const jwksText = JSON.stringify(jwks(deps.signing));
  const admission = deps.admission ?? new A2aAdmission(deps.agent, deps.now);

  app.get(A2A_CARD_PATH, async (req, reply) => {
    // The operator always sets spec.baseUrl: the card names it whatever Host the request gives.
    // Without it (a runtime run by hand), the request's Host only when it is one of the agent's own.
    // The card's form is the version asked for: 1.x, or 0.3 (no A2A-Version) with 0.3's fields.
    reply.header("vary", spec.baseUrl ? "a2a-version" : "host, a2a-version");
    let version: "1.0" | "0.3";
    try {
      version = admission.negotiate(
        req.headers["a2a-version"],
        (req.query as Record<string, unknown> | undefined)?.["A2A-Version"],
      );
    } catch (err) {
      const e = toA2aError(err);
      return reply.code(e.http).type("application/json").send(e.restBody());
    }
    return reply
      .type("application/json; charset=utf-8")
      .header("cache-control", "public, max-age=300")
      .send(await deps.cards.get(ownBaseUrl(deps.agent, req.host), version));
  });
  app.get(A2A_JWKS_PATH, async (_req, reply) =>
    reply.type("application/jwk-set+json").header("cache-control", "public, max-age=300").send(jwksText),
  );

  await app.register(async (scope) => protectedRoutes(scope, { ...deps, admission }));
};

/** The streams open now, each with how to end it. */
type OpenStreams = Map<ServerResponse, () => void>;

async function protectedRoutes(app: FastifyInstance, deps: A2aRouteDeps): Promise<void> {
  const openStreams: OpenStreams = new Map();
  // Open streams end when the server closes, rather than holding its shutdown.
  app.addHook("preClose", async () => {
    for (const end of openStreams.values()) end();
  });
  jsonBodies(app);
  callerChecks(app, deps);
  // JSON-RPC 2.0 (section 9): one request per POST, no batches.
  app.post(A2A_JSONRPC_PATH, { config: { a2a: "jsonrpc" } }, (req, reply) => jsonRpc(req, reply, deps, openStreams));
  // HTTP+JSON (section 11): the paths of a2a.proto's google.api.http options under A2A_REST_PATH.
  app.route({
    method: ["GET", "POST", "DELETE"],
    url: `${A2A_REST_PATH}/*`,
    config: { a2a: "rest" },
    handler: (req, reply) => httpJson(req, reply, deps, openStreams),
  });
}

/** Bodies are JSON (kept as sent for the signature's Content-Digest); every error takes the binding's shape. */
function jsonBodies(app: FastifyInstance): void {
  // The body's bytes are kept for the signature's Content-Digest; an empty body is no body.
  const parse = (req: FastifyRequest, body: Buffer, done: (err: Error | null, value?: unknown) => void) => {
    of(req).rawBody = body;
    if (body.length === 0) return done(null, undefined);
    let value: unknown;
    try {
      value = JSON.parse(body.toString("utf8"));
    } catch (err) {
      return done(new A2aError("ParseError", `the body is not valid JSON: ${(err as Error).message}`));
    }
    // Depth no task or message needs, refused before any code walks it recursively.
    if (nestedDeeperThan(value))
      return done(new A2aError("InvalidRequest", `the body is nested deeper than ${MAX_JSON_DEPTH} levels`));
    done(null, value);
  };
  app.removeAllContentTypeParsers();
  app.addContentTypeParser(["application/json", "application/a2a+json"], { parseAs: "buffer" }, parse);
  app.addContentTypeParser("*", { parseAs: "buffer" }, (_req, body, done) => {
    if ((body as Buffer).length === 0) return done(null, undefined);
    done(new A2aError("ContentTypeNotSupported", "Content-Type must be application/json"));
  });

  app.setErrorHandler((err: FastifyError | A2aError, req, reply) => {
    const e = toA2aError(err);
    if (e.kind === "Internal") req.log.error({ err, url: req.url }, "A2A request failed");
    sendError(req, reply, e);
  });
}

/**
 * The cheapest checks first: the per-address limit when the request arrives; then the A2A-Version,
 * the caller (401/403) and the per-caller limits of the inbox before any method runs.
 */
function callerChecks(app: FastifyInstance, deps: A2aRouteDeps): void {
  const admission = deps.admission!;
  app.addHook("onRequest", async (req) => {
    // Every error of a 0.3 request takes 0.3's form, those before its method too (a body refused
    // unread); an unsupported version is refused in preHandler, after the body's checks.
    if (req.routeOptions.config.a2a === "jsonrpc") of(req).version = negotiated(admission, req);
    admission.address(req.clientAddress);
  });
  app.addHook("preHandler", async (req) => {
    const s = of(req);
    const body = req.body as { id?: unknown } | undefined;
    if (req.routeOptions.config.a2a === "jsonrpc" && body && typeof body === "object") {
      const id = body.id;
      s.rpcId = typeof id === "string" || typeof id === "number" ? id : null;
    }
    const asked = [req.headers["a2a-version"], (req.query as Record<string, unknown> | undefined)?.["A2A-Version"]];
    if (req.routeOptions.config.a2a === "jsonrpc") admission.negotiate(...asked);
    else admission.version(...asked);
    const caller = await deps.callers.authenticate({
      method: req.method,
      url: req.url,
      host: req.host,
      headers: req.headers,
      body: s.rawBody,
      clientAddress: req.clientAddress,
    });
    // Reads of one's own tasks (polling) have their own, larger budget than everything else.
    admission.caller(caller, s.rawBody?.length ?? 0, isTaskRead(req));
    s.caller = caller;
  });
}

/** The version a JSON-RPC request negotiates, 1.0 for one that asks for no version this agent has. */
function negotiated(admission: A2aAdmission, req: FastifyRequest): "1.0" | "0.3" {
  try {
    return admission.negotiate(
      req.headers["a2a-version"],
      (req.query as Record<string, unknown> | undefined)?.["A2A-Version"],
    );
  } catch {
    return "1.0";
  }
}

/** Whether a request reads tasks: GetTask or ListTasks, in either binding. */
function isTaskRead(req: FastifyRequest): boolean {
  if (req.routeOptions.config.a2a === "jsonrpc") {
    const method = (req.body as { method?: unknown } | undefined)?.method;
    return of(req).version === "0.3" ? isV03TaskRead(method) : method === "GetTask" || method === "ListTasks";
  }
  const path = ((req.params as { "*"?: string })["*"] ?? "").split("?")[0] ?? "";
  return req.method === "GET" && /^tasks(\/[^/:]+)?$/.test(path);
}

/** One JSON-RPC request: its method run for the authenticated caller. */
async function jsonRpc(req: FastifyRequest, reply: FastifyReply, deps: A2aRouteDeps, openStreams: OpenStreams) {
  const caller = of(req).caller!;
  const body = req.body as Record<string, unknown> | undefined;
  if (Array.isArray(body)) throw new A2aError("InvalidRequest", "batch requests are not supported");
  if (
    !body ||
    typeof body !== "object" ||
    body.jsonrpc !== "2.0" ||
    typeof body.method !== "string" ||
    ("id" in body && body.id !== null && typeof body.id !== "string" && typeof body.id !== "number")
  )
    throw new A2aError(
      "InvalidRequest",
      'a JSON-RPC 2.0 request object is required: {"jsonrpc": "2.0", "method", "params", "id"}',
    );
  // A 0.3 request is the 1.0 request its method's entry of the table makes, answered in 0.3's form.
  const v03 = of(req).version === "0.3" ? v03Method(body.method) : undefined;
  const method = v03?.method ?? body.method;
  const params = v03 ? v03.params(body.params ?? {}) : (body.params ?? {});
  const ok = (result: unknown) =>
    reply
      .type("application/json")
      .send({ jsonrpc: "2.0", id: of(req).rpcId ?? null, result: v03 ? v03.result(result) : result });
  const events = v03 ? eventTo03 : undefined;
  const run = Object.hasOwn(JSON_RPC_METHODS, method) ? JSON_RPC_METHODS[method] : undefined;
  if (!run)
    throw new A2aError(
      "MethodNotFound",
      Object.hasOwn(V03_METHODS, method)
        ? `${method} is a method of A2A 0.3; this request is A2A 1.0 (A2A-Version): send it without A2A-Version, or call the 1.0 method ${V03_METHODS[method]!.method}`
        : `no method ${String(method).slice(0, 64)}`,
    );
  const result = await run({ req, reply, deps, openStreams, caller, params, events });
  if (result !== STREAMED) return ok(result);
}

/** What one JSON-RPC call of a method is given: the request, the caller, the params (1.0's form). */
interface RpcCall {
  req: FastifyRequest;
  reply: FastifyReply;
  deps: A2aRouteDeps;
  openStreams: OpenStreams;
  caller: Caller;
  params: unknown;
  /** The form of a stream's events (0.3's, for a 0.3 request). */
  events: EventForm | undefined;
}
/** What a streaming method returns: it has answered with its stream. */
const STREAMED = Symbol("streamed");

/** The JSON-RPC methods of A2A 1.0: each one's result, or STREAMED once it has answered with a stream. */
const JSON_RPC_METHODS: Record<string, (call: RpcCall) => Promise<unknown>> = {
  SendMessage: async ({ deps, caller, params }) => ({
    task: await deps.service.send(caller, check(SendMessageRequest, params)),
  }),
  SendStreamingMessage: async ({ req, reply, deps, openStreams, params, events }) => {
    await sendStreaming(req, reply, "jsonrpc", deps, openStreams, check(SendMessageRequest, params), events);
    return STREAMED;
  },
  GetTask: async ({ deps, caller, params }) => {
    const p = check(GetTaskRequest, params);
    return deps.service.get(caller, p.id, p.historyLength);
  },
  ListTasks: async ({ deps, caller, params }) => deps.service.list(caller, check(ListTasksRequest, params)),
  CancelTask: async ({ deps, caller, params }) => deps.service.cancel(caller, check(TaskIdRequest, params).id),
  SubscribeToTask: async ({ req, reply, deps, openStreams, params, events }) => {
    await subscribe(req, reply, "jsonrpc", deps, openStreams, check(TaskIdRequest, params).id, events);
    return STREAMED;
  },
  CreateTaskPushNotificationConfig: async ({ deps, caller, params }) => deps.push.create(caller, params),
  GetTaskPushNotificationConfig: async ({ deps, caller, params }) => {
    const p = check(PushConfigIdRequest, params);
    return deps.push.get(caller, p.taskId, p.id);
  },
  ListTaskPushNotificationConfigs: async ({ deps, caller, params }) => {
    const p = check(ListPushConfigsRequest, params);
    return deps.push.list(caller, p.taskId, p.pageSize, p.pageToken);
  },
  DeleteTaskPushNotificationConfig: async ({ deps, caller, params }) => {
    const p = check(PushConfigIdRequest, params);
    await deps.push.delete(caller, p.taskId, p.id);
    return {};
  },
  GetExtendedAgentCard: async () => {
    throw new A2aError("ExtendedAgentCardNotConfigured", "this agent has no extended agent card");
  },
};

/** One HTTP+JSON request: the operation its method and path name, for the authenticated caller. */
async function httpJson(req: FastifyRequest, reply: FastifyReply, deps: A2aRouteDeps, openStreams: OpenStreams) {
  const { service, push } = deps;
  const caller = of(req).caller!;
  const path = (req.params as { "*": string })["*"].split("?")[0] ?? "";
  const query = req.query as Record<string, unknown>;
  const body = (req.body ?? {}) as Record<string, unknown>;
  const json = (value: unknown) => reply.type("application/json").send(value);
  const m = req.method;
  let match: RegExpExecArray | null;
  if (path === "message:send" && m === "POST")
    return json({ task: await service.send(caller, check(SendMessageRequest, body)) });
  if (path === "message:stream" && m === "POST")
    return sendStreaming(req, reply, "rest", deps, openStreams, check(SendMessageRequest, body));
  if (path === "tasks" && m === "GET") return json(await service.list(caller, check(ListTasksRequest, query)));
  if ((match = /^tasks\/([^/:]+)$/.exec(path)) && m === "GET") {
    const p = check(GetTaskRequest, { ...query, id: decodeURIComponent(match[1] ?? "") });
    return json(await service.get(caller, p.id, p.historyLength));
  }
  if ((match = /^tasks\/([^/:]+):cancel$/.exec(path)) && m === "POST")
    return json(await service.cancel(caller, decodeURIComponent(match[1] ?? "")));
  if ((match = /^tasks\/([^/:]+):subscribe$/.exec(path)) && (m === "GET" || m === "POST"))
    return subscribe(req, reply, "rest", deps, openStreams, decodeURIComponent(match[1] ?? ""));
  if ((match = /^tasks\/([^/:]+)\/pushNotificationConfigs$/.exec(path))) {
    const taskId = decodeURIComponent(match[1] ?? "");
    if (m === "POST") return json(await push.create(caller, body, taskId));
    if (m === "GET") {
      const p = check(ListPushConfigsRequest, { ...query, taskId });
      return json(await push.list(caller, p.taskId, p.pageSize, p.pageToken));
    }
  }
  if ((match = /^tasks\/([^/:]+)\/pushNotificationConfigs\/([^/]+)$/.exec(path)) && (m === "GET" || m === "DELETE")) {
    const p = check(PushConfigIdRequest, {
      taskId: decodeURIComponent(match[1] ?? ""),
      id: decodeURIComponent(match[2] ?? ""),
    });
    if (m === "GET") return json(await push.get(caller, p.taskId, p.id));
    await push.delete(caller, p.taskId, p.id);
    return json({});
  }
  if (path === "extendedAgentCard")
    throw new A2aError("ExtendedAgentCardNotConfigured", "this agent has no extended agent card");
  throw new A2aError("MethodNotFound", `no A2A operation ${m} ${A2A_REST_PATH}/${path.slice(0, 128)}`);
}

/** SendStreamingMessage on either binding: the message stored with its task, then the task's events streamed. */
async function sendStreaming(
  req: FastifyRequest,
  reply: FastifyReply,
  binding: Binding,
  { service }: A2aRouteDeps,
  openStreams: OpenStreams,
  request: SendMessageRequest,
  events?: EventForm,
): Promise<void> {
  const caller = of(req).caller!;
  const stored = await service.accept(caller, request);
  return stream(
    req,
    reply,
    binding,
    (signal) => service.follow(caller, stored.task.id, signal, stored.task),
    openStreams,
    events,
  );
}

/** SubscribeToTask on either binding: the caller's task's events from now on. */
async function subscribe(
  req: FastifyRequest,
  reply: FastifyReply,
  binding: Binding,
  { service }: A2aRouteDeps,
  openStreams: OpenStreams,
  id: string,
  events?: EventForm,
): Promise<void> {
  const caller = of(req).caller!;
  await service.subscribable(caller, id);
  return stream(req, reply, binding, (signal) => service.follow(caller, id, signal), openStreams, events);
}

export function check<T>(schema: ZodType<T>, value: unknown): T {
  const r = schema.safeParse(value);
  if (!r.success) throw new A2aError("InvalidParams", `invalid params: ${issues(r.error)}`);
  return r.data;
}

/** How a stream's events are written: as they are (1.0), or in another version's form. */
type EventForm = (ev: StreamEvent) => unknown;

/** Server-Sent Events of a task: JSON-RPC responses (same id) or, for HTTP+JSON, StreamResponse objects. */
async function stream(
  req: FastifyRequest,
  reply: FastifyReply,
  binding: Binding,
  follow: (signal: AbortSignal) => AsyncGenerator<StreamEvent>,
  openStreams: Map<ServerResponse, () => void>,
  form: EventForm = (ev) => ev,
): Promise<void> {
  reply.hijack();
  const raw = reply.raw;
  // Ended when the client goes, or when the server closes (gracefully: the stream's last chunk is sent).
  const ac = new AbortController();
  req.raw.socket.once("close", () => ac.abort());
  openStreams.set(raw, () => ac.abort());
  const events = follow(ac.signal);
  // A comment now and then keeps proxies from closing a quiet stream.
  const keepAlive = setInterval(() => raw.write(": keep-alive\n\n"), 15_000);
  keepAlive.unref();
  raw.writeHead(200, {
    "content-type": "text/event-stream; charset=utf-8",
    "cache-control": "no-cache",
    "x-accel-buffering": "no",
  });
  const id = of(req).rpcId ?? null;
  const write = (data: unknown, event?: string) =>
    raw.write(`${event ? `event: ${event}\n` : ""}data: ${JSON.stringify(data)}\n\n`);
  try {
    for await (const ev of events) {
      if (raw.destroyed) break;
      write(binding === "jsonrpc" ? { jsonrpc: "2.0", id, result: form(ev) } : ev);
    }
  } catch (err) {
    const e = toA2aError(err);
    if (e.kind === "Internal") req.log.error({ err }, "A2A stream failed");
    if (!raw.destroyed)
      write(
        binding === "jsonrpc" ? { jsonrpc: "2.0", id, error: rpcErrorOf(req, e) } : e.restBody(),
        binding === "rest" ? "error" : undefined,
      );
  } finally {
    clearInterval(keepAlive);
    openStreams.delete(raw);
    raw.end();
  }
}

/** Refusals before a method runs keep their HTTP status; a JSON-RPC method's errors are answered 200. */
const TRANSPORT_KINDS = new Set(["Unauthenticated", "Forbidden", "TooLarge", "RateLimited", "Unavailable", "Internal"]);

/** The JSON-RPC error object in the form of the request's version. */
const rpcErrorOf = (req: FastifyRequest, e: A2aError) =>
  state.get(req)?.version === "0.3" ? errorTo03(e) : e.rpcError();

function sendError(req: FastifyRequest, reply: FastifyReply, e: A2aError): void {
  for (const [k, v] of Object.entries(e.headers)) reply.header(k, v);
  if (req.routeOptions.config.a2a === "jsonrpc") {
    reply
      .code(TRANSPORT_KINDS.has(e.kind) || e.kind === "ContentTypeNotSupported" ? e.http : 200)
      .type("application/json")
      .send({ jsonrpc: "2.0", id: state.get(req)?.rpcId ?? null, error: rpcErrorOf(req, e) });
    return;
  }
  reply.code(e.http).type("application/json").send(e.restBody());
}

export function toA2aError(err: unknown): A2aError {
  if (err instanceof A2aError) return err;
  if (err instanceof ProtocolError) {
    if (err.statusCode === 401) return new A2aError("Unauthenticated", err.message);
    if (err.statusCode === 413) return new A2aError("TooLarge", err.message);
    if (err.statusCode === 429) return new A2aError("RateLimited", err.message, err.headers);
    if (err.statusCode === 503) return new A2aError("Unavailable", err.message, err.headers);
    if (err.statusCode === 404) return new A2aError("TaskNotFound", err.message);
    if (err.statusCode < 500) return new A2aError("InvalidRequest", err.message);
    return new A2aError("Internal", "unexpected failure; see the runtime's log");
  }
  const e = err as FastifyError;
  if (e?.code === "FST_ERR_CTP_BODY_TOO_LARGE" || e?.statusCode === 413)
    return new A2aError("TooLarge", "the request body exceeds the size limit (spec.inbox.maxMessageBytes)");
  if (e?.code === "FST_ERR_CTP_INVALID_MEDIA_TYPE" || e?.statusCode === 415)
    return new A2aError("ContentTypeNotSupported", "Content-Type must be application/json");
  if (e instanceof SyntaxError) return new A2aError("ParseError", `the body is not valid JSON: ${e.message}`);
  if (typeof e?.statusCode === "number" && e.statusCode >= 400 && e.statusCode < 500)
    return new A2aError("InvalidRequest", e.message);
  return new A2aError("Internal", "unexpected failure; see the runtime's log");
}

const LocalUpdate = z.object({
  state: TaskStateSchema.optional(),
  message: z
    .object({
      messageId: z.string().min(1).max(256).optional(),
      text: z.string().optional(),
      parts: z.array(Part).min(1).max(256).optional(),
      metadata: z.record(z.string(), z.unknown()).optional(),
    })
    .refine((m) => m.text !== undefined || m.parts !== undefined, { message: "a message needs text or parts" })
    .optional(),
  artifact: Artifact.extend({
    artifactId: z.string().min(1).max(256).optional(),
    parts: z.array(Part).min(1).max(256).optional(),
    text: z.string().optional(),
    append: z.boolean().optional(),
    lastChunk: z.boolean().optional(),
  })
    .refine((a) => a.text !== undefined || a.parts !== undefined, { message: "an artifact needs text or parts" })
    .optional(),
});

/**
 * The application's side (local API): POST /a2a/tasks/{id} with a state, a message, an
 * artifact, any of them; the task's caller sees each as the task's status, history and artifacts.
 */
export const a2aLocalRoutes: FastifyPluginAsync<{ service: A2aService }> = async (app, deps) => {
  app.post("/a2a/tasks/:id", async (req, reply) => {
    const id = (req.params as { id: string }).id;
    const r = LocalUpdate.safeParse(req.body ?? {});
    if (!r.success) throw new ProtocolError(400, "invalid_format", `invalid task update: ${issues(r.error)}`);
    const u = r.data;
    if (!u.state && !u.message && !u.artifact)
      throw new ProtocolError(400, "invalid_format", "a task update needs a state, a message or an artifact");
    try {
      const task = await deps.service.update(id, {
        state: u.state,
        message: u.message
          ? {
              messageId: u.message.messageId ?? crypto.randomUUID(),
              role: "ROLE_AGENT",
              parts: u.message.parts ?? [{ text: u.message.text! }],
              ...(u.message.metadata ? { metadata: u.message.metadata } : {}),
            }
          : undefined,
        artifact: u.artifact
          ? (({ text, ...a }) => ({
              ...a,
              artifactId: a.artifactId ?? crypto.randomUUID(),
              parts: a.parts ?? [{ text: text! }],
            }))(u.artifact)
          : undefined,
      });
      if (!task) throw new ProtocolError(404, "not_found", `no A2A task ${id}`);
      return reply.send({ task });
    } catch (err) {
      if (err instanceof A2aError) {
        if (err.kind === "UnsupportedOperation") throw new ProtocolError(409, "invalid_format", err.message);
        if (err.kind === "TooLarge") throw new ProtocolError(413, "payload_too_large", err.message);
        if (err.kind === "Unavailable") throw new ProtocolError(503, "unavailable", err.message, err.headers);
      }
      throw err;
    }
  });
};
