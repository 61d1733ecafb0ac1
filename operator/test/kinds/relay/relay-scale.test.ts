// A Relay scales like a Deployment: the scale subresource on the real API server (kubectl scale,
// as a HorizontalPodAutoscaler sets it) writes spec.replicas, the operator's Deployment follows,
// and status.replicas and status.selector say what the scale reads.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startControlPlane, type ControlPlane } from "../../../../e2e/support/controlplane.ts";
import { startNats, type NatsServer } from "../../../../e2e/support/nats.ts";
import { startManager, type RunningManager } from "../../../src/commands/manager.ts";
import { capturedLog, getOrAbsent, kubectlOrError, perTest, until } from "../../support/helpers.ts";

let cp: ControlPlane;
let nats: NatsServer;
let manager: RunningManager;
const NS = "relay-scale";
const operatorLog = capturedLog(400);

const get = (kind: string, name: string) => getOrAbsent(cp, ["-n", NS, "get", kind, name]);
const scaleOf = (name: string) =>
  JSON.parse(cp.kubectl(["get", "--raw", `/apis/ifp.dev/v1alpha1/namespaces/${NS}/relays/${name}/scale`]));

perTest(() =>
  [
    "operator log:",
    ...operatorLog.lines().slice(-80),
    "relays and deployments:",
    kubectlOrError(cp, ["-n", NS, "get", "relays,deployments,pods", "-o", "wide"]),
  ].join("\n"),
);

beforeAll(async () => {
  [cp, nats] = await Promise.all([
    startControlPlane({ crds: ["crds/agents.ifp.dev.yaml", "crds/relays.ifp.dev.yaml"] }),
    startNats(),
  ]);
  cp.kubectl(["create", "namespace", NS]);
  manager = await startManager({
    kubeconfig: cp.kubeconfig,
    settings: {
      runtimeImage: "ghcr.io/ifp-dev/ifp-runtime:test",
      runtimeImagePullPolicy: "IfNotPresent",
      natsUrl: "nats://nats.test:4222",
      allowedHosts: { [NS]: ["*.relays.example"] },
    },
    nats: { url: nats.url },
    watchNamespaces: [NS],
    resyncMs: 60_000,
    log: operatorLog.log,
  });
  await manager.started;
}, 300_000);
afterAll(async () => {
  await manager?.stop();
  await Promise.all([cp?.stop(), nats?.close()]);
});

describe("the Relay's scale subresource", () => {
  it("kubectl scale writes spec.replicas, the Deployment follows, status.replicas and status.selector find the pods", async () => {
    cp.kubectl(
      ["apply", "-f", "-"],
      `apiVersion: ifp.dev/v1alpha1\nkind: Relay\nmetadata: {name: hub, namespace: ${NS}}\nspec: {url: 'https://hub.relays.example'}\n`,
    );
    const selector = "app.kubernetes.io/instance=hub,app.kubernetes.io/name=ifp-runtime";
    const first = await until("the scale's selector", () => {
      const s = scaleOf("hub");
      return s.status?.selector ? s : undefined;
    });
    expect(first).toMatchObject({ kind: "Scale", spec: { replicas: 1 }, status: { selector } });
    await until("the Deployment at 1 replica", () =>
      get("deployment", "hub")?.spec.replicas === 1 ? true : undefined,
    );

    cp.kubectl(["-n", NS, "scale", "relay/hub", "--replicas=2"]);
    expect(get("relay", "hub").spec.replicas).toBe(2);
    await until("the Deployment at 2 replicas", () =>
      get("deployment", "hub")?.spec.replicas === 2 ? true : undefined,
    );
    const scaled = await until("the scale's status at 2 replicas", () => {
      const s = scaleOf("hub");
      return s.status?.replicas === 2 ? s : undefined;
    });
    expect(scaled).toMatchObject({ spec: { replicas: 2 }, status: { replicas: 2, selector } });
    expect(get("relay", "hub").status).toMatchObject({ replicas: 2, selector });
    expect(cp.json(["-n", NS, "get", "pods", "-l", scaled.status.selector]).items).toHaveLength(2);

    // Held to the schema's bounds (0 to 100), by every name of the kind, leaving the Relay as it was.
    expect(() => cp.kubectl(["-n", NS, "scale", "relay/hub", "--replicas=101"])).toThrow(
      /spec.replicas|less than or equal to 100/,
    );
    expect(() => cp.kubectl(["-n", NS, "scale", "ifprelay/hub", "--replicas=-1"])).toThrow();
    expect(get("relay", "hub").spec.replicas).toBe(2);
    cp.kubectl(["-n", NS, "scale", "relays.ifp.dev/hub", "--replicas=0"]);
    await until("the Deployment at 0 replicas", () =>
      get("deployment", "hub")?.spec.replicas === 0 ? true : undefined,
    );
    await until("status.replicas at 0", () => (get("relay", "hub")?.status?.replicas === 0 ? true : undefined));
  });

  it("refuses a scale of a Relay that does not exist", () => {
    expect(() => cp.kubectl(["-n", NS, "scale", "relay/nobody", "--replicas=2"])).toThrow(/not found/i);
  });
});
