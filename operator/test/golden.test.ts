// The objects the operator renders for the examples (`kubectl apply -f examples/`), with the
// settings the chart's default values give it, against a real API server: every child of the
// example Agents and Relay, compared with `golden/examples.yaml`. What a restructuring of the
// operator must not change is pinned here, byte for byte, apart from what differs on every run
// by design (generated keys, tokens and certificates, uids and times), which is written as a
// placeholder. After a deliberate change of what is rendered: `npx vitest run
// operator/test/golden.test.ts -u`, and the diff of golden/examples.yaml is the change.
import { spawnSync } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { parseAllDocuments, stringify } from "yaml";
import { toolPath } from "../../e2e/tools/tools.ts";
import { parseFlags } from "../src/commands/main.ts";
import { natsAccountOperator, until } from "./support/helpers.ts";

const EXAMPLES = new URL("../../examples/", import.meta.url);
/** The example files, each applied as a user would (the application's image aside). */
const exampleFiles = readdirSync(EXAMPLES)
  .filter((f) => f.endsWith(".yaml"))
  .sort();
const exampleDocs = exampleFiles.flatMap((f) =>
  parseAllDocuments(readFileSync(new URL(f, EXAMPLES), "utf8"))
    .map((d) => d.toJSON())
    .filter(Boolean),
);
const NAMESPACES = [
  ...new Set(exampleDocs.filter((d) => d.kind === "Namespace").map((d) => d.metadata.name as string)),
];
const RESOURCES = exampleDocs.filter((d) => d.kind === "Agent" || d.kind === "Relay");

/** The operator's settings as the chart's default values render its arguments. */
function chartSettings() {
  const r = spawnSync(toolPath("helm"), ["template", "ifp", "charts/ifp-operator", "--namespace", "ifp-system"], {
    encoding: "utf8",
    timeout: 60_000,
  });
  if (r.status !== 0) throw new Error(`helm template: ${r.stderr}`);
  const deployment = parseAllDocuments(r.stdout)
    .map((d) => d.toJSON())
    .find((d) => d?.kind === "Deployment" && d.spec.template.spec.containers.some((c: any) => c.name === "operator"));
  const args: string[] = deployment.spec.template.spec.containers.find((c: any) => c.name === "operator").args;
  return parseFlags(args, {}).options.settings;
}

const KINDS =
  "configmaps,secrets,services,deployments,networkpolicies,serviceaccounts,roles,rolebindings,poddisruptionbudgets";
/** Secrets whose values the operator generates anew on every run (keys, tokens, certificates, credentials). */
const GENERATED_VALUES = /-(tls|nats|local-api|handoff|signing)$/;

/** In any string: a uid, a time, a PEM block (the install CA's certificate) and a 64-digit hash, each a placeholder. */
function stableText(text: string): string {
  return text
    .replace(/-----BEGIN ([A-Z ]+)-----[\s\S]*?-----END \1-----/g, "<$1>")
    .replace(/\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b/g, "<uid>")
    .replace(/\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z\b/g, "<time>")
    .replace(/\b[0-9a-f]{64}\b/g, "<sha256>");
}
const deepStable = (v: any): any =>
  typeof v === "string"
    ? stableText(v)
    : Array.isArray(v)
      ? v.map(deepStable)
      : v && typeof v === "object"
        ? Object.fromEntries(Object.entries(v).map(([k, x]) => [k, deepStable(x)]))
        : v;

/** What of an object differs on every run by design, written as a placeholder. */
function stable(obj: any): any {
  const { metadata } = obj;
  for (const k of ["uid", "resourceVersion", "creationTimestamp", "managedFields", "generation"]) delete metadata[k];
  for (const ref of metadata.ownerReferences ?? []) ref.uid = "<uid>";
  for (const [k, v] of Object.entries(metadata.annotations ?? {}))
    if (/(hash|generated-mark|renew|not-after|created)/i.test(k)) metadata.annotations[k] = `<${typeof v}>`;
  delete obj.status;
  if (
    obj.kind === "Secret" &&
    (GENERATED_VALUES.test(metadata.name) || metadata.labels?.["app.kubernetes.io/managed-by"])
  )
    obj.data = Object.fromEntries(Object.keys(obj.data ?? {}).map((k) => [k, "<generated>"]));
  if (obj.kind === "Service") {
    delete obj.spec.clusterIP;
    delete obj.spec.clusterIPs;
  }
  if (obj.kind === "Deployment") {
    const annotations = obj.spec.template.metadata?.annotations ?? {};
    for (const k of Object.keys(annotations)) if (/hash/i.test(k)) annotations[k] = "<hash>";
  }
  return deepStable(obj);
}

describe("the objects rendered for examples/", () => {
  const operator = natsAccountOperator({
    namespace: NAMESPACES[0]!,
    settings: chartSettings(),
    manager: { watchNamespaces: NAMESPACES },
  });

  it("are those of golden/examples.yaml", async () => {
    const cp = operator.cp();
    for (const f of exampleFiles) cp.kubectl(["apply", "-f", new URL(f, EXAMPLES).pathname]);
    // Each resource's Deployment is the last child the operator applies.
    for (const r of RESOURCES)
      await until(`${r.kind} ${r.metadata.namespace}/${r.metadata.name}'s Deployment`, () => {
        try {
          return cp.json(["-n", r.metadata.namespace, "get", "deployment", r.metadata.name]);
        } catch {
          return undefined;
        }
      });
    const rendered = NAMESPACES.flatMap((ns) =>
      cp
        .json<{ items: any[] }>(["-n", ns, "get", KINDS, "-o", "json"])
        .items.filter((o) => o.metadata.ownerReferences?.length || o.metadata.labels?.["app.kubernetes.io/managed-by"])
        .map(stable)
        .sort((a, b) => `${a.kind}/${a.metadata.name}`.localeCompare(`${b.kind}/${b.metadata.name}`)),
    );
    await expect(rendered.map((o) => stringify(o)).join("---\n")).toMatchFileSnapshot("golden/examples.yaml");
  }, 240_000);
});
