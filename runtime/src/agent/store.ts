import { headers } from "@nats-io/transport-node";
import { DiscardPolicy, RetentionPolicy, StorageType } from "@nats-io/jetstream";
import type { Nats } from "../nats/connection.ts";
import { ensureStream, isNotFound } from "../nats/streams.ts";
import { nanos } from "../contract/nats.ts";
import { unavailable } from "../protocol/errors.ts";
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
    const h = headers();
    h.set(H.messageId, messageId);
    h.set(H.sender, meta.signer ?? fromAgent);
    h.set(H.authLevel, String(meta.authLevel));
    if (meta.source) h.set(H.authSource, meta.source);
    if (!meta.handoff) h.set(H.handoff, "no");
    // Scoped to the sender: nobody can pre-empt another agent's message_id.
    const dedupe = `${meta.signer ? "signed" : "unsigned"}:${meta.signer ?? fromAgent} ${messageId}`;
    try {
      const ack = await this.nats.js.publish(this.names.inbox(messageId), JSON.stringify(raw), {
        msgID: dedupe,
        headers: h,
        timeout: 5_000,
      });
      return { duplicate: ack.duplicate };
    } catch (err) {
      throw unavailable(`the message could not be stored: ${(err as Error).message}`);
    }
  }

  /** The received message with this message_id: one read by subject, since each message has its own. */
  async received(messageId: string): Promise<Message | undefined> {
    try {
      const m = await this.nats.jsm.streams.getMessage(this.names.inboxStream, { last_by_subj: this.names.inbox(messageId) });
      return m ? Message.parse(m.json()) : undefined;
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw err;
    }
  }
}
