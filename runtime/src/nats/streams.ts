// JetStream helpers shared by the runtimes and the operator: the errors JetStream refuses with,
// streams and KV buckets made or updated to a config, and the replicas they get.
import {
  JetStreamApiError,
  type JetStreamClient,
  type JetStreamManager,
  type StreamConfig,
  type StreamInfo,
} from "@nats-io/jetstream";
import { Kvm, type KV, type KvOptions } from "@nats-io/kv";
import { isNotFound } from "../contract/nats.ts";
import { errorMessage } from "../util/errors.ts";

/**
 * JetStream's refusals of a full stream under `discard: new` (maximum messages or bytes
 * exceeded, 10077/10078), of storage it cannot get (insufficient resources, 10047) and of a
 * write beyond the account's JetStream limits (resource limits exceeded for account, 10002).
 */
export function isFull(err: unknown): boolean {
  if (err instanceof JetStreamApiError && [10002, 10047, 10077, 10078].includes(err.code)) return true;
  return /maximum (messages|bytes) exceeded|insufficient resources|resource limits exceeded/i.test(errorMessage(err));
}

/**
 * JetStream's refusal to make (or grow) a stream because the storage its `max_bytes` reserves is
 * not there: the server's store limit (`max_file_store`) is taken by the reservations of the
 * streams it has (10047, 10023), or on a cluster no server has room for a replica (10005).
 */
export function isStorageRefused(err: unknown): boolean {
  if (err instanceof JetStreamApiError && [10047, 10023].includes(err.code)) return true;
  return /insufficient (storage )?resources|insufficient storage/i.test(errorMessage(err));
}

const COMPARED: (keyof StreamConfig)[] = [
  "subjects",
  "max_age",
  "max_bytes",
  "max_msgs",
  "duplicate_window",
  "discard",
  "num_replicas",
  "allow_msg_ttl",
  "allow_direct",
  "retention",
  "storage",
];

/** The fields of `want` that the stream's current config differs in. */
export function streamDrift(current: StreamConfig, want: Partial<StreamConfig>): string[] {
  return COMPARED.filter((k) => k in want && JSON.stringify(current[k]) !== JSON.stringify(want[k]));
}

/** The stream's info (one STREAM.INFO request), or undefined when the server has no such stream. */
export async function readStreamInfo(jsm: JetStreamManager, name: string): Promise<StreamInfo | undefined> {
  try {
    return await jsm.streams.info(name);
  } catch (err) {
    if (isNotFound(err)) return undefined;
    throw err;
  }
}

/**
 * What a caller already read of a stream (readStreamInfo): `current` undefined when it does
 * not exist. Passed down so that one start reads STREAM.INFO once.
 */
export interface KnownStream {
  current: StreamInfo | undefined;
}

/**
 * Create the stream, or update it when its config differs from `want`. Never deletes it:
 * storage and retention policy cannot change in place and are reported instead. The stream is
 * read unless `known` says what it is.
 */
export async function ensureStream(
  jsm: JetStreamManager,
  want: Partial<StreamConfig> & { name: string },
  known?: KnownStream,
): Promise<{ info: StreamInfo; action: "created" | "updated" | "unchanged" }> {
  const current = known ? known.current : await readStreamInfo(jsm, want.name);
  if (!current) return { info: await jsm.streams.add(want), action: "created" };
  const drift = streamDrift(current.config, want);
  if (drift.length === 0) return { info: current, action: "unchanged" };
  const immutable = drift.filter((k) => k === "storage" || k === "retention");
  if (immutable.length) {
    throw new Error(
      `stream ${want.name} has ${immutable.map((k) => `${k}=${current.config[k]}`).join(", ")}; changing ${immutable.join(", ")} needs the stream to be recreated by hand`,
    );
  }
  const { storage: _s, retention: _r, ...mutable } = want;
  return { info: await jsm.streams.update(want.name, { ...current.config, ...mutable }), action: "updated" };
}

/** How many replicas a runtime's own streams get: a number, or "auto" (3 on a JetStream cluster, else 1). */
export type Replicas = number | "auto";

/**
 * What the JetStream deployment can hold, as the server the client is connected to says of
 * itself: a server that belongs to a cluster names it in its INFO (`cluster`); a server without
 * one runs JetStream standalone and holds exactly one replica of anything. A standalone server
 * refuses to *create* a stream with more, but accepts an *update* to more and then cannot load
 * that stream at its next start (the stream and its messages are gone from its view), so the
 * replicas asked of it are resolved here, never left to the server to refuse.
 */
export interface JetStreamPlacement {
  clustered: boolean;
}

/** The placement of the server behind a connection (its INFO, read at every (re)connect). */
export function placementOf(nc: { info?: { cluster?: string } | undefined }): JetStreamPlacement {
  return { clustered: !!nc.info?.cluster };
}

/** Where a replica count that was asked for is not what a stream or bucket has: for logs, metrics and status. */
export interface ReplicasUnmet {
  object: string;
  asked: Replicas;
  actual: number;
  reason: string;
}

