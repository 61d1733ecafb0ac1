import { headers } from "@nats-io/transport-node";
import { DiscardPolicy, RetentionPolicy, StorageType } from "@nats-io/jetstream";
import type { Nats } from "../nats/connection.ts";
import { ensureStream, isNotFound } from "../nats/streams.ts";
import { nanos } from "../contract/nats.ts";
import { unavailable } from "../protocol/errors.ts";
import { refuseOverMaxPayload } from "../nats/payload.ts";
import { Message } from "../protocol/message.ts";
import type { AgentNames } from "./names.ts";

const WEEK_MS = 7 * 24 * 3600_000;

export interface AcceptMeta {
  /** The verified signer, or undefined for an accepted unsigned message. */
  signer: string | undefined;
  authLevel: number;
  /** Where the key that established the level came from (docs/identity.md). */
  source?: string;
  /** Whether the handler gets the message (false when the runtime answers it itself). */
  handoff: boolean;
}

/** Header names on stored inbound messages. */
export const H = {
  messageId: "Ifp-Message-Id",
  sender: "Ifp-Sender",
  authLevel: "Ifp-Auth-Level",
  authSource: "Ifp-Auth-Source",
  /** "no" when the runtime answers the message itself and the handler does not get it. */
  handoff: "Ifp-Handoff",
  /** "no" on an accepted unsigned message (its sender is only what headers.from claims). */
  signed: "Ifp-Signed",
  deadReason: "Ifp-Dead-Reason",
} as const;

/**
 * The agent's inbox on JetStream. A message is accepted once JetStream acknowledges it, and
 * the stream's duplicate window (the replay window, 48h by default) makes a repeated
 * message_id a no-op for every replica and across restarts. Messages stay at least that long,
 * whether or not the handler has taken them, so the window survives a NATS restart too.
 */
export class InboxStore {
  private readonly nats: Nats;
  private readonly names: AgentNames;
  private readonly windowMs: number;

  constructor(nats: Nats, names: AgentNames, replayWindowMs: number) {
    this.nats = nats;
    this.names = names;
    this.windowMs = replayWindowMs;
  }

  async ensure(): Promise<void> {
    await ensureStream(this.nats.jsm, {
      name: this.names.inboxStream,
      subjects: [this.names.inboxSubjects],
      retention: RetentionPolicy.Limits,
      storage: StorageType.File,
      discard: DiscardPolicy.Old,
      max_age: nanos(Math.max(WEEK_MS, this.windowMs)),
      duplicate_window: nanos(this.windowMs),
      allow_direct: true,
    });
  }

  /** Durably store one message; resolves only after the JetStream ack. */
  async accept(raw: unknown, messageId: string, meta: AcceptMeta, fromAgent: string): Promise<{ duplicate: boolean }> {
    if (!this.nats.isConnected) throw unavailable("the message store (NATS JetStream) is not reachable");
    const data = JSON.stringify(raw);
    refuseOverMaxPayload(this.nats, data);
    const h = headers();
    h.set(H.messageId, messageId);
    h.set(H.sender, meta.signer ?? fromAgent);
    h.set(H.authLevel, String(meta.authLevel));
    if (meta.source) h.set(H.authSource, meta.source);
    if (!meta.handoff) h.set(H.handoff, "no");
    if (!meta.signer) h.set(H.signed, "no");
    // Scoped to the sender: nobody can pre-empt another agent's message_id. The subject is per
    // message_id and holds every sender's message with it; received() tells them apart.
    const dedupe = `${meta.signer ? "signed" : "unsigned"}:${meta.signer ?? fromAgent} ${messageId}`;
    try {
      const ack = await this.nats.js.publish(this.names.inbox(messageId), data, {
        msgID: dedupe,
        headers: h,
        timeout: 5_000,
      });
      return { duplicate: ack.duplicate };
    } catch (err) {
      throw unavailable(`the message could not be stored: ${(err as Error).message}`);
    }
  }

  /**
   * The received message with this message_id from `sender` (the verified signer, or for an
   * accepted unsigned message its headers.from.agent). A message_id is the sender's to choose,
   * so another sender may reuse it: messages are told apart by (sender, message_id). Without a
   * sender, the first message received with that id (the one a later reuse cannot displace).
   * Signed messages are preferred to an unsigned one claiming the same sender.
   */
  async received(messageId: string, sender?: string): Promise<Message | undefined> {
    let unsigned: Message | undefined;
    let seq = 1;
    // Bounded: a message_id reused more often than this is not looked at further.
    for (let round = 0; round < 4; round++) {
      const batch: { seq: number; sender: string | null; signed: boolean; json: () => unknown; pending: number }[] = [];
      try {
        const it = await this.nats.jsm.direct.getBatch(this.names.inboxStream, { seq, batch: 64, next_by_subj: this.names.inbox(messageId) });
        for await (const m of it) {
          batch.push({ seq: m.seq, sender: m.header.get(H.sender) || null, signed: m.header.get(H.signed) !== "no", json: () => m.json(), pending: m.pending });
        }
      } catch (err) {
        if (isNotFound(err) || (err as { code?: number }).code === 404 || /no message|not found/i.test((err as Error).message)) break;
        throw err;
      }
      for (const m of batch) {
        seq = m.seq + 1;
        if (sender === undefined) return Message.parse(m.json());
        if (m.sender !== sender) continue;
        if (m.signed) return Message.parse(m.json());
        unsigned ??= Message.parse(m.json());
      }
      if (!batch.length || batch.at(-1)!.pending === 0) break;
    }
    return unsigned;
  }
}

