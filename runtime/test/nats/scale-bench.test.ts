// The scale bench's core (runtime/bench/scale.ts) at five agents on one real nats-server, every
// layout, and the isolated layout on a real three-node cluster in operator mode: the objects the
// product's code makes are all there, counted by JetStream itself, the Raft groups are those the
// servers run, and the figures it writes have their shape; the product's layout runs first; and
// each goal of the product's layout is judged met only within its bound.
import { describe, expect, it } from "vitest";
import { goalsOf, runScale, table, warmUps, type ScaleOptions, type SizeResult } from "../../bench/scale.ts";

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
    // The product's layout first, whatever the order asked for.
    expect(r.runs.map((x) => [x.layout, x.cluster, x.agents, x.made, x.failed])).toEqual([
      ["isolated", "single", 5, 5, 0],
      ["per-agent", "single", 5, 5, 0],
      ["shared", "single", 5, 5, 0],
    ]);
    expect(r.runs.map((x) => x.product)).toEqual([true, false, false]);
    const [isolated, own, shared] = r.runs as [(typeof r.runs)[0], (typeof r.runs)[0], (typeof r.runs)[0]];
    // The goals, of the product's layout on one server, at the one size asked for.
    expect(r.goals.map((g) => g.goal)).toEqual([
      "one server: 5 Agents made, none failed",
      "one server: peak RSS ≤ 1,536 MiB",
      "one server: after a restart, loaded in ≤ 30 s",
      "one server: creation ≥ 100 Agents/s",
      "one server: one agent's PubAck p50 at 5 and 5 Agents within 20 % of each other",
    ]);
    expect(r.goals.slice(0, 3).map((g) => g.met)).toEqual([true, true, true]);
    expect(r.goals[4]).toMatchObject({ met: false, figure: "not measured at both sizes" });
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
    // The ten messages timed and the one before them, stored (and there after the restart) in the one agent's inbox.
    expect(warmUps(10)).toBe(1);
    expect(own.restart!.afterRestart[0]!.messages - own.servers[0]!.messages).toBe(10 + 1);
    expect(isolated.restart!.afterRestart[0]!.messages - isolated.servers[0]!.messages).toBe(10 + 1);
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
    // The bench's own client is back after the servers stopped, before the restart's deadline
    // (when depends on its reconnection backoff and the machine's load, not only on the servers').
    expect(x!.restart!.clientReconnected).toBe(true);
    expect(x!.restart!.clientReconnectS).toBeGreaterThan(0);
    expect(x!.restart!.afterRestart.map((s) => s.raftGroups)).toEqual([15, 15, 15]);
  }, 90_000);
});

describe("bench:scale's bounds", () => {
  it("bound a comparison layout's run by its own deadline, not the product's, and start no restart past the whole bench's", async () => {
    const r = await runScale({
      ...SMALL,
      clusters: ["single"],
      layouts: ["per-agent", "isolated"],
      compareDeadlineMs: 1,
    });
    expect(r.runs.map((x) => [x.layout, x.made, x.boundedBy])).toEqual([
      ["isolated", 5, undefined],
      ["per-agent", 0, expect.stringMatching(/^the creation deadline \(.* min for the run\) passed$/)],
    ]);
    const late = await runScale({ ...SMALL, clusters: ["single"], layouts: ["isolated"], totalDeadlineMs: 1 });
    expect(late.runs).toHaveLength(1);
    expect(late.runs[0]).toMatchObject({
      made: 0,
      boundedBy: expect.stringMatching(/^the creation deadline of the whole bench/),
    });
    expect(late.runs[0]!.restart).toBeUndefined();
  }, 60_000);
});

