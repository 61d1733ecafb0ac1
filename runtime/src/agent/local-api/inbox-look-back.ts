// The look back of GET /messages/watch (`?since=`) where the runtime cannot read its inbox from a
// time (the isolated NATS layout, docs/scale.md: no consumer of its own, no read by sequence): it
// records where it stored each message, and reads them back by direct get of the last message on
// their subjects, each of which holds one message. The record is KV keys of the Agent's per five
// minutes stored (`_i.w.<slot start>.<n>`), each a JSON array of at most LOOK_BACK_CHUNK
// [seq, subject, stored at], appended to by compare-and-set (the messages stored while one write is
// under way in the next; the key as this process last wrote it is not read again), in a bucket whose keys age out with the inbox's messages (the delivery
// records', a week). So an Agent has at most one record key per message its inbox keeps, and one
// per LOOK_BACK_CHUNK in a busy five minutes.
import type { JetStreamManager } from "@nats-io/jetstream";
import type { KV, KvEntry } from "@nats-io/kv";
import { isCasConflict, type InboxLookBack, type StoredInboxMessage } from "../../nats/layout.ts";
import { Batched } from "../../util/batched.ts";

/** The stored time one run of record keys covers. */
export const LOOK_BACK_SLOT_MS = 5 * 60_000;
/** Messages one record key lists. */
export const LOOK_BACK_CHUNK = 64;
/** Record keys per slot: past them (4,096 messages in five minutes) a slot's messages are not recorded. */
export const MAX_KEYS_PER_SLOT = 64;
/**
 * How long a write of the record waits for more messages after its first: messages stored one at
 * a time share a write instead of one each (a look back waits for none of it, and the watch from
 * now shows what is stored meanwhile).
 */
export const LOOK_BACK_WRITE_DELAY_MS = 20;
/** Slots read at once by a look back. */
const READ_AHEAD = 16;

type Entry = [seq: number, subject: string, storedAt: number];

const slotOf = (ms: number) => Math.floor(ms / LOOK_BACK_SLOT_MS) * LOOK_BACK_SLOT_MS;
const keyOf = (slot: number, n: number) => `_i.w.${slot}.${n}`;

function entriesOf(e: KvEntry | null): Entry[] {
  const entries = e?.value.length ? e.json<unknown>() : [];
  return Array.isArray(entries)
    ? entries.filter(
        (x): x is Entry =>
          Array.isArray(x) && typeof x[0] === "number" && typeof x[1] === "string" && typeof x[2] === "number",
      )
    : [];
}

export class StoredMessageRecord implements InboxLookBack {
  private readonly kv: KV;
  private readonly jsm: () => JetStreamManager;
  private readonly stream: string;
  private readonly now: () => number;
  private readonly entries: Batched<Entry>;
  /** The record key of a slot this process last appended to. */
  private at = { slot: 0, n: 0 };
  /** The record key this process wrote last, as written: its next append needs no read unless another replica wrote it. */
  private written: { slot: number; n: number; entries: Entry[]; revision: number } | undefined;

  constructor(
    kv: KV,
    jsm: () => JetStreamManager,
    stream: string,
    now: () => number = Date.now,
    delayMs = LOOK_BACK_WRITE_DELAY_MS,
  ) {
    this.entries = new Batched<Entry>((entries) => this.write(entries), { delayMs });
    this.kv = kv;
    this.jsm = jsm;
    this.stream = stream;
    this.now = now;
  }

  /** Message `seq` stored on `subject` now: recorded, with those stored while a write is under way. */
  record(seq: number, subject: string): Promise<void> {
    return this.entries.add([seq, subject, this.now()]);
  }

  private async write(entries: Entry[]): Promise<void> {
    for (const slot of new Set(entries.map((e) => slotOf(e[2])))) {
      let todo = entries.filter((e) => slotOf(e[2]) === slot);
      let n = this.at.slot === slot ? this.at.n : 0;
      for (let tries = 0; todo.length && n < MAX_KEYS_PER_SLOT && tries < 64; tries++) {
        // The key as this process last wrote it, unless another replica wrote it since (then read).
        const mine = this.written?.slot === slot && this.written.n === n ? this.written : undefined;
        const e = mine ? undefined : await this.kv.get(keyOf(slot, n));
        const held = mine ? mine.entries : entriesOf(e ?? null);
        const revision = mine ? mine.revision : e?.operation === "PUT" ? e.revision : 0;
        if (held.length >= LOOK_BACK_CHUNK) {
          n++;
          continue;
        }
        const taken = todo.slice(0, LOOK_BACK_CHUNK - held.length);
        const next = [...held, ...taken];
        const data = JSON.stringify(next);
        try {
          const written = revision
            ? await this.kv.update(keyOf(slot, n), data, revision)
            : await this.kv.create(keyOf(slot, n), data);
          todo = todo.slice(taken.length);
          this.at = { slot, n };
          this.written = { slot, n, entries: next, revision: written };
        } catch (err) {
          // Another replica appended first: read the key again.
          this.written = undefined;
          if (!isCasConflict(err)) throw err;
        }
      }
    }
  }

  /** Resolves once what was recorded is written (a write waiting for more starts at once). */
  settled(): Promise<void> {
    return this.entries.settled();
  }

  /** The messages recorded as stored within the last `seconds` and still in the inbox, slot by slot, each slot's by sequence. */
  async *since(seconds: number): AsyncGenerator<StoredInboxMessage> {
    await this.entries.settled();
    const from = this.now() - seconds * 1000;
    const slots: number[] = [];
    for (let s = slotOf(from); s <= slotOf(this.now()); s += LOOK_BACK_SLOT_MS) slots.push(s);
    for (let i = 0; i < slots.length; i += READ_AHEAD) {
      const read = await Promise.all(slots.slice(i, i + READ_AHEAD).map((s) => this.slot(s)));
      for (const entries of read) {
        for (const [seq, subject] of entries.filter((e) => e[2] >= from).sort((a, b) => a[0] - b[0])) {
          const m = await this.jsm()
            .direct.getMessage(this.stream, { last_by_subj: subject })
            .catch(() => null);
          // Aged out of the inbox (a subject that holds one message holds no other).
          if (!m || m.seq !== seq) continue;
          yield { seq, headers: m.header, time: m.time, string: () => m.string() };
        }
      }
    }
  }

  /** The entries of one slot's record keys, until the first missing. */
  private async slot(slot: number): Promise<Entry[]> {
    const out: Entry[] = [];
    for (let n = 0; n < MAX_KEYS_PER_SLOT; n++) {
      const held = entriesOf(await this.kv.get(keyOf(slot, n)));
      if (!held.length) break;
      out.push(...held);
    }
    return out;
  }
}
