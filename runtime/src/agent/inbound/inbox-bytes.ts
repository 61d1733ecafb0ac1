// spec.inbox.maxBytes where the inbox stream is not the Agent's own (the isolated NATS layout,
// docs/scale.md): the tenant's inbox holds every Agent's messages and JetStream bounds a stream's
// bytes, never one subject's, so the runtime counts the bytes it stores. A KV key of the Agent's
// holds them per hour they were stored in; an hour's bytes count until its last message has aged
// out of the inbox (its retention after the hour's end). A runtime reserves bytes in that count
// before it stores the messages they are for, a share at a time (compare-and-set, so replicas
// never reserve the same room twice), and takes each message's bytes from its share in memory:
// the count is never below what the inbox holds of what was counted, across replicas and
// restarts, and a message waits for NATS only when its runtime's share is used up. What a share
// holds unused is given back when the runtime stops (docs/scale.md, "An Agent's inbox bytes").
import { setTimeout as sleep } from "node:timers/promises";
import type { KV } from "@nats-io/kv";
import { unavailable } from "../../protocol/errors.ts";
import { errorMessage } from "../../util/errors.ts";
import { isCasConflict } from "../../nats/layout.ts";

/** The span of stored time one entry of the count adds up. */
export const COUNT_SLOT_MS = 3600_000;
/** Writes of the count tried before a reservation gives up (another replica writing each time). */
const CAS_ATTEMPTS = 16;
/** The most a writer waits, at random, before reading the count again after a conflict. */
const CAS_JITTER_MAX_MS = 50;
/** The largest share of maxBytes one runtime holds reserved and unused: 1/SHARE_DIVISOR, at most MAX_SHARE. */
export const SHARE_DIVISOR = 64;
const MAX_SHARE = 4 * 1024 * 1024;
/** The first share a runtime reserves; it doubles while shares are used up within SHARE_GROW_MS. */
const MIN_SHARE = 64 * 1024;
const SHARE_GROW_MS = 1_000;
/** A share that lasted this long is halved for the next. */
const SHARE_SHRINK_MS = 10_000;

/** Bytes stored, by the start of the hour they were stored in (ms since the epoch, as text). */
type Slots = Record<string, number>;

/** The shares reserved by one runtime: what it may store before reserving again. */
export interface ShareSizes {
  min: number;
  max: number;
}

/** The share sizes for `maxBytes`: at most a 64th of it (4 MiB at most), from 64 KiB (or the max when lower). */
export function shareSizes(maxBytes: number): ShareSizes {
  const max = Math.max(1, Math.min(MAX_SHARE, Math.floor(maxBytes / SHARE_DIVISOR)));
  return { min: Math.min(MIN_SHARE, max), max };
}

export class InboxByteCount {
  private readonly kv: KV;
  private readonly key: string;
  private readonly maxBytes: number;
  private readonly retentionMs: number;
  private readonly now: () => number;
  private readonly sizes: ShareSizes;
  /** Reserved in the count's hour `slot` and not taken by a message yet. */
  private credit = 0;
  private slot = 0;
  /** The size of the next share, and when the last one was reserved. */
  private share: number;
  private reservedAt = 0;
  /** Bytes of messages waiting for a reservation, asked for with the next share. */
  private wanted = 0;
  /** The reservation under way: whether it got less than it asked for (maxBytes reached). */
  private reserving: Promise<boolean> | undefined;
  private closed = false;

  constructor(
    kv: KV,
    key: string,
    maxBytes: number,
    retentionMs: number,
    now: () => number = Date.now,
    sizes: ShareSizes = shareSizes(maxBytes),
  ) {
    this.kv = kv;
    this.key = key;
    this.maxBytes = maxBytes;
    this.retentionMs = retentionMs;
    this.now = now;
    this.sizes = sizes;
    this.share = sizes.min;
  }

  /**
   * Take `bytes` from the share, at once: the hour slot they were counted in, or undefined when
   * the share does not hold them (then take()). Without a promise, so that the message's publish
   * leaves in the same socket write as the rest of the request's NATS calls.
   */
  takeFromShare(bytes: number): number | undefined {
    return this.credit >= bytes && this.slot === this.slotOfNow() ? this.taken(bytes) : undefined;
  }

