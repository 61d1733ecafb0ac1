// A2A v1.0 on the wire (specification/a2a.proto, in its JSON form): the requests the agent
// accepts, checked with zod, and the errors of both bindings (JSON-RPC 2.0 and HTTP+JSON).
import { z } from "zod";

export const A2A_PROTOCOL_VERSION = "1.0";

/** The JSON-RPC methods of A2A 1.0 (section 9.4). */
export const A2A_METHODS: ReadonlySet<string> = new Set([
  "SendMessage",
  "SendStreamingMessage",
  "GetTask",
  "ListTasks",
  "CancelTask",
  "SubscribeToTask",
  "CreateTaskPushNotificationConfig",
  "GetTaskPushNotificationConfig",
  "ListTaskPushNotificationConfigs",
  "DeleteTaskPushNotificationConfig",
  "GetExtendedAgentCard",
]);

export const TASK_STATES = [
  "TASK_STATE_SUBMITTED",
  "TASK_STATE_WORKING",
  "TASK_STATE_COMPLETED",
  "TASK_STATE_FAILED",
  "TASK_STATE_CANCELED",
  "TASK_STATE_INPUT_REQUIRED",
  "TASK_STATE_REJECTED",
  "TASK_STATE_AUTH_REQUIRED",
] as const;
export type TaskState = (typeof TASK_STATES)[number];
export const TaskStateSchema = z.enum(TASK_STATES);

/** States after which a task takes no more messages and its stream ends. */
export const TERMINAL: ReadonlySet<string> = new Set([
  "TASK_STATE_COMPLETED",
  "TASK_STATE_FAILED",
  "TASK_STATE_CANCELED",
  "TASK_STATE_REJECTED",
]);
/** States in which the task waits for its caller: a blocking send answers at them. */
export const INTERRUPTED: ReadonlySet<string> = new Set(["TASK_STATE_INPUT_REQUIRED", "TASK_STATE_AUTH_REQUIRED"]);

const Struct = z.record(z.string(), z.unknown());

/** A Part: exactly one of text, raw (base64), url, data. */
export const Part = z
  .looseObject({
    text: z.string().optional(),
    raw: z
      .string()
      .max(64 * 1024 * 1024)
      .optional(),
    url: z.string().max(8192).optional(),
    data: z.unknown().optional(),
    metadata: Struct.optional(),
    filename: z.string().max(1024).optional(),
    mediaType: z.string().max(256).optional(),
  })
  .refine((p) => [p.text, p.raw, p.url, p.data].filter((v) => v !== undefined).length === 1, {
    message: "a part holds exactly one of text, raw, url or data",
  });
export type Part = z.infer<typeof Part>;

const Id = z.string().min(1).max(256);

export const Message = z.looseObject({
  messageId: Id,
  contextId: Id.optional(),
  taskId: Id.optional(),
  role: z.enum(["ROLE_USER", "ROLE_AGENT"]),
  parts: z.array(Part).min(1).max(256),
  metadata: Struct.optional(),
  extensions: z.array(z.string().max(2048)).max(32).optional(),
  referenceTaskIds: z.array(Id).max(64).optional(),
});
export type Message = z.infer<typeof Message>;

export const Artifact = z.looseObject({
  artifactId: Id,
  name: z.string().max(1024).optional(),
  description: z.string().max(8192).optional(),
  parts: z.array(Part).min(1).max(256),
  metadata: Struct.optional(),
  extensions: z.array(z.string().max(2048)).max(32).optional(),
});
export type Artifact = z.infer<typeof Artifact>;

export interface TaskStatus {
  state: TaskState;
  message?: Message;
  timestamp: string;
}

export interface Task {
  id: string;
  contextId: string;
  status: TaskStatus;
  artifacts?: Artifact[];
  history?: Message[];
  metadata?: Record<string, unknown>;
}

const HistoryLength = z.coerce.number().int().min(0).max(10_000);

export const SendMessageRequest = z.looseObject({
  tenant: z.string().max(256).optional(),
  message: Message,
  configuration: z
    .looseObject({
      acceptedOutputModes: z.array(z.string().max(256)).max(64).optional(),
      historyLength: HistoryLength.optional(),
      returnImmediately: z.boolean().optional(),
      taskPushNotificationConfig: z.unknown().optional(),
      pushNotificationConfig: z.unknown().optional(),
    })
    .optional(),
  metadata: Struct.optional(),
});
export type SendMessageRequest = z.infer<typeof SendMessageRequest>;

