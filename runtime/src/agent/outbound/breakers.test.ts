// The per-destination circuit, on a clock the test moves: closed, open at the threshold, one probe
// when half-open, closed on its success or open again on its failure, the in-flight cap, and a
// 4xx (a success) resetting the count.
import { describe, expect, it } from "vitest";
import { type Admission, Breakers, MAX_LISTED_CIRCUITS } from "./breakers.ts";

const OPTS = { failureThreshold: 3, coolDownMs: 1_000, maxInFlight: 2, timeoutMs: 500 };

function admitted(a: Admission) {
  if (!a.admitted) throw new Error(`held back: ${a.error}`);
  return a;
}

describe("Breakers", () => {
  it("opens after the threshold, holds back until the cool-down, lets one probe through, and closes on its success", () => {
    let now = 0;
    const b = new Breakers(OPTS, undefined, () => now);
    for (let i = 0; i < 3; i++) admitted(b.admit("d")).done("failure");
    expect(b.state("d")).toBe("open");
    expect(b.admit("d")).toMatchObject({ admitted: false, reason: "open", retryAt: 1_000 });
    now = 1_000;
    expect(b.state("d")).toBe("half-open");
    const probe = admitted(b.admit("d"));
    expect(b.admit("d")).toMatchObject({ admitted: false, reason: "half-open" });
    probe.done("success");
    expect(b.state("d")).toBe("closed");
    admitted(b.admit("d")).done("success");
  });

  it("opens again for a cool-down when the probe fails", () => {
    let now = 0;
    const b = new Breakers(OPTS, undefined, () => now);
    for (let i = 0; i < 3; i++) admitted(b.admit("d")).done("failure");
    now = 1_500;
    admitted(b.admit("d")).done("failure");
    expect(b.state("d")).toBe("open");
    expect(b.admit("d")).toMatchObject({ admitted: false, reason: "open", retryAt: 2_500 });
  });

  it("counts only consecutive failures, and keeps each destination apart", () => {
    const b = new Breakers(OPTS);
    for (const r of ["failure", "failure", "success", "failure", "failure"] as const) admitted(b.admit("d")).done(r);
    expect(b.state("d")).toBe("closed");
    for (let i = 0; i < 3; i++) admitted(b.admit("e")).done("failure");
    expect([b.state("d"), b.state("e")]).toEqual(["closed", "open"]);
  });

  it("holds back a delivery beyond maxInFlight until one ends", () => {
    const b = new Breakers(OPTS);
    const [x] = [admitted(b.admit("d")), admitted(b.admit("d"))];
    expect(b.admit("d")).toMatchObject({ admitted: false, reason: "busy" });
    x!.done("success");
    x!.done("success");
    admitted(b.admit("d"));
    expect(b.admit("d")).toMatchObject({ admitted: false, reason: "busy" });
  });

  it("lists the circuits not closed, open ones with when their probe is let through, at most 100 of them", () => {
    let now = 0;
    const b = new Breakers({ ...OPTS, failureThreshold: 1 }, undefined, () => now);
    admitted(b.admit("early")).done("failure");
    now = 500;
    admitted(b.admit("late")).done("failure");
    admitted(b.admit("fine")).done("success");
    admitted(b.admit("failing-once-closed")).done("success");
    expect(b.circuits()).toEqual({
      total: 2,
      circuits: [
        { destination: "late", state: "open", failures: 1, open_until: new Date(1_500).toISOString() },
        { destination: "early", state: "open", failures: 1, open_until: new Date(1_000).toISOString() },
      ],
    });
    now = 1_200;
    expect(b.circuits().circuits[1]).toEqual({ destination: "early", state: "half-open", failures: 1 });
    admitted(b.admit("early")).done("success");
    expect(b.circuits().circuits.map((c) => c.destination)).toEqual(["late"]);
    for (let i = 0; i < MAX_LISTED_CIRCUITS + 20; i++) admitted(b.admit(`d${i}`)).done("failure");
    expect(b.circuits().circuits).toHaveLength(MAX_LISTED_CIRCUITS);
    expect(b.circuits().total).toBe(MAX_LISTED_CIRCUITS + 21);
  });
});
