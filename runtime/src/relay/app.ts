import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { Logger } from "pino";
import { z } from "zod";
import { RateLimiter } from "../agent/ratelimit.ts";
import { badRequest, invalidSignature, notFound, rateLimited, type ProtocolError } from "../protocol/errors.ts";
import { verifyRequest } from "../protocol/http-signatures.ts";
import { describeIssues, Message } from "../protocol/message.ts";
import { isoSeconds } from "../protocol/documents.ts";
import type { Verifier } from "../protocol/verify.ts";
import type { Relay } from "../resources/relay.ts";
import { createServer, type TlsMaterial } from "../server/http.ts";
import type { RuntimeMetrics } from "../server/metrics.ts";
import { registerProbes } from "../server/probes.ts";
import type { Mailboxes, StoredCopy } from "./mailbox.ts";
import type { Subscriptions } from "./subscriptions.ts";
import { WebSocketServer, type WebSocket } from "ws";

/** How a message is addressed to a topic: a recipient `{agent: "topic:<name>"}`. */
export const TOPIC_PREFIX = "topic:";
export const TRANSPORT_LABEL = "https+ifp-4";
const TOPIC_RE = /^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$/;

export const SubscribeRequest = z.union([
  z.object({
    subscribe: z.object({
      topics: z.array(z.string().regex(TOPIC_RE, "topics use dot notation such as capabilities.update")).min(1).max(100),
      agent: z.string().min(1),
    }),
  }),
  z.object({ unsubscribe: z.object({ topics: z.array(z.string()).min(1), agent: z.string().min(1) }) }),
  z.object({ push: z.object({ webhook: z.url({ protocol: /^https?$/ }).nullable(), agent: z.string().min(1) }) }),
]);

export interface RelayAppDeps {
  relay: Relay;
  verifier: Verifier;
  mailboxes: Mailboxes;
  subs: Subscriptions;
  metrics: RuntimeMetrics;
  logger: Logger;
  tls?: TlsMaterial;
  ready: () => boolean;
}

declare module "fastify" {
  interface FastifyRequest {
    rawBody?: Buffer;
    agent?: string;
  }
}

