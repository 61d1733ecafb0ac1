// The release's signing inputs (e2e/release/sign.ts): a key given, COSIGN_KEY, keyless, or a key
// pair of the release's own; with cosign from the tool cache. The signatures themselves are made
// and verified by e2e/release/release.test.ts.
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join, relative } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { builderFromEnv, lockFiles } from "./provenance.ts";
import { cosign, generateKeyPair, signingFromInputs } from "./sign.ts";
import { releaseDir, tempDir } from "../support/process.ts";

const saved = process.env.COSIGN_KEY;
afterEach(() => {
  if (saved === undefined) delete process.env.COSIGN_KEY;
  else process.env.COSIGN_KEY = saved;
});

describe("the release's signing", () => {
  it("takes --key, else COSIGN_KEY, else makes a key pair it removes once signed; --keyless takes no key", () => {
    const dir = tempDir("ifp-sign-");
    try {
      delete process.env.COSIGN_KEY;
      const own = signingFromInputs({});
      expect("key" in own.signing).toBe(true);
      const key = (own.signing as { key: string }).key;
      expect(readFileSync(key, "utf8")).toMatch(/^-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----/);
      // Its public half, as the release writes it.
      expect(cosign(["public-key", "--key", key])).toMatch(/^-----BEGIN PUBLIC KEY-----/);
      own.dispose();
      expect(existsSync(key)).toBe(false);

      const given = generateKeyPair(dir);
      // A key file named relative to here is read from the release directory too.
      const rel = relative(process.cwd(), given.key);
      expect(signingFromInputs({ key: rel }).signing).toEqual({ key: given.key });
      process.env.COSIGN_KEY = given.key;
      expect(signingFromInputs({}).signing).toEqual({ key: given.key });
      expect(signingFromInputs({ key: "hashivault://release" }).signing).toEqual({ key: "hashivault://release" });
      expect(signingFromInputs({ keyless: true, key: undefined }).signing).toEqual({ keyless: true });
      expect(() => signingFromInputs({ keyless: true, key: given.key })).toThrow(/exclude each other/);
      // COSIGN_KEY is the release's input only: cosign's own commands never take it as their --key
      // (cosign reads COSIGN_<FLAG>), so a keyless `cosign sign` stays keyless.
      process.env.COSIGN_KEY = given.key;
      expect(() => cosign(["public-key"])).toThrow(/exactly one of: key reference \(--key\)/);
      expect(cosign(["public-key", "--key", given.key])).toBe(readFileSync(given.pub, "utf8"));
    } finally {
      releaseDir(dir);
    }
  });

  it("names the builder: a GitHub Actions run by its workflow, else this machine's npm run release", () => {
    expect(
      builderFromEnv({
        GITHUB_ACTIONS: "true",
        GITHUB_SERVER_URL: "https://github.com",
        GITHUB_REPOSITORY: "ifp-dev/ifp-operator",
        GITHUB_WORKFLOW_REF: "ifp-dev/ifp-operator/.github/workflows/release.yml@refs/tags/v0.1.0",
        GITHUB_RUN_ID: "42",
        GITHUB_RUN_ATTEMPT: "2",
      }),
    ).toEqual({
      // The identity Fulcio's certificate names, which docs/install.md verifies.
      id: "https://github.com/ifp-dev/ifp-operator/.github/workflows/release.yml@refs/tags/v0.1.0",
      invocationId: "https://github.com/ifp-dev/ifp-operator/actions/runs/42/attempts/2",
      repository: "https://github.com/ifp-dev/ifp-operator",
    });
    expect(builderFromEnv({}).id).toBe("https://ifp.dev/release/npm-run-release/local");
    expect(builderFromEnv({ IFP_RELEASE_BUILDER_ID: "https://ci.example/builder" }).id).toBe(
      "https://ci.example/builder",
    );
  });

  it("lists the lock files of the commit by digest, not those of its node_modules", () => {
    const dir = tempDir("ifp-locks-");
    try {
      for (const f of ["package-lock.json", "go.sum", "x.lock", "readme.md"]) writeFileSync(join(dir, f), f);
      expect(
        lockFiles(dir, ["package-lock.json", "go.sum", "x.lock", "readme.md", "node_modules/a/package-lock.json"]).map(
          (r) => r.name,
        ),
      ).toEqual(["go.sum", "package-lock.json", "x.lock"]);
    } finally {
      releaseDir(dir);
    }
  });
});
