// Conversations: the per-conversation records of an agent in a NATS KV bucket shared by its
// replicas, which every inbound message is admitted against (no lower authentication level, no
// sequence number used twice) and outbound messages and error-phase answers are recorded in.
import type { KV, KvEntry } from "@nats-io/kv";
import type { Nats } from "../nats/connection.ts";
import { PEERS_OF_CONVERSATION } from "../contract/key-indexes.ts";
import { encodeToken } from "../contract/nats.ts";
import { insufficientAuthLevel, ProtocolError, unavailable } from "../protocol/errors.ts";
import type { Message } from "../protocol/message.ts";
import { HIGHEST_GRANTED_LEVEL } from "../protocol/verify.ts";
import { errorMessage } from "../util/errors.ts";
import { exponentialDelay } from "../util/backoff.ts";
import type { DeliveryRecord } from "./outbound/delivery-state.ts";
import type { ConversationMessage, ConversationState } from "../protocol/local-api.ts";

/** What whileConnected() names when the records are out of reach. */
const WHAT = "the conversation records (NATS KV)";

/** A conversation is over once it has been quiet this long; its record is forgotten then. */
export const CONVERSATION_IDLE_MS = 7 * 24 * 3600_000;
/** A record is written again after this long even when nothing in it changed, to keep it alive. */
const RENEW_MS = 24 * 3600_000;
/** Messages of a conversation remembered in its record (either way), oldest dropped first. */
export const RECENT_MESSAGES = 64;
/** Writes of one record tried before the inbox answers 503 (each after a random pause of up to 2^attempt ms). */
const CAS_ATTEMPTS = 8;
/** Conversation records a process remembers with their revisions, to write the next update without a read. */
const KNOWN_RECORDS = 1024;
/** Participants remembered per conversation. */
const MAX_PARTICIPANTS = 32;
/** The peer's text of an error-phase answer kept in a delivery record. */
const MAX_ERROR_TEXT = 500;

export type { ConversationMessage, ConversationState };

/**
 * Per-conversation state in a NATS KV bucket shared by the replicas (`c.<peer>.<conversation>`);
 * a record expires once its conversation has been quiet for CONVERSATION_IDLE_MS. Every inbound
 * message passes admit(): it refuses a lower authentication level than the conversation had
 * (401 insufficient_auth_level), and notes (or with sequenceCheck "strict" refuses, 409
 * sequence_conflict) a sequence number the peer already used for another message of the
 * conversation; linkAnswer() links an error-phase answer to the outbound message it concerns.
 * Updates are compare-and-set.
 */
/** The index of the latest record of each peer, where the layout lists no keys: what `c.>` lists there. */
export class Conversations {
  private kv: KV | undefined;
  private readonly nats: Pick<Nats, "js" | "isConnected" | "whileConnected" | "bucket">;
  readonly bucket: string;
  private readonly now: () => number;
  private readonly temperatures: ReadonlyMap<string, string>;
  private readonly deliveries: Pick<DeliveryStateStore, "get" | "put"> | undefined;
  private readonly strict: boolean;
  private readonly onRetry: () => void;
  /** The changes of each record waiting for the write under way of it in this process. */
  private readonly updating = new Map<string, Pending[]>();
  /**
   * The records this process last wrote, with their revisions (the most recently used
   * KNOWN_RECORDS): the next update of one is written against that revision without reading it
   * first. The compare-and-set makes that safe: if another replica wrote in between, the write
   * fails and the record is read and decided on again; a refusal is never made on a remembered
   * record alone.
   */
  private readonly known = new Map<string, { revision: number; state: ConversationState; at: number }>();

  constructor(
    nats: Pick<Nats, "js" | "isConnected" | "whileConnected" | "bucket">,
    bucket: string,
    opts: {
      now?: () => number;
      temperatures?: ReadonlyMap<string, string>;
      deliveries?: Pick<DeliveryStateStore, "get" | "put">;
      /** spec.inbox.sequenceCheck: "strict" refuses a reused sequence number, "record" (default) notes it. */
      sequenceCheck?: "record" | "strict";
      /** Told of each write tried again after another writer's came in between (a metric). */
      onRetry?: () => void;
    } = {},
  ) {
    this.nats = nats;
    this.bucket = bucket;
    this.strict = opts.sequenceCheck === "strict";
    this.now = opts.now ?? Date.now;
    this.temperatures = opts.temperatures ?? new Map();
    this.deliveries = opts.deliveries;
    this.onRetry = opts.onRetry ?? (() => {});
  }

  async ensure(): Promise<void> {
    this.kv = await this.nats.bucket(this.bucket, { history: 1, ttl: CONVERSATION_IDLE_MS }, PEERS_OF_CONVERSATION);
  }

  static key(peer: string, conversationId: string): string {
    return `c.${encodeToken(peer)}.${encodeToken(conversationId)}`;
  }

