// The public CI's workflows (.github/workflows/*.yml) checked by actionlint, built from its Go
// module into the tool cache: their syntax, expressions, the outputs and permissions they name, the
// actions' inputs. A workflow cannot run here; what its steps call is run by the tests (the
// release workflow's by e2e/release/release.test.ts).
import { spawnSync } from "node:child_process";
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { parse } from "yaml";
import { releaseDir, tempDir } from "./support/process.ts";
import { toolPath } from "./tools/tools.ts";

const DIR = ".github/workflows";
const workflows = readdirSync(DIR)
  .filter((f) => /\.ya?ml$/.test(f))
  .map((f) => join(DIR, f));

function actionlint(files: string[]) {
  const r = spawnSync(toolPath("actionlint"), ["-no-color", "-oneline", ...files], { encoding: "utf8" });
  return { code: r.status, out: r.stdout + r.stderr };
}

describe("GitHub Actions workflows", () => {
  it("pass actionlint", () => {
    expect(workflows).toContain(join(DIR, "release.yml"));
    const r = actionlint(workflows);
    expect(r.out).toBe("");
    expect(r.code).toBe(0);
  });

  it("the release workflow runs on a tag, signs keyless and runs npm ci and npm run release", () => {
    const release = parse(readFileSync(join(DIR, "release.yml"), "utf8"));
    expect(release.on).toEqual({ push: { tags: ["v*"] } });
    const job = release.jobs.release;
    expect(job.permissions).toEqual({ contents: "write", packages: "write", "id-token": "write" });
    const runs = (job.steps as { run?: string }[]).map((s) => s.run ?? "").join("\n");
    for (const step of ["npm ci", 'npm run release -- "$VERSION"', "--keyless", "--publish", "gh release create"])
      expect(runs).toContain(step);
  });

  it("a broken workflow fails: an undefined step output, a wrong permission, a missing runs-on", () => {
    const dir = tempDir("ifp-workflows-");
    try {
      const text = readFileSync(join(DIR, "release.yml"), "utf8");
      const broken = {
        "output.yml": [
          text.replace("steps.version.outputs.version", "steps.versoin.outputs.version"),
          /property "versoin" is not defined/,
        ],
        "permission.yml": [
          text.replace("id-token: write", "id-token: sign"),
          /"sign" is invalid as permission of scope "id-token"/,
        ],
        "runs-on.yml": [text.replace(/^ {4}runs-on: .*\n/m, ""), /"runs-on" section is missing in job "release"/],
      } as const;
      for (const [name, [changed, says]] of Object.entries(broken)) {
        expect(changed, name).not.toBe(text);
        writeFileSync(join(dir, name), changed);
        const r = actionlint([join(dir, name)]);
        expect(r.code, name).toBe(1);
        expect(r.out, name).toMatch(says);
        expect(r.out, name).toContain(`${name}:`);
      }
    } finally {
      releaseDir(dir);
    }
  });
});
