// The images run the sources compiled to JavaScript: each Dockerfile's build stage copies the
// sources it names and runs `npx tsc -p tsconfig.build.json` (`npm run build` does the same into
// dist/ here). Carried out here as e2e/images/build.ts carries it out for the real node, so that
// a machine without root checks it too: what the compiler emits from exactly those files must
// run as the TypeScript does, with every relative import renamed to its .js file and nothing
// left that only type stripping understands. Each build stage then bundles that output
// (runtime/bundle.ts, operator/bundle.ts): the images run the bundles, with no node_modules at all.
import { spawnSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { join, relative } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { metaChecksum } from "../operator/src/commands/repair-nats-store.ts";
import { BUNDLE_LICENCES, compileBuildStage } from "./images/build.ts";
import { bundledPackages } from "./release/release.ts";
import { cachedBuild, compileTo, imageApp } from "./support/compiled.ts";
import { releaseDir, tempDir } from "./support/process.ts";

const REPO = fileURLToPath(new URL("../", import.meta.url));

const filesUnder = (dir: string): string[] =>
  readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? filesUnder(join(dir, e.name)) : [join(dir, e.name)],
  );

const IMAGES = [
  {
    dockerfile: "runtime/Dockerfile",
    copied: ["runtime"],
    commands: [
      ["runtime/bin/ifp-runtime.js", /ifp-runtime agent/],
      ["runtime/bin/ifp.js", /ifp send/],
    ],
  },
  {
    dockerfile: "operator/Dockerfile",
    copied: ["operator", "runtime"],
    commands: [["operator/bin/ifp-operator.js", /--runtime-image/]],
  },
] as const;

/**
 * The build stage carried out (its WORKDIR, as /app is in the image), from the compile cache when
 * no input changed since a run made it (e2e/support/compiled.ts); read only.
 */