  private store(): KV {
    if (!this.kv || !this.nats.isConnected) throw unavailable("the conversation records (NATS KV) are not reachable");
    return this.kv;
  }

  /** The record of a conversation with a peer, if there is one. */
  async get(peer: string, conversationId: string): Promise<ConversationState | undefined> {
    const e = await this.read(Conversations.key(peer, conversationId));
    return e?.value.length ? (e.json() as ConversationState) : undefined;
  }

  /**
   * Whether admit() could refuse a message at this authentication level: with sequenceCheck
   * "strict", or below the highest level a runtime grants. A record's level is the highest of
   * its messages' levels, so a message at HIGHEST_GRANTED_LEVEL is never a downgrade, and a reused
   * sequence number is only noted: such a message is recorded while it is stored, not before.
   */
  mayRefuse(level: number): boolean {
    return this.strict || level < HIGHEST_GRANTED_LEVEL;
  }

  /**
   * A verified inbound message: checked against its conversation's record and recorded (see the
   * class); `sender` is the verified signer. Resolves once the record is written; a message
   * mayRefuse() says it could refuse is admitted before it is stored.
   */
  async admit(sender: string, message: Message, level: number): Promise<void> {
    const h = message.headers;
    await this.update(sender, h.conversation_id, (state) => {
      if (state?.auth_level !== undefined && level < state.auth_level) {
        throw insufficientAuthLevel(
          `conversation ${h.conversation_id} has been authenticated at level ${state.auth_level}; a message at level ${level} is refused ` +
            "(IFP-5 section 2: no downgrade within a conversation). Sign as before, or start a new conversation.",
        );
      }
      const recent = state?.recent ?? [];
      if (recent.some((m) => m.message_id === h.message_id && m.direction === "in")) {
        // A repeat: what it says is known already; only keep the record alive.
        return state && this.now() - Date.parse(state.updated_at) < RENEW_MS ? undefined : touch(state!, this.now());
      }
      const taken = recent.find((m) => m.direction === "in" && m.sequence === h.sequence);
      if (taken && this.strict) {
        throw new ProtocolError(
          409,
          "sequence_conflict",
          `sequence ${h.sequence} of conversation ${h.conversation_id} was already used by ${taken.message_id}; each message of a conversation takes a sequence number of its own (IFP-5 section 4.2)`,
        );
      }
      const next = this.record(state, sender, message, "in");
      next.auth_level = Math.max(level, state?.auth_level ?? level);
      next.last_sequence_in = Math.max(h.sequence, state?.last_sequence_in ?? h.sequence);
      if (taken) next.sequence_reused = (state?.sequence_reused ?? 0) + 1;
      return next;
    });
  }

  /**
   * An error-phase answer from `sender` to one of this agent's messages: shown in that message's
   * delivery record. Nothing for any other message. Runs while the message is stored: the
   * sender's retry of a message whose link failed (503) links it again.
   */
  async linkAnswer(sender: string, message: Message): Promise<void> {
    if (message.headers.phase === "error" && message.headers.thread?.in_reply_to) await this.linkError(sender, message);
  }

  /** An outbound message, once queued: recorded in its conversation with each recipient. */
  async outbound(message: Message): Promise<void> {
    const h = message.headers;
    for (const peer of new Set(h.to.map((t) => t.agent).filter((a) => !a.startsWith("topic:")))) {
      await this.update(peer, h.conversation_id, (state) => {
        if (state?.recent.some((m) => m.message_id === h.message_id && m.direction === "out")) return undefined;
        const next = this.record(state, peer, message, "out");
        next.last_sequence_out = Math.max(h.sequence, state?.last_sequence_out ?? h.sequence);
        return next;
      });
    }
  }

  /** The sequence number a new message of the conversation takes: one more than any seen either way. */
  async nextSequence(conversationId: string): Promise<number> {
    const records = await this.list(conversationId);
    return 1 + Math.max(0, ...records.map((r) => Math.max(r.last_sequence_in ?? 0, r.last_sequence_out ?? 0)));
  }

  /**
   * The peers of the conversations still kept (quiet for less than CONVERSATION_IDLE_MS) that
   * this agent sent to or whose messages were signed (level 1 or more): those told of a change
   * of its capability document. Topics and this agent are not peers; at most `limit` peers, from
   * at most ten times as many records. Where the layout lists no keys, from the latest record
   * made of each peer (PEERS_OF_CONVERSATION), of at most MAX_INDEXED_KEYS peers.
   */
  async recentPeers(self: string, limit = 1000): Promise<string[]> {
    const kv = this.store();
    const peers = new Set<string>();
    let read = 0;
    try {
      for await (const k of await kv.keys("c.>")) {
        if (++read > limit * 10 || peers.size >= limit) break;
        const e = await kv.get(k);
        if (!e?.value.length) continue;
        const state = e.json() as ConversationState;
        if (state.peer === self || state.peer.startsWith("topic:")) continue;
        if (state.last_sequence_out === undefined && (state.auth_level ?? -1) < 1) continue;
        peers.add(state.peer);
      }
    } catch (err) {
      throw unavailable(`the conversation records cannot be read: ${errorMessage(err)}`);
    }
    return [...peers].sort();
  }

