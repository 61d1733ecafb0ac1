// Where an Agent's JetStream objects live, and what the runtime may do with them (docs/scale.md,
// "The isolated shared layout"). Two layouts, one interface:
//
// - `per-agent`: the runtime's own account holds its own streams, buckets and consumers, which it
//   makes and keeps itself (StreamKeeper, ConsumerWorker); a repeated message is caught by the
//   stream's duplicate window (`Nats-Msg-Id`).
// - `isolated`: the runtime's account has JetStream off and reaches its tenant's data account
//   only through imports of subjects under its own account key: publishes, direct gets of the last
//   message on a subject, its consumers' next messages, info and acks, and the inbox's republish
//   of what it stored (the inbox watch). It makes no stream, bucket or consumer (the operator
//   does), reads no stream info, lists no keys (it keeps index keys of the listings it serves),
//   follows the keys of a watched bucket through that bucket's republish of their changes; a
//   message is kept once because its subject takes one message (`max_msgs_per_subject: 1`,
//   `discard_new_per_subject`).
//
// Every part of the runtime that touches one of these goes through this seam, so the layout is
// chosen once (the agent's `--nats-layout`) and nowhere else.
import { MAX_INDEXED_KEYS, type KeyIndex } from "../contract/key-indexes.ts";
import { readFileSync } from "node:fs";
import {
  DeliverPolicy,
  type ConsumerConfig,
  type JetStreamClient,
  type JetStreamManager,
  type PubAck,
} from "@nats-io/jetstream";
import { Kvm, KvWatchInclude, type KV, type KvEntry, type KvOptions, type KvWatchEntry } from "@nats-io/kv";
import type { Msg, MsgHdrs, NatsConnection, Payload } from "@nats-io/transport-node";
import { agentNames, type AgentNames } from "../contract/agent-names.ts";
import type { AgentSpec } from "../resources/agent.ts";
import { encodeToken, isNotFound } from "../contract/nats.ts";
import {
  ISOLATED_LAYOUT_UNSUPPORTED,
  isSubjectTaken,
  sharedAgentNames,
  sharedInboxWatchSubject,
  sharedKeyWatchSubject,
  type UnsupportedFeature,
  WATCHED_BUCKETS,
} from "../contract/shared-layout.ts";
import { ProtocolError } from "../protocol/errors.ts";
import { Batched } from "../util/batched.ts";
import { errorMessage } from "../util/errors.ts";
import { consumerBacklog, streamBacklog, type Backlog } from "./backlog.ts";
import type { NatsLink } from "./link.ts";
import { ensureBucket, type JetStreamPlacement, type Replicas } from "./streams.ts";

/** The layouts an agent runtime runs on (`--nats-layout`). */
export const NATS_LAYOUTS = ["per-agent", "isolated"] as const;
export type NatsLayoutName = (typeof NATS_LAYOUTS)[number];

/** What of an Agent's spec a layout does not serve (ISOLATED_LAYOUT_UNSUPPORTED on the isolated one). */
export type LayoutFeature = UnsupportedFeature;

/** A feature of the runtime the layout cannot serve yet: 501 `not_on_nats_layout`. */
export function notOnLayout(layout: NatsLayoutName, feature: string): ProtocolError {
  return new ProtocolError(
    501,
    "not_on_nats_layout",
    `${feature} is not available on the ${layout} NATS layout (docs/scale.md#what-runs-on-the-isolated-layout)`,
  );
}

/** Where a durable consumer the runtime works comes from. */
export interface ConsumerSetUp {
  /**
   * The consumer `consumer.durable_name` of `stream`, ready to be worked: its acknowledgement
   * floor when it was there already. `resume` is where one made again starts.
   */
  ready(
    jsm: JetStreamManager,
    stream: string,
    consumer: Partial<ConsumerConfig> & { durable_name: string },
    opts: { updatable: (keyof ConsumerConfig)[]; resume: Partial<ConsumerConfig>; onRecreate?: () => void },
  ): Promise<number | undefined>;
}

