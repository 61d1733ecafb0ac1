// The gRPC binding of the A2A face (A2A v1.0 section 10, docs/a2a.md#grpc): a2a.proto's
// A2AService on a TLS port of its own (grpc-js serves HTTP/2 itself), with the same A2aService,
// callers, limits and task isolation as the HTTP bindings. Messages are converted between
// protobuf's objects and the JSON form the service speaks (Timestamp, Struct and Value as JSON).
// Callers present bearer tokens (static or OIDC) in the `authorization` metadata; RFC 9421
// signatures sign HTTP requests and are taken by the HTTP bindings only.
import { fileURLToPath } from "node:url";
import {
  experimental,
  Metadata,
  Server,
  type ServerUnaryCall,
  type ServerWritableStream,
  type ServiceDefinition,
  type sendUnaryData,
  status,
  type UntypedServiceImplementation,
} from "@grpc/grpc-js";
import { loadSync, type MessageTypeDefinition, type PackageDefinition } from "@grpc/proto-loader";
import protobuf from "protobufjs";
import type { Logger } from "pino";
import type { TlsFiles } from "../server/tls.ts";
import type { A2aAdmission } from "./admission.ts";
import type { A2aCallers, Caller } from "./callers.ts";
import { unauthenticated } from "./callers.ts";
import type { A2aPush } from "./push.ts";
import { check, toA2aError } from "./routes.ts";
import type { A2aService, StreamEvent } from "./service.ts";
import {
  A2A_ERROR_DOMAIN,
  A2aError,
  GetTaskRequest,
  ListPushConfigsRequest,
  ListTasksRequest,
  PushConfigIdRequest,
  SendMessageRequest,
  TaskIdRequest,
} from "./wire.ts";

const PACKAGE = "lf.a2a.v1";
export const A2A_GRPC_SERVICE = `${PACKAGE}.A2AService`;
/** The methods that read the caller's tasks (polling), with the larger budget of the other bindings' reads. */
const TASK_READS = new Set([`/${A2A_GRPC_SERVICE}/GetTask`, `/${A2A_GRPC_SERVICE}/ListTasks`]);
/** The contract files; the image's bundle carries them at the same place relative to its code. */
export const A2A_PROTO = fileURLToPath(new URL("../contract/a2a.proto", import.meta.url));
export const GOOGLE_RPC_STATUS_PROTO = fileURLToPath(new URL("../contract/google-rpc-status.proto", import.meta.url));

/** How protobuf objects look on both sides: camelCase fields, enums by name, bytes as base64, no defaults. */
export const PROTO_OPTIONS = {
  keepCase: false,
  longs: Number,
  enums: String,
  bytes: String,
  defaults: false,
  oneofs: false,
} as const;

type Json = Record<string, unknown>;
interface FieldDescriptor {
  name: string;
  type: string;
  typeName: string;
  label: string;
}

/** Between protobuf's objects of a2a.proto and the JSON form (ProtoJSON) of A2aService and the HTTP bindings. */
class JsonForm {
  private readonly def: PackageDefinition;
  constructor(def: PackageDefinition) {
    this.def = def;
  }

  private fields(typeName: string): FieldDescriptor[] | undefined {
    const t = (this.def[`${PACKAGE}.${typeName}`] ?? this.def[typeName]) as
      | MessageTypeDefinition<unknown, unknown>
      | undefined;
    return (t?.type as { field?: FieldDescriptor[] } | undefined)?.field;
  }

  /** `value` of message type `typeName`, from protobuf's object to JSON ("in") or back ("out"). */
  convert(typeName: string, value: unknown, dir: "in" | "out"): unknown {
    const wkt = WELL_KNOWN[typeName.replace(/^\./, "")];
    if (wkt) return dir === "out" || (value !== null && typeof value === "object") ? wkt[dir](value as object) : value;
    if (value === null || typeof value !== "object") return value;
    const fields = this.fields(typeName);
    if (!fields) return value;
    const out: Json = { ...(value as Json) };
    for (const f of fields) {
      if (f.type !== "TYPE_MESSAGE") continue;
      const key = camel(f.name);
      const v = out[key];
      if (v === undefined) continue;
      out[key] =
        f.label === "LABEL_REPEATED" && Array.isArray(v)
          ? v.map((x) => this.convert(f.typeName, x, dir))
          : this.convert(f.typeName, v, dir);
    }
    return out;
  }
}

