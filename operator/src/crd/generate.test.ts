import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { parse, parseDocument, visit } from "yaml";
import { valuesComments, valuesTable } from "../../../charts/ifp-operator/values.reference.ts";
import { Values, valuesJsonSchema } from "../../../charts/ifp-operator/values.schema.ts";
import { agentCrd, generatedFiles, relayCrd, structural, toYaml } from "./generate.ts";

type Schema = Record<string, unknown>;

const root = new URL("../../../", import.meta.url);

/** The anchors and aliases of a YAML text, as its parsed document holds them. */
function anchorsAndAliases(text: string): string[] {
  const found: string[] = [];
  visit(parseDocument(text), {
    Alias: (_key, node) => void found.push(`alias *${node.source}`),
    Node: (_key, node) => void (node.anchor ? found.push(`anchor &${node.anchor}`) : undefined),
  });
  return found;
}

describe("generated files", () => {
  for (const [path, text] of Object.entries(generatedFiles())) {
    it(`${path} is up to date (npm run gen)`, () => {
      expect(readFileSync(new URL(path, root), "utf8")).toBe(text);
    });
  }

  for (const [path, text] of Object.entries(generatedFiles()).filter(([p]) => p.endsWith(".yaml"))) {
    it(`${path} has no anchors or aliases`, () => {
      expect(anchorsAndAliases(text)).toEqual([]);
    });
  }

  it("writes an object that occurs twice out twice, never as an anchor and an alias", () => {
    const shared = { type: "string", enum: ["a", "b"] };
    const text = toYaml({ first: shared, second: { items: shared } });
    expect(anchorsAndAliases(text)).toEqual([]);
    expect(parse(text)).toEqual({ first: shared, second: { items: shared } });
    // The check itself sees what the yaml library writes by default.
    expect(anchorsAndAliases("first: &a1 {type: string}\nsecond: *a1\n")).toEqual(["anchor &a1", "alias *a1"]);
  });

  it("values.yaml holds exactly the schema's defaults", () => {
    const yaml = parse(readFileSync(new URL("charts/ifp-operator/values.yaml", root), "utf8"));
    expect(yaml).toEqual(Values.parse({}));
  });
});

describe("the chart's values reference", () => {
  const yaml =
    "# A header.\n\n# a is first.\na:\n  # a.b is nested,\n  # over two lines.\n  b: 1\n  # a.c too.\n  c: 2\n# d is last.\nd: x\n";

  it("documents each value by the comment paragraph before it, the first key of a map included", () => {
    expect(Object.fromEntries(valuesComments(yaml))).toEqual({
      a: "a is first.",
      "a.b": "a.b is nested, over two lines.",
      "a.c": "a.c too.",
      d: "d is last.",
    });
  });

  it("lists every value of the chart with its type and default", () => {
    const chart = readFileSync(new URL("charts/ifp-operator/values.yaml", root), "utf8");
    const table = valuesTable(valuesJsonSchema(), valuesComments(chart));
    expect(table).toContain("| `nats.replicas` | `1`, `3` | `1` | nats.replicas of the installed server");
    expect(table).toContain('| `podSecurityContext` | PodSecurityContext | `{"runAsNonRoot":true,"runAsUser":10001,');
    expect(table).toMatch(
      /\| `global.imagePullSecrets` \| list of objects \| {2}\| global.imagePullSecrets, set by a parent chart/,
    );
  });

  it("refuses a value whose comment is missing or does not begin with its name", () => {
    const schema = {
      type: "object",
      properties: {
        a: { type: "object", properties: { b: { type: "number" }, c: { type: "number" } } },
        d: { type: "string" },
      },
    };
    expect(() => valuesTable(schema, valuesComments(yaml))).not.toThrow();
    expect(() => valuesTable(schema, valuesComments(yaml.replace("# a.c too.", "# c too.")))).toThrow(
      /not so for a\.c$/,
    );
    expect(() => valuesTable(schema, valuesComments(yaml.replace("# d is last.\n", "")))).toThrow(/not so for d$/);
    expect(() =>
      valuesTable(
        {
          ...schema,
          properties: { ...schema.properties, e: { type: "string", description: "e, described in the schema" } },
        },
        valuesComments(yaml),
      ),
    ).not.toThrow();
  });
});

