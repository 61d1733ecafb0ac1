// The key listings the isolated layout keeps among an Agent's keys (nats/layout.ts, AccountKeys),
// on a real nats-server: keys created at once are listed with one write of their index for the
// burst rather than one each, none lost when two replicas write the same index together, an
// index this process wrote last (or a new one) written without reading it first, a created key's
// listing sent with its create, and a replaced key listed once.
import { jetstream, type JetStreamClient } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startNats, type NatsServer } from "../../../e2e/support/nats.ts";
import { waitFor } from "../../../e2e/support/wait.ts";
import { PEERS_OF_CONVERSATION, TASK_INDEX } from "../../src/contract/key-indexes.ts";
import { isCasConflict, isolatedLayout } from "../../src/nats/layout.ts";

const ACCOUNT = `A${"B".repeat(55)}`;
const BUCKET = "ifp_index_test";
const SINGLE = { clustered: false };
let server: NatsServer;
let nc: NatsConnection;
let js: JetStreamClient;

beforeAll(async () => {
  server = await startNats();
  nc = await connect({ servers: server.url });
  js = jetstream(nc);
  await new Kvm(js).create(BUCKET, { history: 1 });
});
afterAll(async () => {
  await nc?.close();
  await server?.close();
});

/** The publishes to index `name`'s key (each write tried, refused or not), counted from now. */
function indexWrites(name: string): { count: () => number; stop: () => void } {
  let n = 0;
  const sub = nc.subscribe(`$KV.${BUCKET}.${ACCOUNT}._i.${name}`, { callback: () => void n++ });
  return { count: () => n, stop: () => sub.unsubscribe() };
}

const keysOf = async (kv: { keys(filter: string): Promise<AsyncIterable<string>> }, filter: string) => {
  const out: string[] = [];
  for await (const k of await kv.keys(filter)) out.push(k);
  return out.sort();
};

describe("the key indexes of the isolated layout", () => {
  it("lists keys created at once with a write of their index per burst, and loses none of two replicas'", async () => {
    const layout = isolatedLayout(ACCOUNT);
    const one = await layout.bucket(js, BUCKET, { history: 1 }, 1, SINGLE, TASK_INDEX);
    const two = await layout.bucket(js, BUCKET, { history: 1 }, 1, SINGLE, TASK_INDEX);
    const writes = indexWrites("t.owner");
    await nc.flush();
    const ids = Array.from({ length: 64 }, (_, i) => `task-${i}`);
    await Promise.all(ids.map((id, i) => (i % 2 ? one : two).create(`t.owner.${id}`, "{}")));
    expect(await keysOf(one, "t.owner.*")).toEqual(ids.map((id) => `t.owner.${id}`).sort());
    await waitFor("the index writes to be heard", async () => (await nc.flush(), writes.count() > 0));
    // One write a burst for each replica (and one more for each meeting of the two), not one a key.
    expect(writes.count()).toBeGreaterThan(0);
    expect(writes.count()).toBeLessThan(16);
    writes.stop();
  });

  it("writes an index it wrote last or a new one without reading it, and reads it again once another replica wrote it", async () => {
    const layout = isolatedLayout(ACCOUNT);
    const one = await layout.bucket(js, BUCKET, { history: 1 }, 1, SINGLE, TASK_INDEX);
    const two = await layout.bucket(js, BUCKET, { history: 1 }, 1, SINGLE, TASK_INDEX);
    let reads = 0;
    const sub = nc.subscribe(`$JS.API.DIRECT.GET.KV_${BUCKET}.$KV.${BUCKET}.${ACCOUNT}._i.>`, {
      callback: () => void reads++,
    });
    for (let i = 0; i < 5; i++) await one.create(`t.solo.s${i}`, "{}");
    await nc.flush();
    expect(reads).toBe(0);
    // Another replica takes a key off: the first one's next write meets it, reads, and keeps its change.
    await two.delete("t.solo.s0");
    await one.create("t.solo.s5", "{}");
    await nc.flush();
    expect(reads).toBeGreaterThan(0);
    sub.unsubscribe();
    expect(await keysOf(one, "t.solo.*")).toEqual(["t.solo.s1", "t.solo.s2", "t.solo.s3", "t.solo.s4", "t.solo.s5"]);
  });

  it("sends a created key's listing with its create, not after its answer: a create refused because the key is there lists it", async () => {
    const layout = isolatedLayout(ACCOUNT);
    const one = await layout.bucket(js, BUCKET, { history: 1 }, 1, SINGLE, TASK_INDEX);
    // Written where no listing names it (as a record whose listing write was lost).
    await (await new Kvm(js).open(BUCKET)).put(`${ACCOUNT}.t.early.e1`, "{}");
    const refused = await one.create("t.early.e1", "{}").catch((e: unknown) => e);
    expect(isCasConflict(refused)).toBe(true);
    expect(await keysOf(one, "t.early.*")).toEqual(["t.early.e1"]);
  });

  it("lists the latest key of each peer once, whatever the order of a burst", async () => {
    const kv = await isolatedLayout(ACCOUNT).bucket(js, BUCKET, { history: 1 }, 1, SINGLE, PEERS_OF_CONVERSATION);
    await Promise.all(["c1", "c2", "c3"].map((c) => kv.create(`c.alice.${c}`, "{}")));
    await kv.create("c.bob.c4", "{}");
    await kv.create("c.alice.c5", "{}");
    expect(await keysOf(kv, "c.>")).toEqual(["c.alice.c5", "c.bob.c4"]);
    expect(await keysOf(kv, "c.*.c2")).toEqual(["c.alice.c2"]);
  });
});
