// The layers of docs/architecture.md, checked on the imports themselves: no import cycle in
// runtime/src or operator/src, no import in runtime/src that points up the layer order, and every
// product file opening with a comment saying what it holds.
import { readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import ts from "typescript";
import { describe, expect, it } from "vitest";

const ROOT = resolve(import.meta.dirname, "..");

interface Edge {
  from: string;
  to: string;
  /** `import type`, `export type`, or named imports that are all `type`: erased when compiled. */
  typeOnly: boolean;
}

function tsFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((e) => {
    const p = join(dir, e);
    return statSync(p).isDirectory() ? tsFiles(p) : p.endsWith(".ts") ? [p] : [];
  });
}

function isTypeOnly(node: ts.ImportDeclaration | ts.ExportDeclaration): boolean {
  if (ts.isExportDeclaration(node)) {
    if (node.isTypeOnly) return true;
    const c = node.exportClause;
    return !!c && ts.isNamedExports(c) && c.elements.length > 0 && c.elements.every((e) => e.isTypeOnly);
  }
  const clause = node.importClause;
  if (!clause) return false; // a side-effect import runs the module
  if (clause.isTypeOnly) return true;
  if (clause.name) return false;
  const b = clause.namedBindings;
  return !!b && ts.isNamedImports(b) && b.elements.length > 0 && b.elements.every((e) => e.isTypeOnly);
}

/** Every relative import of every .ts file under `dir` (paths relative to the repository). */
export function importEdges(dir: string): Edge[] {
  const edges: Edge[] = [];
  for (const file of tsFiles(join(ROOT, dir))) {
    const src = ts.createSourceFile(file, readFileSync(file, "utf8"), ts.ScriptTarget.Latest, false);
    const add = (spec: string, typeOnly: boolean) => {
      if (!spec.startsWith(".")) return;
      edges.push({ from: relative(ROOT, file), to: relative(ROOT, resolve(dirname(file), spec)), typeOnly });
    };
    const visit = (node: ts.Node) => {
      if ((ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) && node.moduleSpecifier) {
        if (ts.isStringLiteral(node.moduleSpecifier)) add(node.moduleSpecifier.text, isTypeOnly(node));
      } else if (
        ts.isCallExpression(node) &&
        node.expression.kind === ts.SyntaxKind.ImportKeyword &&
        node.arguments[0] &&
        ts.isStringLiteral(node.arguments[0])
      ) {
        add(node.arguments[0].text, false);
      }
      ts.forEachChild(node, visit);
    };
    visit(src);
  }
  return edges;
}

/** The strongly connected components of more than one file (Tarjan), each as its edges inside it. */
export function cycles(edges: Edge[]): Edge[][] {
  const next = new Map<string, string[]>();
  for (const e of edges) next.set(e.from, [...(next.get(e.from) ?? []), e.to]);
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const components: string[][] = [];
  let counter = 0;
  const connect = (v: string) => {
    index.set(v, counter);
    low.set(v, counter++);
    stack.push(v);
    onStack.add(v);
    for (const w of next.get(v) ?? []) {
      if (!index.has(w)) {
        connect(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) === index.get(v)) {
      const component: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        onStack.delete(w);
        component.push(w);
      } while (w !== v);
      if (component.length > 1) components.push(component);
    }
  };
  for (const v of new Set(edges.flatMap((e) => [e.from, e.to]))) if (!index.has(v)) connect(v);
  return components.map((c) => {
    const members = new Set(c);
    return edges.filter((e) => members.has(e.from) && members.has(e.to));
  });
}

const show = (e: Edge) => `${e.from} -> ${e.to}${e.typeOnly ? " (type)" : ""}`;

/**
 * runtime/src by folder, lowest first: a folder may import its own files and the folders of the
 * layers below it. Within the I/O plumbing and within the runtime modes the folders may import
 * each other (cycles between files are caught on their own) except where FORBIDDEN says.
 */
const LAYERS: string[][] = [
  ["util"],
  ["protocol", "resources"],
  ["contract"],
  ["config"],
  // I/O plumbing both modes (and the operator) share.
  ["telemetry", "kube", "net", "nats", "server", "discovery"],
  // The application SDK and the conformance checks: clients of the runtime's wire formats only.
  ["client", "check"],
  // The runtime modes; a2a/ is a face of the agent.
  ["agent", "relay", "a2a"],
  // Entry points.
  ["cli"],
];

/** Pairs of one layer that must not import each other (docs/architecture.md). */
const FORBIDDEN: [string, string][] = [
  ["agent", "relay"],
  ["relay", "agent"],
  ["relay", "a2a"],
  ["a2a", "relay"],
  ["client", "check"],
  ["check", "client"],
];

