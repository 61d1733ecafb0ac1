// Where an Agent's JetStream objects live, and what the runtime may do with them (docs/scale.md,
// "The isolated shared layout"). Two layouts, one interface:
//
// - `per-agent`: the runtime's own account holds its own streams, buckets and consumers, which it
//   makes and keeps itself (StreamKeeper, ConsumerWorker); a repeated message is caught by the
//   stream's duplicate window (`Nats-Msg-Id`).
// - `isolated`: the runtime's account has JetStream off and reaches its tenant's data account
//   only through imports of subjects under its own account key: publishes, direct gets of the last
//   message on a subject, its consumers' next messages, info and acks. It makes no stream, bucket
//   or consumer (the operator does), reads no stream info, lists nothing; a message is kept once
//   because its subject takes one message (`max_msgs_per_subject: 1`, `discard_new_per_subject`).
//
// Every part of the runtime that touches one of these goes through this seam, so the layout is
// chosen once (the agent's `--nats-layout`) and nowhere else.
import { readFileSync } from "node:fs";
import type { ConsumerConfig, JetStreamClient, JetStreamManager, PubAck } from "@nats-io/jetstream";
import { Kvm, type KV, type KvOptions } from "@nats-io/kv";
import type { MsgHdrs, Payload } from "@nats-io/transport-node";
import { agentNames, type AgentNames } from "../contract/agent-names.ts";
import { encodeToken } from "../contract/nats.ts";
import { sharedAgentNames } from "../contract/shared-layout.ts";
import { ProtocolError } from "../protocol/errors.ts";
import { errorMessage } from "../util/errors.ts";
import { consumerBacklog, streamBacklog, type Backlog } from "./backlog.ts";
import type { Nats } from "./connection.ts";
import { ensureBucket, isNotFound, type JetStreamPlacement, type Replicas } from "./streams.ts";

/** The layouts an agent runtime runs on (`--nats-layout`). */
export const NATS_LAYOUTS = ["per-agent", "isolated"] as const;
export type NatsLayoutName = (typeof NATS_LAYOUTS)[number];

/** Features of the runtime a layout may not serve yet. */
export type LayoutFeature =
  | "GET /messages/watch (an ordered consumer of the inbox)"
  | "spec.a2a (A2A tasks: a KV bucket watched and listed)"
  | "spec.relay (relay mailboxes)";

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
    opts: { headers?: MsgHdrs; timeout?: number },
  ): Promise<{ duplicate: boolean; seq: number }>;
  /** Whether a copy may be kept longer than the rule holds it once (then the stream is searched by subject). */
  readonly windowed: boolean;
  /**
   * The stored copies of `subject` that may be one of `ids`, oldest first (bounded): every copy
   * on that subject, or those on the subjects of `ids` (none given: any sender's). The caller
   * tells them apart by their headers.
   */
  find(jsm: JetStreamManager, stream: string, subject: string, ids: string[]): AsyncGenerator<StoredCopy>;
}

/** A stored message as find() yields it. */
export interface StoredCopy {
  seq: number;
  header: MsgHdrs;
  json<T = unknown>(): T;
}

/** Whether a direct get found nothing there. */
function noMessage(err: unknown): boolean {
  return isNotFound(err) || (err as { code?: number }).code === 404 || /no message|not found/i.test(errorMessage(err));
}