describe("the goals of bench:scale", () => {
  const server = (peakRssMiB: number, raftGroups?: number) => ({
    server: "n0",
    rssMiB: peakRssMiB,
    peakRssMiB,
    fds: 10,
    varzMemMiB: 0,
    cpuPercent: 0,
    streams: 140,
    consumers: 0,
    messages: 0,
    storeMiB: 0,
    memStoreMiB: 0,
    apiTotal: 0,
    apiErrors: 0,
    ...(raftGroups !== undefined ? { raftGroups } : {}),
  });
  /** A size of the product's layout that meets every goal, changed by `over`. */
  const size = (cluster: "single" | "three", agents: number, over: Partial<SizeResult> = {}): SizeResult => {
    const servers = cluster === "single" ? [server(1000)] : [server(800, 141), server(800, 141), server(800, 141)];
    return {
      layout: "isolated",
      product: true,
      cluster,
      agents,
      made: agents,
      failed: 0,
      relays: 0,
      createS: agents / 200,
      createMsPerAgent: 5,
      streams: 140,
      consumers: 2 * agents,
      servers,
      publish: { n: 1000, p50Ms: 0.3, p99Ms: 2, maxMs: 5, errors: 0 },
      restart: {
        stopS: 1,
        listeningS: 1,
        jsEnabledS: 5,
        loadedS: 10,
        timedOut: false,
        clientReconnectS: 5,
        clientReconnected: true,
        afterRestart: servers,
      },
      ...(cluster === "three"
        ? { restartOne: { server: "n2", stopS: 1, listeningS: 1, currentS: 20, timedOut: false, after: servers[2]! } }
        : {}),
      tenants: 20,
      errors: {},
      progress: [],
      ...over,
    };
  };
  const SIZES = [1000, 10000];
  const verdicts = (runs: SizeResult[]) => Object.fromEntries(goalsOf(runs, SIZES).map((g) => [g.goal, g.met]));
  const good = () => [size("single", 1000), size("single", 10000), size("three", 1000), size("three", 10000)];

  it("are all met by runs within every bound, the creation rate over every size", () => {
    const goals = goalsOf(good(), SIZES);
    expect(goals).toHaveLength(10);
    expect(goals.filter((g) => !g.met)).toEqual([]);
    // 10,000 Agents made over 5 + 50 s.
    expect(goals.find((g) => g.goal === "one server: creation ≥ 100 Agents/s")!.figure).toMatch(/^181\.8 Agents\/s/);
    expect(goals.find((g) => /three servers: one agent's PubAck/.test(g.goal))!.figure).toBe(
      "0.3 ms and 0.3 ms, ratio 1",
    );
  });

  it("are not met past a bound, each by its own figure", () => {
    const at10k = (cluster: "single" | "three", over: Partial<SizeResult>) =>
      good().map((r) => (r.cluster === cluster && r.agents === 10000 ? { ...r, ...over } : r));
    const failedOne = verdicts(at10k("single", { made: 9999, failed: 1 }));
    expect(failedOne["one server: 10,000 Agents made, none failed"]).toBe(false);
    expect(Object.values(failedOne).filter((m) => !m)).toHaveLength(1);
    expect(verdicts(at10k("single", { failed: 1 }))["one server: 10,000 Agents made, none failed"]).toBe(false);
    expect(verdicts(at10k("single", { servers: [server(1537)] }))["one server: peak RSS ≤ 1,536 MiB"]).toBe(false);
    // A restarted process's peak counts too.
    const restartedPeak = size("single", 10000);
    restartedPeak.restart = { ...restartedPeak.restart!, afterRestart: [server(1600)] };
    expect(verdicts([size("single", 1000), restartedPeak])["one server: peak RSS ≤ 1,536 MiB"]).toBe(false);
    const slowRestart = at10k("single", { restart: { ...size("single", 1).restart!, loadedS: 30.1 } });
    expect(verdicts(slowRestart)["one server: after a restart, loaded in ≤ 30 s"]).toBe(false);
    const timedOut = at10k("single", { restart: { ...size("single", 1).restart!, timedOut: true } });
    expect(verdicts(timedOut)["one server: after a restart, loaded in ≤ 30 s"]).toBe(false);
    expect(verdicts(at10k("single", { createS: 200 }))["one server: creation ≥ 100 Agents/s"]).toBe(false);
    expect(
      verdicts(at10k("three", { servers: [server(800, 141), server(4097, 141), server(800, 141)] }))[
        "three servers: peak RSS ≤ 4,096 MiB per server"
      ],
    ).toBe(false);
    const slowOne = at10k("three", { restartOne: { ...size("three", 1).restartOne!, currentS: 61 } });
    expect(verdicts(slowOne)["three servers: a restarted server current again in ≤ 60 s"]).toBe(false);
    const growing = at10k("three", { servers: [server(800, 142), server(800, 141), server(800, 141)] });
    expect(verdicts(growing)["three servers: Raft groups reported, not growing with the Agents"]).toBe(false);
    const unreported = good().map((r) =>
      r.cluster === "three" ? { ...r, servers: [server(800), server(800), server(800)] } : r,
    );
    expect(verdicts(unreported)["three servers: Raft groups reported, not growing with the Agents"]).toBe(false);
  });

  it("judge the PubAck latency at the smallest and the largest size within 20 % of each other, either way", () => {
    const latencyGoal = "one server: one agent's PubAck p50 at 1,000 and 10,000 Agents within 20 % of each other";
    const at = (p50Ms: number) => [
      size("single", 1000),
      size("single", 10000, { publish: { n: 1000, p50Ms, p99Ms: 2, maxMs: 5, errors: 0 } }),
    ];
    expect(verdicts(at(0.36))[latencyGoal]).toBe(true);
    expect(verdicts(at(0.37))[latencyGoal]).toBe(false);
    expect(verdicts(at(0.25))[latencyGoal]).toBe(true);
    expect(verdicts(at(0.24))[latencyGoal]).toBe(false);
    expect(goalsOf(at(0.37), SIZES).find((g) => g.goal === latencyGoal)!.figure).toBe("0.3 ms and 0.37 ms, ratio 1.23");
    // A size not measured (its run bounded before it) meets nothing.
    const bounded = [size("single", 1000), size("single", 5000, { made: 4000, boundedBy: "the creation deadline" })];
    const v = verdicts(bounded);
    expect(v["one server: 10,000 Agents made, none failed"]).toBe(false);
    expect(v[latencyGoal]).toBe(false);
    expect(goalsOf(bounded, SIZES)[0]!.figure).toBe("4,000 made, 0 failed (the creation deadline)");
  });
});
