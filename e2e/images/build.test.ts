// The images built without a Docker engine follow the Dockerfiles: these read them as
// e2e/images/build.ts does (no build, no root needed).
import { spawnSync } from "node:child_process";
import { spawn } from "node:child_process";
import { cpSync, existsSync, readFileSync, realpathSync } from "node:fs";
import { isBuiltin } from "node:module";
import { join, posix } from "node:path";
import { pathToFileURL } from "node:url";
import ts from "typescript";
import { describe, expect, it } from "vitest";
import { releaseDir, tempDir } from "../support/process.ts";
import {
  BUNDLE_RUNS,
  builderKind,
  depsSource,
  dockerignore,
  IMAGES,
  ignoreFilePath,
  imageContextFiles,
  PRUNE_RUN,
  parseDockerfile,
  readDockerfile,
  stageContextFiles,
} from "./build.ts";

const ignored = dockerignore(readFileSync(".dockerignore", "utf8"));

/**
 * The modules a file loads when Node runs it with its types stripped: each import and re-export
 * (a multi-line one too) but those marked `type` as a whole, and each import() of a literal.
 */
function runtimeSpecifiers(file: string): string[] {
  const source = ts.createSourceFile(file, readFileSync(file, "utf8"), ts.ScriptTarget.Latest, true, ts.ScriptKind.TS);
  const found: string[] = [];
  const visit = (node: ts.Node): void => {
    if (ts.isImportDeclaration(node) && node.importClause?.phaseModifier !== ts.SyntaxKind.TypeKeyword)
      found.push((node.moduleSpecifier as ts.StringLiteral).text);
    if (ts.isExportDeclaration(node) && node.moduleSpecifier && !node.isTypeOnly)
      found.push((node.moduleSpecifier as ts.StringLiteral).text);
    if (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword) {
      const [arg] = node.arguments;
      if (!arg || !ts.isStringLiteralLike(arg))
        throw new Error(`${file}: import() of ${arg?.getText(source)}: a computed specifier cannot be followed`);
      found.push(arg.text);
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

/** The package a bare specifier names: `name` or `@scope/name`, without a subpath. */
const packageOf = (specifier: string) =>
  specifier
    .split("/")
    .slice(0, specifier.startsWith("@") ? 2 : 1)
    .join("/");

/**
 * The repository files and the packages an entry point loads: relative imports followed, this
 * package's own name resolved through package.json's exports, Node's built-ins left out.
 */
function moduleGraph(entry: string): { files: string[]; packages: string[] } {
  const self = JSON.parse(readFileSync("package.json", "utf8")) as { name: string; exports: Record<string, string> };
  const files = new Set<string>();
  const packages = new Set<string>();
  const queue = [entry];
  while (queue.length) {
    const file = queue.shift()!;
    if (files.has(file)) continue;
    files.add(file);
    for (const spec of runtimeSpecifiers(file)) {
      if (isBuiltin(spec)) continue;
      if (spec.startsWith("./") || spec.startsWith("../")) queue.push(posix.join(posix.dirname(file), spec));
      else if (packageOf(spec) === self.name) {
        const target = self.exports[`.${spec.slice(self.name.length)}`];
        if (typeof target !== "string") throw new Error(`${file}: ${spec} is not among package.json's exports`);
        queue.push(posix.normalize(target));
      } else packages.add(packageOf(spec));
    }
  }
  return { files: [...files].sort(), packages: [...packages].sort() };
}

/** Packages with everything they depend on, as installed under node_modules, sorted. */
function withDependencies(names: string[]): string[] {
  const all = new Set<string>();
  const queue = [...names];
  while (queue.length) {
    const name = queue.shift()!;
    if (all.has(name)) continue;
    all.add(name);
    const manifest = JSON.parse(readFileSync(join("node_modules", name, "package.json"), "utf8"));
    const optionalPeers = Object.entries(manifest.peerDependenciesMeta ?? {})
      .filter(([, m]) => (m as { optional?: boolean }).optional)
      .map(([n]) => n);
    for (const dep of [
      ...Object.keys(manifest.dependencies ?? {}),
      ...Object.keys(manifest.optionalDependencies ?? {}),
      ...Object.keys(manifest.peerDependencies ?? {}).filter((n) => !optionalPeers.includes(n)),
    ])
      queue.push(dep);
  }
  return [...all].sort();
}

/** What the example application's image holds: files from the context, and directories from the deps stage (taken from this repository's node_modules). */
function appImageFiles(): { context: { src: string; dest: string }[]; deps: { src: string; dest: string }[] } {
  const plan = readDockerfile("examples/app/Dockerfile");
  const own = dockerignore(readFileSync("examples/app/Dockerfile.dockerignore", "utf8"));
  const deps = plan.copies
    .filter((c) => c.from !== undefined)
    .map((c) => {
      const stage = plan.stages[c.from!]!;
      if (builderKind(stage, plan.base) !== "deps")
        throw new Error(`examples/app/Dockerfile: COPY --from=${c.from} is not of the deps stage`);
      return { src: depsSource(stage, c.sources[0]!)!, dest: c.dest };
    });
  return { context: imageContextFiles(plan, own, "examples/app/Dockerfile"), deps };
}

describe("the Dockerfiles as e2e/images/build.ts reads them", () => {
  it("runtime: Node 24 without a shell, the runtime compiled to JavaScript without tests and bundled with every package it imports, no node_modules, user 65532, the ifp-runtime entrypoint", () => {
    const plan = readDockerfile("runtime/Dockerfile");
    expect(plan).toMatchObject({
      base: "gcr.io/distroless/nodejs24-debian12:nonroot",
      nodeMajor: 24,
      workdir: "/app",
      user: "65532:65532",
      expose: ["8443"],
      entrypoint: ["/nodejs/bin/node", "runtime/bin/ifp-runtime.js"],
      env: { NODE_ENV: "production" },
    });
    // The builder stage has npm and a shell; the final stage has neither.
    expect(plan.stages.build!.from).toBe("node:24-slim");
    expect(plan.env.PATH?.split(":")[0]).toBe("/nodejs/bin");
    expect(builderKind(plan.stages.build, plan.base)).toBe("build");
    expect(plan.stages.build!.runs.slice(1)).toEqual(["npx tsc -p tsconfig.build.json", "node runtime/bundle.ts"]);
    // The bundle only: no deps stage, nothing of node_modules.
    expect(plan.stages.deps).toBeUndefined();
    expect(plan.copies.filter((c) => c.from !== undefined)).toEqual([
      { from: "build", sources: ["/app/dist/bundle/runtime"], dest: "/app/runtime", destIsDir: false },
    ]);
    expect(imageContextFiles(plan, ignored, "runtime/Dockerfile").map((f) => f.dest)).toEqual(["/app/package.json"]);
    // What the build stage compiles and bundles: the configs and the sources, never tests or benchmarks.
    const compiled = stageContextFiles(plan.stages.build!, ignored, "runtime/Dockerfile").map((f) => f.dest);
    for (const d of [
      "/app/package.json",
      "/app/tsconfig.json",
      "/app/tsconfig.build.json",
      "/app/runtime/bin/ifp-runtime.ts",
      "/app/runtime/bin/ifp.ts",
      "/app/runtime/bundle.ts",
      "/app/operator/src/commands/main.ts",
    ])
      expect(compiled).toContain(d);
    expect(compiled.some((d) => d.startsWith("/app/runtime/src/agent/"))).toBe(true);
    expect(compiled.filter((d) => /\.test\.ts$|\/test\/|\/bench\//.test(d))).toEqual([]);
  });

  it("operator: its own code and the runtime's code it imports compiled and bundled with every package they import, the CRDs, no node_modules", () => {
    const plan = readDockerfile("operator/Dockerfile");
    expect(plan).toMatchObject({
      base: "gcr.io/distroless/nodejs24-debian12:nonroot",
      user: "65532:65532",
      expose: ["8080"],
      entrypoint: ["/nodejs/bin/node", "operator/bin/ifp-operator.js"],
    });
    expect(builderKind(plan.stages.build, plan.base)).toBe("build");
    expect(plan.stages.build!.runs.slice(1)).toEqual(["npx tsc -p tsconfig.build.json", "node operator/bundle.ts"]);
    // The bundle only: no deps stage, nothing of node_modules.
    expect(plan.stages.deps).toBeUndefined();
    expect(plan.copies.filter((c) => c.from !== undefined).map((c) => [c.from, c.sources, c.dest])).toEqual([
      ["build", ["/app/dist/bundle/operator"], "/app/operator"],
    ]);
    const compiled = stageContextFiles(plan.stages.build!, ignored, "operator/Dockerfile").map((f) => f.dest);
    expect(compiled).toContain("/app/operator/bundle.ts");
    // The bundling operator/bundle.ts runs is runtime/bundle.ts's.
    expect(compiled).toContain("/app/runtime/bundle.ts");
    expect(compiled).toContain("/app/operator/src/commands/main.ts");
    expect(compiled.some((d) => d.startsWith("/app/runtime/src/"))).toBe(true);
    const dests = imageContextFiles(plan, ignored, "operator/Dockerfile").map((f) => f.dest);
    expect(dests).toContain("/app/crds/agents.ifp.dev.yaml");
    expect(dests.filter((d) => /\.ts$/.test(d))).toEqual([]);
  });

  it("example app: Node's built-ins, the typed client and the client's own dependencies, its own ignore file, user 65532", () => {
    const plan = readDockerfile("examples/app/Dockerfile");
    expect(plan).toMatchObject({
      base: "gcr.io/distroless/nodejs24-debian12:nonroot",
      nodeMajor: 24,
      workdir: "/app",
      user: "65532:65532",
      expose: ["8080"],
      entrypoint: ["/nodejs/bin/node", "examples/app/main.ts"],
    });
    // Its production dependencies from the lock file, pruned of what Node never loads.
    expect(plan.stages.deps!.from).toBe("node:24-slim");
    expect(plan.stages.deps!.runs).toEqual([expect.stringMatching(/^npm ci --omit=dev /), PRUNE_RUN]);
    expect(builderKind(plan.stages.deps, plan.base)).toBe("deps");
    // The root .dockerignore leaves out examples/: this Dockerfile has its own, as BuildKit reads it.
    expect(ignoreFilePath("examples/app/Dockerfile")).toBe("examples/app/Dockerfile.dockerignore");
    expect(ignoreFilePath("runtime/Dockerfile")).toBe(".dockerignore");
    const dests = appImageFiles()
      .context.map((f) => f.dest)
      .sort();
    expect(dests).toEqual([
      "/app/examples/app/app.ts",
      "/app/examples/app/main.ts",
      "/app/package.json",
      "/app/runtime/src/client/local.ts",
      "/app/runtime/src/net/sse.ts",
      "/app/runtime/src/protocol/handoff-signature.ts",
    ]);
    // What the application loads when Node runs it (types stripped): its own files, the client
    // through the package's exports, and what they import in turn. Each of those files is in the
    // image, and no other of runtime/.
    const loaded = moduleGraph("examples/app/main.ts");
    expect(loaded.files.map((f) => `/app/${f}`).filter((d) => !dests.includes(d))).toEqual([]);
    expect(dests.filter((d) => d.startsWith("/app/runtime/"))).toEqual(
      loaded.files
        .filter((f) => f.startsWith("runtime/"))
        .map((f) => `/app/${f}`)
        .sort(),
    );
    // Every package it imports, with the packages those depend on, is installed under
    // /app/node_modules from the deps stage (npm ci --omit=dev of the lock file: each one a
    // production dependency), and no other: the image carries none of the runtime's dependencies.
    const pkg = JSON.parse(readFileSync("package.json", "utf8"));
    expect(loaded.packages.filter((p) => !Object.hasOwn(pkg.dependencies, p))).toEqual([]);
    const needed = withDependencies(loaded.packages);
    expect(needed.length).toBeGreaterThan(0);
    expect(builderKind(plan.stages.deps, plan.base)).toBe("deps");
    expect(plan.copies.filter((c) => c.from !== undefined)).toEqual(
      needed.map((p) => ({
        from: "deps",
        sources: [`/app/node_modules/${p}`],
        dest: `/app/node_modules/${p}`,
        destIsDir: false,
      })),
    );
    expect(Object.keys(IMAGES)).toContain("app");
  });

  it("example app: the files of its image start the application, every module it loads found", () => {
    // The image's /app as the Dockerfile lays it out, the deps stage's packages taken from this
    // repository's node_modules (installed from the same lock file), run by the image's Node.
    const root = tempDir("ifp-app-image-");
    try {
      const { context, deps } = appImageFiles();
      for (const f of context) cpSync(f.src, join(root, f.dest));
      for (const d of deps) cpSync(d.src, join(root, d.dest), { recursive: true });
      // A bad setting stops it before it listens, once every module is loaded (exit 2).
      const r = spawnSync(realpathSync("node_modules/node/bin/node"), ["examples/app/main.ts"], {
        cwd: join(root, "app"),
        env: { NODE_ENV: "production", IFP_APP_PORT: "x" },
        encoding: "utf8",
        timeout: 30_000,
      });
      expect(r.stderr).toMatch(/^ifp example app: IFP_APP_PORT="x": expected a whole number/);
      expect(r.status).toBe(2);
    } finally {
      releaseDir(root);
    }
  });

  it("refuses what it does not know how to build, so that a Dockerfile cannot drift from it silently", () => {
    const base = readFileSync("runtime/Dockerfile", "utf8");
    expect(() => parseDockerfile(base.replace("USER 65532", "RUN apt-get install -y curl\nUSER 65532"), "x")).toThrow(
      /does not know how to build "RUN apt-get/,
    );
    expect(() =>
      parseDockerfile(base.replaceAll("gcr.io/distroless/nodejs24-debian12:nonroot", "debian:12"), "x"),
    ).toThrow(/FROM debian:12/);
    // Builder stages of another Node than the final stage's, or a prune step other than the known one.
    expect(() => parseDockerfile(base.replaceAll("node:24-slim", "node:22-slim"), "x")).toThrow(/COPY --from=build/);
    const app = readFileSync("examples/app/Dockerfile", "utf8");
    expect(() => parseDockerfile(app.replaceAll("node:24-slim", "node:22-slim"), "x")).toThrow(/COPY --from=deps/);
    expect(() => parseDockerfile(app.replace('-name "*.md"', '-name "*.js"'), "x")).toThrow(/COPY --from=deps/);
    // The old final stage, Node with a shell and npm, still reads (as builders have it).
    expect(
      parseDockerfile(base.replaceAll("gcr.io/distroless/nodejs24-debian12:nonroot", "node:24-slim"), "x").nodeMajor,
    ).toBe(24);
    expect(() => parseDockerfile(app.replace("npm ci --omit=dev", "npm ci"), "x")).toThrow(/COPY --from=deps/);
    expect(() =>
      parseDockerfile(base.replace("npx tsc -p tsconfig.build.json", "npx tsc -p tsconfig.build.json && curl x"), "x"),
    ).toThrow(/COPY --from=build/);
    expect(() =>
      parseDockerfile(base.replace("RUN npm ci --ignore-scripts", "RUN npm ci --omit=dev --ignore-scripts"), "x"),
    ).toThrow(/COPY --from=build/);
    expect(() => parseDockerfile(base.replace("/app/dist/bundle/runtime", "/app/node_modules"), "x")).toThrow(
      /COPY --from=build/,
    );
    // The operator's build stage: the bundle step as written after the compile, and no other.
    const operator = readFileSync("operator/Dockerfile", "utf8");
    expect(
      builderKind(parseDockerfile(operator, "x").stages.build, "gcr.io/distroless/nodejs24-debian12:nonroot"),
    ).toBe("build");
    const bundle = "node operator/bundle.ts";
    expect(BUNDLE_RUNS).toContain(bundle);
    for (const run of [
      "node operator/bundle.ts --minify=false",
      "node operator/bundle.ts && curl x",
      "npx rolldown -c",
    ])
      expect(() => parseDockerfile(operator.replace(`RUN ${bundle}`, `RUN ${run}`), "x"), run).toThrow(
        /COPY --from=build/,
      );
    expect(() => parseDockerfile(operator.replace(`RUN ${bundle}`, `RUN ${bundle}\nRUN ${bundle}`), "x")).toThrow(
      /COPY --from=build/,
    );
    expect(() => parseDockerfile(base.replace("ENTRYPOINT", "HEALTHCHECK CMD true\nENTRYPOINT"), "x")).toThrow(
      /HEALTHCHECK/,
    );
    // From the deps stage: all of node_modules, or one package's directory, named from the stage's root.
    const pkgCopy = "COPY --from=deps /app/node_modules/eventsource-parser ";
    expect(app).toContain(pkgCopy);
    for (const source of [
      "/app/node_modules/eventsource-parser/dist",
      "/app/node_modules/../package-lock.json",
      "node_modules/eventsource-parser",
      "/app/node_modules/a/b",
    ]) {
      expect(() => parseDockerfile(app.replace(pkgCopy, `COPY --from=deps ${source} `), "x"), source).toThrow(
        /COPY --from=deps/,
      );
    }
    expect(
      parseDockerfile(app.replace(pkgCopy, "COPY --from=deps /app/node_modules/@nats-io/jetstream "), "x").copies[1]!
        .sources,
    ).toEqual(["/app/node_modules/@nats-io/jetstream"]);
  });

  it(".dockerignore patterns: at the root unless they start with **, directories with everything under them", () => {
    const m = dockerignore("node_modules\n**/*.test.ts\n**/test/\ne2e\n");
    expect(m("node_modules/yaml/index.js")).toBe(true);
    expect(m("runtime/node_modules")).toBe(false);
    expect(m("runtime/src/agent/inbox.test.ts")).toBe(true);
    expect(m("runtime/src/agent/inbox.ts")).toBe(false);
    expect(m("runtime/test/vectors.json")).toBe(true);
    expect(m("e2e/node.test.ts")).toBe(true);
    expect(m("e2e2/x.ts")).toBe(false);
  });
});

describe("the image cache", () => {
  it("builds an image two processes want at once one time: the second waits for the first's archive", async () => {
    const dir = tempDir("ifp-image-once-");
    try {
      const archive = join(dir, "image.oci.tar");
      // Each process says it started, then wants the archive; a build goes on only once both have
      // started, so that the second asks while the first builds. Each build writes a line.
      const script = `
        import { appendFileSync, existsSync, readdirSync, writeFileSync } from "node:fs";
        import { builtOnce } from ${JSON.stringify(pathToFileURL(join(process.cwd(), "e2e/images/build.ts")).href)};
        const dir = ${JSON.stringify(dir)};
        writeFileSync(dir + "/started-" + process.pid, "");
        builtOnce(${JSON.stringify(archive)}, () => {
          while (readdirSync(dir).filter((f) => f.startsWith("started-")).length < 2)
            Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 20);
          appendFileSync(dir + "/builds", process.pid + "\\n");
          Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 500);
          writeFileSync(${JSON.stringify(archive)}, "image");
        });
      `;
      const run = () =>
        new Promise<number | null>((resolve) => {
          const p = spawn(process.execPath, ["--input-type=module", "-e", script], { stdio: "inherit" });
          p.on("exit", resolve);
        });
      expect(await Promise.all([run(), run()])).toEqual([0, 0]);
      expect(readFileSync(join(dir, "builds"), "utf8").trim().split("\n")).toHaveLength(1);
      expect(readFileSync(archive, "utf8")).toBe("image");
      // The lock is given up.
      expect(existsSync(`${archive}.lock`)).toBe(false);
    } finally {
      releaseDir(dir);
    }
  });
});
