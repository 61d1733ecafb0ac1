// The relay API's wire types as zod schemas (docs/relay.md): topics, pages, publish alone and in
// batches, acknowledgements, subscriptions, dead letters. The relay's routes and RelayClient share them.
import { z } from "zod";
import { AgentId } from "../resources/common.ts";
import { Message } from "./message.ts";

/**
 * The relay API on the wire (docs/relay.md): the relay's routes validate requests with these
 * schemas and declare their answers with them; RelayClient speaks the same types.
 */

/**
 * How a message is addressed to a topic: a recipient `{agent: "topic:<name>"}` in
 * headers.to, with the name in dot notation (`gossip.exchange`, `capabilities.update`).
 */
export const TOPIC_PREFIX = "topic:";
export const MAX_TOPIC_LENGTH = 128;
const TOPIC_RE = /^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$/;

export function isTopicName(name: string): boolean {
  return name.length <= MAX_TOPIC_LENGTH && TOPIC_RE.test(name);
}

const Topic = z.string().refine(isTopicName, "topics use dot notation such as capabilities.update");
const Topics = z.array(Topic).min(1).max(100);

/** A whole number in a query parameter, from `min` to `max`; `dflt` when it is left out. */
function wholeNumber(min: number, max: number, dflt: number) {
  const error = `must be a whole number from ${min} to ${max}`;
  return z
    .string()
    .regex(/^\d{1,16}$/, error)
    .transform(Number)
    .pipe(z.number().min(min, error).max(max, error))
    .default(dflt);
}

/** ?limit=&after= of GET /relay/messages and /relay/dead-letters: page size and cursor. */
export const PageQuery = z.object({
  limit: wholeNumber(1, 1000, 100),
  after: wholeNumber(0, Number.MAX_SAFE_INTEGER, 0),
});
export type PageQuery = z.input<typeof PageQuery>;

/**
 * The message_id at the end of DELETE /relay/messages/{id} and /relay/dead-letters/{id}.
 * A wildcard, not a :param: the router caps a parameter at 100 characters, message ids may
 * have 256 (and more once percent-encoded). An id nobody can have is answered 404, not 400.
 */
export const MessageIdPath = z.object({ "*": z.string() });

/** POST /relay/publish: one IFP-4 message, from the signer. */
export const PublishRequest = Message;
export const PublishResponse = z.object({
  status: z.literal("accepted"),
  message_id: z.string(),
  recipients: z.number().int(),
  stored: z.number().int(),
  duplicates: z.number().int(),
});
export type PublishResponse = z.infer<typeof PublishResponse>;

/** The largest batch of POST /relay/publish/batch. */
export const MAX_BATCH = 100;

/** POST /relay/publish/batch: up to MAX_BATCH messages, each checked and stored as a lone publish would be. */
export const PublishBatchRequest = z.object({ messages: z.array(z.unknown()).min(1).max(MAX_BATCH) });

/**
 * The outcome of one message of a batch or of a WebSocket publish frame: its 202 answer, or the
 * status and error body a lone publish would have got (with `retry_after`, seconds, for 429 and 503).
 */
export const ItemResult = z.union([
  PublishResponse.omit({ status: true }).extend({ status: z.literal(202) }),
  z.object({
    status: z.number().int().min(400).max(599),
    code: z.string(),
    message: z.string(),
    message_id: z.string().optional(),
    retry_after: z.number().optional(),
  }),
]);
export type ItemResult = z.infer<typeof ItemResult>;

/** The answer of POST /relay/publish/batch: one result per message, in the order sent. */
export const PublishBatchResponse = z.object({ results: z.array(ItemResult) });
export type PublishBatchResponse = z.infer<typeof PublishBatchResponse>;

/** GET /relay/messages: waiting messages, oldest first, each as stored (the relay's trace entry included). */
export const MessageList = z.array(Message);

/** POST /relay/messages/ack. */
export const AckRequest = z.object({ message_ids: z.array(z.string().min(1).max(256)).min(1).max(1000) });
export const AckResponse = z.object({ acknowledged: z.array(z.string()), not_found: z.array(z.string()) });
export type AckResponse = z.infer<typeof AckResponse>;

/** POST /relay/subscribe: topic changes and/or a webhook registration (`webhook: null` removes it). */
export const SubscribeRequest = z
  .object({
    subscribe: z.object({ topics: Topics, agent: AgentId.optional() }).optional(),
    unsubscribe: z.object({ topics: Topics, agent: AgentId.optional() }).optional(),
    push: z
      .object({
        webhook: z
          .url({ protocol: /^https$/, error: "webhook must be an https URL" })
          .max(2048)
          .nullable(),
        agent: AgentId.optional(),
      })
      .optional(),
  })
  .refine((b) => b.subscribe || b.unsubscribe || b.push, "send subscribe, unsubscribe and/or push");
export type SubscribeRequest = z.input<typeof SubscribeRequest>;

/** One agent's topics and webhook on a relay. */
export const SubscriptionState = z.object({
  agent: z.string(),
  topics: z.array(z.string()),
  push: z.object({ webhook: z.string(), since: z.string() }).nullable(),
});
export type SubscriptionState = z.infer<typeof SubscriptionState>;

/** The answer of POST and GET /relay/subscribe. */
export const SubscribeResponse = SubscriptionState.extend({ status: z.literal("subscribed") });
export type SubscribeResponse = z.infer<typeof SubscribeResponse>;

/** A copy whose webhook push was given up, kept for its recipient. */
export const DeadLetter = z.object({
  message_id: z.string(),
  reason: z.string(),
  at: z.string(),
  message: z.unknown(),
});
export type DeadLetter = z.infer<typeof DeadLetter>;

/** GET /relay/dead-letters. */
export const DeadLetterList = z.object({ dead_letters: z.array(DeadLetter) });
