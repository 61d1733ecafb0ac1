// InboxStore: the agent's inbox on JetStream, where accepted inbound messages are stored once
// per sender and message_id, and the header names and retention they are stored with.
import { headers } from "@nats-io/transport-node";
import { DiscardPolicy, RetentionPolicy, StorageType, type StreamConfig } from "@nats-io/jetstream";
import type { StreamKeeping } from "../../nats/stream-keeper.ts";
import type { Nats } from "../../nats/connection.ts";
import { ensureReplicatedStream, isFull, type Replicas } from "../../nats/streams.ts";
import { nanos } from "../../contract/nats.ts";
import { ProtocolError, unavailable } from "../../protocol/errors.ts";
import { refuseOverMaxPayload } from "../../nats/payload.ts";
import { Message } from "../../protocol/message.ts";
import { injectHeaders } from "../../telemetry/tracing.ts";
import type { AgentNames } from "../names.ts";
import { InboxByteCount } from "./inbox-bytes.ts";
import { StoredMessageRecord } from "../local-api/inbox-look-back.ts";

const WEEK_MS = 7 * 24 * 3600_000;
/** What whileConnected() names when the inbox's byte count (spec.inbox.maxBytes) is out of reach. */
const BYTE_COUNT = "the inbox's byte count (NATS JetStream)";
/** Clock skew tolerated on headers.date in the future (accept.ts MAX_FUTURE_SKEW_MS). */
const FUTURE_SKEW_MS = 5 * 60_000;

/** How long the inbox keeps every accepted message: a week, or the replay window when longer. */
export function inboxRetentionMs(replayWindowMs: number): number {
  return Math.max(WEEK_MS, replayWindowMs);
}
/** Retry-After of a full inbox: room comes back only as messages age out, so not soon. */
export const INBOX_FULL_RETRY_AFTER_S = 300;

export interface AcceptMeta {
  /** The verified signer, or undefined for an accepted unsigned message. */
  signer: string | undefined;
  authLevel: number;
  /** Where the key that established the level came from (docs/identity.md). */
  source?: string;
  /** Whether the handler gets the message (false when the runtime answers it itself). */
  handoff: boolean;
  /** The encryption scheme the message arrived under (it is stored decrypted). */
  encrypted?: string;
  /** headers.conversation_id, kept beside the message for the hand-off's log lines. */
  conversationId?: string;
  /** headers.date; read from the message when not given. */
  date?: string;
}

