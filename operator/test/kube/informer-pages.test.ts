// The informers' first list in pages (operator/src/kube/informer.ts) against a real API server:
// every page asked for with the continue token of the one before, for a typed list (ConfigMaps)
// and a custom resource's (Agents, whose list is the API's JSON), every object cached once and
// lean and as a watch event brings it, and the watch going on from the list's resourceVersion.
import { CoreV1Api, CustomObjectsApi, KubeConfig, type KubernetesObject } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startControlPlane, type ControlPlane } from "../../../e2e/support/controlplane.ts";
import { Caches } from "../../src/kube/caches.ts";
import { type ListPage, ResilientInformer } from "../../src/kube/informer.ts";
import { MANAGED_SELECTOR } from "../../src/kube/metadata.ts";
import { capturedLog, perTest, until } from "../support/helpers.ts";

const NS = "pages";
const MANAGED = 7;
const AGENTS = 5;
let cp: ControlPlane;
let kc: KubeConfig;
const { log, lines } = capturedLog();
perTest(() => lines().join("\n"));

const configMap = (name: string, managed: boolean) =>
  `apiVersion: v1
kind: ConfigMap
metadata:
  name: ${name}
  namespace: ${NS}
  labels: {${managed ? "app.kubernetes.io/managed-by: ifp-operator" : "other: x"}}
data: {value: "${name}"}
`;

beforeAll(async () => {
  cp = await startControlPlane({
    crds: ["crds/agents.ifp.dev.yaml", "crds/relays.ifp.dev.yaml"],
    controllerManager: false,
  });
  cp.kubectl(["create", "namespace", NS]);
  const docs = [
    ...Array.from({ length: MANAGED }, (_, i) => configMap(`managed-${i}`, true)),
    configMap("other-0", false),
    configMap("other-1", false),
    ...Array.from(
      { length: AGENTS },
      (_, i) => `apiVersion: ifp.dev/v1alpha1
kind: Agent
metadata: {name: agent-${i}, namespace: ${NS}}
spec:
  agentId: agent-${i}@pages.example
  capabilities: [{name: chat.message, description: Messages}]
`,
    ),
  ];
  // Server-side apply, so that every object carries managedFields for the cache to drop.
  cp.kubectl(["apply", "--server-side", "-f", "-"], docs.join("---\n"));
  kc = new KubeConfig();
  kc.loadFromFile(cp.kubeconfig);
}, 180_000);
afterAll(async () => {
  await cp?.stop();
});

/** An informer whose pages are recorded as they are asked for. */
async function recorded(path: string, list: (page: ListPage) => Promise<any>, labelSelector?: string) {
  const pages: { asked: ListPage; items: number }[] = [];
  const informer = new ResilientInformer<KubernetesObject>(
    kc,
    path,
    async (page) => {
      const l = await list(page);
      pages.push({ asked: page, items: l.items.length });
      return l;
    },
    { name: path, labelSelector, log, onChange: () => {}, pageSize: 2 },
  );
  await informer.start();
  return { informer, pages };
}

const names = (objs: readonly KubernetesObject[]) => objs.map((o) => o.metadata!.name!).sort();

describe("an informer's first list", () => {
  it("asks for a typed list page by page and caches every object once, lean; the watch goes on from it", async () => {
    const core = kc.makeApiClient(CoreV1Api);
    const { informer, pages } = await recorded(
      `/api/v1/namespaces/${NS}/configmaps`,
      (page) => core.listNamespacedConfigMap({ namespace: NS, labelSelector: MANAGED_SELECTOR, ...page }),
      MANAGED_SELECTOR,
    );
    try {
      expect(informer.hasSynced).toBe(true);
      expect(pages.map((p) => p.items)).toEqual([2, 2, 2, 1]);
      expect(pages[0]!.asked._continue).toBeUndefined();
      expect(pages.slice(1).every((p) => typeof p.asked._continue === "string" && p.asked.limit === 2)).toBe(true);
      expect(names(informer.list())).toEqual(Array.from({ length: MANAGED }, (_, i) => `managed-${i}`).sort());
      expect(informer.list().some((o) => o.metadata?.managedFields)).toBe(false);
      cp.kubectl(["apply", "--server-side", "-f", "-"], configMap("managed-late", true));
      const watched = await until("the watch to bring the ConfigMap made after the list", () =>
        informer.get("managed-late", NS),
      );
      expect(informer.list()).toHaveLength(MANAGED + 1);
      // A listed object is held as a watched one: the API's JSON, not client-node's typed models.
      const listed = informer.get("managed-0", NS)!;
      expect(Object.getPrototypeOf(listed.metadata)).toBe(Object.prototype);
      expect(listed.metadata?.creationTimestamp).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
      // The same fields of the same types (a typed list carries no apiVersion and kind; caches.ts adds them).
      const shape = (o: unknown): unknown =>
        o && typeof o === "object"
          ? Object.fromEntries(
              Object.entries(o)
                .filter(([k]) => k !== "apiVersion" && k !== "kind")
                .map(([k, v]) => [k, shape(v)])
                .sort(([a], [b]) => String(a).localeCompare(String(b))),
            )
          : typeof o;
      expect(shape(listed)).toEqual(shape(watched));
    } finally {
      await informer.stop();
    }
  });

  it("follows a custom resource's continue token, which its JSON names `continue`", async () => {
    const custom = kc.makeApiClient(CustomObjectsApi);
    const { informer, pages } = await recorded(`/apis/ifp.dev/v1alpha1/namespaces/${NS}/agents`, (page) =>
      custom.listNamespacedCustomObject({
        group: "ifp.dev",
        version: "v1alpha1",
        namespace: NS,
        plural: "agents",
        ...page,
      }),
    );
    try {
      expect(pages.map((p) => p.items)).toEqual([2, 2, 1]);
      expect(names(informer.list())).toEqual(Array.from({ length: AGENTS }, (_, i) => `agent-${i}`).sort());
      expect(informer.list().some((o) => o.metadata?.managedFields)).toBe(false);
    } finally {
      await informer.stop();
    }
  });

  it("fills the operator's caches whole with pages smaller than what they hold", async () => {
    const caches = new Caches(kc, [NS], log, () => {}, { pageSize: 2 });
    try {
      await caches.start();
      expect(names(caches.list("ConfigMap"))).toContain("managed-6");
      expect(caches.list("ConfigMap").filter((o) => o.metadata?.name?.startsWith("managed-"))).toHaveLength(
        MANAGED + 1,
      );
      expect(caches.list("ConfigMap").some((o) => o.metadata?.name?.startsWith("other-"))).toBe(false);
      expect(names(caches.list("Agent"))).toEqual(Array.from({ length: AGENTS }, (_, i) => `agent-${i}`).sort());
    } finally {
      await caches.stop();
    }
  });
});
