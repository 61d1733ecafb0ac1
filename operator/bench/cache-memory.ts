// npm run bench:cache-memory — the heap the operator's informer caches hold per Agent with its
// children: BENCH_AGENTS (default 100) Agents reconciled by the manager on a real control plane
// and nats-server, then the manager stopped and the caches started afresh over what it made (the
// objects as a restarted operator lists them), and each kind's objects as watch events bring them
// (the API's JSON through the informer's lean transform). Both after a full garbage collection.
// Prints and writes .bench/cache-memory.json (or BENCH_OUT): KB of heap per Agent, in all and by
// kind, and the children's JSON as the API server returns them.
import { mkdirSync, writeFileSync } from "node:fs";
import { dirname } from "node:path";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { KubeConfig, type KubernetesObject } from "@kubernetes/client-node";
import pino from "pino";
import { startControlPlane } from "../../e2e/support/controlplane.ts";
import { startNats } from "../../e2e/support/nats.ts";
import { waitFor } from "../../e2e/support/wait.ts";
import { startManager } from "../src/commands/manager.ts";
import { Caches, type CachedKind } from "../src/kube/caches.ts";
import { lean } from "../src/kube/informer.ts";

setFlagsFromString("--expose-gc");
const gc = runInNewContext("gc") as () => void;
const heap = () => {
  gc();
  gc();
  return process.memoryUsage().heapUsed;
};

const N = Number(process.env.BENCH_AGENTS ?? 100);
const NS = "mem";
const COPIES = 10;
const OUT = process.env.BENCH_OUT ?? ".bench/cache-memory.json";
const KINDS: Record<string, CachedKind> = {
  deployments: "Deployment",
  services: "Service",
  configmaps: "ConfigMap",
  secrets: "Secret",
  serviceaccounts: "ServiceAccount",
  roles: "Role",
  rolebindings: "RoleBinding",
};
const log = pino({ level: "silent" });
const kb = (bytes: number) => Math.round(bytes / N / 102.4) / 10;

const [cp, nats] = await Promise.all([
  startControlPlane({ crds: ["crds/agents.ifp.dev.yaml", "crds/relays.ifp.dev.yaml"], controllerManager: false }),
  startNats(),
]);
try {
  cp.kubectl(["create", "namespace", NS]);
  const manager = await startManager({
    kubeconfig: cp.kubeconfig,
    settings: {
      runtimeImage: "ghcr.io/ifp-dev/ifp-runtime:bench",
      runtimeImagePullPolicy: "IfNotPresent",
      natsUrl: nats.url,
    },
    nats: { url: nats.url },
    watchNamespaces: [],
    resyncMs: 600_000,
    workers: 4,
    log,
  });
  await manager.started;
  const agents = Array.from({ length: N }, (_, i) => ({
    apiVersion: "ifp.dev/v1alpha1",
    kind: "Agent",
    metadata: { name: `a${i}`, namespace: NS },
    spec: { agentId: `a${i}-id`, capabilities: [{ name: "gossip.exchange", description: "Gossip" }] },
  }));
  cp.kubectl(["apply", "-f", "-"], JSON.stringify({ apiVersion: "v1", kind: "List", items: agents }));
  await waitFor(
    `${N} Agents reconciled`,
    () => {
      const items = cp.json(["-n", NS, "get", "agents"]).items as { status?: { observedGeneration?: number } }[];
      return items.filter((a) => a.status?.observedGeneration).length === N;
    },
    N * 2_000 + 60_000,
    2_000,
  );
  await manager.stop();

  // As listed: a fresh set of caches over the objects the manager made.
  const kc = new KubeConfig();
  kc.loadFromFile(cp.kubeconfig);
  const before = heap();
  const caches = new Caches(kc, [], log, () => {});
  await caches.start();
  const listed = heap() - before;

  // As watched: each kind's JSON from the API server, parsed and made lean, held apart.
  const byKind: Record<string, { objects: number; jsonKB: number; watchedKB: number; listedKB: number }> = {};
  let watched = 0;
  for (const [plural, kind] of Object.entries(KINDS)) {
    const text = cp.kubectl(["-n", NS, "get", plural, "-l", "app.kubernetes.io/managed-by=ifp-operator", "-o", "json"]);
    const count = (JSON.parse(text).items as unknown[]).length;
    if (process.env.BENCH_DUMP) writeFileSync(`${process.env.BENCH_DUMP}/${plural}.json`, text);
    // Several copies, so that what the heap holds of them stands out of its noise.
    const b = heap();
    const kept = Array.from({ length: COPIES }, () =>
      (JSON.parse(text).items as KubernetesObject[]).map((o) => lean(o)),
    );
    const grown = (heap() - b) / COPIES;
    watched += grown;
    const cached = caches.list(kind);
    byKind[kind] = {
      objects: count,
      jsonKB: kb(text.length),
      watchedKB: kb(grown),
      listedKB: kb(JSON.stringify(cached).length),
    };
    if (kept[0]!.length !== count) throw new Error("lost objects");
  }
  await caches.stop();
  const result = {
    agents: N,
    heapKBPerAgentListed: kb(listed),
    heapKBPerAgentWatched: kb(watched),
    byKind,
  };
  console.log(JSON.stringify(result, null, 2));
  mkdirSync(dirname(OUT), { recursive: true });
  writeFileSync(OUT, `${JSON.stringify(result, null, 2)}\n`);
} finally {
  await Promise.all([cp.stop(), nats.close()]);
}
