// The relay's push streams of a mailbox: GET /relay/events (Server-Sent Events) and the WebSocket
// at /relay/ws, whose sessions also acknowledge and publish.
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Duplex } from "node:stream";
import type { FastifyInstance } from "fastify";
import type { Logger } from "pino";
import { WebSocketServer, type RawData, type WebSocket } from "ws";
import { ProtocolError } from "../protocol/errors.ts";
import type { Message } from "../protocol/message.ts";
import { toProtocolError } from "../server/http.ts";
import type { RuntimeMetrics } from "../server/metrics.ts";
import { copySpan, type Mailboxes } from "./mailbox.ts";
import type { RelayAuthenticator } from "./auth.ts";
import { itemError, parseJson, type PublishIntake } from "./intake.ts";
import { WEBSOCKET_TRANSPORT_LABEL } from "./publish.ts";
import { AckRequest, type AckResponse, type ItemResult } from "../protocol/relay-api.ts";
import { describeIssues } from "../contract/issues.ts";
import type { StreamSlots } from "../server/stream-slots.ts";

export const WEBSOCKET_PATH = "/relay/ws";
const HEARTBEAT_MS = 15_000;
/** Unsent bytes a slow client may hold before the relay waits for it to read. */
const HIGH_WATER = 1 << 20;

/** The SSE frame of one copy (its JSON text has no line break): the event id is its stream sequence, the resume cursor. */
export function sseFrame(copy: { seq: number; text: string }): string {
  return `id: ${copy.seq}\nevent: message\ndata: ${copy.text}\n\n`;
}

/** The WebSocket frame of one copy, {type: "message", id, message}, with the copy's text as stored. */
export function messageFrame(copy: { seq: number; text: string }): string {
  return `{"type":"message","id":${copy.seq},"message":${copy.text}}`;
}

/** A resume cursor from Last-Event-ID or ?after= (a stream sequence); 0 from the start. */
export function cursor(value: string | string[] | null | undefined): number {
  const v = Array.isArray(value) ? value[0] : value;
  return typeof v === "string" && /^\d{1,15}$/.test(v.trim()) ? Number(v.trim()) : 0;
}

/**
 * GET /relay/events: the caller's mailbox as Server-Sent Events, waiting copies first, then new
 * ones. Nothing is removed until the agent acknowledges (DELETE /relay/messages/{id}); a
 * reconnect with Last-Event-ID resumes after the last event seen.
 */
export function serveEvents(
  res: ServerResponse,
  req: IncomingMessage,
  agent: string,
  mailboxes: Mailboxes,
  metrics: RuntimeMetrics,
  log: Logger,
): () => void {
  res.writeHead(200, {
    "content-type": "text/event-stream; charset=utf-8",
    "cache-control": "no-store",
    connection: "keep-alive",
    "x-accel-buffering": "no",
  });
  res.write(": ifp relay events\n\n");
  const drained = () => new Promise<void>((r) => res.once("drain", r));
  const stop = mailboxes.follow(
    agent,
    cursor(req.headers["last-event-id"]),
    async (copy) => {
      const span = copySpan("ifp.relay.push", copy, "sse");
      try {
        const flushed = res.write(sseFrame(copy));
        metrics.relayDeliveries.inc({ transport: "sse", result: "sent" });
        if (!flushed && res.writableLength > HIGH_WATER) await drained();
      } finally {
        span.end();
      }
    },
    (err) => {
      if (err) log.warn({ err: err.message, agent }, "event stream ended");
      res.end();
    },
  );
  const heartbeat = setInterval(() => res.write(": keep-alive\n\n"), HEARTBEAT_MS);
  res.on("close", () => {
    clearInterval(heartbeat);
    stop();
  });
  return () => res.end();
}

/** What the relay's event streams (SSE and the WebSocket) work with. */
export interface StreamDeps {
  mailboxes: Mailboxes;
  metrics: RuntimeMetrics;
  log: Logger;
  /** The WebSocket upgrade bypasses the routes' hooks and authenticates itself. */
  authenticate: RelayAuthenticator;
  /** Open SSE and WebSocket streams, per agent and overall (spec.limits). */
  slots: StreamSlots;
  /** Publish frames on the WebSocket go where POST /relay/publish goes. */
  intake: PublishIntake;
  /** The largest WebSocket frame: a publish frame carries a message of up to spec.limits.maxMessageBytes. */
  maxPayload: number;
}

