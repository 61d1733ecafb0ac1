// The runtimes' PodDisruptionBudgets against a real API server with the operator running: an
// Agent or Relay of more than one replica gets one that selects its pods, allowing
// spec.disruption.maxUnavailable (1 by default) down at once; scaled to one replica, or with
// spec.disruption.enabled false, it is deleted with an Event saying why; one deleted by hand is
// made again; the API server refuses a malformed spec.disruption.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startControlPlane, type ControlPlane } from "../../../e2e/support/controlplane.ts";
import { startManager, type RunningManager } from "../../src/commands/manager.ts";
import { capturedLog, getOrAbsent, kubectlOrError, perTest, until } from "../support/helpers.ts";

let cp: ControlPlane;
let manager: RunningManager | undefined;
const NS = "drain";
const operatorLog = capturedLog(600);

const get = (kind: string, name: string) => getOrAbsent(cp, ["-n", NS, "get", kind, name]);
const apply = (obj: object) => cp.kubectl(["apply", "-f", "-"], JSON.stringify(obj));
const agent = (name: string, spec: object = {}) => ({
  apiVersion: "ifp.dev/v1alpha1",
  kind: "Agent",
  metadata: { name, namespace: NS },
  spec: { agentId: `${name}-id`, ...spec },
});
const relay = (name: string, spec: object = {}) => ({
  apiVersion: "ifp.dev/v1alpha1",
  kind: "Relay",
  metadata: { name, namespace: NS },
  spec: { url: `https://${name}.example`, ...spec },
});
const events = (name: string) =>
  cp.json(["-n", NS, "get", "events", "--field-selector", `involvedObject.name=${name}`]).items as any[];
const budget = (name: string) => until(`PodDisruptionBudget ${name}`, () => get("pdb", name), 45_000);
const gone = (name: string) =>
  until(`PodDisruptionBudget ${name} deleted`, () => (get("pdb", name) ? undefined : true), 45_000);

perTest(() =>
  [
    "operator log (last 120 lines):",
    ...operatorLog.lines().slice(-120),
    kubectlOrError(cp, ["-n", NS, "get", "agents,relays,deployments,pdb", "-o", "wide"]),
    kubectlOrError(cp, ["-n", NS, "get", "events", "--sort-by=.lastTimestamp"]).split("\n").slice(-30).join("\n"),
  ].join("\n"),
);

beforeAll(async () => {
  cp = await startControlPlane({ crds: ["crds/agents.ifp.dev.yaml", "crds/relays.ifp.dev.yaml"] });
  cp.kubectl(["create", "namespace", NS]);
  manager = await startManager({
    kubeconfig: cp.kubeconfig,
    settings: {
      runtimeImage: "ghcr.io/ifp-dev/ifp-runtime:test",
      runtimeImagePullPolicy: "IfNotPresent",
      natsUrl: "nats://nats.test:4222",
      allowedHosts: { [NS]: ["*.example"] },
    },
    watchNamespaces: [NS],
    resyncMs: 1_000,
    log: operatorLog.log,
  });
  await manager.started;
}, 300_000);
afterAll(async () => {
  await manager?.stop();
  await cp?.stop();
});

