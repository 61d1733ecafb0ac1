// AppStream: accepted inbound messages handed to an application without an HTTP server, from a
// durable JetStream consumer shared by every replica, held until acknowledged; and the SSE and
// JSON forms of one delivery (the fields a hand-off to spec.handler.url carries).
import { AckPolicy, DeliverPolicy, type JsMsg } from "@nats-io/jetstream";
import type { Logger } from "pino";
import { nanos } from "../contract/nats.ts";
import type { Nats } from "../nats/connection.ts";
import { ConsumerWorker } from "../nats/worker.ts";
import { unavailable } from "../protocol/errors.ts";
import type { RuntimeMetrics } from "../server/metrics.ts";
import { Backoff } from "../util/backoff.ts";
import { errorMessage } from "../util/errors.ts";
import { setAsideExpired, type ExpiryDeps } from "./handoff.ts";
import type { AgentNames } from "./names.ts";
import { INBOX_HEADERS } from "./store.ts";

/** How long one reader's pull waits on the server; a closed reader hands its messages back within this. */
const PULL_EXPIRES_MS = 2_000;

/** An expired message whose dead letter could not be written is looked at again after this long. */
const EXPIRED_RETRY_MS = 5_000;

/** One accepted inbound message as the application gets it: what spec.handler.url would get. */
export interface AppDelivery {
  /** The inbox stream sequence: the SSE event id and the resume cursor. */
  seq: number;
  message_id: string;
  /** The verified signer (or the claimed sender of an accepted unsigned message). */
  sender: string;
  /** The verification result, the IFP-5 authentication level (-1 unsigned, docs/identity.md), as the handler's Ifp-Auth-Level. */
  auth_level: number;
  /** Where the key came from, as the handler's Ifp-Auth-Source. */
  auth_source: string;
  /** The scheme the body was encrypted under end to end (the runtime decrypted it); absent for a clear message. */
  encrypted?: string;
  /** 1 on the first delivery, more on redeliveries. */
  delivery_attempt: number;
  /** The message exactly as it was stored (JSON text). */
  raw: string;
}

export interface AppStreamOptions {
  /** A message handed out and not acknowledged is handed out again after this long (pull) or when its stream closes. */
  ackWaitMs?: number;
  /** Messages one stream reader may hold unacknowledged; the stream pauses at this many. */
  maxUnacked?: number;
  /** Open stream readers per process. */
  maxReaders?: number;
  /** Keep-alive comments on open streams, and the interval at which held messages are marked in progress. */
  heartbeatMs?: number;
}

interface Held {
  m: JsMsg;
  reader: Reader | undefined;
  timer?: NodeJS.Timeout;
}

interface Reader {
  cursor: number;
  ids: Set<string>;
  closed: boolean;
  wake: () => void;
  abort: AbortController;
  send(d: AppDelivery): void;
}

/** The SSE event of one delivery; `data` is one line (stored messages are compact JSON). */
export function appEventFrame(d: AppDelivery): string {
  return messageEvent(d.seq, deliveryJson(d));
}

/**
 * One SSE `message` event with id `seq`. Its data is one line: a CR or LF of the stored JSON can
 * only be white space between its tokens (inside a string they are escaped), and goes.
 */
export function messageEvent(seq: number, json: string): string {
  return `id: ${seq}\nevent: message\ndata: ${json.replace(/[\r\n]/g, "")}\n\n`;
}

/** `meta` as a JSON object with the stored message, byte for byte, as its last field `message`. */
export function withStoredMessage(meta: object, raw: string): string {
  return `${JSON.stringify(meta).slice(0, -1)},"message":${raw}}`;
}

/**
 * {seq, message_id, sender, auth_level, auth_source, encrypted?, delivery_attempt, message} with
 * the message as stored, byte for byte: the fields a hand-off to spec.handler.url carries in its headers.
 */
export function deliveryJson(d: AppDelivery): string {
  const { seq, message_id, sender, auth_level, auth_source, encrypted, delivery_attempt } = d;
  return withStoredMessage(
    { seq, message_id, sender, auth_level, auth_source, ...(encrypted ? { encrypted } : {}), delivery_attempt },
    d.raw,
  );
}

/** A resume cursor from Last-Event-ID or ?after= (an inbox stream sequence); 0 when absent or not a number. */
export function appCursor(value: string | string[] | null | undefined): number {
  const v = Array.isArray(value) ? value[0] : value;
  return typeof v === "string" && /^\d{1,15}$/.test(v.trim()) ? Number(v.trim()) : 0;
}

/**
 * Accepted inbound messages for an application that runs no HTTP server (spec.handler unset):
 * a durable JetStream consumer shared by every replica and every reader. Each stream reader
 * takes one message at a time from it (readers compete: each message goes to one of them),
 * holds it until the application acknowledges it by message_id, and hands everything it still
 * holds back (redelivered at once, first) when its stream closes. Messages fetched by the pull
 * variant are handed out again after `ackWaitMs` unless acknowledged. Acknowledgements reach
 * the replica that handed the message out (the in-cluster Service keeps each client on one
 * replica); another replica answers 404 and the message is redelivered.
 */
