// Signatures and provenance of a release's images, made by cosign (e2e/tools/tools.ts builds it):
//
// - with a key (a cosign key reference: a key file, env://VAR, or a KMS URI), in the release
//   itself, before any registry holds the images: `cosign generate` writes each image's signature
//   payload (its digest), `cosign sign-blob` signs it, `cosign attest-blob --statement` signs its
//   SLSA provenance statement (provenance.ts) into a DSSE envelope, and `cosign sign-blob` signs
//   SHA256SUMS; the public key is cosign.pub. Publishing attaches them to the pushed images
//   (`cosign attach signature`, `cosign attach attestation`), which verify as the registry serves
//   them (`cosign verify --key`, `cosign verify-attestation --key`).
// - keyless (the public CI's release workflow): the release writes the payloads and statements
//   only; publishing signs the pushed images and attests them with `cosign sign` / `cosign attest`,
//   the certificate from Fulcio for the workflow's OIDC identity and the entries in Rekor.
import { spawnSync } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { toolPath } from "../tools/tools.ts";
import { IMAGE_REPOSITORY, type ProvenanceStatement } from "./provenance.ts";

/** The OIDC issuer of GitHub Actions' tokens, which Fulcio certifies keyless signatures for. */
export const GITHUB_OIDC_ISSUER = "https://token.actions.githubusercontent.com";
export const PUBLIC_KEY = "cosign.pub";
export const CHECKSUMS_SIGNATURE = "SHA256SUMS.sig";
export const CHECKSUMS_BUNDLE = "SHA256SUMS.sigstore.json";
/**
 * A Sigstore trusted root with no authorities: what a key's verification needs of one, given to
 * cosign so that it fetches none (from Sigstore's TUF repository) where no Fulcio or Rekor is
 * used.
 */
export const NO_AUTHORITIES = `${JSON.stringify({ mediaType: "application/vnd.dev.sigstore.trustedroot+json;version=0.1" })}\n`;

/** How a release is signed: with a cosign key reference, or keyless where it is published. */
export type Signing = { key: string } | { keyless: true };

/** What the release directory holds of one image's signature and provenance. */
export interface ImageSignature {
  /** cosign's signature payload (the image's digest), as `cosign generate` writes it. */
  payload: string;
  /** The payload's signature, base64; absent in a keyless release. */
  signature?: string;
  /** The in-toto statement of the image's SLSA provenance. */
  provenance: string;
  /** The statement signed, a DSSE envelope; absent in a keyless release. */
  attestation?: string;
}

/** cosign with `args`; COSIGN_PASSWORD is the key's password (empty when unset); throws with its output on failure. */
export function cosign(args: string[], opts: { cwd?: string; env?: NodeJS.ProcessEnv } = {}): string {
  const env: NodeJS.ProcessEnv = { ...process.env, COSIGN_PASSWORD: process.env.COSIGN_PASSWORD ?? "", ...opts.env };
  // COSIGN_KEY is the release's input, not a default for every cosign command (cosign reads
  // COSIGN_<FLAG> for each flag).
  delete env.COSIGN_KEY;
  const r = spawnSync(toolPath("cosign"), args, { cwd: opts.cwd, env, encoding: "utf8", maxBuffer: 64 << 20 });
  if (r.error) throw new Error(`cosign could not start: ${r.error.message}`);
  if (r.status !== 0)
    throw new Error(`cosign ${args.join(" ")} failed (${r.status}): ${(r.stderr || r.stdout).slice(-2000)}`);
  return r.stdout;
}

/** A new key pair, cosign.key and cosign.pub in `dir`, under COSIGN_PASSWORD (empty when unset). */
export function generateKeyPair(dir: string): { key: string; pub: string } {
  mkdirSync(dir, { recursive: true });
  cosign(["generate-key-pair", "--output-key-prefix", "cosign"], { cwd: dir });
  return { key: join(dir, "cosign.key"), pub: join(dir, "cosign.pub") };
}

/**
 * The release's signing from its inputs: `--keyless`, or a key reference (`--key`, else
 * COSIGN_KEY), else a key pair made for this release alone, whose private half is removed once
 * the release is signed (the returned `dispose`).
 */
export function signingFromInputs(opts: { key?: string; keyless?: boolean }): { signing: Signing; dispose(): void } {
  if (opts.keyless) {
    if (opts.key) throw new Error("--keyless and a key (--key, COSIGN_KEY) exclude each other");
    return { signing: { keyless: true }, dispose: () => {} };
  }
  const given = opts.key ?? process.env.COSIGN_KEY;
  // A key file is named from here; cosign runs in the release directory.
  if (given) return { signing: { key: given.includes("://") ? given : resolve(given) }, dispose: () => {} };
  const dir = mkdtempSync(join(tmpdir(), "ifp-release-key-"));
  const { key } = generateKeyPair(dir);
  return { signing: { key }, dispose: () => rmSync(dir, { recursive: true, force: true }) };
}

