// What every way of publishing to a relay shares (POST /relay/publish, its batch, WebSocket
// publish frames): the checks of the message and its sender, the trace entry, and one stored
// copy per recipient.
import type { FastifyBaseLogger } from "fastify";
import sjson from "secure-json-parse";
import { describeIssues } from "../contract/issues.ts";
import { badRequest, invalidSignature, ProtocolError, rateLimited } from "../protocol/errors.ts";
import type { Message } from "../protocol/message.ts";
import type { ItemResult, PublishResponse } from "../protocol/relay-api.ts";
import type { Verifier } from "../protocol/verify.ts";
import { toProtocolError } from "../server/http.ts";
import { RateLimiter } from "../server/ratelimit.ts";
import { acceptsAsSent, SentMessage } from "../server/validation.ts";
import { debugEnabled, messageLog } from "../telemetry/logs.ts";
import { SPAN_ATTRIBUTES, inSpan, messageAttributes, messageContext, SpanKind } from "../telemetry/tracing.ts";
import type { Mailboxes } from "./mailbox.ts";
import { remainingTtlSeconds, resolveRecipients, traceEntry, type TransportLabel, withTraceEntry } from "./publish.ts";
import type { Publishers } from "./publishers.ts";
import type { Subscriptions } from "./subscriptions.ts";

export interface PublishIntakeDeps {
  /** spec.url, named in the trace entry. */
  relayUrl: string;
  verifier: Pick<Verifier, "knows">;
  subs: Pick<Subscriptions, "subscribers">;
  mailboxes: Pick<Mailboxes, "store">;
  now: () => number;
  /** spec.limits.maxMessageBytes: the largest message, as sent, that a batch or a WebSocket frame may carry. */
  maxMessageBytes: number;
  /** spec.limits.perAgentBytesPerHour: bytes of copies one publisher may have stored per hour. */
  bytesPerHour?: number;
  /** spec.publishers: what a sender the relay does not serve may publish (none: only served agents sign requests). */
  publishers?: Pick<Publishers, "serves" | "checkMessage">;
}

export interface PublishOptions {
  /** Narrows the message to some of its direct recipients (`?recipient=`, a frame's `recipients`). */
  recipients?: string[];
  log: FastifyBaseLogger;
  /** The transport the message came by, named in the trace entry (default https+ifp-4). */
  transport?: TransportLabel;
  /** When the request began (ms since the epoch), for the span; now when left out. */
  startTime?: number;
  /** The client address the request came from, for the strangers' per-network quota. */
  address?: string;
}

/**
 * A message carried inside another document (a batch body, a WebSocket frame), checked as
 * POST /relay/publish checks its body: IFP-4, a canonical form, at most `maxBytes` as sent.
 * Throws the same 400/413 a lone publish would get.
 */
export function parseCarried(value: unknown, maxBytes: number): Message {
  if (!acceptsAsSent(SentMessage, value)) {
    const parsed = SentMessage.safeParse(value);
    if (!parsed.success) throw badRequest(`the message does not follow IFP-4: ${describeIssues(parsed.error)}`);
  }
  const size = Buffer.byteLength(JSON.stringify(value));
  if (size > maxBytes)
    throw new ProtocolError(
      413,
      "payload_too_large",
      `the message is ${size} bytes; this relay takes at most ${maxBytes} (spec.limits.maxMessageBytes)`,
    );
  return value as Message;
}

/** JSON as the HTTP routes parse it: `__proto__` and `constructor.prototype` keys are refused, not taken. */
export function parseJson(text: string): unknown {
  return sjson.parse(text, undefined, { protoAction: "error", constructorAction: "error" });
}

/**
 * `recipients` narrows a publish to some of the message's direct recipients, so that a sender
 * can give each relay only the agents it serves without touching the signed headers.to; a name
 * that is not a direct recipient of the message is refused.
 */
function narrowed<T extends { agent: string }>(to: T[], recipients: string[] | undefined): T[] {
  if (recipients === undefined) return to;
  const wanted = new Set(recipients);
  const direct = new Set(to.map((t) => t.agent).filter((a) => !a.startsWith("topic:")));
  for (const w of wanted)
    if (!direct.has(w)) throw badRequest(`recipient ${JSON.stringify(w)} is not a direct recipient in headers.to`);
  return to.filter((t) => wanted.has(t.agent));
}

export type PublishIntake = ReturnType<typeof publishIntake>;

/**
 * What every way of publishing shares (POST /relay/publish, its batch, the WebSocket's publish
 * frames): the message is the sender's own, its TTL has not passed, every direct recipient is
 * served here, the byte quota holds; then the trace entry (spec 2.9) and one copy per recipient
 * and topic subscriber, stored before it resolves. Throws a ProtocolError for a refusal.
 */
