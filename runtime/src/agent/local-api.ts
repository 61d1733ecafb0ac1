import type { ZodTypeProvider } from "@fastify/type-provider-zod";
import Fastify, { LogController, type FastifyInstance } from "fastify";
import type { Logger } from "pino";
import { z } from "zod";
import { notFound } from "../protocol/errors.ts";
import type { Message } from "../protocol/message.ts";
import { signMessage, type SigningKey } from "../protocol/signing.ts";
import type { Agent } from "../resources/agent.ts";
import { jsonApi, type TlsMaterial } from "../server/http.ts";
import {
  SPAN_ATTRIBUTES,
  extractCarrier,
  inSpan,
  messageAttributes,
  messageContext,
  SpanKind,
  withMessageContext,
} from "../telemetry/tracing.ts";
import type { AppStream } from "./app-stream.ts";
import { appStreamRoutes } from "./app-stream-routes.ts";
import { requireBearer, type BearerAuthOptions, type TokenFile } from "./local-api-auth.ts";
import { composeMessage } from "./compose.ts";
import type { Conversations } from "./conversations.ts";
import type { AgentEncryption } from "./encryption.ts";
import type { DeliveryRecord, DeliveryStates } from "./delivery-state.ts";
import type { Documents } from "./documents.ts";
import type { OutboxStore } from "./outbox.ts";
import { peerRoutes, type PeerRouteDeps } from "./routes/peers.ts";

export interface LocalApiDeps {
  agent: Agent;
  signing: SigningKey;
  /** Encrypts outbound bodies as spec.encryption says (docs/encryption.md); without it nothing is encrypted. */
  encryption?: Pick<AgentEncryption, "prepare">;
  documents: Documents;
  outbox: Pick<OutboxStore, "enqueue">;
  states: Pick<DeliveryStates, "get" | "begin" | "deadLetters">;
  peers: PeerRouteDeps["peers"];
  /** The received message with this message_id (from `sender`, when given), for replies. */
  received(messageId: string, sender?: string): Promise<Message | undefined>;
  /** Conversation records: each queued message is recorded; GET /conversations/{id} reads them. */
  conversations?: Pick<Conversations, "outbound" | "list" | "nextSequence">;
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
    ...(secure
      ? {
          https: { cert: secure.tls.cert, key: secure.tls.key, minVersion: "TLSv1.2" as const },
          requestTimeout: 30_000,
        }
      : {}),
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
    // The short form without a sequence: the next one of the conversation, as far as its records
    // know it (a reply comes after what it answers in any case).
    const conversationId =
      original?.headers.conversation_id ??
      (typeof body.conversation_id === "string" ? body.conversation_id : undefined);
    if (!("headers" in body) && body.sequence === undefined && conversationId && deps.conversations) {
      const next = await deps.conversations.nextSequence(conversationId);
      body.sequence = Math.max(next, original ? original.headers.sequence + 1 : 1);
    }
    const composed = composeMessage(body, {
      agentId: deps.agent.spec.agentId,
      displayName: deps.agent.spec.displayName,
      original,
      capabilities: deps.documents.capabilityDocument.doc,
    });
    // The trace goes on from the application's own (a W3C traceparent header on this request),
    // else from the message it answers, else from what the application put in the extension.
    const parent =
      extractCarrier({ traceparent: req.headers.traceparent, tracestate: req.headers.tracestate }) ??
      (original && messageContext(original)) ??
      messageContext(composed);
    const { message, duplicate, encrypted } = await inSpan(
      "ifp.outbox.send",
      {
        kind: SpanKind.PRODUCER,
        parent,
        attributes: () => ({
          ...messageAttributes(composed),
          [SPAN_ATTRIBUTES.recipients]: composed.headers.to.map((t) => t.agent),
        }),
      },
      async () => {
        // The trace context (this span) goes into the message first; then it is encrypted (422
        // encryption_key_unavailable rather than plaintext), then signed: the signature covers the ciphertext.
        const unsigned = withMessageContext(composed);
        const prepared = deps.encryption ? await deps.encryption.prepare(unsigned) : unsigned;
        const message = signMessage(prepared, deps.signing);
        return { message, encrypted: prepared !== unsigned, ...(await deps.outbox.enqueue(message)) };
      },
    );
    await deps.conversations?.outbound(message);
    const id = message.headers.message_id;
    if (!duplicate) {
      const now = new Date().toISOString();
      const record: DeliveryRecord = {
        message_id: id,
        state: "queued",
        queued_at: now,
        updated_at: now,
        recipients: message.headers.to.map((t) => ({ agent: t.agent, state: "queued", attempts: 0 })),
      };
      await deps.states.begin(record);
    }
    return reply
      .code(202)
      .header("location", `/outbox/${encodeURIComponent(id)}`)
      .send({ status: "queued", message_id: id, duplicate, encrypted, message });
  });

  api.get("/outbox/:id", { schema: { params: z.object({ id: z.string() }) } }, async (req) => {
    const record = await deps.states.get(req.params.id);
    if (!record) throw notFound(`no outbound message ${req.params.id}`);
    return record;
  });

  // A limit out of range is brought into it rather than refused.
  const Limit = z
    .string()
    .optional()
    .transform((v) => Math.min(1000, Math.max(1, Number(v ?? 100) || 100)));
  api.get("/dead-letters", { schema: { querystring: z.object({ limit: Limit }) } }, async (req) => ({
    dead_letters: await deps.states.deadLetters(req.query.limit),
  }));

  api.get("/conversations/:id", { schema: { params: z.object({ id: z.string().min(1).max(256) }) } }, async (req) => {
    const records = (await deps.conversations?.list(req.params.id)) ?? [];
    if (!records.length) throw notFound(`no conversation ${req.params.id} is known`);
    return { conversation_id: req.params.id, peers: records };
  });

  void app.register(peerRoutes, { peers: deps.peers });

  void app.register(appStreamRoutes, { stream: deps.stream, handlerUrl: deps.agent.spec.handler?.url });

  return app;
}