/** The file names of an image's signature files in a release of `version`. */
export function signatureFiles(image: string, version: string, signing: Signing): ImageSignature {
  const base = `${image}-${version}`;
  return {
    payload: `${base}.payload.json`,
    provenance: `${base}.intoto.json`,
    ...("key" in signing ? { signature: `${base}.sig`, attestation: `${base}.att.json` } : {}),
  };
}

/**
 * Write one image's payload and provenance statement into `out` and, with a key, sign both. The
 * payload names the image as published (ghcr.io/ifp-dev/<name>); cosign verifies the digest, not
 * the name, so the signature holds wherever the image is copied.
 */
export function signImage(
  out: string,
  image: { name: string; digest: string },
  version: string,
  statement: ProvenanceStatement,
  signing: Signing,
): ImageSignature {
  const files = signatureFiles(image.name, version, signing);
  const payload = cosign(["generate", `${IMAGE_REPOSITORY}/${image.name}@${image.digest}`]);
  writeFileSync(join(out, files.payload), payload);
  writeFileSync(join(out, files.provenance), `${JSON.stringify(statement, null, 2)}\n`);
  if ("key" in signing) {
    signBlob(out, signing.key, files.payload, files.signature!);
    signBlob(out, signing.key, files.provenance, files.attestation!, true);
  }
  return files;
}

/**
 * A file of `dir` signed by `key` into `output` (readable by all: cosign writes its outputs for
 * the owner alone): its signature (`sign-blob`), or, for an in-toto statement, the DSSE envelope
 * of an attestation (`attest-blob --statement`). No transparency log: the key is the trust.
 */
function signBlob(dir: string, key: string, file: string, output: string, statement = false): void {
  const args = ["--key", key, "--tlog-upload=false", "--yes", "--output-signature", output];
  cosign(statement ? ["attest-blob", ...args, "--statement", file] : ["sign-blob", ...args, file], { cwd: dir });
  chmodSync(join(dir, output), 0o644);
}

/** With a key: the public key as cosign.pub in `out`. */
export function writePublicKey(out: string, signing: Signing): string | undefined {
  if (!("key" in signing)) return undefined;
  cosign(["public-key", "--key", signing.key, "--outfile", join(out, PUBLIC_KEY)]);
  return PUBLIC_KEY;
}

/** With a key: SHA256SUMS signed, as SHA256SUMS.sig beside it (`cosign verify-blob --key cosign.pub`). */
export function signChecksums(out: string, signing: Signing): string | undefined {
  if (!("key" in signing)) return undefined;
  signBlob(out, signing.key, "SHA256SUMS", CHECKSUMS_SIGNATURE);
  return CHECKSUMS_SIGNATURE;
}

const run = (cmd: string, args: string[], cwd?: string): string => {
  const r = spawnSync(cmd, args, { cwd, encoding: "utf8", maxBuffer: 64 << 20 });
  if (r.error) throw new Error(`${cmd} could not start: ${r.error.message}`);
  if (r.status !== 0)
    throw new Error(`${cmd} ${args.join(" ")} failed (${r.status}): ${(r.stderr || r.stdout).slice(-2000)}`);
  return r.stdout + r.stderr;
};

/** Where publish pushes to: a registry host (and port) and a namespace of one or more path parts. */
const TARGET = /^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:\d{1,5})?(\/[a-z0-9]+([._-][a-z0-9]+)*)+$/;
/** A file name of the release directory: no directory part, not hidden. */
const PLAIN = /^[\w+-][\w.+-]*$/;

/** Whether a registry host is on loopback, which crane and cosign reach over plain HTTP, and Helm when told. */
const loopback = (host: string) => /^(127\.\d+\.\d+\.\d+|localhost|\[::1\])(:\d+)?$/.test(host);

export interface Published {
  images: { name: string; ref: string }[];
  chart: string;
}

/**
 * Publish a release directory to `to` (`HOST/NAMESPACE`): each image archive pushed with crane
 * as it is (the digest release.json records, or an error), its signature and provenance
 * attached (a key-signed release) or made there (keyless: `cosign sign`, `cosign attest`), the
 * chart pushed to oci://HOST/NAMESPACE/charts; then each image verified as a user verifies it.
 */
