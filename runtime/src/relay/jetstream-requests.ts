// The relay's JetStream requests on its hot path (a copy stored, a copy purged): those of one
// event-loop turn sent together, on the connection's one reply subscription (nats/replies.ts),
// their answers read as JetStream's API writes them.
import { JetStreamApiError } from "@nats-io/jetstream";
import { NoRespondersError, TimeoutError, type Msg, type MsgHdrs, type NatsConnection } from "@nats-io/transport-node";
import type { Nats } from "../nats/connection.ts";
import { sharingReplies } from "../nats/replies.ts";

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

interface Queued {
  subject: string;
  data: string | Uint8Array;
  headers?: MsgHdrs;
  resolve: (value: unknown) => void;
  reject: (err: Error) => void;
}

const decoder = new TextDecoder();

/**
 * JetStream requests without the JetStream client's publish and purge machinery (its options,
 * its answer's checks, a promise chain each), twice per message the relay carries. Requests asked
 * for in one turn of the event loop are sent together on the next, so that they leave in one
 * socket write. A connection that replaced a closed one answers on its own subscription; what was
 * awaited on the old one fails. An answer is JetStream's: an API error
 * (`{error: {code, err_code, description}}`) rejects with the library's JetStreamApiError, as the
 * library would.
 */
export class JetStreamRequests {
  private readonly nats: Pick<Nats, "nc">;
  private readonly timeoutMs: number;
  private queue: Queued[] = [];
  private awaited = 0;

  constructor(nats: Pick<Nats, "nc">, opts: { timeoutMs?: number } = {}) {
    this.nats = nats;
    this.timeoutMs = opts.timeoutMs ?? REQUEST_TIMEOUT_MS;
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
    return this.awaited + this.queue.length;
  }

  private request(subject: string, data: string | Uint8Array, headers?: MsgHdrs): Promise<unknown> {
    return new Promise((resolve, reject) => {
      if (this.queue.push({ subject, data, headers, resolve, reject }) === 1) setImmediate(() => this.send());
    });
  }

  private send(): void {
    const queued = this.queue;
    this.queue = [];
    const nc = this.nats.nc;
    if (!nc || nc.isClosed()) {
      for (const q of queued) q.reject(new RequestFailed("the connection to NATS is closed"));
      return;
    }
    const replies: NatsConnection = sharingReplies(nc);
    for (const q of queued) {
      this.awaited++;
      replies.request(q.subject, q.data, { timeout: this.timeoutMs, headers: q.headers }).then(
        (m) => {
          this.awaited--;
          const outcome = answerOf(m);
          if (outcome instanceof Error) q.reject(outcome);
          else q.resolve(outcome);
        },
        (err: unknown) => {
          this.awaited--;
          q.reject(this.failure(err));
        },
      );
    }
  }

  /** Why a request got no answer, in the relay's words. */
  private failure(err: unknown): Error {
    if (err instanceof TimeoutError) return new RequestFailed(`JetStream did not answer within ${this.timeoutMs} ms`);
    if (err instanceof Error && err.cause instanceof NoRespondersError)
      return new RequestFailed("no JetStream stream takes this subject (no responders)");
    if (this.nats.nc?.isClosed() !== false || (err instanceof Error && /closed/.test(err.message)))
      return new RequestFailed("the connection to NATS closed before the answer came");
    return err instanceof Error ? err : new RequestFailed(String(err));
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