export const GetTaskRequest = z.looseObject({
  tenant: z.string().max(256).optional(),
  id: Id,
  historyLength: HistoryLength.optional(),
});

export const ListTasksRequest = z.looseObject({
  tenant: z.string().max(256).optional(),
  contextId: Id.optional(),
  status: z.union([TaskStateSchema, z.literal("TASK_STATE_UNSPECIFIED")]).optional(),
  pageSize: z.coerce.number().int().min(1).max(100).optional(),
  pageToken: z.string().max(512).optional(),
  historyLength: HistoryLength.optional(),
  statusTimestampAfter: z.iso.datetime({ offset: true }).optional(),
  includeArtifacts: z.union([z.boolean(), z.enum(["true", "false"]).transform((v) => v === "true")]).optional(),
});
export type ListTasksRequest = z.infer<typeof ListTasksRequest>;

export const TaskIdRequest = z.looseObject({
  tenant: z.string().max(256).optional(),
  id: Id,
  metadata: Struct.optional(),
});

/** Visible ASCII, as an HTTP header value may carry it without quoting. */
const HeaderValue = z.string().regex(/^[\x21-\x7e]*$/, "visible ASCII characters only (it travels in an HTTP header)");

/** AuthenticationInfo: how the agent authenticates to the push notification URL (Bearer only). */
export const AuthenticationInfo = z.looseObject({
  scheme: z
    .string()
    .regex(/^bearer$/i, "only the Bearer scheme is supported")
    .transform(() => "Bearer"),
  credentials: HeaderValue.min(1).max(4096),
});

/**
 * TaskPushNotificationConfig (a2a.proto v1.0): the URL, the token the receiver checks and the
 * authentication, flat; the nested pushNotificationConfig of earlier versions is read too.
 * Empty strings are absent (the JS SDK sends every field).
 */
const blank = (v: unknown) => (v === "" || v === null ? undefined : v);
const PushFields = {
  url: z.string().min(1).max(2048),
  token: z.preprocess(blank, HeaderValue.max(1024).optional()),
  authentication: z.preprocess(blank, AuthenticationInfo.optional()),
};
export const TaskPushNotificationConfig = z
  .looseObject({
    tenant: z.string().max(256).optional(),
    id: z.preprocess(
      blank,
      z
        .string()
        .regex(/^[A-Za-z0-9._~-]{1,128}$/, "1 to 128 letters, digits, . _ ~ -")
        .optional(),
    ),
    taskId: z.preprocess(blank, Id.optional()),
    url: PushFields.url.optional(),
    token: PushFields.token,
    authentication: PushFields.authentication,
    pushNotificationConfig: z.looseObject(PushFields).optional(),
  })
  .transform(({ pushNotificationConfig: nested, tenant: _, ...c }, ctx) => {
    const url = c.url ?? nested?.url;
    if (!url) {
      ctx.addIssue({ code: "custom", path: ["url"], message: "a push notification config needs a url" });
      return z.NEVER;
    }
    return {
      id: c.id,
      taskId: c.taskId,
      url,
      token: c.token ?? nested?.token,
      authentication: c.authentication ?? nested?.authentication,
    };
  });
export type PushConfigRequest = z.infer<typeof TaskPushNotificationConfig>;

export const PushConfigIdRequest = z.looseObject({
  tenant: z.string().max(256).optional(),
  taskId: Id,
  id: z.string().min(1).max(256),
});

export const ListPushConfigsRequest = z.looseObject({
  tenant: z.string().max(256).optional(),
  taskId: Id,
  pageSize: z.preprocess(
    (v) => (v === 0 || v === "0" ? undefined : v),
    z.coerce.number().int().min(1).max(100).optional(),
  ),
  pageToken: z.string().max(512).optional(),
});

