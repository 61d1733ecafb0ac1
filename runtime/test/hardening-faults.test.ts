import { describe, expect, it } from "vitest";
import { runFaults, table } from "../bench/faults.ts";

// The part of `npm run test:faults` that fits in CI: each kill -9 under a shorter load, fewer
// slow clients and a short soak.
describe("hardening: faults, slow clients and a soak against the real runtimes", () => {
  it("loses no message answered 202 when nats-server, the agent or the relay is killed under load, never answers 202 while NATS is down, cuts slow clients off without starving others", async () => {
    const r = await runFaults({ loadSeconds: 9, concurrency: 6, slowClients: 2, soakSeconds: 8 });
    const report = table(r);
    expect(r.faults.map((f) => f.fault), report).toEqual(["kill -9 nats-server", "kill -9 agent runtime", "kill -9 relay runtime"]);
    for (const f of r.faults) {
      expect(f.accepted, `${f.fault}\n${report}`).toBeGreaterThan(0);
      expect(f.lost, `${f.fault}\n${report}`).toBe(0);
      expect(f.acceptedDuringOutage, `${f.fault}\n${report}`).toBe(0);
      // Back to accepting after the restart.
      expect(f.recoveryS, `${f.fault}\n${report}`).toBeGreaterThan(0);
    }
    // While NATS was down, what was sent got 503 or waited for NATS to come back: never a lie.
    expect(Object.keys(r.faults[0]!.duringOutage).every((s) => s === "503" || s === "202"), report).toBe(true);
    for (const s of r.slowClients.results) {
      expect(s.closed, `${s.kind}\n${report}`).toBe(s.connections);
      expect(s.longestS, `${s.kind}\n${report}`).toBeLessThan(40);
    }
    expect(r.slowClients.others.ok, report).toBe(r.slowClients.others.sent);
    expect(r.soak.errors, report).toBe(0);
  }, 300_000);
});