/**
 * How one copy of a message is kept once: `subjectOf` the subject it is stored on, `publish`
 * stores it (`duplicate` when a copy with the same id is kept already).
 */
export interface OneCopyRule {
  subjectOf(subject: string, id: string): string;
  publish(
    js: JetStreamClient,
    subject: string,
    id: string | undefined,
    data: Payload,
    opts: { headers?: MsgHdrs; timeout?: number; first?: string },
  ): Promise<{ duplicate: boolean; seq: number }>;
  /** Whether a copy may be kept longer than the rule holds it once (then the stream is searched by subject). */
  readonly windowed: boolean;
  /**
   * The stored copies of `subject` that may be one of `ids`, oldest first (bounded): every copy
   * on that subject, or those on the subjects of `ids` (none given: any sender's, the first
   * stored where `first` records it). The caller tells them apart by their headers.
   */
  find(
    jsm: JetStreamManager,
    stream: string,
    subject: string,
    ids: string[],
    first?: string,
  ): AsyncGenerator<StoredCopy>;
}

/** A stored message as find() yields it. */
export interface StoredCopy {
  seq: number;
  header: MsgHdrs;
  json<T = unknown>(): T;
}

/** A message the inbox stored, as a watch of the inbox sees it. */
export interface StoredInboxMessage {
  seq: number;
  headers?: MsgHdrs;
  /** When the inbox stored it. */
  time: Date;
  string(): string;
}

/**
 * The inbox's messages stored within the last `seconds`, as the runtime recorded them where the
 * layout cannot read the inbox from a time (agent/local-api/inbox-look-back.ts).
 */
export interface InboxLookBack {
  since(seconds: number): AsyncIterable<StoredInboxMessage>;
}

/** The inbox's messages as they are stored, until it is closed. */
export interface InboxFollower extends AsyncIterable<StoredInboxMessage> {
  close(): Promise<unknown>;
}

/** Whether a direct get found nothing there. */
function noMessage(err: unknown): boolean {
  return isNotFound(err) || (err as { code?: number }).code === 404 || /no message|not found/i.test(errorMessage(err));
}

export interface JetStreamLayout {
  readonly name: NatsLayoutName;
  /** The JetStream names of the Agent whose agentStoreKey is `storeKey`. */
  names(storeKey: string): AgentNames;
  /** What of this spec the layout does not serve: the runtime does not start with it. */
  unsupported(spec: AgentSpec): LayoutFeature[];
  /** What a queue's consumer has still to deliver: the outbox's backlog. */
  queueBacklog(nats: NatsLink, stream: string, consumer: string): Promise<Backlog | undefined>;
  /** Whether connecting asks the server's JetStream API for the account's info. */
  readonly checkApi: boolean;
  /** A KV bucket of the Agent's keys; `index` says which of its key listings a layout that lists no keys keeps. */
  bucket(
    js: JetStreamClient,
    name: string,
    opts: Partial<KvOptions>,
    replicas: Replicas,
    placement: JetStreamPlacement,
    index?: KeyIndex,
  ): Promise<KV>;
  readonly consumers: ConsumerSetUp;
  readonly once: OneCopyRule;
  /** Whether the runtime makes and keeps its streams (StreamKeeper). */
  readonly makesStreams: boolean;
  /** Whether the inbox can be read from a time; if not, the runtime records what it stores for a look back (InboxLookBack). */
  readonly readsFromTime: boolean;
  /**
   * The inbox's messages on `inboxMessages` as they are stored from now (or `sinceSeconds`
   * back, from `lookBack` where the layout does not read from a time), taking none of them from
   * the handler or the application's stream: GET /messages/watch.
   */
  followInbox(
    nats: NatsLink,
    names: Pick<AgentNames, "inboxStream" | "inboxMessages">,
    sinceSeconds: number,
    lookBack?: InboxLookBack,
  ): Promise<InboxFollower>;
}

// ---- per-agent: the runtime's own account and objects ----