const camel = (s: string) => s.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase());

type ProtoValue = {
  nullValue?: unknown;
  numberValue?: number;
  stringValue?: string;
  boolValue?: boolean;
  structValue?: { fields?: Record<string, ProtoValue> };
  listValue?: { values?: ProtoValue[] };
};

const valueIn = (v: ProtoValue): unknown => {
  if (v.numberValue !== undefined) return v.numberValue;
  if (v.stringValue !== undefined) return v.stringValue;
  if (v.boolValue !== undefined) return v.boolValue;
  if (v.structValue !== undefined) return structIn(v.structValue);
  if (v.listValue !== undefined) return (v.listValue.values ?? []).map(valueIn);
  return null;
};
const structIn = (s: { fields?: Record<string, ProtoValue> }): Json =>
  Object.fromEntries(Object.entries(s.fields ?? {}).map(([k, v]) => [k, valueIn(v)]));
const valueOut = (v: unknown): ProtoValue => {
  if (v === null || v === undefined) return { nullValue: "NULL_VALUE" };
  if (typeof v === "number") return { numberValue: v };
  if (typeof v === "string") return { stringValue: v };
  if (typeof v === "boolean") return { boolValue: v };
  if (Array.isArray(v)) return { listValue: { values: v.map(valueOut) } };
  return { structValue: structOut(v as Json) };
};
const structOut = (o: Json) => ({ fields: Object.fromEntries(Object.entries(o).map(([k, v]) => [k, valueOut(v)])) });

const WELL_KNOWN: Record<string, { in(v: object): unknown; out(v: unknown): unknown }> = {
  "google.protobuf.Timestamp": {
    in: (v) => {
      const t = v as { seconds?: number; nanos?: number };
      return new Date((t.seconds ?? 0) * 1000 + Math.floor((t.nanos ?? 0) / 1e6)).toISOString();
    },
    out: (v) => {
      const ms = Date.parse(String(v));
      if (Number.isNaN(ms)) return undefined;
      return { seconds: Math.floor(ms / 1000), nanos: (((ms % 1000) + 1000) % 1000) * 1e6 };
    },
  },
  "google.protobuf.Struct": { in: (v) => structIn(v), out: (v) => structOut(v as Json) },
  "google.protobuf.Value": { in: (v) => valueIn(v), out: (v) => valueOut(v) },
  "google.protobuf.ListValue": {
    in: (v) => ((v as { values?: ProtoValue[] }).values ?? []).map(valueIn),
    out: (v) => ({ values: (v as unknown[]).map(valueOut) }),
  },
};

/** google.rpc.Status and ErrorInfo, for the grpc-status-details-bin trailer: read when the binding first answers an error. */
let rpcTypesRead: { status: protobuf.Type; errorInfo: protobuf.Type } | undefined;
const rpcTypesOf = () => {
  if (!rpcTypesRead) {
    const root = protobuf.loadSync(GOOGLE_RPC_STATUS_PROTO);
    rpcTypesRead = { status: root.lookupType("google.rpc.Status"), errorInfo: root.lookupType("google.rpc.ErrorInfo") };
  }
  return rpcTypesRead;
};

/** An A2aError as a gRPC status: the code of section 5.4, an ErrorInfo in the details (section 10.6). */
export function grpcError(e: A2aError): { code: number; details: string; metadata: Metadata } {
  const code = status[e.status as keyof typeof status] as number;
  const retry = e.headers["retry-after"];
  const rpcTypes = rpcTypesOf();
  const info = rpcTypes.errorInfo.encode(
    rpcTypes.errorInfo.fromObject({
      reason: e.reason,
      domain: A2A_ERROR_DOMAIN,
      metadata: retry ? { retryAfterSeconds: retry } : {},
    }),
  );
  const details = rpcTypes.status
    .encode(
      rpcTypes.status.fromObject({
        code,
        message: e.message,
        details: [{ typeUrl: "type.googleapis.com/google.rpc.ErrorInfo", value: info.finish() }],
      }),
    )
    .finish();
  const metadata = new Metadata();
  metadata.set("grpc-status-details-bin", Buffer.from(details));
  if (retry) metadata.set("retry-after", retry);
  return { code, details: e.message, metadata };
}

