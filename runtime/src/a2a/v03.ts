// A2A 0.3 on the JSON-RPC endpoint (docs/a2a.md#versions): a request negotiated as 0.3 (no
// A2A-Version, or 0.3) names a 0.3 method, whose params are read in 0.3's shapes (kind-tagged
// parts, lower-case roles) and translated to the 1.0 request the one dispatcher of routes.ts runs;
// its result, stream events and errors are translated back. The table below is the whole
// difference: the task store, the admission and every check are those of 1.0.
import { z } from "zod";
import type { StreamEvent } from "./service.ts";
import {
  A2A_METHODS,
  A2aError,
  type Artifact,
  INTERRUPTED,
  issues,
  type Message,
  type Part,
  type Task,
  TERMINAL,
  type TaskStatus,
} from "./wire.ts";

/** The protocolVersion of A2A 0.3 in supportedInterfaces (as the official SDKs write it). */
export const A2A_V03_PROTOCOL_VERSION = "0.3";
/** The card's top-level protocolVersion, which 0.3 clients read. */
export const A2A_V03_CARD_VERSION = "0.3.0";

const Struct = z.record(z.string(), z.unknown());
const Id = z.string().min(1).max(256);

// 0.3's shapes, strict: a field of 1.0 (or of neither) in a 0.3 request is invalid params, so
// a request is read in one version's terms only.
const FileBase = { mimeType: z.string().max(256).optional(), name: z.string().max(1024).optional() };
const Part03 = z.discriminatedUnion("kind", [
  z.strictObject({ kind: z.literal("text"), text: z.string(), metadata: Struct.optional() }),
  z.strictObject({
    kind: z.literal("file"),
    file: z.union([
      z.strictObject({ ...FileBase, bytes: z.string().max(64 * 1024 * 1024) }),
      z.strictObject({ ...FileBase, uri: z.string().max(8192) }),
    ]),
    metadata: Struct.optional(),
  }),
  z.strictObject({ kind: z.literal("data"), data: Struct, metadata: Struct.optional() }),
]);
type Part03 = z.infer<typeof Part03>;

const Message03 = z.strictObject({
  kind: z.literal("message"),
  messageId: Id,
  role: z.enum(["user", "agent"]),
  parts: z.array(Part03).min(1).max(256),
  contextId: Id.optional(),
  taskId: Id.optional(),
  referenceTaskIds: z.array(Id).max(64).optional(),
  extensions: z.array(z.string().max(2048)).max(32).optional(),
  metadata: Struct.optional(),
});

const Auth03 = z.strictObject({
  schemes: z.array(z.string().max(64)).min(1).max(8),
  credentials: z.string().max(4096).optional(),
});
const PushConfig03 = z.strictObject({
  id: z.string().max(128).optional(),
  url: z.string().min(1).max(2048),
  token: z.string().max(1024).optional(),
  authentication: Auth03.optional(),
});

const MessageSendParams = z.strictObject({
  message: Message03,
  configuration: z
    .strictObject({
      acceptedOutputModes: z.array(z.string().max(256)).max(64).optional(),
      historyLength: z.number().int().min(0).max(10_000).optional(),
      pushNotificationConfig: PushConfig03.optional(),
      blocking: z.boolean().optional(),
    })
    .optional(),
  metadata: Struct.optional(),
});
const TaskQueryParams = z.strictObject({
  id: Id,
  historyLength: z.number().int().min(0).max(10_000).optional(),
  metadata: Struct.optional(),
});
const TaskIdParams = z.strictObject({ id: Id, metadata: Struct.optional() });
const SetPushParams = z.strictObject({ taskId: Id, pushNotificationConfig: PushConfig03 });
const GetPushParams = z.strictObject({
  id: Id,
  pushNotificationConfigId: z.string().min(1).max(256).optional(),
  metadata: Struct.optional(),
});
const DeletePushParams = z.strictObject({
  id: Id,
  pushNotificationConfigId: z.string().min(1).max(256),
  metadata: Struct.optional(),
});

function read<T>(schema: z.ZodType<T>, value: unknown): T {
  const r = schema.safeParse(value);
  if (!r.success) throw new A2aError("InvalidParams", `invalid A2A 0.3 params: ${issues(r.error)}`);
  return r.data;
}

// --- 0.3 → 1.0 ---------------------------------------------------------------------------

function partTo10(p: Part03): Part {
  const metadata = p.metadata ? { metadata: p.metadata } : {};
  if (p.kind === "text") return { text: p.text, ...metadata };
  if (p.kind === "data") return { data: p.data, ...metadata };
  const f = p.file;
  const named = { ...(f.mimeType ? { mediaType: f.mimeType } : {}), ...(f.name ? { filename: f.name } : {}) };
  return "bytes" in f ? { raw: f.bytes, ...named, ...metadata } : { url: f.uri, ...named, ...metadata };
}

function messageTo10(m: z.infer<typeof Message03>): Message {
  const { kind: _, role, parts, ...rest } = m;
  return { ...rest, role: role === "user" ? "ROLE_USER" : "ROLE_AGENT", parts: parts.map(partTo10) };
}

