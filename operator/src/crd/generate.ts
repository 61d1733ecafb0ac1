// CustomResourceDefinitions generated from the zod resource schemas (one source), plus the
// chart's values.schema.json and values reference. `npm run gen` writes them; a test fails when they drift.
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { stringify } from "yaml";
import { z } from "zod";
import { Agent } from "../../../runtime/src/resources/agent.ts";
import { GROUP, VERSION } from "../../../runtime/src/resources/schema.ts";
import { Relay } from "../../../runtime/src/resources/relay.ts";
import { crdReference } from "./reference.ts";
import { AgentStatus, RelayStatus } from "./status.ts";
import { valuesReadme } from "../../../charts/ifp-operator/values.reference.ts";
import { valuesJsonSchema } from "../../../charts/ifp-operator/values.schema.ts";

type Schema = Record<string, unknown>;

const VALIDATIONS = "x-kubernetes-validations";

/**
 * Make a zod-generated OpenAPI schema structural for the API server: free-form objects
 * preserve unknown fields, literal unions become integer enums, and JSON-Schema-only keys go.
 * CEL rules (attached to the zod schemas with `.meta(cel(...))`) come last in their node.
 */
export function structural(schema: Schema): Schema {
  const out: Schema = {};
  for (const [k, v] of Object.entries(schema)) {
    if (k === "$schema" || k === "additionalProperties" || k === "id") continue;
    if (k === "maximum" && v === Number.MAX_SAFE_INTEGER) continue;
    if (k === "minimum" && v === Number.MIN_SAFE_INTEGER) continue;
    if (k === "properties") {
      out.properties = Object.fromEntries(
        Object.entries(v as Record<string, Schema>).map(([p, s]) => [p, structural(s)]),
      );
    } else if (k === "items") {
      out.items = structural(v as Schema);
    } else {
      out[k] = v;
    }
  }
  const ap = schema.additionalProperties;
  if (schema.type === "object" && !schema.properties) {
    if (ap && typeof ap === "object" && Object.keys(ap).length) out.additionalProperties = structural(ap as Schema);
    else out["x-kubernetes-preserve-unknown-fields"] = true;
  }
  if (schema.type === "number" && Array.isArray(schema.enum) && schema.enum.every(Number.isInteger))
    out.type = "integer";
  if (Array.isArray(schema[VALIDATIONS])) {
    delete out[VALIDATIONS];
    out[VALIDATIONS] = [...(schema[VALIDATIONS] as unknown[])];
  }
  return out;
}

function specSchema(spec: z.ZodType): Schema {
  return structural(z.toJSONSchema(spec, { target: "openapi-3.0", io: "input" }) as Schema);
}

function statusSchema(status: z.ZodType): Schema {
  const schema = specSchema(status);
  const conditions = (schema.properties as Record<string, Schema>).conditions!;
  conditions["x-kubernetes-list-type"] = "map";
  conditions["x-kubernetes-list-map-keys"] = ["type"];
  return schema;
}

const conditionsColumn = (name: string, type: string, field = "status", priority = 0) => ({
  name,
  type: "string",
  jsonPath: `.status.conditions[?(@.type=="${type}")].${field}`,
  ...(priority ? { priority } : {}),
});

/** status.summary: traffic at a glance, the last error included, in the default `kubectl get` view. */
const summaryColumns = [
  {
    name: "Accepted 1h",
    type: "integer",
    jsonPath: ".status.summary.acceptedLastHour",
    description: "Messages stored in the last hour",
  },
  { name: "Backlog", type: "integer", jsonPath: ".status.summary.backlog", description: "Messages waiting" },
  {
    name: "Last Error",
    type: "string",
    jsonPath: ".status.summary.lastError",
    description: "The runtime's newest delivery problem",
  },
];

/** The CEL rules on a resource's root (its zod object's `.meta()`). */
function rootValidations(resource: z.ZodType): unknown[] {
  return (z.globalRegistry.get(resource)?.[VALIDATIONS] as unknown[] | undefined) ?? [];
}

/** The standard fields of every resource, described as Kubernetes' own CRDs describe them. */
const STANDARD_FIELDS = {
  apiVersion: {
    type: "string",
    description: "APIVersion defines the versioned schema of this representation of an object: ifp.dev/v1alpha1",
  },
  kind: { type: "string", description: "Kind is the type of this object" },
  // The API server refuses anything but the type on metadata (kubectl explain has its own text for it).
  metadata: { type: "object" },
};

interface CrdOptions {
  kind: string;
  plural: string;
  shortNames: string[];
  description: string;
  resource: z.ZodObject<{ spec: z.ZodType }>;
  status: Schema;
  columns: object[];
  /** The scale subresource: spec.replicas, status.replicas and status.selector. */
  scale?: boolean;
}

