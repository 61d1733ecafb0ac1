// The runtimes' identity of an earlier version, shared by every runtime of a namespace: the
// ServiceAccount `ifp-agent-runtimes` with a Role and RoleBinding of the same name (Events), and
// the ServiceAccount `ifp-relay-runtimes`. Each runtime runs under a ServiceAccount of its own
// (identity.ts); a Deployment of that version rolls to it as on any pod template change. The shared
// objects belong to no single resource (no owner reference) and are deleted once no Deployment
// of the operator's in the namespace runs under them or still has pods of an older spec (which
// may be of the shared account and hold its token).
import type { KubernetesObject, V1Deployment } from "@kubernetes/client-node";
import type { Caches, CachedKind } from "../../kube/caches.ts";
import { COMPONENT_LABEL, managedByOperator } from "../../kube/metadata.ts";
import type { ReconcileContext } from "../../reconcile/context.ts";
import { runtimeNeedsToken } from "./identity.ts";
import type { Owner } from "../../reconcile/settings.ts";

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

/** One object an earlier version made, by kind and name. */
export interface LegacyRef {
  apiVersion: string;
  kind: "ServiceAccount" | "Role" | "RoleBinding";
  namespace: string;
  name: string;
}

/**
 * Pure: what an earlier version made for the runtimes of `kind` in a namespace, by kind and name
 * (all named after the shared account): a ServiceAccount, and for agent runtimes the Role and
 * RoleBinding that let it record Events — the same access each runtime has of its own
 * (identity.ts runtimeIdentityChildren).
 */
export function legacyRuntimeAccess(kind: Owner["kind"], namespace: string): LegacyRef[] {
  const name = sharedAccountName(kind);
  const sa: LegacyRef = { apiVersion: "v1", kind: "ServiceAccount", namespace, name };
  if (!runtimeNeedsToken(kind)) return [sa];
  const rbac = "rbac.authorization.k8s.io/v1";
  return [
    sa,
    { apiVersion: rbac, kind: "Role", namespace, name },
    { apiVersion: rbac, kind: "RoleBinding", namespace, name },
  ];
}

/**
 * Pure: whether a live object is one an earlier version made for the runtimes of a namespace:
 * managed by the operator, labelled as shared, owned by no resource.
 */
export function isLegacyAccess(obj: KubernetesObject | undefined): boolean {
  return (
    !!obj &&
    managedByOperator(obj) &&
    obj.metadata?.labels?.[COMPONENT_LABEL] === SHARED_COMPONENT &&
    !obj.metadata?.ownerReferences?.length
  );
}

/** Per cache (one per operator process): the shared objects this process deleted and perhaps still in the cache. */
const deletedBy = new WeakMap<Caches, Set<string>>();

const keyOf = (o: LegacyRef) => `${o.namespace}/${o.kind}/${o.name}`;

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
export async function releaseLegacyRuntimeAccess(
  ctx: Pick<ReconcileContext, "kube" | "caches">,
  kind: Owner["kind"],
  namespace: string,
): Promise<string[]> {
  let deleted = deletedBy.get(ctx.caches);
  if (!deleted) deletedBy.set(ctx.caches, (deleted = new Set()));
  const gone = deleted;
  const uidOf = (o: LegacyRef) => ctx.caches.get(o.kind as CachedKind, namespace, o.name)?.metadata?.uid;
  const present = legacyRuntimeAccess(kind, namespace).filter(
    (o) =>
      isLegacyAccess(ctx.caches.get(o.kind as CachedKind, namespace, o.name)) && !gone.has(`${keyOf(o)}/${uidOf(o)}`),
  );
  if (!present.length || sharedAccountInUse(ctx.caches.list<V1Deployment>("Deployment"), kind, namespace)) return [];
  const out: string[] = [];
  for (const o of present) {
    gone.add(`${keyOf(o)}/${uidOf(o)}`);
    await ctx.kube.remove({ apiVersion: o.apiVersion, kind: o.kind, metadata: { namespace, name: o.name } });
    out.push(`${o.kind}/${o.name}`);
  }
  return out;
}

/** Whether every pod of the Deployment is of a spec that runs under `account` (pure). */
export function rolledTo(d: V1Deployment | undefined, account: string): boolean {
  if (!d || d.spec?.template?.spec?.serviceAccountName !== account) return false;
  const s = d.status ?? {};
  return (s.observedGeneration ?? 0) >= (d.metadata?.generation ?? 0) && (s.replicas ?? 0) === (s.updatedReplicas ?? 0);
}