export interface JetStreamLayout {
  readonly name: NatsLayoutName;
  /** The JetStream names of the Agent whose agentStoreKey is `storeKey`. */
  names(storeKey: string): AgentNames;
  /** Why `feature` is refused on this layout (501), or undefined when it works. */
  refusal(feature: LayoutFeature): ProtocolError | undefined;
  /** What a queue's consumer has still to deliver: the outbox's backlog. */
  queueBacklog(nats: Nats, stream: string, consumer: string): Promise<Backlog | undefined>;
  /** Whether connecting asks the server's JetStream API for the account's info. */
  readonly checkApi: boolean;
  /** A KV bucket of the Agent's keys. */
  bucket(
    js: JetStreamClient,
    name: string,
    opts: Partial<KvOptions>,
    replicas: Replicas,
    placement: JetStreamPlacement,
  ): Promise<KV>;
  readonly consumers: ConsumerSetUp;
  readonly once: OneCopyRule;
  /** Whether the runtime makes and keeps its streams (StreamKeeper). */
  readonly makesStreams: boolean;
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
  async publish(js, subject, id, data, opts) {
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
  refusal: () => undefined,
  // A work queue: its messages are the backlog.
  queueBacklog: (nats, stream) => streamBacklog(nats, stream),
  checkApi: true,
  bucket: (js, name, opts, replicas, placement) => ensureBucket(js, name, opts, replicas, placement),
  consumers: makeConsumers,
  once: streamWideId,
  makesStreams: true,
};

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

/** JetStream's refusal of a second message on a subject that holds one (`discard_new_per_subject`). */
export function isSubjectTaken(err: unknown): boolean {
  return /maximum messages per subject exceeded/i.test(errorMessage(err));
}

/** A subject per id that takes one message: the copy is held once for as long as the stream keeps it. */
const subjectPerId: OneCopyRule = {
  windowed: false,
  subjectOf: (subject, id) => `${subject}.${encodeToken(id)}`,
  async publish(js, subject, id, data, opts) {
    try {
      const ack = await js.publish(id === undefined ? subject : this.subjectOf(subject, id), data, opts);
      return { duplicate: false, seq: ack.seq };
    } catch (err) {
      if (id !== undefined && isSubjectTaken(err)) return { duplicate: true, seq: 0 };
      throw err;
    }
  },
  async *find(jsm, stream, subject, ids) {
    // Any sender's copy: only the last one stored is reachable by subject, and another sender's
    // later copy would displace the first (a reply would then go to whoever reused the id).
    if (!ids.length)
      throw notOnLayout("isolated", "finding a received message by its message_id alone (name its sender: `to`)");
    for (const id of ids) {
      const m = await jsm.direct.getMessage(stream, { last_by_subj: this.subjectOf(subject, id) }).catch((err) => {
        if (noMessage(err)) return null;
        throw err;
      });
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
    refusal: (feature) => notOnLayout("isolated", feature),
    // The outbox keeps delivered messages (a subject holds each once): its consumer's count is the backlog.
    queueBacklog: consumerBacklog,
    checkApi: false,
    bucket: async (js, name) => new AccountKeys(await new Kvm(js).open(name, { allow_direct: true }), account),
    consumers: operatorConsumers,
    once: subjectPerId,
    makesStreams: false,
  };
}

/**
 * A bucket of the data account as one Agent sees it: its keys, each under its account key. Read
 * by direct get of the last message on the key's subject, written by publish; nothing that lists
 * keys or follows them (a watch is a consumer the runtime cannot make).
 */
class AccountKeys implements KV {
  private readonly kv: KV;
  private readonly prefix: string;
  constructor(kv: KV, account: string) {
    this.kv = kv;
    this.prefix = `${account}.`;
  }
  private k(key: string) {
    return `${this.prefix}${key}`;
  }
  private refuse(what: string): never {
    throw notOnLayout("isolated", `listing or following KV keys (${what})`);
  }
  get(k: string, opts?: { revision: number }) {
    return this.kv.get(this.k(k), opts);
  }
  create(k: string, data: Payload, markerTTL?: string) {
    return this.kv.create(this.k(k), data, markerTTL);
  }
  update(k: string, data: Payload, version: number, timeout?: number) {
    return this.kv.update(this.k(k), data, version, timeout);
  }
  put(k: string, data: Payload, opts?: Parameters<KV["put"]>[2]) {
    return this.kv.put(this.k(k), data, opts);
  }
  delete(k: string, opts?: Parameters<KV["delete"]>[1]) {
    return this.kv.delete(this.k(k), opts);
  }
  purge(): Promise<void> {
    this.refuse("purge");
  }
  keys(): ReturnType<KV["keys"]> {
    this.refuse("keys");
  }
  history(): ReturnType<KV["history"]> {
    this.refuse("history");
  }
  watch(): ReturnType<KV["watch"]> {
    this.refuse("watch");
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