export function publishIntake(deps: PublishIntakeDeps) {
  const quota = deps.bytesPerHour
    ? new RateLimiter(deps.bytesPerHour, { now: deps.now, windowMs: 3_600_000 })
    : undefined;
  const publish = (message: Message, sender: string, opts: PublishOptions): Promise<PublishResponse> =>
    // A child of the sender's span named in the message, which the relay never changes.
    inSpan(
      "ifp.relay.publish",
      {
        kind: SpanKind.SERVER,
        parent: messageContext(message),
        startTime: opts.startTime,
        attributes: () => ({ ...messageAttributes(message), [SPAN_ATTRIBUTES.relay]: deps.relayUrl }),
      },
      async (span) => {
        const h = message.headers;
        if (h.from.agent !== sender)
          throw invalidSignature(`the request is signed by ${sender} but the message is from ${h.from.agent}`);
        const ttl = remainingTtlSeconds(h, deps.now());
        const { agents, topics } = resolveRecipients(
          narrowed(h.to, opts.recipients),
          sender,
          (a) => deps.verifier.knows(a),
          (t) => deps.subs.subscribers(t),
        );
        // The accountable trace entry (spec 2.9), appended before the message is stored;
        // everything else is kept as sent, so the sender's signature still verifies.
        const data = JSON.stringify(
          withTraceEntry(message, traceEntry(deps.relayUrl, sender, new Date(deps.now()), opts.transport)),
        );
        // A sender the relay does not serve: its own quotas, and those of each recipient.
        const stranger = deps.publishers && !deps.publishers.serves(sender);
        const quotas = stranger
          ? await deps.publishers!.checkMessage(sender, topics, agents, Buffer.byteLength(data), opts.address)
          : undefined;
        // Every copy counts against the publisher: a topic's fan-out is the publisher's doing.
        const cost = Buffer.byteLength(data) * agents.length;
        const taken = quota && cost && !stranger ? quota.take(sender, cost) : { ok: true as const };
        if (!taken.ok)
          throw rateLimited(
            taken.retryAfterSeconds,
            `byte quota of ${deps.bytesPerHour} bytes per hour exceeded for ${sender} (this message: ${agents.length} copies of ${Buffer.byteLength(data)} bytes)`,
          );
        let result: Awaited<ReturnType<Mailboxes["store"]>>;
        try {
          result = await deps.mailboxes.store(data, h.message_id, agents, ttl, sender, h.conversation_id);
        } catch (err) {
          quotas?.undo();
          throw err;
        }
        quotas?.duplicates(result.duplicates);
        // A child logger only when its line is written: making one costs as much as the rest of a frame's bookkeeping.
        if (debugEnabled(opts.log))
          opts.log
            .child(messageLog(message, sender))
            .debug(
              { recipients: agents.length, stored: result.stored, duplicates: result.duplicates },
              "message published",
            );
        span.setAttributes({
          [SPAN_ATTRIBUTES.recipients]: agents,
          [SPAN_ATTRIBUTES.status]: 202,
          [SPAN_ATTRIBUTES.duplicate]: result.stored === 0 && result.duplicates > 0,
        });
        return { status: "accepted" as const, message_id: h.message_id, recipients: agents.length, ...result };
      },
    );

  /** One carried message (a batch item, a frame's `message`) from parsing to storing, as an item result: never throws. */
  const publishCarried = async (value: unknown, sender: string, opts: PublishOptions): Promise<ItemResult> => {
    try {
      const { status: _accepted, ...answer } = await publish(parseCarried(value, deps.maxMessageBytes), sender, opts);
      return { status: 202, ...answer };
    } catch (err) {
      const e = toProtocolError(err);
      if (e.statusCode === 500) opts.log.error({ err }, "publish failed");
      return itemError(e, value);
    }
  };
  return { publish, publishCarried };
}

/** A refused item: its status and error body, its message_id when it has one, Retry-After as a number. */
export function itemError(e: ProtocolError, value?: unknown): Extract<ItemResult, { code: string }> {
  const id = (value as { headers?: { message_id?: unknown } } | undefined)?.headers?.message_id;
  const retry = Number(e.headers["retry-after"]);
  return {
    status: e.statusCode,
    code: e.code,
    message: e.message,
    ...(typeof id === "string" && id.length <= 256 ? { message_id: id } : {}),
    ...(Number.isFinite(retry) && retry > 0 ? { retry_after: retry } : {}),
  };
}