/** The consumer made, or updated, by the runtime. */
const makeConsumers: ConsumerSetUp = {
  async ready(jsm, stream, consumer, { updatable, resume, onRecreate }) {
    try {
      const info = await jsm.consumers.info(stream, consumer.durable_name);
      if (updatable.length) {
        const update = Object.fromEntries(updatable.map((k) => [k, consumer[k]]));
        await jsm.consumers.update(stream, consumer.durable_name, update);
      }
      return info.ack_floor.stream_seq;
    } catch (err) {
      if (!isNotFound(err)) throw err;
      onRecreate?.();
      await jsm.consumers.add(stream, { ...consumer, ...resume });
      return undefined;
    }
  },
};

/** A stream-wide message id, held once for the stream's duplicate window. */
const streamWideId: OneCopyRule = {
  windowed: true,
  subjectOf: (subject) => subject,
  async publish(js, subject, id, data, { first: _, ...opts }) {
    const ack: PubAck = await js.publish(subject, data, { ...opts, ...(id !== undefined ? { msgID: id } : {}) });
    return { duplicate: ack.duplicate, seq: ack.seq };
  },
  async *find(jsm, stream, subject) {
    let seq = 1;
    // Bounded: a message_id reused more often than this is not looked at further.
    for (let round = 0; round < 4; round++) {
      const batch: (StoredCopy & { pending: number })[] = [];
      try {
        for await (const m of await jsm.direct.getBatch(stream, { seq, batch: 64, next_by_subj: subject }))
          batch.push({ seq: m.seq, header: m.header, json: () => m.json(), pending: m.pending });
      } catch (err) {
        if (noMessage(err)) return;
        throw err;
      }
      for (const m of batch) {
        seq = m.seq + 1;
        yield m;
      }
      if (!batch.length || batch.at(-1)!.pending === 0) return;
    }
  },
};

export const perAgentLayout: JetStreamLayout = {
  name: "per-agent",
  names: agentNames,
  unsupported: () => [],
  // A work queue: its messages are the backlog.
  queueBacklog: (nats, stream) => streamBacklog(nats, stream),
  checkApi: true,
  bucket: (js, name, opts, replicas, placement) => ensureBucket(js, name, opts, replicas, placement),
  consumers: makeConsumers,
  once: streamWideId,
  makesStreams: true,
  readsFromTime: true,
  // An ordered consumer of its own: ephemeral, never acknowledging.
  async followInbox(nats, names, sinceSeconds) {
    const consumer = await nats.whileConnected(
      nats.js.consumers.get(names.inboxStream, {
        filter_subjects: names.inboxMessages,
        ...(sinceSeconds > 0
          ? {
              deliver_policy: DeliverPolicy.StartTime,
              opt_start_time: new Date(Date.now() - sinceSeconds * 1000).toISOString(),
            }
          : { deliver_policy: DeliverPolicy.New }),
      }),
    );
    return consumer.consume({ max_messages: 64 });
  },
};

/** Entries as an iterator that can be stopped, as KV.history() returns them. */
function iterable(entries: KvWatchEntry[]): Awaited<ReturnType<KV["history"]>> {
  async function* each() {
    yield* entries;
  }
  return Object.assign(each(), { stop() {} }) as unknown as Awaited<ReturnType<KV["history"]>>;
}

/** The headers JetStream's republish adds to a message it stored. */
const REPUBLISHED = { seq: "Nats-Sequence", time: "Nats-Time-Stamp" } as const;

// ---- isolated: the tenant's data account, through the runtime's imports ----

/** The consumer the operator made; the runtime only reads its info. */
const operatorConsumers: ConsumerSetUp = {
  async ready(jsm, stream, consumer) {
    try {
      return (await jsm.consumers.info(stream, consumer.durable_name)).ack_floor.stream_seq;
    } catch (err) {
      if (!isNotFound(err)) throw err;
      throw new Error(
        `consumer ${consumer.durable_name} of stream ${stream} is not there: on the isolated NATS layout the operator makes it`,
      );
    }
  },
};

/** A KV create or update refused because another writer came first (compare-and-set). */
export function isCasConflict(err: unknown): boolean {
  return /wrong last sequence|key exists/i.test(errorMessage(err));
}

