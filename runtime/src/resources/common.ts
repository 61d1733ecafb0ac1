import { isIP } from "node:net";
import { z } from "zod";

export const GROUP = "ifp.dev";
export const VERSION = "v1alpha1";
export const API_VERSION = `${GROUP}/${VERSION}`;

const DURATION_UNITS: Record<string, number> = {
  ns: 1e-6,
  us: 1e-3,
  "µs": 1e-3,
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
};
const DURATION_RE = /^(\d+(?:\.\d+)?(?:ns|us|µs|ms|s|m|h))+$/;
const DURATION_PART_RE = /(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)/g;

/** A CEL rule the API server checks, for what zod's checks cannot say in a JSON schema. */
export interface CelRule {
  rule: string;
  message: string;
}

/**
 * Metadata that puts CEL rules on a schema's node of the generated CRD
 * (`x-kubernetes-validations`), as kube-rs attaches them to fields: `.meta(cel(rule))`.
 */
export function cel(...rules: CelRule[]): { "x-kubernetes-validations": CelRule[] } {
  return { "x-kubernetes-validations": rules };
}

/** The name becomes the Service's name and a label value: a DNS-1035 label. On the resource's root. */
const RESOURCE_NAME_RULE: CelRule = {
  rule: "self.metadata.name.size() <= 63 && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
  message: "metadata.name must be a DNS-1035 label (lower-case letters, digits and '-', starting with a letter, at most 63 characters): it names the runtime's Service",
};

/**
 * An https URL. zod's protocol check becomes only `format: uri` in the JSON schema; the
 * scheme is checked by CEL.
 */
export const HttpsUrl = z.url({ protocol: /^https$/ }).meta(cel({ rule: "self.startsWith('https://')", message: "must be an https:// URL" }));

/** An http or https URL (the agent's own handler and notification endpoints). */
export const HttpUrl = z
  .url({ protocol: /^https?$/ })
  .meta(cel({ rule: "self.startsWith('https://') || self.startsWith('http://')", message: "must be an http:// or https:// URL" }));

/** Milliseconds of a Go-style duration string ("168h", "1m30s", "250ms"), the form Kubernetes and CEL use. */
export function parseDuration(text: string): number {
  if (!DURATION_RE.test(text)) throw new Error(`invalid duration ${JSON.stringify(text)} (use forms like 30s, 5m, 168h)`);
  let ms = 0;
  for (const [, value, unit] of text.matchAll(DURATION_PART_RE)) ms += Number(value) * DURATION_UNITS[unit!]!;
  return ms;
}

/** A Go-style duration string, e.g. `168h` or `1m30s`. */
export const Duration = z
  .string()
  .regex(DURATION_RE, "must be a duration such as 30s, 5m or 168h");

/** base64url (no padding) of a raw 32-byte Ed25519 public key. */
export const Ed25519PublicKey = z
  .string()
  .regex(/^[A-Za-z0-9_-]{43}$/, "must be the base64url (no padding) encoding of a raw 32-byte Ed25519 public key");

