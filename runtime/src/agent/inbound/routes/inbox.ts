// The agent's inbox, POST /.well-known/agent/inbox (spec 4.1): the checks of an inbound request,
// cheapest first, its per-address and per-sender limits, and the metrics and span of each answer.
import type { FastifyPluginAsyncZod } from "@fastify/type-provider-zod";
import type { FastifyReply, FastifyRequest } from "fastify";
import { z } from "zod";
import { rateLimited } from "../../../protocol/errors.ts";
import type { MessageVerifier } from "../../../protocol/verify.ts";
import type { Agent } from "../../../resources/agent.ts";
import { parseDuration } from "../../../resources/fields.ts";
import type { RuntimeMetrics } from "../../../server/metrics.ts";
import { RateLimiter } from "../../../server/ratelimit.ts";
import type { Limiter } from "../../../server/shared-ratelimit.ts";
import { keepRawJson, rawJsonOf } from "../../../server/raw-json.ts";
import { SentMessage } from "../../../server/validation.ts";
import { debugEnabled, messageLog, namedOnFailure } from "../../../telemetry/logs.ts";
import {
  SPAN_ATTRIBUTES,
  failSpan,
  inSpan,
  messageAttributes,
  messageContext,
  SpanKind,
  startSpan,
  tracingEnabled,
} from "../../../telemetry/tracing.ts";
import {
  acceptVerified,
  admit,
  type AcceptStore,
  type Admission,
  type ConversationIntake,
  type OnAccepted,
} from "../accept.ts";
import { WELL_KNOWN, WELL_KNOWN_IFP } from "../../documents.ts";
import type { AgentEncryption } from "../../encryption.ts";

export interface InboxRouteDeps {
  agent: Agent;
  verifier: MessageVerifier;
  store: AcceptStore;
  conversations?: ConversationIntake;
  onAccepted?: OnAccepted;
  encryption?: Pick<AgentEncryption, "decrypt">;
  metrics: RuntimeMetrics;
  now: () => number;
  /** Clock skew tolerated on headers.date in the future. */
  maxFutureSkewMs: number;
  /** The inbox's limits, when they are shared by the pod's event loops (workers.ts); else this loop's own. */
  limits?: InboxLimits;
}

/** The buckets of the per-address limit, the per-sender limit and the per-sender byte quota. */
export interface InboxLimits {
  perAddress: Limiter;
  perSender: Limiter;
  perSenderBytes: Limiter;
}

const Accepted = z.object({ status: z.literal("accepted"), message_id: z.string() });

/**
 * POST /.well-known/agent/inbox (spec 4.1), checks cheapest first (docs/agent.md): size, media
 * type and JSON before any route runs; the IFP-4 schema; addressing and date window
 * (any Idempotency-Key is accepted; deduplication is by message_id); the per-address limit; the signature; the per-sender limit; then store and 202.
 */
