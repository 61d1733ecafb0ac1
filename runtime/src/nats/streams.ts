import { JetStreamApiError, type JetStreamClient, type JetStreamManager, type StreamConfig, type StreamInfo } from "@nats-io/jetstream";
import { Kvm, type KV, type KvOptions } from "@nats-io/kv";
import { errorMessage } from "../util/errors.ts";

export function isNotFound(err: unknown): boolean {
  return err instanceof JetStreamApiError && (err.code === 10059 || err.code === 10014 || err.status === 404);
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

/**
 * Create the stream, or update it when its config differs from `want`. Never deletes it:
 * storage and retention policy cannot change in place and are reported instead.
 */
export async function ensureStream(
  jsm: JetStreamManager,
  want: Partial<StreamConfig> & { name: string },
): Promise<{ info: StreamInfo; action: "created" | "updated" | "unchanged" }> {
  let current: StreamInfo | undefined;
  try {
    current = await jsm.streams.info(want.name);
  } catch (err) {
    if (!isNotFound(err)) throw err;
  }
  if (!current) return { info: await jsm.streams.add(want), action: "created" };
  const drift = streamDrift(current.config, want);
  if (drift.length === 0) return { info: current, action: "unchanged" };
  const immutable = drift.filter((k) => k === "storage" || k === "retention");
  if (immutable.length) {
    throw new Error(
      `stream ${want.name} has ${immutable.map((k) => `${k}=${current!.config[k]}`).join(", ")}; changing ${immutable.join(", ")} needs the stream to be recreated by hand`,
    );
  }
  const { storage: _s, retention: _r, ...mutable } = want;
  return { info: await jsm.streams.update(want.name, { ...current.config, ...mutable }), action: "updated" };
}

/** How many replicas a runtime's own streams get: a number, or "auto" (3 on a JetStream cluster, else 1). */
export type Replicas = number | "auto";

/** JetStream's refusals of more replicas than it has servers for. */
function tooFewServers(err: unknown): boolean {
  return /replicas > 1 not supported|insufficient resources|no suitable peers|peer count/i.test(errorMessage(err));
}

/**
 * A KV bucket with the runtime's replicas (withReplicas). A bucket that exists is used as it is.
 */
export async function ensureBucket(js: JetStreamClient, bucket: string, opts: Partial<KvOptions>, replicas: Replicas): Promise<KV> {
  const kvm = new Kvm(js);
  return withReplicas(replicas, (n) => kvm.create(bucket, { ...opts, replicas: n }));
}

/**
 * `make` with the number of replicas given, or with "auto" three where the JetStream cluster has
 * the servers for them, else one.
 */
async function withReplicas<T>(replicas: Replicas, make: (n: number) => Promise<T>): Promise<T> {
  if (replicas !== "auto") return make(replicas);
  try {
    return await make(3);
  } catch (err) {
    if (!tooFewServers(err)) throw err;
    return make(1);
  }
}

/**
 * ensureStream with `num_replicas`: the number given, or with "auto" three replicas where the
 * JetStream cluster has the servers for them, else one. A stream stays at the replicas it has
 * when "auto" cannot raise them.
 */
export async function ensureReplicatedStream(
  jsm: JetStreamManager,
  want: Partial<StreamConfig> & { name: string },
  replicas: Replicas,
): Promise<{ info: StreamInfo; action: "created" | "updated" | "unchanged" }> {
  return withReplicas(replicas, (n) => ensureStream(jsm, { ...want, num_replicas: n }));
}
