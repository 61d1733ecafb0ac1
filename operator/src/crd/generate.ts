// CustomResourceDefinitions generated from the zod resource schemas (one source), plus the
// chart's values.schema.json. `npm run gen` writes them; a test fails when they drift.
import { mkdirSync, writeFileSync } from "node:fs";
import { stringify } from "yaml";
import { z } from "zod";
import { AgentSpec } from "../../../runtime/src/resources/agent.ts";
import { GROUP, VERSION } from "../../../runtime/src/resources/common.ts";
import { RelaySpec } from "../../../runtime/src/resources/relay.ts";
import { crdReference } from "./reference.ts";
import { AgentStatus, RelayStatus } from "./status.ts";
import { valuesJsonSchema } from "../../../charts/ifp-operator/values.schema.ts";

type Schema = Record<string, unknown>;

/**
 * Make a zod-generated OpenAPI schema structural for the API server: free-form objects
 * preserve unknown fields, literal unions become integer enums, and JSON-Schema-only keys go.
 */
export function structural(schema: Schema): Schema {
  const out: Schema = {};
  for (const [k, v] of Object.entries(schema)) {
    if (k === "$schema" || k === "additionalProperties" || k === "id") continue;
    if (k === "maximum" && v === Number.MAX_SAFE_INTEGER) continue;
    if (k === "minimum" && v === Number.MIN_SAFE_INTEGER) continue;
    if (k === "properties") {
      out.properties = Object.fromEntries(Object.entries(v as Record<string, Schema>).map(([p, s]) => [p, structural(s)]));
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
  if (schema.type === "number" && Array.isArray(schema.enum) && schema.enum.every(Number.isInteger)) out.type = "integer";
  return out;
}

function specSchema(spec: z.ZodType): Schema {
  return structural(z.toJSONSchema(spec, { target: "openapi-3.0", io: "input" }) as Schema);
}

/** The schema node at a path of property names, "[]" stepping into array items. */
function nodeAt(schema: Schema, path: string[]): Schema {
  let node = schema;
  for (const p of path) {
    const next = p === "[]" ? (node.items as Schema | undefined) : (node.properties as Record<string, Schema> | undefined)?.[p];
    if (!next) throw new Error(`no schema at ${path.join(".")} (stopped at ${p})`);
    node = next;
  }
  return node;
}

/** Add CEL rules (x-kubernetes-validations) where zod's checks do not reach the JSON schema. */
function withValidations(schema: Schema, path: string[], rules: { rule: string; message: string }[]): void {
  const node = nodeAt(schema, path);
  node["x-kubernetes-validations"] = [...((node["x-kubernetes-validations"] as unknown[]) ?? []), ...rules];
}

/** zod's `z.url({protocol: /^https$/})` becomes `format: uri` only; the scheme check is CEL. */
const HTTPS = [{ rule: "self.startsWith('https://')", message: "must be an https:// URL" }];
const HTTP_OR_HTTPS = [{ rule: "self.startsWith('https://') || self.startsWith('http://')", message: "must be an http:// or https:// URL" }];
const TLS_ONE_SOURCE = [{ rule: "!(has(self.secretName) && has(self.issuerRef))", message: "spec.tls takes secretName or issuerRef, not both" }];
/** The name becomes the Service's name and a label value: a DNS-1035 label. */
const NAME_RULE = {
  rule: "self.metadata.name.size() <= 63 && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
  message: "metadata.name must be a DNS-1035 label (lower-case letters, digits and '-', starting with a letter, at most 63 characters): it names the runtime's Service",
};

function statusSchema(status: z.ZodType): Schema {
  const schema = specSchema(status);
  const conditions = nodeAt(schema, ["conditions"]);
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

function crd(kind: string, plural: string, shortNames: string[], spec: Schema, status: Schema, columns: object[]): Schema {
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
          subresources: { status: {} },
          additionalPrinterColumns: [...columns, { name: "Age", type: "date", jsonPath: ".metadata.creationTimestamp" }],
          schema: {
            openAPIV3Schema: {
              type: "object",
              required: ["spec"],
              properties: {
                apiVersion: { type: "string" },
                kind: { type: "string" },
                metadata: { type: "object" },
                spec,
                status,
              },
              "x-kubernetes-validations": [NAME_RULE],
            },
          },
        },
      ],
    },
  };
}

export function agentCrd(): Schema {
  const spec = specSchema(AgentSpec);
  withValidations(spec, ["agentId"], [{ rule: "self == oldSelf", message: "agentId is the agent's identity and cannot change; create a new Agent" }]);
  withValidations(spec, ["baseUrl"], HTTPS);
  withValidations(spec, ["peers", "[]", "url"], HTTPS);
  withValidations(spec, ["relay", "urls", "[]"], HTTPS);
  withValidations(spec, ["handler", "url"], HTTP_OR_HTTPS);
  withValidations(spec, ["notify", "url"], HTTP_OR_HTTPS);
  withValidations(spec, ["tls"], TLS_ONE_SOURCE);
  return crd("Agent", "agents", ["ifpagent"], spec, statusSchema(AgentStatus), [
    { name: "Agent ID", type: "string", jsonPath: ".spec.agentId" },
    { name: "Endpoint", type: "string", jsonPath: ".status.endpoint" },
    conditionsColumn("Ready", "Ready"),
    conditionsColumn("Reason", "Ready", "reason", 1),
    { name: "Public Key", type: "string", jsonPath: ".status.signingKey.publicKey", priority: 1 },
  ]);
}

export function relayCrd(): Schema {
  const spec = specSchema(RelaySpec);
  withValidations(spec, ["url"], HTTPS);
  withValidations(spec, ["retention"], [
    { rule: "!has(oldSelf.storage) || self.storage == oldSelf.storage", message: "retention.storage cannot change in place; create a new Relay" },
  ]);
  withValidations(spec, ["tls"], TLS_ONE_SOURCE);
  return crd("Relay", "relays", ["ifprelay"], spec, statusSchema(RelayStatus), [
    { name: "URL", type: "string", jsonPath: ".spec.url" },
    { name: "Max Age", type: "string", jsonPath: ".spec.retention.maxAge" },
    conditionsColumn("Ready", "Ready"),
    conditionsColumn("Reason", "Ready", "reason", 1),
    { name: "Stream", type: "string", jsonPath: ".status.stream.name", priority: 1 },
  ]);
}

const HEADER = "# Generated by `npm run gen` from runtime/src/resources/*.ts; do not edit.\n";

/** The generated files, path → content. */
export function generatedFiles(): Record<string, string> {
  const files: Record<string, string> = {};
  for (const c of [agentCrd(), relayCrd()]) {
    const text = HEADER + stringify(c, { lineWidth: 0 });
    const name = `${(c.metadata as { name: string }).name}.yaml`;
    files[`crds/${name}`] = text;
    files[`charts/ifp-operator/files/crds/${name}`] = text;
  }
  files["docs/operator-crds.md"] = crdReference([agentCrd(), relayCrd()]) + "\n";
  files["charts/ifp-operator/values.schema.json"] = `${JSON.stringify(valuesJsonSchema(), null, 2)}\n`;
  return files;
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