export class AppStream {
  private readonly nats: Nats;
  private readonly names: AgentNames;
  private readonly log: Logger;
  private readonly opts: Required<AppStreamOptions>;
  private readonly consumer: ConsumerWorker;
  private readonly expiry: ExpiryDeps;
  private readonly held = new Map<string, Held>();
  private readonly readers = new Set<Reader>();
  private readonly loops = new Set<Promise<void>>();
  private stopped = false;
  private ensured = false;
  private floorAt = 0;

  constructor(nats: Nats, names: AgentNames, log: Logger, metrics: RuntimeMetrics, opts: AppStreamOptions = {}) {
    this.nats = nats;
    this.names = names;
    this.log = log;
    this.expiry = { nats, names, log, metrics };
    this.opts = { ackWaitMs: 60_000, maxUnacked: 100, maxReaders: 32, heartbeatMs: 15_000, ...opts };
    // Used for its consumer set-up: created, updated, and recreated from the ack floor if it went away.
    this.consumer = new ConsumerWorker(
      nats,
      {
        stream: names.inboxStream,
        consumer: {
          durable_name: names.appConsumer,
          filter_subject: names.inboxMessages,
          ack_policy: AckPolicy.Explicit,
          deliver_policy: DeliverPolicy.All,
          ack_wait: nanos(this.opts.ackWaitMs),
          max_deliver: -1,
          max_ack_pending: 10_000,
        },
        updatable: ["ack_wait", "max_ack_pending"],
        recreateFrom: "ack-floor",
        concurrency: 1,
        handle: async () => {},
        label: "application stream",
      },
      log,
    );
  }

  /** Create the consumer now, so that messages accepted before the first reader wait for it. */
  async ensure(): Promise<void> {
    await this.consumer.ensureConsumer();
    this.ensured = true;
  }

  /** The acknowledgement floor, for a consumer recreated after it went away: refreshed at most every 30 s while readers are open. */
  private refreshFloor(): void {
    if (Date.now() - this.floorAt < 30_000) return;
    this.floorAt = Date.now();
    this.consumer.ensureConsumer().catch(() => (this.ensured = false));
  }

  /** Ensured once; again after a failure (the consumer may have gone away). */
  private async bound() {
    if (!this.ensured) await this.ensure();
    return await this.nats.js.consumers.get(this.names.inboxStream, this.names.appConsumer);
  }

  /** Readers still working: open, or closed and not yet done handing their messages back. */
  get activeReaders(): number {
    return this.loops.size;
  }

  /** Whether another reader may open a stream now. */
  get full(): boolean {
    return this.readers.size >= this.opts.maxReaders;
  }

  /**
   * Start a reader: `send` gets each delivery in order. Messages at or before `cursor` that come
   * back for redelivery are held for this reader's acknowledgement but not sent again (it has
   * them). Returns the function that closes the reader.
   */
  open(cursor: number, send: (d: AppDelivery) => void, keepAlive: () => void): () => void {
    let wake = () => {};
    const reader: Reader = {
      cursor,
      ids: new Set(),
      closed: false,
      abort: new AbortController(),
      wake: () => wake(),
      send,
    };
    this.readers.add(reader);
    const waitForRoom = () => new Promise<void>((r) => (wake = r));
    const heartbeat = setInterval(() => {
      keepAlive();
      for (const id of reader.ids) this.held.get(id)?.m.working();
      this.refreshFloor();
    }, this.opts.heartbeatMs);
    heartbeat.unref();
    const loop = this.read(reader, waitForRoom).finally(() => {
      this.handBack(reader);
      this.loops.delete(loop);
    });
    this.loops.add(loop);
    return () => {
      if (reader.closed) return;
      reader.closed = true;
      clearInterval(heartbeat);
      reader.abort.abort();
      reader.wake();
      this.readers.delete(reader);
    };
  }

  /**
   * Everything a closed reader still holds goes back at once, in stream order, ahead of newer
   * messages. Done when its loop has ended, so that a message its last pull brings in goes back too.
   */
  private handBack(reader: Reader): void {
    const back: Held[] = [];
    for (const id of reader.ids) {
      const h = this.held.get(id);
      if (h?.reader === reader) {
        this.held.delete(id);
        back.push(h);
      }
    }
    reader.ids.clear();
    for (const h of back.sort((x, y) => x.m.seq - y.m.seq)) h.m.nak();
  }

