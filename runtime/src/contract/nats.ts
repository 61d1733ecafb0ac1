// How names and durations are written for NATS, by the runtime and the operator alike: the
// tokens that make subject, stream and consumer names, JetStream's nanosecond durations, and
// how JetStream says that a stream, consumer or message the other side made is not there.
import { createHash } from "node:crypto";
import { JetStreamApiError } from "@nats-io/jetstream";

/** Whether JetStream answered that the stream, consumer or message asked for is not there. */
export function isNotFound(err: unknown): boolean {
  return err instanceof JetStreamApiError && (err.code === 10059 || err.code === 10014 || err.status === 404);
}

/** Nanoseconds, the unit of JetStream durations, from milliseconds. */
export const nanos = (ms: number): number => Math.round(ms * 1_000_000);

/** An id that is its own token: nothing but [A-Za-z0-9-]. */
const TOKEN = /^[A-Za-z0-9-]*$/;

/** A byte of an id as it stands in a token: itself, or _XX. */
const tokenByte = (byte: number): string =>
  (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5a) || (byte >= 0x61 && byte <= 0x7a) || byte === 0x2d
    ? String.fromCharCode(byte)
    : `_${byte.toString(16).toUpperCase().padStart(2, "0")}`;

/**
 * An identifier (agent id, topic) as one token that is safe in NATS subjects, stream and
 * consumer names: [A-Za-z0-9-] stay, every other byte becomes _XX (hex). Readable for common ids: "pete-agent" stays "pete-agent", "a.b" becomes "a_2Eb".
 * Ids that would make an over-long token are shortened with a hash.
 */
export function encodeToken(id: string): string {
  // Most ids are tokens already: no byte to escape, no hash.
  if (id.length <= 96 && TOKEN.test(id)) return id;
  let out = "";
  for (const byte of Buffer.from(id, "utf8")) out += tokenByte(byte);
  if (out.length > 96) out = `${out.slice(0, 64)}_H${createHash("sha256").update(id).digest("hex").slice(0, 24)}`;
  return out;
}
