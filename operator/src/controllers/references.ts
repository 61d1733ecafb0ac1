// What an Agent or Relay may reference. Whoever may create one must not gain more than that: a
// Secret is used only when the operator created it for this very object, or when its owner
// labelled it for this object (ifp.dev/agent: <Agent name>, ifp.dev/relay: <Relay name>).
import type { KubernetesObject } from "@kubernetes/client-node";
import type { Blocker } from "./conditions.ts";
import { COMPONENT_LABEL, INSTANCE_LABEL, managedByOperator } from "../kube/metadata.ts";
import type { Owner } from "./runtime.ts";

/** The label by which a Secret's owner lets one Agent (or Relay) use it. */
export function grantLabel(kind: string): string {
  return `ifp.dev/${kind.toLowerCase()}`;
}

/** Whether the operator created this object for `owner` (its labels name it). */
export function createdFor(obj: KubernetesObject, owner: Owner): boolean {
  const labels = obj.metadata?.labels ?? {};
  return managedByOperator(obj) && labels[INSTANCE_LABEL] === owner.metadata.name && labels[COMPONENT_LABEL] === owner.kind.toLowerCase();
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

/** Whether `name` matches an allow-list entry: the name itself, `*.<domain>` for any name under it, or `*`. */
function dnsNameAllowed(name: string, allowed: string[]): boolean {
  const n = name.toLowerCase();
  return allowed.some((a) => {
    const e = a.toLowerCase();
    return e === "*" || e === n || (e.startsWith("*.") && n.endsWith(e.slice(1)) && n.length > e.length - 1);
  });
}

/**
 * Undefined when the serving certificate may name each of spec.tls.dnsNames: the resource's own
 * names (its Service's, its public URL's host, its exposure hosts) or one on the install's
 * allow-list. Every runtime of the install trusts the install CA, so a certificate for a name
 * another service answers to would let this resource's pods pass for it.
 */
export function dnsNameRefusal(requested: string[] | undefined, own: string[], allowed: string[] = []): Blocker | undefined {
  const mine = new Set(own.map((n) => n.toLowerCase()));
  const foreign = (requested ?? []).filter((n) => !mine.has(n.toLowerCase()) && !dnsNameAllowed(n, allowed));
  if (!foreign.length) return undefined;
  return {
    reason: "DNSNameNotAllowed",
    message: `spec.tls.dnsNames: ${foreign.join(", ")} ${foreign.length === 1 ? "is" : "are"} neither a name of this resource (${[...mine].join(", ")}) nor on the install's allow-list${allowed.length ? ` (${allowed.join(", ")})` : ""}; the operator's --allowed-dns-names (chart value allowedDnsNames) lists them`,
  };
}

/** How an issuer is written on the allow-list: `<Kind>/<name>`, with `.<group>` after the kind unless it is cert-manager.io. */
export function issuerEntry(ref: { name: string; kind: string; group: string }): string {
  return `${ref.kind}${ref.group === "cert-manager.io" ? "" : `.${ref.group}`}/${ref.name}`;
}

/**
 * Undefined when spec.tls.issuerRef may be used: a cert-manager Issuer of the resource's own
 * namespace (whoever may create the resource there works with that namespace's issuers anyway),
 * or an issuer on the install's allow-list (`ClusterIssuer/letsencrypt`, `ClusterIssuer/*`).
 */
export function issuerRefusal(ref: { name: string; kind: string; group: string } | undefined, allowed: string[] = []): Blocker | undefined {
  if (!ref) return undefined;
  if (ref.kind === "Issuer" && ref.group === "cert-manager.io") return undefined;
  const entry = issuerEntry(ref);
  const kind = entry.slice(0, entry.indexOf("/"));
  if (allowed.includes(entry) || allowed.includes(`${kind}/*`)) return undefined;
  return {
    reason: "IssuerNotAllowed",
    message: `spec.tls.issuerRef: ${entry} is not among the issuers this install allows (an Issuer of the resource's namespace${allowed.length ? `, ${allowed.join(", ")}` : ""}); the operator's --allowed-issuers (chart value allowedIssuers) lists them`,
  };
}

/**
 * The refusal of spec.tls, if any: its issuer first, then its DNS names (`own`: the names the
 * resource has anyway). A certificate of the user's own (spec.tls.secretName) is issued by nobody
 * here; its Secret is checked where it is read.
 */
export function tlsRefusal(tls: { secretName?: string; issuerRef?: { name: string; kind: string; group: string }; dnsNames?: string[] } | undefined, own: string[], settings: { allowedIssuers?: string[]; allowedDnsNames?: string[] }): Blocker | undefined {
  if (tls?.secretName) return undefined;
  return issuerRefusal(tls?.issuerRef, settings.allowedIssuers) ?? dnsNameRefusal(tls?.dnsNames, own, settings.allowedDnsNames);
}
