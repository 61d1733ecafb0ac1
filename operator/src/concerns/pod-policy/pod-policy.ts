// What spec.deployment may reach beyond the pod itself. The CRD and the resource schema refuse
// what the "restricted" Pod Security Standard forbids (runtime/src/resources/pod-security.ts); what
// depends on the install or on other objects is checked here before anything is rendered: the
// images of sidecars and init containers (--allowed-images), the Secrets they and the runtime
// container would read (made or labelled for this Agent or Relay, as references.ts has it), and
// where the pods may be placed (--allowed-node-labels, --allowed-tolerations,
// --allowed-priority-classes), and the ServiceAccount they would run under.
import type { KubernetesObject, V1Secret, V1ServiceAccount } from "@kubernetes/client-node";
import type { Kube } from "../../kube/client.ts";
import type { DeploymentSettings } from "../../../../runtime/src/resources/deployment.ts";
import type { Blocker } from "../../reconcile/conditions.ts";
import type { ReconcileContext } from "../../reconcile/context.ts";
import { grantLabel, secretUsableBy } from "../../reconcile/references.ts";
import type { OperatorSettings, Owner, TolerationEntry } from "../../reconcile/settings.ts";

type Loose = Record<string, unknown>;
const FIELD = "spec.deployment";

/** An image on an --allowed-images list: an exact reference, or a prefix ending in `*` (as spec.image is checked). */
const imageAllowed = (image: string, allowed: string[]) =>
  allowed.some((a) => (a.endsWith("*") ? image.startsWith(a.slice(0, -1)) : image === a));
const obj = (v: unknown): Loose | undefined =>
  v && typeof v === "object" && !Array.isArray(v) ? (v as Loose) : undefined;
const arr = (v: unknown): unknown[] => (Array.isArray(v) ? v : []);
const str = (v: unknown): string | undefined => (typeof v === "string" && v !== "" ? v : undefined);

/** A Secret that spec.deployment has the pod read, and the field that names it. */
export interface SecretReference {
  field: string;
  name: string;
}

function envReferences(env: unknown, at: string, out: SecretReference[]): void {
  arr(env).forEach((e, i) => {
    const name = str(obj(obj(obj(e)?.valueFrom)?.secretKeyRef)?.name);
    if (name) out.push({ field: `${at}.env[${i}].valueFrom.secretKeyRef.name`, name });
  });
}

/**
 * Every Secret spec.deployment would put into the pod: env of the runtime container and of each
 * sidecar and init container (valueFrom.secretKeyRef), their envFrom (secretRef), and volumes
 * (secret, projected secret sources, a CSI driver's nodePublishSecretRef).
 */
export function secretReferences(d: DeploymentSettings | undefined): SecretReference[] {
  const out: SecretReference[] = [];
  if (!d) return out;
  envReferences(d.env, FIELD, out);
  for (const key of ["sidecars", "initContainers"] as const) {
    (d[key] ?? []).forEach((c, j) => {
      const at = `${FIELD}.${key}[${j}]`;
      envReferences((c as Loose).env, at, out);
      arr((c as Loose).envFrom).forEach((e, i) => {
        const name = str(obj(obj(e)?.secretRef)?.name);
        if (name) out.push({ field: `${at}.envFrom[${i}].secretRef.name`, name });
      });
    });
  }
  (d.volumes ?? []).forEach((v, i) => {
    const at = `${FIELD}.volumes[${i}]`;
    const volume = v as Loose;
    const secretName = str(obj(volume.secret)?.secretName);
    if (secretName) out.push({ field: `${at}.secret.secretName`, name: secretName });
    arr(obj(volume.projected)?.sources).forEach((s, k) => {
      const name = str(obj(obj(s)?.secret)?.name);
      if (name) out.push({ field: `${at}.projected.sources[${k}].secret.name`, name });
    });
    const csiSecret = str(obj(obj(volume.csi)?.nodePublishSecretRef)?.name);
    if (csiSecret) out.push({ field: `${at}.csi.nodePublishSecretRef.name`, name: csiSecret });
  });
  return out;
}

/**
 * Undefined when every sidecar and init container image may run: any image when the install has
 * no allow-list, else the runtime image or one on --allowed-images.
 */
export function containerImageRefusal(
  d: DeploymentSettings | undefined,
  settings: Pick<OperatorSettings, "runtimeImage" | "allowedImages">,
): Blocker | undefined {
  const allowed = settings.allowedImages ?? [];
  if (!d || !allowed.length) return undefined;
  for (const key of ["sidecars", "initContainers"] as const) {
    for (const [i, c] of (d[key] ?? []).entries()) {
      if (c.image === settings.runtimeImage || imageAllowed(c.image, allowed)) continue;
      return {
        reason: "ImageNotAllowed",
        message: `${FIELD}.${key}[${i}].image: ${c.image} is not among the images this install allows (${[settings.runtimeImage, ...allowed].join(", ")}); the operator's --allowed-images (chart value allowedImages) lists them`,
      };
    }
  }
  return undefined;
}

