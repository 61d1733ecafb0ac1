// The conversation records of two replicas of one agent on a real nats-server: each replica
// writes a record it wrote before against the revision it remembers, and makes a new
// conversation's record, without reading it first,
// and the compare-and-set keeps IFP-5's rule (no lower authentication level within a
// conversation) across replicas: a record changed by the other replica is read again and
// decided on, and a refusal is never made on a remembered record alone; the messages of a
// conversation taken while its record is being written are recorded in one write, each refused or
// not on its own.
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startNats, type NatsServer } from "../../../e2e/support/nats.ts";
import { Conversations } from "../../src/agent/conversations.ts";
import { agentNames } from "../../src/agent/names.ts";
import { Nats } from "../../src/nats/connection.ts";
import { ProtocolError } from "../../src/protocol/errors.ts";
import { identity, signed } from "../support/fixtures.ts";

const alice = identity("alice-agent");
const self = identity("replicated-agent");
const names = agentNames(self.agentId);

let server: NatsServer;
const conns: Nats[] = [];
let one: Conversations;
let two: Conversations;
let kvReads = 0;

async function replica(name: string): Promise<Conversations> {
  const nats = new Nats({ url: server.url, name }, pino({ level: "silent" }));
  await nats.start();
  conns.push(nats);
  const c = new Conversations(nats, names.conversationsBucket);
  await c.ensure();
  return c;
}

/** Reads of the bucket's records made by `c` (its KV's get), counted. */
function countReads(c: Conversations): void {
  const kv = (c as unknown as { kv: { get: (k: string) => Promise<unknown> } }).kv;
  const get = kv.get.bind(kv);
  kv.get = (k: string) => {
    kvReads++;
    return get(k);
  };
}

beforeAll(async () => {
  server = await startNats();
  [one, two] = [await replica("one"), await replica("two")];
  countReads(one);
});
afterAll(async () => {
  for (const n of conns) await n.close();
  await server?.close();
});

/** A message taken by a replica: admitted to its conversation, as the inbox does. */
const inbound = (c: Conversations, ...args: Parameters<Conversations["admit"]>) => c.admit(...args);

const refusal = async (p: Promise<unknown>) => {
  try {
    await p;
  } catch (err) {
    return err as ProtocolError;
  }
  return undefined;
};

