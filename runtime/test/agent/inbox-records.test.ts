// The runtime's own records of its inbox where the inbox stream is not its own (the isolated NATS
// layout), on a real nats-server, with a clock the test moves: the count of its bytes
// (spec.inbox.maxBytes, agent/inbound/inbox-bytes.ts) forgets an hour only once its messages have aged
// out, replicas reserving at once never pass maxBytes together, a runtime that stopped keeps its
// bytes counted, and a runtime without NATS takes no byte it has not reserved; the record of what it stored
// (the watch's look back, agent/local-api/inbox-look-back.ts) yields what was stored within the look back,
// by sequence, passes over what is older or gone from the inbox, spreads a busy five minutes
// over keys of LOOK_BACK_CHUNK, writes the messages stored one at a time within its delay together,
// and a look back does not wait for that delay.
import { Kvm, type KV } from "@nats-io/kv";
import { RetentionPolicy, StorageType } from "@nats-io/jetstream";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startNats, withNatsDown, type NatsServer } from "../../../e2e/support/nats.ts";
import { waitFor } from "../../../e2e/support/wait.ts";
import { COUNT_SLOT_MS, InboxByteCount } from "../../src/agent/inbound/inbox-bytes.ts";
import { LOOK_BACK_CHUNK, LOOK_BACK_SLOT_MS, StoredMessageRecord } from "../../src/agent/local-api/inbox-look-back.ts";
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
  /** Every take of `bytes` by `count` until one is refused: the bytes taken. */
  const fill = async (count: InboxByteCount, bytes: number) => {
    let taken = 0;
    while ((await count.take(bytes)) !== undefined) taken += bytes;
    return taken;
  };

  it("refuses what would pass maxBytes, and counts an hour's bytes until they have aged out of the inbox", async () => {
    let now = Date.parse("2026-03-01T10:30:00Z");
    const count = new InboxByteCount(kv, "a.inbox-bytes", 1000, WEEK, () => now, { min: 10, max: 10 });
    expect(await count.take(1001)).toBeUndefined();
    expect(await count.take(600)).toBe(Date.parse("2026-03-01T10:00:00Z"));
    now += 2 * HOUR;
    expect(await count.take(300)).toBe(Date.parse("2026-03-01T12:00:00Z"));
    expect(await count.take(100)).toBeDefined();
    expect(await count.take(1)).toBeUndefined();
    // A message not stored after all (a duplicate) gives its bytes back.
    const slot = (await count.take(0))!;
    count.unused(100, slot);
    expect(await count.take(100)).toBeDefined();
    expect(await count.take(1)).toBeUndefined();
    // The first hour's last message ages out a week after that hour ended: counted until then.
    now = Date.parse("2026-03-01T11:00:00Z") + WEEK - 1;
    expect(await count.take(1)).toBeUndefined();
    now += 1;
    expect(await count.take(600)).toBeDefined();
    expect(await count.take(1)).toBeUndefined();
  });

  it("never lets two replicas taking at once pass maxBytes, and refuses at most their unused shares early", async () => {
    const now = () => Date.parse("2026-03-01T10:30:00Z");
    const sizes = { min: 100, max: 400 };
    const one = new InboxByteCount(kv, "b.inbox-bytes", 10_000, WEEK, now, sizes);
    const two = new InboxByteCount(kv, "b.inbox-bytes", 10_000, WEEK, now, sizes);
    // Both fill at 25 bytes a message, a message each at a time, so that each takes part however
    // the machine schedules them; their reservations meet (compare-and-set) in the one key.
    let a = 0;
    let b = 0;
    for (let open = [true, true]; open.some(Boolean); ) {
      const [x, y] = await Promise.all([open[0] ? one.take(25) : undefined, open[1] ? two.take(25) : undefined]);
      open = [x !== undefined, y !== undefined];
      if (x !== undefined) a += 25;
      if (y !== undefined) b += 25;
    }
    expect(a).toBeGreaterThan(0);
    expect(b).toBeGreaterThan(0);
    expect(a + b).toBeLessThanOrEqual(10_000);
    // What each holds reserved and unused when refused is less than the message it refused.
    expect(a + b).toBeGreaterThan(10_000 - 2 * 25);
    // Stopped, each gives its unused share back: a third replica gets exactly what is left.
    await Promise.all([one.close(), two.close()]);
    const three = new InboxByteCount(kv, "b.inbox-bytes", 10_000, WEEK, now, sizes);
    expect(await fill(three, 1)).toBe(10_000 - a - b);
  });

  it("gives the unused part of its share back when the runtime stops", async () => {
    const now = () => Date.parse("2026-03-01T10:30:00Z");
    const sizes = { min: 100, max: 100 };
    const stopping = new InboxByteCount(kv, "f.inbox-bytes", 1000, WEEK, now, sizes);
    expect(await stopping.take(1)).toBeDefined();
    await stopping.close();
    await expect(stopping.take(1000)).rejects.toMatchObject({ statusCode: 503 });
    expect(await fill(new InboxByteCount(kv, "f.inbox-bytes", 1000, WEEK, now, sizes), 1)).toBe(999);
  });

  it("keeps the bytes of a runtime that stopped without giving its share back, and its unused share no longer than its hour", async () => {
    const now = () => Date.parse("2026-03-01T10:30:00Z");
    const sizes = { min: 400, max: 400 };
    const crashed = new InboxByteCount(kv, "c.inbox-bytes", 10_000, WEEK, now, sizes);
    for (let i = 0; i < 5; i++) expect(await crashed.take(100)).toBeDefined();
    // Not closed (the process was killed): what it stored is counted, and its unused share with it.
    const next = new InboxByteCount(kv, "c.inbox-bytes", 10_000, WEEK, now, sizes);
    const left = await fill(next, 1);
    expect(left).toBeLessThanOrEqual(10_000 - 500);
    expect(left).toBeGreaterThanOrEqual(10_000 - 500 - sizes.max);
  });

  it("moves a share's unused bytes to the hour they are used in, so that an hour's bytes age out with its messages", async () => {
    let now = Date.parse("2026-03-01T10:30:00Z");
    const count = new InboxByteCount(kv, "d.inbox-bytes", 10_000, WEEK, () => now, { min: 1000, max: 1000 });
    expect(await count.take(100)).toBeDefined();
    now += HOUR;
    expect(await count.take(100)).toBeDefined();
    const slots = (await kv.get("d.inbox-bytes"))!.json<Record<string, number>>();
    // The first hour holds its message only; the share reserved in it moved to the second.
    expect(slots).toEqual({
      [String(Date.parse("2026-03-01T10:00:00Z"))]: 100,
      [String(Date.parse("2026-03-01T11:00:00Z"))]: 1000 + 1100,
    });
  });

  it("takes from its share while NATS is away, and answers 503 once the share is used up, never taking unreserved bytes", async () => {
    const now = () => Date.parse("2026-03-01T10:30:00Z");
    const count = new InboxByteCount(kv, "e.inbox-bytes", 1_000_000, WEEK, now, { min: 1000, max: 1000 });
    expect(await count.take(100)).toBeDefined();
    await withNatsDown(server, async () => {
      // 1000 left of the share (the next one's reservation fails in the background).
      for (let i = 0; i < 10; i++) expect(await count.take(100)).toBeDefined();
      await expect(count.take(100)).rejects.toMatchObject({ statusCode: 503, code: "unavailable" });
    });
    await waitFor("the runtime's connection to come back", async () => nats.isConnected, 20_000);
    expect(await count.take(100)).toBeDefined();
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
    // What this process wrote last is not read again before its next append.
    let reads = 0;
    const sub = nats.nc!.subscribe("$JS.API.DIRECT.GET.KV_inbox_records_test.>", { callback: () => void reads++ });
    now += LOOK_BACK_SLOT_MS;
    for (let i = 0; i < 10; i++) await record.record(both[0]!, `in.r0.0`);
    await nats.nc!.flush();
    sub.unsubscribe();
    expect(reads).toBe(1);
    now -= LOOK_BACK_SLOT_MS;
    // A subject that holds another message now (or none) is passed over.
    await nats.jsm.streams.purge("INBOX_RECORDS", { filter: "in.m1" });
    expect((await seen(120)).length).toBe(recent.length + both.length - 1);
  });

  it("writes messages stored one at a time within its delay together, and a look back does not wait for it", async () => {
    let writes = 0;
    const sub = nats.nc!.subscribe("$KV.inbox_records_test._i.w.>", { callback: () => void writes++ });
    await nats.nc!.flush();
    try {
      // One at a time, each after the write of the one before would have ended.
      const record = new StoredMessageRecord(kv, () => nats.jsm, "INBOX_RECORDS", Date.now, 200);
      const recorded: Promise<void>[] = [];
      const seqs: number[] = [];
      for (let i = 0; i < 10; i++) {
        const ack = await nats.js.publish(`in.one.${i}`, `one ${i}`);
        seqs.push(ack.seq);
        recorded.push(record.record(ack.seq, `in.one.${i}`));
        await nats.nc!.flush();
        // The sender's pace, a message every 5 ms: the clock the 200 ms write delay batches over.
        await new Promise((r) => setTimeout(r, 5));
      }
      await Promise.all(recorded);
      await nats.nc!.flush();
      expect(writes).toBeLessThanOrEqual(2);
      // A look back right after a message was stored finds it without waiting for the delay.
      const slow = new StoredMessageRecord(kv, () => nats.jsm, "INBOX_RECORDS", Date.now, 60_000);
      const ack = await nats.js.publish("in.one.late", "late");
      void slow.record(ack.seq, "in.one.late");
      // A look back 50 ms after the message was stored: the record's write delay (60 s here) is
      // the clock that keeps the write waiting for more by then.
      await new Promise((r) => setTimeout(r, 50));
      const start = Date.now();
      const seen: number[] = [];
      for await (const m of slow.since(60)) seen.push(m.seq);
      expect(seen).toContain(ack.seq);
      expect(Date.now() - start).toBeLessThan(10_000);
    } finally {
      sub.unsubscribe();
    }
  });
});