export const inboxRoutes: FastifyPluginAsyncZod<InboxRouteDeps> = async (app, deps) => {
  const { agent, verifier, metrics, now } = deps;
  const spec = agent.spec;
  const replayWindowMs = parseDuration(spec.inbox.replayWindow);
  const limits = deps.limits ?? {
    perAddress: new RateLimiter(spec.inbox.rateLimit.perAddressPerMinute, { now }),
    perSender: new RateLimiter(spec.inbox.rateLimit.perSenderPerMinute, { now }),
    perSenderBytes: new RateLimiter(spec.inbox.rateLimit.perSenderBytesPerHour, { now, windowMs: 3_600_000 }),
  };
  const { perAddress } = limits;
  const admission: Admission = {
    agentId: spec.agentId,
    replayWindowMs,
    replayWindowText: spec.inbox.replayWindow,
    maxFutureSkewMs: deps.maxFutureSkewMs,
    now,
  };
  // The message is stored as its sender's bytes, never a re-serialized parse.
  keepRawJson(app);
  // Requests that reached the handler have their span there, parented by the message's trace context.
  const traced = new WeakSet<object>();
  const count = answerCounter(spec.agentId, metrics, traced);
  const senderLimits = senderQuotas(spec, metrics, limits);

  for (const base of [WELL_KNOWN, WELL_KNOWN_IFP]) {
    app.post(
      `${base}/inbox`,
      {
        schema: { body: SentMessage, response: { 202: Accepted } },
        config: { invalid: "the message does not follow IFP-4" },
        onResponse: count,
        // The per-address limit comes first, before the body is even read or parsed. Hooks
        // that take `done` rather than return a promise: no promise and microtask per request.
        onRequest: (req, _reply, done) => {
          const address = req.clientAddress;
          const byAddress = perAddress.take(address);
          if (byAddress.ok) return done();
          metrics.inboxRateLimited.inc({ limit: "address" });
          done(rateLimited(byAddress.retryAfterSeconds, `too many requests from ${address}`));
        },
      },
      async (req, reply) => {
        const message = req.body;
        const sent = rawJsonOf(req) ?? Buffer.from(JSON.stringify(message));
        const h = message.headers;
        if (tracingEnabled()) traced.add(req);
        const parent = messageContext(message);
        const attributes = () => ({ ...messageAttributes(message), [SPAN_ATTRIBUTES.agent]: spec.agentId });
        const startTime = tracingEnabled() ? Date.now() - reply.elapsedTime : undefined;
        return inSpan("ifp.inbox.receive", { kind: SpanKind.SERVER, parent, attributes, startTime }, (span) =>
          namedOnFailure(
            req,
            () => messageLog(message),
            async () => {
              // Addressing and date window: the same checks as for a message pulled from a relay.
              // Idempotency-Key is optional and only recommended to be the message_id (IFP-6): any
              // value is accepted, and repeats are recognised by headers.message_id alone.
              admit(message, admission);
              const verified = await verifier.verify(message, spec.inbox.requireSignature, {
                address: req.clientAddress,
              });
              senderLimits(verified.signer ?? `unsigned:${h.from.agent}`, h.from.agent, sent.length);
              const { duplicate } = await acceptVerified(
                {
                  agent,
                  store: deps.store,
                  onAccepted: deps.onAccepted,
                  conversations: deps.conversations,
                  encryption: deps.encryption,
                },
                sent,
                message,
                verified,
              );
              reply.outcome = duplicate ? "duplicate" : "accepted";
              if (debugEnabled(req.log))
                req.log
                  .child(messageLog(message))
                  .debug(
                    { duplicate, auth_level: verified.authLevel },
                    duplicate ? "duplicate message absorbed" : "message accepted",
                  );
              span.setAttributes({
                [SPAN_ATTRIBUTES.duplicate]: duplicate,
                [SPAN_ATTRIBUTES.status]: 202,
                [SPAN_ATTRIBUTES.sender]: verified.signer ?? h.from.agent,
              });
              return reply
                .code(202)
                .type("application/json; charset=utf-8")
                .send({ status: "accepted", message_id: h.message_id });
            },
          ),
        );
      },
    );
  }
};

/**
 * Every answer counted: accepted, duplicate, or its error code; and one span per request, a
 * request refused before its message was read (not in `traced`) getting one without a parent.
 */
function answerCounter(agentId: string, metrics: InboxRouteDeps["metrics"], traced: WeakSet<object>) {
  return (req: FastifyRequest, reply: FastifyReply, done: () => void) => {
    const result = reply.outcome ?? (reply.statusCode < 400 ? "accepted" : "internal_error");
    metrics.inbox.inc({ result, status: String(reply.statusCode) });
    metrics.inboxLatency.observe({ result }, reply.elapsedTime / 1000);
    const size = Number(req.headers["content-length"]);
    if (Number.isFinite(size) && size >= 0) metrics.inboxSize.observe(size);
    if (result === "accepted") metrics.inboxAccepted.inc();
    else if (result === "duplicate") metrics.inboxDuplicates.inc();
    else if (result === "invalid_signature") metrics.inboxSignatureFailures.inc();
    // One span per request: a request refused before its message was read gets one without a parent.
    if (tracingEnabled() && !traced.has(req)) {
      const span = startSpan("ifp.inbox.receive", {
        kind: SpanKind.SERVER,
        startTime: Date.now() - reply.elapsedTime,
        attributes: { [SPAN_ATTRIBUTES.agent]: agentId },
      });
      failSpan(span, { code: reply.outcome ?? "internal_error", name: "ProtocolError" }, reply.statusCode);
      span.end();
    }
    done();
  };
}

/**
 * The per-sender limits, after the signature (keyed by the verified signer): requests per minute,
 * then the byte quota, so that one trusted peer cannot fill the store every agent shares.
 */
function senderQuotas(spec: InboxRouteDeps["agent"]["spec"], metrics: InboxRouteDeps["metrics"], limits: InboxLimits) {
  const { perSender, perSenderBytes } = limits;
  return (key: string, fromAgent: string, size: number): void => {
    const bySender = perSender.take(key);
    if (!bySender.ok) {
      metrics.inboxRateLimited.inc({ limit: "sender" });
      throw rateLimited(
        bySender.retryAfterSeconds,
        `rate limit of ${spec.inbox.rateLimit.perSenderPerMinute} messages per minute exceeded for ${fromAgent}`,
      );
    }
    const bytes = perSenderBytes.take(key, size);
    if (!bytes.ok)
      throw rateLimited(
        bytes.retryAfterSeconds,
        `byte quota of ${spec.inbox.rateLimit.perSenderBytesPerHour} bytes per hour exceeded for ${fromAgent}`,
      );
  };
}