function pushTo10(c: z.infer<typeof PushConfig03>, taskId?: string): Record<string, unknown> {
  // 0.3 lists the schemes the receiver takes; the agent sends Bearer credentials only (push.ts).
  const scheme = c.authentication?.schemes.find((s) => /^bearer$/i.test(s)) ?? c.authentication?.schemes[0];
  return {
    ...(taskId ? { taskId } : {}),
    ...(c.id ? { id: c.id } : {}),
    url: c.url,
    ...(c.token ? { token: c.token } : {}),
    ...(c.authentication ? { authentication: { scheme, credentials: c.authentication.credentials ?? "" } } : {}),
  };
}

// --- 1.0 → 0.3 ---------------------------------------------------------------------------

const isPlainObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === "object" && v !== null && !Array.isArray(v);

function partTo03(p: Part): Part03 {
  const metadata = p.metadata ? { metadata: p.metadata } : {};
  if (p.text !== undefined) return { kind: "text", text: p.text, ...metadata };
  if (p.data !== undefined)
    // 0.3's data is an object: any other value goes wrapped, marked as the official SDKs mark it.
    return isPlainObject(p.data)
      ? { kind: "data", data: p.data, ...metadata }
      : { kind: "data", data: { value: p.data }, metadata: { ...p.metadata, data_part_compat: true } };
  const named = { ...(p.mediaType ? { mimeType: p.mediaType } : {}), ...(p.filename ? { name: p.filename } : {}) };
  return p.url !== undefined
    ? { kind: "file", file: { uri: p.url, ...named }, ...metadata }
    : { kind: "file", file: { bytes: p.raw ?? "", ...named }, ...metadata };
}

function messageTo03(m: Message): Record<string, unknown> {
  const { role, parts, ...rest } = m;
  return { kind: "message", ...rest, role: role === "ROLE_USER" ? "user" : "agent", parts: parts.map(partTo03) };
}

/** TASK_STATE_INPUT_REQUIRED → input-required. */
export const stateTo03 = (state: string): string =>
  state.startsWith("TASK_STATE_") && state !== "TASK_STATE_UNSPECIFIED"
    ? state.slice("TASK_STATE_".length).toLowerCase().replace(/_/g, "-")
    : "unknown";

function statusTo03(s: TaskStatus): Record<string, unknown> {
  return {
    state: stateTo03(s.state),
    ...(s.message ? { message: messageTo03(s.message) } : {}),
    timestamp: s.timestamp,
  };
}

const artifactTo03 = (a: Artifact): Record<string, unknown> => ({ ...a, parts: a.parts.map(partTo03) });

export function taskTo03(t: Task): Record<string, unknown> {
  return {
    kind: "task",
    id: t.id,
    contextId: t.contextId,
    status: statusTo03(t.status),
    ...(t.artifacts ? { artifacts: t.artifacts.map(artifactTo03) } : {}),
    ...(t.history ? { history: t.history.map(messageTo03) } : {}),
    ...(t.metadata ? { metadata: t.metadata } : {}),
  };
}

/** A stream event as 0.3 sends it: the task, or a kind-tagged update (`final` at a state the stream ends at). */
export function eventTo03(ev: StreamEvent): Record<string, unknown> {
  if ("task" in ev) return taskTo03(ev.task);
  if ("statusUpdate" in ev) {
    const u = ev.statusUpdate;
    const final = TERMINAL.has(u.status.state) || INTERRUPTED.has(u.status.state);
    return { kind: "status-update", taskId: u.taskId, contextId: u.contextId, status: statusTo03(u.status), final };
  }
  const u = ev.artifactUpdate;
  return {
    kind: "artifact-update",
    taskId: u.taskId,
    contextId: u.contextId,
    artifact: artifactTo03(u.artifact),
    ...(u.append !== undefined ? { append: u.append } : {}),
    ...(u.lastChunk !== undefined ? { lastChunk: u.lastChunk } : {}),
  };
}

interface PushConfig10 {
  id: string;
  taskId: string;
  url: string;
  token?: string;
  authentication?: { scheme: string; credentials: string };
}

function pushTo03(c: PushConfig10): Record<string, unknown> {
  return {
    taskId: c.taskId,
    pushNotificationConfig: {
      id: c.id,
      url: c.url,
      ...(c.token ? { token: c.token } : {}),
      ...(c.authentication
        ? { authentication: { schemes: [c.authentication.scheme], credentials: c.authentication.credentials } }
        : {}),
    },
  };
}

/**
 * A card's security schemes as 0.3 writes them, tagged by `type` (OpenAPI's form), from 1.0's,
 * one field per kind: {apiKeySecurityScheme: {location, name}} → {type: "apiKey", in, name}.
 */
