// The operator as the reconcile tests of operator/test run it: a real control plane (etcd,
// kube-apiserver, kube-controller-manager), a real nats-server and the manager, started for each
// test file that calls useOperator and stopped after it, with the helpers those tests read the
// cluster with. One namespace, NS; the operator's log and the namespace's state printed for a
// test that fails.
import { afterAll, beforeAll } from "vitest";
import { startControlPlane, type ControlPlane } from "../../../e2e/support/controlplane.ts";
import { startNats, type NatsServer } from "../../../e2e/support/nats.ts";
import { startManager, type RunningManager } from "../../src/commands/manager.ts";
import { capturedLog, getOrAbsent, kubectlOrError, perTest, deleteStreamAt, streamOrAbsent, until } from "./helpers.ts";

export let cp: ControlPlane;
export let nats: NatsServer;
export let manager: RunningManager;
export const NS = "ifp-test";
export const RESYNC_MS = 2_000;
export const operatorLog = capturedLog(600);

export const settings = {
  runtimeImage: "ghcr.io/ifp-dev/ifp-runtime:test",
  runtimeImagePullPolicy: "IfNotPresent",
  natsUrl: "nats://nats.test:4222",
  allowedImages: ["registry.example/ifp/*"],
  allowedIssuers: ["ClusterIssuer/letsencrypt"],
  allowedDnsNames: ["*.agents.example.net"],
  allowedHosts: { [NS]: ["erin.example.org", "*.relays.example"] },
};
const start = async () => {
  const m = await startManager({
    kubeconfig: cp.kubeconfig,
    settings,
    nats: { url: nats.url },
    watchNamespaces: [],
    resyncMs: RESYNC_MS,
    log: operatorLog.log,
  });
  await m.started;
  return m;
};

export const json = (args: string[]) => cp.json(args);
/** The object, or undefined when the API server says NotFound (any other failure throws). */
export const get = (kind: string, name: string) => getOrAbsent(cp, ["-n", NS, "get", kind, name]);
export const condition = (obj: any, type: string) => obj?.status?.conditions?.find((c: any) => c.type === type);
export const counter = async (c: { get(): Promise<{ values: { value: number }[] }> }) =>
  (await c.get()).values.reduce((a, v) => a + v.value, 0);
/** Wait until the resource's condition (Ready by default) has this reason (and return the resource). */
export const untilReason = (kind: string, name: string, reason: string, type = "Ready", timeoutMs = 30_000) =>
  until(
    `${kind}/${name} ${type} reason ${reason}`,
    () => {
      const o = get(kind, name);
      return condition(o, type)?.reason === reason ? o : undefined;
    },
    timeoutMs,
  );
/** Wait until the resource's status is for this generation (and return the resource). */
export const untilObserved = (kind: string, name: string, generation: number) =>
  until(`${kind}/${name} observedGeneration ${generation}`, () => {
    const o = get(kind, name);
    return o?.status?.observedGeneration === generation && condition(o, "Ready")?.observedGeneration === generation
      ? o
      : undefined;
  });
export const events = (name: string) =>
  json(["-n", NS, "get", "events", "--field-selector", `involvedObject.name=${name}`]).items as any[];
export const stream = (name: string) => streamOrAbsent(nats.url, name);
export const deleteStream = (name: string) => deleteStreamAt(nats.url, name);
export const streamName = (relay: string) => `IFP_RELAY_${NS}_2F${relay}`;
/** A change that brings a reconcile at once without changing the spec. */
export const poke = (kind: string, name: string) =>
  cp.kubectl(["-n", NS, "annotate", "--overwrite", kind, name, `example.com/poke=${Date.now()}`]);

/** The control plane, nats-server and operator of the test file that calls it: started before its tests, stopped after them. */
export function useOperator(): void {
  perTest(() => {
    const state = (args: string[]) => kubectlOrError(cp, args);
    return [
      `operator log (last ${Math.min(150, operatorLog.lines().length)} lines):`,
      ...operatorLog.lines().slice(-150),
      "agents and relays:",
      state(["-n", NS, "get", "agents,relays", "-o", "wide"]),
      "events:",
      state(["-n", NS, "get", "events", "--sort-by=.lastTimestamp"]).split("\n").slice(-40).join("\n"),
    ].join("\n");
  });

  beforeAll(async () => {
    [cp, nats] = await Promise.all([
      startControlPlane({ crds: ["crds/agents.ifp.dev.yaml", "crds/relays.ifp.dev.yaml"] }),
      startNats(),
    ]);
    cp.kubectl(["create", "namespace", NS]);
    manager = await start();
  }, 300_000);
  afterAll(async () => {
    await manager?.stop();
    await Promise.all([cp?.stop(), nats?.close()]);
  });
}

/** Stop the operator (startOperator starts it again, as a restart). */
export async function stopOperator(): Promise<void> {
  await manager.stop();
}

/** Start the operator again after stopOperator. */
export async function startOperator(): Promise<void> {
  manager = await start();
}

export const agentYaml = (name: string, extra = "", capabilities = "") => `apiVersion: ifp.dev/v1alpha1
kind: Agent
metadata: {name: ${name}, namespace: ${NS}}
spec:
  agentId: ${name}-id
  capabilities:
    - {name: gossip.exchange, description: Gossip}
${capabilities}${extra}`;
/** Apply an Agent and wait until it is Ready-able (every child applied; only pods missing). */
export const readyAgent = async (name: string, extra = "") => {
  cp.kubectl(["apply", "-f", "-"], agentYaml(name, extra));
  return await untilReason("agent", name, "RuntimeNotReady");
};
export const secretYaml = (name: string, data: Record<string, string>, labels?: Record<string, string>) =>
  JSON.stringify({
    apiVersion: "v1",
    kind: "Secret",
    type: "Opaque",
    metadata: { name, namespace: NS, ...(labels ? { labels } : {}) },
    data: Object.fromEntries(Object.entries(data).map(([k, v]) => [k, Buffer.from(v).toString("base64")])),
  });

export async function tmpFile(name: string, text: string): Promise<string> {
  const { mkdtempSync, writeFileSync } = await import("node:fs");
  const { join } = await import("node:path");
  const { tmpdir } = await import("node:os");
  const p = join(mkdtempSync(join(tmpdir(), "ifp-tls-")), name);
  writeFileSync(p, text, { mode: 0o600 });
  return p;
}
