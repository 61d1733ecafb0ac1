// What docs/install.md tells a user to run, as tests run it: the lines of one of its shell
// blocks, with the example registry and version made the test's, and a shell that runs a line
// as written with the project's tools (crane, helm, cosign) first on PATH.
import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import { dirname } from "node:path";
import { SLSA_PROVENANCE_V1 } from "../release/provenance.ts";
import { toolPath } from "../tools/tools.ts";

const INSTALL_MD = new URL("../../docs/install.md", import.meta.url);
const PACKAGE_JSON = new URL("../../package.json", import.meta.url);

/**
 * The lines of the fenced block of docs/install.md that holds `marker`, as a reader copies them,
 * with the example registry and version made this test's: `registry.example` is `host`, 0.1.0
 * the version of package.json.
 */
export function installBlock(marker: string, host: string): string[] {
  const version = JSON.parse(readFileSync(PACKAGE_JSON, "utf8")).version as string;
  const text = readFileSync(INSTALL_MD, "utf8");
  // Every fenced block, read with its language (a shell block has none), so that a block of
  // another language is never taken for a shell block's end.
  const block = [...text.matchAll(/^```(\w*)\n([\s\S]*?)^```/gm)]
    .filter((m) => m[1] === "")
    .map((m) => m[2]!)
    .find((b) => b.includes(marker));
  if (!block) throw new Error(`docs/install.md has no shell block with ${marker}`);
  return block
    .replace(/\\\n\s*/g, "")
    .split("\n")
    .filter(Boolean)
    .map((l) => l.split("registry.example").join(host).split("0.1.0").join(version));
}

/** `sh -ec line` in `cwd`, crane, helm and cosign first on PATH; never throws. */
export function sh(line: string, cwd: string, env: NodeJS.ProcessEnv = {}) {
  const path = [
    dirname(toolPath("crane")),
    dirname(toolPath("helm")),
    dirname(toolPath("cosign")),
    env.PATH ?? process.env.PATH,
  ].join(":");
  return new Promise<{ code: number; stdout: string; stderr: string }>((resolve) =>
    execFile(
      "sh",
      ["-ec", line],
      { cwd, env: { ...process.env, ...env, PATH: path }, maxBuffer: 64 << 20, timeout: 300_000 },
      (err, stdout, stderr) =>
        resolve({ code: err ? Number((err as { code?: number }).code ?? 1) || 1 : 0, stdout, stderr }),
    ),
  );
}

/**
 * cosign's environment for docs/install.md's key-signed lines on a machine that reaches no
 * Sigstore service: with a Rekor key of its own named (SIGSTORE_REKOR_PUBLIC_KEY), cosign asks
 * Sigstore's TUF repository for nothing; a key's verification that skips the log reads no Rekor key.
 */
export const OFFLINE_COSIGN_ENV = { SIGSTORE_REKOR_PUBLIC_KEY: "/nonexistent/rekor.pub" };

/**
 * What `cosign verify` (kind "verify") and `cosign verify-attestation` print: the digests of the
 * claims they verified; an attestation's statement must be a SLSA provenance.
 */
export function verifiedDigests(kind: string, stdout: string): string[] {
  if (kind === "verify")
    return (JSON.parse(stdout) as { critical: { image: { "docker-manifest-digest": string } } }[]).map(
      (c) => c.critical.image["docker-manifest-digest"],
    );
  return stdout
    .trim()
    .split("\n")
    .map((line) => {
      const statement = JSON.parse(Buffer.from(JSON.parse(line).payload, "base64").toString("utf8"));
      if (statement.predicateType !== SLSA_PROVENANCE_V1)
        throw new Error(`an attestation of ${statement.predicateType}, not ${SLSA_PROVENANCE_V1}`);
      return `sha256:${statement.subject[0].digest.sha256}`;
    });
}
