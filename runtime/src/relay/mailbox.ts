// Mailboxes: the relay's mailboxes on its JetStream stream — one copy per recipient and
// message_id, expiring with the message's TTL, deleted on acknowledgement — and each recipient's
// dead letters.
import { refuseOverMaxPayload } from "../nats/payload.ts";
import { DeliverPolicy, PubHeaders, type StoredMsg } from "@nats-io/jetstream";
import { headers as natsHeaders, type MsgHdrs } from "@nats-io/transport-node";
import type { Nats } from "../nats/connection.ts";
import { isNotFound } from "../contract/nats.ts";
import { isFull } from "../nats/streams.ts";
import { ProtocolError, unavailable } from "../protocol/errors.ts";
import type { AckResponse, DeadLetter } from "../protocol/relay-api.ts";
import type { RelayNames } from "../contract/relay-stream.ts";
import { JetStreamRequests } from "./jetstream-requests.ts";
import type { Context } from "@opentelemetry/api";
import {
  SPAN_ATTRIBUTES,
  headersContext,
  injectHeaders,
  SpanKind,
  startSpan,
  type Span,
} from "../telemetry/tracing.ts";

/** Header names on stored copies. */
export const COPY_HEADERS = {
  recipient: "Ifp-Recipient",
  messageId: "Ifp-Message-Id",
  expiresAt: "Ifp-Expires-At",
  deadReason: "Ifp-Dead-Reason",
  sender: "Ifp-Sender",
  conversationId: "Ifp-Conversation-Id",
} as const;

/** Seconds a client waits before retrying a refusal of a full relay. */
export const RELAY_FULL_RETRY_AFTER_S = 30;

export interface StoredCopy {
  /** Stream sequence: the paging cursor and the SSE event id. */
  seq: number;
  messageId: string;
  recipient: string;
  /**
   * The message as stored, JSON text: validated at publish, with the relay's trace entry. Handed
   * out as it is, never parsed and serialised again (only the relay writes its stream).
   */
  text: string;
  conversationId?: string;
  storedAt: Date;
  /** The publish span's trace context, stored with the copy (docs/tracing.md); undefined when tracing is off. */
  trace?: Context;
}

/**
 * A span about one stored copy handed out (`ifp.relay.retrieve`, `ifp.relay.push`): a child of
 * the span that published it. The caller ends it.
 */
export function copySpan(
  name: string,
  copy: StoredCopy,
  transport: string,
  opts: { kind?: SpanKind; startTime?: number } = {},
): Span {
  return startSpan(name, {
    kind: opts.kind ?? SpanKind.PRODUCER,
    parent: copy.trace,
    startTime: opts.startTime,
    attributes: () => ({
      [SPAN_ATTRIBUTES.messageId]: copy.messageId,
      [SPAN_ATTRIBUTES.recipient]: copy.recipient,
      [SPAN_ATTRIBUTES.transport]: transport,
      ...(copy.conversationId ? { [SPAN_ATTRIBUTES.conversationId]: copy.conversationId } : {}),
    }),
  });
}

export function relayFull(message: string): ProtocolError {
  return new ProtocolError(503, "relay_full", message, { "retry-after": String(RELAY_FULL_RETRY_AFTER_S) });
}

/** Has a stored copy's TTL passed? (Ifp-Expires-At, set from ttl_seconds at publish.) */
export function isExpired(h: Pick<MsgHdrs, "get"> | undefined, now: number): boolean {
  const at = h?.get(COPY_HEADERS.expiresAt);
  return !!at && Date.parse(at) <= now;
}

/**
 * The relay's mailboxes on its JetStream stream: one copy per recipient and message_id on
 * `…mbox.<agent>.<message_id>`, deduplicated for the duplicate window, expiring with the
 * message's TTL, deleted on acknowledgement. A read never hands out a copy whose TTL has
 * passed, even in the moment before JetStream removes it.
 */
