// The local API's outbound routes: POST /outbox (compose, encrypt, sign, queue), each message's
// delivery record, the circuits not closed, and the dead letters and their redrive.
import type { IncomingHttpHeaders } from "node:http";
import type { FastifyPluginAsyncZod } from "@fastify/type-provider-zod";
import { notFound, ProtocolError } from "../../protocol/errors.ts";
import {
  Circuits,
  DeadLetterQuery,
  DeadLetters,
  DeliveryRecord,
  ErrorAnswer,
  OutboxBody,
  OutboxBodyDoc,
  OutboxIdParam,
  Queued,
  RedriveAll,
  Redriven,
} from "../../protocol/local-api.ts";
import type { Message } from "../../protocol/message.ts";
import { signMessage, type SigningKey } from "../../protocol/signing.ts";
import type { Agent } from "../../resources/agent.ts";
import {
  extractCarrier,
  inSpan,
  messageAttributes,
  messageContext,
  SPAN_ATTRIBUTES,
  SpanKind,
  withMessageContext,
} from "../../telemetry/tracing.ts";
import { composeMessage } from "../compose.ts";
import type { Conversations } from "../conversations.ts";
import type { DeliveryStates, Redrive } from "../delivery-state.ts";
import type { Documents } from "../documents.ts";
import type { AgentEncryption } from "../encryption.ts";
import type { OutboxStore } from "../outbox.ts";

export interface OutboxRouteDeps {
  agent: Agent;
  signing: SigningKey;
  /** Encrypts outbound bodies as spec.encryption says (docs/encryption.md); without it nothing is encrypted. */
  encryption?: Pick<AgentEncryption, "prepare">;
  documents: Documents;
  outbox: Pick<OutboxStore, "enqueue">;
  states: Pick<DeliveryStates, "get" | "begin" | "deadLetters">;
  /** The received message with this message_id (from `sender`, when given), for replies. */
  received(messageId: string, sender?: string): Promise<Message | undefined>;
  /** Send one dead letter again (DeliveryStates.redrive, back into the outbox). */
  redrive: (messageId: string) => Promise<Redrive>;
  /** Conversation records: each queued message is recorded. */
  conversations?: Pick<Conversations, "outbound" | "nextSequence">;
  /** The destinations whose circuit breaker is not closed (OutboundDelivery.circuits). */
  circuits?: () => Circuits;
}

const SEND = `Either the short form below or a whole unsigned IFP-4 message (an object with \`headers\`);
missing headers are filled (message_id \`msg:<ULID>\`, date, from, conversation_id \`conv:<ULID>\`,
sequence 1, content_type). With \`in_reply_to\` the reply joins the received message's
conversation with the next sequence and \`thread\` set, addressed to its sender by default
(the first sender whose message with that message_id was stored, when \`to\` names none).
A greeting gets the agent's capability document as a body part named \`capabilities\`.
The message is signed with the agent's key and stored in JetStream before the 202;
re-posting a whole message with the same message_id queues nothing new. A body that is not a
JSON object, a short form with a field it does not know or of the wrong type, or a message
that is not IFP-4 is refused with 400 \`invalid_format\` naming the field; a body over
spec.inbox.maxMessageBytes with 413 \`payload_too_large\`.

Before queuing, each direct recipient whose capabilities are known (see
\`/peers/{agent_id}/capabilities\`; looked up at its endpoint when it has one) is checked:
the message's \`ifp\` must be in the document's \`ifp_support\` (when listed), and every
name in \`headers.capabilities.request\` must be a capability the document offers.
Otherwise 422 with code \`unsupported_version\` or \`capability_not_offered\`, and nothing
is queued. Recipients with no known document are not checked.

The body is encrypted end to end before signing when \`spec.encryption\` asks for it
(docs/encryption.md); when it must be and a recipient has no encryption key (or is a
topic), 422 with code \`encryption_key_unavailable\` and nothing is queued.

\`to: {"a2a": "https://host/.well-known/agent-card.json"}\` sends to an A2A agent named by its
agent card (recipient \`a2a:<card URL>\`): the runtime sends it as an A2A \`SendMessage\`
(messageId the message_id), follows the task, records it in the delivery record's \`a2a\`, and
hands the agent's answer to the application as a reply (docs/a2a.md#sending-to-an-a2a-agent).
`;

/**
 * The application's outbound side of the local API: POST /outbox queues a message (composed,
 * traced, encrypted when it must be, signed, stored durably), GET /outbox/{id} its delivery
 * record, GET /dead-letters what ended failed or undeliverable, POST /dead-letters/…/redrive
 * sends dead letters again.
 */
