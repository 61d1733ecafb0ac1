// How the resources' schemas are built: the API group and version, CEL rules beside zod's checks,
// objects that keep the fields of a Kubernetes core type, and a resource's envelope (apiVersion,
// kind, metadata, spec) with its name rule.
import { z } from "zod";

export const GROUP = "ifp.dev";
export const VERSION = "v1alpha1";
export const API_VERSION = `${GROUP}/${VERSION}`;
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
  message:
    "metadata.name must be a DNS-1035 label (lower-case letters, digits and '-', starting with a letter, at most 63 characters): it names the runtime's Service",
};

/** Preserve the fields the schema does not name: the object is a Kubernetes core type. */
export const PASS_THROUGH = { "x-kubernetes-preserve-unknown-fields": true } as const;
export const passThrough = <T extends z.core.$ZodLooseShape>(shape: T, description: string) =>
  z.looseObject(shape).meta({ ...PASS_THROUGH, description });
/** A list whose items are told apart by `name`: the API server refuses two of a name. */
export const byName = { "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"] } as const;

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
