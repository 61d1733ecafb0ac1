// The runtimes' identity in a namespace, shared by every runtime there instead of one per
// resource: the ServiceAccount `ifp-agent-runtimes` with a Role and RoleBinding of the same name
// that let agent runtimes record Events on their Agents (the only API access a runtime has), and
// the ServiceAccount `ifp-relay-runtimes` (no token mounted: the relay runtime does not talk to
// the API). They belong to no single Agent or Relay (no owner reference): they are applied by
// the first runtime of a namespace that needs them, only when missing or different, and deleted
// once the namespace has no Agent (or Relay) left and no Deployment of the operator's runs under
// them. Each runtime used to have its own `<name>-runtime` ServiceAccount (and for agents Role and
// RoleBinding); those are deleted once its Deployment has rolled to the shared one
// (removeLegacyRuntimeAccess).
import type { KubernetesObject, V1Deployment, V1Role, V1RoleBinding, V1ServiceAccount } from "@kubernetes/client-node";
import { ChildConflictError, controlledBy, withAppliedHash } from "../kube/apply.ts";
import type { Caches, CachedKind } from "../kube/caches.ts";
import { COMPONENT_LABEL, MANAGED_BY, managedByOperator } from "../kube/metadata.ts";
import { isSubset } from "../kube/subset.ts";
import type { ReconcileContext } from "./reconciler.ts";
import type { Owner } from "./runtime.ts";

/** The ServiceAccount (and Role and RoleBinding) of every agent runtime in a namespace. */
export const AGENT_RUNTIME_ACCOUNT = "ifp-agent-runtimes";
/** The ServiceAccount of every relay runtime in a namespace. */
export const RELAY_RUNTIME_ACCOUNT = "ifp-relay-runtimes";
/** app.kubernetes.io/component of the shared objects. */
export const SHARED_COMPONENT = "shared";

/** The shared ServiceAccount of a kind of runtime. */
export function runtimeAccountName(kind: Owner["kind"]): string {
  return kind === "Agent" ? AGENT_RUNTIME_ACCOUNT : RELAY_RUNTIME_ACCOUNT;
}

/** The name a runtime's own ServiceAccount, Role and RoleBinding had before they were shared. */
export function legacyAccountName(name: string): string {
  return `${name}-runtime`;
}

function sharedMeta(namespace: string, name: string) {
  return {
    name,
    namespace,
    labels: { "app.kubernetes.io/name": "ifp-runtime", [COMPONENT_LABEL]: SHARED_COMPONENT, "app.kubernetes.io/part-of": "ifp-operator", ...MANAGED_BY },
  };
}

/** Pure: the shared objects the runtimes of `kind` need in a namespace. */
export function sharedRuntimeAccess(kind: Owner["kind"], namespace: string): KubernetesObject[] {
  const name = runtimeAccountName(kind);
  if (kind === "Relay") {
    const sa: V1ServiceAccount = { apiVersion: "v1", kind: "ServiceAccount", metadata: sharedMeta(namespace, name), automountServiceAccountToken: false };
    return [sa];
  }
  const sa: V1ServiceAccount = { apiVersion: "v1", kind: "ServiceAccount", metadata: sharedMeta(namespace, name), automountServiceAccountToken: true };
  // The agent runtime records Events on its Agent (undeliverable messages, dead letters).
  const role: V1Role = {
    apiVersion: "rbac.authorization.k8s.io/v1",
    kind: "Role",
    metadata: sharedMeta(namespace, name),
    rules: [{ apiGroups: [""], resources: ["events"], verbs: ["create", "patch"] }],
  };
  const binding: V1RoleBinding = {
    apiVersion: "rbac.authorization.k8s.io/v1",
    kind: "RoleBinding",
    metadata: sharedMeta(namespace, name),
    roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name },
    subjects: [{ kind: "ServiceAccount", name, namespace }],
  };
  return [sa, role, binding];
}

/** Per cache (one per operator process): a lock per namespace, and the shared objects this process deleted. */
interface SharedState {
  locks: Map<string, Promise<unknown>>;
  /** `namespace/Kind/name` deleted here and perhaps still in the cache: read from the server instead. */
  deleted: Set<string>;
}
const states = new WeakMap<Caches, SharedState>();

function stateOf(caches: Caches): SharedState {
  let s = states.get(caches);
  if (!s) states.set(caches, (s = { locks: new Map(), deleted: new Set() }));
  return s;
}

/** `fn` after every earlier call for the same namespace has ended. */
async function locked<T>(state: SharedState, namespace: string, fn: () => Promise<T>): Promise<T> {
  const before = state.locks.get(namespace) ?? Promise.resolve();
  const run = before.then(fn, fn);
  const tail = run.catch(() => {});
  state.locks.set(namespace, tail);
  try {
    return await run;
  } finally {
    if (state.locks.get(namespace) === tail) state.locks.delete(namespace);
  }
}