describe("conversation records of two replicas", () => {
  it("writes the next message of a conversation it recorded without reading the record again", async () => {
    const conv = { conversation_id: "conv:quiet" };
    await inbound(one, alice.agentId, signed(alice, self.agentId, { ...conv, sequence: 1 }), 1);
    const before = kvReads;
    for (let s = 2; s <= 5; s++)
      await inbound(one, alice.agentId, signed(alice, self.agentId, { ...conv, sequence: s }), 1);
    expect(kvReads - before).toBe(0);
    const rec = await two.get(alice.agentId, "conv:quiet");
    expect(rec?.recent.map((m) => m.sequence)).toEqual([1, 2, 3, 4, 5]);
    expect(rec?.last_sequence_in).toBe(5);
  });

  it("records the messages that come while the record is written in one write, each refused or not on its own", async () => {
    const conv = { conversation_id: "conv:burst" };
    await inbound(one, alice.agentId, signed(alice, self.agentId, { ...conv, sequence: 1 }), 2);
    const nc = conns[0]!.nc!;
    let writes = 0;
    const sub = nc.subscribe(`$KV.${names.conversationsBucket}.>`, { callback: () => void writes++ });
    await nc.flush();
    // Eight at once, the fourth of them at a lower level than the conversation reached.
    const refusals = await Promise.all(
      [2, 3, 4, 5, 6, 7, 8, 9].map((s) =>
        refusal(inbound(one, alice.agentId, signed(alice, self.agentId, { ...conv, sequence: s }), s === 5 ? 1 : 2)),
      ),
    );
    await nc.flush();
    sub.unsubscribe();
    expect(refusals.map((e) => e?.code)).toEqual([
      undefined,
      undefined,
      undefined,
      "insufficient_auth_level",
      undefined,
      undefined,
      undefined,
      undefined,
    ]);
    expect(writes).toBeLessThanOrEqual(3);
    const rec = await two.get(alice.agentId, "conv:burst");
    expect(rec?.recent.map((m) => m.sequence)).toEqual([1, 2, 3, 4, 6, 7, 8, 9]);
    expect(rec?.auth_level).toBe(2);
  });

  it("makes the record of a new conversation without reading first", async () => {
    const before = kvReads;
    await inbound(one, alice.agentId, signed(alice, self.agentId, { conversation_id: "conv:new", sequence: 1 }), 1);
    expect(kvReads - before).toBe(0);
    const rec = await two.get(alice.agentId, "conv:new");
    expect(rec?.auth_level).toBe(1);
    expect(rec?.recent.map((m) => m.sequence)).toEqual([1]);
  });

  it("reads a record only the other replica wrote, and refuses a lower level on it", async () => {
    const conv = { conversation_id: "conv:theirs" };
    await inbound(two, alice.agentId, signed(alice, self.agentId, { ...conv, sequence: 1 }), 2);
    // Replica one has never seen the conversation: its create fails, it reads the record and refuses.
    const before = kvReads;
    const err = await refusal(inbound(one, alice.agentId, signed(alice, self.agentId, { ...conv, sequence: 2 }), 1));
    expect(err).toMatchObject({ statusCode: 401, code: "insufficient_auth_level" });
    expect(kvReads - before).toBeGreaterThanOrEqual(1);
    // At the same level it takes the next message on the record as the other replica left it.
    await inbound(one, alice.agentId, signed(alice, self.agentId, { ...conv, sequence: 2 }), 2);
    const rec = await two.get(alice.agentId, "conv:theirs");
    expect(rec?.recent.map((m) => m.sequence)).toEqual([1, 2]);
    expect(rec?.auth_level).toBe(2);
  });

  it("refuses a lower level on a replica whose remembered record the other replica has raised since", async () => {
    const conv = { conversation_id: "conv:raised" };
    await inbound(one, alice.agentId, signed(alice, self.agentId, { ...conv, sequence: 1 }), 1);
    // The other replica takes a message at level 2: the conversation is at 2 from now on.
    await inbound(two, alice.agentId, signed(alice, self.agentId, { ...conv, sequence: 2 }), 2);
    // Replica one still remembers level 1; its write against the old revision fails, it reads
    // the record again and refuses.
    const before = kvReads;
    const err = await refusal(inbound(one, alice.agentId, signed(alice, self.agentId, { ...conv, sequence: 3 }), 1));
    expect(err).toBeInstanceOf(ProtocolError);
    expect(err).toMatchObject({ statusCode: 401, code: "insufficient_auth_level" });
    expect(kvReads - before).toBeGreaterThanOrEqual(1);
    const rec = await two.get(alice.agentId, "conv:raised");
    expect(rec?.auth_level).toBe(2);
    expect(rec?.recent.map((m) => m.sequence)).toEqual([1, 2]);
    // At level 2 replica one takes the next message, on the record as the other replica left it.
    await inbound(one, alice.agentId, signed(alice, self.agentId, { ...conv, sequence: 3 }), 2);
    expect((await two.get(alice.agentId, "conv:raised"))?.recent.map((m) => m.sequence)).toEqual([1, 2, 3]);
  });

  it("does not refuse on a remembered record alone: a record removed since is read again", async () => {
    const conv = { conversation_id: "conv:forgotten" };
    await inbound(one, alice.agentId, signed(alice, self.agentId, { ...conv, sequence: 1 }), 2);
    // The record goes (its idle TTL, or removed by hand); replica one still remembers level 2.
    const kv = (two as unknown as { kv: { purge: (k: string) => Promise<void> } }).kv;
    await kv.purge(Conversations.key(alice.agentId, "conv:forgotten"));
    await inbound(one, alice.agentId, signed(alice, self.agentId, { ...conv, sequence: 2 }), 1);
    const rec = await two.get(alice.agentId, "conv:forgotten");
    expect(rec?.auth_level).toBe(1);
    expect(rec?.recent.map((m) => m.sequence)).toEqual([2]);
  });

  it("keeps every message of one conversation taken by both replicas at once", async () => {
    const conv = { conversation_id: "conv:both" };
    const ms = Array.from({ length: 24 }, (_, i) => signed(alice, self.agentId, { ...conv, sequence: i + 1 }));
    await Promise.all(ms.map((m, i) => inbound(i % 2 ? one : two, alice.agentId, m, 1)));
    const rec = await two.get(alice.agentId, "conv:both");
    expect(rec?.recent.map((m) => m.sequence).sort((a, b) => a - b)).toEqual(ms.map((_, i) => i + 1));
    expect(rec?.last_sequence_in).toBe(24);
  });
});
