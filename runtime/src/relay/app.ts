import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { Logger } from "pino";
import { z } from "zod";
import { badRequest, invalidSignature, notFound, type ProtocolError } from "../protocol/errors.ts";
import { describeIssues, Message } from "../protocol/message.ts";
import type { Verifier } from "../protocol/verify.ts";
import { AgentId } from "../resources/common.ts";
import type { Relay } from "../resources/relay.ts";
import { createServer, type TlsMaterial } from "../server/http.ts";
import type { RuntimeMetrics } from "../server/metrics.ts";
import { registerProbes } from "../server/probes.ts";
import { relayAuthenticator } from "./auth.ts";
import { attachWebSocket, serveEvents } from "./events.ts";
import type { Mailboxes } from "./mailbox.ts";
import { isTopicName, remainingTtlSeconds, resolveRecipients, traceEntry, withTraceEntry } from "./publish.ts";
import type { Subscriptions } from "./subscriptions.ts";

export { TOPIC_PREFIX, TRANSPORT_LABEL } from "./publish.ts";

const Topic = z.string().refine(isTopicName, "topics use dot notation such as capabilities.update");
const Topics = z.array(Topic).min(1).max(100);

/** The body of POST /relay/subscribe: topic changes and/or a webhook registration (`webhook: null` removes it). */
export const SubscribeRequest = z
  .object({
    subscribe: z.object({ topics: Topics, agent: AgentId.optional() }).optional(),
    unsubscribe: z.object({ topics: Topics, agent: AgentId.optional() }).optional(),
    push: z.object({ webhook: z.url({ protocol: /^https$/, error: "webhook must be an https URL" }).max(2048).nullable(), agent: AgentId.optional() }).optional(),
  })
  .refine((b) => b.subscribe || b.unsubscribe || b.push, "send subscribe, unsubscribe and/or push");

/** The body of POST /relay/messages/ack. */
export const AckRequest = z.object({ message_ids: z.array(z.string().min(1).max(256)).min(1).max(1000) });

export interface RelayAppDeps {
  relay: Relay;
  verifier: Verifier;
  mailboxes: Mailboxes;
  subs: Subscriptions;
  metrics: RuntimeMetrics;
  logger: Logger;
  tls?: TlsMaterial;
  ready: () => boolean;
  now?: () => number;
}

declare module "fastify" {
  interface FastifyRequest {
    rawBody?: Buffer;
    agent?: string;
  }
}

/**
 * The relay's HTTPS endpoints (spec 4.2, IFP-8): every /relay/ request is signed by one of
 * the agents it serves (RFC 9421), and touches only that agent's mailbox. Never listens.
 */
