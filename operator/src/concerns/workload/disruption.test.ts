import { describe, expect, it } from "vitest";
import { Agent } from "../../../../runtime/src/resources/agent.ts";
import { Relay } from "../../../../runtime/src/resources/relay.ts";
import { DisruptionSpec } from "../../../../runtime/src/resources/disruption.ts";
import { disruptionBudget } from "./disruption.ts";
import type { Owner } from "../../reconcile/settings.ts";

const agent: Owner = { kind: "Agent", metadata: { name: "alice", namespace: "team", uid: "uid-1" } };
const relay: Owner = { kind: "Relay", metadata: { name: "hub", namespace: "team", uid: "uid-2" } };

describe("disruptionBudget", () => {
  it("allows one pod down at a time for a runtime of more than one replica, selecting its pods", () => {
    const pdb = disruptionBudget(agent, 2, DisruptionSpec.parse({}))!;
    expect(pdb).toMatchObject({
      apiVersion: "policy/v1",
      kind: "PodDisruptionBudget",
      metadata: {
        name: "alice",
        namespace: "team",
        ownerReferences: [expect.objectContaining({ kind: "Agent", uid: "uid-1", controller: true })],
      },
    });
    expect(pdb.spec).toEqual({
      maxUnavailable: 1,
      selector: { matchLabels: { "app.kubernetes.io/name": "ifp-runtime", "app.kubernetes.io/instance": "alice" } },
      unhealthyPodEvictionPolicy: "AlwaysAllow",
    });
    expect(disruptionBudget(relay, 5, { enabled: true, maxUnavailable: "40%" })!.spec!.maxUnavailable).toBe("40%");
    expect(disruptionBudget(relay, 3, undefined)!.metadata!.name).toBe("hub");
  });

  it("renders none for one replica, none scaled to zero, none when turned off", () => {
    expect(disruptionBudget(agent, 1, DisruptionSpec.parse({}))).toBeUndefined();
    expect(disruptionBudget(agent, 0, DisruptionSpec.parse({}))).toBeUndefined();
    expect(disruptionBudget(agent, 4, { enabled: false, maxUnavailable: 1 })).toBeUndefined();
  });
});

describe("spec.disruption", () => {
  const base = {
    apiVersion: "ifp.dev/v1alpha1",
    metadata: { name: "x", namespace: "n" },
  };
  const agentSpec = { agentId: "https://a.example/x", capabilities: [] };
  it("defaults to a budget of one pod on both kinds", () => {
    expect(DisruptionSpec.parse({})).toEqual({ enabled: true, maxUnavailable: 1 });
    const a = Agent.safeParse({ ...base, kind: "Agent", spec: agentSpec });
    if (a.success) expect(a.data.spec.disruption).toEqual({ enabled: true, maxUnavailable: 1 });
    const shape = (Relay as unknown as { shape: { spec: { shape: Record<string, unknown> } } }).shape.spec.shape;
    expect(Object.keys(shape)).toContain("disruption");
  });

  it.each([
    [{ maxUnavailable: 0 }, /maxUnavailable/],
    [{ maxUnavailable: -1 }, /maxUnavailable/],
    [{ maxUnavailable: 1.5 }, /maxUnavailable/],
    [{ maxUnavailable: "0%" }, /maxUnavailable/],
    [{ maxUnavailable: "101%" }, /maxUnavailable/],
    [{ maxUnavailable: "half" }, /maxUnavailable/],
    [{ maxUnavailable: "1" }, /maxUnavailable/],
    [{ enabled: "no" }, /enabled/],
  ])("refuses %j", (value, path) => {
    const r = DisruptionSpec.safeParse(value);
    expect(r.success).toBe(false);
    expect(r.error!.issues.map((i) => i.path.join(".")).join(" ")).toMatch(path);
  });

  it("takes a number or a percentage", () => {
    expect(DisruptionSpec.parse({ maxUnavailable: 2 }).maxUnavailable).toBe(2);
    expect(DisruptionSpec.parse({ maxUnavailable: "100%" }).maxUnavailable).toBe("100%");
    expect(DisruptionSpec.parse({ enabled: false }).enabled).toBe(false);
  });
});