describe("structural schemas", () => {
  it("turn free-form objects into preserved unknown fields and drop JSON-Schema-only keys", () => {
    expect(structural({ type: "object", additionalProperties: {} })).toEqual({
      type: "object",
      "x-kubernetes-preserve-unknown-fields": true,
    });
    expect(structural({ type: "object", additionalProperties: { type: "string" } })).toEqual({
      type: "object",
      additionalProperties: { type: "string" },
    });
    expect(structural({ type: "number", enum: [1, 3, 5] })).toEqual({ type: "integer", enum: [1, 3, 5] });
    expect(structural({ type: "integer", maximum: Number.MAX_SAFE_INTEGER, $schema: "x" })).toEqual({
      type: "integer",
    });
  });

  it("contain no $ref, anyOf or oneOf anywhere", () => {
    const text = JSON.stringify(agentCrd());
    expect(text).not.toMatch(/"\$ref"|"anyOf"|"oneOf"/);
  });
});

type Node = {
  description?: string;
  properties?: Record<string, Node>;
  items?: Node;
  additionalProperties?: Node | boolean;
};

/** Every property of a schema (nested objects, list items, map values) that has no description. */
function undescribed(schema: Node, path = ""): string[] {
  const out: string[] = [];
  for (const [name, child] of Object.entries(schema.properties ?? {})) {
    if (!child.description?.trim()) out.push(`${path}.${name}`);
    out.push(...undescribed(child, `${path}.${name}`));
  }
  if (schema.items) out.push(...undescribed(schema.items, `${path}[]`));
  if (schema.additionalProperties && typeof schema.additionalProperties === "object")
    out.push(...undescribed(schema.additionalProperties, `${path}{}`));
  return out;
}

describe("the CRDs' documentation (kubectl explain)", () => {
  for (const crd of [agentCrd(), relayCrd()] as any[]) {
    const root = crd.spec.versions[0].schema.openAPIV3Schema;

    it(`${crd.metadata.name} describes itself and every field, spec and status`, () => {
      expect(root.description.length).toBeGreaterThan(40);
      // metadata is the API server's own: a CRD may not describe it.
      expect(undescribed(root)).toEqual([".metadata"]);
      expect(root.properties.spec.description).toBeTruthy();
      expect(root.properties.status.description).toBeTruthy();
    });

    it(`${crd.metadata.name} names every field in camelCase`, () => {
      const names: string[] = [];
      const walk = (n: Node) => {
        for (const [k, c] of Object.entries(n.properties ?? {})) names.push(k), walk(c);
        if (n.items) walk(n.items);
      };
      walk(root);
      expect(names.filter((k) => !/^[a-z][a-zA-Z0-9]*$/.test(k))).toEqual([]);
    });
  }

  it("finds a field without a description at any depth", () => {
    const schema = {
      properties: {
        a: { description: "a", properties: { b: { type: "string" } } },
        c: { description: " ", items: { properties: { d: {} } } },
        e: { description: "e", additionalProperties: { properties: { f: {} } } },
      },
    };
    expect(undescribed(schema as Node)).toEqual([".a.b", ".c", ".c[].d", ".e{}.f"]);
  });

  it("shows the status summary, the last error included, in the default kubectl get view of both kinds", () => {
    // A column with a priority above 0 shows only with -o wide.
    const defaultView = (crd: any) =>
      crd.spec.versions[0].additionalPrinterColumns
        .filter((c: { priority?: number }) => !c.priority)
        .map((c: { name: string }) => c.name);
    expect(defaultView(agentCrd())).toEqual([
      "Agent ID",
      "Endpoint",
      "Ready",
      "Accepted 1h",
      "Backlog",
      "Last Error",
      "Age",
    ]);
    expect(defaultView(relayCrd())).toEqual(["URL", "Max Age", "Ready", "Accepted 1h", "Backlog", "Last Error", "Age"]);
  });

  it("gives the Agent and the Relay a scale subresource on spec.replicas and status.selector, and addresses both kinds by short name and category", () => {
    for (const [crd, shortName] of [
      [agentCrd(), "ifpagent"],
      [relayCrd(), "ifprelay"],
    ] as const) {
      expect(crd).toMatchObject({
        spec: {
          names: { shortNames: [shortName], categories: ["ifp"] },
          versions: [
            {
              subresources: {
                status: {},
                scale: {
                  specReplicasPath: ".spec.replicas",
                  statusReplicasPath: ".status.replicas",
                  labelSelectorPath: ".status.selector",
                },
              },
            },
          ],
        },
      });
      const version = (crd.spec as { versions: { schema: { openAPIV3Schema: Schema } }[] }).versions[0]!;
      const props = version.schema.openAPIV3Schema.properties as Record<string, Schema>;
      expect((props.spec!.properties as Record<string, Schema>).replicas).toMatchObject({ type: "integer" });
      expect((props.status!.properties as Record<string, Schema>).selector).toMatchObject({ type: "string" });
    }
  });
});
