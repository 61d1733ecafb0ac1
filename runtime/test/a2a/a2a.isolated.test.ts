// The A2A face's tests (a2a.test.ts) on the isolated NATS layout (docs/scale.md): the runtime's
// tasks in its tenant's shared bucket, under its own account key, through its imports only. And
// the boundary around them: another Agent of the same tenant, with its runtime's credential or as
// any user of its account, reads, lists, follows and changes none of them.
import { headers, type NatsConnection } from "@nats-io/transport-node";
import { describe, expect, it } from "vitest";
import { waitFor } from "../../../e2e/support/ports.ts";
import { SHARED_BUCKETS, sharedKeyWatchSubject, WATCH_PREFIX } from "../../src/contract/shared-layout.ts";
import { layoutNats, onLayout } from "../support/a2a-layouts.ts";

// @ts-expect-error: the same test file, loaded again as a module of its own.
await onLayout("isolated", () => import("./a2a.test.ts?isolated"));

/** The Agent of a2a.test.ts, whose tasks are looked for. */
const ALICE = "a2a-agent";
const BUCKET = SHARED_BUCKETS.a2aTasks;
const works = (p: Promise<unknown>) =>
  p.then(
    () => true,
    () => false,
  );

describe("the boundary around an Agent's A2A tasks on the isolated layout", () => {
  it("another Agent of the tenant reads, lists, follows and changes none of alice's tasks, with its runtime's credential or as any user of its account", async () => {
    const nats = layoutNats();
    const alice = nats.account(ALICE)!;
    const tasks = await nats.tasks(ALICE);
    const own = await nats.connectAs(ALICE, "runtime");
    const heard: Record<string, string[]> = {};
    try {
      // One of her runtime's tasks (a2a.test.ts made them), else one written as her runtime would.
      let [key] = await tasks.keys("t.*.*");
      if (!key) await tasks.kv.put((key = "t.boundary.task-1"), JSON.stringify({ task: { id: "task-1" } }));
      const before = (await tasks.kv.get(key!))!;
      const subject = `$KV.${BUCKET}.${alice}.${key}`;
      const attackers: [string, NatsConnection][] = [
        ["mallory's runtime", await nats.connectAs("a2a-mallory", "runtime")],
        ["any user of mallory's account", await nats.connectAs("a2a-mallory", "any user")],
      ];
      // Alice's runtime hears her keys' changes; each attacker listens where they are published.
      const listen = (name: string, nc: NatsConnection, on: string) => {
        heard[name] = [];
        try {
          const sub = nc.subscribe(on);
          void (async () => {
            for await (const m of sub) heard[name]!.push(m.subject);
          })().catch(() => {});
        } catch {}
      };
      listen("alice", own, sharedKeyWatchSubject(BUCKET, alice));
      for (const [name, nc] of attackers) {
        listen(`${name}: alice's`, nc, sharedKeyWatchSubject(BUCKET, alice));
        listen(`${name}: everything`, nc, `${WATCH_PREFIX}.>`);
        await nc.flush().catch(() => {});
      }
      await own.flush();
      for (const [name, nc] of attackers) {
        const ask = (s: string, body = "") => nc.request(s, body, { timeout: 1_500 });
        // Read: a direct get of her task's key, by subject or by sequence.
        expect(await works(ask(`$JS.API.DIRECT.GET.KV_${BUCKET}.${subject}`)), `${name} reads the task`).toBe(false);
        expect(
          await works(ask(`$JS.API.DIRECT.GET.KV_${BUCKET}`, JSON.stringify({ seq: before.revision }))),
          `${name} reads the task by sequence`,
        ).toBe(false);
        // List: a consumer of her keys, the subjects of the bucket's stream.
        expect(
          await works(
            ask(
              `$JS.API.CONSUMER.CREATE.KV_${BUCKET}`,
              JSON.stringify({ stream_name: `KV_${BUCKET}`, config: { filter_subject: `$KV.${BUCKET}.${alice}.>` } }),
            ),
          ),
          `${name} makes a consumer of her keys`,
        ).toBe(false);
        expect(
          await works(ask(`$JS.API.STREAM.INFO.KV_${BUCKET}`, JSON.stringify({ subjects_filter: ">" }))),
          `${name} lists the bucket's subjects`,
        ).toBe(false);
        // Alter: a new value of her task, or a delete marker.
        expect(await works(ask(subject, JSON.stringify({ forged: true }))), `${name} changes the task`).toBe(false);
        expect(
          await works(nc.request(subject, "", { timeout: 1_500, headers: kvDelete() })),
          `${name} deletes the task`,
        ).toBe(false);
      }
      // A change of alice's keys (here the tenant's own write): alice hears it, no attacker does.
      await tasks.kv.put("t.probe.boundary", "{}");
      await waitFor("alice's runtime hears the change", () => heard.alice!.length > 0, 10_000);
      for (const [name, nc] of attackers) {
        // Their subscriptions were there before the change: a round trip after it brings what the server sent them.
        await nc.flush().catch(() => {});
        expect(heard[`${name}: alice's`], `${name} follows alice's keys`).toEqual([]);
        expect(heard[`${name}: everything`], `${name} follows the tenant's keys`).toEqual([]);
      }
      // Her task is as it was.
      const after = (await tasks.kv.get(key!))!;
      expect(after.revision).toBe(before.revision);
      expect(after.string()).toBe(before.string());
    } finally {
      await tasks.close();
    }
  }, 60_000);
});

/** The header a KV delete is published with (nats.js KV). */
function kvDelete() {
  const h = headers();
  h.set("KV-Operation", "DEL");
  return h;
}