/** Within utilities and schemas the rule is stricter than the layer: util/ imports nothing of the project's. */
const LAYER_OF = new Map(LAYERS.flatMap((folders, i) => folders.map((f) => [f, i] as const)));

function folderOf(path: string): string | undefined {
  const rest = path.startsWith("runtime/src/") ? path.slice("runtime/src/".length) : undefined;
  if (!rest?.includes("/")) return undefined;
  return rest.split("/")[0];
}

/** The imports in runtime/src that break the layer order, type-only imports included. */
export function upwardImports(edges: Edge[]): Edge[] {
  return edges.filter((e) => {
    const from = folderOf(e.from);
    if (!from || e.from.endsWith(".test.ts")) return false;
    const to = folderOf(e.to);
    if (!to) return e.to.startsWith("runtime/") || e.to.startsWith("operator/") || e.to.startsWith("e2e/");
    if (from === to) return false;
    const a = LAYER_OF.get(from);
    const b = LAYER_OF.get(to);
    if (a === undefined || b === undefined) return true; // a folder the layers do not name yet
    if (b > a) return true;
    return FORBIDDEN.some(([x, y]) => x === from && y === to);
  });
}

describe("imports follow docs/architecture.md", () => {
  const runtime = importEdges("runtime/src");
  const operator = importEdges("operator/src");

  it("sees the imports it checks", () => {
    // A parser that found nothing would pass every rule.
    expect(runtime.length).toBeGreaterThan(300);
    expect(operator.length).toBeGreaterThan(50);
    expect(runtime.some((e) => e.typeOnly)).toBe(true);
    expect(
      runtime.some((e) => e.from === "runtime/src/agent/main.ts" && e.to === "runtime/src/server/lifecycle.ts"),
    ).toBe(true);
  });

  it("runtime/src has no import cycle, type-only imports included", () => {
    const found = cycles(runtime);
    expect(
      found.map((c) => c.map(show)),
      `import cycles in runtime/src:\n${found.flat().map(show).join("\n")}`,
    ).toEqual([]);
  });

  it("runtime/src imports only down its layers", () => {
    const up = upwardImports(runtime);
    expect(
      up.map(show),
      `imports against the layer order of docs/architecture.md:\n${up.map(show).join("\n")}`,
    ).toEqual([]);
  });

  it("operator/src has no import cycle", () => {
    const found = cycles(operator.filter((e) => !e.typeOnly));
    expect(
      found.map((c) => c.map(show)),
      `import cycles in operator/src:\n${found.flat().map(show).join("\n")}`,
    ).toEqual([]);
  });

  it("finds a planted cycle and a planted upward import", () => {
    const planted: Edge[] = [
      { from: "runtime/src/util/a.ts", to: "runtime/src/util/b.ts", typeOnly: false },
      { from: "runtime/src/util/b.ts", to: "runtime/src/util/a.ts", typeOnly: false },
      { from: "runtime/src/util/c.ts", to: "runtime/src/agent/main.ts", typeOnly: true },
      { from: "runtime/src/relay/x.ts", to: "runtime/src/agent/y.ts", typeOnly: false },
      { from: "runtime/src/agent/x.ts", to: "runtime/src/util/y.ts", typeOnly: false },
    ];
    expect(cycles(planted).map((c) => c.length)).toEqual([2]);
    expect(upwardImports(planted).map(show)).toEqual([
      "runtime/src/util/c.ts -> runtime/src/agent/main.ts (type)",
      "runtime/src/relay/x.ts -> runtime/src/agent/y.ts",
    ]);
  });
});

/** The part of operator/src a file is in: a concern or kind by its folder (concerns/tls), else the top folder (reconcile, kube, commands). */
export function operatorPlace(path: string): string | undefined {
  const rest = path.startsWith("operator/src/") ? path.slice("operator/src/".length) : undefined;
  if (!rest?.includes("/")) return undefined;
  const [top, sub] = rest.split("/");
  return (top === "concerns" || top === "kinds") && sub && rest.split("/").length > 2 ? `${top}/${sub}` : top;
}

/**
 * What a concern may import of the runtime, its contract (docs/architecture.md): `contract/`, the
 * CRDs' schemas both sides read (`resources/`), and two pure leaves named one by one, the
 * timestamp form both write and the making printable of text from outside. Never the runtime's
 * own NATS implementation (`nats/`) or the rest of `util/`.
 */
export const RUNTIME_CONTRACT = [
  "runtime/src/contract/",
  "runtime/src/resources/",
  "runtime/src/util/time.ts",
  "runtime/src/util/printable.ts",
];