/** The last message on `subject` by direct get, or null when none is there. */
function lastOn(jsm: JetStreamManager, stream: string, subject: string) {
  return jsm.direct.getMessage(stream, { last_by_subj: subject }).catch((err) => {
    if (noMessage(err)) return null;
    throw err;
  });
}

/**
 * A subject per id that takes one message: the copy is held once for as long as the stream
 * keeps it. Which copy of a message_id was stored first is recorded on a subject of its own
 * (`first`), which takes one message too: the first copy's id, which no later copy displaces.
 */
const subjectPerId: OneCopyRule = {
  windowed: false,
  subjectOf: (subject, id) => `${subject}.${encodeToken(id)}`,
  async publish(js, subject, id, data, { first, ...opts }) {
    // Sent just ahead of the copy, on the same connection to the same stream, and without asking
    // for an answer: the stream takes what one connection sends it in order, so once the copy is
    // acknowledged the record has been stored, or refused because the subject holds one already
    // (an earlier copy's: no later copy displaces it) or because the stream is full (and then the
    // copy is refused too). Sent for a repeat too: a copy stored whose record was lost (the
    // connection, say) gets it from its sender's retry. A copy the stream refuses may leave its
    // record naming it: its sender's retry stores it.
    if (first !== undefined && id !== undefined) (js as unknown as { nc: NatsConnection }).nc.publish(first, id);
    return js.publish(id === undefined ? subject : this.subjectOf(subject, id), data, opts).then(
      (ack) => ({ duplicate: false, seq: ack.seq }),
      (err: unknown) => {
        if (id === undefined || !isSubjectTaken(err)) throw err;
        return { duplicate: true, seq: 0 };
      },
    );
  },
  async *find(jsm, stream, subject, ids, first) {
    if (!ids.length) {
      // Any sender's copy: the first stored, as its record names it. Only the last copy on a
      // subject is reachable, and a later sender reusing the id would otherwise be found.
      if (first === undefined)
        throw notOnLayout("isolated", "finding a received message by its message_id alone (name its sender: `to`)");
      const id = (await lastOn(jsm, stream, first))?.string();
      if (!id) return;
      ids = [id];
    }
    for (const id of ids) {
      const m = await lastOn(jsm, stream, this.subjectOf(subject, id));
      if (m) yield { seq: m.seq, header: m.header, json: () => m.json() };
    }
  },
};

/**
 * The runtime's layout on its tenant's data account: every KV key of the Agent under its account
 * key (`$KV.<bucket>.<account>.<key>`), the token the data account's exports check.
 */
export function isolatedLayout(account: string): JetStreamLayout {
  return {
    name: "isolated",
    // Its subjects and consumers under its account key; its keys of the shared `ifp_agents` under
    // its resource's token, as on the per-agent layout (within its account key, as every key).
    names: (storeKey) => ({ ...sharedAgentNames(account), kvKey: agentNames(storeKey).kvKey }),
    unsupported: (spec) => ISOLATED_LAYOUT_UNSUPPORTED.filter((f) => f.uses(spec)),
    // The outbox keeps delivered messages (a subject holds each once): its consumer's count is the backlog.
    queueBacklog: consumerBacklog,
    checkApi: false,
    bucket: async (js, name, opts, _replicas, _placement, index) =>
      new AccountKeys(await new Kvm(js).open(name, { allow_direct: true }), account, index, {
        nc: (js as unknown as { nc: NatsConnection }).nc,
        bucket: name,
        history: opts.history ?? 1,
      }),
    consumers: operatorConsumers,
    once: subjectPerId,
    makesStreams: false,
    readsFromTime: false,
    // The inbox stream publishes again each message it stores on the Agent's message subjects,
    // where only its account hears it (the stream import of sharedInboxWatchSubject): a core
    // subscription follows the inbox from now, with no consumer. A look back, which would read
    // the stream from a time (a consumer), is the runtime's record of what it stored: subscribed
    // first, so that nothing stored while it is read is missed; what both yield, the record first.
    async followInbox(nats, _names, sinceSeconds, lookBack) {
      if (sinceSeconds > 0 && !lookBack)
        throw notOnLayout("isolated", "a look back (`since`) of GET /messages/watch (the inbox read from a time)");
      const nc = nats.nc;
      if (!nc) throw new Error("not connected");
      const sub = nc.subscribe(sharedInboxWatchSubject(account));
      await nats.whileConnected(nc.flush());
      const subscribedAt = Date.now();
      return {
        async *[Symbol.asyncIterator]() {
          // What the subscription may hear again: the look back's messages stored since it was made
          // (with a minute for the clocks), not the whole look back's.
          const past = new Set<number>();
          if (sinceSeconds > 0 && lookBack)
            for await (const m of lookBack.since(sinceSeconds)) {
              if (m.time.getTime() >= subscribedAt - 60_000) past.add(m.seq);
              yield m;
            }
          for await (const m of sub) {
            const seq = Number(m.headers?.get(REPUBLISHED.seq));
            if (!Number.isSafeInteger(seq) || seq < 1 || past.has(seq)) continue;
            yield {
              seq,
              headers: m.headers,
              time: new Date(m.headers!.get(REPUBLISHED.time)),
              string: () => m.string(),
            };
          }
        },
        close: async () => sub.unsubscribe(),
      };
    },
  };
}

