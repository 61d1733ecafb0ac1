// Pure: how an Agent or Relay is reached from outside the cluster (spec.expose) — the Service's
// type and annotations, an Ingress, Gateway API routes — and which of those children a pass
// must delete again. Table-tested in expose.test.ts; docs/exposure.md explains the choices.
import type { KubernetesObject, V1Ingress, V1Service } from "@kubernetes/client-node";
import type { ExposeSpec } from "../../../../runtime/src/resources/expose.ts";
import { childMeta, childNames, selectorLabels, serviceDnsNames } from "../../reconcile/names.ts";
import type { Owner } from "../../reconcile/settings.ts";

export const GATEWAY_GROUP = "gateway.networking.k8s.io";

/** The Service: the HTTPS port only (the agent's local application API stays on loopback). */
export function runtimeService(owner: Owner): V1Service {
  return {
    apiVersion: "v1",
    kind: "Service",
    metadata: childMeta(owner, childNames(owner.metadata.name).service),
    spec: {
      selector: selectorLabels(owner),
      ports: [{ name: "https", port: 443, targetPort: "https", protocol: "TCP" }],
    },
  };
}

/**
 * The Gateway API kinds the operator renders, with the versions it can write, most wanted
 * first: the standard channel serves TLSRoute and BackendTLSPolicy as v1 since v1.5, older
 * releases (experimental channel) as v1alpha2 and v1alpha3. The shapes used are the same.
 */
export const GATEWAY_KINDS = {
  TLSRoute: { plural: "tlsroutes", versions: ["v1", "v1alpha3", "v1alpha2"] },
  HTTPRoute: { plural: "httproutes", versions: ["v1"] },
  BackendTLSPolicy: { plural: "backendtlspolicies", versions: ["v1", "v1alpha3"] },
} as const;
export type GatewayKind = keyof typeof GATEWAY_KINDS;

/** The kinds of children spec.expose may add besides the Service; each is named after the resource. */
export const EXPOSURE_KINDS = ["Ingress", "TLSRoute", "HTTPRoute", "BackendTLSPolicy"] as const;
export type ExposureKind = (typeof EXPOSURE_KINDS)[number];

/**
 * Annotation on the Service: the exposure children the operator last made ("Ingress,TLSRoute"),
 * so that removing one from spec.expose deletes it without listing every kind on every pass.
 */
export const EXPOSED_CHILDREN = "ifp.dev/exposed";

/** The install's CA bundle for this resource (built by the operator): key ca.crt. */
export const trustConfigMap = (name: string) => `${name}-trust`;

/** The Gateway API kinds a spec.expose.gateway needs, by mode. */
export function gatewayKindsFor(expose: ExposeSpec | undefined): GatewayKind[] {
  const mode = expose?.gateway?.mode;
  if (mode === "passthrough") return ["TLSRoute"];
  if (mode === "terminate") return ["HTTPRoute", "BackendTLSPolicy"];
  return [];
}

/** Every host name spec.expose makes public (the serving certificate must cover them). */
export function exposedHosts(expose: ExposeSpec | undefined): string[] {
  return [...new Set([expose?.ingress?.host, expose?.gateway?.hostname].filter((h): h is string => !!h))];
}

/** The runtime's Service with spec.expose.service applied: type, annotations, load balancer settings. */
export function exposedService(owner: Owner, expose: ExposeSpec | undefined, children: ExposureKind[]): V1Service {
  const base = runtimeService(owner);
  const svc = expose?.service;
  // The list of exposure children goes on the Service only when there is one, so that a
  // resource without spec.expose keeps exactly the Service it always had.
  const annotations = {
    ...(svc?.annotations ?? {}),
    ...(children.length ? { [EXPOSED_CHILDREN]: children.join(",") } : {}),
  };
  return {
    ...base,
    metadata: { ...base.metadata, ...(Object.keys(annotations).length ? { annotations } : {}) },
    spec: {
      ...base.spec,
      ...(svc && svc.type !== "ClusterIP" ? { type: svc.type } : {}),
      ...(svc?.loadBalancerClass && svc.type === "LoadBalancer" ? { loadBalancerClass: svc.loadBalancerClass } : {}),
      ...(svc?.externalTrafficPolicy && svc.type !== "ClusterIP"
        ? { externalTrafficPolicy: svc.externalTrafficPolicy }
        : {}),
    },
  };
}

/**
 * The Ingress: host → the Service's https port. Standard Ingress cannot say that the backend
 * speaks HTTPS; that is the controller's annotation (ingress-nginx:
 * nginx.ingress.kubernetes.io/backend-protocol: HTTPS, or ssl-passthrough), passed through.
 */
export function desiredIngress(owner: Owner, ingress: NonNullable<ExposeSpec["ingress"]>): V1Ingress {
  const service = childNames(owner.metadata.name).service;
  return {
    apiVersion: "networking.k8s.io/v1",
    kind: "Ingress",
    metadata: childMeta(
      owner,
      owner.metadata.name,
      ingress.annotations && Object.keys(ingress.annotations).length ? { annotations: { ...ingress.annotations } } : {},
    ),
    spec: {
      ...(ingress.className ? { ingressClassName: ingress.className } : {}),
      ...(ingress.tlsSecretName ? { tls: [{ hosts: [ingress.host], secretName: ingress.tlsSecretName }] } : {}),
      rules: [
        {
          host: ingress.host,
          http: {
            paths: [
              { path: "/", pathType: "Prefix", backend: { service: { name: service, port: { name: "https" } } } },
            ],
          },
        },
      ],
    },
  };
}