  /** The records of a conversation, one per peer (at most 32). */
  async list(conversationId: string): Promise<ConversationState[]> {
    const kv = this.store();
    const out: ConversationState[] = [];
    try {
      for await (const k of await kv.keys(`c.*.${encodeToken(conversationId)}`)) {
        const e = await kv.get(k);
        if (e?.value.length) out.push(e.json() as ConversationState);
        if (out.length >= 32) break;
      }
    } catch (err) {
      if (err instanceof ProtocolError) throw err;
      throw unavailable(`the conversation records cannot be read: ${errorMessage(err)}`);
    }
    return out.sort((a, b) => a.peer.localeCompare(b.peer));
  }

  private record(
    state: ConversationState | undefined,
    peer: string,
    message: Message,
    direction: "in" | "out",
  ): ConversationState {
    const h = message.headers;
    const at = new Date(this.now()).toISOString();
    const participants = [
      ...new Set([...(state?.participants ?? []), h.from.agent, ...h.to.map((t) => t.agent)]),
    ].slice(0, MAX_PARTICIPANTS);
    const temperature = this.temperatures.get(peer);
    return {
      ...(state ?? { conversation_id: h.conversation_id, peer, started_at: at }),
      participants,
      phase: h.phase,
      ...(temperature ? { temperature } : {}),
      recent: [
        ...(state?.recent ?? []),
        { message_id: h.message_id, sequence: h.sequence, direction, phase: h.phase, at },
      ].slice(-RECENT_MESSAGES),
      updated_at: at,
    } as ConversationState;
  }

  /** An error-phase answer from `sender` to one of this agent's messages: shown in that message's delivery record. */
  private async linkError(sender: string, message: Message): Promise<void> {
    if (!this.deliveries) return;
    const h = message.headers;
    const record = await this.deliveries.get(h.thread!.in_reply_to!);
    const r = record?.recipients.find((x) => x.agent === sender);
    if (!record || !r || r.peer_error?.message_id === h.message_id) return;
    const part = message.body.parts?.find((p) => p.name === "error")?.content as { code?: unknown } | undefined;
    r.peer_error = {
      message_id: h.message_id,
      ...(typeof part?.code === "string" ? { code: part.code.slice(0, 64) } : {}),
      text: (message.body.text ?? "").slice(0, MAX_ERROR_TEXT),
      at: new Date(this.now()).toISOString(),
    };
    record.updated_at = r.peer_error.at;
    await this.deliveries.put(record);
  }

  /** Reads and writes are on the inbox path: abandoned (503) the moment NATS goes away. */
  private async read(key: string): Promise<KvEntry | null> {
    const kv = this.store();
    try {
      return await this.nats.whileConnected(kv.get(key), WHAT);
    } catch (err) {
      if (err instanceof ProtocolError) throw err;
      throw unavailable(`the conversation records cannot be read: ${errorMessage(err)}`);
    }
  }

  /**
   * Compare-and-set: `change` returns the new state, or undefined for no write; it may throw to
   * refuse. Updates of one record by this process run one after another, so that messages of one
   * conversation arriving together do not make each other retry: only another replica's write
   * can come in between. The changes that come while a write of the record is under way are made
   * together in the next write, each on the state the one before left, each refused or not on
   * its own: one write for a burst of a conversation's messages instead of one each.
   */
  private update(
    peer: string,
    conversationId: string,
    change: (state: ConversationState | undefined) => ConversationState | undefined,
  ): Promise<void> {
    const key = Conversations.key(peer, conversationId);
    const { promise, resolve, reject } = Promise.withResolvers<void>();
    const item: Pending = { change, resolve, reject };
    const waiting = this.updating.get(key);
    if (waiting) {
      waiting.push(item);
      return promise;
    }
    // Started at once when no other update of the record is under way: its write leaves in the
    // same socket write as the message's, which the inbox starts in the same turn.
    const next: Pending[] = [];
    this.updating.set(key, next);
    void this.writeAll(key, [item], next);
    return promise;
  }

  /** `batch` written, then what came meanwhile (`next`), until nothing waits. */
  private async writeAll(key: string, batch: Pending[], next: Pending[]): Promise<void> {
    try {
      while (batch.length) {
        await this.writeTogether(key, batch);
        batch = next.splice(0);
      }
    } finally {
      this.updating.delete(key);
    }
  }

