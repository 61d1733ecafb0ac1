// Scale-out, CI-sized (`npm run test:cluster` is the full run): a real three-node JetStream
// cluster on loopback, streams with three replicas, two replicas of the agent runtime and two of
// the relay runtime (the `ifp-runtime` command), one node killed with SIGKILL under signed
// traffic and started again (runtime/bench/cluster.ts).
import { describe, expect, it } from "vitest";
import { failures, runCluster, table } from "../../bench/cluster.ts";

describe("scale-out: one node of a three-node JetStream cluster killed under load", () => {
  it("loses nothing answered 202, never answers 202 without a quorum, and both replicas of each runtime serve and come back", async () => {
    // 9 s of load: the kill at 3 s; the node stays down at least 3 s and until every runtime
    // replica answered 202 without it, for 20 s at most; the load goes on until every replica
    // answered 202 after its restart. Two workers per flow keep a loaded two-core machine responsive.
    const r = await runCluster({ seconds: 9, concurrency: 2, replicas: 3, maxDownS: 20 });
    const report = table(r);
    process.stdout.write(`${report}\n`);
    expect(r.killed.held.length, report).toBeGreaterThan(0);
    for (const f of r.flows) {
      expect(f.accepted, `${f.flow}\n${report}`).toBeGreaterThan(0);
      // Every message answered 202 reached the handler (agent) or was pulled (relay).
      expect(f.lost, `${f.flow}\n${report}`).toBe(0);
      // No 202 while the stream had no quorum of current replicas (202 means durable).
      expect(f.acceptedNotDurable, `${f.flow}\n${report}`).toBe(0);
      for (const x of f.replicas) {
        // Both replicas of each runtime took traffic: answered 202, and handed messages on (or had them pulled through it).
        expect(x.accepted, `${x.replica}\n${report}`).toBeGreaterThan(0);
        expect(x.delivered, `${x.replica}\n${report}`).toBeGreaterThan(0);
        // And recovered: a 202 after the kill, and after the node came back.
        expect(x.recoveryS, `${x.replica}\n${report}`).toBeGreaterThanOrEqual(0);
        expect(x.acceptedAfterRestart, `${x.replica}\n${report}`).toBeGreaterThan(0);
      }
    }
    // Both runtimes went on without the node: the relay's stream (led from the killed node)
    // elected another leader, and every replica of the relay and of the agent (whose KV buckets,
    // read for every inbound message, are replicated like its streams) answered 202 while the
    // node was still down.
    const relay = r.flows.find((f) => f.flow.startsWith("relay"))!;
    expect(
      r.killed.led.some((s) => s.startsWith("IFP_RELAY_")),
      report,
    ).toBe(true);
    expect(relay.notDurableS, report).toBeGreaterThan(0);
    for (const f of r.flows)
      for (const x of f.replicas) expect(x.acceptedWhileDown, `${x.replica}\n${report}`).toBeGreaterThan(0);
    // The restarted node caught up: every node healthy, its streams current.
    expect(r.clusterHealthyAtEnd, report).toBe(true);
    expect(failures(r), report).toEqual([]);
  }, 240_000);
});
