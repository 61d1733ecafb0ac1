import type { FastifyPluginAsyncZod } from "@fastify/type-provider-zod";
import { z } from "zod";
import { badRequest, invalidSignature, rateLimited } from "../../protocol/errors.ts";
import { RateLimiter } from "../../server/ratelimit.ts";
import { PublishRequest, PublishResponse } from "../../protocol/relay-api.ts";
import type { Verifier } from "../../protocol/verify.ts";
import { asSent } from "../../server/validation.ts";
import { messageLog } from "../../telemetry/logs.ts";
import { A, inSpan, messageAttributes, messageContext, SpanKind, tracingEnabled } from "../../telemetry/tracing.ts";
import type { Mailboxes } from "../mailbox.ts";
import { remainingTtlSeconds, resolveRecipients, traceEntry, withTraceEntry } from "../publish.ts";
import type { Subscriptions } from "../subscriptions.ts";

export interface PublishRouteDeps {
  /** spec.url, named in the trace entry. */
  relayUrl: string;
  verifier: Pick<Verifier, "knows">;
  subs: Pick<Subscriptions, "subscribers">;
  mailboxes: Pick<Mailboxes, "store">;
  now: () => number;
  /** spec.limits.perAgentBytesPerHour: bytes of copies one publisher may have stored per hour. */
  bytesPerHour?: number;
}

const PublishQuery = z.object({ recipient: z.union([z.string(), z.array(z.string()).max(100)]).optional() });

/**
 * `?recipient=` (repeatable) narrows a publish to some of the message's direct recipients, so
 * that a sender can give each relay only the agents it serves without touching the signed
 * headers.to; a name that is not a direct recipient of the message is refused.
 */
function narrowed<T extends { agent: string }>(to: T[], recipient: string | string[] | undefined): T[] {
  if (recipient === undefined) return to;
  const wanted = new Set(Array.isArray(recipient) ? recipient : [recipient]);
  const direct = new Set(to.map((t) => t.agent).filter((a) => !a.startsWith("topic:")));
  for (const w of wanted) if (!direct.has(w)) throw badRequest(`recipient ${JSON.stringify(w)} is not a direct recipient in headers.to`);
  return to.filter((t) => wanted.has(t.agent));
}

/** POST /relay/publish: one copy per recipient and topic subscriber, stored before the 202. */
export const publishRoutes: FastifyPluginAsyncZod<PublishRouteDeps> = async (app, deps) => {
  const quota = deps.bytesPerHour ? new RateLimiter(deps.bytesPerHour, { now: deps.now, windowMs: 3_600_000 }) : undefined;
  app.post(
    "/relay/publish",
    {
      schema: { body: asSent(PublishRequest), querystring: PublishQuery, response: { 202: PublishResponse } },
      config: { operation: "publish", invalid: "the message does not follow IFP-4" },
    },
    async (req, reply) =>
      // A child of the sender's span named in the message, which the relay never changes.
      inSpan(
        "ifp.relay.publish",
        { kind: SpanKind.SERVER, parent: messageContext(req.body), startTime: tracingEnabled() ? Date.now() - reply.elapsedTime : undefined, attributes: () => ({ ...messageAttributes(req.body), [A.relay]: deps.relayUrl }) },
        async (span) => {
          req.log = req.log.child(messageLog(req.body, req.agent));
          const h = req.body.headers;
          if (h.from.agent !== req.agent) throw invalidSignature(`the request is signed by ${req.agent} but the message is from ${h.from.agent}`);
          const ttl = remainingTtlSeconds(h, deps.now());
          const { agents } = resolveRecipients(narrowed(h.to, req.query.recipient), req.agent, (a) => deps.verifier.knows(a), (t) => deps.subs.subscribers(t));
          // The accountable trace entry (spec 2.9), appended before the message is stored;
          // everything else is kept as sent, so the sender's signature still verifies.
          const stored = withTraceEntry(req.body, traceEntry(deps.relayUrl, req.agent, new Date(deps.now())));
          const data = JSON.stringify(stored);
          // Every copy counts against the publisher: a topic's fan-out is the publisher's doing.
          const cost = Buffer.byteLength(data) * agents.length;
          const taken = quota && cost ? quota.take(req.agent, cost) : { ok: true as const };
          if (!taken.ok) throw rateLimited(taken.retryAfterSeconds, `byte quota of ${deps.bytesPerHour} bytes per hour exceeded for ${req.agent} (this message: ${agents.length} copies of ${Buffer.byteLength(data)} bytes)`);
          const result = await deps.mailboxes.store(data, h.message_id, agents, ttl, req.agent, h.conversation_id);
          req.log.debug({ recipients: agents.length, stored: result.stored, duplicates: result.duplicates }, "message published");
          span.setAttributes({ [A.recipients]: agents, [A.status]: 202, [A.duplicate]: result.stored === 0 && result.duplicates > 0 });
          return reply.code(202).send({ status: "accepted", message_id: h.message_id, recipients: agents.length, ...result });
        },
      ),
  );
};