  /** The changes of `batch` made in one compare-and-set; each settled with its own refusal or the write's outcome. */
  private async writeTogether(key: string, batch: Pending[]): Promise<void> {
    const refused = new Map<Pending, unknown>();
    const together: Change = (state, fresh) => {
      refused.clear();
      let changed: ConversationState | undefined;
      for (const p of batch) {
        try {
          const after = p.change(changed ?? state);
          if (after) changed = after;
        } catch (err) {
          // A refusal on a remembered record is decided again on a fresh read (compareAndSet).
          if (!fresh) throw err;
          refused.set(p, err);
        }
      }
      return changed;
    };
    try {
      await this.compareAndSet(key, together);
    } catch (err) {
      for (const p of batch) p.reject(err);
      return;
    }
    for (const p of batch) {
      if (refused.has(p)) p.reject(refused.get(p));
      else p.resolve();
    }
  }

  private async compareAndSet(key: string, change: Change): Promise<void> {
    const kv = this.store();
    let remembered = this.remembered(key);
    // A record this process does not remember is most often a new conversation: made at once
    // (create fails when the key holds a record) instead of read first. What `change` makes of
    // no record cannot be a refusal, and a record that exists is read and decided on below.
    if (!remembered && (await this.createFresh(kv, key, change))) return;
    for (let attempt = 0; attempt < CAS_ATTEMPTS; attempt++) {
      let state: ConversationState | undefined;
      let revision: number | undefined;
      if (remembered) {
        ({ state, revision } = remembered);
      } else {
        const current = await this.read(key);
        state = current?.value.length ? (current.json() as ConversationState) : undefined;
        revision = current && current.operation === "PUT" ? current.revision : undefined;
      }
      let next: ConversationState | undefined;
      try {
        next = change(state, !remembered);
      } catch (err) {
        // Refused on a remembered record: decide again on the record as it is now.
        if (!remembered) throw err;
        this.known.delete(key);
        remembered = undefined;
        attempt--;
        continue;
      }
      if (!next) return;
      const data = JSON.stringify(next);
      try {
        const written = await this.nats.whileConnected(
          revision !== undefined ? kv.update(key, data, revision) : kv.create(key, data),
          WHAT,
        );
        this.remember(key, written, next);
        return;
      } catch (err) {
        this.known.delete(key);
        remembered = undefined;
        // NATS went away: 503 now, not after four more tries.
        if (err instanceof ProtocolError) throw err;
        // Another replica wrote in between: read again and decide on its record, after a short
        // random pause so that two replicas taking one conversation at once do not collide again.
        this.onRetry();
        await new Promise((r) => setTimeout(r, Math.random() * exponentialDelay(attempt + 1, { initialMs: 1 })));
      }
    }
    throw unavailable("the conversation record is changing too fast; try again");
  }

  /**
   * The record made from none, if the key holds no record: true once written. False when it
   * holds one (or `change` makes nothing of none), for the caller to read it and decide.
   */
  private async createFresh(kv: KV, key: string, change: Change): Promise<boolean> {
    let next: ConversationState | undefined;
    try {
      next = change(undefined, false);
    } catch {
      return false;
    }
    if (!next) return false;
    try {
      this.remember(key, await this.nats.whileConnected(kv.create(key, JSON.stringify(next)), WHAT), next);
      return true;
    } catch (err) {
      // NATS went away: 503 now.
      if (err instanceof ProtocolError) throw err;
      return false;
    }
  }

  /** A record this process wrote, unless it is old enough to have expired or been renewed elsewhere. */
  private remembered(key: string): { revision: number; state: ConversationState } | undefined {
    const k = this.known.get(key);
    if (!k) return undefined;
    if (this.now() - k.at >= RENEW_MS) {
      this.known.delete(key);
      return undefined;
    }
    return k;
  }

  private remember(key: string, revision: number, state: ConversationState): void {
    this.known.delete(key);
    this.known.set(key, { revision, state, at: this.now() });
    if (this.known.size > KNOWN_RECORDS) this.known.delete(this.known.keys().next().value!);
  }
}

/** A change of a record: `fresh` when `state` was just read (not remembered, not assumed absent). */
type Change = (state: ConversationState | undefined, fresh: boolean) => ConversationState | undefined;

/** A change waiting for its record's write, and how its caller is told. */
interface Pending {
  change: (state: ConversationState | undefined) => ConversationState | undefined;
  resolve: () => void;
  reject: (err: unknown) => void;
}

function touch(state: ConversationState, now: number): ConversationState {
  return { ...state, updated_at: new Date(now).toISOString() };
}

/** The part of the delivery state store this class writes. */
interface DeliveryStateStore {
  get(messageId: string): Promise<DeliveryRecord | undefined>;
  put(record: DeliveryRecord): Promise<void>;
}