export interface A2aGrpcDeps {
  service: A2aService;
  push: A2aPush;
  callers: A2aCallers;
  admission: A2aAdmission;
  /** The largest request message accepted (spec.inbox.maxMessageBytes): beyond it RESOURCE_EXHAUSTED. */
  maxMessageBytes: number;
  tls: TlsFiles;
  log: Logger;
}

export interface A2aGrpcServer {
  /** The port it listens on. */
  port: number;
  /** Ends the open streams and stops the server. */
  close(): Promise<void>;
}

type Call = ServerUnaryCall<Json, unknown> | ServerWritableStream<Json, unknown>;

/** The A2AService of a2a.proto on `host:port` over TLS (the agent's serving certificate, re-read when it changes). */
export async function startA2aGrpc(deps: A2aGrpcDeps, port: number, host: string): Promise<A2aGrpcServer> {
  const def = loadSync(A2A_PROTO, PROTO_OPTIONS);
  const form = new JsonForm(def);
  const methods = def[A2A_GRPC_SERVICE] as ServiceDefinition;
  // Each request's size on the wire, for the caller's byte quota; why one could not be decoded.
  const sizes = new WeakMap<object, number>();
  const undecodable = new WeakMap<object, string>();
  const service: Record<string, ServiceDefinition[string]> = {};
  for (const [name, m] of Object.entries(methods)) {
    const reqType = (m as unknown as { requestType: { type: { name: string } } }).requestType.type.name;
    const resType = (m as unknown as { responseType: { type: { name: string } } }).responseType.type.name;
    service[name] = {
      ...m,
      // Never throws: grpc-js would answer INTERNAL; the call is refused as an invalid request instead.
      requestDeserialize: (buf: Buffer) => {
        let json: Json;
        try {
          json = form.convert(reqType, m.requestDeserialize(buf), "in") as Json;
        } catch (err) {
          json = {};
          undecodable.set(json, (err as Error).message);
        }
        sizes.set(json, buf.length);
        return json;
      },
      responseSerialize: (value: unknown) => {
        try {
          return m.responseSerialize(form.convert(resType, value, "out"));
        } catch (err) {
          deps.log.error({ err, method: name }, "an A2A gRPC response could not be serialized");
          throw err;
        }
      },
    };
  }
  const { service: a2a, push } = deps;
  const open = new Set<AbortController>();

  /** The checks of every request, in the HTTP bindings' order: address, version, caller, caller's limits (task reads their own). */
  const admit = async (call: Call): Promise<Caller> => {
    deps.admission.address(peerAddress(call.getPeer()));
    const undecoded = undecodable.get(call.request);
    if (undecoded !== undefined)
      throw new A2aError(
        "InvalidRequest",
        `the request is not a ${call.getPath()} message: ${undecoded.slice(0, 200)}`,
      );
    const version = call.metadata.get("a2a-version")[0];
    deps.admission.version(version);
    const authorization = call.metadata.get("authorization")[0];
    if (typeof authorization !== "string" || !/^bearer\s/i.test(authorization))
      throw unauthenticated(
        "authentication is required: a bearer token in the authorization metadata (Bearer <token>); RFC 9421 signatures are taken by the HTTP bindings only",
      );
    const caller = await deps.callers.authenticate({
      method: "POST",
      url: call.getPath(),
      host: undefined,
      headers: { authorization },
      clientAddress: peerAddress(call.getPeer()),
    });
    deps.admission.caller(caller, sizes.get(call.request) ?? 0, TASK_READS.has(call.getPath()));
    return caller;
  };

  const failed = (err: unknown) => {
    const e = toA2aError(err);
    if (e.kind === "Internal") deps.log.error({ err }, "A2A gRPC call failed");
    return grpcError(e);
  };

  const unary =
    (run: (caller: Caller, req: Json) => Promise<unknown>) =>
    (call: ServerUnaryCall<Json, unknown>, callback: sendUnaryData<unknown>) => {
      void (async () => {
        try {
          const caller = await admit(call);
          callback(null, await run(caller, call.request));
        } catch (err) {
          callback(failed(err));
        }
      })();
    };

  const streaming =
    (start: (caller: Caller, req: Json, signal: AbortSignal) => Promise<AsyncGenerator<StreamEvent>>) =>
    (call: ServerWritableStream<Json, unknown>) => {
      const ac = new AbortController();
      open.add(ac);
      call.on("cancelled", () => ac.abort());
      void (async () => {
        try {
          const caller = await admit(call);
          for await (const ev of await start(caller, call.request, ac.signal)) {
            if (call.cancelled) break;
            call.write(ev);
          }
          if (!call.cancelled) call.end();
        } catch (err) {
          if (!call.cancelled) call.emit("error", failed(err));
        } finally {
          open.delete(ac);
        }
      })();
    };

  const impl: UntypedServiceImplementation = {
    SendMessage: unary(async (c, r) => ({ task: await a2a.send(c, check(SendMessageRequest, r)) })),
    SendStreamingMessage: streaming(async (c, r, signal) => {
      const stored = await a2a.accept(c, check(SendMessageRequest, r));
      return a2a.follow(c, stored.task.id, signal, stored.task);
    }),
    GetTask: unary(async (c, r) => {
      const p = check(GetTaskRequest, r);
      return a2a.get(c, p.id, p.historyLength);
    }),
    ListTasks: unary(async (c, r) => a2a.list(c, check(ListTasksRequest, r))),
    CancelTask: unary(async (c, r) => a2a.cancel(c, check(TaskIdRequest, r).id)),
    SubscribeToTask: streaming(async (c, r, signal) => {
      const id = check(TaskIdRequest, r).id;
      await a2a.subscribable(c, id);
      return a2a.follow(c, id, signal);
    }),
    CreateTaskPushNotificationConfig: unary(async (c, r) => push.create(c, r)),
    GetTaskPushNotificationConfig: unary(async (c, r) => {
      const p = check(PushConfigIdRequest, r);
      return push.get(c, p.taskId, p.id);
    }),
    ListTaskPushNotificationConfigs: unary(async (c, r) => {
      const p = check(ListPushConfigsRequest, r);
      return push.list(c, p.taskId, p.pageSize, p.pageToken);
    }),
    DeleteTaskPushNotificationConfig: unary(async (c, r) => {
      const p = check(PushConfigIdRequest, r);
      await push.delete(c, p.taskId, p.id);
      return {};
    }),
    GetExtendedAgentCard: unary(async () => {
      throw new A2aError("ExtendedAgentCardNotConfigured", "this agent has no extended agent card");
    }),
  };

  const server = new Server({
    "grpc.max_receive_message_length": deps.maxMessageBytes,
    "grpc.max_send_message_length": -1,
  });
  server.addService(service, impl);
  const certificates = new experimental.FileWatcherCertificateProvider({
    certificateFile: deps.tls.certFile,
    privateKeyFile: deps.tls.keyFile,
    refreshIntervalMs: 60_000,
  });
  const credentials = experimental.createCertificateProviderServerCredentials(certificates, null, false);
  const bound = await new Promise<number>((resolve, reject) =>
    server.bindAsync(`${host.includes(":") ? `[${host}]` : host}:${port}`, credentials, (err, p) =>
      err ? reject(err) : resolve(p),
    ),
  );
  return {
    port: bound,
    close: async () => {
      for (const ac of open) ac.abort();
      await new Promise<void>((resolve) => {
        const force = setTimeout(() => {
          server.forceShutdown();
          resolve();
        }, 5_000);
        force.unref();
        server.tryShutdown(() => {
          clearTimeout(force);
          resolve();
        });
      });
    },
  };
}

/** The address part of grpc-js's peer ("1.2.3.4:5678", "[::1]:5678"). */
function peerAddress(peer: string): string {
  const m = /^\[([^\]]+)\]:\d+$/.exec(peer) ?? /^([^:]+):\d+$/.exec(peer);
  return m?.[1] ?? peer;
}