export const outboxRoutes: FastifyPluginAsyncZod<OutboxRouteDeps> = async (app, deps) => {
  app.post(
    "/outbox",
    {
      schema: {
        summary: "Queue a message for delivery",
        description: SEND,
        body: OutboxBody,
        documentedBody: OutboxBodyDoc,
        response: {
          202: Queued,
          400: ErrorAnswer,
          413: ErrorAnswer,
          415: ErrorAnswer,
          422: ErrorAnswer,
          501: ErrorAnswer,
          503: ErrorAnswer,
        },
      },
      config: { invalid: "invalid outbox request" },
    },
    async (req, reply) => {
      const { message, duplicate, encrypted } = await queue(deps, req.body, req.headers);
      const id = message.headers.message_id;
      return reply
        .code(202)
        .header("location", `/outbox/${encodeURIComponent(id)}`)
        .send({ status: "queued", message_id: id, duplicate, encrypted, message });
    },
  );

  app.get(
    "/outbox/:id",
    {
      schema: {
        summary: "Delivery state of a queued message",
        params: OutboxIdParam,
        response: { 200: DeliveryRecord, 404: ErrorAnswer },
      },
    },
    async (req) => {
      const record = await deps.states.get(req.params.id);
      if (!record) throw notFound(`no outbound message ${req.params.id}`);
      return record;
    },
  );

  app.get(
    "/circuits",
    {
      schema: {
        summary: "Destinations whose circuit breaker is not closed",
        description: `Per destination (an inbox URL, a relay URL, an A2A agent's endpoint), the circuit
spec.outbound.resiliency keeps: open after failureThreshold failures in a row, no attempt for
coolDown, then half-open until one probe succeeds (closed, no longer listed) or fails (open
again). Each replica keeps its own. The destinations are those peers' documents name:
text from outside, to be printed with care.`,
        response: { 200: Circuits },
      },
    },
    async () => deps.circuits?.() ?? { circuits: [], total: 0 },
  );

  app.get(
    "/dead-letters",
    {
      schema: {
        summary: "Messages that ended failed (a 4xx) or undeliverable (retry window passed)",
        description:
          "Oldest first. A limit out of range (1 to 1000, default 100) is brought into it rather than refused. On the isolated NATS layout, which lists no KV keys, the last 1000 dead letters are listed from an index the runtime keeps.",
        querystring: DeadLetterQuery,
        response: { 200: DeadLetters },
      },
    },
    async (req) => ({ dead_letters: await deps.states.deadLetters(req.query.limit) }),
  );

  app.post(
    "/dead-letters/:id/redrive",
    {
      schema: {
        summary: "Send one dead letter again",
        description: REDRIVE,
        params: OutboxIdParam,
        response: { 202: Redriven, 404: ErrorAnswer, 409: ErrorAnswer, 503: ErrorAnswer },
      },
    },
    async (req, reply) => {
      const id = req.params.id;
      const r = await deps.redrive(id);
      if (r.outcome === "not_found") throw notFound(`no dead letter ${id}`);
      if (r.outcome === "not_redrivable") throw new ProtocolError(409, "not_redrivable", r.reason);
      return reply
        .code(202)
        .header("location", `/outbox/${encodeURIComponent(id)}`)
        .send({ status: "queued", message_id: id, record: r.record });
    },
  );

  app.post(
    "/dead-letters/redrive",
    {
      schema: {
        summary: "Send every dead letter again",
        description: `Up to \`limit\` dead letters (1 to 1000, default 100, oldest first), each as POST
/dead-letters/{id}/redrive does it; those it does not queue again are listed with the reason.`,
        querystring: DeadLetterQuery,
        response: { 200: RedriveAll, 503: ErrorAnswer },
      },
    },
    async (req) => {
      const out: RedriveAll = { redriven: [], skipped: [] };
      for (const dead of await deps.states.deadLetters(req.query.limit)) {
        const r = await deps.redrive(dead.message_id);
        if (r.outcome === "redriven") out.redriven.push(dead.message_id);
        else
          out.skipped.push({
            message_id: dead.message_id,
            reason: r.outcome === "not_found" ? "no longer a dead letter" : r.reason,
          });
      }
      return out;
    },
  );
};

const REDRIVE = `The dead letter's message goes back into the outbox as it was signed, with a fresh attempt
count: its failed and undeliverable recipients are queued again with no attempts (relays that
refused it may be asked again), recipients it reached are not sent to again, and its retry window
counts from now. It is removed from the dead letters; should it end failed or undeliverable
again, it is a dead letter again. Never two copies: of redrives of one dead letter racing each
other one queues it, and one that was delivered meanwhile is only removed from the dead letters.

404 \`not_found\` when the agent sent no message with this id (in the last week); 409
\`not_redrivable\` when it is not a dead letter (still being sent, redriven already, or
delivered meanwhile) or its message is no longer kept (dead letters are kept for a week);
503 when the outbox is not reachable.`;

/**
 * POST /outbox's work: compose the message (the next sequence of its conversation when the
 * short form leaves it out), trace, encrypt when it must be, sign, store, record.
 */
async function queue(
  deps: OutboxRouteDeps,
  body: Record<string, unknown>,
  headers: IncomingHttpHeaders,
): Promise<{ message: Message; duplicate: boolean; encrypted: boolean }> {
  const inReplyTo = typeof body.in_reply_to === "string" ? body.in_reply_to : undefined;
  // A message_id is unique per sender only: `to` (one agent) names whose message is answered.
  const sender = typeof body.to === "string" ? body.to : undefined;
  const original = inReplyTo ? await deps.received(inReplyTo, sender) : undefined;
  // The short form without a sequence: the next one of the conversation, as far as its records
  // know it (a reply comes after what it answers in any case).
  const conversationId =
    original?.headers.conversation_id ?? (typeof body.conversation_id === "string" ? body.conversation_id : undefined);
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
    extractCarrier({ traceparent: headers.traceparent, tracestate: headers.tracestate }) ??
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
    await deps.states.begin({
      message_id: id,
      state: "queued",
      queued_at: now,
      updated_at: now,
      recipients: message.headers.to.map((t) => ({ agent: t.agent, state: "queued", attempts: 0 })),
    });
  }
  return { message, duplicate, encrypted };
}
