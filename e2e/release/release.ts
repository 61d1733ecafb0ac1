#!/usr/bin/env node
// A release of the project, from one commit, into one directory:
//
//   npm run release -- 0.1.0                       release HEAD into dist/0.1.0/
//   npm run release -- 0.1.0 --ref v0.1.0 --out DIR
//   npm run release -- 0.2.0 --draft-changelog     write a draft entry into CHANGELOG.md from git log, and stop
//   npm run release -- --verify dist/0.1.0         check a release's files: SHA256SUMS, each archive's blobs
//                                                  and image digest, the chart's digests (exit 1 naming each mismatch)
//   npm run release -- 0.1.0 --key cosign.key      sign with this cosign key (also COSIGN_KEY); --keyless: sign when published
//   npm run release -- --publish dist/0.1.0 --to ghcr.io/ifp-dev [--keyless]
//                                                  push the images, their signatures and attestations, and the chart
//
// The commit's files (git archive, never the working tree) are built as the images are everywhere
// (e2e/images/build.ts: the Dockerfiles' stages, buildah, OCI archives cached by their inputs'
// hash); the output holds:
//
//   ifp-operator-<v>.oci.tar, ifp-runtime-<v>.oci.tar, ifp-example-app-<v>.oci.tar   the images
//   <image>-<v>.cdx.json       a CycloneDX SBOM of each image: npm sbom of the lock file, narrowed
//                              to the production packages the image holds, with Node
//   ifp-operator-<v>.tgz       the chart, version and appVersion <v>, the operator's and the runtime's
//                              images referenced by digest (image.digest, runtimeImage.digest)
//   kubectl-ifp-<v>.tar.gz     the kubectl plugin, one JavaScript bundle for the user's Node, and
//   ifp.yaml                   its krew manifest (krew.ts)
//   release-notes.md           CHANGELOG.md's entry for <v> (the release fails without one)
//   <image>-<v>.payload.json   cosign's signature payload of each image (its digest), and
//   <image>-<v>.sig            its signature, by the release's key (sign.ts)
//   <image>-<v>.intoto.json    the image's SLSA provenance, an in-toto statement (provenance.ts), and
//   <image>-<v>.att.json       its attestation: the statement signed by the key, a DSSE envelope
//   cosign.pub                 the key's public half
//   release.json               what was built: commit, each image's digest and archive, the chart,
//                              the plugin's archive and manifest
//   SHA256SUMS                 sha256sum -c of every file above
//   SHA256SUMS.sig             SHA256SUMS signed by the key
//
// `--key REF` (or COSIGN_KEY) names the key, as cosign takes it (a key file under COSIGN_PASSWORD,
// env://VAR, a KMS URI); without one the release makes a key pair of its own and drops its
// private half once signed. `--keyless` signs nothing here: publishing does (the public CI's
// workflow, `--publish DIR --to HOST/NAMESPACE --keyless`).
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import {
  copyFileSync,
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { gunzipSync } from "node:zlib";
import { isAbsolute, join, posix, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { parseDocument } from "yaml";
import { annotateArchive, BUNDLE_LICENCES, depsSource, isBundleRun, readDockerfile } from "../images/build.ts";
import { debPurl, osReleaseDistro, parseControl, STATUS_DIR } from "../images/debian.ts";
import { toolPath } from "../tools/tools.ts";
import { releasePlugin, verifyPlugin } from "./krew.ts";
import { builderFromEnv, commitFiles, provenanceStatement } from "./provenance.ts";
import { type ImageSignature, publish, signChecksums, signImage, signingFromInputs, writePublicKey } from "./sign.ts";

const REPO = fileURLToPath(new URL("../../", import.meta.url));
const VERSION = /^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-[0-9A-Za-z.-]+)?$/;

/** The released images: e2e/images/build.ts's kind, its Dockerfile, and the chart value naming it (if any). */
export const RELEASED_IMAGES = [
  { kind: "operator", name: "ifp-operator", dockerfile: "operator/Dockerfile", value: "image" },
  { kind: "runtime", name: "ifp-runtime", dockerfile: "runtime/Dockerfile", value: "runtimeImage" },
  { kind: "app", name: "ifp-example-app", dockerfile: "examples/app/Dockerfile", value: undefined },
] as const;

export interface ReleasedImage extends ImageSignature {
  name: string;
  /** The archive's file name in the output directory. */
  archive: string;
  /** The manifest's digest: what a registry serves the image as, and what the chart references. */
  digest: string;
  /** The name the archive carries (org.opencontainers.image.ref.name), as `ctr images import` names it. */
  ref: string;
  sbom: string;
  /** The compressed layers' bytes (what a node pulls) and the unpacked file system's. */
  size: { compressed: number; unpacked: number };
}

export interface Release {
  version: string;
  commit: string;
  dir: string;
  images: ReleasedImage[];
  chart: string;
  /** The kubectl plugin's archive, its SHA-256, and its krew manifest (krew.ts). */
  plugin: { archive: string; sha256: string; manifest: string };
  notes: string;
  checksums: string;
  /** "key": signed here, cosign.pub beside; "keyless": signed where it is published. */
  signing: "key" | "keyless";
  publicKey?: string;
  checksumsSignature?: string;
}

function run(cmd: string, args: string[], opts: { cwd?: string; input?: Buffer | string } = {}): string {
  const r = spawnSync(cmd, args, {
    cwd: opts.cwd ?? REPO,
    input: opts.input,
    encoding: "utf8",
    maxBuffer: 256 * 1024 * 1024,
  });
  if (r.error) throw new Error(`${cmd} could not start: ${r.error.message}`);
  if (r.status !== 0)
    throw new Error(`${cmd} ${args.join(" ")} failed (${r.status}): ${(r.stderr || r.stdout).slice(-3000)}`);
  return r.stdout;
}

const sha256File = (path: string) => createHash("sha256").update(readFileSync(path)).digest("hex");

/** A file of an OCI archive (a tar of an OCI image layout). */
function archiveFile(archive: string, path: string): Buffer {
  const r = spawnSync("tar", ["-xOf", archive, path], { maxBuffer: 1024 * 1024 * 1024 });
  if (r.status !== 0) throw new Error(`tar -xOf ${archive} ${path}: ${r.stderr}`);
  return r.stdout;
}

/** The one image of an OCI archive: its manifest's digest, the name it carries, its manifest and config. */
export function readArchive(archive: string): {
  digest: string;
  ref: string;
  manifest: {
    config: { digest: string };
    layers: { digest: string; size: number; mediaType: string }[];
    annotations?: Record<string, string>;
  };
  config: { config: { User?: string; Entrypoint?: string[]; Env?: string[] }; rootfs: { diff_ids: string[] } };
} {
  const index = JSON.parse(archiveFile(archive, "index.json").toString("utf8"));
  if (index.manifests?.length !== 1) throw new Error(`${archive}: ${index.manifests?.length} images, not one`);
  const [m] = index.manifests;
  const blob = (digest: string) => archiveFile(archive, `blobs/${digest.replace(":", "/")}`);
  const manifest = JSON.parse(blob(m.digest).toString("utf8"));
  return {
    digest: m.digest,
    ref: m.annotations?.["org.opencontainers.image.ref.name"] ?? "",
    manifest,
    config: JSON.parse(blob(manifest.config.digest).toString("utf8")),
  };
}

/** The files of an image's layers, as paths (`usr/bin/…`), and the unpacked bytes. */
export function imageFiles(archive: string): { files: string[]; unpacked: number } {
  const { manifest } = readArchive(archive);
  const files: string[] = [];
  let unpacked = 0;
  for (const layer of manifest.layers) {
    const data = archiveFile(archive, `blobs/${layer.digest.replace(":", "/")}`);
    const gz = layer.mediaType.endsWith("+gzip");
    const r = spawnSync("tar", [gz ? "-tvzf" : "-tvf", "-"], { input: data, encoding: "utf8", maxBuffer: 256 << 20 });
    if (r.status !== 0) throw new Error(`listing a layer of ${archive}: ${r.stderr}`);
    for (const line of r.stdout.split("\n").filter(Boolean)) {
      // -rwxr-xr-x 0/0 126595440 1970-01-01 00:00 ./nodejs/bin/node
      const m = /^\S+\s+\S+\s+(\d+)\s+\S+\s+\S+\s+(.*?)(?: -> .*| link to .*)?$/.exec(line);
      if (!m) continue;
      unpacked += Number(m[1]);
      files.push(m[2]!.replace(/^\.\//, "").replace(/\/$/, ""));
    }
  }
  return { files, unpacked };
}

/** The content of one file of an image's layers (a path as imageFiles lists it); undefined when none has it. */
export function imageFile(archive: string, path: string): Buffer | undefined {
  const { manifest } = readArchive(archive);
  let found: Buffer | undefined;
  for (const layer of manifest.layers) {
    const data = archiveFile(archive, `blobs/${layer.digest.replace(":", "/")}`);
    const gz = layer.mediaType.endsWith("+gzip");
    // Members are named with or without a leading "./", as the tool that wrote the layer did.
    for (const member of [path, `./${path}`]) {
      const r = spawnSync("tar", [gz ? "-xOzf" : "-xOf", "-", member], { input: data, maxBuffer: 256 << 20 });
      if (r.status === 0) found = r.stdout;
    }
  }
  return found;
}

/** The regular files of an image's layers that `wanted` picks, by path, a later layer's over an earlier one's. */
export function imageMembers(archive: string, wanted: (path: string) => boolean): Map<string, Buffer> {
  const found = new Map<string, Buffer>();
  for (const layer of readArchive(archive).manifest.layers) {
    const data = archiveFile(archive, `blobs/${layer.digest.replace(":", "/")}`);
    const tar = layer.mediaType.endsWith("+gzip") ? gunzipSync(data, { maxOutputLength: 2 ** 31 }) : data;
    for (const [name, bytes] of tarMembers(tar)) if (wanted(name)) found.set(name, Buffer.from(bytes));
  }
  return found;
}

/**
 * The Debian packages an image holds, as scanners read them: each status file under
 * var/lib/dpkg/status.d/, and the distribution of its os-release (`debian-12`).
 */
export function imageDebianPackages(archive: string): { distro: string; packages: Record<string, string>[] } {
  const members = imageMembers(
    archive,
    (p) => p === "usr/lib/os-release" || (p.startsWith(`${STATUS_DIR}/`) && !p.endsWith(".md5sums")),
  );
  const packages = [...members]
    .filter(([p]) => p.startsWith(`${STATUS_DIR}/`))
    .flatMap(([, bytes]) => parseControl(bytes.toString("utf8")))
    .filter((e) => e.Package && e.Version)
    .sort((a, b) => (a.Package! < b.Package! ? -1 : 1));
  return { distro: osReleaseDistro(members.get("usr/lib/os-release")?.toString("utf8") ?? ""), packages };
}

/**
 * The packages a bundle holds (runtime/bundle.ts, operator/bundle.ts), as name@version, from the licence file it
 * writes beside the code: each package's section starts with a rule and its name@version.
 */
export function bundledPackages(licences: string): string[] {
  return [...licences.matchAll(/^={78}\n(\S+)@([^@\s]+)\n/gm)].map((m) => `${m[1]}@${m[2]}`);
}

/** The section of a Keep a Changelog file for `version`, without its heading; undefined if none. */
export function changelogEntry(changelog: string, version: string): string | undefined {
  const lines = changelog.split("\n");
  const start = lines.findIndex((l) => new RegExp(`^## \\[${version.replace(/\./g, "\\.")}\\]`).test(l));
  if (start < 0) return undefined;
  let end = lines.findIndex((l, i) => i > start && /^## /.test(l));
  if (end < 0) end = lines.length;
  // The link references at the end belong to the file, not to the last entry.
  const body = lines.slice(start + 1, end).filter((l) => !/^\[[^\]]+\]: /.test(l));
  const text = body.join("\n").trim();
  return text ? text : undefined;
}

/**
 * A draft entry for `version` from the commits since the last release tag (`v*`), or since the
 * beginning: the first sentence of each subject, newest first, under one heading to sort by hand.
 */
export function draftEntry(version: string, today: string): string {
  const tags = run("git", ["tag", "--list", "v*", "--sort=-v:refname"]).split("\n").filter(Boolean);
  const range = tags[0] ? [`${tags[0]}..HEAD`] : ["HEAD"];
  const subjects = run("git", ["log", "--no-merges", "--format=%s", ...range])
    .split("\n")
    .filter(Boolean)
    // The first sentence of each (a subject may run on through several), within 200 characters.
    .map((s) => {
      const first = s.split(/(?<=[a-z0-9)])[.;] /)[0]!;
      return first.length > 200 ? `${first.slice(0, 199)}…` : first;
    });
  return [`## [${version}] - ${today}`, "", "### Changed", "", ...subjects.map((s) => `- ${s}`), ""].join("\n");
}

/** CHANGELOG.md with a draft entry for `version` put above the newest one. */
export function withDraft(changelog: string, entry: string): string {
  const at = changelog.search(/^## \[/m);
  return at < 0 ? `${changelog.trimEnd()}\n\n${entry}` : `${changelog.slice(0, at)}${entry}\n${changelog.slice(at)}`;
}

/**
 * The SBOM of an image: CycloneDX from `npm sbom` of the lock file, narrowed to its production
 * packages and among them to the packages the Dockerfile copies from its deps stage, described as the image
 * (metadata.component) holding this package and Node.
 */
function imageSbom(
  source: string,
  img: (typeof RELEASED_IMAGES)[number],
  version: string,
  digest: string,
  nodeVersion: string,
  archive: string,
): object {
  // Every package of the lock file: `--omit dev` leaves out production packages that dev tools
  // also use (yaml, debug, …), so production is read from the lock file's own marks.
  const bom = JSON.parse(
    run("npm", ["sbom", "--sbom-format", "cyclonedx", "--package-lock-only", "--sbom-type", "application"], {
      cwd: source,
    }),
  );
  const lock = JSON.parse(readFileSync(join(source, "package-lock.json"), "utf8")) as {
    packages: Record<string, { version?: string; dev?: boolean }>;
  };
  const production = new Set(
    Object.entries(lock.packages)
      .filter(([path, p]) => path && !p.dev)
      .map(([path, p]) => `${path.slice(path.lastIndexOf("node_modules/") + "node_modules/".length)}@${p.version}`),
  );
  bom.components = (bom.components as { name: string; version: string }[]).filter((c) =>
    production.has(`${c.name}@${c.version}`),
  );
  const plan = readDockerfile(join(source, img.dockerfile));
  const copied = plan.copies
    .filter((c) => c.from !== undefined && plan.stages[c.from]?.runs.some((r) => r.startsWith("npm ci --omit=dev")))
    .map((c) => depsSource(plan.stages[c.from!]!, c.sources[0]!)!);
  type Component = { "bom-ref": string; name: string };
  const all = bom.components as Component[];
  const graph = new Map(
    (bom.dependencies as { ref: string; dependsOn?: string[] }[]).map((d) => [d.ref, d.dependsOn ?? []]),
  );
  // All of node_modules, or the packages copied one by one with what they depend on.
  const held = new Set<string>();
  // A bundle (runtime/bundle.ts, operator/bundle.ts) holds exactly the packages its licence file names.
  const bundleCopy = plan.copies.find((c) => c.from !== undefined && plan.stages[c.from]?.runs.some(isBundleRun));
  const bundleLicences = bundleCopy && imageFile(archive, posix.join(bundleCopy.dest, BUNDLE_LICENCES).slice(1));
  if (bundleCopy && !bundleLicences) throw new Error(`${img.dockerfile}: the image has no ${BUNDLE_LICENCES}`);
  if (bundleLicences) {
    const bundled = new Set(bundledPackages(bundleLicences.toString("utf8")));
    for (const c of all as (Component & { version: string })[])
      if (bundled.has(`${c.name}@${c.version}`)) held.add(c["bom-ref"]);
    if (held.size !== bundled.size)
      throw new Error(`${img.dockerfile}: npm sbom lists ${held.size} of the bundle's ${bundled.size} packages`);
  }
  const queue = bundleLicences
    ? []
    : copied.includes("node_modules")
      ? all.map((c) => c["bom-ref"])
      : all.filter((c) => copied.includes(`node_modules/${c.name}`)).map((c) => c["bom-ref"]);
  while (queue.length) {
    const ref = queue.shift()!;
    if (held.has(ref)) continue;
    held.add(ref);
    queue.push(...(graph.get(ref) ?? []));
  }
  const components = all.filter((c) => held.has(c["bom-ref"]));
  if (components.length < copied.length)
    throw new Error(`${img.dockerfile}: npm sbom lists none of ${copied.join(", ")}`);
  const refs = new Set(components.map((c) => c["bom-ref"]));
  const pkg = JSON.parse(readFileSync(join(source, "package.json"), "utf8"));
  const root = { ...bom.metadata.component, name: pkg.name };
  refs.add(root["bom-ref"]);
  const node = {
    "bom-ref": `node@${nodeVersion}`,
    type: "platform",
    name: "node",
    version: nodeVersion,
    purl: `pkg:generic/node@${nodeVersion}`,
    externalReferences: [{ type: "website", url: "https://nodejs.org" }],
  };
  const os = debianComponents(archive);
  if (!os.packages.length) throw new Error(`${img.name}: the image holds no Debian package under ${STATUS_DIR}`);
  return {
    ...bom,
    metadata: {
      ...bom.metadata,
      component: {
        "bom-ref": `${img.name}@${digest}`,
        type: "container",
        name: img.name,
        version,
        hashes: [{ alg: "SHA-256", content: digest.replace(/^sha256:/, "") }],
      },
    },
    components: [root, node, os.system, ...os.packages, ...components],
    dependencies: [
      { ref: `${img.name}@${digest}`, dependsOn: [root["bom-ref"], node["bom-ref"], os.system["bom-ref"]] },
      ...os.dependencies,
      ...(bom.dependencies as { ref: string; dependsOn?: string[] }[])
        .filter((d) => refs.has(d.ref))
        .map((d) => ({ ...d, dependsOn: (d.dependsOn ?? []).filter((r) => refs.has(r)) })),
    ],
  };
}

/**
 * The operating system of an image and its Debian packages as CycloneDX components: each package
 * by its purl (`pkg:deb/debian/<name>@<version>?arch=…&distro=debian-12`, the source package as
 * `upstream`), the system depending on every package and each package on those of its Depends and
 * Pre-Depends that the image holds.
 */
function debianComponents(archive: string) {
  const { distro, packages } = imageDebianPackages(archive);
  const [name, release] = distro.split("-") as [string, string];
  const system = { "bom-ref": `os:${distro}`, type: "operating-system", name, version: release };
  const refs = new Map(packages.map((e) => [e.Package!, debPurl(e, distro)]));
  const depends = (e: Record<string, string>) =>
    [e["Pre-Depends"], e.Depends]
      .filter((d): d is string => d !== undefined)
      .flatMap((d) => d.split(","))
      // "libgcc-s1 (>= 3.0)", "debconf (>= 0.5) | debconf-2.0", "gcc-12-base:amd64": the names held.
      .flatMap((alt) => alt.split("|").map((a) => a.trim().split(/[\s:(]/)[0]!))
      .filter((n, i, all) => refs.has(n) && n !== e.Package && all.indexOf(n) === i)
      .map((n) => refs.get(n)!);
  return {
    system,
    packages: packages.map((e) => ({
      "bom-ref": refs.get(e.Package!)!,
      type: "library",
      name: e.Package!,
      version: e.Version!,
      ...(e.Maintainer && { publisher: e.Maintainer }),
      purl: refs.get(e.Package!)!,
    })),
    dependencies: [
      { ref: system["bom-ref"], dependsOn: [...refs.values()] },
      ...packages.map((e) => ({ ref: refs.get(e.Package!)!, dependsOn: depends(e) })),
    ],
  };
}

/** The chart of the source with `version`, and the images by digest, packaged by helm into `out`. */
function packageChart(source: string, version: string, images: ReleasedImage[], out: string, work: string): string {
  const chart = join(work, "ifp-operator");
  cpSync(join(source, "charts", "ifp-operator"), chart, { recursive: true });
  const chartYaml = parseDocument(readFileSync(join(chart, "Chart.yaml"), "utf8"));
  chartYaml.set("version", version);
  chartYaml.set("appVersion", version);
  writeFileSync(join(chart, "Chart.yaml"), chartYaml.toString());
  const values = parseDocument(readFileSync(join(chart, "values.yaml"), "utf8"));
  for (const img of RELEASED_IMAGES) {
    if (!img.value) continue;
    if (!values.hasIn([img.value, "digest"]))
      throw new Error(
        `charts/ifp-operator/values.yaml of this commit has no ${img.value}.digest to reference the image by`,
      );
    const built = images.find((i) => i.name === img.name)!;
    values.setIn([img.value, "tag"], version);
    values.setIn([img.value, "digest"], built.digest);
  }
  writeFileSync(join(chart, "values.yaml"), values.toString());
  const helm = toolPath("helm");
  run(helm, ["lint", "--strict", chart]);
  // The rendered chart runs the images by digest.
  const rendered = run(helm, ["template", "ifp", chart, "--namespace", "ifp-system"]);
  for (const img of images.filter((i) => RELEASED_IMAGES.find((r) => r.name === i.name)?.value))
    if (!rendered.includes(`/${img.name}@${img.digest}`))
      throw new Error(`the packaged chart does not render ${img.name}@${img.digest}`);
  run(helm, ["package", chart, "--destination", out]);
  const tgz = `ifp-operator-${version}.tgz`;
  if (!existsSync(join(out, tgz))) throw new Error(`helm package wrote no ${tgz}`);
  return tgz;
}

/** The commit's files, as `git archive` gives them, with this checkout's node_modules beside them. */
function exportCommit(ref: string, dir: string): string {
  const commit = run("git", ["rev-parse", "--verify", `${ref}^{commit}`]).trim();
  const tar = spawnSync("git", ["archive", "--format=tar", commit], { cwd: REPO, maxBuffer: 1024 * 1024 * 1024 });
  if (tar.status !== 0) throw new Error(`git archive ${commit}: ${tar.stderr}`);
  run("tar", ["-x", "-C", dir], { input: tar.stdout });
  symlinkSync(join(REPO, "node_modules"), join(dir, "node_modules"));
  return commit;
}

export function release(opts: {
  version: string;
  out?: string;
  ref?: string;
  /** A cosign key reference; COSIGN_KEY when not given; a key of the release's own when neither. */
  key?: string;
  keyless?: boolean;
  log?: (s: string) => void;
}): Release {
  const { version } = opts;
  const log = opts.log ?? ((s: string) => process.stderr.write(`release: ${s}\n`));
  if (!VERSION.test(version)) throw new Error(`${JSON.stringify(version)} is not a version (MAJOR.MINOR.PATCH[-PRE])`);
  const out = resolve(REPO, opts.out ?? join("dist", version));
  const work = mkdtempSync(join(tmpdir(), "ifp-release-"));
  let disposeKey = () => {};
  try {
    const source = join(work, "source");
    mkdirSync(source);
    const commit = exportCommit(opts.ref ?? "HEAD", source);
    log(`${version} of ${commit}`);
    const pkg = JSON.parse(readFileSync(join(source, "package.json"), "utf8"));
    if (pkg.version !== version)
      throw new Error(
        `package.json of ${commit.slice(0, 12)} says version ${pkg.version}: set it to ${version} (npm version ${version} --no-git-tag-version) and commit it first`,
      );
    const changelog = existsSync(join(source, "CHANGELOG.md"))
      ? readFileSync(join(source, "CHANGELOG.md"), "utf8")
      : "";
    const notes = changelogEntry(changelog, version);
    if (!notes)
      throw new Error(
        `CHANGELOG.md of ${commit.slice(0, 12)} has no entry for ${version}: npm run release -- ${version} --draft-changelog writes a draft to edit and commit`,
      );

    const sign = signingFromInputs(opts);
    disposeKey = sign.dispose;
    const { signing } = sign;
    const started = new Date();
    const builder = builderFromEnv(process.env, commit);
    const sourceFiles = commitFiles(REPO, commit);

    rmSync(out, { recursive: true, force: true });
    mkdirSync(out, { recursive: true });

    // The images, built from the commit's Dockerfiles by the commit's build.ts, one at a time, each
    // archive copied out of the shared cache at once (and built again should another build have
    // removed it meanwhile).
    const buildInto = (img: (typeof RELEASED_IMAGES)[number], file: string): string => {
      for (let attempt = 1; ; attempt++) {
        const [ref, archive] = run(process.execPath, [join(source, "e2e/images/build.ts"), img.kind], { cwd: source })
          .trim()
          .split(/=(?=\/)/) as [string, string | undefined];
        if (!archive || !ref.startsWith(`ifp.local/${img.name}:`))
          throw new Error(`e2e/images/build.ts built no ${img.name}: ${ref}`);
        try {
          copyFileSync(archive, join(work, file));
          annotateArchive(join(work, file), join(out, file), stamp);
          rmSync(join(work, file));
          return ref;
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code !== "ENOENT" || attempt === 3) throw err;
          log(`${archive} was removed before it was copied; building it again`);
        }
      }
    };
    // What the build cannot know without making every commit's images anew: the commit, and its
    // date as the images' creation (so that a second release of the commit is the same bytes).
    const stamp = {
      "org.opencontainers.image.revision": commit,
      "org.opencontainers.image.created": new Date(run("git", ["show", "-s", "--format=%cI", commit]).trim())
        .toISOString()
        .replace(/\.\d{3}Z$/, "Z"),
    };
    const nodeVersion = run(join(source, "node_modules/node/bin/node"), ["--version"]).trim().replace(/^v/, "");
    const images: ReleasedImage[] = RELEASED_IMAGES.map((img) => {
      const file = `${img.name}-${version}.oci.tar`;
      const ref = buildInto(img, file);
      const a = readArchive(join(out, file));
      const sbom = `${img.name}-${version}.cdx.json`;
      writeFileSync(
        join(out, sbom),
        `${JSON.stringify(imageSbom(source, img, version, a.digest, nodeVersion, join(out, file)), null, 2)}\n`,
      );
      const compressed = a.manifest.layers.reduce((n, l) => n + l.size, 0);
      const statement = provenanceStatement({
        image: img.name,
        digest: a.digest,
        version,
        commit,
        ref: opts.ref ?? "HEAD",
        dockerfile: img.dockerfile,
        source,
        files: sourceFiles,
        nodeVersion,
        builder,
        startedOn: started,
        finishedOn: new Date(),
        byproducts: [{ name: sbom, path: join(out, sbom) }],
      });
      const released = {
        name: img.name,
        archive: file,
        digest: a.digest,
        ref,
        sbom,
        size: { compressed, unpacked: imageFiles(join(out, file)).unpacked },
        ...signImage(out, { name: img.name, digest: a.digest }, version, statement, signing),
      };
      log(
        `${img.name} ${a.digest} (${(compressed / 2 ** 20).toFixed(1)} MiB compressed, ${(released.size.unpacked / 2 ** 20).toFixed(1)} MiB unpacked)`,
      );
      return released;
    });

    const chart = packageChart(source, version, images, out, work);
    const plugin = releasePlugin({
      source,
      work,
      out,
      version,
      mtime: new Date(stamp["org.opencontainers.image.created"]),
    });
    log(`${plugin.archive} (sha256 ${plugin.sha256.slice(0, 12)}…) and its krew manifest ${plugin.manifest}`);
    writeFileSync(join(out, "release-notes.md"), `# ifp-operator ${version}\n\n${notes}\n`);
    const publicKey = writePublicKey(out, signing);
    const signedBy = "key" in signing ? "key" : "keyless";
    writeFileSync(
      join(out, "release.json"),
      `${JSON.stringify({ version, commit, chart, plugin, images, notes: "release-notes.md", signing: signedBy, publicKey }, null, 2)}\n`,
    );
    const files = readdirSync(out)
      .filter((f) => f !== "SHA256SUMS")
      .sort();
    writeFileSync(join(out, "SHA256SUMS"), files.map((f) => `${sha256File(join(out, f))}  ${f}\n`).join(""));
    const checksumsSignature = signChecksums(out, signing);
    log(`${out}: ${[...files, "SHA256SUMS", ...(checksumsSignature ? [checksumsSignature] : [])].join(", ")}`);
    return {
      version,
      commit,
      dir: out,
      images,
      chart,
      plugin,
      notes: "release-notes.md",
      checksums: "SHA256SUMS",
      signing: signedBy,
      publicKey,
      checksumsSignature,
    };
  } finally {
    disposeKey();
    rmSync(work, { recursive: true, force: true });
  }
}

/**
 * The regular files of a tar archive by name (a leading `./` dropped), each a view of the
 * archive's own bytes: ustar names with their prefix, and pax or GNU long names.
 */
export function tarMembers(tar: Buffer): Map<string, Buffer> {
  const members = new Map<string, Buffer>();
  const text = (b: Buffer) => b.toString("utf8").replace(/\0.*$/s, "");
  let longName: string | undefined;
  for (let at = 0; at + 512 <= tar.length; ) {
    const header = tar.subarray(at, at + 512);
    if (header.every((b) => b === 0)) break;
    let sum = 0;
    for (let i = 0; i < 512; i++) sum += i >= 148 && i < 156 ? 32 : header[i]!;
    if (Number.parseInt(text(header.subarray(148, 156)).trim(), 8) !== sum)
      throw new Error(`not a tar archive (bad header checksum at byte ${at})`);
    const size = Number.parseInt(text(header.subarray(124, 136)).trim() || "0", 8);
    const type = String.fromCharCode(header[156]!);
    const body = tar.subarray(at + 512, at + 512 + size);
    if (body.length !== size) throw new Error(`tar archive cut short at byte ${at}`);
    const prefix = text(header.subarray(345, 500));
    const name = longName ?? (prefix ? `${prefix}/` : "") + text(header.subarray(0, 100));
    longName = undefined;
    if (type === "x") longName = /(?:^|\n)\d+ path=([^\n]*)\n/.exec(body.toString("utf8"))?.[1];
    else if (type === "L") longName = text(body);
    else if (type === "0" || type === "\0") members.set(name.replace(/^\.\//, ""), body);
    at += 512 + Math.ceil(size / 512) * 512;
  }
  return members;
}

/**
 * A release directory checked as whoever received it can: every file against SHA256SUMS, every
 * blob of each image archive against its own digest, each archive's image and each SBOM's against
 * the digest release.json records, and the packaged chart's version and image digests against
 * release.json.
 * Throws one error listing every mismatch; returns what was checked.
 */
export function verifyRelease(dir: string): { version: string; files: number; images: ReleasedImage[] } {
  const problems: string[] = [];
  const at = (f: string) => join(dir, f);
  let sums: [string, string][] = [];
  if (!existsSync(at("SHA256SUMS"))) problems.push("no SHA256SUMS");
  else
    sums = readFileSync(at("SHA256SUMS"), "utf8")
      .split("\n")
      .filter(Boolean)
      .map((line) => {
        const m = /^([0-9a-f]{64}) [ *]([^/]+)$/.exec(line);
        if (!m) problems.push(`SHA256SUMS: not a checksum line: ${JSON.stringify(line.slice(0, 120))}`);
        return m ? ([m[2]!, m[1]!] as [string, string]) : undefined;
      })
      .filter((e): e is [string, string] => e !== undefined);
  const listed = new Map(sums);
  for (const [file, hex] of sums) {
    if (!existsSync(at(file))) problems.push(`${file}: listed in SHA256SUMS, missing`);
    else if (sha256File(at(file)) !== hex) problems.push(`${file}: its SHA-256 is not the one in SHA256SUMS`);
  }
  let manifest: {
    version?: string;
    chart?: string;
    plugin?: Release["plugin"];
    images?: ReleasedImage[];
    publicKey?: string;
  } = {};
  try {
    manifest = JSON.parse(readFileSync(at("release.json"), "utf8"));
  } catch (err) {
    problems.push(`release.json: ${(err as Error).message}`);
  }
  const version = manifest.version ?? "";
  for (const f of [
    "release.json",
    manifest.chart,
    manifest.plugin?.archive,
    manifest.plugin?.manifest,
    manifest.publicKey,
    ...(manifest.images ?? []).flatMap((i) => [i.archive, i.sbom, i.payload, i.signature, i.provenance, i.attestation]),
  ])
    if (f && !listed.has(f)) problems.push(`${f}: not in SHA256SUMS`);
  const images = manifest.images ?? [];
  if (!images.length) problems.push("release.json names no images");
  for (const img of images) {
    // The SBOM describes the image by the same digest.
    if (img.sbom && !/[/\\]/.test(img.sbom) && existsSync(at(img.sbom))) {
      try {
        const bom = JSON.parse(readFileSync(at(img.sbom), "utf8"));
        const described = bom?.metadata?.component?.hashes?.find((h: { alg?: string }) => h.alg === "SHA-256")?.content;
        if (`sha256:${described}` !== img.digest)
          problems.push(`${img.sbom}: describes the image sha256:${described}, release.json says ${img.digest}`);
      } catch (err) {
        problems.push(`${img.sbom}: ${(err as Error).message.slice(0, 200)}`);
      }
    } else
      problems.push(
        img.sbom ? `${img.name}: no SBOM ${JSON.stringify(img.sbom)}` : `${img.name}: release.json names no SBOM`,
      );
    // The signature's payload and the provenance statement name the image by the same digest.
    const named: [string | undefined, (j: any) => unknown][] = [
      [img.payload, (j) => j?.critical?.image?.["docker-manifest-digest"]],
      [img.provenance, (j) => j?.subject?.[0]?.digest?.sha256 && `sha256:${j.subject[0].digest.sha256}`],
    ];
    for (const [file, digestOf] of named) {
      if (!file || /[/\\]/.test(file) || !existsSync(at(file))) continue;
      try {
        const said = digestOf(JSON.parse(readFileSync(at(file), "utf8")));
        if (said !== img.digest) problems.push(`${file}: names the image ${said}, release.json says ${img.digest}`);
      } catch (err) {
        problems.push(`${file}: ${(err as Error).message.slice(0, 200)}`);
      }
    }
    if (!img.archive || /[/\\]/.test(img.archive) || !existsSync(at(img.archive))) {
      problems.push(`${img.name}: no archive ${JSON.stringify(img.archive)}`);
      continue;
    }
    let members: Map<string, Buffer>;
    try {
      members = tarMembers(readFileSync(at(img.archive)));
    } catch (err) {
      problems.push(`${img.archive}: ${(err as Error).message}`);
      continue;
    }
    // Content addressing: each blob's bytes hash to its name.
    for (const [name, bytes] of members) {
      const m = /^blobs\/sha256\/([0-9a-f]{64})$/.exec(name);
      if (m && createHash("sha256").update(bytes).digest("hex") !== m[1])
        problems.push(`${img.archive}: blob sha256:${m[1]!.slice(0, 12)}… does not hash to its digest`);
    }
    try {
      const a = readArchive(at(img.archive));
      if (a.digest !== img.digest)
        problems.push(`${img.archive}: holds the image ${a.digest}, release.json says ${img.digest}`);
      for (const d of [a.manifest.config.digest, ...a.manifest.layers.map((l) => l.digest)])
        if (!members.has(`blobs/${d.replace(":", "/")}`))
          problems.push(`${img.archive}: blob ${d} of the image is missing`);
    } catch (err) {
      problems.push(`${img.archive}: ${(err as Error).message.slice(0, 300)}`);
    }
  }
  if (!manifest.chart) problems.push("release.json names no chart");
  else if (/[/\\]/.test(manifest.chart) || !existsSync(at(manifest.chart)))
    problems.push(`no chart ${JSON.stringify(manifest.chart)}`);
  else {
    const file = (path: string) => {
      const r = spawnSync("tar", ["-xzOf", at(manifest.chart!), path], { encoding: "utf8", maxBuffer: 16 << 20 });
      if (r.status !== 0) throw new Error(`${manifest.chart}: no ${path}`);
      return r.stdout;
    };
    try {
      const chartYaml = parseDocument(file("ifp-operator/Chart.yaml"));
      if (chartYaml.get("version") !== version)
        problems.push(`${manifest.chart}: chart version ${chartYaml.get("version")}, release.json says ${version}`);
      const values = parseDocument(file("ifp-operator/values.yaml"));
      for (const r of RELEASED_IMAGES) {
        if (!r.value) continue;
        const recorded = images.find((i) => i.name === r.name)?.digest;
        const inChart = values.getIn([r.value, "digest"]);
        if (inChart !== recorded)
          problems.push(`${manifest.chart}: ${r.value}.digest is ${inChart}, release.json says ${recorded}`);
      }
    } catch (err) {
      problems.push((err as Error).message);
    }
  }
  problems.push(...verifyPlugin(dir, manifest.plugin));
  if (problems.length) throw new Error(`${dir} fails verification:\n  ${problems.join("\n  ")}`);
  return { version, files: sums.length, images };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const args = process.argv.slice(2);
  const flag = (name: string) => {
    const i = args.indexOf(name);
    if (i < 0) return undefined;
    const v = args[i + 1];
    if (!v || v.startsWith("--")) throw new Error(`${name} needs a value`);
    args.splice(i, 2);
    return v;
  };
  try {
    const bool = (name: string) => {
      const i = args.indexOf(name);
      if (i >= 0) args.splice(i, 1);
      return i >= 0;
    };
    const draft = bool("--draft-changelog");
    const keyless = bool("--keyless");
    const verify = flag("--verify");
    const publishDir = flag("--publish");
    const to = flag("--to");
    const out = flag("--out");
    const ref = flag("--ref");
    const key = flag("--key");
    const [version, ...rest] = args;
    if (publishDir !== undefined || to !== undefined) {
      if (!publishDir || !to || version || draft || out || ref || key || verify)
        throw new Error("usage: npm run release -- --publish DIR --to HOST/NAMESPACE [--keyless]");
      const dir = resolve(process.cwd(), publishDir);
      verifyRelease(dir);
      publish({ dir, to, keyless, identity: builderFromEnv().id });
    } else if (verify !== undefined) {
      if (version || draft || out || ref) throw new Error("usage: npm run release -- --verify DIR");
      const dir = resolve(process.cwd(), verify);
      const checked = verifyRelease(dir);
      process.stdout.write(
        `${dir}: ${checked.version}, ${checked.files} files match SHA256SUMS; ${checked.images
          .map((i) => `${i.name} ${i.digest}`)
          .join(", ")}; the chart references the images by these digests\n`,
      );
    } else if (!version || rest.length)
      throw new Error(
        "usage: npm run release -- VERSION [--ref REV] [--out DIR] [--key REF | --keyless] | VERSION --draft-changelog | --verify DIR | --publish DIR --to HOST/NAMESPACE [--keyless]",
      );
    else if (draft) {
      if (!VERSION.test(version)) throw new Error(`${JSON.stringify(version)} is not a version`);
      const file = join(REPO, "CHANGELOG.md");
      const text = existsSync(file) ? readFileSync(file, "utf8") : "# Changelog\n";
      if (changelogEntry(text, version)) throw new Error(`CHANGELOG.md already has an entry for ${version}`);
      writeFileSync(file, withDraft(text, draftEntry(version, new Date().toISOString().slice(0, 10))));
      process.stderr.write(`release: a draft entry for ${version} in CHANGELOG.md: sort it, edit it and commit it\n`);
    } else {
      release({ version, out: out && (isAbsolute(out) ? out : resolve(process.cwd(), out)), ref, key, keyless });
    }
  } catch (err) {
    process.stderr.write(`release: ${(err as Error).message}\n`);
    process.exitCode = 1;
  }
}