describe("PodDisruptionBudgets of the runtimes", () => {
  it("gives an Agent of two replicas a budget of one pod over its own pods, and none to one of one replica", {
    timeout: 120_000,
  }, async () => {
    apply(agent("alice", { replicas: 2 }));
    apply(agent("solo"));
    const pdb = await budget("alice");
    expect(pdb.spec.maxUnavailable).toBe(1);
    expect(pdb.spec.unhealthyPodEvictionPolicy).toBe("AlwaysAllow");
    expect(pdb.metadata.ownerReferences).toEqual([
      expect.objectContaining({ kind: "Agent", name: "alice", controller: true }),
    ]);
    // It selects the pods of alice's Deployment and no other's.
    const deployment = await until("alice's Deployment", () => get("deployment", "alice"), 45_000);
    expect(pdb.spec.selector.matchLabels).toEqual(
      Object.fromEntries(
        Object.entries(pdb.spec.selector.matchLabels).filter(
          ([k, v]) => deployment.spec.template.metadata.labels[k] === v,
        ),
      ),
    );
    const soloDeployment = await until("solo's Deployment", () => get("deployment", "solo"), 45_000);
    expect(
      Object.entries(pdb.spec.selector.matchLabels).every(
        ([k, v]) => soloDeployment.spec.template.metadata.labels[k] === v,
      ),
    ).toBe(false);
    expect(get("pdb", "solo")).toBeUndefined();
  });

  it("makes a budget deleted by hand again, and deletes it with an Event when scaled to one replica", {
    timeout: 120_000,
  }, async () => {
    await budget("alice");
    cp.kubectl(["-n", NS, "delete", "pdb", "alice"]);
    await budget("alice");
    // The scale subresource, as kubectl scale and a HorizontalPodAutoscaler set it.
    cp.kubectl(["-n", NS, "scale", "agent", "alice", "--replicas=1"]);
    await gone("alice");
    await until(
      "the Deleted Event",
      () =>
        events("alice").find(
          (e) => e.reason === "Deleted" && /PodDisruptionBudget\/alice, spec.replicas is 1/.test(e.message),
        ),
      30_000,
    );
    cp.kubectl(["-n", NS, "scale", "agent", "alice", "--replicas=3"]);
    expect((await budget("alice")).spec.maxUnavailable).toBe(1);
  });

  it("follows a Relay's spec.disruption: a percentage, then turned off", { timeout: 120_000 }, async () => {
    apply(relay("hub", { replicas: 4, disruption: { maxUnavailable: "50%" } }));
    expect((await budget("hub")).spec.maxUnavailable).toBe("50%");
    apply(relay("hub", { replicas: 4, disruption: { maxUnavailable: 2 } }));
    await until("maxUnavailable 2", () => (get("pdb", "hub")?.spec.maxUnavailable === 2 ? true : undefined), 45_000);
    apply(relay("hub", { replicas: 4, disruption: { enabled: false } }));
    await gone("hub");
    await until(
      "the Deleted Event",
      () => events("hub").find((e) => e.reason === "Deleted" && /spec.disruption.enabled is false/.test(e.message)),
      30_000,
    );
  });

  it("leaves alone a budget of the same name it did not make", { timeout: 60_000 }, async () => {
    apply({
      apiVersion: "policy/v1",
      kind: "PodDisruptionBudget",
      metadata: { name: "bob", namespace: NS },
      spec: { minAvailable: 1, selector: { matchLabels: { app: "bob" } } },
    });
    apply(agent("bob", { replicas: 2 }));
    await until(
      "the ChildConflict Event",
      () => events("bob").find((e) => /PodDisruptionBudget bob already exists/.test(e.message)),
      45_000,
    );
    const pdb = get("pdb", "bob");
    expect(pdb.spec.minAvailable).toBe(1);
    expect(pdb.metadata.ownerReferences).toBeUndefined();
  });

  it.each([
    [{ maxUnavailable: 0 }, /maxUnavailable/],
    [{ maxUnavailable: 101 }, /maxUnavailable/],
    [{ maxUnavailable: "0%" }, /maxUnavailable/],
    [{ maxUnavailable: "half" }, /maxUnavailable/],
    [{ enabled: "no" }, /enabled/],
  ])("is refused by the API server: spec.disruption %j", (disruption, field) => {
    let out = "";
    try {
      cp.kubectl(["apply", "-f", "-"], JSON.stringify(agent("bad", { replicas: 2, disruption })));
    } catch (err) {
      out = (err as Error).message;
    }
    expect(out).toMatch(/Invalid value|is invalid|must be/);
    expect(out).toMatch(field);
    expect(get("agent", "bad")).toBeUndefined();
  });
});