export type WsFrame =
  | { type: "message"; id: number; message: Message }
  | { type: "acked"; message_id: string; ok: boolean }
  | ({ type: "acked" } & AckResponse)
  | ({ type: "published" } & Extract<ItemResult, { status: 202 }>)
  | ({ type: "error" } & Omit<Extract<ItemResult, { code: string }>, "status"> & { status?: number });

/** A client frame: {type: "ack", message_id}, {type: "ack", message_ids: [...]} or {type: "publish", message, recipients?}. */
export type ClientFrame =
  | { ack: string }
  | { ackMany: string[] }
  | { publish: unknown; recipients?: string[] }
  | { error: string };

const FRAMES =
  'send {"type": "ack", "message_id": "…"}, {"type": "ack", "message_ids": ["…"]} or {"type": "publish", "message": {…}}';

export function parseClientFrame(data: RawData): ClientFrame {
  let frame: unknown;
  try {
    frame = parseJson(data.toString());
  } catch (err) {
    return {
      error:
        err instanceof SyntaxError && /prototype/i.test(err.message)
          ? `frames may not set ${err.message}`
          : "frames are JSON objects",
    };
  }
  const f = frame as {
    type?: unknown;
    message_id?: unknown;
    message_ids?: unknown;
    message?: unknown;
    recipients?: unknown;
  };
  if (f?.type === "ack" && f.message_ids !== undefined) {
    // The bounds of POST /relay/messages/ack: 1 to 1000 ids of 1 to 256 characters.
    const many = AckRequest.safeParse({ message_ids: f.message_ids });
    if (!many.success) return { error: `invalid acknowledgement: ${describeIssues(many.error)}` };
    return { ackMany: many.data.message_ids };
  }
  if (f?.type === "ack" && typeof f.message_id === "string" && f.message_id) return { ack: f.message_id };
  if (f?.type !== "publish") return { error: FRAMES };
  if (typeof f.message !== "object" || f.message === null || Array.isArray(f.message))
    return { error: 'a publish frame carries one IFP-4 message as its "message" object' };
  const r = f.recipients;
  if (r === undefined) return { publish: f.message };
  if (
    !Array.isArray(r) ||
    r.length < 1 ||
    r.length > 100 ||
    !r.every((x) => typeof x === "string" && x.length >= 1 && x.length <= 256)
  ) {
    return { error: "recipients, when sent, are 1 to 100 agent ids" };
  }
  return { publish: f.message, recipients: r as string[] };
}

/** Publish frames of one connection being stored at once; past this the relay reads no more frames until some are answered. */
export const MAX_PUBLISHING = 256;

/**
 * The WebSocket at /relay/ws: a session of one agent, authenticated once by its signed upgrade
 * request (resume with ?after=<cursor>; ?push=off for a session that only sends). The relay
 * sends {type: "message", id, message} for each waiting and each new copy and removes one when
 * the client sends {type: "ack", message_id}, answering {type: "acked", message_id, ok} (each ack
 * counts one request against the per-agent limit; past it {type: "error", status: 429, ...}). A
 * {type: "publish", message, recipients?} frame is checked and stored as POST /relay/publish
 * would (from the session's agent, counted against its per-agent limit) and answered
 * {type: "published", ...} once stored, or {type: "error", status, code, message, message_id}.
 */
export function attachWebSocket(app: FastifyInstance, deps: StreamDeps): void {
  const wss = new WebSocketServer({ noServer: true, maxPayload: deps.maxPayload });
  // A handshake the WebSocket library refuses (a bad Sec-WebSocket-Key or -Version, another
  // method than GET): the error body, as for any refused request, instead of the library's text.
  wss.on("wsClientError", (err: Error, socket: Duplex) => {
    const method = /method/i.test(err.message);
    refuseUpgrade(
      socket,
      new ProtocolError(
        method ? 405 : 400,
        method ? "method_not_allowed" : "invalid_format",
        `the WebSocket upgrade is refused: ${err.message}`,
      ),
    );
  });
  app.server.on("upgrade", (raw: IncomingMessage, socket: Duplex, head: Buffer) =>
    upgrade(app, wss, deps, raw, socket, head),
  );
  // Before the server waits for its connections: open sockets would hold it for ever.
  app.addHook("preClose", async () => {
    for (const c of wss.clients) {
      c.close(1001, "relay shutting down");
      setTimeout(() => c.terminate(), 1000).unref();
    }
    wss.close();
  });
}

