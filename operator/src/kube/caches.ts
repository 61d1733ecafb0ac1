// The operator's informer caches: Agents, Relays and the kinds of children the operator manages
// (selected by its managed-by label), cluster-wide or per watched namespace. Reconciles and the
// apply layer read objects from them instead of asking the API server.
import {
  AppsV1Api,
  CoreV1Api,
  CustomObjectsApi,
  NetworkingV1Api,
  PolicyV1Api,
  RbacAuthorizationV1Api,
  type KubeConfig,
  type KubernetesListObject,
  type KubernetesObject,
} from "@kubernetes/client-node";
import type { Logger } from "pino";
import { digestDataInPlace } from "./digest.ts";
import { type ListPage, ResilientInformer } from "./informer.ts";
import { MANAGED_SELECTOR } from "./metadata.ts";

export type CachedKind =
  | "Agent"
  | "Relay"
  | "Deployment"
  | "Service"
  | "ConfigMap"
  | "Secret"
  | "ServiceAccount"
  | "Role"
  | "RoleBinding"
  | "Ingress"
  | "NetworkPolicy"
  | "PodDisruptionBudget";

type Lister = (
  ns: string | undefined,
  labelSelector: string | undefined,
  page: ListPage,
) => Promise<KubernetesListObject<KubernetesObject>>;

interface KindInfo {
  path: (ns: string | undefined) => string;
  list: Lister;
  /** Only the children we manage, by label. */
  managedOnly: boolean;
  /** Make an object from a watch event look as one from a list (client-node's typed field names). */
  normalize?: (obj: KubernetesObject) => void;
}

/**
 * The objects with each namespace's together, in the order they came within it and the
 * namespaces in the order first met: a pass over many objects that works in each namespace's
 * NATS account then uses one connection after another rather than one per object.
 */
export function byNamespace<T extends KubernetesObject>(objs: T[]): T[] {
  const groups = new Map<string, T[]>();
  for (const o of objs) {
    const ns = o.metadata?.namespace ?? "";
    const g = groups.get(ns);
    if (g) g.push(o);
    else groups.set(ns, [o]);
  }
  return [...groups.values()].flat();
}