export function publish(opts: {
  dir: string;
  to: string;
  keyless?: boolean;
  /** Keyless: the certificate identity to verify against (the workflow's), and its issuer. */
  identity?: string;
  issuer?: string;
  log?: (s: string) => void;
}): Published {
  const log = opts.log ?? ((s: string) => process.stderr.write(`publish: ${s}\n`));
  const manifest = JSON.parse(readFileSync(join(opts.dir, "release.json"), "utf8")) as {
    version: string;
    chart: string;
    signing?: "key" | "keyless";
    images: ({ name: string; archive: string; digest: string } & ImageSignature)[];
  };
  if (!TARGET.test(opts.to)) throw new Error(`--to ${JSON.stringify(opts.to)} is not HOST[:PORT]/NAMESPACE`);
  for (const img of manifest.images)
    for (const f of [img.archive, img.payload, img.provenance, img.signature, img.attestation, manifest.chart])
      if (f !== undefined && !PLAIN.test(f))
        throw new Error(`release.json names ${JSON.stringify(f)}: not a file of the release directory`);
  const keyless = manifest.signing === "keyless";
  if (!!opts.keyless !== keyless)
    throw new Error(
      `${opts.dir} is ${keyless ? "a keyless release: publish it with --keyless" : "signed with a key: publish it without --keyless"}`,
    );
  const host = opts.to.split("/")[0]!;
  if (keyless && !opts.identity) throw new Error("a keyless publish needs the signer's identity to verify");
  const work = mkdtempSync(join(tmpdir(), "ifp-publish-"));
  const at = (f: string) => join(opts.dir, f);
  try {
    const images = manifest.images.map((img) => {
      const ref = pushArchive(at(img.archive), `${opts.to}/${img.name}:${manifest.version}`, work);
      if (ref !== `${opts.to}/${img.name}@${img.digest}`)
        throw new Error(`crane pushed ${img.archive} as ${ref}, not ${opts.to}/${img.name}@${img.digest}`);
      if (keyless) {
        cosign(["sign", "--yes", ref]);
        cosign(["attest", "--yes", "--type", "slsaprovenance1", "--statement", at(img.provenance), ref]);
      } else {
        if (!img.signature || !img.attestation) throw new Error(`release.json names no signature of ${img.name}`);
        cosign(["attach", "signature", "--payload", at(img.payload), "--signature", at(img.signature), ref]);
        cosign(["attach", "attestation", "--attestation", at(img.attestation), ref]);
      }
      verifyImage(
        ref,
        keyless
          ? { identity: opts.identity!, issuer: opts.issuer ?? GITHUB_OIDC_ISSUER }
          : { key: at(PUBLIC_KEY), work },
      );
      log(`${ref}: pushed, signed and attested`);
      return { name: img.name, ref };
    });
    const helm = toolPath("helm");
    const chartRepo = `oci://${opts.to}/charts`;
    const out = run(helm, ["push", at(manifest.chart), chartRepo, ...(loopback(host) ? ["--plain-http"] : [])]);
    const digest = /Digest: (sha256:[0-9a-f]{64})/.exec(out)?.[1];
    if (!digest) throw new Error(`helm push printed no digest: ${out}`);
    const chart = `${opts.to}/charts/ifp-operator@${digest}`;
    if (keyless) {
      cosign(["sign", "--yes", chart]);
      signChecksumsKeyless(opts.dir);
    }
    log(`${chart}: pushed`);
    return { images, chart };
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

/**
 * An OCI archive pushed to `ref` (a tag) with crane as it is, unpacked into a layout under
 * `work`, so that the registry serves it by the archive's digest: the reference by digest crane
 * pushed it as.
 */
export function pushArchive(archive: string, ref: string, work: string): string {
  const layout = mkdtempSync(join(work, "layout-"));
  run("tar", ["-xf", archive, "-C", layout]);
  const pushed = run(toolPath("crane"), ["push", layout, ref]).trim();
  const byDigest = pushed.split("\n").find((l) => /@sha256:[0-9a-f]{64}$/.test(l));
  if (!byDigest) throw new Error(`crane push ${archive} ${ref} printed no digest: ${pushed}`);
  return byDigest;
}

/**
 * `cosign verify` and `cosign verify-attestation --type slsaprovenance1` of an image reference:
 * with a public key (the transparency log skipped: a key-signed release has no entry there), or
 * a keyless signature's certificate identity and issuer.
 */
export function verifyImage(
  ref: string,
  by: { key: string; work: string } | { identity: string; issuer: string },
): void {
  let trust: string[];
  if ("key" in by) {
    const root = join(by.work, "no-authorities.json");
    writeFileSync(root, NO_AUTHORITIES);
    trust = ["--key", by.key, "--insecure-ignore-tlog=true", "--trusted-root", root];
  } else trust = ["--certificate-identity", by.identity, "--certificate-oidc-issuer", by.issuer];
  cosign(["verify", ...trust, ref]);
  cosign(["verify-attestation", "--type", "slsaprovenance1", ...trust, ref]);
}

/** The release files a keyless publish adds: SHA256SUMS signed into a Sigstore bundle. */
export function signChecksumsKeyless(dir: string): string {
  if (!existsSync(join(dir, "SHA256SUMS"))) throw new Error(`${dir} has no SHA256SUMS`);
  cosign(["sign-blob", "--yes", "--bundle", CHECKSUMS_BUNDLE, "SHA256SUMS"], { cwd: dir });
  return CHECKSUMS_BUNDLE;
}