function builtStage(dockerfile: string): string {
  return cachedBuild(`stage-${dockerfile.replace(/\W+/g, "-")}`, (dir) => {
    const root = compileBuildStage(dockerfile);
    try {
      cpSync(root, dir, { recursive: true, filter: (src) => src !== join(root, "node_modules") });
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
    // The dependencies resolve one level up from dist/, as /app/node_modules does in the image.
    symlinkSync(join(REPO, "node_modules"), join(dir, "node_modules"));
  });
}

describe.each(IMAGES)("the build stage of $dockerfile", ({ dockerfile, copied, commands }) => {
  const app = builtStage(dockerfile);
  const dist = join(app, "dist");
  const node = (args: string[]) => spawnSync(process.execPath, args, { cwd: dist, encoding: "utf8", timeout: 60_000 });
  // tsc's output; the bundle of it (dist/bundle, dist/bundle-maps) is tested below.
  const compiled = () => filesUnder(dist).filter((f) => !/^bundle(?:-maps)?\//.test(relative(dist, f)));

  it("emits JavaScript only, no test and no development tool, for what the image copies", () => {
    const files = compiled().map((f) => relative(dist, f));
    expect(files.length).toBeGreaterThan(100);
    expect(files.filter((f) => !f.endsWith(".js"))).toEqual([]);
    expect(files.filter((f) => /\.test\.js$|\/test\/|\/bench\/|crd\/generate\.js$/.test(f))).toEqual([]);
    for (const dir of copied) expect(files.some((f) => f.startsWith(`${dir}/src/`))).toBe(true);
    for (const [bin] of commands) expect(files).toContain(bin);
  });

  it("loads every module, including those the commands import only when needed", () => {
    const modules = compiled().filter((f) => !relative(dist, f).includes("/bin/"));
    const script = `for (const m of ${JSON.stringify(modules.map((m) => pathToFileURL(m).href))}) await import(m); console.log("loaded");`;
    // The dependencies resolve from the stage's node_modules, one level up, as /app/node_modules does in the image.
    const r = node(["--input-type=module", "-e", script]);
    expect(r.stderr).toBe("");
    expect(r.stdout.trim()).toBe("loaded");
  });

  it("starts each command, which prints its usage", () => {
    for (const [bin, usage] of commands) {
      const r = node([bin, "--help"]);
      expect(r.status, `${bin}: ${r.stderr}`).toBe(0);
      expect(r.stdout + r.stderr).toMatch(usage);
    }
  });
});

/**
 * The commands the chart runs from the operator image (`.Values.image`): the first argument of
 * each such container, a subcommand, or a flag for the operator itself ("").
 */
function chartCommands(): string[] {
  const dir = join(REPO, "charts/ifp-operator/templates");
  const found = new Set<string>();
  for (const name of readdirSync(dir).filter((n) => n.endsWith(".yaml"))) {
    const lines = readFileSync(join(dir, name), "utf8").split("\n");
    lines.forEach((line, i) => {
      if (!/^\s*image: \{\{ include "ifp-operator\.image" \(dict "image" \.Values\.image "root"/.test(line)) return;
      const args = lines.slice(i + 1, i + 4).findIndex((l) => /^\s*args:/.test(l));
      if (args < 0) throw new Error(`${name}:${i + 1}: a container of the operator image without args`);
      const at = i + 1 + args;
      const inline = /^\s*args: \[\s*"([^"]+)"/.exec(lines[at]!);
      const first = inline ? inline[1]! : /^\s*- (\S+)/.exec(lines[at + 1]!)?.[1];
      if (!first) throw new Error(`${name}:${at + 1}: cannot read the first argument`);
      found.add(first.startsWith("--") ? "" : first);
    });
  }
  return [...found].sort();
}

/** A command of an image laid out under `app`, run there as the image runs it. */
const runIn = (app: string, entry: string, args: string[]) =>
  spawnSync(process.execPath, [entry, ...args], {
    cwd: app,
    env: { NODE_ENV: "production", PATH: process.env.PATH },
    encoding: "utf8",
    timeout: 60_000,
  });

/**
 * An image's bundle as laid out under `app`: in `dir`, the commands `bins` and minified chunks
 * only, no node_modules, no source map, and the licence file naming each of `packages` at the
 * version installed here, as the release reads it for the image's SBOM.
 */
function expectBundle(app: string, dir: string, bins: string[], packages: string[], data: string[] = []): void {
  const files = filesUnder(app).map((f) => relative(app, f));
  expect(files.filter((f) => f.includes("node_modules"))).toEqual([]);
  const own = files.filter((f) => f.startsWith(`${dir}/`)).sort();
  for (const bin of bins) expect(own).toContain(`${dir}/${bin}`);
  // Beside the JavaScript: the licences, and the data files the code reads (`data`).
  expect(own.filter((f) => !new RegExp(`^${dir}/(?:bin|lib)/[\\w.-]+\\.js$`).test(f))).toEqual(
    [`${dir}/${BUNDLE_LICENCES}`, ...data.map((d) => `${dir}/${d}`)].sort(),
  );
  // Minified: long lines (tsc's output averages about 40 characters a line), in each chunk of
  // more than 20 kB; the smaller ones re-export, or hold the commands' usage texts, whose line
  // breaks stay.
  const chunks = own.filter((f) => f.startsWith(`${dir}/lib/`)).map((f) => readFileSync(join(app, f), "utf8"));
  expect(chunks.filter((c) => c.length > 20_000).length).toBeGreaterThanOrEqual(3);
  for (const text of chunks.filter((c) => c.length > 20_000))
    expect(text.length / text.split("\n").length).toBeGreaterThan(400);
  const licences = readFileSync(join(app, dir, BUNDLE_LICENCES), "utf8");
  const installed = (pkg: string) =>
    JSON.parse(readFileSync(join(REPO, "node_modules", pkg, "package.json"), "utf8")).version as string;
  for (const pkg of packages) expect(licences).toContain(`\n${pkg}@${installed(pkg)}\nLicense: `);
  expect(licences).toMatch(/Permission is hereby granted, free of charge/);
  // As the release reads it for the image's SBOM.
  const bundled = bundledPackages(licences);
  expect(bundled.length).toBeGreaterThan(50);
  for (const pkg of packages) expect(bundled).toContain(`${pkg}@${installed(pkg)}`);
}

describe("the operator image's bundle", () => {
  // Laid out once into the cache, as the operator's benchmark runs it (e2e/support/compiled.ts).
  const app = imageApp("operator/Dockerfile");
  const store = tempDir("ifp-operator-bundle-store-");
  afterAll(() => releaseDir(store));
  const run = (args: string[]) => runIn(app, "operator/bin/ifp-operator.js", args);

  it("is JavaScript and the bundled packages' licences, with no node_modules and no source map", () => {
    expectBundle(
      app,
      "operator",
      ["bin/ifp-operator.js"],
      ["@kubernetes/client-node", "@nats-io/transport-node", "zod", "pino", "highwayhasher"],
    );
  });

  it("starts every command the chart runs from the image, each printing its usage", () => {
    const commands = chartCommands();
    expect(commands).toEqual(["", "prepare-uninstall", "reload-nats", "repair-nats-store"]);
    for (const command of commands) {
      const r = run([...(command ? [command] : []), "--help"]);
      expect(r.status, `${command}: ${r.stderr}`).toBe(0);
      expect(r.stdout + r.stderr).toMatch(command ? `usage: ifp-operator ${command} ` : /--runtime-image IMAGE/);
    }
    // A bad flag is refused by each, with its usage (exit 2), not a missing module.
    for (const command of commands) {
      const r = run([...(command ? [command] : []), "--no-such-flag"]);
      expect(r.status, `${command}: ${r.stderr}`).toBe(2);
      expect(r.stderr).not.toMatch(/Cannot find|ERR_MODULE_NOT_FOUND/);
    }
  });

  it("repair-nats-store sets a stream back to one replica with the checksum nats-server checks (HighwayHash bundled as WebAssembly)", async () => {
    const sdir = join(store, "jetstream", "$G", "streams", "S3");
    mkdirSync(sdir, { recursive: true });
    const config = { name: "S3", subjects: ["s3.>"], num_replicas: 3, storage: "file" };
    const meta = Buffer.from(JSON.stringify(config));
    writeFileSync(join(sdir, "meta.inf"), meta);
    writeFileSync(join(sdir, "meta.sum"), await metaChecksum("S3", meta));
    const r = run(["repair-nats-store", `--store-dir=${store}`]);
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/"repaired":1,"skipped":0/);
    const fixed = readFileSync(join(sdir, "meta.inf"));
    expect(JSON.parse(fixed.toString("utf8"))).toEqual({ ...config, num_replicas: 1 });
    expect(readFileSync(join(sdir, "meta.sum"), "utf8")).toBe(await metaChecksum("S3", fixed));
    expect(existsSync(join(sdir, "meta.inf.repair"))).toBe(false);
  });
});

describe("the runtime image's bundle", () => {
  // Laid out once into the cache, as the inbox and relay benchmarks run it (e2e/support/compiled.ts).
  const app = imageApp("runtime/Dockerfile");
  const run = (bin: string, args: string[]) => runIn(app, `runtime/bin/${bin}.js`, args);

  it("is JavaScript and the bundled packages' licences, with no node_modules and no source map", () => {
    expectBundle(
      app,
      "runtime",
      ["bin/ifp-runtime.js", "bin/ifp.js"],
      [
        "fastify",
        "@nats-io/transport-node",
        "@nats-io/jetstream",
        "zod",
        "pino",
        "prom-client",
        "@kubernetes/client-node",
      ],
      // The gRPC binding's contract, read by @grpc/proto-loader and protobufjs (runtime/bundle.ts).
      ["contract/a2a.proto", "contract/google-rpc-status.proto"],
    );
  });

  it("starts both commands, each printing its usage and refusing a bad flag; ifp prints the package's version", () => {
    for (const [bin, usage] of [
      ["ifp-runtime", /ifp-runtime agent/],
      ["ifp", /ifp send/],
    ] as const) {
      const r = run(bin, ["--help"]);
      expect(r.status, `${bin}: ${r.stderr}`).toBe(0);
      expect(r.stdout + r.stderr).toMatch(usage);
      const bad = run(bin, ["--no-such-flag"]);
      expect(bad.status, `${bin}: ${bad.stderr}`).toBe(2);
      expect(bad.stderr).not.toMatch(/Cannot find|ERR_MODULE_NOT_FOUND/);
    }
    const version = JSON.parse(readFileSync(join(REPO, "package.json"), "utf8")).version;
    expect(run("ifp", ["--version"]).stdout).toMatch(new RegExp(`^ifp ${version.replace(/\./g, "\\.")} \\(commit `));
  });
});

describe("npm run build", () => {
  // A compile (when the cache has none for these sources) takes a minute on a loaded two-core machine.
  it("compiles the same sources into dist/ as the images' build stage does", { timeout: 240_000 }, () => {
    // Compiled into an empty directory, or found in the cache for these very sources.
    const out = join(
      cachedBuild("build", (dir) => {
        const out = join(dir, "out");
        compileTo(out);
      }),
      "out",
    );
    const files = filesUnder(out).map((f) => relative(out, f));
    expect(files).toContain("runtime/bin/ifp-runtime.js");
    expect(files).toContain("operator/bin/ifp-operator.js");
    expect(files.filter((f) => !f.endsWith(".js"))).toEqual([]);
  });
});