function crd({ kind, plural, shortNames, description, resource, status, columns, scale }: CrdOptions): Schema {
  return {
    apiVersion: "apiextensions.k8s.io/v1",
    kind: "CustomResourceDefinition",
    metadata: { name: `${plural}.${GROUP}`, labels: { "app.kubernetes.io/part-of": "ifp-operator" } },
    spec: {
      group: GROUP,
      names: { kind, listKind: `${kind}List`, plural, singular: kind.toLowerCase(), shortNames, categories: ["ifp"] },
      scope: "Namespaced",
      versions: [
        {
          name: VERSION,
          served: true,
          storage: true,
          subresources: {
            status: {},
            ...(scale
              ? {
                  scale: {
                    specReplicasPath: ".spec.replicas",
                    statusReplicasPath: ".status.replicas",
                    labelSelectorPath: ".status.selector",
                  },
                }
              : {}),
          },
          additionalPrinterColumns: [
            ...columns,
            { name: "Age", type: "date", jsonPath: ".metadata.creationTimestamp" },
          ],
          schema: {
            openAPIV3Schema: {
              type: "object",
              description,
              required: ["spec"],
              properties: {
                ...STANDARD_FIELDS,
                spec: specSchema(resource.shape.spec),
                status,
              },
              [VALIDATIONS]: rootValidations(resource),
            },
          },
        },
      ],
    },
  };
}

export function agentCrd(): Schema {
  return crd({
    kind: "Agent",
    plural: "agents",
    shortNames: ["ifpagent"],
    description:
      "An Inter-Face Protocol agent: the operator runs its runtime (a Deployment, a Service and a signing key) that publishes the agent's identity and capability documents, accepts signed messages into its inbox and hands them to the application. Address it as agents.ifp.dev or ifpagent where another API defines a kind Agent.",
    resource: Agent,
    status: statusSchema(AgentStatus),
    scale: true,
    columns: [
      { name: "Agent ID", type: "string", jsonPath: ".spec.agentId" },
      { name: "Endpoint", type: "string", jsonPath: ".status.endpoint" },
      conditionsColumn("Ready", "Ready"),
      conditionsColumn("Reason", "Ready", "reason", 1),
      ...summaryColumns,
      { name: "Public Key", type: "string", jsonPath: ".status.signingKey.publicKey", priority: 1 },
    ],
  });
}

export function relayCrd(): Schema {
  return crd({
    kind: "Relay",
    plural: "relays",
    shortNames: ["ifprelay"],
    description:
      "An Inter-Face Protocol relay: the operator runs its runtime, which holds signed messages for the agents it serves in a JetStream stream until they fetch them or it delivers them to their webhooks. Address it as relays.ifp.dev or ifprelay.",
    resource: Relay,
    status: statusSchema(RelayStatus),
    scale: true,
    columns: [
      { name: "URL", type: "string", jsonPath: ".spec.url" },
      { name: "Max Age", type: "string", jsonPath: ".spec.retention.maxAge" },
      conditionsColumn("Ready", "Ready"),
      conditionsColumn("Reason", "Ready", "reason", 1),
      ...summaryColumns,
      { name: "Stream", type: "string", jsonPath: ".status.stream.name", priority: 1 },
    ],
  });
}

const HEADER = "# Generated by `npm run gen` from runtime/src/resources/*.ts; do not edit.\n";

/**
 * YAML for people to read: an object that occurs twice is written out twice, never as an
 * anchor (&a1) and an alias (*a1), which kubectl, Helm and readers handle poorly.
 */
export function toYaml(value: unknown): string {
  return stringify(value, { lineWidth: 0, aliasDuplicateObjects: false });
}

/** The generated files, path → content. */
export function generatedFiles(): Record<string, string> {
  const files: Record<string, string> = {};
  for (const c of [agentCrd(), relayCrd()]) {
    const text = HEADER + toYaml(c);
    const name = `${(c.metadata as { name: string }).name}.yaml`;
    files[`crds/${name}`] = text;
    files[`charts/ifp-operator/files/crds/${name}`] = text;
  }
  files["docs/operator-crds.md"] = `${crdReference([agentCrd(), relayCrd()])}\n`;
  return { ...files, ...chartFiles() };
}

/** The chart's generated files: values.schema.json, and the values reference in its README.md. */
export function chartFiles(): Record<string, string> {
  const chart = new URL("../../../charts/ifp-operator/", import.meta.url);
  const schema = valuesJsonSchema();
  return {
    "charts/ifp-operator/values.schema.json": `${JSON.stringify(schema, null, 2)}\n`,
    "charts/ifp-operator/README.md": valuesReadme(
      readFileSync(new URL("README.md", chart), "utf8"),
      schema,
      readFileSync(new URL("values.yaml", chart), "utf8"),
    ),
  };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const root = new URL("../../../", import.meta.url);
  for (const [path, text] of Object.entries(generatedFiles())) {
    const url = new URL(path, root);
    mkdirSync(new URL(".", url), { recursive: true });
    writeFileSync(url, text);
    process.stdout.write(`wrote ${path}\n`);
  }
}