  private async read(reader: Reader, waitForRoom: () => Promise<void>): Promise<void> {
    const backoff = new Backoff({ initialMs: 500, maxMs: 10_000 });
    while (!reader.closed && !this.stopped) {
      try {
        // Each new reader also refreshes the acknowledgement floor a recreated consumer starts after.
        await this.ensure();
        const c = await this.bound();
        backoff.reset();
        while (!reader.closed && !this.stopped) {
          if (reader.ids.size >= this.opts.maxUnacked) {
            await waitForRoom();
            continue;
          }
          const m = await c.next({ expires: PULL_EXPIRES_MS });
          if (!m) continue;
          // Closed meanwhile: held, and handed back with the rest in order when the loop ends.
          await this.take(m, reader);
        }
      } catch (err) {
        this.ensured = false;
        if (reader.closed || this.stopped) break;
        this.log.warn({ err: errorMessage(err), retryInMs: backoff.delayMs }, "application stream interrupted");
        await backoff.wait(reader.abort.signal);
      }
    }
  }

  /** Hold one delivered message for `reader` (or for the pull variant) and return what the application gets. */
  private async take(m: JsMsg, reader: Reader | undefined): Promise<AppDelivery | undefined> {
    // Inspection at intake decided this one is answered by the runtime, not handed on.
    if (m.headers?.get(INBOX_HEADERS.handoff) === "no") {
      m.ack();
      return undefined;
    }
    // A message whose ttl_seconds passed is never handed on, as with spec.handler: checked on
    // every hand-out, redeliveries included, and moved to the dead letters.
    if (await setAsideExpired(this.expiry, m, EXPIRED_RETRY_MS)) {
      // An earlier hand-out of it (a pull not acknowledged in time) is no longer held either.
      this.release(m.headers?.get(INBOX_HEADERS.messageId) ?? "");
      return undefined;
    }
    const d: AppDelivery = {
      seq: m.seq,
      message_id: m.headers?.get(INBOX_HEADERS.messageId) ?? "",
      sender: m.headers?.get(INBOX_HEADERS.sender) ?? "",
      auth_level: Number(m.headers?.get(INBOX_HEADERS.authLevel) ?? 0) || 0,
      auth_source: m.headers?.get(INBOX_HEADERS.authSource) || "none",
      ...(m.headers?.get(INBOX_HEADERS.encrypted) ? { encrypted: m.headers.get(INBOX_HEADERS.encrypted) } : {}),
      delivery_attempt: m.info.deliveryCount,
      raw: m.string(),
    };
    this.release(d.message_id);
    const held: Held = { m, reader };
    if (reader) {
      reader.ids.add(d.message_id);
    } else {
      // Pull: JetStream hands it out again after ack_wait; forget it then.
      held.timer = setTimeout(
        () => this.held.get(d.message_id) === held && this.held.delete(d.message_id),
        this.opts.ackWaitMs,
      );
      held.timer.unref();
    }
    this.held.set(d.message_id, held);
    if (reader && !reader.closed && !(m.info.redelivered && d.seq <= reader.cursor)) reader.send(d);
    return d;
  }

  /** Forget what is held under this message_id (a newer delivery replaces it). */
  private release(messageId: string): Held | undefined {
    const h = this.held.get(messageId);
    if (!h) return undefined;
    this.held.delete(messageId);
    clearTimeout(h.timer);
    if (h.reader) {
      h.reader.ids.delete(messageId);
      h.reader.wake();
    }
    return h;
  }

  /**
   * The pull variant: up to `limit` messages, waiting up to `waitMs` when fewer are there. They
   * are handed out again after the acknowledgement wait unless acknowledged.
   */
  async pull(limit: number, waitMs: number): Promise<AppDelivery[]> {
    if (!this.nats.isConnected) throw unavailable("the message store (NATS JetStream) is not reachable");
    const out: AppDelivery[] = [];
    try {
      const c = await this.bound();
      const batch = await c.fetch({ max_messages: limit, expires: waitMs });
      for await (const m of batch) {
        const d = await this.take(m, undefined);
        if (d) out.push(d);
      }
    } catch (err) {
      this.ensured = false;
      if (out.length) return out;
      throw unavailable(`could not read messages: ${errorMessage(err)}`);
    }
    return out;
  }

  /** Acknowledge a held message: it is not handed out again. False when nothing is held under that id here. */
  async ack(messageId: string): Promise<boolean> {
    const h = this.held.get(messageId);
    if (!h) return false;
    let confirmed: boolean;
    try {
      confirmed = await h.m.ackAck({ timeout: 5_000 });
    } catch (err) {
      throw unavailable(`the acknowledgement was not confirmed: ${errorMessage(err)}`);
    }
    if (!confirmed) throw unavailable("the acknowledgement was not confirmed; try again");
    if (this.held.get(messageId) === h) this.release(messageId);
    return true;
  }

  /** Stop every reader and wait until what they held has been handed back (before NATS closes). */
  async stop(): Promise<void> {
    this.stopped = true;
    for (const r of this.readers) {
      r.abort.abort();
      r.wake();
    }
    await Promise.allSettled([...this.loops]);
  }
}