function kinds(kc: KubeConfig): Record<CachedKind, KindInfo> {
  const core = kc.makeApiClient(CoreV1Api);
  const apps = kc.makeApiClient(AppsV1Api);
  const rbac = kc.makeApiClient(RbacAuthorizationV1Api);
  const networking = kc.makeApiClient(NetworkingV1Api);
  const policy = kc.makeApiClient(PolicyV1Api);
  const custom = kc.makeApiClient(CustomObjectsApi);
  const crd = (plural: string): KindInfo => ({
    path: (ns) => (ns ? `/apis/ifp.dev/v1alpha1/namespaces/${ns}/${plural}` : `/apis/ifp.dev/v1alpha1/${plural}`),
    list: async (ns, _labelSelector, page) =>
      (ns
        ? await custom.listNamespacedCustomObject({
            group: "ifp.dev",
            version: "v1alpha1",
            namespace: ns,
            plural,
            ...page,
          })
        : await custom.listClusterCustomObject({
            group: "ifp.dev",
            version: "v1alpha1",
            plural,
            ...page,
          })) as KubernetesListObject<KubernetesObject>,
    managedOnly: false,
  });
  const native = (
    group: string,
    plural: string,
    all: (labelSelector: string | undefined, page: ListPage) => Promise<unknown>,
    namespaced: (namespace: string, labelSelector: string | undefined, page: ListPage) => Promise<unknown>,
  ): KindInfo => ({
    path: (ns) => `${group}${ns ? `/namespaces/${ns}` : ""}/${plural}`,
    list: async (ns, labelSelector, page) => {
      const list = (
        ns ? await namespaced(ns, labelSelector, page) : await all(labelSelector, page)
      ) as KubernetesListObject<KubernetesObject>;
      // Items of a list carry no apiVersion and kind; watch events do. Make them alike, so that
      // comparing a desired child with its cached self does not depend on how it was cached.
      const apiVersion = group === "/api/v1" ? "v1" : group.replace(/^\/apis\//, "");
      const kind = (list.kind ?? "").replace(/List$/, "");
      for (const item of list.items) {
        item.apiVersion ??= apiVersion;
        item.kind ??= kind;
      }
      return list;
    },
    managedOnly: true,
  });
  return {
    Agent: crd("agents"),
    Relay: crd("relays"),
    Deployment: native(
      "/apis/apps/v1",
      "deployments",
      (l, p) => apps.listDeploymentForAllNamespaces({ labelSelector: l, ...p }),
      (n, l, p) => apps.listNamespacedDeployment({ namespace: n, labelSelector: l, ...p }),
    ),
    Service: native(
      "/api/v1",
      "services",
      (l, p) => core.listServiceForAllNamespaces({ labelSelector: l, ...p }),
      (n, l, p) => core.listNamespacedService({ namespace: n, labelSelector: l, ...p }),
    ),
    ConfigMap: native(
      "/api/v1",
      "configmaps",
      (l, p) => core.listConfigMapForAllNamespaces({ labelSelector: l, ...p }),
      (n, l, p) => core.listNamespacedConfigMap({ namespace: n, labelSelector: l, ...p }),
    ),
    Secret: native(
      "/api/v1",
      "secrets",
      (l, p) => core.listSecretForAllNamespaces({ labelSelector: l, ...p }),
      (n, l, p) => core.listNamespacedSecret({ namespace: n, labelSelector: l, ...p }),
    ),
    ServiceAccount: native(
      "/api/v1",
      "serviceaccounts",
      (l, p) => core.listServiceAccountForAllNamespaces({ labelSelector: l, ...p }),
      (n, l, p) => core.listNamespacedServiceAccount({ namespace: n, labelSelector: l, ...p }),
    ),
    Role: native(
      "/apis/rbac.authorization.k8s.io/v1",
      "roles",
      (l, p) => rbac.listRoleForAllNamespaces({ labelSelector: l, ...p }),
      (n, l, p) => rbac.listNamespacedRole({ namespace: n, labelSelector: l, ...p }),
    ),
    RoleBinding: native(
      "/apis/rbac.authorization.k8s.io/v1",
      "rolebindings",
      (l, p) => rbac.listRoleBindingForAllNamespaces({ labelSelector: l, ...p }),
      (n, l, p) => rbac.listNamespacedRoleBinding({ namespace: n, labelSelector: l, ...p }),
    ),
    // spec.expose.ingress; the Gateway API's routes are not watched (their CRDs may be absent).
    Ingress: native(
      "/apis/networking.k8s.io/v1",
      "ingresses",
      (l, p) => networking.listIngressForAllNamespaces({ labelSelector: l, ...p }),
      (n, l, p) => networking.listNamespacedIngress({ namespace: n, labelSelector: l, ...p }),
    ),
    // The runtimes' NetworkPolicies (--runtime-network-policies).
    NetworkPolicy: {
      ...native(
        "/apis/networking.k8s.io/v1",
        "networkpolicies",
        (l, p) => networking.listNetworkPolicyForAllNamespaces({ labelSelector: l, ...p }),
        (n, l, p) => networking.listNamespacedNetworkPolicy({ namespace: n, labelSelector: l, ...p }),
      ),
      // A list gives the typed `_from` of each ingress rule, a watch event the API's `from`.
      normalize: (obj) => {
        for (const rule of (obj as { spec?: { ingress?: Record<string, unknown>[] } }).spec?.ingress ?? []) {
          if ("from" in rule) {
            rule._from = rule.from;
            delete rule.from;
          }
        }
      },
    },
    // The runtimes' PodDisruptionBudgets (spec.disruption), watched so that one deleted is made again.
    PodDisruptionBudget: native(
      "/apis/policy/v1",
      "poddisruptionbudgets",
      (l, p) => policy.listPodDisruptionBudgetForAllNamespaces({ labelSelector: l, ...p }),
      (n, l, p) => policy.listNamespacedPodDisruptionBudget({ namespace: n, labelSelector: l, ...p }),
    ),
  };
}

/** What the cache holds less of, per kind, in place (a Secret's certificates and credentials as their facts or digests). */
export type CacheHolds = Partial<Record<CachedKind, (obj: KubernetesObject) => void>>;

/** What the caches themselves hold less of: a child ConfigMap's data is only compared, never read back (digest.ts). */
const OWN_HOLDS: CacheHolds = { ConfigMap: digestDataInPlace };

/**
 * What the cache of `kind` does to each object before it is made lean: its own holds, then those
 * the concerns that read the kind give (`holds`). Undefined when there is none.
 */
export function cachedForm(kind: CachedKind, holds: CacheHolds = {}): ((obj: KubernetesObject) => void) | undefined {
  const steps = [OWN_HOLDS[kind], holds[kind]].filter((f) => f !== undefined);
  if (!steps.length) return undefined;
  return (obj) => {
    for (const f of steps) f(obj);
  };
}

/**
 * Informer caches of the operator's resources and of the children it manages (selected by the
 * managed-by label), cluster-wide or per watched namespace. Reconciles read from them, so a
 * pass over an unchanged object asks the API server nothing.
 */
export class Caches {
  private readonly informers = new Map<string, ResilientInformer<KubernetesObject>>();
  private readonly namespaces: string[];

  constructor(
    kc: KubeConfig,
    namespaces: string[],
    log: Logger,
    onChange: (kind: CachedKind, obj: KubernetesObject) => void,
    opts: {
      pageSize?: number;
      /** What else of each kind's objects the cache holds less of, given by the concerns that read them. */
      hold?: CacheHolds;
    } = {},
  ) {
    this.namespaces = namespaces;
    const info = kinds(kc);
    for (const kind of Object.keys(info) as CachedKind[]) {
      const k = info[kind];
      for (const ns of namespaces.length ? namespaces : [undefined]) {
        const selector = k.managedOnly ? MANAGED_SELECTOR : undefined;
        const informer = new ResilientInformer<KubernetesObject>(kc, k.path(ns), (page) => k.list(ns, selector, page), {
          name: `${kind}${ns ? `/${ns}` : ""}`,
          labelSelector: selector,
          log,
          pageSize: opts.pageSize,
          compact: cachedForm(kind, opts.hold),
          onChange: (obj) => {
            k.normalize?.(obj);
            onChange(kind, obj);
          },
        });
        this.informers.set(`${kind}/${ns ?? ""}`, informer);
      }
    }
  }

  private informer(kind: CachedKind, namespace: string): ResilientInformer<KubernetesObject> | undefined {
    return this.informers.get(`${kind}/${this.namespaces.length ? namespace : ""}`);
  }

  get<T extends KubernetesObject>(kind: CachedKind, namespace: string, name: string): T | undefined {
    return this.informer(kind, namespace)?.get(name, namespace) as T | undefined;
  }

  list<T extends KubernetesObject>(kind: CachedKind): T[] {
    const out: T[] = [];
    for (const [k, inf] of this.informers) if (k.startsWith(`${kind}/`)) out.push(...(inf.list() as T[]));
    return out;
  }

  /** list(), each namespace's objects together (byNamespace). */
  listByNamespace<T extends KubernetesObject>(kind: CachedKind): T[] {
    return byNamespace(this.list<T>(kind));
  }

  get synced(): boolean {
    return [...this.informers.values()].every((i) => i.hasSynced);
  }

  /** Start every informer; resolves once all have stored a first list (they retry until then). */
  async start(signal?: AbortSignal): Promise<void> {
    await Promise.all([...this.informers.values()].map((i) => i.start()));
    while (!this.synced) {
      if (signal?.aborted) throw new Error("stopped before the caches synced");
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  /** Informer restarts so far, over all informers. */
  get restarts(): number {
    return [...this.informers.values()].reduce((n, i) => n + i.restarts, 0);
  }

  async stop(): Promise<void> {
    await Promise.all([...this.informers.values()].map((i) => i.stop()));
  }
}
