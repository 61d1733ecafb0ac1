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

/** A key of a ConfigMap or Secret in the resource's namespace holding PEM CA certificates. */
const TrustKeyRef = z.object({
  name: z.string().min(1).max(253).regex(/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/, "must be the name of an object in the resource's namespace"),
  key: z.string().min(1).max(253).regex(/^[-._a-zA-Z0-9]+$/, "must be a ConfigMap or Secret key").default("ca.crt"),
});

/** One entry of spec.tls.trust: a ConfigMap's or a Secret's key with PEM CA certificates. */
export const TrustSource = z
  .object({ configMapRef: TrustKeyRef.optional(), secretRef: TrustKeyRef.optional() })
  .refine((t) => !!t.configMapRef !== !!t.secretRef, "each spec.tls.trust entry takes exactly one of configMapRef and secretRef")
  .meta(cel({ rule: "has(self.configMapRef) != has(self.secretRef)", message: "each spec.tls.trust entry takes exactly one of configMapRef and secretRef" }));

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
  trust: z.array(TrustSource).max(16).optional().describe(
    "extra CAs this runtime trusts for its outbound calls, besides the system roots and the install's CA bundle",
  ),
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
