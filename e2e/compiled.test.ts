// The images run the sources compiled to JavaScript: each Dockerfile's build stage copies the
// sources it names and runs `npx tsc -p tsconfig.build.json` (`npm run build` does the same into
// dist/ here). Carried out here as e2e/images/build.ts carries it out for the real node, so that
// a machine without root checks it too: what the compiler emits from exactly those files must
// run as the TypeScript does, with every relative import renamed to its .js file and nothing
// left that only type stripping understands.
import { spawnSync } from "node:child_process";
import { cpSync, readdirSync, rmSync, symlinkSync } from "node:fs";
import { join, relative } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { describe, expect, it } from "vitest";
import { compileBuildStage } from "./images/build.ts";
import { cachedBuild, compileTo } from "./support/compiled.ts";

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

  it("emits JavaScript only, no test and no development tool, for what the image copies", () => {
    const files = filesUnder(dist).map((f) => relative(dist, f));
    expect(files.length).toBeGreaterThan(100);
    expect(files.filter((f) => !f.endsWith(".js"))).toEqual([]);
    expect(files.filter((f) => /\.test\.js$|\/test\/|\/bench\/|crd\/generate\.js$/.test(f))).toEqual([]);
    for (const dir of copied) expect(files.some((f) => f.startsWith(`${dir}/src/`))).toBe(true);
    for (const [bin] of commands) expect(files).toContain(bin);
  });

  it("loads every module, including those the commands import only when needed", () => {
    const modules = filesUnder(dist).filter((f) => !relative(dist, f).includes("/bin/"));
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
