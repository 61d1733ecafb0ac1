// What an Agent or Relay may reference. Whoever may create one must not gain more than that: a
// Secret is used only when the operator created it for this very object, or when its owner
// labelled it for this object (ifp.dev/agent: <Agent name>, ifp.dev/relay: <Relay name>).
import type { KubernetesObject } from "@kubernetes/client-node";
import type { Blocker } from "./conditions.ts";
import { COMPONENT_LABEL, INSTANCE_LABEL, MANAGED_BY } from "../kube/metadata.ts";
import type { Owner } from "./runtime.ts";

/** The label by which a Secret's owner lets one Agent (or Relay) use it. */
export function grantLabel(kind: string): string {
  return `ifp.dev/${kind.toLowerCase()}`;
}

/** Whether the operator created this object for `owner` (its labels name it). */
export function createdFor(obj: KubernetesObject, owner: Owner): boolean {
  const labels = obj.metadata?.labels ?? {};
  const managed = labels["app.kubernetes.io/managed-by"] === MANAGED_BY["app.kubernetes.io/managed-by"];
  return managed && labels[INSTANCE_LABEL] === owner.metadata.name && labels[COMPONENT_LABEL] === owner.kind.toLowerCase();
}

/** Undefined when `owner` may use the Secret named by `field`, else the refusal to report. */
export function secretUsableBy(secret: KubernetesObject, owner: Owner, field: string): Blocker | undefined {
  if (createdFor(secret, owner)) return undefined;
  const label = grantLabel(owner.kind);
  if (secret.metadata?.labels?.[label] === owner.metadata.name) return undefined;
  return {
    reason: "ForeignSecret",
    message: `${field}: Secret ${secret.metadata?.name} was not created by the operator for ${owner.kind} ${owner.metadata.name} and has no label ${label}=${owner.metadata.name}; label it so if this ${owner.kind} may use it`,
  };
}

/** Undefined when spec.image may be used: it is the runtime image or on the install's allow-list. */
export function imageRefusal(image: string | undefined, settings: { runtimeImage: string; allowedImages?: string[] }): Blocker | undefined {
  if (image === undefined || image === settings.runtimeImage) return undefined;
  const allowed = settings.allowedImages ?? [];
  if (allowed.some((a) => (a.endsWith("*") ? image.startsWith(a.slice(0, -1)) : image === a))) return undefined;
  return {
    reason: "ImageNotAllowed",
    message: `spec.image: ${image} is not among the images this install allows (${[settings.runtimeImage, ...allowed].join(", ")}); the operator's --allowed-images (chart value allowedImages) lists them`,
  };
}
