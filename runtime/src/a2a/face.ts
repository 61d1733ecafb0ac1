// The A2A face of one agent (spec.a2a), put together for the agent runtime, which hands it what
// it needs of the agent: the inbox stream (the hand-off), the key lookup of its inbox, the
// signing key. a2a/ imports nothing of agent/ or relay/ (docs/architecture.md#layers).
import type { FastifyInstance } from "fastify";
import type { Logger } from "pino";
import type { Nats } from "../nats/connection.ts";
import type { HttpClient } from "../net/http-client.ts";
import type { TargetPolicy } from "../net/targets.ts";
import type { DeliveryRecord } from "../protocol/local-api.ts";
import type { SigningKey } from "../protocol/signing.ts";
import type { Agent } from "../resources/agent.ts";
import { defaultBaseUrl } from "../resources/expose.ts";
import { parseDuration } from "../resources/fields.ts";
import type { TlsFiles } from "../server/tls.ts";
import type { NonceStore } from "../protocol/http-signatures.ts";
import { A2aAdmission, type AdmissionBuckets } from "./admission.ts";
import { A2aCallers, bearerTokenFile, type KeyFound } from "./callers.ts";
import { CardCache } from "./card.ts";
import type { A2aGrpcServer } from "./grpc.ts";
import { OidcCallers } from "./oidc.ts";
import { A2aPush } from "./push.ts";
import { a2aLocalRoutes, a2aRoutes } from "./routes.ts";
import { A2aService, a2aReplies, type Enqueue, type HandOffMeta, type OutboundMessage } from "./service.ts";
import { TaskStore } from "./tasks.ts";

export interface A2aFaceDeps {
  agent: Agent;
  signing: SigningKey;
  nats: Pick<Nats, "bucket" | "isConnected" | "nc">;
  /** The agent's A2A task bucket (agentNames().a2aTasksBucket). */
  bucket: string;
  /** The file of accepted bearer tokens (the mounted spec.a2a.authentication.bearerTokenSecret). */
  tokenFile?: string;
  lookupKey(agentId: string, keyId: string, address: string): Promise<KeyFound>;
  handOff(message: Record<string, unknown>, meta: HandOffMeta): Promise<void>;
  /**
   * Where push notifications and the OIDC issuers' JWKS requests go out: the agent's HTTP client
   * and its target policy (spec.network.allowPrivateTargets).
   */
  http: Pick<HttpClient, "request">;
  targets: TargetPolicy;
  log: Logger;
  /**
   * With more than one event loop serving the port (spec.runtime.workers): the limits and the
   * signatures' nonces every loop shares, and what this loop leaves to the main one.
   */
  loops?: {
    admission: AdmissionBuckets;
    nonces: NonceStore;
    /** The main loop delivers the push notifications; the others only keep their configs. */
    pushes: boolean;
    /** The gRPC binding's port, served by the main loop: named in the card every loop serves. */
    grpcPort?: number;
  };
}

export interface A2aFace {
  /** Make the task bucket (at start-up, with the agent's other buckets) and start pushing notifications (unless another loop does). */
  ensure(): Promise<void>;
  /** Stop pushing notifications. */
  close(): void;
  /** The A2A routes on the agent's HTTPS app. */
  register(app: FastifyInstance): void;
  /** The gRPC binding on a TLS port of its own (0 picks a free one), named in the card from then on. */
  serveGrpc(port: number, host: string, tls: TlsFiles): Promise<A2aGrpcServer>;
  /** POST /a2a/tasks/{id} on a local API app. */
  registerLocal(app: FastifyInstance): void;
  /** The local API's outbox, with replies to A2A hand-offs turned into task updates. */
  replies<M extends OutboundMessage, R extends { duplicate: boolean }>(outbox: Enqueue<M, R>): Enqueue<M, R>;
  /**
   * The local API's delivery records, where a reply that became a task update is recorded as
   * delivered (to the task) at once rather than queued for ever.
   */
  deliveries<S extends { begin(record: DeliveryRecord): Promise<void> }>(states: S): S;
}