function parentRefs(gateway: NonNullable<ExposeSpec["gateway"]>) {
  return gateway.parentRefs.map((p) => ({
    group: GATEWAY_GROUP,
    kind: "Gateway",
    name: p.name,
    ...(p.namespace ? { namespace: p.namespace } : {}),
    ...(p.sectionName ? { sectionName: p.sectionName } : {}),
  }));
}

/**
 * The Gateway API children for spec.expose.gateway, in the versions the API server serves:
 * passthrough → a TLSRoute to the Service's port 443 (the runtime keeps terminating TLS);
 * terminate → an HTTPRoute and a BackendTLSPolicy with which the Gateway re-encrypts to the
 * runtime and checks its certificate for the Service's name against the `<name>-trust` bundle.
 */
export function desiredGatewayChildren(
  owner: Owner,
  gateway: NonNullable<ExposeSpec["gateway"]>,
  versions: Partial<Record<GatewayKind, string>>,
): KubernetesObject[] {
  const name = owner.metadata.name;
  const service = childNames(name).service;
  const backendRefs = [{ group: "", kind: "Service", name: service, port: 443 }];
  const common = { parentRefs: parentRefs(gateway), hostnames: [gateway.hostname] };
  const version = (kind: GatewayKind) => `${GATEWAY_GROUP}/${versions[kind] ?? GATEWAY_KINDS[kind].versions[0]}`;
  if (gateway.mode === "passthrough") {
    return [
      {
        apiVersion: version("TLSRoute"),
        kind: "TLSRoute",
        metadata: childMeta(owner, name),
        spec: { ...common, rules: [{ backendRefs }] },
      } as KubernetesObject,
    ];
  }
  return [
    {
      apiVersion: version("HTTPRoute"),
      kind: "HTTPRoute",
      metadata: childMeta(owner, name),
      spec: { ...common, rules: [{ matches: [{ path: { type: "PathPrefix", value: "/" } }], backendRefs }] },
    } as KubernetesObject,
    {
      apiVersion: version("BackendTLSPolicy"),
      kind: "BackendTLSPolicy",
      metadata: childMeta(owner, name),
      spec: {
        targetRefs: [{ group: "", kind: "Service", name: service, sectionName: "https" }],
        validation: {
          caCertificateRefs: [{ group: "", kind: "ConfigMap", name: trustConfigMap(name) }],
          // The name the runtime's certificate always covers: <name>.<namespace>.svc.
          hostname: serviceDnsNames(owner)[2]!,
        },
      },
    } as KubernetesObject,
  ];
}

/** The exposure children spec.expose asks for (the Service aside), by kind. */
export function wantedExposureKinds(expose: ExposeSpec | undefined): ExposureKind[] {
  return [...(expose?.ingress ? (["Ingress"] as const) : []), ...gatewayKindsFor(expose)];
}

/** What a pass must delete: the exposure children the Service says were made and are no longer wanted. */
export function exposureToPrune(
  service: { metadata?: { annotations?: Record<string, string> } } | undefined,
  wanted: ExposureKind[],
): ExposureKind[] {
  const made = (service?.metadata?.annotations?.[EXPOSED_CHILDREN] ?? "")
    .split(",")
    .filter((k): k is ExposureKind => (EXPOSURE_KINDS as readonly string[]).includes(k));
  return [...new Set(made)].filter((k) => !wanted.includes(k));
}

/** The API version of an exposure kind to read or delete it with (Ingress is built in). */
export function exposureApiVersion(
  kind: ExposureKind,
  versions: Partial<Record<GatewayKind, string>>,
): string | undefined {
  if (kind === "Ingress") return "networking.k8s.io/v1";
  const v = versions[kind];
  return v ? `${GATEWAY_GROUP}/${v}` : undefined;
}

/** The condition's reason when the Gateway API is not installed, and its message. */
export function gatewayMissing(kinds: GatewayKind[], mode: string): { reason: string; message: string } {
  const wanted = kinds.map((k) => `${k} (${GATEWAY_KINDS[k].versions.join(" or ")})`).join(" and ");
  return {
    reason: "GatewayAPIMissing",
    message: `spec.expose.gateway (mode ${mode}) needs the Gateway API, but the API server does not serve ${GATEWAY_GROUP} ${wanted}; install the Gateway API CRDs or remove spec.expose.gateway`,
  };
}

/** The exposure children to render and the Gateway API versions the API server serves. */
export interface ExposurePlanInput {
  kinds: ExposureKind[];
  versions: Partial<Record<GatewayKind, string>>;
}

/**
 * The Service with spec.expose applied, then the Ingress and Gateway API children of the plan
 * (without a plan: everything spec.expose asks for, in the newest versions).
 */
export function exposureChildren(
  owner: Owner,
  expose: ExposeSpec | undefined,
  plan?: ExposurePlanInput,
): KubernetesObject[] {
  const kinds = plan?.kinds ?? wantedExposureKinds(expose);
  const out: KubernetesObject[] = [exposedService(owner, expose, kinds)];
  if (expose?.ingress && kinds.includes("Ingress")) out.push(desiredIngress(owner, expose.ingress));
  if (expose?.gateway)
    out.push(
      ...desiredGatewayChildren(owner, expose.gateway, plan?.versions ?? {}).filter((c) =>
        kinds.includes(c.kind as ExposureKind),
      ),
    );
  return out;
}
