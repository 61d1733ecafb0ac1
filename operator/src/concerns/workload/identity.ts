// The runtime's Kubernetes identity, per Agent and Relay: the ServiceAccount `<name>-runtime`
// (owned by the resource, mounting no token) or one the user names in
// spec.deployment.serviceAccountName, and for an Agent a Role and RoleBinding `<name>-runtime`
// that let that ServiceAccount record Events (the only API call a runtime makes: dead letters
// and undeliverable messages on its Agent). The pod mounts no token (automountServiceAccountToken
// false) unless spec.deployment.automountServiceAccountToken asks for it; the agent runtime's
// container alone gets a projected token where the in-cluster client reads it, so the sidecars
// (the user's application) hold none. Pure parts are table-tested in identity.test.ts.
import type {
  KubernetesObject,
  V1Role,
  V1RoleBinding,
  V1ServiceAccount,
  V1Volume,
  V1VolumeMount,
} from "@kubernetes/client-node";
import type { DeploymentSettings } from "../../../../runtime/src/resources/deployment.ts";
import { applyChildren } from "../../kube/apply.ts";
import type { ReconcileContext } from "../../reconcile/context.ts";
import { childMeta } from "../../reconcile/names.ts";
import type { Owner } from "../../reconcile/settings.ts";

/** Where client libraries look for the in-cluster token, CA and namespace (`loadFromCluster`). */
export const SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount";
/** The runtime container's projected token volume (a name of RUNTIME_VOLUMES). */
export const TOKEN_VOLUME = "kube-api";
/** What the ServiceAccount admission plugin gives a token it mounts: an hour and the kubelet's refresh margin. */
export const TOKEN_EXPIRATION_SECONDS = 3607;

/** The ServiceAccount, Role and RoleBinding the operator makes for a resource. */
export function runtimeAccountName(name: string): string {
  return `${name}-runtime`;
}

/** The ServiceAccount the resource's pods run under: the user's, else the operator's `<name>-runtime`. */
export function podServiceAccount(owner: Owner, pod: DeploymentSettings | undefined): string {
  return pod?.serviceAccountName ?? runtimeAccountName(owner.metadata.name);
}

/** Whether the runtime container needs a token of its own: the agent runtime records Events. */
export function runtimeNeedsToken(kind: Owner["kind"]): boolean {
  return kind === "Agent";
}

/**
 * The children that give the runtime its identity (pure): the ServiceAccount unless the user
 * names one, and for an Agent the Role allowing Events and its binding to the pods' ServiceAccount.
 */
export function runtimeIdentityChildren(owner: Owner, pod: DeploymentSettings | undefined): KubernetesObject[] {
  const name = runtimeAccountName(owner.metadata.name);
  const out: KubernetesObject[] = [];
  if (!pod?.serviceAccountName) {
    const sa: V1ServiceAccount = {
      apiVersion: "v1",
      kind: "ServiceAccount",
      metadata: childMeta(owner, name),
      automountServiceAccountToken: false,
    };
    out.push(sa);
  }
  if (runtimeNeedsToken(owner.kind)) {
    const role: V1Role = {
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "Role",
      metadata: childMeta(owner, name),
      rules: [{ apiGroups: [""], resources: ["events"], verbs: ["create", "patch"] }],
    };
    const binding: V1RoleBinding = {
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "RoleBinding",
      metadata: childMeta(owner, name),
      roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name },
      subjects: [{ kind: "ServiceAccount", name: podServiceAccount(owner, pod), namespace: owner.metadata.namespace }],
    };
    out.push(role, binding);
  }
  return out;
}

/**
 * The runtime container's token (pure): the same projected volume the ServiceAccount admission
 * plugin would mount into every container — a token of the pod's ServiceAccount for the API
 * server's audience, renewed by the kubelet, the cluster CA and the namespace — mounted only there.
 */
export function runtimeTokenVolume(): { volume: V1Volume; mount: V1VolumeMount } {
  return {
    volume: {
      name: TOKEN_VOLUME,
      projected: {
        defaultMode: 0o444,
        sources: [
          { serviceAccountToken: { path: "token", expirationSeconds: TOKEN_EXPIRATION_SECONDS } },
          { configMap: { name: "kube-root-ca.crt", items: [{ key: "ca.crt", path: "ca.crt" }] } },
          {
            downwardAPI: {
              items: [{ path: "namespace", fieldRef: { apiVersion: "v1", fieldPath: "metadata.namespace" } }],
            },
          },
        ],
      },
    },
    mount: { name: TOKEN_VOLUME, mountPath: SERVICE_ACCOUNT_DIR, readOnly: true },
  };
}

/**
 * Apply the runtime's identity (runtimeIdentityChildren) one after another: the API server lets
 * the operator bind a Role only once that Role exists and grants nothing the operator lacks.
 * Returns "Kind/name" of what was written.
 */
export async function applyRuntimeIdentity(
  ctx: Pick<ReconcileContext, "kube" | "caches">,
  owner: Owner,
  pod: DeploymentSettings | undefined,
): Promise<string[]> {
  const written: string[] = [];
  for (const child of runtimeIdentityChildren(owner, pod))
    written.push(...(await applyChildren(ctx.kube, ctx.caches, owner, [child])));
  return written;
}