  /**
   * Take `bytes` for a message about to be stored: the hour slot they were counted in, or
   * undefined when they would pass maxBytes. Throws 503 when the count cannot be reached and the
   * runtime's share is used up.
   */
  async take(bytes: number): Promise<number | undefined> {
    const now = this.takeFromShare(bytes);
    if (now !== undefined) return now;
    if (this.closed) throw unavailable("the runtime is stopping");
    this.wanted += bytes;
    try {
      for (;;) {
        const short = await (this.reserving ??= this.reserve().finally(() => (this.reserving = undefined)));
        if (this.credit >= bytes && this.slot === this.slotOfNow()) return this.taken(bytes);
        if (short) return undefined;
        if (this.closed) throw unavailable("the runtime is stopping");
      }
    } finally {
      this.wanted -= bytes;
    }
  }

  /** Bytes taken for a message that was not stored after all (a duplicate, or its publish failed). */
  unused(bytes: number, slot: number): void {
    if (slot === this.slot && !this.closed) this.credit += bytes;
  }

  /** The share's unused bytes given back to the count (the runtime stops). */
  async close(): Promise<void> {
    this.closed = true;
    await this.reserving?.catch(() => {});
    const unused = this.credit;
    this.credit = 0;
    if (unused > 0) await this.update(() => ({ [String(this.slot)]: -unused })).catch(() => {});
  }

  private taken(bytes: number): number {
    this.credit -= bytes;
    // The next share is reserved before this one is used up, so that messages rarely wait for it.
    if (this.credit < this.share / 2 && !this.reserving && !this.closed)
      this.reserving = this.reserve()
        .catch(() => false)
        .finally(() => (this.reserving = undefined));
    return this.slot;
  }

  private slotOfNow(): number {
    return Math.floor(this.now() / COUNT_SLOT_MS) * COUNT_SLOT_MS;
  }

  /**
   * One share (and the bytes messages are waiting for) reserved in the hour of now, at most what
   * maxBytes leaves; credit left in an earlier hour moves to this one in the same write, so that
   * it is not counted twice. Resolves to whether it got less than it asked for.
   */
  private async reserve(): Promise<boolean> {
    const at = this.now();
    const elapsed = at - this.reservedAt;
    if (this.reservedAt && elapsed < SHARE_GROW_MS) this.share = Math.min(this.sizes.max, this.share * 2);
    else if (elapsed > SHARE_SHRINK_MS) this.share = Math.max(this.sizes.min, Math.floor(this.share / 2));
    this.reservedAt = at;
    const slot = this.slotOfNow();
    const earlier = this.slot !== slot;
    const from = String(this.slot);
    const ask = this.share + this.wanted;
    let granted = 0;
    let moved = 0;
    await this.update((slots) => {
      // What the earlier hour holds of the credit (none once that hour has aged out).
      moved = earlier ? Math.min(this.credit, slots[from] ?? 0) : 0;
      granted = Math.max(0, Math.min(ask, this.maxBytes - total(slots)));
      const change: Slots = { [String(slot)]: granted + moved };
      if (moved) change[from] = -moved;
      return change;
    });
    if (earlier) this.credit = moved;
    this.slot = slot;
    this.credit += granted;
    return granted < ask;
  }

  /** The count read, changed by what `change` makes of it, and written: compare-and-set, read again on a conflict. */
  private async update(change: (slots: Slots) => Slots): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      const { slots, revision } = await this.read();
      for (const [slot, n] of Object.entries(change(slots))) {
        const left = (slots[slot] ?? 0) + n;
        if (left > 0) slots[slot] = left;
        else delete slots[slot];
      }
      try {
        const data = JSON.stringify(slots);
        if (revision) await this.kv.update(this.key, data, revision);
        else await this.kv.create(this.key, data);
        return;
      } catch (err) {
        if (attempt >= CAS_ATTEMPTS || !isCasConflict(err))
          throw unavailable(`the inbox's byte count (spec.inbox.maxBytes) cannot be written: ${errorMessage(err)}`);
        // A random pause, growing with the conflicts, so that writers meeting at every step (two
        // replicas filling at once) fall out of step instead of one losing every time.
        await sleep(Math.random() * Math.min(CAS_JITTER_MAX_MS, 2 ** attempt));
      }
    }
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
}

function total(slots: Slots): number {
  let n = 0;
  for (const v of Object.values(slots)) n += v;
  return n;
}
