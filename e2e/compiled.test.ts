// The images run the sources compiled to JavaScript (tsconfig.build.json; `npm run build`
// compiles them into dist/). What the compiler emits must run as the TypeScript does: every
// relative import renamed to its .js file, nothing left that only type stripping understands.
import { spawnSync } from "node:child_process";
import { readdirSync, symlinkSync } from "node:fs";
import { join, relative } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { beforeAll, describe, expect, it } from "vitest";
import { compileTo } from "./support/compiled.ts";
import { tempDir } from "./support/process.ts";

const REPO = fileURLToPath(new URL("../", import.meta.url));
let out: string;

const filesUnder = (dir: string): string[] =>
  readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? filesUnder(join(dir, e.name)) : [join(dir, e.name)]));

const node = (args: string[]) => spawnSync(process.execPath, args, { cwd: out, encoding: "utf8", timeout: 60_000 });

describe("the sources compiled as the images run them", () => {
  beforeAll(() => {
    out = tempDir("ifp-compiled-");
    compileTo(out);
    // Where the image has its production dependencies.
    symlinkSync(join(REPO, "node_modules"), join(out, "node_modules"));
  }, 120_000);

  it("emits JavaScript only, no test, with every relative import naming a .js file", () => {
    const files = filesUnder(out).filter((f) => !f.includes("node_modules")).map((f) => relative(out, f));
    expect(files.length).toBeGreaterThan(100);
    expect(files.filter((f) => !f.endsWith(".js"))).toEqual([]);
    expect(files.filter((f) => /\.test\.js$|^(e2e|examples)\//.test(f))).toEqual([]);
    for (const entry of ["runtime/bin/ifp-runtime.js", "runtime/bin/ifp.js", "operator/bin/ifp-operator.js"]) expect(files).toContain(entry);
  });

  it("loads every module, including those the commands import only when needed", () => {
    const modules = filesUnder(join(out, "runtime", "src")).concat(filesUnder(join(out, "operator", "src")));
    const script = `for (const m of ${JSON.stringify(modules.map((m) => pathToFileURL(m).href))}) await import(m); console.log("loaded");`;
    const r = node(["--input-type=module", "-e", script]);
    expect(r.stderr).toBe("");
    expect(r.stdout.trim()).toBe("loaded");
  });

  it("starts each command: ifp-runtime, ifp and ifp-operator print their usage", () => {
    for (const [bin, usage] of [["runtime/bin/ifp-runtime.js", /ifp-runtime agent/], ["runtime/bin/ifp.js", /ifp send/], ["operator/bin/ifp-operator.js", /--runtime-image/]] as const) {
      const r = node([bin, "--help"]);
      expect(r.status, `${bin}: ${r.stderr}`).toBe(0);
      expect(r.stdout + r.stderr).toMatch(usage);
    }
  });
});
