import { JetStreamApiError, type StoredMsg } from "@nats-io/jetstream";
import { headers as natsHeaders } from "@nats-io/transport-node";
import type { Nats } from "../nats/connection.ts";
import { isNotFound } from "../nats/streams.ts";
import { ProtocolError, unavailable } from "../protocol/errors.ts";
import type { RelayNames } from "./stream.ts";

/** Header names on stored copies. */
export const RH = {
  recipient: "Ifp-Recipient",
  messageId: "Ifp-Message-Id",
  expiresAt: "Ifp-Expires-At",
  deadReason: "Ifp-Dead-Reason",
} as const;

export interface StoredCopy {
  seq: number;
  messageId: string;
  recipient: string;
  message: Record<string, unknown>;
  storedAt: Date;
}

export function relayFull(message: string): ProtocolError {
  return new ProtocolError(503, "relay_full", message, { "retry-after": "30" });
}

/** JetStream's refusals of a full stream (`discard: new`) and of storage it cannot get. */
function isFull(err: unknown): boolean {
  const text = err instanceof Error ? err.message : String(err);
  return (err instanceof JetStreamApiError && [10047, 10077, 10078].includes(err.code)) || /maximum (messages|bytes)|insufficient resources|storage/i.test(text);
}

/**
 * The relay's mailboxes on its JetStream stream: one copy per recipient and message_id,
 * deduplicated for the duplicate window, expiring with the message's TTL, deleted on
 * acknowledgement. A read never hands out a copy whose TTL has passed.
 */
export class Mailboxes {
  private readonly nats: Nats;
  private readonly names: RelayNames;

  constructor(nats: Nats, names: RelayNames) {
    this.nats = nats;
    this.names = names;
  }

  /** Store one copy for each recipient; resolves once JetStream has acknowledged them all. */
  async store(data: string, messageId: string, recipients: string[], ttlSeconds?: number): Promise<{ stored: number; duplicates: number }> {
    if (!this.nats.isConnected) throw unavailable("the relay's store (NATS JetStream) is not reachable");
    let stored = 0;
    let duplicates = 0;
    const expiresAt = ttlSeconds ? new Date(Date.now() + ttlSeconds * 1000).toISOString() : undefined;
    await Promise.all(
      recipients.map(async (agent) => {
        const h = natsHeaders();
        h.set(RH.recipient, agent);
        h.set(RH.messageId, messageId);
        if (expiresAt) h.set(RH.expiresAt, expiresAt);
        try {
          const ack = await this.nats.js.publish(this.names.copy(agent, messageId), data, {
            msgID: `${agent} ${messageId}`,
            headers: h,
            timeout: 5_000,
            ...(ttlSeconds ? { ttl: `${ttlSeconds}s` } : {}),
          });
          if (ack.duplicate) duplicates++;
          else stored++;
        } catch (err) {
          if (isFull(err)) throw relayFull(`the relay is full and refuses new messages: ${(err as Error).message}`);
          throw unavailable(`the message could not be stored: ${(err as Error).message}`);
        }
      }),
    );
    return { stored, duplicates };
  }

  /** Waiting copies of one agent, oldest first, after sequence `after`. */
  async list(agent: string, after: number, limit: number): Promise<StoredCopy[]> {
    const out: StoredCopy[] = [];
    let seq = after + 1;
    const now = Date.now();
    while (out.length < limit) {
      let batch: StoredMsg[] = [];
      let end = false;
      try {
        const it = await this.nats.jsm.direct.getBatch(this.names.stream, { seq, batch: limit - out.length, next_by_subj: this.names.mailbox(agent) });
        for await (const m of it) batch.push(m);
      } catch (err) {
        if (!noMessage(err)) throw unavailable(`the mailbox could not be read: ${(err as Error).message}`);
        end = true;
      }
      batch = batch.filter((m) => m.seq >= seq);
      if (!batch.length) break;
      for (const m of batch) {
        const copy = toCopy(m);
        if (copy && !expired(m, now)) out.push(copy);
        seq = m.seq + 1;
      }
      if (end) break;
    }
    return out.slice(0, limit);
  }