/** The errors of A2A v1.0 (section 3.3.2) and of JSON-RPC, with the HTTP status and google.rpc code of each. */
const KINDS = {
  ParseError: { rpc: -32700, http: 400, status: "INVALID_ARGUMENT", reason: "PARSE_ERROR" },
  InvalidRequest: { rpc: -32600, http: 400, status: "INVALID_ARGUMENT", reason: "INVALID_REQUEST" },
  MethodNotFound: { rpc: -32601, http: 404, status: "NOT_FOUND", reason: "METHOD_NOT_FOUND" },
  InvalidParams: { rpc: -32602, http: 400, status: "INVALID_ARGUMENT", reason: "INVALID_PARAMS" },
  Internal: { rpc: -32603, http: 500, status: "INTERNAL", reason: "INTERNAL" },
  TaskNotFound: { rpc: -32001, http: 404, status: "NOT_FOUND", reason: "TASK_NOT_FOUND" },
  TaskNotCancelable: { rpc: -32002, http: 409, status: "FAILED_PRECONDITION", reason: "TASK_NOT_CANCELABLE" },
  PushNotificationNotSupported: {
    rpc: -32003,
    http: 400,
    status: "UNIMPLEMENTED",
    reason: "PUSH_NOTIFICATION_NOT_SUPPORTED",
  },
  UnsupportedOperation: { rpc: -32004, http: 400, status: "UNIMPLEMENTED", reason: "UNSUPPORTED_OPERATION" },
  ContentTypeNotSupported: {
    rpc: -32005,
    http: 415,
    status: "INVALID_ARGUMENT",
    reason: "CONTENT_TYPE_NOT_SUPPORTED",
  },
  ExtendedAgentCardNotConfigured: {
    rpc: -32007,
    http: 400,
    status: "FAILED_PRECONDITION",
    reason: "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
  },
  VersionNotSupported: { rpc: -32009, http: 400, status: "UNIMPLEMENTED", reason: "VERSION_NOT_SUPPORTED" },
  // Refusals before any method runs. A2A leaves their JSON-RPC codes to the agent ("JSON-RPC
  // custom error"): codes outside JSON-RPC's reserved range, -31000 less the HTTP status, so a
  // client tells them from a bad request (docs/a2a.md#errors).
  Unauthenticated: { rpc: -31401, http: 401, status: "UNAUTHENTICATED", reason: "UNAUTHENTICATED" },
  Forbidden: { rpc: -31403, http: 403, status: "PERMISSION_DENIED", reason: "INSUFFICIENT_AUTH_LEVEL" },
  TooLarge: { rpc: -32600, http: 413, status: "INVALID_ARGUMENT", reason: "PAYLOAD_TOO_LARGE" },
  RateLimited: { rpc: -31429, http: 429, status: "RESOURCE_EXHAUSTED", reason: "RATE_LIMITED" },
  Unavailable: { rpc: -32603, http: 503, status: "UNAVAILABLE", reason: "UNAVAILABLE" },
} as const;
export type A2aErrorKind = keyof typeof KINDS;

export const A2A_ERROR_DOMAIN = "a2a-protocol.org";

export class A2aError extends Error {
  readonly kind: A2aErrorKind;
  readonly headers: Record<string, string>;
  constructor(kind: A2aErrorKind, message: string, headers: Record<string, string> = {}) {
    super(message);
    this.kind = kind;
    this.headers = headers;
  }
  get http(): number {
    return KINDS[this.kind].http;
  }
  get rpcCode(): number {
    return KINDS[this.kind].rpc;
  }
  get reason(): string {
    return KINDS[this.kind].reason;
  }
  /** The google.rpc code's name: the gRPC status, and the HTTP+JSON body's `status`. */
  get status(): string {
    return KINDS[this.kind].status;
  }
  /**
   * The error's details (section 9.5, 11.6): a google.rpc.ErrorInfo, its metadata holding
   * `retryAfterSeconds` when the client should wait, and then a google.rpc.RetryInfo.
   */
  details(): Record<string, unknown>[] {
    const retry = this.headers["retry-after"];
    const info = { "@type": "type.googleapis.com/google.rpc.ErrorInfo", reason: this.reason, domain: A2A_ERROR_DOMAIN };
    if (!retry) return [info];
    return [
      { ...info, metadata: { retryAfterSeconds: retry } },
      { "@type": "type.googleapis.com/google.rpc.RetryInfo", retryDelay: `${retry}s` },
    ];
  }
  /** The JSON-RPC error object (section 9.5): `data` is the list of details. */
  rpcError(): { code: number; message: string; data: Record<string, unknown>[] } {
    return { code: this.rpcCode, message: this.message, data: this.details() };
  }
  /** The HTTP+JSON error body (google.rpc.Status with an ErrorInfo, section 11.6). */
  restBody(): { error: { code: number; status: string; message: string; details: unknown[] } } {
    return {
      error: {
        code: this.http,
        status: KINDS[this.kind].status,
        message: this.message,
        details: this.details(),
      },
    };
  }
}

/** Why a zod check failed, in one line. */
export function issues(err: z.ZodError): string {
  return err.issues
    .slice(0, 5)
    .map((i) => `${i.path.length ? i.path.join(".") : "(root)"}: ${i.message}`)
    .join("; ");
}
