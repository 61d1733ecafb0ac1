// The local API's wire types as zod schemas — the outbox request, delivery records, dead
// letters, conversations, peers, the message stream — which the routes validate with, the typed
// client shares, and docs/local-api.openapi.yaml is generated from.
import { z } from "zod";
import { CapabilityDocument } from "./documents.ts";
import { BodyPart, Message } from "./message.ts";

/** An IFP-4 message as the local API carries it, one schema in the OpenAPI document. */
export const WireMessage = Message.meta({
  id: "Message",
  description: "IFP-4 structured message (unknown fields are kept)",
});

/**
 * The agent's local application API on the wire (docs/local-api.openapi.yaml, generated from
 * these schemas): the routes (agent/local-api/) validate requests and declare their answers with
 * them, and the typed client (client/local.ts) speaks the same types.
 */

/** The recipient id of an A2A agent in headers.to and in delivery records: this prefix and its card's URL. */
export const A2A_RECIPIENT_PREFIX = "a2a:";

/** An A2A agent, named by the https URL of its agent card (docs/a2a.md#sending-to-an-a2a-agent). */
export const A2aRecipient = z
  .strictObject({
    a2a: z
      .string()
      .max(2048)
      .refine((u) => URL.canParse(u) && new URL(u).protocol === "https:", "the agent card's URL must be an https URL")
      .describe("The https URL of the A2A agent's card, e.g. https://host/.well-known/agent-card.json"),
  })
  .meta({ id: "A2aRecipient" });

const Recipients = z.union([
  z.string().min(1),
  A2aRecipient,
  z.array(z.string().min(1)).min(1),
  z.array(z.looseObject({ agent: z.string().min(1) })).min(1),
]);

/**
 * What an application POSTs to /outbox: either a whole unsigned IFP-4 message (headers it
 * leaves out are filled in), or the short form below.
 */
export const OutboxRequest = z
  .strictObject({
    to: Recipients.optional().describe(
      'Recipient agent id(s), or {"a2a": "<agent card URL>"} for one A2A agent; defaults to the sender of in_reply_to',
    ),
    phase: z.string().min(1).default("context"),
    text: z.string().optional(),
    body: z.looseObject({ text: z.string().optional(), parts: z.array(BodyPart).optional() }).optional(),
    in_reply_to: z.string().min(1).optional().describe("message_id of a received message this answers"),
    conversation_id: z.string().min(1).optional(),
    sequence: z.number().int().min(0).optional(),
    subject: z.string().optional(),
    ttl_seconds: z.number().int().positive().optional(),
    priority: z.enum(["low", "normal", "urgent"]).optional(),
    disclosure: z.string().optional(),
    capabilities: z
      .looseObject({ request: z.array(z.string()).optional(), offer: z.array(z.string()).optional() })
      .optional(),
    extensions: z.record(z.string(), z.unknown()).optional(),
    content_type: z.string().optional(),
  })
  .meta({ id: "OutboxRequest" });
export type OutboxRequest = z.input<typeof OutboxRequest>;

/**
 * The body of POST /outbox as the route takes it: a JSON object, checked field by field by
 * composeMessage (the short form, or a whole message when it has `headers`), which says what is
 * wrong in the 400. OutboxBodyDoc is what the OpenAPI document says of it.
 */
export const OutboxBody = z.record(z.string(), z.unknown());
export const OutboxBodyDoc = z.union([OutboxRequest, WireMessage]);

export const RecipientStatus = z.enum(["queued", "retrying", "delivered", "failed", "undeliverable"]);
export type RecipientStatus = z.infer<typeof RecipientStatus>;

export const RecipientState = z.object({
  agent: z.string(),
  state: RecipientStatus,
  attempts: z.number().int(),
  via: z.string().optional().describe('The inbox URL, or "relay:<relay url>", of the last attempt'),
  last_status: z.number().int().optional(),
  last_error: z.string().optional(),
  decision: z.string().optional().describe('Why the next step was chosen, e.g. "429: retry after Retry-After 30 s"'),
  next_attempt_at: z.string().optional(),
  delivered_at: z.string().optional(),
  refused_relays: z
    .array(z.string())
    .optional()
    .describe("Relays that refused this message for this recipient with a final answer; never asked again for it"),
  plaintext_relay: z
    .string()
    .optional()
    .describe(
      "The relay not marked trusted or self-operated that took this message with its body in the clear (spec.encryption mode auto, to a recipient that offers no encryption key; docs/encryption.md)",
    ),
  a2a: z
    .object({
      interface: z.string().describe("The A2A interface the message went to (its URL)"),
      binding: z.string().describe("JSONRPC or HTTP+JSON"),
      card_signed: z.boolean().describe("Whether the agent card carried a signature, which was verified"),
      task_id: z.string().optional(),
      context_id: z.string().optional(),
      state: z
        .string()
        .optional()
        .describe("The task's last state seen, or MESSAGE when the agent answered with a message"),
    })
    .optional()
    .describe("For an A2A recipient: where the message went and the task it made"),
  peer_error: z
    .object({ message_id: z.string(), code: z.string().optional(), text: z.string(), at: z.string() })
    .optional()
    .describe("An error-phase answer of the recipient to this message, linked when it arrives"),
});
export type RecipientState = z.infer<typeof RecipientState>;