/** A refused upgrade: the status line and the error body, as for any refused request. */
function refuseUpgrade(socket: Duplex, err: ProtocolError): void {
  const text = JSON.stringify(err.body());
  const extra = Object.entries(err.headers)
    .map(([k, v]) => `${k}: ${v}\r\n`)
    .join("");
  socket.end(
    `HTTP/1.1 ${err.statusCode} ${err.code}\r\ncontent-type: application/json; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(text)}\r\n${extra}connection: close\r\n\r\n${text}`,
  );
}

/** One upgrade request: the path, the signature and a stream slot, then the session. */
function upgrade(
  app: FastifyInstance,
  wss: WebSocketServer,
  deps: StreamDeps,
  raw: IncomingMessage,
  socket: Duplex,
  head: Buffer,
): void {
  socket.on("error", () => {});
  const url = new URL(raw.url ?? "/", "https://relay.invalid");
  if (url.pathname !== WEBSOCKET_PATH) {
    refuseUpgrade(
      socket,
      new ProtocolError(404, "not_found", `no WebSocket endpoint ${url.pathname}; use ${WEBSOCKET_PATH}`),
    );
    return;
  }
  const request = {
    clientAddress: app.clientAddressOf(raw),
    method: raw.method ?? "GET",
    url: raw.url ?? "/",
    host: raw.headers.host,
    localPort: raw.socket.localPort,
    headers: raw.headers,
  };
  deps.authenticate(request).then(
    (agent) => {
      let release: () => void;
      try {
        release = deps.slots.acquire(agent);
      } catch (err) {
        return refuseUpgrade(socket, toProtocolError(err));
      }
      socket.once("close", release);
      wss.handleUpgrade(raw, socket, head, (ws) => {
        ws.once("close", release);
        const after = cursor(url.searchParams.get("after"));
        serveWebSocket(ws, socket, deps, agent, after, url.searchParams.get("push") !== "off");
      });
    },
    (err) => refuseUpgrade(socket, toProtocolError(err)),
  );
}

/**
 * Frames sent within one event-loop turn leave together: the connection's socket is corked at
 * the first and uncorked once the turn's I/O is done, so the copies of one NATS read and the
 * answers finished in one turn are one TLS write instead of one each.
 */
export function turnWrites(socket: Pick<Duplex, "cork" | "uncork">): () => void {
  let corked = false;
  const flush = () => {
    corked = false;
    socket.uncork();
  };
  return () => {
    if (corked) return;
    corked = true;
    socket.cork();
    setImmediate(flush);
  };
}

/** One agent's WebSocket session: its copies pushed (unless push=off), its publish and ack frames answered. */
function serveWebSocket(
  ws: WebSocket,
  socket: Duplex,
  deps: StreamDeps,
  agent: string,
  after: number,
  push: boolean,
): void {
  deps.metrics.relay.inc({ operation: "websocket", result: "ok" });
  deps.metrics.relayConnections.inc({ transport: "websocket" });
  const together = turnWrites(socket);
  // Every frame of the session leaves through here, with the others of its turn.
  const write = (text: string) => {
    if (ws.readyState !== ws.OPEN) return;
    together();
    ws.send(text);
  };
  const send = (frame: WsFrame) => write(JSON.stringify(frame));
  const publish = webSocketPublisher(ws, deps, agent, send);
  const stop = push ? pushCopies(ws, deps, agent, after, write) : () => {};
  // A frame the protocol forbids (unmasked, a reserved opcode, text that is not UTF-8, over
  // maxPayload) or a broken connection: the library closes the WebSocket (with the code RFC 6455
  // gives: 1002, 1007, 1009) and reports it here; without a listener the report would end the process.
  ws.on("error", (err) => deps.log.info({ err: err.message, agent }, "WebSocket closed on an error"));
  ws.on("message", (data) => {
    const frame = parseClientFrame(data);
    if ("error" in frame) return send({ type: "error", status: 400, code: "invalid_format", message: frame.error });
    if ("publish" in frame) return publish(frame.publish, frame.recipients);
    if ("ackMany" in frame) return acknowledgeMany(deps, agent, frame.ackMany, send);
    acknowledge(deps, agent, frame.ack, send);
  });
  const ping = setInterval(() => ws.ping(), HEARTBEAT_MS);
  ws.on("close", () => {
    deps.metrics.relayConnections.dec({ transport: "websocket" });
    clearInterval(ping);
    stop();
  });
}

