// The runtimes' identity of an earlier version, shared by every runtime of a namespace: the
// ServiceAccount `ifp-agent-runtimes` with a Role and RoleBinding of the same name (Events), and
// the ServiceAccount `ifp-relay-runtimes`. Each runtime now runs under its own ServiceAccount
// (identity.ts); its Deployment rolls to it as any change of the pod template does. The shared
// objects belong to no single resource (no owner reference) and are deleted once no Deployment
// of the operator's in the namespace runs under them or still has pods of an older spec (which
// may be of the shared account and hold its token).
import type { KubernetesObject, V1Deployment, V1Role, V1RoleBinding, V1ServiceAccount } from "@kubernetes/client-node";
import type { Caches, CachedKind } from "../kube/caches.ts";
import { COMPONENT_LABEL, MANAGED_BY, managedByOperator } from "../kube/metadata.ts";
import type { ReconcileContext } from "./reconciler.ts";
import type { Owner } from "./runtime.ts";

/** The ServiceAccount (and Role and RoleBinding) the agent runtimes of a namespace shared. */
export const AGENT_RUNTIME_ACCOUNT = "ifp-agent-runtimes";
/** The ServiceAccount the relay runtimes of a namespace shared. */
export const RELAY_RUNTIME_ACCOUNT = "ifp-relay-runtimes";
/** app.kubernetes.io/component of the shared objects. */
export const SHARED_COMPONENT = "shared";

/** The shared ServiceAccount of a kind of runtime. */
export function sharedAccountName(kind: Owner["kind"]): string {
  return kind === "Agent" ? AGENT_RUNTIME_ACCOUNT : RELAY_RUNTIME_ACCOUNT;
}

function sharedMeta(namespace: string, name: string) {
  return {
    name,
    namespace,
    labels: {
      "app.kubernetes.io/name": "ifp-runtime",
      [COMPONENT_LABEL]: SHARED_COMPONENT,
      "app.kubernetes.io/part-of": "ifp-operator",
      ...MANAGED_BY,
    },
  };
}

/** Pure: the shared objects an earlier version made for the runtimes of `kind` in a namespace. */
export function sharedRuntimeAccess(kind: Owner["kind"], namespace: string): KubernetesObject[] {
  const name = sharedAccountName(kind);
  if (kind === "Relay") {
    const sa: V1ServiceAccount = {
      apiVersion: "v1",
      kind: "ServiceAccount",
      metadata: sharedMeta(namespace, name),
      automountServiceAccountToken: false,
    };
    return [sa];
  }
  const sa: V1ServiceAccount = {
    apiVersion: "v1",
    kind: "ServiceAccount",
    metadata: sharedMeta(namespace, name),
    automountServiceAccountToken: true,
  };
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

/** Per cache (one per operator process): the shared objects this process deleted and perhaps still in the cache. */
const deletedBy = new WeakMap<Caches, Set<string>>();

const keyOf = (o: KubernetesObject) => `${o.metadata!.namespace}/${o.kind}/${o.metadata!.name}`;

/**
 * Whether a Deployment of the operator's for runtimes of `kind` in `namespace` may still need the
 * shared account (pure): its pod template names it, or some of its pods are of an older template.
 */
export function sharedAccountInUse(deployments: V1Deployment[], kind: Owner["kind"], namespace: string): boolean {
  const account = sharedAccountName(kind);
  return deployments.some(
    (d) =>
      d.metadata?.namespace === namespace &&
      managedByOperator(d) &&
      d.metadata?.labels?.[COMPONENT_LABEL] === kind.toLowerCase() &&
      (d.spec?.template?.spec?.serviceAccountName === account ||
        !rolledTo(d, d.spec?.template?.spec?.serviceAccountName ?? "")),
  );
}

/**
 * Delete the shared objects of `kind` in `namespace` once nothing needs them (sharedAccountInUse).
 * A namespace without them asks the API server nothing. Returns "Kind/name" of what was deleted.
 */
export async function releaseSharedRuntimeAccess(
  ctx: Pick<ReconcileContext, "kube" | "caches">,
  kind: Owner["kind"],
  namespace: string,
): Promise<string[]> {
  let deleted = deletedBy.get(ctx.caches);
  if (!deleted) deletedBy.set(ctx.caches, (deleted = new Set()));
  const gone = deleted;
  const present = sharedRuntimeAccess(kind, namespace).filter((o) => {
    const cached = ctx.caches.get(o.kind as CachedKind, namespace, o.metadata!.name!);
    return cached && managedByOperator(cached) && !gone.has(`${keyOf(o)}/${cached.metadata?.uid}`);
  });
  if (!present.length || sharedAccountInUse(ctx.caches.list<V1Deployment>("Deployment"), kind, namespace)) return [];
  const out: string[] = [];
  for (const o of present) {
    const uid = ctx.caches.get(o.kind as CachedKind, namespace, o.metadata!.name!)?.metadata?.uid;
    gone.add(`${keyOf(o)}/${uid}`);
    await ctx.kube.remove(o);
    out.push(`${o.kind}/${o.metadata!.name}`);
  }
  return out;
}

/** Whether every pod of the Deployment is of a spec that runs under `account` (pure). */
export function rolledTo(d: V1Deployment | undefined, account: string): boolean {
  if (!d || d.spec?.template?.spec?.serviceAccountName !== account) return false;
  const s = d.status ?? {};
  return (s.observedGeneration ?? 0) >= (d.metadata?.generation ?? 0) && (s.replicas ?? 0) === (s.updatedReplicas ?? 0);
}