  /** The copy of `messageId` for `agent`, or undefined (never another agent's). */
  async find(agent: string, messageId: string): Promise<StoredCopy | undefined> {
    try {
      const m = await this.nats.jsm.direct.getMessage(this.names.stream, { last_by_subj: this.names.copy(agent, messageId) });
      if (!m || expired(m, Date.now())) return undefined;
      return toCopy(m);
    } catch (err) {
      if (noMessage(err)) return undefined;
      throw unavailable(`the mailbox could not be read: ${(err as Error).message}`);
    }
  }

  /**
   * Follow one agent's mailbox from sequence `after`: existing copies first, then new ones as
   * they arrive (an ordered consumer), skipping expired ones. Returns a stop function.
   */
  follow(agent: string, after: number, onCopy: (copy: StoredCopy) => void, onError: (err: Error) => void): () => void {
    let stopped = false;
    let messages: { stop(): void } | undefined;
    void (async () => {
      try {
        const consumer = await this.nats.js.consumers.get(this.names.stream, {
          filter_subjects: [this.names.mailbox(agent)],
          opt_start_seq: after + 1,
        });
        if (stopped) return;
        const it = await consumer.consume();
        messages = it;
        for await (const m of it) {
          if (stopped) break;
          const at = m.headers?.get(RH.expiresAt);
          if (at && Date.parse(at) <= Date.now()) continue;
          try {
            onCopy({ seq: m.seq, messageId: m.headers?.get(RH.messageId) ?? "", recipient: agent, message: m.json(), storedAt: new Date(Number(m.info.timestampNanos) / 1e6) });
          } catch {
            // an unreadable copy is skipped
          }
        }
      } catch (err) {
        if (!stopped) onError(err as Error);
      }
    })();
    return () => {
      stopped = true;
      messages?.stop();
    };
  }

  /** Acknowledge: delete the agent's copy. False when there is none. */
  async ack(agent: string, messageId: string): Promise<boolean> {
    const copy = await this.find(agent, messageId);
    if (!copy) return false;
    return this.deleteSeq(copy.seq);
  }

  async deleteSeq(seq: number): Promise<boolean> {
    try {
      return await this.nats.jsm.streams.deleteMessage(this.names.stream, seq, false);
    } catch (err) {
      if (noMessage(err)) return false;
      throw unavailable(`the message could not be removed: ${(err as Error).message}`);
    }
  }

  /** Move a copy whose push delivery was given up to the recipient's dead letters. */
  async deadLetter(copy: { seq: number; recipient: string; messageId: string; data: Uint8Array }, reason: string): Promise<void> {
    const h = natsHeaders();
    h.set(RH.recipient, copy.recipient);
    h.set(RH.messageId, copy.messageId);
    h.set(RH.deadReason, reason);
    await this.nats.js.publish(this.names.dead(copy.recipient, copy.messageId), copy.data, { headers: h, timeout: 5_000 });
    await this.deleteSeq(copy.seq);
  }

  async deadLetters(agent: string, limit: number): Promise<{ message_id: string; reason: string; at: string; message: unknown }[]> {
    const out: { message_id: string; reason: string; at: string; message: unknown }[] = [];
    try {
      const it = await this.nats.jsm.direct.getBatch(this.names.stream, { seq: 1, batch: limit, next_by_subj: this.names.deadLetters(agent) });
      for await (const m of it) {
        out.push({ message_id: m.header.get(RH.messageId), reason: m.header.get(RH.deadReason), at: m.time.toISOString(), message: m.json() });
      }
    } catch (err) {
      if (!noMessage(err)) throw unavailable(`dead letters could not be read: ${(err as Error).message}`);
    }
    return out;
  }
}

/** "Nothing there": no such message, or the end of a batch read. */
function noMessage(err: unknown): boolean {
  return isNotFound(err) || /no message found|message not found/i.test((err as Error)?.message ?? "");
}

function expired(m: StoredMsg, now: number): boolean {
  const at = m.header?.get(RH.expiresAt);
  return !!at && Date.parse(at) <= now;
}

function toCopy(m: StoredMsg): StoredCopy | undefined {
  try {
    return {
      seq: m.seq,
      messageId: m.header.get(RH.messageId),
      recipient: m.header.get(RH.recipient),
      message: m.json<Record<string, unknown>>(),
      storedAt: m.time,
    };
  } catch {
    return undefined;
  }
}