/** An --allowed-tolerations entry read (undefined when it is not one). */
export function parseTolerationEntry(text: string): TolerationEntry | undefined {
  const m =
    /^([A-Za-z0-9*]([-A-Za-z0-9_./]*[A-Za-z0-9])?)(=([-A-Za-z0-9_.]*))?(:(NoSchedule|PreferNoSchedule|NoExecute))?$/.exec(
      text,
    );
  if (!m || (m[1]!.includes("*") && m[1] !== "*") || (m[1] === "*" && (m[3] || m[5]))) return undefined;
  return { key: m[1]!, ...(m[3] !== undefined ? { value: m[4]! } : {}), ...(m[6] ? { effect: m[6] } : {}) };
}

function tolerationAllowed(t: Loose, entries: TolerationEntry[]): boolean {
  const key = str(t.key);
  const operator = str(t.operator) ?? "Equal";
  const value = typeof t.value === "string" ? t.value : "";
  const effect = str(t.effect);
  return entries.some((e) => {
    if (e.key === "*") return true;
    // Without a key (operator Exists) a toleration tolerates every taint: only `*` allows it.
    if (key !== e.key) return false;
    if (e.value !== undefined && !(operator === "Equal" && value === e.value)) return false;
    // Without an effect a toleration tolerates every effect of the key.
    return e.effect === undefined || effect === e.effect;
  });
}

const listed = (name: string, allowed: string[]) => allowed.includes("*") || allowed.includes(name);

/** The node label keys of a nodeAffinity (required and preferred terms, expressions and fields). */
function nodeAffinityKeys(nodeAffinity: Loose | undefined): { field: string; key: unknown }[] {
  const out: { field: string; key: unknown }[] = [];
  const terms = (list: unknown, at: string, inner?: string) =>
    arr(list).forEach((t, i) => {
      const term = inner ? obj(obj(t)?.[inner]) : obj(t);
      for (const kind of ["matchExpressions", "matchFields"])
        for (const [k, e] of arr(term?.[kind]).entries())
          out.push({ field: `${at}[${i}]${inner ? `.${inner}` : ""}.${kind}[${k}].key`, key: obj(e)?.key });
    });
  const at = `${FIELD}.affinity.nodeAffinity`;
  terms(
    obj(nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution)?.nodeSelectorTerms,
    `${at}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms`,
  );
  terms(
    nodeAffinity?.preferredDuringSchedulingIgnoredDuringExecution,
    `${at}.preferredDuringSchedulingIgnoredDuringExecution`,
    "preference",
  );
  return out;
}

/** The topology keys of a podAffinity (required and weighted terms). */
function podAffinityKeys(podAffinity: Loose | undefined): { field: string; key: unknown }[] {
  const at = `${FIELD}.affinity.podAffinity`;
  return [
    ...arr(podAffinity?.requiredDuringSchedulingIgnoredDuringExecution).map((t, i) => ({
      field: `${at}.requiredDuringSchedulingIgnoredDuringExecution[${i}].topologyKey`,
      key: obj(t)?.topologyKey,
    })),
    ...arr(podAffinity?.preferredDuringSchedulingIgnoredDuringExecution).map((t, i) => ({
      field: `${at}.preferredDuringSchedulingIgnoredDuringExecution[${i}].podAffinityTerm.topologyKey`,
      key: obj(obj(t)?.podAffinityTerm)?.topologyKey,
    })),
  ];
}

/**
 * Undefined when the pods may be placed as spec.deployment asks: every node label that
 * nodeSelector, nodeAffinity and podAffinity select by is on --allowed-node-labels, every
 * toleration on --allowed-tolerations, the priority class on --allowed-priority-classes. Nothing
 * is allowed unless the install lists it: a toleration or a selector can put the pods on the
 * control plane's nodes, a priority class can evict others. podAntiAffinity and
 * topologySpreadConstraints only keep pods apart, and are not restricted.
 */