export function securitySchemesTo03(
  schemes: Record<string, Record<string, unknown>>,
): Record<string, Record<string, unknown>> {
  const out: Record<string, Record<string, unknown>> = {};
  for (const [name, scheme] of Object.entries(schemes)) {
    const [kind, fields] = Object.entries(scheme)[0] ?? [];
    const f = (fields ?? {}) as Record<string, unknown>;
    if (kind === "apiKeySecurityScheme") {
      const { location, ...rest } = f;
      out[name] = { type: "apiKey", in: location, ...rest };
    } else if (kind === "httpAuthSecurityScheme") out[name] = { type: "http", ...f };
    else if (kind === "openIdConnectSecurityScheme") out[name] = { type: "openIdConnect", ...f };
    else if (kind === "mtlsSecurityScheme") out[name] = { type: "mutualTLS", ...f };
    else if (kind === "oauth2SecurityScheme") out[name] = { type: "oauth2", ...f };
  }
  return out;
}

/**
 * A JSON-RPC error as 0.3 writes it: the same code and message, `data` an object — the
 * google.rpc.ErrorInfo 1.0 lists first (its metadata holding retryAfterSeconds when the client
 * should wait) — as 0.3's clients read it (the Go SDK decodes `data` as an object).
 */
export function errorTo03(e: A2aError): { code: number; message: string; data: Record<string, unknown> } {
  const { code, message, data } = e.rpcError();
  return { code, message, data: data[0] ?? {} };
}

// --- the table ---------------------------------------------------------------------------

/** One 0.3 method: the 1.0 method it is, its params in 1.0 form, its 1.0 result in 0.3 form. */
export interface V03Method {
  method: string;
  params(p: unknown): Record<string, unknown>;
  result(r: unknown): unknown;
}

const asTask = (r: unknown) => taskTo03(r as Task);

export const V03_METHODS: Readonly<Record<string, V03Method>> = {
  "message/send": {
    method: "SendMessage",
    params: (p) => {
      const { message, configuration: c, metadata } = read(MessageSendParams, p);
      return {
        message: messageTo10(message),
        ...(c
          ? {
              configuration: {
                ...(c.acceptedOutputModes ? { acceptedOutputModes: c.acceptedOutputModes } : {}),
                ...(c.historyLength !== undefined ? { historyLength: c.historyLength } : {}),
                // 0.3 blocks unless told not to; 1.0 says it the other way round.
                returnImmediately: c.blocking === false,
                ...(c.pushNotificationConfig ? { taskPushNotificationConfig: pushTo10(c.pushNotificationConfig) } : {}),
              },
            }
          : {}),
        ...(metadata ? { metadata } : {}),
      };
    },
    result: (r) => taskTo03((r as { task: Task }).task),
  },
  "message/stream": {
    method: "SendStreamingMessage",
    params: (p) => V03_METHODS["message/send"]!.params(p),
    result: (r) => r,
  },
  "tasks/get": { method: "GetTask", params: (p) => read(TaskQueryParams, p), result: asTask },
  "tasks/cancel": { method: "CancelTask", params: (p) => read(TaskIdParams, p), result: asTask },
  "tasks/resubscribe": { method: "SubscribeToTask", params: (p) => read(TaskIdParams, p), result: (r) => r },
  "tasks/pushNotificationConfig/set": {
    method: "CreateTaskPushNotificationConfig",
    params: (p) => {
      const { taskId, pushNotificationConfig } = read(SetPushParams, p);
      return pushTo10(pushNotificationConfig, taskId);
    },
    result: (r) => pushTo03(r as PushConfig10),
  },
  "tasks/pushNotificationConfig/get": {
    method: "GetTaskPushNotificationConfig",
    params: (p) => {
      const { id, pushNotificationConfigId } = read(GetPushParams, p);
      // Without a config id, the task's own config (whose id is the task's, as 0.3 makes it).
      return { taskId: id, id: pushNotificationConfigId ?? id };
    },
    result: (r) => pushTo03(r as PushConfig10),
  },
  "tasks/pushNotificationConfig/list": {
    method: "ListTaskPushNotificationConfigs",
    // 0.3 answers every config at once: one page holds them all (push.ts keeps at most 10 a task).
    params: (p) => ({ taskId: read(TaskIdParams, p).id, pageSize: 100 }),
    result: (r) => ((r as { configs: PushConfig10[] }).configs ?? []).map(pushTo03),
  },
  "tasks/pushNotificationConfig/delete": {
    method: "DeleteTaskPushNotificationConfig",
    params: (p) => {
      const { id, pushNotificationConfigId } = read(DeletePushParams, p);
      return { taskId: id, id: pushNotificationConfigId };
    },
    result: () => null,
  },
  "agent/getAuthenticatedExtendedCard": { method: "GetExtendedAgentCard", params: () => ({}), result: (r) => r },
};

/** The 0.3 method a request names; a name of 1.0, or of neither, is -32601 saying which version has it. */
export function v03Method(name: string): V03Method {
  const m = Object.hasOwn(V03_METHODS, name) ? V03_METHODS[name] : undefined;
  if (m) return m;
  throw new A2aError(
    "MethodNotFound",
    A2A_METHODS.has(name)
      ? `${name} is a method of A2A 1.0; this request is A2A 0.3 (no A2A-Version): send A2A-Version: 1.0 to call it`
      : `A2A 0.3 has no method ${name.slice(0, 64)}`,
  );
}

/** Whether a 0.3 method reads tasks (the larger read budget, as GetTask in 1.0). */
export const isV03TaskRead = (name: unknown): boolean => name === "tasks/get";
