// Where a runtime leaves its last error for the operator's status summary (NATS KV), shared by
// the runtime (writes) and the operator (reads, and grants the reads in its own credential).
import { agentNames } from "./agent-names.ts";
import { relayNames } from "./relay-stream.ts";
import type { Relay } from "../resources/relay.ts";
import { isoSeconds } from "../util/time.ts";

/** The KV key, its bucket and the stream behind the bucket. */
export interface LastErrorLocation {
  bucket: string;
  key: string;
}

export function agentLastError(key: string): LastErrorLocation {
  const n = agentNames(key);
  return { bucket: n.kvBucket, key: `${n.kvKey}.last_error` };
}

export function relayLastError(relay: Pick<Relay, "metadata" | "spec">): LastErrorLocation {
  return { bucket: relayNames(relay).kvBucket, key: "last_error" };
}

/** What is stored: when, and what went wrong (at most LAST_ERROR_MAX characters). */
export interface LastErrorEntry {
  at: string;
  reason: string;
}

export const LAST_ERROR_MAX = 256;

/** The stored entry, or undefined for anything that is not one. */
export function parseLastError(data: Uint8Array | undefined): LastErrorEntry | undefined {
  if (!data?.length) return undefined;
  try {
    const v = JSON.parse(new TextDecoder().decode(data)) as Partial<LastErrorEntry>;
    if (typeof v.at !== "string" || typeof v.reason !== "string" || Number.isNaN(Date.parse(v.at))) return undefined;
    return { at: isoSeconds(new Date(v.at)), reason: v.reason.slice(0, LAST_ERROR_MAX) };
  } catch {
    return undefined;
  }
}