export function schedulingRefusal(
  d: DeploymentSettings | undefined,
  settings: Pick<OperatorSettings, "allowedNodeLabels" | "allowedTolerations" | "allowedPriorityClasses">,
): Blocker | undefined {
  if (!d) return undefined;
  const labels = settings.allowedNodeLabels ?? [];
  const labelList = labels.length ? ` (${labels.join(", ")})` : " (none)";
  const affinity = obj(d.affinity);
  const keys = [
    ...Object.keys(d.nodeSelector ?? {}).map((key) => ({ field: `${FIELD}.nodeSelector`, key: key as unknown })),
    ...nodeAffinityKeys(obj(affinity?.nodeAffinity)),
    ...podAffinityKeys(obj(affinity?.podAffinity)),
  ];
  for (const { field, key } of keys) {
    if (typeof key === "string" && listed(key, labels)) continue;
    return {
      reason: "NodeLabelNotAllowed",
      message: `${field}: node label ${JSON.stringify(key)} is not among the labels this install lets resources place their pods by${labelList}; the operator's --allowed-node-labels (chart value allowedNodeLabels) lists them`,
    };
  }
  const entries = settings.allowedTolerations ?? [];
  for (const [i, t] of (d.tolerations ?? []).entries()) {
    if (tolerationAllowed(t as Loose, entries)) continue;
    return {
      reason: "TolerationNotAllowed",
      message: `${FIELD}.tolerations[${i}]: ${JSON.stringify(t)} is not among the tolerations this install allows (${entries.length ? entries.map(tolerationText).join(", ") : "none"}); the operator's --allowed-tolerations (chart value allowedTolerations) lists them`,
    };
  }
  const classes = settings.allowedPriorityClasses ?? [];
  if (d.priorityClassName !== undefined && !listed(d.priorityClassName, classes)) {
    return {
      reason: "PriorityClassNotAllowed",
      message: `${FIELD}.priorityClassName: ${d.priorityClassName} is not among the priority classes this install allows (${classes.length ? classes.join(", ") : "none"}); the operator's --allowed-priority-classes (chart value allowedPriorityClasses) lists them`,
    };
  }
  return undefined;
}

export function tolerationText(e: TolerationEntry): string {
  return `${e.key}${e.value !== undefined ? `=${e.value}` : ""}${e.effect ? `:${e.effect}` : ""}`;
}

/** How the reconcilers read a Secret for podSettingsRefusal: from the API server (undefined when absent). */
export function readSecret(ctx: { kube: Pick<Kube, "read"> }) {
  return (namespace: string, name: string) => ctx.kube.read<V1Secret>("v1", "Secret", namespace, name);
}

/**
 * The refusal of spec.deployment, if any: its images, its placement, then each Secret it names,
 * which must exist and be made or labelled for this resource (a Secret named before it exists
 * could be another's, made later: the operator's `<name>-signing` of an Agent created after).
 */
export async function podSettingsRefusal(
  read: (namespace: string, name: string) => Promise<V1Secret | undefined>,
  owner: Owner,
  d: DeploymentSettings | undefined,
  settings: OperatorSettings,
): Promise<Blocker | undefined> {
  const refused = containerImageRefusal(d, settings) ?? schedulingRefusal(d, settings);
  if (refused) return refused;
  const seen = new Map<string, V1Secret | undefined>();
  for (const ref of secretReferences(d)) {
    if (!seen.has(ref.name)) seen.set(ref.name, await read(owner.metadata.namespace, ref.name));
    const secret = seen.get(ref.name);
    if (!secret) {
      return {
        reason: "SecretMissing",
        message: `${ref.field}: Secret ${ref.name} does not exist in namespace ${owner.metadata.namespace}; create it with the label ${grantLabel(owner.kind)}=${owner.metadata.name}`,
      };
    }
    const foreign = secretUsableBy(secret, owner, ref.field);
    if (foreign) return foreign;
  }
  return undefined;
}

/**
 * Undefined when the pods may run under spec.deployment.serviceAccountName: it exists in the
 * namespace and carries `ifp.dev/agent: <name>` (`ifp.dev/relay: <name>`), put there by whoever
 * may edit it. Whoever may create an Agent but not pods must not run a pod, or mount a token, of
 * a ServiceAccount with more rights than theirs.
 */
export async function serviceAccountRefusal(
  ctx: Pick<ReconcileContext, "kube">,
  owner: Owner,
  pod: DeploymentSettings | undefined,
): Promise<Blocker | undefined> {
  const name = pod?.serviceAccountName;
  if (!name) return undefined;
  const field = "spec.deployment.serviceAccountName";
  const ns = owner.metadata.namespace;
  const sa = await ctx.kube.read<V1ServiceAccount>("v1", "ServiceAccount", ns, name);
  if (!sa)
    return {
      reason: "ServiceAccountMissing",
      message: `${field}: ServiceAccount ${name} does not exist in namespace ${ns}`,
    };
  return serviceAccountUsableBy(sa, owner);
}

/** The label check of serviceAccountRefusal (pure). */
export function serviceAccountUsableBy(sa: KubernetesObject, owner: Owner): Blocker | undefined {
  const label = grantLabel(owner.kind);
  if (sa.metadata?.labels?.[label] === owner.metadata.name) return undefined;
  return {
    reason: "ForeignServiceAccount",
    message: `spec.deployment.serviceAccountName: ServiceAccount ${sa.metadata?.name} has no label ${label}=${owner.metadata.name}; label it so if this ${owner.kind}'s pods may run under it`,
  };
}
