// The runtime's own records of its inbox where the inbox stream is not its own (the isolated NATS
// layout), on a real nats-server, with a clock the test moves: the count of its bytes
// (spec.inbox.maxBytes, agent/inbox-bytes.ts) forgets an hour only once its messages have aged
// out, and replicas counting at once lose none of each other's bytes; the record of what it stored
// (the watch's look back, agent/inbox-look-back.ts) yields what was stored within the look back,
// by sequence, passes over what is older or gone from the inbox, and spreads a busy five minutes
// over keys of LOOK_BACK_CHUNK.
import { Kvm, type KV } from "@nats-io/kv";
import { RetentionPolicy, StorageType } from "@nats-io/jetstream";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startNats, type NatsServer } from "../../../e2e/support/nats.ts";
import { COUNT_SLOT_MS, InboxByteCount } from "../../src/agent/inbox-bytes.ts";
import { LOOK_BACK_CHUNK, LOOK_BACK_SLOT_MS, StoredMessageRecord } from "../../src/agent/inbox-look-back.ts";
import { Nats } from "../../src/nats/connection.ts";

const HOUR = COUNT_SLOT_MS;
const WEEK = 7 * 24 * HOUR;
let server: NatsServer;
let nats: Nats;
let kv: KV;

beforeAll(async () => {
  server = await startNats();
  nats = new Nats({ url: server.url, name: "inbox-records-test" }, pino({ level: "silent" }));
  await nats.start();
  kv = await new Kvm(nats.js).create("inbox_records_test", { history: 1 });
  await nats.jsm.streams.add({
    name: "INBOX_RECORDS",
    subjects: ["in.>"],
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    allow_direct: true,
  });
});
afterAll(async () => {
  await nats?.close();
  await server?.close();
});

describe("the count of an inbox's bytes", () => {
  it("refuses what would pass maxBytes, and counts an hour's bytes until they have aged out of the inbox", async () => {
    let now = Date.parse("2026-03-01T10:30:00Z");
    const count = new InboxByteCount(kv, "a.inbox-bytes", 1000, WEEK, () => now);
    expect(await count.room(1000)).toBe(true);
    expect(await count.room(1001)).toBe(false);
    await count.stored(600);
    now += 2 * HOUR;
    await count.stored(300);
    expect(await count.room(100)).toBe(true);
    expect(await count.room(101)).toBe(false);
    // The first hour's last message ages out a week after that hour ended: counted until then.
    now = Date.parse("2026-03-01T11:00:00Z") + WEEK - 1;
    expect(await count.room(101)).toBe(false);
    now += 1;
    expect(await count.room(700)).toBe(true);
    expect(await count.room(701)).toBe(false);
  });

  it("loses no bytes of two replicas counting at once (compare-and-set), and counts a byte not yet written", async () => {
    const now = () => Date.parse("2026-03-01T10:30:00Z");
    const one = new InboxByteCount(kv, "b.inbox-bytes", 10_000, WEEK, now);
    const two = new InboxByteCount(kv, "b.inbox-bytes", 10_000, WEEK, now);
    // Each round, both read the same count and write it: one of the two writes is refused and made again.
    for (let round = 0; round < 20; round++) await Promise.all([one.stored(100), two.stored(100)]);
    expect(await one.room(6000)).toBe(true);
    expect(await one.room(6001)).toBe(false);
    // Stored by `two` and not written yet: `two` counts it, `one` cannot see it before it is written.
    const writing = two.stored(1000);
    expect(await two.room(5001)).toBe(false);
    await writing;
    expect(await one.room(5001)).toBe(false);
  });
});

describe("the record of what the inbox stored, for the watch's look back", () => {
  it("yields what was stored within the look back and is still in the inbox, by sequence, over chunks of keys", async () => {
    let now = Date.parse("2026-03-01T10:00:00Z");
    const record = new StoredMessageRecord(
      kv,
      () => nats.jsm,
      "INBOX_RECORDS",
      () => now,
    );
    const store = async (n: number) => {
      const ack = await nats.js.publish(`in.m${n}`, `message ${n}`);
      await record.record(ack.seq, `in.m${n}`);
      return ack.seq;
    };
    const old = await store(0);
    now += 10 * 60_000;
    // More than one key's worth in one five minutes, recorded while each other's writes are under way.
    const recent = await Promise.all(Array.from({ length: LOOK_BACK_CHUNK + 10 }, (_, i) => store(i + 1)));
    const slot = Math.floor(now / LOOK_BACK_SLOT_MS) * LOOK_BACK_SLOT_MS;
    const first = (await kv.get(`_i.w.${slot}.0`))!.json<unknown[]>();
    expect(first.length).toBe(LOOK_BACK_CHUNK);
    expect((await kv.get(`_i.w.${slot}.1`))!.json<unknown[]>().length).toBe(10);

    now += 60_000;
    const seen = async (seconds: number) => {
      const out: { seq: number; text: string }[] = [];
      for await (const m of record.since(seconds)) out.push({ seq: m.seq, text: m.string() });
      return out;
    };
    // Two minutes back: the recent ones only, by sequence, each as stored.
    const back = await seen(120);
    expect(back.map((m) => m.seq)).toEqual([...recent].sort((a, b) => a - b));
    expect(back.map((m) => m.text)).toEqual(
      expect.arrayContaining(Array.from({ length: recent.length }, (_, i) => `message ${i + 1}`)),
    );
    // Twelve minutes back: the old one first.
    expect((await seen(12 * 60)).map((m) => m.seq)).toEqual([old, ...[...recent].sort((a, b) => a - b)]);
    // Two replicas recording at once into the same key: neither's entries are lost.
    const other = new StoredMessageRecord(
      kv,
      () => nats.jsm,
      "INBOX_RECORDS",
      () => now,
    );
    const both: number[] = [];
    for (let round = 0; round < 10; round++)
      await Promise.all(
        [record, other].map(async (r, i) => {
          const ack = await nats.js.publish(`in.r${round}.${i}`, "both");
          both.push(ack.seq);
          await r.record(ack.seq, `in.r${round}.${i}`);
        }),
      );
    expect((await seen(60)).map((m) => m.seq)).toEqual(expect.arrayContaining(both));
    // A subject that holds another message now (or none) is passed over.
    await nats.jsm.streams.purge("INBOX_RECORDS", { filter: "in.m1" });
    expect((await seen(120)).length).toBe(recent.length + both.length - 1);
  });
});
