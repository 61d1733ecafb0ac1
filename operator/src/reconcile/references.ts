// What an Agent or Relay may reference. Whoever may create one must not gain more than that: a
// Secret is used only when the operator created it for this very object, or when its owner
// labelled it for this object (ifp.dev/agent: <Agent name>, ifp.dev/relay: <Relay name>).
import type { KubernetesObject } from "@kubernetes/client-node";
import { canonicalHost, hostMatches } from "../../../runtime/src/net/host-name.ts";
import type { Blocker } from "./conditions.ts";
import { COMPONENT_LABEL, INSTANCE_LABEL, managedByOperator } from "../kube/metadata.ts";
import type { Owner } from "./settings.ts";

/** The label by which a Secret's owner lets one Agent (or Relay) use it. */
export function grantLabel(kind: string): string {
  return `ifp.dev/${kind.toLowerCase()}`;
}

/** Whether the operator created this object for `owner` (its labels name it). */
export function createdFor(obj: KubernetesObject, owner: Owner): boolean {
  const labels = obj.metadata?.labels ?? {};
  return (
    managedByOperator(obj) &&
    labels[INSTANCE_LABEL] === owner.metadata.name &&
    labels[COMPONENT_LABEL] === owner.kind.toLowerCase()
  );
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
export function imageRefusal(
  image: string | undefined,
  settings: { runtimeImage: string; allowedImages?: string[] },
): Blocker | undefined {
  if (image === undefined || image === settings.runtimeImage) return undefined;
  const allowed = settings.allowedImages ?? [];
  if (allowed.some((a) => (a.endsWith("*") ? image.startsWith(a.slice(0, -1)) : image === a))) return undefined;
  return {
    reason: "ImageNotAllowed",
    message: `spec.image: ${image} is not among the images this install allows (${[settings.runtimeImage, ...allowed].join(", ")}); the operator's --allowed-images (chart value allowedImages) lists them`,
  };
}

/**
 * Whether `name` matches an allow-list entry: the name itself, `*.<domain>` for any name under it,
 * or `*`; both in their canonical form (case, trailing dot, IDNA: runtime/src/net/host-name.ts).
 */
export function dnsNameAllowed(name: string, allowed: string[]): boolean {
  const n = canonicalHost(name);
  return allowed.some((a) => a === "*" || hostMatches(n, canonicalHost(a)));
}

/** The install's allow-lists of host names: for every namespace, and per namespace. */
export interface HostAllowLists {
  /** --allowed-dns-names: exact names, `*.<domain>`, or `*`, for resources of every namespace. */
  allowedDnsNames?: string[];
  /** --allowed-hosts: by namespace, the hosts (exact or `*.<domain>`) its resources may name. */
  allowedHosts?: Record<string, string[]>;
}

/** The hosts the install allows the resources of `namespace` beyond their own names. */
export function allowedHostsFor(namespace: string, lists: HostAllowLists): string[] {
  const own = lists.allowedHosts && Object.hasOwn(lists.allowedHosts, namespace) ? lists.allowedHosts[namespace]! : [];
  return [...(lists.allowedDnsNames ?? []), ...own];
}

/** How to allow `host` for `namespace`, for a refusal's message. */
export function hostAllowHint(namespace: string, host: string): string {
  return `the operator's --allowed-hosts ${namespace}/${host} (chart value allowedHosts: {${namespace}: [${host}]}) or --allowed-dns-names (chart value allowedDnsNames) allows it`;
}

/** The host of an https URL, or undefined when it does not parse (the schema refuses that first). */
export function urlHost(url: string | undefined): string | undefined {
  if (!url) return undefined;
  try {
    return new URL(url).hostname || undefined;
  } catch {
    return undefined;
  }
}

/** Names a certificate would carry, by the field that asks for them. */
export interface RequestedNames {
  field: string;
  names: (string | undefined)[];
}

/** The hosts a resource's public URL (`field`) and its exposure ask a certificate to name. */
export function requestedHosts(
  field: string,
  url: string | undefined,
  expose: { ingress?: { host: string }; gateway?: { hostname: string } } | undefined,
): RequestedNames[] {
  return [
    { field, names: [urlHost(url)] },
    { field: "spec.expose.ingress.host", names: [expose?.ingress?.host] },
    { field: "spec.expose.gateway.hostname", names: [expose?.gateway?.hostname] },
  ];
}

/**
 * Undefined when the install CA may certify every requested name: the resource's own Service
 * names (`own`), or a name the install allows the namespace (--allowed-dns-names, the namespace's
 * --allowed-hosts). Every runtime of the install trusts the install CA, so a certificate for a
 * name another service answers to — whether asked for in spec.tls.dnsNames, as the host of the
 * public URL or as an exposure host — would let this resource's pods pass for it.
 */
export function dnsNameRefusal(
  requested: RequestedNames[],
  own: string[],
  namespace: string,
  lists: HostAllowLists = {},
): Blocker | undefined {
  const mine = new Set(own.map(canonicalHost));
  const allowed = allowedHostsFor(namespace, lists);
  const refused = requested
    .map((r) => ({
      field: r.field,
      foreign: [
        ...new Set(
          r.names.filter((n): n is string => !!n && !mine.has(canonicalHost(n)) && !dnsNameAllowed(n, allowed)),
        ),
      ],
    }))
    .filter((r) => r.foreign.length);
  if (!refused.length) return undefined;
  const parts = refused.map(
    (r) =>
      `${r.field}: ${r.foreign.join(", ")} ${r.foreign.length === 1 ? "is" : "are"} neither a name of this resource's Services (${[...mine].join(", ")}) nor allowed for namespace ${namespace}${allowed.length ? ` (${allowed.join(", ")})` : ""}`,
  );
  const first = refused[0]!.foreign[0]!;
  return {
    reason: "DNSNameNotAllowed",
    message: `${parts.join("; ")}; the install CA certifies no other name: ${hostAllowHint(namespace, first)}`,
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
export function issuerRefusal(
  ref: { name: string; kind: string; group: string } | undefined,
  allowed: string[] = [],
): Blocker | undefined {
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
 * The refusal of the names a certificate of the install would carry, if any: spec.tls's issuer
 * first, then every name (`requested`: spec.tls.dnsNames, the public URL's host, the exposure
 * hosts) against the resource's own Service names (`own`) and the install's allow-lists. A
 * certificate of the user's own (spec.tls.secretName) is issued by nobody here; its Secret is
 * checked where it is read.
 */
export function tlsRefusal(
  tls:
    | { secretName?: string; issuerRef?: { name: string; kind: string; group: string }; dnsNames?: string[] }
    | undefined,
  names: { namespace: string; own: string[]; requested: RequestedNames[] },
  settings: { allowedIssuers?: string[] } & HostAllowLists,
): Blocker | undefined {
  if (tls?.secretName) return undefined;
  return (
    issuerRefusal(tls?.issuerRef, settings.allowedIssuers) ??
    dnsNameRefusal(
      [{ field: "spec.tls.dnsNames", names: tls?.dnsNames ?? [] }, ...names.requested],
      names.own,
      names.namespace,
      settings,
    )
  );
}