const inRuntimeContract = (path: string) =>
  RUNTIME_CONTRACT.some((p) => (p.endsWith("/") ? path.startsWith(p) : path === p));

/**
 * The imports of operator/src against its layout (docs/architecture.md): a concern imports only
 * its own folder, reconcile/, kube/, the CRDs' status schema (crd/status.ts) and the runtime's
 * contract (RUNTIME_CONTRACT; what a concern needs of another's it gets through the pass's slots);
 * a kind imports no other kind; reconcile/ knows no concern, kind or command, not even their types
 * (a concern declares what it needs of the context in its own folder); only commands/ imports
 * commands/.
 */
export function operatorLayoutBreaks(edges: Edge[]): Edge[] {
  return edges.filter((e) => {
    const from = operatorPlace(e.from);
    const to = operatorPlace(e.to);
    if (from?.startsWith("concerns/") && e.to.startsWith("runtime/")) return !inRuntimeContract(e.to);
    if (!from || from === to || !e.to.startsWith("operator/")) return false;
    if (to === "commands") return true;
    if (from.startsWith("concerns/"))
      return !(to === "reconcile" || to === "kube" || e.to === "operator/src/crd/status.ts");
    if (from.startsWith("kinds/")) return !!to?.startsWith("kinds/");
    if (from === "reconcile") return to === undefined || to.startsWith("concerns/") || to.startsWith("kinds/");
    return false;
  });
}

