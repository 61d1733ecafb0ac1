// StreamSlots: the relay's open long-lived streams (SSE, WebSocket) counted per agent and overall,
// refused with 429 or 503 past their caps.
import { ProtocolError, rateLimited } from "../protocol/errors.ts";

/** Seconds a client refused a stream is told to wait before opening one again. */
export const STREAM_RETRY_AFTER_S = 10;

/**
 * Open long-lived streams (SSE, WebSocket) counted per key and overall: each holds a JetStream
 * consumer and a socket, so neither one agent nor everyone together may open them without end.
 * `acquire` answers the release function, or throws the refusal: 429 `rate_limited` past the
 * key's cap, 503 `unavailable` past the total; both with Retry-After.
 */
export class StreamSlots {
  private readonly perKey: number;
  private readonly total: number;
  private readonly open = new Map<string, number>();
  private count = 0;

  constructor(perKey: number, total: number) {
    this.perKey = perKey;
    this.total = total;
  }

  acquire(key: string): () => void {
    const mine = this.open.get(key) ?? 0;
    if (mine >= this.perKey)
      throw rateLimited(
        STREAM_RETRY_AFTER_S,
        `${key} already has ${mine} open event streams, the most allowed (spec.limits.maxStreamsPerAgent); close one first`,
      );
    if (this.count >= this.total) {
      throw new ProtocolError(
        503,
        "unavailable",
        `the relay serves ${this.count} open event streams, the most allowed (spec.limits.maxStreams)`,
        { "retry-after": String(STREAM_RETRY_AFTER_S) },
      );
    }
    this.open.set(key, mine + 1);
    this.count++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.count--;
      const n = (this.open.get(key) ?? 1) - 1;
      if (n <= 0) this.open.delete(key);
      else this.open.set(key, n);
    };
  }

  /** Streams open now (all keys). */
  get size(): number {
    return this.count;
  }
}
