// Deleting an Agent or Relay waits only for what the operator can and does clean up, on a real
// control plane: an operator without NATS sets no finalizer and holds no deletion (one set by an
// earlier operator goes at once, with a Warning naming what stays); one with NATS that cannot
// reach it holds the deletion up to its finalizer timeout, and the status says what for.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startControlPlane, type ControlPlane } from "../../../e2e/support/controlplane.ts";
import { startNats, withNatsDown, type NatsServer } from "../../../e2e/support/nats.ts";
import { consistently } from "../../../e2e/support/wait.ts";
import { agentNames } from "../../../runtime/src/contract/agent-names.ts";
import { DEFAULT_FINALIZER_TIMEOUT_MS } from "../../src/reconcile/finalizers.ts";
import { startManager, type RunningManager } from "../../src/commands/manager.ts";
import { capturedLog, getOrAbsent, kubectlOrError, perTest, until } from "../support/helpers.ts";

let cp: ControlPlane;
let nats: NatsServer;
const NS = "del";
const operatorLog = capturedLog(600);
const settings = {
  runtimeImage: "ghcr.io/ifp-dev/ifp-runtime:test",
  runtimeImagePullPolicy: "IfNotPresent",
  natsUrl: "nats://nats.test:4222",
};

const start = async (opts: { withNats: boolean; finalizerTimeoutMs?: number }): Promise<RunningManager> => {
  const manager = await startManager({
    kubeconfig: cp.kubeconfig,
    settings,
    ...(opts.withNats ? { nats: { url: nats.url } } : {}),
    watchNamespaces: [NS],
    resyncMs: 2_000,
    ...(opts.finalizerTimeoutMs ? { finalizerTimeoutMs: opts.finalizerTimeoutMs } : {}),
    log: operatorLog.log,
  });
  await manager.started;
  return manager;
};

const get = (kind: string, name: string) => getOrAbsent(cp, ["-n", NS, "get", kind, name]);
const events = (name: string) =>
  cp.json(["-n", NS, "get", "events", "--field-selector", `involvedObject.name=${name}`]).items as any[];
const condition = (kind: string, name: string, type: string) =>
  get(kind, name)?.status?.conditions?.find((c: any) => c.type === type);
const apply = (yaml: string) => cp.kubectl(["apply", "-f", "-"], yaml);
const agentYaml = (name: string, finalizers: string[] = []) => `apiVersion: ifp.dev/v1alpha1
kind: Agent
metadata: {name: ${name}, namespace: ${NS}, finalizers: ${JSON.stringify(finalizers)}}
spec:
  agentId: ${name}-id
`;
const relayYaml = (name: string, finalizers: string[] = []) => `apiVersion: ifp.dev/v1alpha1
kind: Relay
metadata: {name: ${name}, namespace: ${NS}, finalizers: ${JSON.stringify(finalizers)}}
spec:
  url: https://${name}.${NS}.svc
  retention: {maxAge: 24h, deleteOnRemoval: true}
`;

perTest(() =>
  [
    "operator log:",
    ...operatorLog.lines().slice(-120),
    "agents and relays:",
    kubectlOrError(cp, ["get", "agents,relays", "-A", "-o", "yaml"]),
  ].join("\n"),
);

beforeAll(async () => {
  [cp, nats] = await Promise.all([
    startControlPlane({ crds: ["crds/agents.ifp.dev.yaml", "crds/relays.ifp.dev.yaml"], controllerManager: false }),
    startNats(),
  ]);
  cp.kubectl(["create", "namespace", NS]);
}, 300_000);
afterAll(async () => {
  await Promise.all([cp?.stop(), nats?.close()]);
});

