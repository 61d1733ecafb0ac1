// npm run bench:cache-memory — the heap the operator's informer caches hold per Agent with its
// children: BENCH_AGENTS (default 200) Agents reconciled by the manager on a real control plane
// and nats-server (BENCH_NATS_LAYOUT: shared by default, where an Agent has two Secrets; isolated,
// the chart's default, a nats-server in operator mode with the install's keys, where each Agent
// has its NATS credential's Secret too), then each kind of child as the API server lists it, with
// its managedFields, held three ways: as a watch event brings it (the API's JSON, then the
// informer's steps: a ConfigMap's long values as digests, a Secret's PEM and credentials as the
// concerns hold them (CACHE_HOLDS), lean), as client-node's typed models of a
// list (made lean, as lists were held before asParsed) and as a list is held (asParsed, then the
// same steps). Heap after a full garbage collection. Prints and writes
// .bench/cache-memory.json (or BENCH_OUT): KB of heap per Agent for each way, in all and by kind,
// and the children's compact JSON per Agent. BENCH_DUMP=DIR also writes each kind's JSON there.
import { mkdirSync, writeFileSync } from "node:fs";
import { dirname } from "node:path";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import type { KubernetesObject } from "@kubernetes/client-node";
import pino from "pino";
import { startControlPlane } from "../../e2e/support/controlplane.ts";
import { startNats } from "../../e2e/support/nats.ts";
import { startIsolatedNats } from "./isolated-nats.ts";
import { waitFor } from "../../e2e/support/wait.ts";
import { CACHE_HOLDS, startManager } from "../src/commands/manager.ts";
import { ObjectSerializer } from "@kubernetes/client-node/dist/gen/models/ObjectSerializer.js";
import { type CachedKind, cachedForm } from "../src/kube/caches.ts";
import { asParsed, lean } from "../src/kube/informer.ts";
import { MANAGED_SELECTOR } from "../src/kube/metadata.ts";
import { StringPool } from "../src/kube/string-pool.ts";

setFlagsFromString("--expose-gc");
const gc = runInNewContext("gc") as () => void;
const heap = () => {
  // RegExp's legacy statics hold the last string matched; let it be a small one.
  /x/.exec("x");
  gc();
  gc();
  return process.memoryUsage().heapUsed;
};

const N = Number(process.env.BENCH_AGENTS ?? 200);
const NS = "mem";
const OUT = process.env.BENCH_OUT ?? ".bench/cache-memory.json";
const KINDS: Record<string, string> = {
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

const LAYOUT = process.env.BENCH_NATS_LAYOUT ?? "shared";
if (LAYOUT !== "shared" && LAYOUT !== "isolated")
  throw new Error(`BENCH_NATS_LAYOUT is shared or isolated, not ${JSON.stringify(LAYOUT)}`);
const cp = await startControlPlane({
  crds: ["crds/agents.ifp.dev.yaml", "crds/relays.ifp.dev.yaml"],
  controllerManager: false,
});
const isolated = LAYOUT === "isolated" ? await startIsolatedNats(cp) : undefined;
const shared = isolated ? undefined : await startNats();
const natsUrl = isolated?.url ?? shared!.url;
try {
  cp.kubectl(["create", "namespace", NS]);
  const manager = await startManager({
    kubeconfig: cp.kubeconfig,
    settings: {
      runtimeImage: "ghcr.io/ifp-dev/ifp-runtime:bench",
      runtimeImagePullPolicy: "IfNotPresent",
      natsUrl,
    },
    nats: { url: natsUrl },
    ...isolated?.manager,
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

  // Each kind's list as the API server returns it, held as the informers hold it: a watch event's
  // JSON made lean, a list's typed models made lean as they were before asParsed, and a list made
  // lean now. Each way with a string pool of its own, measured on its second pass, so that it pays
  // neither for code compiled on first use nor for strings another way pooled.
  const texts = Object.entries(KINDS).map(([plural, kind]) => {
    const text = cp.kubectl(["-n", NS, "get", plural, "-l", MANAGED_SELECTOR, "-o", "json", "--show-managed-fields"]);
    if (process.env.BENCH_DUMP) writeFileSync(`${process.env.BENCH_DUMP}/${plural}.json`, text);
    return { kind, type: `V1${kind}List`, text };
  });
  // The informers' own steps (informer.ts, caches.ts): what the cache of the kind holds less of
  // (a ConfigMap's long values as digests, what the concerns hold of a Secret), then lean.
  const cached = (o: KubernetesObject, pool: StringPool) => {
    cachedForm(o.kind as CachedKind, CACHE_HOLDS)?.(o);
    return lean(o, pool);
  };
  const typed = (text: string, type: string) =>
    ObjectSerializer.deserialize(JSON.parse(text), type, "").items as KubernetesObject[];
  const ways: Record<string, (text: string, type: string, pool: StringPool) => unknown[]> = {
    watched: (text, _type, pool) => (JSON.parse(text).items as KubernetesObject[]).map((o) => cached(o, pool)),
    // A list as client-node's typed models hold it, made lean but kept typed.
    listedTyped: (text, type, pool) => typed(text, type).map((o) => lean(o, pool)),
    listed: (text, type, pool) => typed(text, type).map((o) => cached(asParsed(o), pool)),
  };
  const hold: unknown[] = [];
  const byKind: Record<string, Record<string, number>> = {};
  const totals: Record<string, number> = {};
  for (const [way, make] of Object.entries(ways)) {
    for (const pass of [0, 1]) {
      const pool = new StringPool();
      for (const { kind, type, text } of texts) {
        const before = heap();
        hold.push(make(text, type, pool));
        const grown = heap() - before;
        if (pass === 1) {
          (byKind[kind] ??= {})[way] = kb(grown);
          totals[way] = (totals[way] ?? 0) + grown;
        }
      }
    }
  }
  const result = {
    agents: N,
    natsLayout: LAYOUT,
    heapKBPerAgent: Object.fromEntries(Object.entries(totals).map(([w, b]) => [w, kb(b)])),
    byKind,
    jsonKBPerAgent: Object.fromEntries(
      texts.map(({ kind, text }) => [kind, kb(JSON.stringify(JSON.parse(text)).length)]),
    ),
  };
  console.log(JSON.stringify(result, null, 2));
  mkdirSync(dirname(OUT), { recursive: true });
  writeFileSync(OUT, `${JSON.stringify(result, null, 2)}\n`);
} finally {
  await Promise.all([cp.stop(), isolated?.stop(), shared?.close()]);
}
