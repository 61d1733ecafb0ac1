import Fastify, { LogController, type FastifyInstance } from "fastify";
import type { Logger } from "pino";
import { notFound } from "../protocol/errors.ts";
import { Message } from "../protocol/message.ts";
import { signMessage, type SigningKey } from "../protocol/signing.ts";
import type { Agent } from "../resources/agent.ts";
import { toProtocolError, sendError } from "../server/http.ts";
import { composeMessage } from "./compose.ts";
import type { DeliveryRecord, DeliveryStates } from "./delivery-state.ts";
import type { Documents } from "./documents.ts";
import type { PeerCapabilityCache } from "./inbound.ts";
import type { OutboxStore } from "./outbox.ts";

export interface LocalApiDeps {
  agent: Agent;
  signing: SigningKey;
  documents: Documents;
  outbox: Pick<OutboxStore, "enqueue">;
  states: Pick<DeliveryStates, "get" | "put" | "deadLetters">;
  peers: Pick<PeerCapabilityCache, "get">;
  /** The received message with this message_id, for replies. */
  received(messageId: string): Promise<Message | undefined>;
  logger: Logger;
}

/**
 * The application's side of the runtime, on the pod's loopback only (spec.localApi.port; the
 * Service never exposes it): send messages through the outbox and follow their delivery.
 * Inbound messages reach the application at spec.handler.url. OpenAPI: docs/local-api.openapi.yaml.
 */
export function buildLocalApi(deps: LocalApiDeps): FastifyInstance {
  const app = Fastify({
    loggerInstance: deps.logger,
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: deps.agent.spec.inbox.maxMessageBytes,
  }) as unknown as FastifyInstance;
  app.removeContentTypeParser("text/plain");
  app.setErrorHandler((err, req, reply) => {
    const pe = toProtocolError(err);
    if (pe.statusCode === 500) req.log.error({ err }, "local API request failed");
    sendError(reply, pe);
  });
  app.setNotFoundHandler((req, reply) => {
    sendError(reply, notFound(`no endpoint ${req.method} ${req.url.split("?")[0]}`));
  });

  app.get("/healthz", async () => ({ status: "ok" }));

  app.post("/outbox", async (req, reply) => {
    const body = (req.body ?? {}) as Record<string, unknown>;
    const inReplyTo = typeof body.in_reply_to === "string" ? body.in_reply_to : undefined;
    const original = inReplyTo ? await deps.received(inReplyTo) : undefined;
    const unsigned = composeMessage(body, {
      agentId: deps.agent.spec.agentId,
      displayName: deps.agent.spec.displayName,
      original,
      capabilities: deps.documents.capabilityDocument.doc,
    });
    const message = signMessage(unsigned, deps.signing);
    const id = message.headers.message_id;
    const { duplicate } = await deps.outbox.enqueue(message);
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

  app.get<{ Params: { id: string } }>("/outbox/:id", async (req) => {
    const record = await deps.states.get(req.params.id);
    if (!record) throw notFound(`no outbound message ${req.params.id}`);
    return record;
  });

  app.get<{ Querystring: { limit?: string } }>("/dead-letters", async (req) => {
    const limit = Math.min(1000, Math.max(1, Number(req.query.limit ?? 100) || 100));
    return { dead_letters: await deps.states.deadLetters(limit) };
  });

  app.get<{ Params: { agent: string } }>("/peers/:agent/capabilities", async (req) => {
    const entry = await deps.peers.get(req.params.agent);
    if (!entry) throw notFound(`no capability document learned from ${req.params.agent}`);
    return entry;
  });

  return app;
}
