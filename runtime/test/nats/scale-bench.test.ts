// The scale bench's core (runtime/bench/scale.ts) at five agents on one real nats-server, every
// layout: the objects the product's code makes are all there, counted by JetStream itself, and
// the figures it writes have their shape.
import { describe, expect, it } from "vitest";
import { runScale, table } from "../../bench/scale.ts";

describe("bench:scale at five agents", () => {
  it("makes each layout's objects and measures memory, files, restart and PubAck latency", async () => {
    const r = await runScale({
      agents: [5],
      relays: 1,
      clusters: ["single"],
      layouts: ["per-agent", "shared", "isolated"],
      concurrency: 2,
      publishes: 10,
      createDeadlineMs: 60_000,
      restartDeadlineMs: 60_000,
      restart: true,
      maxFileStore: "1P",
      log: () => {},
    });
    expect(r.natsServer).toMatch(/^2\./);
    expect(r.runs.map((x) => [x.layout, x.cluster, x.agents, x.made, x.failed])).toEqual([
      ["per-agent", "single", 5, 5, 0],
      ["shared", "single", 5, 5, 0],
      ["isolated", "single", 5, 5, 0],
    ]);
    expect(r.runs.map((x) => x.product)).toEqual([true, false, false]);
    const [own, shared, isolated] = r.runs as [(typeof r.runs)[0], (typeof r.runs)[0], (typeof r.runs)[0]];
    // Per agent: inbox, outbox, three KV buckets and the ifp_agents bucket of its own account; the relay's stream and bucket.
    expect(own.streams).toBe(5 * 6 + 2);
    // Shared: IFP_INBOX, IFP_OUTBOX, three shared buckets, ifp_agents, the relay's two.
    expect(shared.streams).toBe(2 + 3 + 1 + 2);
    // Isolated: the one tenant's data account, IFP_INBOX, IFP_OUTBOX and four buckets; no relay.
    expect(isolated.streams).toBe(2 + 4);
    for (const x of r.runs) {
      // The handler's and the sender's of each agent, and the relay's subscriptions watch.
      expect(x.consumers).toBe(5 * 2 + (x.layout === "isolated" ? 0 : 1));
      expect(x.errors).toEqual({});
      expect(x.boundedBy).toBeUndefined();
      expect(x.servers).toHaveLength(1);
      expect(x.servers[0]!.rssMiB).toBeGreaterThan(1);
      expect(x.servers[0]!.fds).toBeGreaterThan(3);
      expect(x.servers[0]!.streams).toBe(x.streams);
      expect(x.publish).toMatchObject({ n: 10, errors: 0 });
      expect(x.publish.p50Ms).toBeGreaterThan(0);
      expect(x.publish.p99Ms).toBeGreaterThanOrEqual(x.publish.p50Ms);
      expect(x.restart?.timedOut).toBe(false);
      expect(x.restart!.loadedS).toBeGreaterThanOrEqual(x.restart!.jsEnabledS);
      expect(x.restart!.afterRestart[0]!.streams).toBe(x.streams);
    }
    // The ten messages timed, stored (and there after the restart) in the one agent's inbox.
    expect(own.restart!.afterRestart[0]!.messages - own.servers[0]!.messages).toBe(10);
    expect(isolated.restart!.afterRestart[0]!.messages - isolated.servers[0]!.messages).toBe(10);
    expect(table(r.runs).split("\n")).toHaveLength(4);
  }, 60_000);
});