describe("an operator without NATS", () => {
  it("sets no finalizer and lets an Agent and a Relay go at once", { timeout: 90_000 }, async () => {
    const manager = await start({ withNats: false });
    try {
      apply(agentYaml("plain"));
      apply(relayYaml("plain-relay"));
      await until(
        "both reconciled",
        () => !!condition("agent", "plain", "Ready") && !!condition("relay", "plain-relay", "Ready"),
      );
      expect(get("agent", "plain").metadata.finalizers ?? []).toEqual([]);
      expect(get("relay", "plain-relay").metadata.finalizers ?? []).toEqual([]);
      const asked = Date.now();
      cp.kubectl(["-n", NS, "delete", "agent", "plain", "--wait=false"]);
      cp.kubectl(["-n", NS, "delete", "relay", "plain-relay", "--wait=false"]);
      await until("both gone", () => !get("agent", "plain") && !get("relay", "plain-relay"), 20_000);
      expect(Date.now() - asked).toBeLessThan(DEFAULT_FINALIZER_TIMEOUT_MS / 10);
    } finally {
      await manager.stop();
    }
  });

  it("takes off a finalizer an earlier operator set, and lets one already being deleted go at once with a Warning naming what stays", {
    timeout: 90_000,
  }, async () => {
    // Set by an operator that had NATS; this one is started after the deletions were asked for.
    apply(agentYaml("inherited", ["ifp.dev/jetstream"]));
    apply(agentYaml("leaving", ["ifp.dev/jetstream"]));
    apply(relayYaml("leaving-relay", ["ifp.dev/stream"]));
    cp.kubectl(["-n", NS, "delete", "agent", "leaving", "--wait=false"]);
    cp.kubectl(["-n", NS, "delete", "relay", "leaving-relay", "--wait=false"]);
    const manager = await start({ withNats: false });
    try {
      await until("the deleted ones gone", () => !get("agent", "leaving") && !get("relay", "leaving-relay"), 20_000);
      const warning = events("leaving").find((e) => e.reason === "CleanupSkipped");
      expect(warning?.type).toBe("Warning");
      expect(warning?.message).toContain("--nats-url");
      expect(warning?.message).toContain(agentNames(`${NS}/leaving`).inboxStream);
      expect(events("leaving-relay").find((e) => e.reason === "CleanupSkipped")?.message).toContain(
        `IFP_RELAY_${NS}_2Fleaving-relay`,
      );
      await until(
        "the kept one's finalizer off",
        () => (get("agent", "inherited")?.metadata.finalizers ?? []).length === 0,
      );
      // Nothing puts it back.
      await consistently(
        "no finalizer",
        () => (get("agent", "inherited")?.metadata.finalizers ?? []).length === 0,
        3_000,
        500,
      );
    } finally {
      await manager.stop();
    }
  });
});

describe("an operator that cannot reach its NATS", () => {
  it("holds the deletion up to its timeout, the Agent's status saying what it waits for and until when", {
    timeout: 120_000,
  }, async () => {
    const timeoutMs = 12_000;
    const manager = await start({ withNats: true, finalizerTimeoutMs: timeoutMs });
    try {
      apply(agentYaml("waiting"));
      await until("the finalizer", () =>
        (get("agent", "waiting")?.metadata.finalizers ?? []).includes("ifp.dev/jetstream"),
      );
      await withNatsDown(nats, async () => {
        cp.kubectl(["-n", NS, "delete", "agent", "waiting", "--wait=false"]);
        await until(
          "the status to say why it waits",
          () => condition("agent", "waiting", "Ready")?.reason === "CleanupPending",
        );
        const ready = condition("agent", "waiting", "Ready");
        expect(ready.status).toBe("False");
        expect(ready.message).toContain("the agent's streams and buckets");
        expect(ready.message).toContain("not connected to NATS");
        expect(ready.message).toMatch(/goes at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ at the latest/);
        expect(condition("agent", "waiting", "Reconciling")?.reason).toBe("CleanupPending");
        expect(get("agent", "waiting").metadata.finalizers).toContain("ifp.dev/jetstream");
        await until("the Agent gone once the bound ran out", () => !get("agent", "waiting"), 40_000);
        expect(events("waiting").find((e) => e.reason === "CleanupAbandoned")?.type).toBe("Warning");
      });
    } finally {
      await manager.stop();
    }
  });
});