/** A listing not written yet, as a write of an index this process has not written takes it to be. */
const NEW_LISTING: { keys: string[]; revision: number } = Object.freeze({ keys: [], revision: 0 }) as never;
/** The indexes one bucket remembers as it last wrote them. */
const REMEMBERED_INDEXES = 64;

/** The key of the index `name` among the Agent's keys: outside every record's family (`_i.`). */
const indexKey = (name: string) => `_i.${name}`;

/** The most bytes of revisions heard that one bucket keeps for history() (the oldest keys' are forgotten first). */
export const MAX_HEARD_BYTES = 32 * 1024 * 1024;

/**
 * A bucket of the data account as one Agent sees it: its keys, each under its account key. Read
 * by direct get of the last message on the key's subject, written by publish. Listing keys would
 * take a consumer the runtime cannot make: the listings `index` names are kept instead, each an
 * index key of its own (a JSON array of keys, oldest first, at most MAX_INDEXED_KEYS) written
 * with the revision it was read at, with the record it lists when that is created (after it when
 * it is put); a key whose record is not there (its create failed, or it was deleted or aged out of
 * the bucket) is passed over by whoever reads it.
 *
 * A watched bucket (WATCHED_BUCKETS) publishes each change of the Agent's keys again where only
 * its account hears it: watch() is a core subscription there, after the keys' current values
 * (a key's own, or those its index lists). A connection lost and back may have missed changes:
 * a watch of one key reads it again, a watch of many ends (its caller watches again, from the
 * current values). history() is what this process heard of a key while a watch of it ran on the
 * connection the bucket was opened on (at most the bucket's `history` revisions), and its current
 * value: reading older revisions would take a consumer, or a read by sequence.
 */
