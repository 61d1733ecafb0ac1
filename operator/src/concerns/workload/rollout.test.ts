import { describe, expect, it } from "vitest";
import { parseRolloutLimit, resolveRolloutLimit, RolloutGate, rolloutSettled } from "./rollout.ts";
import type { DeploymentLike } from "../../reconcile/conditions.ts";

const dep = (
  generation: number,
  status: Partial<NonNullable<DeploymentLike["status"]>> = {},
  replicas = 1,
): DeploymentLike => ({
  metadata: { generation },
  spec: { replicas },
  status: {
    observedGeneration: generation,
    replicas,
    updatedReplicas: replicas,
    readyReplicas: replicas,
    availableReplicas: replicas,
    ...status,
  },
});

describe("rollout limits", () => {
  it("parses a count or a percentage, resolved against the number of Agents (rounded up, at least one)", () => {
    expect(parseRolloutLimit("10")).toEqual({ count: 10 });
    expect(parseRolloutLimit("25%")).toEqual({ percent: 25 });
    expect(resolveRolloutLimit({ percent: 25 }, 200)).toBe(50);
    expect(resolveRolloutLimit({ percent: 25 }, 3)).toBe(1);
    expect(resolveRolloutLimit({ percent: 25 }, 0)).toBe(1);
    expect(resolveRolloutLimit({ count: 10 }, 3)).toBe(10);
    for (const bad of ["0", "101%", "", "x", "-2", "2.5"]) expect(() => parseRolloutLimit(bad)).toThrow();
  });

  it("calls a rollout settled only when the new generation is observed, updated and available, with no old pod left", () => {
    expect(rolloutSettled(dep(2))).toBe(true);
    expect(rolloutSettled(dep(2, { observedGeneration: 1 }))).toBe(false);
    expect(rolloutSettled(dep(2, { updatedReplicas: 0 }))).toBe(false);
    expect(rolloutSettled(dep(2, { availableReplicas: 0 }))).toBe(false);
    expect(rolloutSettled(dep(2, { replicas: 2 }))).toBe(false);
    expect(rolloutSettled(dep(2, { replicas: 0, updatedReplicas: 0, availableReplicas: 0 }, 0))).toBe(true);
  });
});

describe("RolloutGate", () => {
  it("admits at most max Agents until their Deployments settle at a newer generation", () => {
    const deps = new Map<string, DeploymentLike>([
      ["a", dep(1)],
      ["b", dep(1)],
      ["c", dep(1)],
    ]);
    const gate = new RolloutGate({ count: 2 });
    const admit = (k: string, forced = false) =>
      gate.admit(k, deps.get(k)!, { agents: 3, forced, deploymentOf: (x) => deps.get(x) });
    expect(admit("a").ok).toBe(true);
    expect(admit("b").ok).toBe(true);
    expect(admit("c")).toEqual({ ok: false, rolling: 2, max: 2 });
    // A cache that has not seen a's change yet (still generation 1, settled) does not free its place.
    expect(admit("c").ok).toBe(false);
    deps.set("a", dep(2, { availableReplicas: 0 }));
    expect(admit("c").ok).toBe(false);
    expect(admit("a").ok).toBe(true); // an admitted Agent keeps its place
    deps.set("a", dep(2));
    expect(admit("c").ok).toBe(true);
  });

  it("never holds back a change the Agent's own spec asked for, but counts it", () => {
    const deps = new Map<string, DeploymentLike>([
      ["a", dep(1)],
      ["b", dep(1)],
    ]);
    const gate = new RolloutGate({ count: 1 });
    expect(gate.admit("a", dep(1), { agents: 2, forced: true, deploymentOf: (x) => deps.get(x) }).ok).toBe(true);
    expect(gate.admit("b", dep(1), { agents: 2, forced: false, deploymentOf: (x) => deps.get(x) }).ok).toBe(false);
    // A deleted Agent frees its place.
    deps.delete("a");
    expect(gate.admit("b", dep(1), { agents: 1, forced: false, deploymentOf: (x) => deps.get(x) }).ok).toBe(true);
    gate.forget("b");
    expect(gate.size).toBe(0);
  });
});