/** The relay's HTTPS endpoints (spec 4.2); every /relay/ request is signed by an agent it serves. */
export function buildRelayApp(deps: RelayAppDeps): FastifyInstance {
  const { relay, verifier, mailboxes, subs, metrics } = deps;
  const spec = relay.spec;
  const app = createServer({ tls: deps.tls, logger: deps.logger, bodyLimit: spec.limits.maxMessageBytes });
  registerProbes(app, deps.ready, metrics);
  const perAgent = new RateLimiter(spec.limits.perAgentPerMinute);
  const relayBy = `relay:${spec.url.replace(/\/+$/, "")}`;

  // Keep the raw bytes: the request signature covers them through Content-Digest.
  app.removeContentTypeParser("application/json");
  app.addContentTypeParser("application/json", { parseAs: "buffer" }, (req, body, done) => {
    (req as FastifyRequest).rawBody = body as Buffer;
    try {
      done(null, JSON.parse((body as Buffer).toString("utf8")));
    } catch (err) {
      done(badRequest(`the body is not valid JSON: ${(err as Error).message}`), undefined);
    }
  });

  const authenticate = async (req: FastifyRequest) => {
    const { agentId } = await verifyRequest(
      { method: req.method, url: `https://${req.host}${req.url}`, headers: req.headers, body: req.rawBody },
      (agent, keyId) => verifier.key(agent, keyId),
    );
    const limit = perAgent.take(agentId);
    if (!limit.ok) throw rateLimited(limit.retryAfterSeconds, `rate limit of ${spec.limits.perAgentPerMinute} requests per minute exceeded for ${agentId}`);
    req.agent = agentId;
  };
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
    scope.addHook("preHandler", authenticate);

    scope.post(
      "/relay/publish",
      counted("publish", async (req, reply) => {
        const parsed = Message.safeParse(req.body);
        if (!parsed.success) throw badRequest(`the message does not follow IFP-4: ${describeIssues(parsed.error)}`);
        const message = parsed.data;
        const h = message.headers;
        if (h.from.agent !== req.agent) throw invalidSignature(`the request is signed by ${req.agent} but the message is from ${h.from.agent}`);
        let ttl: number | undefined;
        if (h.ttl_seconds !== undefined) {
          ttl = Math.ceil((Date.parse(h.date) + h.ttl_seconds * 1000 - Date.now()) / 1000);
          if (ttl <= 0) throw badRequest(`the message's ttl_seconds (${h.ttl_seconds}) has already passed since its date ${h.date}`);
        }
        const recipients = new Set<string>();
        for (const { agent } of h.to) {
          if (agent.startsWith(TOPIC_PREFIX)) {
            for (const s of await subs.subscribers(agent.slice(TOPIC_PREFIX.length))) recipients.add(s);
          } else if (verifier.knows(agent)) {
            recipients.add(agent);
          } else {
            throw notFound(`this relay does not serve ${agent}`);
          }
        }
        // The accountable trace entry (spec 2.9), appended before the message is stored.
        const raw = req.body as Record<string, unknown> & { trace?: { received?: unknown[] } };
        const trace = { ...(raw.trace ?? {}), received: [...(raw.trace?.received ?? []), { by: relayBy, with: TRANSPORT_LABEL, at: isoSeconds(new Date()), from: req.agent! }] };
        const stored = await mailboxes.store(JSON.stringify({ ...raw, trace }), h.message_id, [...recipients], ttl);
        return reply.code(202).send({ status: "accepted", message_id: h.message_id, recipients: recipients.size, ...stored });
      }),
    );

    scope.get(
      "/relay/messages",
      counted("retrieve", async (req, reply) => {
        const query = req.query as { limit?: string; after?: string };
        const limit = intParam(query.limit, "limit", 100, 1, 1000);
        const after = intParam(query.after, "after", 0, 0, Number.MAX_SAFE_INTEGER);
        const copies = await mailboxes.list(req.agent!, after, limit);
        const last = copies.at(-1);
        if (copies.length === limit && last) {
          reply.header("link", `</relay/messages?limit=${limit}&after=${last.seq}>; rel="next"`);
        }
        if (last) reply.header("ifp-next-after", String(last.seq));
        return copies.map((c: StoredCopy) => c.message);
      }),
    );

    scope.delete(
      "/relay/messages/:id",
      counted("ack", async (req, reply) => {
        const { id } = req.params as { id: string };
        if (!(await mailboxes.ack(req.agent!, id))) throw notFound(`no waiting message ${id}`);
        return reply.code(204).send();
      }),
    );

    scope.post(
      "/relay/subscribe",
      counted("subscribe", async (req) => {
        const parsed = SubscribeRequest.safeParse(req.body);
        if (!parsed.success) throw badRequest(`invalid subscription: ${describeIssues(parsed.error)}`);
        const body = parsed.data;
        const agent = "subscribe" in body ? body.subscribe.agent : "unsubscribe" in body ? body.unsubscribe.agent : body.push.agent;
        // One agent can never subscribe for another.
        if (agent !== req.agent) throw invalidSignature(`the request is signed by ${req.agent} but names agent ${agent}`);
        if ("subscribe" in body) await subs.subscribe(agent, body.subscribe.topics);
        else if ("unsubscribe" in body) await subs.unsubscribe(agent, body.unsubscribe.topics);
        else await subs.setPush(agent, body.push.webhook);
        const push = await subs.push(agent);
        return { status: "subscribed", agent, topics: await subs.topicsOf(agent), push: push ? { webhook: push.webhook } : null };
      }),
    );

    scope.get("/relay/events", async (req, reply) => {
      const lastId = req.headers["last-event-id"];
      const after = typeof lastId === "string" && /^\d+$/.test(lastId) ? Number(lastId) : 0;
      metrics.relay.inc({ operation: "events", result: "ok" });
      reply.hijack();
      const res = reply.raw;
      res.writeHead(200, { "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-store", connection: "keep-alive" });
      res.write(": ifp relay events\n\n");
      const stop = mailboxes.follow(
        req.agent!,
        after,
        (copy) => res.write(`id: ${copy.seq}\nevent: message\ndata: ${JSON.stringify(copy.message)}\n\n`),
        (err) => {
          deps.logger.warn({ err: err.message, agent: req.agent }, "event stream ended");
          res.end();
        },
      );
      const heartbeat = setInterval(() => res.write(": keep-alive\n\n"), 15_000);
      req.raw.on("close", () => {
        clearInterval(heartbeat);
        stop();
      });
    });

    scope.get<{ Querystring: { limit?: string } }>("/relay/dead-letters", async (req) => {
      const limit = intParam(req.query.limit, "limit", 100, 1, 1000);
      return { dead_letters: await mailboxes.deadLetters(req.agent!, limit) };
    });
  });

  attachWebSocket(app, deps, authenticate);
  return app;
}

