// The relay's JetStream requests on its hot path (a copy stored, a copy purged): each one a
// publish with a reply subject on one subscription of the connection's, the requests of one
// event-loop turn leaving in one socket write, their answers read as JetStream's API writes them.
import { JetStreamApiError } from "@nats-io/jetstream";
import { createInbox, type Msg, type MsgHdrs, type NatsConnection, type Subscription } from "@nats-io/transport-node";
import type { Nats } from "../nats/connection.ts";

/** JetStream's API subjects, as the connection's JetStream client (no domain, no other prefix) addresses them. */
const API_PREFIX = "$JS.API";
/** How long an answer may take, as for the client library's JetStream requests. */
export const REQUEST_TIMEOUT_MS = 5_000;

/** JetStream's acknowledgement of a stored message. */
export interface PubAck {
  stream: string;
  seq: number;
  duplicate: boolean;
}

/** A request that JetStream did not answer: none listening on the subject, the timeout, or the connection gone. */
export class RequestFailed extends Error {}

interface Pending {
  resolve: (value: unknown) => void;
  reject: (err: Error) => void;
  deadline: number;
}

interface Queued extends Pending {
  subject: string;
  data: string | Uint8Array;
  headers?: MsgHdrs;
}

interface Replies {
  nc: NatsConnection;
  inbox: string;
  sub: Subscription;
}

const decoder = new TextDecoder();

/**
 * JetStream requests without the client library's request machinery, which makes a promise, a
 * timer and an `Error` with its stack for every request it completes (`RequestOne`), twice per
 * message the relay carries: replies come in on one wildcard subscription under the
 * connection's inbox prefix, keyed by a counter; one timer, running while answers are awaited,
 * fails those past their deadline. Requests asked for in one turn of the event loop are sent
 * together on the next, so that they leave in one socket write. A connection that replaced a
 * closed one gets its own subscription at its first request; what was awaited on the old one
 * fails. An answer is JetStream's: an API error (`{error: {code, err_code, description}}`)
 * rejects with the library's JetStreamApiError, as the library would.
 */
export class JetStreamRequests {
  private readonly nats: Pick<Nats, "nc">;
  private readonly timeoutMs: number;
  private readonly inboxPrefix: string | undefined;
  private replies: Replies | undefined;
  private readonly pending = new Map<string, Pending>();
  private queue: Queued[] = [];
  private next = 0;
  private sweeper: NodeJS.Timeout | undefined;

  /** `inboxPrefix`: the connection's (NatsOptions.inboxPrefix), under which its credential may subscribe. */
  constructor(nats: Pick<Nats, "nc">, opts: { timeoutMs?: number; inboxPrefix?: string } = {}) {
    this.nats = nats;
    this.timeoutMs = opts.timeoutMs ?? REQUEST_TIMEOUT_MS;
    this.inboxPrefix = opts.inboxPrefix;
  }

  /** Publish to a stream's subject; resolves with JetStream's acknowledgement once the message is stored. */
  async publish(subject: string, data: string | Uint8Array, headers: MsgHdrs): Promise<PubAck> {
    const ack = (await this.request(subject, data, headers)) as PubAck;
    if (typeof ack?.stream !== "string" || !ack.stream)
      throw new RequestFailed("JetStream answered the publish without a stream");
    ack.duplicate = ack.duplicate === true;
    return ack;
  }

  /** Remove a stream's messages on `filter` (a subject); resolves with the number removed. */
  async purge(stream: string, filter: string): Promise<number> {
    const answer = (await this.request(`${API_PREFIX}.STREAM.PURGE.${stream}`, JSON.stringify({ filter }))) as {
      purged?: number;
    };
    return answer?.purged ?? 0;
  }

  /** The requests awaiting an answer or their turn (for tests). */
  get inFlight(): number {
    return this.pending.size + this.queue.length;
  }

  private request(subject: string, data: string | Uint8Array, headers?: MsgHdrs): Promise<unknown> {
    return new Promise((resolve, reject) => {
      if (this.queue.push({ subject, data, headers, resolve, reject, deadline: 0 }) === 1)
        setImmediate(() => this.send());
    });
  }

  private send(): void {
    const queued = this.queue;
    this.queue = [];
    let replies: Replies;
    try {
      replies = this.subscribed();
    } catch (err) {
      for (const q of queued) q.reject(err as Error);
      return;
    }
    const deadline = performance.now() + this.timeoutMs;
    for (const q of queued) {
      const token = (this.next++).toString(36);
      try {
        replies.nc.publish(q.subject, q.data, { reply: `${replies.inbox}.${token}`, headers: q.headers });
      } catch (err) {
        q.reject(err as Error);
        continue;
      }
      this.pending.set(token, { resolve: q.resolve, reject: q.reject, deadline });
    }
    if (this.pending.size && !this.sweeper) {
      this.sweeper = setInterval(() => this.sweep(), Math.min(1_000, this.timeoutMs));
      this.sweeper.unref();
    }
  }

  /** The reply subscription on the current connection, made anew when the connection was replaced. */
  private subscribed(): Replies {
    const nc = this.nats.nc;
    if (!nc || nc.isClosed()) throw new RequestFailed("the connection to NATS is closed");
    if (this.replies?.nc === nc) return this.replies;
    if (this.replies) this.failAll(new RequestFailed("the connection to NATS was replaced before the answer came"));
    const inbox = createInbox(this.inboxPrefix);
    const sub = nc.subscribe(`${inbox}.*`, { callback: (err, m) => (err ? undefined : this.answer(inbox, m)) });
    this.replies = { nc, inbox, sub };
    return this.replies;
  }

  private answer(inbox: string, m: Msg): void {
    const token = m.subject.slice(inbox.length + 1);
    const p = this.pending.get(token);
    if (!p) return;
    this.pending.delete(token);
    const outcome = answerOf(m);
    if (outcome instanceof Error) p.reject(outcome);
    else p.resolve(outcome);
  }

  private sweep(): void {
    const now = performance.now();
    // In the order sent, so in the order of their deadlines.
    for (const [token, p] of this.pending) {
      if (p.deadline > now) break;
      this.pending.delete(token);
      p.reject(new RequestFailed(`JetStream did not answer within ${this.timeoutMs} ms`));
    }
    if (!this.pending.size) {
      clearInterval(this.sweeper);
      this.sweeper = undefined;
    }
  }

  private failAll(err: Error): void {
    for (const p of this.pending.values()) p.reject(err);
    this.pending.clear();
  }
}

/** What an answer says: JetStream's JSON, or the error it stands for. */
function answerOf(m: Msg): unknown {
  const h = m.headers;
  if (h?.hasError)
    return new RequestFailed(
      h.code === 503
        ? "no JetStream stream takes this subject (no responders)"
        : `NATS answered ${h.code} ${h.description}`,
    );
  let v: { error?: ConstructorParameters<typeof JetStreamApiError>[0] };
  try {
    v = JSON.parse(decoder.decode(m.data));
  } catch {
    return new RequestFailed("JetStream's answer is not JSON");
  }
  return v?.error ? new JetStreamApiError(v.error) : v;
}