export class Mailboxes {
  private readonly nats: Nats;
  private readonly names: RelayNames;
  /** The requests of storing and acknowledging, those of one event-loop turn in one socket write. */
  private readonly requests: JetStreamRequests;
  private readonly onExpired: (path: "retrieve" | "stream") => void;

  /** `onExpired` hears of each copy passed over because its TTL ran out (for metrics). */
  constructor(nats: Nats, names: RelayNames, onExpired: (path: "retrieve" | "stream") => void = () => {}) {
    this.nats = nats;
    this.names = names;
    this.onExpired = onExpired;
    this.requests = new JetStreamRequests(nats);
  }

  private ensureConnected(): void {
    if (!this.nats.isConnected) throw unavailable("the relay's store (NATS JetStream) is not reachable");
  }

  /** How full the stream is: its bytes and messages as JetStream counts them. */
  async fill(): Promise<{ bytes: number; messages: number }> {
    this.ensureConnected();
    const { state } = await this.nats.jsm.streams.info(this.names.stream);
    return { bytes: state.bytes, messages: state.messages };
  }

  /**
   * Store one copy for each recipient; resolves once JetStream has acknowledged them all.
   * A failure leaves the copies already stored in place: a retry stores only the missing ones.
   */
  async store(
    data: string,
    messageId: string,
    recipients: string[],
    ttlSeconds?: number,
    sender = "",
    conversationId?: string,
  ): Promise<{ stored: number; duplicates: number }> {
    this.ensureConnected();
    refuseOverMaxPayload(this.nats, data);
    let stored = 0;
    let duplicates = 0;
    const expiresAt = ttlSeconds ? new Date(Date.now() + ttlSeconds * 1000).toISOString() : undefined;
    const failures: unknown[] = [];
    await Promise.all(
      recipients.map(async (agent) => {
        const h = natsHeaders();
        h.set(COPY_HEADERS.recipient, agent);
        h.set(COPY_HEADERS.messageId, messageId);
        if (expiresAt) h.set(COPY_HEADERS.expiresAt, expiresAt);
        // For the log lines of push and dead letters.
        if (sender) h.set(COPY_HEADERS.sender, sender);
        if (conversationId) h.set(COPY_HEADERS.conversationId, conversationId);
        // Per recipient, sender and message_id: another sender reusing an id cannot suppress the first.
        h.set(PubHeaders.MsgIdHdr, `${agent} ${sender} ${messageId}`);
        if (ttlSeconds) h.set(PubHeaders.MessageTTL, `${ttlSeconds}s`);
        // The publish span: retrieval and push continue the trace from it.
        injectHeaders(h);
        try {
          // Abandoned (503) the moment NATS goes away; a copy stored after the reconnection is a
          // duplicate of the publisher's retry, absorbed by the duplicate window.
          const ack = await this.nats.whileConnected(
            this.requests.publish(this.names.copy(agent, messageId), data, h),
            "the relay's store (NATS JetStream)",
          );
          if (ack.duplicate) duplicates++;
          else stored++;
        } catch (err) {
          failures.push(err);
        }
      }),
    );
    const [first] = failures;
    if (first !== undefined) {
      if (failures.some(isFull))
        throw relayFull(
          `the relay is full and refuses new messages until some are acknowledged or expire (${(failures.find(isFull) as Error).message})`,
        );
      if (first instanceof ProtocolError) throw first;
      throw unavailable(`the message could not be stored: ${(first as Error).message}`);
    }
    return { stored, duplicates };
  }