/**
 * WebSocket push at /relay/ws: the upgrade request is signed like any relay request (resume
 * with ?after=<seq>); the relay sends {type: "message", id, message} and removes a message
 * when the client sends {type: "ack", message_id}, answering {type: "acked", message_id, ok}.
 */
function attachWebSocket(app: FastifyInstance, deps: RelayAppDeps, authenticate: (req: FastifyRequest) => Promise<void>): void {
  const wss = new WebSocketServer({ noServer: true, maxPayload: 64 * 1024 });
  app.server.on("upgrade", (raw, socket, head) => {
    const url = new URL(raw.url ?? "/", "https://relay");
    const refuse = (status: number, body: object) => {
      const text = JSON.stringify(body);
      socket.end(`HTTP/1.1 ${status} ${status === 401 ? "Unauthorized" : status === 429 ? "Too Many Requests" : "Not Found"}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(text)}\r\nconnection: close\r\n\r\n${text}`);
    };
    if (url.pathname !== "/relay/ws") return refuse(404, { status: "error", code: "not_found", message: `no endpoint ${url.pathname}` });
    const fake = { method: raw.method ?? "GET", url: raw.url ?? "/", host: raw.headers.host ?? "relay", headers: raw.headers } as unknown as FastifyRequest;
    authenticate(fake).then(
      () => {
        wss.handleUpgrade(raw, socket, head, (ws) => serve(ws, fake.agent!, Number(url.searchParams.get("after") ?? 0) || 0));
      },
      (err: ProtocolError) => refuse(err.statusCode ?? 401, { status: "error", code: err.code ?? "invalid_signature", message: err.message }),
    );
  });
  const serve = (ws: WebSocket, agent: string, after: number) => {
    deps.metrics.relay.inc({ operation: "websocket", result: "ok" });
    const stop = deps.mailboxes.follow(
      agent,
      after,
      (copy) => ws.send(JSON.stringify({ type: "message", id: copy.seq, message: copy.message })),
      () => ws.close(1011, "mailbox unavailable"),
    );
    ws.on("message", (data) => {
      let msg: { type?: string; message_id?: string };
      try {
        msg = JSON.parse(data.toString());
      } catch {
        ws.send(JSON.stringify({ type: "error", code: "invalid_format", message: "frames are JSON objects" }));
        return;
      }
      if (msg.type !== "ack" || typeof msg.message_id !== "string") {
        ws.send(JSON.stringify({ type: "error", code: "invalid_format", message: 'send {"type": "ack", "message_id": "…"}' }));
        return;
      }
      const id = msg.message_id;
      deps.mailboxes.ack(agent, id).then(
        (ok) => ws.send(JSON.stringify({ type: "acked", message_id: id, ok })),
        (err: Error) => ws.send(JSON.stringify({ type: "error", code: "unavailable", message: err.message })),
      );
    });
    ws.on("close", stop);
  };
  app.addHook("onClose", async () => {
    for (const c of wss.clients) c.terminate();
    wss.close();
  });
}

function intParam(v: string | undefined, name: string, dflt: number, min: number, max: number): number {
  if (v === undefined) return dflt;
  const n = Number(v);
  if (!/^\d+$/.test(v) || n < min || n > max) throw badRequest(`${name} must be a whole number from ${min} to ${max}`);
  return n;
}