class AccountKeys implements KV {
  private readonly kv: KV;
  private readonly prefix: string;
  private readonly index: KeyIndex | undefined;
  private readonly watched: { nc: NatsConnection; bucket: string; history: number } | undefined;
  /** The revisions heard of each key (PUTs, oldest first), and their bytes all told. */
  private readonly heard = new Map<string, KvEntry[]>();
  private heardBytes = 0;
  /** The writes of each index with keys to list or take off: the one under way, and the keys waiting for the next. */
  private readonly relisting = new Map<string, { batch: Batched<[string, boolean]>; users: number }>();
  /** The indexes this process wrote last (at most REMEMBERED_INDEXES), as written. */
  private readonly written = new Map<string, { keys: string[]; revision: number }>();
  constructor(
    kv: KV,
    account: string,
    index?: KeyIndex,
    watched?: { nc: NatsConnection; bucket: string; history: number },
  ) {
    this.kv = kv;
    this.prefix = `${account}.`;
    this.index = index;
    this.watched = watched && WATCHED_BUCKETS.includes(watched.bucket) ? watched : undefined;
  }
  private k(key: string) {
    return `${this.prefix}${key}`;
  }
  private refuse(what: string): never {
    throw notOnLayout("isolated", `listing or following KV keys (${what})`);
  }
  /** The keys index `name` lists, and the revision it was read at (0: none kept). */
  private async listed(name: string): Promise<{ keys: string[]; revision: number }> {
    const e = await this.kv.get(this.k(indexKey(name)));
    if (!e?.value.length) return { keys: [], revision: e?.revision ?? 0 };
    const keys = e.json<unknown>();
    return { keys: Array.isArray(keys) ? keys.filter((k) => typeof k === "string") : [], revision: e.revision };
  }
  /**
   * Key `k` listed in its indexes (last), or taken off them. The keys of one index listed or
   * taken off while a write of it is under way go in its next write, together: one read and one
   * write for a burst, where each would otherwise read the whole listing, write it, and meet the
   * others' writes.
   */
  private async relist(k: string, listed: boolean): Promise<void> {
    const names = this.index?.of(k) ?? [];
    await Promise.all(names.map((name) => this.relistIn(name, k, listed)));
  }
  private relistIn(name: string, k: string, listed: boolean): Promise<void> {
    let writes = this.relisting.get(name);
    if (!writes) {
      writes = { batch: new Batched((changes) => this.writeIndex(name, changes)), users: 0 };
      this.relisting.set(name, writes);
    }
    const w = writes;
    w.users++;
    return w.batch.add([k, listed]).finally(() => {
      if (--w.users === 0 && this.relisting.get(name) === w) this.relisting.delete(name);
    });
  }
  private rememberIndex(name: string, listing: { keys: string[]; revision: number }): void {
    this.written.delete(name);
    this.written.set(name, listing);
    if (this.written.size > REMEMBERED_INDEXES) this.written.delete(this.written.keys().next().value!);
  }
  /**
   * Index `name` with `changes` made to it, in order: retried from a fresh read when another
   * writer came first. First tried on the listing as this process last wrote it, or, for one it
   * has not written, with only keys to list, as a new listing (most indexes are one
   * conversation's or one task's): a read only when that guess was wrong.
   */
  private async writeIndex(name: string, changes: readonly [key: string, listed: boolean][]): Promise<void> {
    for (let tries = 0; ; tries++) {
      const guess =
        tries > 0 ? undefined : (this.written.get(name) ?? (changes.every((c) => c[1]) ? NEW_LISTING : undefined));
      const { keys, revision } = guess ?? (await this.listed(name));
      let next = keys;
      for (const [k, listed] of changes) {
        const replaced = (x: string) => x !== k && this.index?.replaces?.(name, k, x) === true;
        if (next.includes(k) === listed && !(listed && next.some(replaced))) continue;
        next = listed
          ? [...next.filter((x) => x !== k && !replaced(x)), k].slice(-MAX_INDEXED_KEYS)
          : next.filter((x) => x !== k);
      }
      if (next === keys) {
        // Nothing to change as far as the guess goes: what is there is read before deciding so.
        if (guess) continue;
        return;
      }
      try {
        const data = JSON.stringify(next);
        const written = revision
          ? await this.kv.update(this.k(indexKey(name)), data, revision)
          : await this.kv.create(this.k(indexKey(name)), data);
        this.rememberIndex(name, { keys: next, revision: written });
        return;
      } catch (err) {
        this.written.delete(name);
        if (tries >= 8 || !isCasConflict(err)) throw err;
      }
    }
  }
  get(k: string, opts?: { revision: number }) {
    return this.kv.get(this.k(k), opts);
  }
  // Listed while the key is written, in the same socket write (one round trip, not two): a
  // listing that names a key whose write failed is passed over by its readers, as one whose
  // record has gone. A create refused because the key is there lists a key that is there.
  async create(k: string, data: Payload, markerTTL?: string) {
    const [seq] = await Promise.all([this.kv.create(this.k(k), data, markerTTL), this.relist(k, true)]);
    return seq;
  }
  // A key updated was there, and listed when it was written first.
  update(k: string, data: Payload, version: number, timeout?: number) {
    return this.kv.update(this.k(k), data, version, timeout);
  }
  async put(k: string, data: Payload, opts?: Parameters<KV["put"]>[2]) {
    const seq = await this.kv.put(this.k(k), data, opts);
    await this.relist(k, true);
    return seq;
  }
  async delete(k: string, opts?: Parameters<KV["delete"]>[1]) {
    await this.kv.delete(this.k(k), opts);
    await this.relist(k, false);
  }
  purge(): Promise<void> {
    this.refuse("purge");
  }
  keys(filter = ">"): ReturnType<KV["keys"]> {
    const name = this.index?.for(filter);
    if (name === undefined) this.refuse(`keys ${filter}`);
    const listed = () => this.listed(name);
    async function* keys() {
      yield* (await listed()).keys;
    }
    // Read by `for await`, as every caller reads keys().
    return Promise.resolve(keys() as unknown as Awaited<ReturnType<KV["keys"]>>);
  }
  async history(opts: { key?: string | string[] } = {}): ReturnType<KV["history"]> {
    const key = opts.key;
    if (!this.watched || typeof key !== "string" || /(^|\.)[*>](\.|$)/.test(key)) this.refuse("history");
    const current = await this.kv.get(this.k(key));
    const entries = [...(this.heard.get(key) ?? [])];
    if (current && !entries.some((e) => e.revision === current.revision)) entries.push(this.unprefixed(current));
    entries.sort((a, b) => a.revision - b.revision);
    return iterable(entries.map((e) => ({ ...e, isUpdate: false })));
  }
  async watch(opts: Parameters<KV["watch"]>[0] = {}): ReturnType<KV["watch"]> {
    const w = this.watched;
    const key = opts.key ?? ">";
    if (!w || typeof key !== "string") this.refuse("watch");
    const one = !/(^|\.)[*>](\.|$)/.test(key);
    const initial = opts.include !== KvWatchInclude.UpdatesOnly;
    const listing = initial && !one ? this.index?.for(key) : undefined;
    if (initial && !one && listing === undefined) this.refuse(`watch ${key}`);
    const queue: (KvWatchEntry | null)[] = [];
    let wake: (() => void) | undefined;
    const push = (e: KvWatchEntry | null) => {
      queue.push(e);
      wake?.();
    };
    const sub = w.nc.subscribe(sharedKeyWatchSubject(w.bucket, this.prefix.slice(0, -1), key));
    const status = w.nc.status() as AsyncIterable<{ type: string }> & { stop(): void };
    const stop = () => {
      sub.unsubscribe();
      status.stop();
      push(null);
    };
    void (async () => {
      for await (const m of sub) {
        const e = this.heardOf(m);
        if (e) push(e);
      }
    })()
      // A subscription refused or closed ends the watch.
      .catch(() => {})
      .finally(() => push(null));
    // Changes made while the connection was gone were not heard: one key is read again, a watch of many ends.
    void (async () => {
      for await (const s of status) {
        if (s.type !== "reconnect") continue;
        if (!one) return stop();
        const e = await this.kv.get(this.k(key)).catch(() => null);
        if (e) push({ ...this.unprefixed(e), isUpdate: true });
      }
    })().catch(() => {});
    const seen = new Map<string, number>();
    const first: KvWatchEntry[] = [];
    try {
      await w.nc.flush();
      const keys = !initial ? [] : one ? [key] : await this.listedKeys(listing!);
      for (const k of keys) {
        const e = await this.kv.get(this.k(k));
        if (!e || (!one && e.operation !== "PUT")) continue;
        seen.set(k, e.revision);
        first.push({ ...this.unprefixed(e), isUpdate: false });
      }
    } catch (err) {
      stop();
      throw err;
    }
    async function* entries(): AsyncGenerator<KvWatchEntry> {
      yield* first;
      for (;;) {
        while (!queue.length) await new Promise<void>((r) => (wake = r));
        const e = queue.shift()!;
        if (e === null) return;
        if ((seen.get(e.key) ?? 0) >= e.revision) continue;
        seen.set(e.key, e.revision);
        yield e;
      }
    }
    return Object.assign(entries(), { stop }) as unknown as Awaited<ReturnType<KV["watch"]>>;
  }
  private async listedKeys(name: string): Promise<string[]> {
    return (await this.listed(name)).keys;
  }
  /** An entry of the Agent's as the caller names its key. */
  private unprefixed(e: KvEntry): KvEntry {
    const key = e.key.startsWith(this.prefix) ? e.key.slice(this.prefix.length) : e.key;
    return {
      bucket: e.bucket,
      key,
      rawKey: key,
      value: e.value,
      created: e.created,
      revision: e.revision,
      operation: e.operation,
      length: e.length,
      json: <T>() => e.json<T>(),
      string: () => e.string(),
    };
  }
  /** A change of a key as the bucket published it again, kept for history() when it is a value. */
  private heardOf(m: Msg): KvWatchEntry | undefined {
    const w = this.watched!;
    const revision = Number(m.headers?.get(REPUBLISHED.seq));
    if (!Number.isSafeInteger(revision) || revision < 1) return undefined;
    const key = m.subject.slice(sharedKeyWatchSubject(w.bucket, this.prefix.slice(0, -1), "").length);
    const op = m.headers?.get("KV-Operation");
    const value = m.data;
    const e: KvWatchEntry = {
      bucket: w.bucket,
      key,
      rawKey: key,
      value,
      created: new Date(m.headers!.get(REPUBLISHED.time)),
      revision,
      operation: op === "DEL" || op === "PURGE" ? op : "PUT",
      length: value.length,
      isUpdate: true,
      json: <T>() => JSON.parse(new TextDecoder().decode(value)) as T,
      string: () => new TextDecoder().decode(value),
    };
    this.remember(e);
    return e;
  }
  private remember(e: KvEntry): void {
    const w = this.watched!;
    const kept = this.heard.get(e.key) ?? [];
    if (e.operation !== "PUT" || kept.some((x) => x.revision === e.revision)) return;
    this.heard.delete(e.key);
    kept.push(e);
    this.heardBytes += e.length;
    while (kept.length > w.history) this.heardBytes -= kept.shift()!.length;
    this.heard.set(e.key, kept);
    for (const [k, old] of this.heard) {
      if (this.heardBytes <= MAX_HEARD_BYTES) break;
      this.heard.delete(k);
      for (const x of old) this.heardBytes -= x.length;
    }
  }
  status(): ReturnType<KV["status"]> {
    this.refuse("status");
  }
  destroy(): Promise<boolean> {
    this.refuse("destroy");
  }
}

