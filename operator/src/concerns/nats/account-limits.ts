// What one runtime's NATS account may hold: the limits its account JWT carries, so that no tenant
// of the install's NATS takes more than its own share of the servers' store, memory, connections
// and subscriptions (docs/security.md, Capacity per runtime). The disk follows from the stream the
// runtime reserves (an Agent's inbox, spec.inbox.maxBytes; a Relay's stream,
// spec.retention.maxBytes) plus the room of its streams that declare no max_bytes (an Agent's
// outbox, the KV buckets), times the replicas JetStream counts against the account on a cluster.
// A stream asking for more than that is refused when it is made; writes beyond it are refused.
// The rest are the install's (chart values runtime.natsAccountLimits, --nats-account-* flags).
import { bytesOf } from "../../../../runtime/src/resources/quantity.ts";

/** Limits the install sets for every runtime account (--nats-account-* flags). */
export interface AccountLimitSettings {
  /** Disk beside the reserved stream: the outbox, the KV buckets and the ledger (bytes per replica). */
  dataBytes: number;
  /** Memory storage of every account besides a memory Relay's stream (bytes); 0: no memory streams. */
  memoryBytes: number;
  /** The disk (or memory) of a Relay whose spec.retention.maxBytes is -1, no limit (bytes). */
  unboundedRelayBytes: number;
  /** Streams (KV buckets included) per account. */
  streams: number;
  /** Consumers per stream. */
  consumers: number;
  /** Client connections per account, on each server. */
  connections: number;
  /** Subscriptions per account, on each server. */
  subscriptions: number;
}

const MIB = 1024 * 1024;

export const DEFAULT_ACCOUNT_LIMITS: AccountLimitSettings = {
  dataBytes: 64 * MIB,
  memoryBytes: 0,
  unboundedRelayBytes: 1024 * MIB,
  streams: 16,
  consumers: 10_000,
  connections: 256,
  subscriptions: 4096,
};

/** The JetStream and account limits of one runtime's account JWT. */
export interface RuntimeAccountLimits {
  disk_storage: number;
  mem_storage: number;
  streams: number;
  consumer: number;
  conn: number;
  subs: number;
}

/** A size as a spec holds it: bytes once parsed, or as written in the object (a quantity such as "64Mi"). */
type Size = number | string;

/** The spec fields the limits are derived from (an Agent's or a Relay's, parsed or as the API server holds it). */
export type AccountResource =
  | { kind: "Agent"; spec?: { inbox?: { maxBytes?: Size }; durability?: { replicas?: number } } }
  | { kind: "Relay"; spec?: { retention?: { maxBytes?: Size; storage?: string; replicas?: number } } };

/** Bytes of a spec's size; the CRD's default for what is absent (or not a size, which the API server refuses). */
const bytes = (size: Size | undefined, fallback: number) =>
  size === -1 ? -1 : size === undefined ? fallback : (bytesOf(size) ?? fallback);

/** What the CRDs default (runtime/src/resources): an Agent's inbox, a Relay's retention. */
const AGENT_INBOX_BYTES = 64 * MIB;
const RELAY_STREAM_BYTES = 1024 * MIB;

/**
 * The limits of a runtime's account. An Agent's disk is its inbox's max_bytes plus `dataBytes`,
 * times the replicas JetStream counts on a cluster (3 unless spec.durability.replicas says
 * otherwise; one on a standalone server). A Relay's is its stream's max_bytes (in memory instead
 * for a memory Relay) times spec.retention.replicas, plus `dataBytes` for its buckets. Without a
 * resource: an Agent of the CRD's defaults.
 */
export function accountLimitsOf(
  resource: AccountResource | undefined,
  settings: AccountLimitSettings,
  clustered: boolean,
): RuntimeAccountLimits {
  let disk: number;
  let memory = settings.memoryBytes;
  if (resource?.kind === "Relay") {
    const r = resource.spec?.retention ?? {};
    const stream = bytes(r.maxBytes, RELAY_STREAM_BYTES);
    const held = (stream < 0 ? settings.unboundedRelayBytes : stream) * (clustered ? (r.replicas ?? 1) : 1);
    disk = settings.dataBytes * (clustered ? 3 : 1);
    if (r.storage === "memory") memory += held;
    else disk += held;
  } else {
    const spec = resource?.spec;
    const replicas = clustered ? (spec?.durability?.replicas ?? 3) : 1;
    disk = (bytes(spec?.inbox?.maxBytes, AGENT_INBOX_BYTES) + settings.dataBytes) * replicas;
  }
  return {
    disk_storage: disk,
    mem_storage: memory,
    streams: settings.streams,
    consumer: settings.consumers,
    conn: settings.connections,
    subs: settings.subscriptions,
  };
}