/** Publish frames, stored as POST /relay/publish would; reading pauses while MAX_PUBLISHING are under way. */
function webSocketPublisher(ws: WebSocket, deps: StreamDeps, agent: string, send: (frame: WsFrame) => void) {
  const log = deps.log.child({ agent });
  let publishing = 0;
  return (message: unknown, recipients: string[] | undefined) => {
    let limited: ItemResult | undefined;
    try {
      deps.authenticate.limitAgent(agent);
    } catch (err) {
      limited = itemError(toProtocolError(err), message);
    }
    if (++publishing >= MAX_PUBLISHING) ws.pause();
    (limited
      ? Promise.resolve(limited)
      : deps.intake.publishCarried(message, agent, { recipients, log, transport: WEBSOCKET_TRANSPORT_LABEL })
    ).then((result) => {
      if (--publishing < MAX_PUBLISHING && ws.isPaused) ws.resume();
      deps.metrics.relay.inc({ operation: "publish", result: "code" in result ? result.code : "ok" });
      send("code" in result ? { type: "error", ...result } : { type: "published", ...result });
    });
  };
}

/** The agent's copies after `after`, pushed as message frames (waiting while the socket's buffer is full); returns stop. */
function pushCopies(
  ws: WebSocket,
  deps: StreamDeps,
  agent: string,
  after: number,
  write: (text: string) => void,
): () => void {
  return deps.mailboxes.follow(
    agent,
    after,
    async (copy) => {
      const span = copySpan("ifp.relay.push", copy, "websocket");
      try {
        write(messageFrame(copy));
        deps.metrics.relayDeliveries.inc({ transport: "websocket", result: "sent" });
        while (ws.readyState === ws.OPEN && ws.bufferedAmount > HIGH_WATER) await new Promise((r) => setTimeout(r, 50));
      } finally {
        span.end();
      }
    },
    (err) => {
      if (err) deps.log.warn({ err: err.message, agent }, "WebSocket stream ended");
      ws.close(1011, "mailbox unavailable");
    },
  );
}

/** An ack frame: one request against the per-agent limit, as a DELETE is; answered acked or error. */
function acknowledge(deps: StreamDeps, agent: string, messageId: string, send: (frame: WsFrame) => void): void {
  try {
    deps.authenticate.limitAgent(agent);
  } catch (err) {
    const e = toProtocolError(err);
    const retry = Number(e.headers["retry-after"]);
    deps.metrics.relay.inc({ operation: "ack", result: e.code });
    send({
      type: "error",
      status: e.statusCode,
      code: e.code,
      message: e.message,
      message_id: messageId,
      ...(retry > 0 ? { retry_after: retry } : {}),
    });
    return;
  }
  deps.mailboxes.ack(agent, messageId).then(
    (ok) => {
      deps.metrics.relay.inc({ operation: "ack", result: ok ? "ok" : "not_found" });
      send({ type: "acked", message_id: messageId, ok });
    },
    (err: unknown) => {
      const e = toProtocolError(err);
      send({ type: "error", status: e.statusCode, code: e.code, message: e.message, message_id: messageId });
    },
  );
}

/**
 * An ack frame with many ids: each distinct id one request against the per-agent limit, as
 * POST /relay/messages/ack counts them; refused whole (one error frame, nothing removed) past
 * it; answered {type: "acked", acknowledged, not_found} once every removal finished.
 */
function acknowledgeMany(deps: StreamDeps, agent: string, ids: string[], send: (frame: WsFrame) => void): void {
  deps.mailboxes
    .ackMany(agent, ids, (n) => deps.authenticate.limitAgent(agent, n))
    .then(
      (answer) => {
        deps.metrics.relay.inc({ operation: "ack", result: "ok" });
        send({ type: "acked", ...answer });
      },
      (err: unknown) => {
        const e = toProtocolError(err);
        deps.metrics.relay.inc({ operation: "ack", result: e.code });
        send({ type: "error", ...itemError(e) });
      },
    );
}
