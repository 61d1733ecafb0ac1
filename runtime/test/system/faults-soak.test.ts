import { describe, expect, it } from "vitest";
import { OUTAGE_ANSWER_S, runFaults, SOAK_BOUND, table } from "../../bench/faults.ts";
import { layoutOf } from "../../bench/runtime-layouts.ts";

// The part of `npm run test:faults` that fits in CI: each kill -9 under a shorter load, fewer
// slow clients and a short soak.
describe("hardening: faults, slow clients and a soak against the real runtimes", () => {
  it("loses no message answered 202 when nats-server, the agent or the relay is killed under load, answers 503 at once while NATS is down, cuts slow clients off without starving others, soaks within its bound", async () => {
    const r = await runFaults({ loadSeconds: 9, concurrency: 6, slowClients: 2, soakSeconds: 8 });
    const report = table(r);
    expect(
      r.faults.map((f) => f.fault),
      report,
    ).toEqual(["kill -9 nats-server", "kill -9 agent runtime", "kill -9 nats (2nd start)", "kill -9 relay runtime"]);
    for (const f of r.faults) {
      expect(f.accepted, `${f.fault}\n${report}`).toBeGreaterThan(0);
      expect(f.lost, `${f.fault}\n${report}`).toBe(0);
      expect(f.acceptedDuringOutage, `${f.fault}\n${report}`).toBe(0);
      // Back to accepting after the restart.
      expect(f.recoveryS, `${f.fault}\n${report}`).toBeGreaterThan(0);
    }
    // Every request sent while the component was down was refused: 503, or no connection when
    // the runtime itself was killed.
    for (const f of r.faults)
      expect(
        Object.keys(f.duringOutage).every((s) => s === "503" || s === "0"),
        `${f.fault}\n${report}`,
      ).toBe(true);
    // NATS away for 3 s under 6 workers: requests were both under way at the kill and sent during
    // the outage, and none of them waited past a few seconds for NATS to return — those under way
    // were answered at the disconnect (202 if stored before it, else 503), not at the 5 s timeout.
    const nats = r.faults[0]!;
    expect(
      Object.values(nats.inFlightAtKill).reduce((a, b) => a + b, 0),
      report,
    ).toBeGreaterThan(0);
    expect(
      Object.keys(nats.inFlightAtKill).every((s) => s === "503" || s === "202"),
      report,
    ).toBe(true);
    expect(nats.inFlightLongestS, report).toBeLessThanOrEqual(OUTAGE_ANSWER_S);
    expect(nats.duringOutage["503"] ?? 0, report).toBeGreaterThan(0);
    expect(nats.outageLongestS, report).toBeLessThanOrEqual(OUTAGE_ANSWER_S);
    for (const s of r.slowClients.results) {
      expect(s.closed, `${s.kind}\n${report}`).toBe(s.connections);
      expect(s.longestS, `${s.kind}\n${report}`).toBeLessThan(40);
    }
    expect(r.slowClients.others.ok, report).toBe(r.slowClients.others.sent);
    expect(r.soak.errors, report).toBe(0);
    // No growth beyond the stated bound between the soak's first and last tenth.
    expect(r.soak.p99Ms.end, report).toBeLessThanOrEqual(
      r.soak.p99Ms.start * SOAK_BOUND.p99Factor + SOAK_BOUND.p99SlackMs,
    );
    expect(r.soak.rssMiB.end, report).toBeLessThanOrEqual(r.soak.rssMiB.start + SOAK_BOUND.rssGrowthMiB);
    expect(r.soak.rssMiB.start, report).toBeGreaterThan(0);
    expect(r.soak.bound.within, report).toBe(true);
  }, 300_000);
});

describe("the NATS layout of test:faults and test:cluster", () => {
  it("is the product's, isolated, unless `--layout per-agent` says otherwise; another name is refused", () => {
    expect(layoutOf([])).toBe("isolated");
    expect(layoutOf(["--layout", "per-agent"])).toBe("per-agent");
    expect(layoutOf(["--layout=per-agent"])).toBe("per-agent");
    expect(layoutOf(["--layout", "isolated"])).toBe("isolated");
    expect(() => layoutOf(["--layout", "shared"])).toThrow("--layout takes isolated or per-agent");
    expect(() => layoutOf(["--layout"])).toThrow("--layout takes isolated or per-agent");
  });
});
