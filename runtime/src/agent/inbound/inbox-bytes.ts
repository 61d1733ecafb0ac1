// spec.inbox.maxBytes where the inbox stream is not the Agent's own (the isolated NATS layout,
// docs/scale.md): the tenant's inbox holds every Agent's messages and JetStream bounds a stream's
// bytes, never one subject's, so the runtime counts the bytes it stored. A KV key of the Agent's
// holds them per hour they were stored in; an hour's bytes count until its last message has aged
// out of the inbox (its retention after the hour's end), so the count is never below what the
// inbox still holds of what was counted. Writes are compare-and-set, those of messages stored
// together in one.
import type { KV } from "@nats-io/kv";
import { unavailable } from "../../protocol/errors.ts";
import { Batched } from "../../util/batched.ts";
import { errorMessage } from "../../util/errors.ts";
import { isCasConflict } from "../../nats/layout.ts";

/** The span of stored time one entry of the count adds up. */
export const COUNT_SLOT_MS = 3600_000;
/** Writes of the count tried before its bytes are left to the next write. */
const CAS_ATTEMPTS = 8;

/** Bytes stored, by the start of the hour they were stored in (ms since the epoch, as text). */
type Slots = Record<string, number>;

export class InboxByteCount {
  private readonly kv: KV;
  private readonly key: string;
  private readonly maxBytes: number;
  private readonly retentionMs: number;
  private readonly now: () => number;
  /** Bytes stored, written to the count together with those stored meanwhile. */
  private readonly counted = new Batched<number>((bytes) => this.write(total(bytes)));

  constructor(kv: KV, key: string, maxBytes: number, retentionMs: number, now: () => number = Date.now) {
    this.kv = kv;
    this.key = key;
    this.maxBytes = maxBytes;
    this.retentionMs = retentionMs;
    this.now = now;
  }

  /** Whether `bytes` more stay within maxBytes, with what this process stored and has not written yet. */
  async room(bytes: number): Promise<boolean> {
    // Taken before the read: bytes written while it is under way are counted twice, never not at all.
    const unwritten = total(this.counted.unwritten);
    const { slots } = await this.read();
    return total(Object.values(slots)) + unwritten + bytes <= this.maxBytes;
  }

  /** `bytes` stored: counted, resolving once written (with whatever was stored meanwhile). */
  stored(bytes: number): Promise<void> {
    return this.counted.add(bytes);
  }

  private async read(): Promise<{ slots: Slots; revision: number }> {
    let e: Awaited<ReturnType<KV["get"]>>;
    try {
      e = await this.kv.get(this.key);
    } catch (err) {
      throw unavailable(`the inbox's byte count (spec.inbox.maxBytes) cannot be read: ${errorMessage(err)}`);
    }
    const counted = e?.value.length ? e.json<unknown>() : {};
    const slots: Slots = {};
    const horizon = this.now() - this.retentionMs - COUNT_SLOT_MS;
    if (counted && typeof counted === "object")
      for (const [start, n] of Object.entries(counted))
        if (Number(start) > horizon && typeof n === "number" && n > 0) slots[start] = n;
    return { slots, revision: e && e.operation === "PUT" ? e.revision : 0 };
  }

  /** `bytes` added to the hour of now, compare-and-set: another replica's write in between is read again. */
  private async write(bytes: number): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      const { slots, revision } = await this.read();
      const slot = String(Math.floor(this.now() / COUNT_SLOT_MS) * COUNT_SLOT_MS);
      slots[slot] = (slots[slot] ?? 0) + bytes;
      try {
        const data = JSON.stringify(slots);
        if (revision) await this.kv.update(this.key, data, revision);
        else await this.kv.create(this.key, data);
        return;
      } catch (err) {
        if (attempt >= CAS_ATTEMPTS || !isCasConflict(err)) throw err;
      }
    }
  }
}

function total(bytes: readonly number[]): number {
  return bytes.reduce((a, b) => a + b, 0);
}