export const TrustedKey = z.object({
  keyId: z.string().min(1).max(128).regex(/^[^#\s]+$/, "must not contain '#' or white space"),
  publicKey: Ed25519PublicKey,
  status: z.enum(["active", "retired", "revoked"]).default("active").describe(
    "active and retired keys are accepted; revoked keys are refused",
  ),
});
export type TrustedKey = z.infer<typeof TrustedKey>;

export const AgentId = z.string().min(1).max(512).regex(/^\S+$/, "must not contain white space");

/** The agents a relay serves or an agent trusts, with keys trusted out of band. */
export const KnownAgent = z.object({
  agentId: AgentId,
  keys: z.array(TrustedKey).min(1),
});

export const TlsSpec = z.object({
  secretName: z.string().min(1).optional().describe("Secret of type kubernetes.io/tls with tls.crt and tls.key"),
  issuerRef: z
    .object({
      name: z.string().min(1),
      kind: z.string().default("Issuer"),
      group: z.string().default("cert-manager.io"),
    })
    .optional()
    .describe("cert-manager issuer that signs the serving certificate"),
  dnsNames: z.array(z.string().min(1)).optional(),
}).meta(cel({ rule: "!(has(self.secretName) && has(self.issuerRef))", message: "spec.tls takes secretName or issuerRef, not both" }));

/** Object metadata as far as the runtime reads it from a rendered manifest. */
export const ObjectMeta = z.looseObject({
  name: z.string().min(1).optional(),
  namespace: z.string().optional(),
  creationTimestamp: z.string().optional(),
  generation: z.number().optional(),
  annotations: z.record(z.string(), z.string()).optional(),
  labels: z.record(z.string(), z.string()).optional(),
});

/** A resource of this API group: apiVersion, kind, metadata and its spec, its name a DNS-1035 label. */
export function resource<K extends string, S extends z.ZodType>(kind: K, spec: S) {
  return z
    .object({
      apiVersion: z.literal(API_VERSION),
      kind: z.literal(kind),
      metadata: ObjectMeta.prefault({}),
      spec,
    })
    .meta(cel(RESOURCE_NAME_RULE));
}

/**
 * A DNS name as a host header carries it: lower-case labels of letters, digits and '-', no
 * scheme, port, path or wildcard (it becomes the default https base URL).
 */
const DNS_NAME = "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$";
const DNS_NAME_MESSAGE = "must be a DNS name such as agent.example.com (lower case; no scheme, port, path or wildcard)";
export const DnsName = z
  .string()
  .min(1)
  .max(253)
  // A CEL rule rather than a pattern, so that the API server answers with the message.
  .refine((s) => new RegExp(DNS_NAME).test(s), DNS_NAME_MESSAGE)
  .meta(cel({ rule: `self.matches('${DNS_NAME.replaceAll("\\", "\\\\")}')`, message: DNS_NAME_MESSAGE }));

/** An IP address or a CIDR block ("10.0.0.0/8", "2001:db8::/32", "192.0.2.7"). */
export function isCidrOrIp(text: string): boolean {
  const [addr, bits, ...rest] = text.split("/");
  if (rest.length || !addr) return false;
  const family = isIP(addr);
  if (!family) return false;
  if (bits === undefined) return true;
  if (!/^\d{1,3}$/.test(bits)) return false;
  return Number(bits) <= (family === 4 ? 32 : 128);
}

const Cidr = z
  .string()
  .max(64)
  .refine(isCidrOrIp, "must be an IP address or a CIDR block such as 10.0.0.0/8")
  .meta(cel({ rule: "isCIDR(self) || isIP(self)", message: "must be an IP address or a CIDR block such as 10.0.0.0/8" }));

/** Annotations the user adds to a child; the project's own prefix is kept for the operator. */
const ChildAnnotations = z
  .record(z.string().max(317), z.string())
  .refine((a) => Object.keys(a).every((k) => !k.startsWith("ifp.dev/")), "annotations under ifp.dev/ belong to the operator")
  .meta(cel({ rule: "self.all(k, !k.startsWith('ifp.dev/'))", message: "annotations under ifp.dev/ belong to the operator" }));

/** spec.expose: how the runtime is reached from outside the cluster (docs/exposure.md). */
export const ExposeSpec = z.object({
  service: z
    .object({
      type: z.enum(["ClusterIP", "NodePort", "LoadBalancer"]).default("ClusterIP"),
      annotations: ChildAnnotations.optional().describe("Added to the Service, e.g. a cloud load balancer's settings"),
      loadBalancerClass: z.string().min(1).max(253).optional().describe("Only with type LoadBalancer; cannot change once set"),
      externalTrafficPolicy: z.enum(["Cluster", "Local"]).optional().describe("Local keeps the client's source address (NodePort and LoadBalancer)"),
    })
    .meta(cel(
      { rule: "!has(self.loadBalancerClass) || self.type == 'LoadBalancer'", message: "spec.expose.service.loadBalancerClass needs type LoadBalancer" },
      { rule: "!has(self.externalTrafficPolicy) || self.type != 'ClusterIP'", message: "spec.expose.service.externalTrafficPolicy needs type NodePort or LoadBalancer" },
    ))
    .optional()
    .describe("The runtime's Service (always created, port https 443)"),
  ingress: z
    .object({
      className: z.string().min(1).max(253).optional().describe("spec.ingressClassName of the Ingress"),
      host: DnsName.describe("The public host name; spec.baseUrl defaults to https://<host>"),
      annotations: ChildAnnotations.optional().describe("Added to the Ingress: the controller's settings, e.g. that the backend speaks HTTPS"),
      tlsSecretName: z.string().min(1).max(253).optional().describe("Secret the ingress controller terminates TLS with for host; omit for passthrough or the controller's default certificate"),
    })
    .optional()
    .describe("An Ingress (networking.k8s.io/v1) to the Service's https port"),
  gateway: z
    .object({
      parentRefs: z
        .array(z.object({
          name: z.string().min(1).max(253),
          namespace: z.string().min(1).max(63).optional(),
          sectionName: z.string().min(1).max(253).optional(),
        }))
        .min(1)
        .max(32)
        .describe("The Gateways (and listeners) the route attaches to"),
      hostname: DnsName.describe("The public host name; spec.baseUrl defaults to https://<hostname> unless ingress.host is set"),
      mode: z.enum(["passthrough", "terminate"]).describe(
        "passthrough: a TLSRoute, the runtime terminates TLS; terminate: an HTTPRoute and a BackendTLSPolicy, the Gateway re-encrypts to the runtime",
      ),
    })
    .optional()
    .describe("A Gateway API route (needs the Gateway API CRDs)"),
  trustedProxies: z
    .array(Cidr)
    .max(64)
    .optional()
    .describe("Addresses (CIDR blocks) of proxies in front of the runtime whose X-Forwarded-For is believed for per-address limits"),
});
export type ExposeSpec = z.infer<typeof ExposeSpec>;

/** The public host spec.expose gives the runtime: the Ingress's, else the Gateway route's. */
export function exposedHost(expose: { ingress?: { host: string }; gateway?: { hostname: string } } | undefined): string | undefined {
  return expose?.ingress?.host ?? expose?.gateway?.hostname;
}

/** The https base URL: the one given, else https://<exposed host>, else undefined. */
export function defaultBaseUrl(given: string | undefined, expose: Parameters<typeof exposedHost>[0]): string | undefined {
  if (given) return given;
  const host = exposedHost(expose);
  return host ? `https://${host}` : undefined;
}
