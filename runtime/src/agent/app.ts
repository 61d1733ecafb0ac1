import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { Logger } from "pino";
import type { Agent } from "../resources/agent.ts";
import { parseDuration } from "../resources/common.ts";
import { badRequest, rateLimited, type ProtocolError } from "../protocol/errors.ts";
import { etagMatches } from "../protocol/documents.ts";
import { describeIssues, Message } from "../protocol/message.ts";
import { acceptVerified, type OnAccepted } from "./accept.ts";
import type { Verifier } from "../protocol/verify.ts";
import { createServer, type TlsMaterial } from "../server/http.ts";
import { registerProbes } from "../server/probes.ts";
import type { RuntimeMetrics } from "../server/metrics.ts";
import { WELL_KNOWN, WELL_KNOWN_IFP, type Documents } from "./documents.ts";
import { RateLimiter } from "./ratelimit.ts";
import type { InboxStore } from "./store.ts";

export interface AgentAppDeps {
  agent: Agent;
  documents: Documents;
  verifier: Verifier;
  store: Pick<InboxStore, "accept">;
  /**
   * Side effects of the inspection (error-phase replies, learned capabilities), run after the
   * message is stored — also for a repeat, so a retried POST completes what a crash cut short.
   * They are idempotent; a failure answers 503 so that the sender retries.
   */
  onAccepted?: OnAccepted;
  metrics: RuntimeMetrics;
  logger: Logger;
  tls?: TlsMaterial;
  /** Readiness: NATS reached and streams in place. */
  ready: () => boolean;
  now?: () => number;
  /** Clock skew tolerated on headers.date in the future. */
  maxFutureSkewMs?: number;
}

const DOC_CACHE = "public, max-age=300, must-revalidate";

/** The agent's HTTPS endpoints (spec 4.1); buildAgentApp never listens. */
export function buildAgentApp(deps: AgentAppDeps): FastifyInstance {
  const { agent, documents, verifier, store, metrics } = deps;
  const spec = agent.spec;
  const now = deps.now ?? Date.now;
  const replayWindowMs = parseDuration(spec.inbox.replayWindow);
  const futureSkewMs = deps.maxFutureSkewMs ?? 5 * 60_000;
  const perAddress = new RateLimiter(spec.inbox.rateLimit.perAddressPerMinute, { now });
  const perSender = new RateLimiter(spec.inbox.rateLimit.perSenderPerMinute, { now });

  const app = createServer({ tls: deps.tls, logger: deps.logger, bodyLimit: spec.inbox.maxMessageBytes });
  registerProbes(app, deps.ready, metrics);

  const capabilities = (req: FastifyRequest, reply: FastifyReply) => {
    const served = documents.capabilityDocument;
    reply.header("etag", served.etag).header("cache-control", DOC_CACHE);
    if (etagMatches(req.headers["if-none-match"], served.etag)) return reply.code(304).send();
    return reply.type("application/json; charset=utf-8").send(served.doc);
  };
  const identity = (req: FastifyRequest, reply: FastifyReply) => {
    const served = documents.identity(`https://${req.host}`);
    reply.header("etag", served.etag).header("cache-control", DOC_CACHE);
    if (etagMatches(req.headers["if-none-match"], served.etag)) return reply.code(304).send();
    return reply.type("application/json; charset=utf-8").send(served.doc);
  };

  const inbox = async (req: FastifyRequest, reply: FastifyReply) => {
    try {
      const raw = req.body;
      const parsed = Message.safeParse(raw);
      if (!parsed.success) throw badRequest(`the message does not follow IFP-4: ${describeIssues(parsed.error)}`);
      const message = parsed.data;
      const h = message.headers;
      if (!h.to.some((t) => t.agent === spec.agentId)) {
        throw badRequest(`the message is addressed to ${h.to.map((t) => t.agent).join(", ")}, not to ${spec.agentId}`);
      }
      const idem = req.headers["idempotency-key"];
      if (idem !== undefined && idem !== h.message_id) {
        throw badRequest("Idempotency-Key must equal headers.message_id (IFP-6 section 4.2)");
      }
      const date = Date.parse(h.date);
      if (date < now() - replayWindowMs || date > now() + futureSkewMs) {
        throw badRequest(`headers.date ${h.date} is outside the accepted window (${spec.inbox.replayWindow} back, 5m ahead)`);
      }
      // Cheap per-address limit before the costly signature check.
      const byAddress = perAddress.take(req.ip);
      if (!byAddress.ok) throw rateLimited(byAddress.retryAfterSeconds, `too many requests from ${req.ip}`);
      const verified = verifier.verify(message, spec.inbox.requireSignature);
      const senderKey = verified.signer ?? `unsigned:${h.from.agent}`;
      const bySender = perSender.take(senderKey);
      if (!bySender.ok) {
        throw rateLimited(
          bySender.retryAfterSeconds,
          `rate limit of ${spec.inbox.rateLimit.perSenderPerMinute} messages per minute exceeded for ${h.from.agent}`,
        );
      }
      const { duplicate } = await acceptVerified({ agent, store, onAccepted: deps.onAccepted }, raw, message, verified);
      metrics.inbox.inc({ result: duplicate ? "duplicate" : "accepted" });
      return reply.code(202).type("application/json; charset=utf-8").send({ status: "accepted", message_id: h.message_id });
    } catch (err) {
      const code = (err as ProtocolError).code ?? "internal_error";
      metrics.inbox.inc({ result: code });
      throw err;
    }
  };

  for (const base of [WELL_KNOWN, WELL_KNOWN_IFP]) {
    app.get(`${base}/capabilities`, capabilities);
    app.get(`${base}/identity`, identity);
    app.post(`${base}/inbox`, inbox);
  }
  return app;
}