export const DeliveryRecord = z
  .object({
    message_id: z.string(),
    state: RecipientStatus,
    queued_at: z.string(),
    updated_at: z.string(),
    recipients: z.array(RecipientState),
    redrive: z
      .object({
        at: z.string().describe("When the dead letter was last sent again; its retry window counts from here"),
        id: z.string().describe("The outbox's deduplication id of that redrive"),
        count: z.number().int().describe("How many times it was redriven"),
      })
      .optional()
      .describe("Set once a dead letter was redriven (POST /dead-letters/{id}/redrive)"),
  })
  .meta({ id: "DeliveryRecord" });
export type DeliveryRecord = z.infer<typeof DeliveryRecord>;

/** 202 of POST /outbox. */
export const Queued = z.object({
  status: z.literal("queued"),
  message_id: z.string(),
  duplicate: z.boolean().describe("True when this message_id had been queued before (nothing new was queued)"),
  encrypted: z.boolean().describe("Whether the body was encrypted end to end (docs/encryption.md)"),
  message: WireMessage,
});
export type Queued = z.infer<typeof Queued>;

export const OutboxIdParam = z.object({ id: z.string() });

/** ?limit= of GET /dead-letters: a limit out of range is brought into it rather than refused. */
export const DeadLetterQuery = z.object({
  limit: z
    .string()
    .optional()
    .transform((v) => Math.min(1000, Math.max(1, Number(v ?? 100) || 100))),
});
export const DeadLetters = z.object({ dead_letters: z.array(DeliveryRecord) });

/** One destination of outbound deliveries whose circuit breaker is not closed (docs/reliability.md). */
export const Circuit = z.object({
  destination: z
    .string()
    .describe("An inbox URL, a relay URL or an A2A agent's endpoint, as peers' documents name them"),
  state: z
    .enum(["open", "half-open"])
    .describe("open: no attempt until open_until; half-open: the cool-down is over, the next attempt is its probe"),
  failures: z.number().int().describe("Consecutive failed attempts (network errors, timeouts, 5xx)"),
  open_until: z.string().optional().describe("When an open circuit lets its probe through"),
});
export type Circuit = z.infer<typeof Circuit>;

/** 200 of GET /circuits. */
export const Circuits = z.object({
  circuits: z.array(Circuit).describe("The most recently opened first, at most 100"),
  total: z.number().int().describe("How many circuits are not closed"),
});
export type Circuits = z.infer<typeof Circuits>;

/** 202 of POST /dead-letters/{id}/redrive: the dead letter is queued again and no longer listed. */
export const Redriven = z.object({
  status: z.literal("queued"),
  message_id: z.string(),
  record: DeliveryRecord,
});
export type Redriven = z.infer<typeof Redriven>;

/** 200 of POST /dead-letters/redrive: what was queued again, and what was not and why. */
export const RedriveAll = z.object({
  redriven: z.array(z.string()).describe("message_ids queued again"),
  skipped: z
    .array(z.object({ message_id: z.string(), reason: z.string() }))
    .describe("Dead letters not queued again: delivered meanwhile, redriven by another caller, or no longer kept"),
});
export type RedriveAll = z.infer<typeof RedriveAll>;

export const ConversationMessage = z.object({
  message_id: z.string(),
  sequence: z.number().int(),
  direction: z.enum(["in", "out"]),
  phase: z.string(),
  at: z.string(),
});
export type ConversationMessage = z.infer<typeof ConversationMessage>;

/**
 * What the runtime knows of one conversation with one peer. Keyed by (peer, conversation_id):
 * a conversation_id is the initiator's to choose, so a stranger reusing one gets a record of
 * its own and cannot touch another peer's.
 */