/** JetStream's refusals of more replicas than it has servers for. */
function tooFewServers(err: unknown): boolean {
  return /replicas > 1 not supported|insufficient resources|no suitable peers|peer count/i.test(errorMessage(err));
}

/**
 * The replicas to make a new stream or bucket with: one on a standalone server whatever was
 * asked, "auto" three on a cluster (one where the cluster refuses three), a number as given.
 */
function replicasToCreate(asked: Replicas, placement: JetStreamPlacement): number {
  if (!placement.clustered) return 1;
  return asked === "auto" ? 3 : asked;
}

function standaloneUnmet(object: string, asked: Replicas): ReplicasUnmet | undefined {
  if (asked === "auto" || asked <= 1) return undefined;
  return {
    object,
    asked,
    actual: 1,
    reason: `${asked} replicas were asked for ${object}; the JetStream server is not clustered and holds one`,
  };
}

/**
 * Make `make(n)` with the replicas to create; on a cluster that refuses them, with one. The
 * second element says where what was asked is not what was made.
 */
async function createReplicated<T>(
  object: string,
  asked: Replicas,
  placement: JetStreamPlacement,
  make: (n: number) => Promise<T>,
): Promise<[T, ReplicasUnmet | undefined]> {
  const n = replicasToCreate(asked, placement);
  try {
    return [await make(n), placement.clustered ? undefined : standaloneUnmet(object, asked)];
  } catch (err) {
    if (n === 1 || !tooFewServers(err)) throw err;
    const made = await make(1);
    // "auto" asks for what the cluster can hold: one is that, and nothing is unmet.
    return [
      made,
      asked === "auto"
        ? undefined
        : {
            object,
            asked,
            actual: 1,
            reason: `${asked} replicas were asked for ${object}; the JetStream cluster refused them (${errorMessage(err)}) and it has one`,
          },
    ];
  }
}

/**
 * A KV bucket made with the replicas resolved for the placement (createReplicated). A bucket
 * that exists is used as it is: its replicas never change here.
 */
export async function ensureBucket(
  js: JetStreamClient,
  bucket: string,
  opts: Partial<KvOptions>,
  replicas: Replicas,
  placement: JetStreamPlacement,
): Promise<KV> {
  const kvm = new Kvm(js);
  const [kv] = await createReplicated(`KV bucket ${bucket}`, replicas, placement, (n) =>
    kvm.create(bucket, { ...opts, replicas: n }),
  );
  return kv;
}

export interface EnsuredStream {
  info: StreamInfo;
  action: "created" | "updated" | "unchanged";
  /** Set where the stream's replicas are not those asked for (and why). */
  unmet?: ReplicasUnmet;
}

/**
 * ensureStream with the replicas resolved for the placement, by one rule for every stream the
 * product makes (an agent's inbox and outbox, a relay's mailbox stream, by the runtime and by the
 * operator):
 * - a new stream gets one replica on a standalone server, else "auto" three (one where the
 *   cluster has too few servers) or the number asked;
 * - an existing stream keeps its replicas under "auto": they never change implicitly;
 * - a number asked for is applied to an existing stream only on a cluster, and only if the
 *   cluster accepts it; otherwise the stream keeps its replicas and `unmet` says why (the rest of
 *   the config is still applied);
 * - on a standalone server a stream that has more than one replica (written by an update the
 *   server accepted but cannot load after a restart) is set back to one while the server still
 *   holds it.
 * STREAM.INFO is read once (or not at all when `known` says what the stream is).
 */
export async function ensureReplicatedStream(
  jsm: JetStreamManager,
  want: Partial<StreamConfig> & { name: string },
  replicas: Replicas,
  placement: JetStreamPlacement,
  known?: KnownStream,
): Promise<EnsuredStream> {
  const object = `stream ${want.name}`;
  const current = known ? known.current : await readStreamInfo(jsm, want.name);
  const as = { current };
  if (!current) {
    const [r, unmet] = await createReplicated(object, replicas, placement, (n) =>
      ensureStream(jsm, { ...want, num_replicas: n }, as),
    );
    return { ...r, ...(unmet ? { unmet } : {}) };
  }
  const has = current.config.num_replicas || 1;
  if (!placement.clustered) {
    return {
      ...(await ensureStream(jsm, { ...want, num_replicas: 1 }, as)),
      ...withUnmet(standaloneUnmet(object, replicas)),
    };
  }
  if (replicas === "auto" || replicas === has) return ensureStream(jsm, { ...want, num_replicas: has }, as);
  try {
    return await ensureStream(jsm, { ...want, num_replicas: replicas }, as);
  } catch (err) {
    if (!tooFewServers(err)) throw err;
    const r = await ensureStream(jsm, { ...want, num_replicas: has }, as);
    return {
      ...r,
      unmet: {
        object,
        asked: replicas,
        actual: has,
        reason: `${replicas} replicas were asked for ${object}; the JetStream cluster refused them (${errorMessage(err)}) and it keeps ${has}`,
      },
    };
  }
}

function withUnmet(unmet: ReplicasUnmet | undefined): { unmet?: ReplicasUnmet } {
  return unmet ? { unmet } : {};
}
