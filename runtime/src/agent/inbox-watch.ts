// GET /messages/watch of the local API's loopback listener: every message the inbox accepts, as
// it is stored, for a person watching an agent (`ifp tail`, `kubectl ifp tail`). It follows the
// inbox as the NATS layout can (nats/layout.ts `followInbox`: an ordered consumer of its own, or
// the inbox's republish of what it stored), never acknowledging, so it takes nothing from the
// handler or the application's message stream, with or without spec.handler. Served on the loopback only: only the pod's containers (and whoever may exec into
// them) reach it; the bearer token of the TLS listener sends as the agent but does not read its inbox.
import type { FastifyPluginAsyncZod } from "@fastify/type-provider-zod";
import type { Logger } from "pino";
import { z } from "zod";
import type { Nats } from "../nats/connection.ts";
import type { InboxFollower, InboxLookBack } from "../nats/layout.ts";
import { rateLimited, unavailable } from "../protocol/errors.ts";
import { ErrorAnswer } from "../protocol/local-api.ts";
import { errorMessage } from "../util/errors.ts";
import { messageEvent, withStoredMessage } from "./app-stream.ts";
import type { AgentNames } from "./names.ts";
import { INBOX_HEADERS } from "./store.ts";

/** Open watches per process: a person's tool, not an application's feed. */
export const MAX_WATCHES = 8;
/** The longest look back `?since=` takes, in seconds (a week, the longest an inbox keeps a message by default). */
export const MAX_SINCE_SECONDS = 7 * 24 * 3600;
const KEEPALIVE_MS = 15_000;

/** One accepted message as a watcher sees it. */
export interface Watched {
  seq: number;
  message_id: string;
  sender: string;
  auth_level: number;
  auth_source: string;
  encrypted?: string;
  /** False when the runtime answered the message itself and the application never gets it. */
  handed_on: boolean;
  /** When the inbox stored it (RFC 3339). */
  stored: string;
  /** The message as stored (JSON text). */
  raw: string;
}

/** The SSE frame of one watched message: `data:` is one line, the message byte for byte inside it. */
export function watchFrame(w: Watched): string {
  const { seq, message_id, sender, auth_level, auth_source, encrypted, handed_on, stored } = w;
  const meta = {
    seq,
    message_id,
    sender,
    auth_level,
    auth_source,
    ...(encrypted ? { encrypted } : {}),
    handed_on,
    stored,
  };
  return messageEvent(seq, withStoredMessage(meta, w.raw));
}

/** Watches of one agent's inbox stream. */
export class InboxWatch {
  private open = 0;
  private readonly nats: Nats;
  private readonly names: Pick<AgentNames, "inboxStream" | "inboxMessages">;
  private readonly log: Logger;
  private readonly inbox: { lookBack?: InboxLookBack } | undefined;
  /** `inbox`: the inbox store, whose record of what it stored is the look back where the layout does not read from a time. */
  constructor(
    nats: Nats,
    names: Pick<AgentNames, "inboxStream" | "inboxMessages">,
    log: Logger,
    inbox?: { lookBack?: InboxLookBack },
  ) {
    this.nats = nats;
    this.names = names;
    this.log = log;
    this.inbox = inbox;
  }

  get full(): boolean {
    return this.open >= MAX_WATCHES;
  }

