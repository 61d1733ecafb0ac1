// The scale bench's core (runtime/bench/scale.ts) at five agents on one real nats-server, every
// layout, and the isolated layout on a real three-node cluster in operator mode: the objects the
// product's code makes are all there, counted by JetStream itself, the Raft groups are those the
// servers run, and the figures it writes have their shape.
import { describe, expect, it } from "vitest";
import { runScale, table, type ScaleOptions } from "../../bench/scale.ts";

const SMALL: Omit<ScaleOptions, "clusters" | "layouts"> = {
  agents: [5],
  relays: 1,
  tenants: 2,
  concurrency: 2,
  publishes: 10,
  createDeadlineMs: 60_000,
  compareDeadlineMs: 60_000,
  totalDeadlineMs: 120_000,
  rssBudgetMiB: { single: 0, three: 0 },
  restartDeadlineMs: 60_000,
  restart: true,
  maxFileStore: "1P",
  log: () => {},
};

describe("bench:scale at five agents", () => {
  it("makes each layout's objects and measures memory, files, restart and PubAck latency", async () => {
    const r = await runScale({ ...SMALL, clusters: ["single"], layouts: ["per-agent", "shared", "isolated"] });
    expect(r.natsServer).toMatch(/^2\./);
    expect(r.runs.map((x) => [x.layout, x.cluster, x.agents, x.made, x.failed])).toEqual([
      ["per-agent", "single", 5, 5, 0],
      ["shared", "single", 5, 5, 0],
      ["isolated", "single", 5, 5, 0],
    ]);
    expect(r.runs.map((x) => x.product)).toEqual([false, false, true]);
    const [own, shared, isolated] = r.runs as [(typeof r.runs)[0], (typeof r.runs)[0], (typeof r.runs)[0]];
    // Per agent: inbox, outbox, three KV buckets and the ifp_agents bucket of its own account; the relay's stream and bucket.
    expect(own.streams).toBe(5 * 6 + 2);
    // Shared: IFP_INBOX, IFP_OUTBOX, three shared buckets, ifp_agents, the relay's two.
    expect(shared.streams).toBe(2 + 3 + 1 + 2);
    // Isolated: each of the two tenants' data accounts, IFP_INBOX, IFP_OUTBOX and five buckets (A2A tasks among them); no relay.
    expect(isolated.streams).toBe(2 * (2 + 5));
    expect(isolated.tenants).toBe(2);
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
      expect(x.restartOne).toBeUndefined();
      expect(x.servers[0]!.raftGroups).toBeUndefined();
    }
    // The ten messages timed, stored (and there after the restart) in the one agent's inbox.
    expect(own.restart!.afterRestart[0]!.messages - own.servers[0]!.messages).toBe(10);
    expect(isolated.restart!.afterRestart[0]!.messages - isolated.servers[0]!.messages).toBe(10);
    expect(table(r.runs).split("\n")).toHaveLength(4);
  }, 60_000);

  it("runs the isolated layout on three servers in operator mode: R3 tenant streams, R1 consumers, one server restarted", async () => {
    const r = await runScale({ ...SMALL, clusters: ["three"], layouts: ["isolated"] });
    const [x] = r.runs;
    expect(x).toMatchObject({ layout: "isolated", cluster: "three", made: 5, failed: 0, errors: {}, tenants: 2 });
    expect(x!.boundedBy).toBeUndefined();
    // Two tenants' seven streams each; each agent's two consumers, each on one server.
    expect(x!.streams).toBe(14);
    expect(x!.consumers).toBe(10);
    expect(x!.servers).toHaveLength(3);
    for (const s of x!.servers) {
      // Every server holds a replica of every tenant stream, and runs their Raft groups and the meta group: no consumer's.
      expect(s.streams).toBe(14);
      expect(s.raftGroups).toBe(14 + 1);
      expect(s.haAssets).toBe(14 + 1);
    }
    expect(x!.servers.reduce((n, s) => n + s.consumers, 0)).toBe(10);
    expect(x!.publish).toMatchObject({ n: 10, errors: 0 });
    expect(x!.restartOne).toMatchObject({ server: "n2", timedOut: false });
    expect(x!.restartOne!.after.streams).toBe(14);
    expect(x!.restart?.timedOut).toBe(false);
    // The bench's own client is back once a server is: after the servers stopped, within the restart.
    expect(x!.restart!.clientReconnectS).toBeGreaterThan(0);
    expect(x!.restart!.clientReconnectS).toBeLessThanOrEqual(x!.restart!.loadedS);
    expect(x!.restart!.afterRestart.map((s) => s.raftGroups)).toEqual([15, 15, 15]);
  }, 90_000);
});
