// The A2A face's tests (a2a.test.ts) on the isolated NATS layout (docs/scale.md): the runtime's
// tasks in its tenant's shared bucket, under its own account key, through its imports only. And
// the boundary around them: another Agent of the same tenant, with its runtime's credential or as
// any user of its account, reads, lists, follows and changes none of them.
import { KvWatchInclude } from "@nats-io/kv";
import { headers, type NatsConnection } from "@nats-io/transport-node";
import pino from "pino";
import { describe, expect, it } from "vitest";
import { waitFor } from "../../../e2e/support/ports.ts";
import { TASK_INDEX } from "../../src/contract/key-indexes.ts";
import { agentInboxPrefix } from "../../src/contract/nats-permissions.ts";
import { SHARED_BUCKETS, sharedKeyWatchSubject, WATCH_PREFIX } from "../../src/contract/shared-layout.ts";
import { Nats } from "../../src/nats/connection.ts";
import { isolatedLayout } from "../../src/nats/layout.ts";
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

describe("an Agent's task keys followed across a NATS restart on the isolated layout", () => {
  it("a watch of one key goes on with the changes after the reconnect; a watch of many ends, for its caller to watch again from the current values", async () => {
    const nats = layoutNats();
    const agentId = "a2a-follower";
    const { natsCredsFile } = await nats.runAgentNats(agentId);
    const conn = new Nats(
      {
        url: nats.url,
        credsFile: natsCredsFile,
        layout: isolatedLayout(nats.account(agentId)!),
        inboxPrefix: agentInboxPrefix(agentId),
        name: "a2a follower",
      },
      pino({ level: "silent" }),
    );
    await conn.start();
    try {
      const kv = await conn.bucket(SHARED_BUCKETS.a2aTasks, { history: 5 }, TASK_INDEX);
      await kv.create("t.caller.task-1", "first");
      const one = await kv.watch({ key: "t.caller.task-1" });
      const many = await kv.watch({ key: "t.>", include: KvWatchInclude.UpdatesOnly });
      const seen: string[] = [];
      let ended = false;
      void (async () => {
        for await (const e of one) seen.push(e.string());
      })();
      void (async () => {
        for await (const _ of many);
        ended = true;
      })();
      await waitFor("the key's current value", () => seen.includes("first"), 10_000);
      await kv.put("t.caller.task-1", "second");
      await waitFor("its change", () => seen.includes("second"), 10_000);
      expect(ended).toBe(false);
      await nats.restart();
      await waitFor("the watch of many keys ended", () => ended, 30_000);
      // Written once the connection is back (tried until it is): the watch of one key has it.
      await waitFor(
        "a change after the restart written",
        () =>
          kv.put("t.caller.task-1", "third").then(
            () => true,
            () => false,
          ),
        30_000,
      );
      await waitFor("the change after the restart", () => seen.includes("third"), 15_000);
      expect(seen.filter((v) => v === "third")).toHaveLength(1);
      one.stop();
      // Listed where the layout keeps its listings: a watch of many from the current values sees the task.
      const again = await kv.watch({ key: "t.caller.*" });
      const first = await again[Symbol.asyncIterator]().next();
      expect(first.value?.key).toBe("t.caller.task-1");
      again.stop();
    } finally {
      await conn.close();
    }
  }, 90_000);
});

/** The header a KV delete is published with (nats.js KV). */
function kvDelete() {
  const h = headers();
  h.set("KV-Operation", "DEL");
  return h;
}