export function buildRelayApp(deps: RelayAppDeps): FastifyInstance {
  const { relay, mailboxes, subs, metrics } = deps;
  const spec = relay.spec;
  const now = deps.now ?? Date.now;
  const app = createServer({ tls: deps.tls, logger: deps.logger, bodyLimit: spec.limits.maxMessageBytes });
  registerProbes(app, deps.ready, metrics);
  const authenticate = relayAuthenticator({
    verifier: deps.verifier,
    perAddressPerMinute: spec.limits.perAddressPerMinute,
    perAgentPerMinute: spec.limits.perAgentPerMinute,
    now,
  });

  // Keep the raw bytes: the request signature covers them through Content-Digest.
  const json = app.getDefaultJsonParser("error", "error");
  app.removeContentTypeParser("application/json");
  app.addContentTypeParser("application/json", { parseAs: "buffer" }, (req, body, done) => {
    req.rawBody = body as Buffer;
    json(req, (body as Buffer).toString("utf8"), done);
  });

  const counted = (operation: string, handler: (req: FastifyRequest, reply: FastifyReply) => Promise<unknown>) => async (req: FastifyRequest, reply: FastifyReply) => {
    try {
      const out = await handler(req, reply);
      metrics.relay.inc({ operation, result: "ok" });
      return out;
    } catch (err) {
      metrics.relay.inc({ operation, result: (err as ProtocolError).code ?? "internal_error" });
      throw err;
    }
  };

  app.register(async (scope) => {
    scope.addHook("preHandler", async (req) => {
      req.agent = await authenticate({ ip: req.ip, method: req.method, url: req.url, host: req.host, headers: req.headers, body: req.rawBody });
    });

    scope.post(
      "/relay/publish",
      counted("publish", async (req, reply) => {
        const parsed = Message.safeParse(req.body);
        if (!parsed.success) throw badRequest(`the message does not follow IFP-4: ${describeIssues(parsed.error)}`);
        const h = parsed.data.headers;
        if (h.from.agent !== req.agent) throw invalidSignature(`the request is signed by ${req.agent} but the message is from ${h.from.agent}`);
        const ttl = remainingTtlSeconds(h, now());
        const { agents } = resolveRecipients(h.to, req.agent, (a) => deps.verifier.knows(a), (t) => subs.subscribers(t));
        // The accountable trace entry (spec 2.9), appended before the message is stored;
        // everything else is kept as sent, so the sender's signature still verifies.
        const stored = withTraceEntry(req.body as { trace?: unknown }, traceEntry(spec.url, req.agent, new Date(now())));
        const result = await mailboxes.store(JSON.stringify(stored), h.message_id, agents, ttl);
        return reply.code(202).send({ status: "accepted", message_id: h.message_id, recipients: agents.length, ...result });
      }),
    );

    scope.get(
      "/relay/messages",
      counted("retrieve", async (req, reply) => {
        const query = req.query as Record<string, string | undefined>;
        const limit = intParam(query.limit, "limit", 100, 1, 1000);
        const after = intParam(query.after, "after", 0, 0, Number.MAX_SAFE_INTEGER);
        const copies = await mailboxes.list(req.agent!, after, limit);
        const last = copies.at(-1);
        if (last) reply.header("ifp-next-after", String(last.seq));
        if (last && copies.length === limit) reply.header("link", `</relay/messages?limit=${limit}&after=${last.seq}>; rel="next"`);
        return copies.map((c) => c.message);
      }),
    );

    // Wildcards, not :params: the router caps a parameter at 100 characters, message ids
    // may have 256 (and more once percent-encoded).
    scope.delete(
      "/relay/messages/*",
      counted("ack", async (req, reply) => {
        const id = (req.params as { "*": string })["*"];
        if (!id || id.length > 256 || !(await mailboxes.ack(req.agent!, id))) throw notFound(`you have no waiting message ${id}`);
        return reply.code(204).send();
      }),
    );

    // Many acknowledgements in one signed request, for agents working through a backlog.
    scope.post(
      "/relay/messages/ack",
      counted("ack", async (req) => {
        const parsed = AckRequest.safeParse(req.body);
        if (!parsed.success) throw badRequest(`invalid acknowledgement: ${describeIssues(parsed.error)}`);
        const ids = [...new Set(parsed.data.message_ids)];
        const removed = await Promise.all(ids.map((id) => mailboxes.ack(req.agent!, id)));
        return { acknowledged: ids.filter((_, i) => removed[i]), not_found: ids.filter((_, i) => !removed[i]) };
      }),
    );

    const subscriptionState = (agent: string) => ({ status: "subscribed", ...subs.state(agent) });

    scope.post(
      "/relay/subscribe",
      counted("subscribe", async (req) => {
        const parsed = SubscribeRequest.safeParse(req.body);
        if (!parsed.success) throw badRequest(`invalid subscription: ${describeIssues(parsed.error)}`);
        const body = parsed.data;
        const agent = req.agent!;
        // One agent can never subscribe for another.
        for (const named of [body.subscribe?.agent, body.unsubscribe?.agent, body.push?.agent]) {
          if (named !== undefined && named !== agent) throw invalidSignature(`the request is signed by ${agent} but names agent ${named}`);
        }
        if (body.subscribe) await subs.subscribe(agent, body.subscribe.topics);
        if (body.unsubscribe) await subs.unsubscribe(agent, body.unsubscribe.topics);
        if (body.push) await subs.setPush(agent, body.push.webhook);
        return subscriptionState(agent);
      }),
    );

    scope.get("/relay/subscribe", async (req) => subscriptionState(req.agent!));

    scope.get("/relay/events", async (req, reply) => {
      metrics.relay.inc({ operation: "events", result: "ok" });
      reply.hijack();
      serveEvents(reply.raw, req.raw, req.agent!, mailboxes, deps.logger);
    });

    scope.get(
      "/relay/dead-letters",
      counted("dead-letters", async (req, reply) => {
        const query = req.query as Record<string, string | undefined>;
        const limit = intParam(query.limit, "limit", 100, 1, 1000);
        const after = intParam(query.after, "after", 0, 0, Number.MAX_SAFE_INTEGER);
        const letters = await mailboxes.deadLetters(req.agent!, after, limit);
        const last = letters.at(-1);
        if (last) reply.header("ifp-next-after", String(last.seq));
        return { dead_letters: letters.map(({ seq: _seq, ...d }) => d) };
      }),
    );

    scope.delete(
      "/relay/dead-letters/*",
      counted("dead-letters", async (req, reply) => {
        const id = (req.params as { "*": string })["*"];
        if (!id || id.length > 256 || !(await mailboxes.removeDeadLetter(req.agent!, id))) throw notFound(`you have no dead letter ${id}`);
        return reply.code(204).send();
      }),
    );
  });

  attachWebSocket(app, {
    mailboxes,
    metrics,
    log: deps.logger,
    authenticate: (r) => authenticate(r),
  });
  return app;
}

export function intParam(v: string | undefined, name: string, dflt: number, min: number, max: number): number {
  if (v === undefined) return dflt;
  const n = Number(v);
  if (!/^\d{1,16}$/.test(v) || n < min || n > max) throw badRequest(`${name} must be a whole number from ${min} to ${max}`);
  return n;
}
