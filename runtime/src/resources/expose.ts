// spec.expose: how a runtime is reached from outside the cluster (its Service, an Ingress, Gateway
// API routes), and the public host and base URL that follow from it.
import { z } from "zod";
import { Cidr, DnsName } from "./network.ts";
import { cel } from "./schema.ts";

/** Annotations the user adds to a child; the project's own prefix is kept for the operator. */
const ChildAnnotations = z
  .record(z.string().max(317), z.string())
  .refine(
    (a) => Object.keys(a).every((k) => !k.startsWith("ifp.dev/")),
    "annotations under ifp.dev/ belong to the operator",
  )
  .meta(
    cel({
      rule: "self.all(k, !k.startsWith('ifp.dev/'))",
      message: "annotations under ifp.dev/ belong to the operator",
    }),
  );

/** spec.expose: how the runtime is reached from outside the cluster (docs/exposure.md). */
export const ExposeSpec = z.object({
  service: z
    .object({
      type: z.enum(["ClusterIP", "NodePort", "LoadBalancer"]).default("ClusterIP").describe("The Service's type"),
      annotations: ChildAnnotations.optional().describe("Added to the Service, e.g. a cloud load balancer's settings"),
      loadBalancerClass: z
        .string()
        .min(1)
        .max(253)
        .optional()
        .describe("Only with type LoadBalancer; cannot change once set"),
      externalTrafficPolicy: z
        .enum(["Cluster", "Local"])
        .optional()
        .describe("Local keeps the client's source address (NodePort and LoadBalancer)"),
    })
    .meta(
      cel(
        {
          rule: "!has(self.loadBalancerClass) || self.type == 'LoadBalancer'",
          message: "spec.expose.service.loadBalancerClass needs type LoadBalancer",
        },
        {
          rule: "!has(self.externalTrafficPolicy) || self.type != 'ClusterIP'",
          message: "spec.expose.service.externalTrafficPolicy needs type NodePort or LoadBalancer",
        },
      ),
    )
    .optional()
    .describe("The runtime's Service (always created, port https 443)"),
  ingress: z
    .object({
      className: z.string().min(1).max(253).optional().describe("spec.ingressClassName of the Ingress"),
      host: DnsName.describe("The public host name; spec.baseUrl defaults to https://<host>"),
      annotations: ChildAnnotations.optional().describe(
        "Added to the Ingress: the controller's settings, e.g. that the backend speaks HTTPS",
      ),
      tlsSecretName: z
        .string()
        .min(1)
        .max(253)
        .optional()
        .describe(
          "Secret the ingress controller terminates TLS with for host; omit for passthrough or the controller's default certificate",
        ),
    })
    .optional()
    .describe("An Ingress (networking.k8s.io/v1) to the Service's https port"),
  gateway: z
    .object({
      parentRefs: z
        .array(
          z.object({
            name: z.string().min(1).max(253).describe("The Gateway's name"),
            namespace: z
              .string()
              .min(1)
              .max(63)
              .optional()
              .describe("The Gateway's namespace; defaults to the resource's"),
            sectionName: z.string().min(1).max(253).optional().describe("The Gateway listener to attach to"),
          }),
        )
        .min(1)
        .max(32)
        .describe("The Gateways (and listeners) the route attaches to"),
      hostname: DnsName.describe(
        "The public host name; spec.baseUrl defaults to https://<hostname> unless ingress.host is set",
      ),
      mode: z
        .enum(["passthrough", "terminate"])
        .describe(
          "passthrough: a TLSRoute, the runtime terminates TLS; terminate: an HTTPRoute and a BackendTLSPolicy, the Gateway re-encrypts to the runtime",
        ),
    })
    .optional()
    .describe("A Gateway API route (needs the Gateway API CRDs)"),
  trustedProxies: z
    .array(Cidr)
    .max(64)
    .optional()
    .describe(
      "Addresses (CIDR blocks) of proxies in front of the runtime whose X-Forwarded-For is believed for per-address limits",
    ),
});
export type ExposeSpec = z.infer<typeof ExposeSpec>;

/** The public host spec.expose gives the runtime: the Ingress's, else the Gateway route's. */
export function exposedHost(
  expose: { ingress?: { host: string }; gateway?: { hostname: string } } | undefined,
): string | undefined {
  return expose?.ingress?.host ?? expose?.gateway?.hostname;
}

/** The https base URL: the one given, else https://<exposed host>, else undefined. */
export function defaultBaseUrl(
  given: string | undefined,
  expose: Parameters<typeof exposedHost>[0],
): string | undefined {
  if (given) return given;
  const host = exposedHost(expose);
  return host ? `https://${host}` : undefined;
}