  /** Waiting copies of one agent, oldest first, after stream sequence `after`. */
  async list(agent: string, after: number, limit: number): Promise<StoredCopy[]> {
    this.ensureConnected();
    const out: StoredCopy[] = [];
    let seq = after + 1;
    const now = Date.now();
    while (out.length < limit) {
      const batch: StoredMsg[] = [];
      try {
        const it = await this.nats.jsm.direct.getBatch(this.names.stream, {
          seq,
          batch: limit - out.length,
          next_by_subj: this.names.mailbox(agent),
        });
        for await (const m of it) batch.push(m);
      } catch (err) {
        if (!noMessage(err)) throw unavailable(`the mailbox could not be read: ${(err as Error).message}`);
      }
      if (!batch.length) break;
      for (const m of batch) {
        seq = Math.max(seq, m.seq + 1);
        if (isExpired(m.header, now)) {
          this.onExpired("retrieve");
          continue;
        }
        const copy = toCopy(m);
        if (copy) out.push(copy);
      }
      // The server counts what is left after the batch: stop without another round trip.
      if (batch.at(-1)!.pending === 0) break;
    }
    return out.slice(0, limit);
  }

  /**
   * Follow one agent's mailbox from stream sequence `after`: waiting copies first, then new
   * ones as they arrive (an ordered consumer), skipping expired ones. `onCopy` may return a
   * promise to hold the stream back (a slow client). Returns a stop function.
   */
  follow(
    agent: string,
    after: number,
    onCopy: (copy: StoredCopy) => void | Promise<void>,
    onEnd: (err?: Error) => void,
  ): () => void {
    let stopped = false;
    let messages: { stop(): void } | undefined;
    void (async () => {
      try {
        this.ensureConnected();
        const consumer = await this.nats.js.consumers.get(this.names.stream, {
          filter_subjects: [this.names.mailbox(agent)],
          ...(after > 0
            ? { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: after + 1 }
            : { deliver_policy: DeliverPolicy.All }),
        });
        if (stopped) return;
        const it = await consumer.consume({ max_messages: 64 });
        messages = it;
        if (stopped) it.stop();
        for await (const m of it) {
          if (stopped) break;
          if (isExpired(m.headers, Date.now())) {
            this.onExpired("stream");
            continue;
          }
          const copy = copyOf(m.seq, m.headers, m.data, new Date(Number(m.info.timestampNanos) / 1e6), agent);
          if (copy) await onCopy(copy); // else not a stored message: skipped
        }
        if (!stopped) onEnd();
      } catch (err) {
        if (!stopped) onEnd(err as Error);
      }
    })();
    return () => {
      stopped = true;
      messages?.stop();
    };
  }

  /**
   * Acknowledge: remove the caller's copy of `messageId`. The subject names the caller's own
   * mailbox, so nobody can remove another agent's copy. False when there was none.
   */
  async ack(agent: string, messageId: string): Promise<boolean> {
    return (await this.purge(this.names.copy(agent, messageId))) > 0;
  }

  /**
   * Acknowledge many of `agent`'s copies at once: each distinct id exactly as its own `ack`
   * (the caller's mailbox only; an id acknowledged twice is answered once). `charge(n)` is
   * called with the number of distinct ids before anything is removed, and refuses them all
   * by throwing (the per-agent limit).
   */
  async ackMany(agent: string, messageIds: readonly string[], charge: (n: number) => void): Promise<AckResponse> {
    const ids = [...new Set(messageIds)];
    charge(ids.length);
    const removed = await Promise.all(ids.map((id) => this.ack(agent, id)));
    return { acknowledged: ids.filter((_, i) => removed[i]), not_found: ids.filter((_, i) => !removed[i]) };
  }

  /** Remove the copy at `seq` (after a webhook's 2xx). */
  async deleteSeq(seq: number): Promise<boolean> {
    this.ensureConnected();
    try {
      return await this.nats.jsm.streams.deleteMessage(this.names.stream, seq, false);
    } catch (err) {
      if (noMessage(err)) return false;
      throw unavailable(`the message could not be removed: ${(err as Error).message}`);
    }
  }

  private async purge(subject: string): Promise<number> {
    this.ensureConnected();
    try {
      return await this.requests.purge(this.names.stream, subject);
    } catch (err) {
      throw unavailable(`the message could not be removed: ${(err as Error).message}`);
    }
  }