  /**
   * Follow the inbox from now (or `sinceSeconds` back): `send` gets each accepted message until
   * the returned function is called. The place is taken before anything is awaited, so requests
   * arriving together cannot open more than MAX_WATCHES. Throws 429 when all places are taken,
   * 503 when NATS cannot be reached.
   */
  async start(sinceSeconds: number, send: (w: Watched) => void, ended: () => void): Promise<() => void> {
    if (this.full) throw rateLimited(5, "too many open inbox watches");
    this.open++;
    let messages: InboxFollower;
    try {
      if (!this.nats.isConnected) throw unavailable("the message store (NATS JetStream) is not reachable");
      messages = await this.nats.layout.followInbox(this.nats, this.names, sinceSeconds, this.inbox?.lookBack);
    } catch (err) {
      this.open--;
      throw err;
    }
    let stopped = false;
    const stop = () => {
      if (stopped) return;
      stopped = true;
      this.open--;
      void messages.close().catch(() => {});
    };
    void (async () => {
      try {
        for await (const m of messages) {
          if (stopped) break;
          const h = m.headers;
          send({
            seq: m.seq,
            message_id: h?.get(INBOX_HEADERS.messageId) ?? "",
            sender: h?.get(INBOX_HEADERS.sender) ?? "",
            auth_level: Number(h?.get(INBOX_HEADERS.authLevel) ?? 0) || 0,
            auth_source: h?.get(INBOX_HEADERS.authSource) || "none",
            ...(h?.get(INBOX_HEADERS.encrypted) ? { encrypted: h.get(INBOX_HEADERS.encrypted) } : {}),
            handed_on: h?.get(INBOX_HEADERS.handoff) !== "no",
            stored: m.time.toISOString(),
            raw: m.string(),
          });
        }
      } catch (err) {
        if (!stopped) this.log.warn({ err: errorMessage(err) }, "inbox watch ended");
      } finally {
        stop();
        ended();
      }
    })();
    return stop;
  }
}

const WatchQuery = z.object({
  since: z
    .string()
    .regex(/^\d{1,7}$/)
    .refine((v) => Number(v) <= MAX_SINCE_SECONDS)
    .optional()
    .describe(`Seconds back to start from (0 to ${MAX_SINCE_SECONDS}); without it, only messages accepted from now on`),
});

const WATCH = `Every message the inbox accepts, as it is stored, whoever it goes to afterwards: an ordered
consumer of its own that never acknowledges, so it takes nothing from spec.handler or the
message stream (with or without spec.handler). One event per message: \`id:\` the inbox
sequence, \`event: message\`, \`data:\` one line {seq, message_id, sender, auth_level,
auth_source, encrypted?, handed_on, stored, message}. Comments (\`: keep-alive\`) every 15 s.
Only on the loopback listener (404 on the TLS listener), at most ${MAX_WATCHES} open per replica
(429 past that); \`ifp tail\` reads it. A replica's watch sees every message any replica accepts. On
the isolated NATS layout the look back is of the runtime's record of what it stored (docs/scale.md).
`;

/** GET /messages/watch (loopback listener only). */
export const watchRoutes: FastifyPluginAsyncZod<{ watch: InboxWatch }> = async (app, { watch }) => {
  const open = new Set<() => void>();
  app.addHook("preClose", async () => {
    for (const end of open) end();
  });
  app.get(
    "/messages/watch",
    {
      schema: {
        summary: "Every message the inbox accepts, as Server-Sent Events, taking none (loopback listener only)",
        description: WATCH,
        querystring: WatchQuery,
        response: {
          200: { description: "The event stream", content: { "text/event-stream": { schema: { type: "string" } } } },
          400: ErrorAnswer,
          429: ErrorAnswer,
          501: ErrorAnswer,
          503: ErrorAnswer,
        },
      },
      config: { invalid: `since: whole seconds, 0 to ${MAX_SINCE_SECONDS}` },
    },
    async (req, reply) => {
      const res = reply.raw;
      // The client may leave while the consumer is being made: its place is given back at once.
      let end = () => {};
      let left = false;
      res.on("close", () => {
        left = true;
        end();
      });
      const stop = await watch.start(
        Number(req.query.since ?? 0),
        (w) => res.write(watchFrame(w)),
        () => end(),
      );
      if (left || res.destroyed) {
        stop();
        reply.hijack();
        return;
      }
      reply.hijack();
      res.writeHead(200, {
        "content-type": "text/event-stream; charset=utf-8",
        "cache-control": "no-store",
        connection: "keep-alive",
        "x-accel-buffering": "no",
      });
      res.write(": ifp agent inbox watch\n\n");
      const keepAlive = setInterval(() => res.write(": keep-alive\n\n"), KEEPALIVE_MS);
      keepAlive.unref();
      end = () => {
        clearInterval(keepAlive);
        open.delete(end);
        stop();
        res.end();
      };
      open.add(end);
    },
  );
};
