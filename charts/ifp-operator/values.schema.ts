// The chart's values, as a zod schema: the source of values.schema.json (npm run gen) and of
// the defaults in values.yaml, which a test keeps equal.
import { z } from "zod";

const Image = z.strictObject({
  repository: z.string().min(1),
  tag: z.string().default("").describe("defaults to the chart's appVersion"),
  pullPolicy: z.enum(["Always", "IfNotPresent", "Never"]).default("IfNotPresent"),
});

const Resources = z.strictObject({
  requests: z.record(z.string(), z.union([z.string(), z.number()])).optional(),
  limits: z.record(z.string(), z.union([z.string(), z.number()])).optional(),
});

const FreeForm = z.record(z.string(), z.unknown());

export const Values = z.strictObject({
  nameOverride: z.string().default(""),
  fullnameOverride: z.string().default(""),
  image: Image.default({ repository: "ghcr.io/ifp-dev/ifp-operator", tag: "", pullPolicy: "IfNotPresent" }),
  runtimeImage: Image.default({ repository: "ghcr.io/ifp-dev/ifp-runtime", tag: "", pullPolicy: "IfNotPresent" }),
  imagePullSecrets: z.array(z.strictObject({ name: z.string().min(1) })).default([]),
  replicaCount: z.number().int().min(1).default(1),
  leaderElection: z.strictObject({ enabled: z.boolean().default(true) }).default({ enabled: true }),
  watchNamespaces: z.array(z.string().min(1)).default([]),
  logLevel: z.enum(["fatal", "error", "warn", "info", "debug", "trace"]).default("info"),
  crds: z.strictObject({ enabled: z.boolean().default(true), keep: z.boolean().default(true) }).default({ enabled: true, keep: true }),
  rbac: z.strictObject({ create: z.boolean().default(true) }).default({ create: true }),
  serviceAccount: z
    .object({ create: z.boolean().default(true), name: z.string().default(""), annotations: z.record(z.string(), z.string()).default({}) })
    .default({ create: true, name: "", annotations: {} }),
  nats: z
    .object({
      url: z.string().default(""),
      credentialsSecret: z.strictObject({ name: z.string().default(""), key: z.string().default("nats.creds") }).default({ name: "", key: "nats.creds" }),
      install: z.boolean().default(true),
      replicas: z.literal([1, 3]).default(1),
      image: Image.default({ repository: "nats", tag: "2.12-alpine", pullPolicy: "IfNotPresent" }),
      storage: z.strictObject({ size: z.string().default("10Gi"), storageClassName: z.string().default("") }).default({ size: "10Gi", storageClassName: "" }),
      resources: Resources.default({
        requests: { cpu: "100m", memory: "256Mi", "ephemeral-storage": "64Mi" },
        limits: { memory: "1Gi", "ephemeral-storage": "256Mi" },
      }),
    })
    .default({
      url: "",
      credentialsSecret: { name: "", key: "nats.creds" },
      install: true,
      replicas: 1,
      image: { repository: "nats", tag: "2.12-alpine", pullPolicy: "IfNotPresent" },
      storage: { size: "10Gi", storageClassName: "" },
      resources: {
        requests: { cpu: "100m", memory: "256Mi", "ephemeral-storage": "64Mi" },
        limits: { memory: "1Gi", "ephemeral-storage": "256Mi" },
      },
    }),
  metrics: z.strictObject({ port: z.number().int().min(1).max(65535).default(8080) }).default({ port: 8080 }),
  health: z.strictObject({ port: z.number().int().min(1).max(65535).default(8081) }).default({ port: 8081 }),
  resources: Resources.default({
    requests: { cpu: "50m", memory: "128Mi", "ephemeral-storage": "64Mi" },
    limits: { memory: "512Mi", "ephemeral-storage": "256Mi" },
  }),
  podAnnotations: z.record(z.string(), z.string()).default({}),
  podLabels: z.record(z.string(), z.string()).default({}),
  nodeSelector: z.record(z.string(), z.string()).default({}),
  tolerations: z.array(FreeForm).default([]),
  affinity: FreeForm.default({}),
  tests: z.strictObject({ enabled: z.boolean().default(true) }).default({ enabled: true }),
});
export type Values = z.infer<typeof Values>;

/** values.schema.json: the JSON Schema Helm checks values against (install, upgrade, lint, template). */
export function valuesJsonSchema(): Record<string, unknown> {
  const schema = z.toJSONSchema(Values, { io: "input", target: "draft-7" }) as Record<string, unknown>;
  return { ...schema, title: "ifp-operator chart values", $comment: "Generated from charts/ifp-operator/values.schema.ts by npm run gen; do not edit." };
}