export function a2aFace(deps: A2aFaceDeps): A2aFace {
  const spec = deps.agent.spec;
  if (spec.a2a.authentication.bearerTokenSecret && !deps.tokenFile)
    deps.log.warn(
      "spec.a2a.authentication.bearerTokenSecret is set but no --a2a-token-file was given; no bearer token is accepted",
    );
  const tasks = new TaskStore(deps.nats, deps.bucket);
  const push = new A2aPush({ tasks, http: deps.http, targets: deps.targets, log: deps.log });
  const service = new A2aService({
    push,
    agent: deps.agent,
    tasks,
    handOff: deps.handOff,
    waitForMs: parseDuration(spec.a2a.waitFor),
    log: deps.log,
  });
  const tokens = bearerTokenFile(deps.tokenFile, deps.log);
  const callers = new A2aCallers({
    tokens,
    lookupKey: deps.lookupKey,
    urls: [spec.baseUrl, defaultBaseUrl(undefined, spec.expose)],
    minLevel: spec.a2a.authentication.minAuthLevel,
    ...(spec.a2a.authentication.oidc.length
      ? { oidc: new OidcCallers({ issuers: spec.a2a.authentication.oidc, http: deps.http, log: deps.log }) }
      : {}),
    ...(deps.loops ? { nonces: deps.loops.nonces } : {}),
  });
  const admission = new A2aAdmission(deps.agent, Date.now, deps.loops?.admission);
  let grpcPort = deps.loops?.grpcPort;
  const cards = new CardCache({
    grpcPort: () => grpcPort,
    agent: deps.agent,
    signing: deps.signing,
    bearer: spec.a2a.authentication.bearerTokenSecret !== undefined || deps.tokenFile !== undefined,
    oidcIssuers: spec.a2a.authentication.oidc.map((o) => o.issuer),
  });
  // The replies turned into task updates whose delivery records are still to be written.
  const answered = new Set<string>();
  return {
    ensure: async () => {
      await tasks.ensure();
      if (deps.loops?.pushes !== false) push.start();
    },
    close: () => push.close(),
    register: (app) =>
      void app.register(a2aRoutes, {
        ...{ agent: deps.agent, service, push, callers, cards, signing: deps.signing, admission },
      }),
    serveGrpc: async (port, host, tls) => {
      // Loaded only here: grpc-js and protobufjs cost memory that agents without the binding keep.
      const { startA2aGrpc } = await import("./grpc.ts");
      const server = await startA2aGrpc(
        { service, push, callers, admission, maxMessageBytes: spec.inbox.maxMessageBytes, tls, log: deps.log },
        port,
        host,
      );
      grpcPort = server.port;
      return server;
    },
    registerLocal: (app) => void app.register(a2aLocalRoutes, { service }),
    replies: (outbox) => a2aReplies(service, outbox, (id) => remember(answered, id)),
    deliveries: (states) =>
      new Proxy(states, {
        get(target, prop) {
          if (prop === "begin")
            return (record: DeliveryRecord) =>
              target.begin(answered.delete(record.message_id) ? toTask(record) : record);
          const value = Reflect.get(target, prop, target);
          return typeof value === "function" ? value.bind(target) : value;
        },
      }),
  };
}

function remember(set: Set<string>, id: string): void {
  if (set.size >= 1000) set.delete(set.values().next().value!);
  set.add(id);
}

/** A reply's delivery record once it became its A2A task's update: delivered, nothing to retry. */
function toTask(record: DeliveryRecord): DeliveryRecord {
  const at = record.updated_at;
  return {
    ...record,
    state: "delivered",
    recipients: record.recipients.map((r) => ({ ...r, state: "delivered", via: "a2a-task", delivered_at: at })),
  };
}