/**
 * The account a NATS credentials file's user belongs to (its JWT's `issuer_account`, or its
 * issuer when the account key signed it): on the isolated layout the Agent's subjects carry it.
 */
export function accountOfCreds(file: string): string {
  const jwt = /-----BEGIN NATS USER JWT-----\s*([^\s-][^\s]*)\s*------END NATS USER JWT------/.exec(
    readFileSync(file, "utf8"),
  )?.[1];
  if (!jwt) throw new Error(`${file} holds no NATS user JWT`);
  const claims = JSON.parse(Buffer.from(jwt.split(".")[1] ?? "", "base64url").toString("utf8")) as {
    iss?: string;
    nats?: { issuer_account?: string };
  };
  const account = claims.nats?.issuer_account ?? claims.iss;
  if (!account || !/^A[A-Z2-7]{55}$/.test(account)) throw new Error(`${file}: its user JWT names no account`);
  return account;
}

/** The layout named by `--nats-layout`; the isolated one needs the runtime's credentials file (its account). */
export function layoutOf(name: NatsLayoutName, credsFile: string | undefined): JetStreamLayout {
  if (name === "per-agent") return perAgentLayout;
  if (!credsFile)
    throw new Error("the isolated NATS layout needs --nats-creds: the Agent's subjects carry its account");
  return isolatedLayout(accountOfCreds(credsFile));
}

export type { KeyIndex };