export const ConversationState = z
  .object({
    conversation_id: z.string(),
    peer: z.string().describe("The verified sender of its inbound messages, or the recipient of its outbound ones"),
    participants: z.array(z.string()).describe("Agent ids seen in from/to (at most 32)"),
    phase: z.string().describe("The phase of the last message, either way"),
    temperature: z.string().optional().describe("The peer's temperature as spec.peers[].temperature names it"),
    auth_level: z
      .number()
      .int()
      .optional()
      .describe("The highest authentication level the peer's messages reached: none lower is taken (IFP-5 section 2)"),
    last_sequence_in: z.number().int().optional(),
    last_sequence_out: z.number().int().optional(),
    sequence_reused: z
      .number()
      .int()
      .optional()
      .describe("Messages of the peer that reused a sequence number of one of its earlier messages (IFP-5 4.2)"),
    recent: z.array(ConversationMessage).describe("The last messages, newest last"),
    started_at: z.string(),
    updated_at: z.string(),
  })
  .meta({ id: "ConversationState" });
export type ConversationState = z.infer<typeof ConversationState>;

export const ConversationParam = z.object({ id: z.string().min(1).max(256) });
export const Conversation = z.object({ conversation_id: z.string(), peers: z.array(ConversationState) });

export const PeerCapabilities = z.object({
  agent_id: z.string(),
  document: CapabilityDocument,
  source: z.enum(["greeting", "endpoint", "announcement"]),
  message_id: z.string().optional(),
  learned_at: z.string(),
  auth_level: z
    .number()
    .int()
    .optional()
    .describe(
      "The authentication level the entry was learned at (the sender's verified level; 2 for a document fetched from the peer's own https endpoint). No message below it replaces it.",
    ),
});
export type PeerCapabilities = z.infer<typeof PeerCapabilities>;

/**
 * What the application sees of a peer: the baseline document with the greeting's merged over
 * it. source, message_id and learned_at are the most specific source's (the greeting when it
 * refined the baseline); `baseline` then says where the document under it came from.
 */
export const PeerCapabilitiesView = PeerCapabilities.extend({
  baseline: z
    .object({
      source: z.enum(["endpoint", "announcement"]),
      message_id: z.string().optional(),
      learned_at: z.string(),
      auth_level: z.number().int().optional(),
    })
    .optional(),
  stale: z
    .boolean()
    .optional()
    .describe("The baseline could not be refreshed just now (the peer's endpoint failed); this is the last one kept"),
}).meta({ id: "PeerCapabilities" });
export type PeerCapabilitiesView = z.infer<typeof PeerCapabilitiesView>;

export const PeerParam = z.object({ agent: z.string().min(1).max(512) });
export const PeerQuery = z.object({
  refresh: z
    .enum(["true", "false", "1", "0"], { message: "refresh is true or false" })
    .optional()
    .transform((v) => v === "true" || v === "1"),
});

/** One inbound message from the stream or the pull (no spec.handler): what a handler would get. */
export const InboundDelivery = z
  .object({
    seq: z.number().int().describe("The inbox sequence: the SSE event id and the resume cursor"),
    message_id: z.string(),
    sender: z.string().describe("The verified signer (or, for an accepted unsigned message, its claimed sender)"),
    auth_level: z
      .number()
      .int()
      .describe(
        "The IFP-5 authentication level, as the hand-off's Ifp-Auth-Level: -1 for an accepted unsigned message",
      ),
    auth_source: z
      .string()
      .describe(
        "Where the key came from, as the hand-off's Ifp-Auth-Source: none, introduction, identity-document, peers or did:key",
      ),
    encrypted: z
      .string()
      .optional()
      .describe(
        "The scheme the body was encrypted under end to end (the runtime decrypted it); absent for a clear message",
      ),
    delivery_attempt: z.number().int(),
    message: WireMessage,
  })
  .meta({ id: "InboundDelivery" });
export type InboundDelivery = z.infer<typeof InboundDelivery>;

export const StreamQuery = z.object({ after: z.string().optional() });
/** ?limit=&wait= of GET /messages: out of range is brought into it rather than refused, as for the dead letters. */
export const PullQuery = z.object({
  limit: z
    .string()
    .optional()
    .transform((v) => Math.min(100, Math.max(1, Math.trunc(Number(v ?? 10)) || 10))),
  wait: z
    .string()
    .optional()
    .transform((v) => Math.min(30, Math.max(1, Math.trunc(Number(v ?? 1)) || 1))),
});
export const Pulled = z.object({ messages: z.array(InboundDelivery) });
export const MessageIdParam = z.object({ id: z.string().min(1).max(256) });
export const AckRequest = z.object({ message_ids: z.array(z.string().min(1).max(256)).min(1).max(1000) });
export const AckResult = z.object({ acknowledged: z.array(z.string()), not_found: z.array(z.string()) });
export type AckResult = z.infer<typeof AckResult>;

export const Health = z.object({ status: z.literal("ok") });

/** The error body of every refusal (spec section 2.7). */
export const ErrorAnswer = z
  .object({ status: z.literal("error"), code: z.string(), message: z.string() })
  .meta({ id: "Error" });
