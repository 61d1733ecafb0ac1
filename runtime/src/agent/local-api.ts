import type { ZodTypeProvider } from "@fastify/type-provider-zod";
import Fastify, { LogController, type FastifyInstance } from "fastify";
import type { Logger } from "pino";
import { z } from "zod";
import { notFound } from "../protocol/errors.ts";
import type { Message } from "../protocol/message.ts";
import { signMessage, type SigningKey } from "../protocol/signing.ts";
import type { Agent } from "../resources/agent.ts";
import { jsonApi, type TlsMaterial } from "../server/http.ts";
import { A, extractCarrier, inSpan, messageAttributes, messageContext, SpanKind, withMessageContext } from "../telemetry/tracing.ts";
import type { AppStream } from "./app-stream.ts";
import { appStreamRoutes } from "./app-stream-routes.ts";
import { requireBearer, type BearerAuthOptions, type TokenFile } from "./local-api-auth.ts";
import { composeMessage } from "./compose.ts";
import type { DeliveryRecord, DeliveryStates } from "./delivery-state.ts";
import type { Documents } from "./documents.ts";
import type { OutboxStore } from "./outbox.ts";
import { peerRoutes, type PeerRouteDeps } from "./routes/peers.ts";

export interface LocalApiDeps {
  agent: Agent;
  signing: SigningKey;
  documents: Documents;
  outbox: Pick<OutboxStore, "enqueue">;
  states: Pick<DeliveryStates, "get" | "put" | "deadLetters">;
  peers: PeerRouteDeps["peers"];
  /** The received message with this message_id (from `sender`, when given), for replies. */
  received(messageId: string, sender?: string): Promise<Message | undefined>;
  /** Inbound messages for an application without an HTTP server; undefined when spec.handler is set. */
  stream?: AppStream;
  logger: Logger;
}

/** The listener for applications in other pods: HTTPS, and a bearer token on every request. */
export interface LocalApiTls {
  tls: TlsMaterial;
  token: TokenFile;
  limits?: BearerAuthOptions;
}

/**
 * The application's side of the runtime: send messages through the outbox and follow their
 * delivery, and (without spec.handler) receive inbound messages from a stream. Served on the
 * pod's loopback without authentication (spec.localApi.port), and, with `secure`, on an HTTPS
 * listener for applications in other pods that requires the bearer token (spec.localApi.service).
 * The same routes on both. OpenAPI: docs/local-api.openapi.yaml.
 */
export function buildLocalApi(deps: LocalApiDeps, secure?: LocalApiTls): FastifyInstance {
  const app = Fastify({
    loggerInstance: deps.logger,
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: deps.agent.spec.inbox.maxMessageBytes,
    // Agent ids (URLs, percent-encoded) and message ids are path segments of up to 512 characters.
    routerOptions: { maxParamLength: 2048 },
    ...(secure ? { https: { cert: secure.tls.cert, key: secure.tls.key, minVersion: "TLSv1.2" as const }, requestTimeout: 30_000 } : {}),
  }) as unknown as FastifyInstance;
  jsonApi(app);
  if (secure) requireBearer(app, secure.token, secure.limits);
  const api = app.withTypeProvider<ZodTypeProvider>();

  api.get("/healthz", async () => ({ status: "ok" }));

  // The body is the short form or a whole unsigned message: composeMessage checks it and says what is wrong.
  api.post("/outbox", async (req, reply) => {
    const body = (req.body ?? {}) as Record<string, unknown>;
    const inReplyTo = typeof body.in_reply_to === "string" ? body.in_reply_to : undefined;
    // A message_id is unique per sender only: `to` (one agent) names whose message is answered.
    const sender = typeof body.to === "string" ? body.to : undefined;
    const original = inReplyTo ? await deps.received(inReplyTo, sender) : undefined;
    const composed = composeMessage(body, {
      agentId: deps.agent.spec.agentId,
      displayName: deps.agent.spec.displayName,
      original,
      capabilities: deps.documents.capabilityDocument.doc,
    });
    // The trace goes on from the application's own (a W3C traceparent header on this request),
    // else from the message it answers, else from what the application put in the extension.
    const parent = extractCarrier({ traceparent: req.headers.traceparent, tracestate: req.headers.tracestate }) ?? (original && messageContext(original)) ?? messageContext(composed);
    const { message, duplicate } = await inSpan("ifp.outbox.send", { kind: SpanKind.PRODUCER, parent, attributes: () => ({ ...messageAttributes(composed), [A.recipients]: composed.headers.to.map((t) => t.agent) }) }, async () => {
      // The trace context goes into the message before it is signed.
      const message = signMessage(withMessageContext(composed), deps.signing);
      return { message, ...(await deps.outbox.enqueue(message)) };
    });
    const id = message.headers.message_id;
    if (!duplicate && !(await deps.states.get(id))) {
      const now = new Date().toISOString();
      const record: DeliveryRecord = {
        message_id: id,
        state: "queued",
        queued_at: now,
        updated_at: now,
        recipients: message.headers.to.map((t) => ({ agent: t.agent, state: "queued", attempts: 0 })),
      };
      await deps.states.put(record);
    }
    return reply
      .code(202)
      .header("location", `/outbox/${encodeURIComponent(id)}`)
      .send({ status: "queued", message_id: id, duplicate, message });
  });

  api.get("/outbox/:id", { schema: { params: z.object({ id: z.string() }) } }, async (req) => {
    const record = await deps.states.get(req.params.id);
    if (!record) throw notFound(`no outbound message ${req.params.id}`);
    return record;
  });

  // A limit out of range is brought into it rather than refused.
  const Limit = z.string().optional().transform((v) => Math.min(1000, Math.max(1, Number(v ?? 100) || 100)));
  api.get("/dead-letters", { schema: { querystring: z.object({ limit: Limit }) } }, async (req) => ({
    dead_letters: await deps.states.deadLetters(req.query.limit),
  }));

  void app.register(peerRoutes, { peers: deps.peers });

  void app.register(appStreamRoutes, { stream: deps.stream, handlerUrl: deps.agent.spec.handler?.url });

  return app;
}
