// The isolated layout's rule for one copy of a message (nats/layout.ts, a subject per id that takes
// one message), on a real nats-server with a stream configured as the shared inbox: the record of a
// message_id's first copy is in place as soon as the copy is acknowledged, is sent without asking for
// an answer, and names the first sender's copy, which a later sender reusing the id does not displace.
import { DiscardPolicy, jetstream, jetstreamManager, RetentionPolicy, StorageType } from "@nats-io/jetstream";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startNats, type NatsServer } from "../../../e2e/support/nats.ts";
import { isolatedLayout } from "../../src/nats/layout.ts";

const STREAM = "ONE_COPY_TEST";
let server: NatsServer;
let nc: NatsConnection;

beforeAll(async () => {
  server = await startNats();
  nc = await connect({ servers: server.url });
  await (await jetstreamManager(nc)).streams.add({
    name: STREAM,
    subjects: ["t.inbox.>"],
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    discard: DiscardPolicy.New,
    max_msgs_per_subject: 1,
    discard_new_per_subject: true,
    allow_direct: true,
  });
});
afterAll(async () => {
  await nc?.close();
  await server?.close();
});

describe("one copy per sender and message_id, with the first copy's record", () => {
  it("has the record in place once the copy is acknowledged, sent without an answer, naming the first sender", async () => {
    const js = jetstream(nc);
    const jsm = await jetstreamManager(nc);
    const once = isolatedLayout(`A${"C".repeat(55)}`).once;
    let records = 0;
    let answered = 0;
    const sub = nc.subscribe("t.inbox.first.>", {
      callback: (_err, m) => {
        records++;
        if (m.reply) answered++;
      },
    });
    await nc.flush();
    try {
      for (let i = 0; i < 20; i++) {
        const first = `t.inbox.first.m${i}`;
        const ack = await once.publish(js, `t.inbox.msg.m${i}`, `alice m${i}`, JSON.stringify(`from alice ${i}`), {
          first,
        });
        expect(ack.duplicate).toBe(false);
        // Read at once: the record was taken before the copy's acknowledgement came back.
        expect((await jsm.direct.getMessage(STREAM, { last_by_subj: first }))?.string()).toBe(`alice m${i}`);
      }
      // A later sender reusing an id: its copy is kept, the record still names the first.
      await once.publish(js, "t.inbox.msg.m0", "mallory m0", JSON.stringify("from mallory"), {
        first: "t.inbox.first.m0",
      });
      const found: string[] = [];
      for await (const m of once.find(jsm, STREAM, "t.inbox.msg.m0", [], "t.inbox.first.m0"))
        found.push(m.json() as string);
      expect(found).toEqual(["from alice 0"]);
      // A repeat is a duplicate.
      expect(
        (
          await once.publish(js, "t.inbox.msg.m1", "alice m1", JSON.stringify("from alice 1"), {
            first: "t.inbox.first.m1",
          })
        ).duplicate,
      ).toBe(true);
      await nc.flush();
      expect(records).toBe(22);
      expect(answered).toBe(0);
    } finally {
      sub.unsubscribe();
    }
  });
});