describe("the operator's reconcile pass, concerns and kinds follow docs/architecture.md", () => {
  const operator = importEdges("operator/src").filter((e) => !e.from.endsWith(".test.ts"));
  const R = "operator/src/reconcile/";
  const from = (file: string) => operator.filter((e) => e.from === file);

  it("operator/src has no import cycle, type-only imports included", () => {
    const found = cycles(operator);
    expect(
      found.map((c) => c.map(show)),
      `import cycles in operator/src:\n${found.flat().map(show).join("\n")}`,
    ).toEqual([]);
  });

  it("settings.ts imports nothing of the project's, context.ts and part.ts only types", () => {
    expect(from(`${R}settings.ts`).map(show)).toEqual([]);
    for (const leaf of ["context.ts", "part.ts"]) {
      expect(from(`${R}${leaf}`).length).toBeGreaterThan(0);
      expect(
        from(`${R}${leaf}`)
          .filter((e) => !e.typeOnly)
          .map(show),
      ).toEqual([]);
    }
  });

  it("a concern imports only reconcile/, kube/ and the runtime's contract; a kind no other kind; the pass no concern, kind or command", () => {
    const places = new Set(operator.map((e) => operatorPlace(e.from)));
    for (const p of ["concerns/tls", "concerns/nats", "concerns/workload", "kinds/agent", "kinds/relay", "reconcile"])
      expect(places).toContain(p);
    expect(from(`${R}pipeline.ts`).length).toBeGreaterThan(0);
    const wrong = operatorLayoutBreaks(operator);
    expect(wrong.map(show), `imports against the operator's layout:\n${wrong.map(show).join("\n")}`).toEqual([]);
    // The kinds use the concerns' parts.
    expect(
      operator.some(
        (e) => e.from === "operator/src/kinds/agent/controller.ts" && e.to.startsWith("operator/src/concerns/"),
      ),
    ).toBe(true);
  });

  it("reconcile/ imports nothing of a concern or a kind, its tests and type-only imports included", () => {
    const all = importEdges("operator/src/reconcile");
    expect(all.some((e) => e.from === `${R}context.ts` && e.typeOnly)).toBe(true);
    expect(all.some((e) => e.from.endsWith(".test.ts"))).toBe(true);
    const wrong = all.filter((e) => /^operator\/src\/(concerns|kinds)\//.test(e.to));
    expect(wrong.map(show), `reconcile/ importing a concern or a kind:\n${wrong.map(show).join("\n")}`).toEqual([]);
  });

  it("finds a concern importing another or the runtime's NATS plumbing, a kind another kind, and the pass a part", () => {
    const planted: Edge[] = [
      { from: "operator/src/concerns/tls/part.ts", to: "operator/src/concerns/nats/accounts.ts", typeOnly: true },
      { from: "operator/src/concerns/tls/part.ts", to: "operator/src/kinds/agent/desired.ts", typeOnly: false },
      { from: "operator/src/concerns/tls/part.ts", to: "operator/src/commands/main.ts", typeOnly: false },
      { from: "operator/src/kinds/relay/status.ts", to: "operator/src/kinds/agent/status.ts", typeOnly: false },
      { from: "operator/src/reconcile/pipeline.ts", to: "operator/src/concerns/workload/part.ts", typeOnly: false },
      { from: "operator/src/reconcile/context.ts", to: "operator/src/concerns/tls/trust.ts", typeOnly: false },
      { from: "operator/src/reconcile/context.ts", to: "operator/src/concerns/tls/trust.ts", typeOnly: true },
      { from: "operator/src/reconcile/part.ts", to: "operator/src/kinds/agent/context.ts", typeOnly: true },
      { from: "operator/src/concerns/nats/accounts.ts", to: "runtime/src/nats/streams.ts", typeOnly: false },
      { from: "operator/src/concerns/nats/accounts.ts", to: "runtime/src/nats/connection.ts", typeOnly: true },
      { from: "operator/src/concerns/tls/tls.ts", to: "runtime/src/util/retry.ts", typeOnly: false },
      { from: "operator/src/concerns/tls/tls.ts", to: "runtime/src/contractual/x.ts", typeOnly: false },
      // Allowed: its own folder, the pass, kube/, the runtime's contract; a kind using a concern, the
      // pass and the runtime's NATS plumbing.
      { from: "operator/src/concerns/tls/part.ts", to: "operator/src/concerns/tls/tls.ts", typeOnly: false },
      { from: "operator/src/concerns/tls/part.ts", to: "operator/src/reconcile/part.ts", typeOnly: true },
      { from: "operator/src/concerns/tls/tls.ts", to: "operator/src/kube/apply.ts", typeOnly: false },
      { from: "operator/src/concerns/tls/tls.ts", to: "runtime/src/util/time.ts", typeOnly: false },
      { from: "operator/src/concerns/nats/layout-move.ts", to: "runtime/src/contract/key-indexes.ts", typeOnly: false },
      { from: "operator/src/concerns/workload/pod.ts", to: "runtime/src/resources/deployment.ts", typeOnly: true },
      { from: "operator/src/kinds/relay/stream.ts", to: "runtime/src/nats/streams.ts", typeOnly: false },
      { from: "operator/src/kinds/agent/controller.ts", to: "operator/src/concerns/tls/part.ts", typeOnly: false },
      { from: "operator/src/kinds/agent/context.ts", to: "operator/src/reconcile/context.ts", typeOnly: true },
      { from: "operator/src/reconcile/pipeline.ts", to: "operator/src/kube/apply.ts", typeOnly: false },
    ];
    expect(operatorLayoutBreaks(planted).map(show)).toEqual([
      "operator/src/concerns/tls/part.ts -> operator/src/concerns/nats/accounts.ts (type)",
      "operator/src/concerns/tls/part.ts -> operator/src/kinds/agent/desired.ts",
      "operator/src/concerns/tls/part.ts -> operator/src/commands/main.ts",
      "operator/src/kinds/relay/status.ts -> operator/src/kinds/agent/status.ts",
      "operator/src/reconcile/pipeline.ts -> operator/src/concerns/workload/part.ts",
      "operator/src/reconcile/context.ts -> operator/src/concerns/tls/trust.ts",
      "operator/src/reconcile/context.ts -> operator/src/concerns/tls/trust.ts (type)",
      "operator/src/reconcile/part.ts -> operator/src/kinds/agent/context.ts (type)",
      "operator/src/concerns/nats/accounts.ts -> runtime/src/nats/streams.ts",
      "operator/src/concerns/nats/accounts.ts -> runtime/src/nats/connection.ts (type)",
      "operator/src/concerns/tls/tls.ts -> runtime/src/util/retry.ts",
      "operator/src/concerns/tls/tls.ts -> runtime/src/contractual/x.ts",
    ]);
  });

  it("operator/src imports nothing of the runtime's modes, faces, clients or commands", () => {
    expect(operator.some((e) => e.to.startsWith("runtime/src/contract/"))).toBe(true);
    const wrong = operator.filter(
      (e) => !e.from.endsWith(".test.ts") && /^runtime\/src\/(agent|relay|a2a|check|client|cli)\//.test(e.to),
    );
    expect(wrong.map(show)).toEqual([]);
  });

  it("every product file opens with a comment saying what it holds", () => {
    const files = [...tsFiles(join(ROOT, "runtime/src")), ...tsFiles(join(ROOT, "operator/src"))]
      .filter((f) => !f.endsWith(".test.ts"))
      .map((f) => relative(ROOT, f));
    expect(files.length).toBeGreaterThan(200);
    const bare = files.filter((f) => !/^\/\/ \S/.test(readFileSync(join(ROOT, f), "utf8")));
    expect(bare, "files whose first line is no `// what it holds` comment").toEqual([]);
  });
});