const keyOf = (o: KubernetesObject) => `${o.metadata!.namespace}/${o.kind}/${o.metadata!.name}`;

/**
 * Apply the shared objects a runtime of `kind` needs in `namespace` where missing or different;
 * returns "Kind/name" of what was written. A pass over a namespace that has them asks the API
 * server nothing. An object of that name that is not the operator's is never taken over.
 */
export async function ensureSharedRuntimeAccess(ctx: Pick<ReconcileContext, "kube" | "caches">, kind: Owner["kind"], namespace: string): Promise<string[]> {
  const wanted = sharedRuntimeAccess(kind, namespace).map(withAppliedHash);
  const state = stateOf(ctx.caches);
  const settled = (o: KubernetesObject) => {
    if (state.deleted.has(keyOf(o))) return false;
    const cached = ctx.caches.get(o.kind as CachedKind, namespace, o.metadata!.name!);
    return !!cached && !cached.metadata?.deletionTimestamp && isSubset(o, cached);
  };
  if (wanted.every(settled)) return [];
  return locked(state, namespace, async () => {
    const applied: string[] = [];
    for (const o of wanted) {
      if (settled(o)) continue;
      // The cache may lag (a write of another pass, a deletion of this process): ask the server.
      const live = await ctx.kube.read(o.apiVersion!, o.kind!, namespace, o.metadata!.name!);
      if (live && !managedByOperator(live)) throw new ChildConflictError(`${o.kind} ${o.metadata!.name} already exists in namespace ${namespace} and is not managed by ifp-operator; the runtimes of the namespace need that name: delete or rename it`);
      if (!live || live.metadata?.deletionTimestamp || !isSubset(o, live)) {
        await ctx.kube.apply(o, !!live);
        applied.push(`${o.kind}/${o.metadata!.name}`);
      }
      state.deleted.delete(keyOf(o));
    }
    return applied;
  });
}

/**
 * Delete the shared objects of `kind` in `namespace` once nothing needs them: no resource of
 * that kind is left there (one being deleted still counts) and no Deployment of the operator's
 * there runs under the shared ServiceAccount. Returns "Kind/name" of what was deleted.
 */
export async function releaseSharedRuntimeAccess(ctx: Pick<ReconcileContext, "kube" | "caches">, kind: Owner["kind"], namespace: string): Promise<string[]> {
  const account = runtimeAccountName(kind);
  const state = stateOf(ctx.caches);
  const inUse = () =>
    ctx.caches.list(kind).some((o) => o.metadata?.namespace === namespace) ||
    ctx.caches.list<V1Deployment>("Deployment").some((d) => d.metadata?.namespace === namespace && d.spec?.template?.spec?.serviceAccountName === account);
  const present = sharedRuntimeAccess(kind, namespace).filter((o) => {
    const cached = ctx.caches.get(o.kind as CachedKind, namespace, o.metadata!.name!);
    return cached && managedByOperator(cached) && !state.deleted.has(keyOf(o));
  });
  if (!present.length || inUse()) return [];
  return locked(state, namespace, async () => {
    // Looked at again under the lock: a pass that applied them meanwhile has its resource in the cache.
    if (inUse()) return [];
    const deleted: string[] = [];
    for (const o of present) {
      state.deleted.add(keyOf(o));
      await ctx.kube.remove(o);
      deleted.push(`${o.kind}/${o.metadata!.name}`);
    }
    return deleted;
  });
}

/**
 * The runtime's own ServiceAccount, Role and RoleBinding from before they were shared, deleted
 * once its Deployment runs under the shared ServiceAccount and has no pod of an older spec left
 * (those still use the old account's token). Returns "Kind/name" of what was deleted.
 */
export async function removeLegacyRuntimeAccess(ctx: Pick<ReconcileContext, "kube" | "caches">, owner: Owner, deployment: V1Deployment | undefined): Promise<string[]> {
  const { namespace, name, uid } = owner.metadata;
  const legacy = legacyAccountName(name);
  const found = (["RoleBinding", "Role", "ServiceAccount"] as const)
    .map((kind) => ctx.caches.get(kind, namespace, legacy))
    .filter((o): o is KubernetesObject => !!o && controlledBy(o, uid) && !o.metadata?.deletionTimestamp);
  if (!found.length || !rolledTo(deployment, runtimeAccountName(owner.kind))) return [];
  const deleted: string[] = [];
  for (const o of found) {
    await ctx.kube.remove(o);
    deleted.push(`${o.kind}/${legacy}`);
  }
  return deleted;
}

/** Whether every pod of the Deployment is of a spec that runs under `account` (pure). */
export function rolledTo(d: V1Deployment | undefined, account: string): boolean {
  if (!d || d.spec?.template?.spec?.serviceAccountName !== account) return false;
  const s = d.status ?? {};
  return (s.observedGeneration ?? 0) >= (d.metadata?.generation ?? 0) && (s.replicas ?? 0) === (s.updatedReplicas ?? 0);
}