/** Header names on stored inbound messages. */
export const INBOX_HEADERS = {
  messageId: "Ifp-Message-Id",
  sender: "Ifp-Sender",
  authLevel: "Ifp-Auth-Level",
  authSource: "Ifp-Auth-Source",
  /** "no" when the runtime answers the message itself and the handler does not get it. */
  handoff: "Ifp-Handoff",
  /** "no" on an accepted unsigned message (its sender is only what headers.from claims). */
  signed: "Ifp-Signed",
  deadReason: "Ifp-Dead-Reason",
  /** The encryption scheme of a message that arrived encrypted (and is stored decrypted). */
  encrypted: "Ifp-Encrypted",
  conversationId: "Ifp-Conversation-Id",
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
  private readonly maxBytes: number;
  private readonly replicas: Replicas;
  /** spec.inbox.maxBytes counted by the runtime, where the stream is not the Agent's own (inbox-bytes.ts). */
  private bytes: InboxByteCount | undefined;
  /** Where each message was stored, for the watch's look back where the inbox is not read from a time (inbox-look-back.ts). */
  lookBack: StoredMessageRecord | undefined;

  /** `maxBytes`: spec.inbox.maxBytes; a full inbox refuses new messages (503 inbox_full) rather than dropping stored ones. */
  constructor(nats: Nats, names: AgentNames, replayWindowMs: number, maxBytes = -1, replicas: Replicas = "auto") {
    this.replicas = replicas;
    this.nats = nats;
    this.names = names;
    this.windowMs = replayWindowMs;
    this.maxBytes = maxBytes;
  }

  /**
   * Create or update the stream: through the runtime's StreamKeeper, which refuses to make it
   * again empty once it has gone missing, or directly (tests of the store alone).
   */
  async ensure(keeper?: StreamKeeping): Promise<void> {
    // A stream the runtime does not make has no max_bytes of the Agent's: its bytes are counted.
    // Opened once: the bucket handle follows the runtime's connection when it is made again.
    if (!this.nats.layout.makesStreams && this.maxBytes > 0)
      this.bytes ??= new InboxByteCount(
        await this.nats.bucket(this.names.kvBucket, { history: 1 }),
        `${this.names.kvKey}.inbox-bytes`,
        this.maxBytes,
        WEEK_MS,
      );
    if (!this.nats.layout.readsFromTime)
      this.lookBack ??= new StoredMessageRecord(
        await this.nats.bucket(this.names.outboxStateBucket, { history: 1 }),
        () => this.nats.jsm,
        this.names.inboxStream,
      );
    const want = this.streamConfig();
    await (keeper
      ? keeper.ensure(want, this.replicas, { keepStored: true })
      : ensureReplicatedStream(this.nats.jsm, want, this.replicas, this.nats.placement));
  }

  streamConfig(): Partial<StreamConfig> & { name: string } {
    return {
      name: this.names.inboxStream,
      subjects: [this.names.inboxSubjects],
      retention: RetentionPolicy.Limits,
      storage: StorageType.File,
      // New, never Old: a message answered 202 is never dropped to make room for another.
      discard: DiscardPolicy.New,
      max_bytes: this.maxBytes,
      max_age: nanos(inboxRetentionMs(this.windowMs)),
      duplicate_window: nanos(this.windowMs),
      allow_direct: true,
    };
  }

  /**
   * Durably store one message; resolves only after the JetStream ack. `raw` is the message as it
   * was sent, its JSON bytes or text, stored as they are (byte for byte); a parsed message (one
   * decrypted here, one read from a relay's page) is stored as its JSON.
   */
  async accept(
    raw: Uint8Array | string | object,
    messageId: string,
    meta: AcceptMeta,
    fromAgent: string,
  ): Promise<{ duplicate: boolean }> {
    if (!this.nats.isConnected) throw unavailable("the message store (NATS JetStream) is not reachable");
    const data = typeof raw === "string" || raw instanceof Uint8Array ? raw : JSON.stringify(raw);
    refuseOverMaxPayload(this.nats, data);
    const h = headers();
    h.set(INBOX_HEADERS.messageId, messageId);
    h.set(INBOX_HEADERS.sender, meta.signer ?? fromAgent);
    h.set(INBOX_HEADERS.authLevel, String(meta.authLevel));
    if (meta.source) h.set(INBOX_HEADERS.authSource, meta.source);
    if (!meta.handoff) h.set(INBOX_HEADERS.handoff, "no");
    if (!meta.signer) h.set(INBOX_HEADERS.signed, "no");
    if (meta.encrypted) h.set(INBOX_HEADERS.encrypted, meta.encrypted);
    if (meta.conversationId) h.set(INBOX_HEADERS.conversationId, meta.conversationId);
    // The inbox span, so that the hand-off continues the trace from it (docs/tracing.md).
    injectHeaders(h);
    // Scoped to the sender: nobody can pre-empt another agent's message_id. The subject is per
    // message_id and holds every sender's message with it; received() tells them apart.
    const dedupe = copyId(messageId, meta.signer, fromAgent);
    // A duplicate window covers a copy only for the replay window after it was stored, which
    // was no earlier than its date less the clock skew. An older message (one a relay kept for
    // days) may repeat a copy stored before that: the stream, which keeps every message for its
    // retention, is asked by subject. A layout whose subjects hold each copy once for as long as
    // the stream keeps it needs no search (nats/layout.ts).
    const once = this.nats.layout.once;
    const date = Date.parse(meta.date ?? (storedJson(data) as { headers?: { date?: string } }).headers?.date ?? "");
    if (
      once.windowed &&
      !(Date.now() - date < this.windowMs - FUTURE_SKEW_MS) &&
      (await this.holds(messageId, meta.signer, fromAgent))
    )
      return { duplicate: true };
    const size = typeof data === "string" ? Buffer.byteLength(data) : data.byteLength;
    // The bytes are taken from the count before the message is stored, given back when it was not;
    // a share reserved at NATS is abandoned (503) the moment NATS goes away, as the publish is.
    const slot = this.bytes
      ? (this.bytes.takeFromShare(size) ?? (await this.nats.whileConnected(this.bytes.take(size), BYTE_COUNT)))
      : 0;
    if (slot === undefined) {
      // A repeat of a stored copy is answered as one, full or not (as the stream's duplicate check does).
      if (await this.holds(messageId, meta.signer, fromAgent)) return { duplicate: true };
      throw this.full();
    }
    // Given back when the message was certainly not stored: a duplicate, or refused by the stream.
    let unused = false;
    try {
      // Abandoned (503) the moment NATS goes away; a copy stored after the reconnection is a
      // duplicate of the sender's retry, absorbed by the duplicate check.
      const ack = await this.nats.whileConnected(
        once.publish(this.nats.js, this.names.inbox(messageId), dedupe, data, {
          headers: h,
          timeout: 5_000,
          first: this.names.inboxFirst(messageId),
        }),
      );
      unused = ack.duplicate;
      // Not waited for: a record missing (NATS gone in between) leaves the message out of a look back only.
      if (!ack.duplicate)
        void this.lookBack?.record(ack.seq, once.subjectOf(this.names.inbox(messageId), dedupe)).catch(() => {});
      return { duplicate: ack.duplicate };
    } catch (err) {
      if (err instanceof ProtocolError) throw err;
      unused = isFull(err);
      if (unused) throw this.full();
      // A publish abandoned when NATS went away (or timed out) may have been stored: its bytes stay counted.
      throw unavailable(`the message could not be stored: ${(err as Error).message}`);
    } finally {
      if (unused && slot) this.bytes?.unused(size, slot);
    }
  }

  /** What the runtime reserved of the inbox's byte count and did not use, given back, and the look back's record written (it stops). */
  async close(): Promise<void> {
    await Promise.all([this.bytes?.close(), this.lookBack?.settled()]);
  }

  private full(): ProtocolError {
    return new ProtocolError(
      503,
      "inbox_full",
      `the inbox is full (spec.inbox.maxBytes ${this.maxBytes} bytes) and takes new messages once older ones age out of the replay window`,
      { "retry-after": String(INBOX_FULL_RETRY_AFTER_S) },
    );
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
    const ids = sender === undefined ? [] : [copyId(messageId, sender, sender), copyId(messageId, undefined, sender)];
    for await (const m of this.copies(messageId, ids)) {
      if (sender === undefined) return Message.parse(m.json());
      if (m.sender !== sender) continue;
      if (m.signed) return Message.parse(m.json());
      unsigned ??= Message.parse(m.json());
    }
    return unsigned;
  }

  /**
   * Whether the stream holds this message_id from this sender as the duplicate check keys it
   * (signed by `signer`, or unsigned claiming `fromAgent`), whenever it was stored.
   */
  async holds(messageId: string, signer: string | undefined, fromAgent: string): Promise<boolean> {
    try {
      for await (const m of this.copies(messageId, [copyId(messageId, signer, fromAgent)]))
        if (m.sender === (signer ?? fromAgent) && m.signed === (signer !== undefined)) return true;
    } catch (err) {
      throw unavailable(`the inbox cannot be searched for an earlier copy: ${(err as Error).message}`);
    }
    return false;
  }

  /** The stored messages with this message_id that may be one of `ids` (copyId), oldest first. */
  private async *copies(
    messageId: string,
    ids: string[],
  ): AsyncGenerator<{ sender: string | null; signed: boolean; json: () => unknown }> {
    for await (const m of this.nats.layout.once.find(
      this.nats.jsm,
      this.names.inboxStream,
      this.names.inbox(messageId),
      ids,
      this.names.inboxFirst(messageId),
    ))
      yield {
        sender: m.header.get(INBOX_HEADERS.sender) || null,
        signed: m.header.get(INBOX_HEADERS.signed) !== "no",
        json: () => m.json(),
      };
  }
}

/**
 * What one copy of a received message is kept once by: its message_id scoped to its sender (the
 * verified signer, or for an unsigned message its claimed headers.from), so that nobody can
 * pre-empt another agent's message_id.
 */
function copyId(messageId: string, signer: string | undefined, fromAgent: string): string {
  return `${signer ? "signed" : "unsigned"}:${signer ?? fromAgent} ${messageId}`;
}

/** What stored JSON says, for the fields a caller did not pass; {} when it is not JSON. */
function storedJson(data: Uint8Array | string): unknown {
  try {
    return JSON.parse(typeof data === "string" ? data : Buffer.from(data).toString("utf8")) ?? {};
  } catch {
    return {};
  }
}