  /**
   * Move a copy whose push delivery was given up to its recipient's dead letters (kept for
   * `ttlSeconds`), then remove the copy. Idempotent: a retry after a crash stores it once.
   */
  async deadLetter(
    copy: { seq: number; recipient: string; messageId: string; data: Uint8Array },
    reason: string,
    ttlSeconds: number,
  ): Promise<void> {
    this.ensureConnected();
    const h = natsHeaders();
    h.set(COPY_HEADERS.recipient, copy.recipient);
    h.set(COPY_HEADERS.messageId, copy.messageId);
    h.set(COPY_HEADERS.deadReason, reason.slice(0, 1000));
    await this.nats.js.publish(this.names.dead(copy.recipient, copy.messageId), copy.data, {
      headers: h,
      msgID: `dead ${copy.recipient} ${copy.messageId} ${copy.seq}`,
      ttl: `${Math.max(1, Math.round(ttlSeconds))}s`,
      timeout: 5_000,
    });
    await this.deleteSeq(copy.seq);
  }

  /** One agent's dead letters, oldest first, after stream sequence `after`. */
  async deadLetters(agent: string, after: number, limit: number): Promise<(DeadLetter & { seq: number })[]> {
    this.ensureConnected();
    const out: (DeadLetter & { seq: number })[] = [];
    try {
      const it = await this.nats.jsm.direct.getBatch(this.names.stream, {
        seq: after + 1,
        batch: limit,
        next_by_subj: this.names.deadLetters(agent),
      });
      for await (const m of it) {
        let message: unknown;
        try {
          message = m.json();
        } catch {
          message = null;
        }
        out.push({
          seq: m.seq,
          message_id: m.header.get(COPY_HEADERS.messageId),
          reason: m.header.get(COPY_HEADERS.deadReason),
          at: m.time.toISOString(),
          message,
        });
      }
    } catch (err) {
      if (!noMessage(err)) throw unavailable(`dead letters could not be read: ${(err as Error).message}`);
    }
    return out;
  }

  /** Remove one of the caller's dead letters. False when there was none. */
  async removeDeadLetter(agent: string, messageId: string): Promise<boolean> {
    return (await this.purge(this.names.dead(agent, messageId))) > 0;
  }
}

/** "Nothing there": no such message, or the end of a batch read. */
function noMessage(err: unknown): boolean {
  return isNotFound(err) || /no message found|message not found/i.test((err as Error)?.message ?? "");
}

function toCopy(m: StoredMsg): StoredCopy | undefined {
  return copyOf(m.seq, m.header, m.data, m.time, m.header.get(COPY_HEADERS.recipient));
}

/** A stored copy from what JetStream hands out (a direct get, a consumer's message); undefined when it is not one. */
function copyOf(
  seq: number,
  h: MsgHdrs | undefined,
  data: Uint8Array,
  storedAt: Date,
  recipient: string,
): StoredCopy | undefined {
  const text = storedText(data);
  if (text === undefined) return undefined;
  return {
    seq,
    messageId: h?.get(COPY_HEADERS.messageId) ?? "",
    recipient,
    text,
    conversationId: h?.get(COPY_HEADERS.conversationId) || undefined,
    storedAt,
    trace: headersContext(h),
  };
}

const decoder = new TextDecoder("utf-8", { fatal: true });

/**
 * A stored copy's JSON text. The relay stores each copy as JSON.stringify made it (one object,
 * no line breaks); what does not look like that (a JSON object's braces, valid UTF-8) is not a
 * copy of the relay's and is skipped rather than handed out inside a page or a frame.
 */
function storedText(data: Uint8Array): string | undefined {
  if (data.length < 2 || data[0] !== 0x7b || data[data.length - 1] !== 0x7d) return undefined;
  try {
    const text = decoder.decode(data);
    // A raw line break would end an SSE event early; JSON.stringify never writes one.
    return /[\n\r]/.test(text) ? undefined : text;
  } catch {
    return undefined;
  }
}
