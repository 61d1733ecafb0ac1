#!/usr/bin/env node
// The project's container images, built without a Docker engine or a registry, for the real
// test node (e2e/support/node.ts):
//
//   npm run images                       build the runtime, operator, example app, pause and nats images
//   npm run images -- runtime            only the named ones; prints REF=archive lines
//
// `runtime/Dockerfile`, `operator/Dockerfile` and `examples/app/Dockerfile` stay the recipe for
// registries. This file reads them and carries out their final stage itself: the base
// (`gcr.io/distroless/nodejs24-debian12:nonroot`: Node, no shell, no package manager, user 65532;
// or `node:24-slim`) becomes a root filesystem holding Node 24 from the npm `node` package where
// the base has it, the shared libraries it links (found with ldd) and the base's users; the `deps`
// stage becomes `npm ci --omit=dev` in a staging directory, pruned by its PRUNE_RUN line as written
// (its node_modules, or one package of it, copied as the final stage says), the `build`
// stage compiles its sources with this repository's TypeScript (`npx tsc
// -p tsconfig.build.json`) and bundles them with this repository's rolldown (`node
// runtime/bundle.ts`, `node operator/bundle.ts`), and COPY, ENV, WORKDIR, USER, EXPOSE and ENTRYPOINT are applied as written. The build
// context leaves out what the Dockerfile's ignore file names (`<Dockerfile>.dockerignore` next to
// it, else the root `.dockerignore`, as BuildKit picks them). An instruction it does not know fails
// the build, so the Dockerfiles and these images cannot drift apart silently. buildah commits the
// tree into an OCI archive, cached by a hash of every input.
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import {
  chmodSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  realpathSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, posix, relative } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { lockHolder, releaseDirLock, tryDirLock } from "../support/dir-lock.ts";
import { cacheRoot, installDebianPackages, toolPath } from "../tools/tools.ts";
import { CA_BUNDLE, type DebianLock, lockKey, readLock, unpackDebianBase } from "./debian.ts";

const REPO = fileURLToPath(new URL("../../", import.meta.url));
/** Bumped when the way images are assembled changes, so that cached archives are rebuilt. */
const RECIPE = "ifp-images-4";
/** How many builds of each image the cache keeps, the newest. */
const KEPT_BUILDS = 3;
/** The builder stages' base: Node with npm and a shell. */
const NODE_BASE = /^node:(\d+)-slim$/;
/** The final stage's base: Node alone, no shell, no package manager, user nonroot (65532). */
const DISTROLESS_BASE = /^gcr\.io\/distroless\/nodejs(\d+)-debian\d+(?::nonroot)?$/;
/** What each base gives an image besides Node itself: where Node is, its environment, its users. */
interface BaseImage {
  /** The base image's name here: ifp.local/ifp-base-<kind><Node major>-<distro>. */
  kind: string;
  node: string;
  env: Record<string, string>;
  passwd: string;
  group: string;
  home: { path: string; owner: string };
}
const BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
const BASES: { match: RegExp; image: BaseImage }[] = [
  {
    match: NODE_BASE,
    image: {
      kind: "node",
      node: "/usr/local/bin/node",
      env: { PATH: BASE_PATH },
      passwd: "root:x:0:0:root:/root:/bin/sh\nnode:x:1000:1000::/home/node:/bin/sh\n",
      group: "root:x:0:\nnode:x:1000:\n",
      home: { path: "/home/node", owner: "1000:1000" },
    },
  },
  {
    match: DISTROLESS_BASE,
    image: {
      kind: "nodejs",
      node: "/nodejs/bin/node",
      env: { PATH: BASE_PATH, SSL_CERT_FILE: CA_BUNDLE },
      passwd:
        "root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n",
      group: "root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n",
      home: { path: "/home/nonroot", owner: "65532:65532" },
    },
  },
];
/** The base image a FROM names, and Node's major version in it; undefined for another. */
export function baseImage(from: string): { image: BaseImage; nodeMajor: number } | undefined {
  for (const b of BASES) {
    const m = b.match.exec(from);
    if (m) return { image: b.image, nodeMajor: Number(m[1]) };
  }
  return undefined;
}

export interface BuiltImage {
  /** The image's name in containerd, e.g. ifp.local/ifp-runtime:0123456789ab. */
  ref: string;
  /** The OCI archive (`oci-archive` transport of buildah, `ctr images import` reads it). */
  archive: string;
}

/** The final stage of a Dockerfile, as far as these images use the language. */
export interface DockerfilePlan {
  base: string;
  /** Node's major version the base names. */
  nodeMajor: number;
  /** Stage name → its COPY lines (sources, then destination) and RUN lines (builderKind says which are understood). */
  stages: Record<string, { from: string; workdir: string; copies: string[][]; runs: string[] }>;
  /** `destIsDir`: the destination ends with "/" or there are several sources, as Docker reads it. */
  copies: { from?: string; sources: string[]; dest: string; destIsDir: boolean }[];
  env: Record<string, string>;
  workdir: string;
  user: string;
  expose: string[];
  entrypoint: string[];
}

function logicalLines(text: string): string[] {
  const lines: string[] = [];
  let current = "";
  for (const raw of text.split("\n")) {
    if (!current && /^\s*#/.test(raw)) continue;
    const line = raw.replace(/\s+$/, "");
    if (line.endsWith("\\")) {
      current += `${line.slice(0, -1)} `;
      continue;
    }
    current += line;
    if (current.trim()) lines.push(current.trim());
    current = "";
  }
  return lines;
}

function jsonOrWords(rest: string): string[] {
  const t = rest.trim();
  if (t.startsWith("[")) return JSON.parse(t) as string[];
  return t.split(/\s+/);
}

type Stage = DockerfilePlan["stages"][string];
const LOCK_FILES = "package-lock.json,package.json";
/** The config the build stage compiles with: `RUN npx tsc -p <it>`. */
const TSC_RUN = /^npx tsc -p (\S+)$/;
/**
 * The RUNs a `build` stage may add after its compile, one of them: runtime/bundle.ts and
 * operator/bundle.ts link the compiled commands of their image and the packages they import into
 * dist/bundle/runtime and dist/bundle/operator (rolldown, from the lock file's devDependencies).
 * build.ts runs it as written, with this repository's Node.
 */
export const BUNDLE_RUNS: readonly string[] = ["node runtime/bundle.ts", "node operator/bundle.ts"];
export const isBundleRun = (run: string | undefined): boolean => run !== undefined && BUNDLE_RUNS.includes(run);
/** The file the bundle scripts write beside the bundle's code: each package bundled, its version and licence texts. */
export const BUNDLE_LICENCES = "THIRD-PARTY-LICENSES.txt";
/**
 * The one RUN a `deps` stage may add after `npm ci --omit=dev`: what Node never loads from
 * node_modules goes (TypeScript sources and declarations, which Node does not strip under
 * node_modules; source maps; Markdown but licences). build.ts runs it as written.
 */
export const PRUNE_RUN = String.raw`find node_modules -type f \( -name "*.ts" -o -name "*.mts" -o -name "*.cts" -o -name "*.map" -o -name "*.md" \) ! -iname "licen[cs]e*" -delete`;

/** A builder stage's base: node:<major>-slim, of the final stage's Node (the same image when that is one too). */
function builderBase(from: string, base: string): boolean {
  const final = baseImage(base);
  const m = NODE_BASE.exec(from);
  return final !== undefined && m !== null && Number(m[1]) === final.nodeMajor;
}

/**
 * The two builder stages these images have, from the same base as the final stage: `deps`,
 * production dependencies from the lock file (`npm ci --omit=dev`); `build`, every dependency
 * from the lock file, then sources copied from the context, compiled by `npx tsc -p <config>`
 * and bundled by one of BUNDLE_RUNS.
 */
export function builderKind(s: Stage | undefined, base: string): "deps" | "build" | undefined {
  if (!s || !builderBase(s.from, base) || s.copies[0]?.slice(0, -1).sort().join(",") !== LOCK_FILES) return undefined;
  if (
    (s.runs.length === 1 || (s.runs.length === 2 && s.runs[1] === PRUNE_RUN)) &&
    /^npm ci --omit=dev\b/.test(s.runs[0]!) &&
    s.copies.length === 1
  )
    return "deps";
  if (
    (s.runs.length === 2 || (s.runs.length === 3 && isBundleRun(s.runs[2]))) &&
    /^npm ci\b/.test(s.runs[0]!) &&
    !/--omit/.test(s.runs[0]!) &&
    TSC_RUN.test(s.runs[1]!) &&
    s.copies.length > 1
  )
    return "build";
  return undefined;
}

/** Parse a Dockerfile; any instruction outside the small set these images use is an error. */
export function readDockerfile(path: string): DockerfilePlan {
  return parseDockerfile(readFileSync(path, "utf8"), relative(REPO, path));
}

export function parseDockerfile(text: string, path: string): DockerfilePlan {
  const stages: DockerfilePlan["stages"] = {};
  let stage: { name: string; from: string; workdir: string; copies: string[][]; runs: string[] } | undefined;
  const final = {
    copies: [] as DockerfilePlan["copies"],
    env: {} as Record<string, string>,
    workdir: "/",
    user: "root",
    expose: [] as string[],
    entrypoint: [] as string[],
  };
  let inFinal = false;
  const fail = (line: string) => {
    throw new Error(
      `${path}: e2e/images/build.ts does not know how to build "${line}"; teach it, or keep the Dockerfile within what it knows`,
    );
  };
  for (const line of logicalLines(text)) {
    const [, instr, rest = ""] = /^(\w+)\s*(.*)$/.exec(line) ?? [];
    switch (instr?.toUpperCase()) {
      case "FROM": {
        const m = /^(\S+)(?:\s+AS\s+(\S+))?$/i.exec(rest);
        if (!m) fail(line);
        if (stage) stages[stage.name] = stage;
        if (m![2]) {
          stage = { name: m![2], from: m![1]!, workdir: "/", copies: [], runs: [] };
          inFinal = false;
        } else {
          stage = { name: "", from: m![1]!, workdir: "/", copies: [], runs: [] };
          inFinal = true;
        }
        break;
      }
      case "WORKDIR":
        if (!stage) fail(line);
        stage!.workdir = posix.resolve(stage!.workdir, rest.trim());
        if (inFinal) final.workdir = stage!.workdir;
        break;
      case "COPY": {
        if (!stage) fail(line);
        const words = jsonOrWords(rest);
        let from: string | undefined;
        while (words[0]?.startsWith("--")) {
          const flag = words.shift()!;
          const f = /^--from=(.+)$/.exec(flag);
          if (!f) fail(line);
          from = f![1];
        }
        if (words.length < 2) fail(line);
        const rawDest = words.pop()!;
        const dest = posix.resolve(stage!.workdir, rawDest);
        if (inFinal)
          final.copies.push({ from, sources: words, dest, destIsDir: rawDest.endsWith("/") || words.length > 1 });
        // A builder stage keeps the trailing "/" of a directory destination, as Docker reads it.
        else stage!.copies.push([...words, rawDest.endsWith("/") && dest !== "/" ? `${dest}/` : dest]);
        break;
      }
      case "RUN":
        if (!stage || inFinal) fail(line);
        stage!.runs.push(rest.trim());
        break;
      case "ENV": {
        if (!inFinal) fail(line);
        const m = /^(\w+)(?:=|\s+)(.*)$/.exec(rest.trim());
        if (!m) fail(line);
        final.env[m![1]!] = m![2]!.replace(/^"(.*)"$/, "$1");
        break;
      }
      case "USER":
        if (!inFinal) fail(line);
        final.user = rest.trim();
        break;
      case "EXPOSE":
        if (!inFinal) fail(line);
        final.expose.push(...rest.trim().split(/\s+/));
        break;
      case "ENTRYPOINT":
        if (!inFinal || !rest.trim().startsWith("[")) fail(line);
        final.entrypoint = JSON.parse(rest) as string[];
        break;
      default:
        fail(line);
    }
  }
  if (!stage || !inFinal) throw new Error(`${path}: no final stage`);
  const base = baseImage(stage.from);
  if (!base) fail(`FROM ${stage.from}`);
  for (const c of final.copies) {
    if (c.from === undefined) continue;
    const kind = builderKind(stages[c.from], stage.from);
    // What each builder stage these images have hands on: its node_modules or one package of it,
    // or its compiled dist/.
    const s = stages[c.from]!;
    const known =
      (kind === "deps" && c.sources.length === 1 && depsSource(s, c.sources[0]!) !== undefined) ||
      (kind === "build" && c.sources.length === 1 && c.sources[0]!.startsWith(`${posix.join(s.workdir, "dist")}/`));
    if (!known) fail(`COPY --from=${c.from} ${c.sources.join(" ")}`);
  }
  return {
    base: stage.from,
    nodeMajor: base!.nodeMajor,
    stages,
    copies: final.copies,
    env: final.env,
    workdir: final.workdir,
    user: final.user,
    expose: final.expose,
    entrypoint: final.entrypoint,
  };
}

/** A package name as npm writes it under node_modules: `name` or `@scope/name`. */
const PACKAGE_NAME = /^(?:@[a-z0-9][\w.-]*\/)?[a-z0-9][\w.-]*$/;

/**
 * What a COPY from the `deps` stage takes, relative to the stage's WORKDIR: all of `node_modules`,
 * or one package's directory in it (`node_modules/<name>`, `node_modules/@scope/name`).
 */
export function depsSource(stage: Pick<Stage, "workdir">, source: string): string | undefined {
  // A source of COPY --from is a path in the stage's filesystem, from its root.
  const rel = posix.relative(stage.workdir, posix.resolve("/", source));
  if (rel === "node_modules") return rel;
  const pkg = /^node_modules\/(.+)$/.exec(rel)?.[1];
  return pkg !== undefined && PACKAGE_NAME.test(pkg) ? rel : undefined;
}

/** `.dockerignore` patterns as a predicate on repository-relative paths. */
export function dockerignore(text: string): (path: string) => boolean {
  const res = text
    .split("\n")
    .map((l) => l.trim())
    .filter((l) => l && !l.startsWith("#"))
    .map((p) => {
      if (p.startsWith("!"))
        throw new Error(`.dockerignore: exceptions (${p}) are not supported by e2e/images/build.ts`);
      const dirOnly = p.endsWith("/");
      const body = p.replace(/^\/+|\/+$/g, "");
      const re = body
        .split("/")
        .map((seg) =>
          seg === "**"
            ? "(?:.*/)?"
            : `${seg
                .replace(/[.+^${}()|[\]\\]/g, "\\$&")
                .replace(/\*/g, "[^/]*")
                .replace(/\?/g, "[^/]")}/`,
        )
        .join("")
        .replace(/\/$/, "");
      // A pattern matches the path itself or any directory above it.
      return { re: new RegExp(`^${re}(?:/.*)?$`), dirOnly };
    });
  return (path) => res.some(({ re }) => re.test(path));
}

function walk(root: string, rel: string, ignored: (p: string) => boolean, out: string[]): void {
  const abs = join(root, rel);
  if (ignored(rel) || ignored(`${rel}/`)) return;
  if (statSync(abs).isDirectory()) {
    for (const e of readdirSync(abs).sort()) walk(root, rel ? `${rel}/${e}` : e, ignored, out);
  } else {
    out.push(rel);
  }
}

function sh(cmd: string, args: string[], opts: { cwd?: string; env?: Record<string, string> } = {}): string {
  const r = spawnSync(cmd, args, {
    cwd: opts.cwd,
    encoding: "utf8",
    maxBuffer: 64 * 1024 * 1024,
    env: { ...process.env, ...opts.env },
  });
  if (r.error) throw new Error(`${cmd} could not start: ${r.error.message}`);
  if (r.status !== 0)
    throw new Error(`${cmd} ${args.join(" ")} failed (${r.status}): ${(r.stderr || r.stdout).slice(-3000)}`);
  return r.stdout;
}

/** Node from the npm `node` package this repository pins. */
function nodeRuntime(): { node: string; version: string } {
  const node = realpathSync(join(REPO, "node_modules", "node", "bin", "node"));
  return { node, version: sh(node, ["--version"]).trim() };
}

function fileHash(h: ReturnType<typeof createHash>, path: string, label = path): void {
  h.update(`${label}\0${statSync(path).mode & 0o777}\0`);
  h.update(readFileSync(path));
  h.update("\0");
}

/** The repository files an image's COPY instructions take (after .dockerignore) and where they land. */
export function imageContextFiles(
  plan: Pick<DockerfilePlan, "copies">,
  ignored: (path: string) => boolean,
  dockerfilePath: string,
): { src: string; dest: string }[] {
  const files: { src: string; dest: string }[] = [];
  for (const c of plan.copies) {
    if (c.from !== undefined) continue;
    for (const source of c.sources) {
      const rel = posix.normalize(source).replace(/\/$/, "");
      if (!existsSync(join(REPO, rel))) throw new Error(`${dockerfilePath}: COPY ${source}: no such file`);
      if (statSync(join(REPO, rel)).isDirectory()) {
        const found: string[] = [];
        walk(REPO, rel, ignored, found);
        for (const f of found) files.push({ src: f, dest: posix.join(c.dest, posix.relative(rel, f)) });
      } else if (!ignored(rel)) {
        files.push({ src: rel, dest: c.destIsDir ? posix.join(c.dest, posix.basename(rel)) : c.dest });
      }
    }
  }
  return files;
}

/**
 * The ignore file of a Dockerfile's build context, as BuildKit picks it: `<Dockerfile>.dockerignore`
 * next to the Dockerfile when there is one, else `.dockerignore` at the root of the context.
 */
export function ignoreFilePath(dockerfilePath: string): string | undefined {
  for (const p of [`${dockerfilePath}.dockerignore`, ".dockerignore"]) if (existsSync(join(REPO, p))) return p;
  return undefined;
}

function ignoreFileText(dockerfilePath: string): string {
  const p = ignoreFilePath(dockerfilePath);
  return p ? readFileSync(join(REPO, p), "utf8") : "";
}

interface Recipe {
  name: string;
  /** The image it is built on, whose layers come first; without one, from scratch. */
  from?: Recipe;
  /** Fills the root filesystem of its own layer. */
  populate(rootfs: string): void;
  config: { env: Record<string, string>; workdir: string; user: string; expose: string[]; entrypoint: string[] };
  /** OCI annotations of its manifest, also labels of its config. */
  annotations?: Record<string, string>;
  hash: string;
}

/** The project's repository, from package.json's `repository`, as a browsable URL. */
export function sourceUrl(pkg: { repository?: string | { url?: string } }): string {
  const url = typeof pkg.repository === "string" ? pkg.repository : pkg.repository?.url;
  if (!url) throw new Error("package.json has no repository: the images' org.opencontainers.image.source");
  return url.replace(/^git\+/, "").replace(/\.git$/, "");
}

/**
 * The annotations an image of this repository carries from its build: what it is, its version,
 * licence and source (package.json). buildImage adds its base's name and digest.
 */
function imageAnnotations(name: string): Record<string, string> {
  const pkg = JSON.parse(readFileSync(join(REPO, "package.json"), "utf8"));
  return {
    "org.opencontainers.image.title": name,
    "org.opencontainers.image.version": pkg.version,
    "org.opencontainers.image.licenses": pkg.license,
    "org.opencontainers.image.source": sourceUrl(pkg),
  };
}

/**
 * The base of the final stage: Debian's packages (e2e/images/debian.ts, as the lock pins them),
 * Node where the base has it (/usr/local/bin/node in node:24-slim, /nodejs/bin/node in
 * distroless), the base's users and home, /tmp. No shell, no package manager. Its image is built
 * once per lock, Node and base, and every image of that base is built on it.
 */
function baseRecipe(base: BaseImage, runtime: ReturnType<typeof nodeRuntime>, lock: DebianLock): Recipe {
  const major = /^v(\d+)/.exec(runtime.version)?.[1];
  const name = `ifp-base-${base.kind}${major}-${lock.distro.replace("-", "")}`;
  const h = createHash("sha256");
  h.update(`${RECIPE}\0${name}\0${lockKey(lock)}\0${JSON.stringify(base)}\0${runtime.version}\0`);
  fileHash(h, runtime.node, "node");
  return {
    name,
    hash: h.digest("hex").slice(0, 16),
    config: { env: base.env, workdir: "/", user: base.home.owner, expose: [], entrypoint: [base.node] },
    populate(rootfs) {
      unpackDebianBase(rootfs, lock);
      for (const d of [dirname(base.node), "etc", "tmp", base.home.path])
        mkdirSync(join(rootfs, d), { recursive: true });
      chmodSync(join(rootfs, "tmp"), 0o1777);
      copyFileSync(runtime.node, join(rootfs, base.node));
      chmodSync(join(rootfs, base.node), 0o755);
      writeFileSync(join(rootfs, "etc/passwd"), base.passwd);
      writeFileSync(join(rootfs, "etc/group"), base.group);
      writeFileSync(join(rootfs, "etc/nsswitch.conf"), "passwd: files\ngroup: files\nhosts: files dns\n");
      sh("chown", [base.home.owner, join(rootfs, base.home.path)]);
      // Node runs on the packages' loader and libraries alone, as in a container of the image.
      const version = sh("chroot", ["--userspec", base.home.owner, rootfs, base.node, "--version"]).trim();
      if (version !== runtime.version)
        throw new Error(`${base.node} in the base says ${version}, not ${runtime.version}`);
    },
  };
}

function imageRecipe(name: string, dockerfilePath: string): Recipe {
  const plan = readDockerfile(join(REPO, dockerfilePath));
  const ignoreText = ignoreFileText(dockerfilePath);
  const ignored = dockerignore(ignoreText);
  const runtime = nodeRuntime();
  const base = baseImage(plan.base)!.image;
  const from = baseRecipe(base, runtime, readLock());
  const major = Number(/^v(\d+)/.exec(runtime.version)?.[1]);
  if (major !== plan.nodeMajor)
    throw new Error(`${dockerfilePath} is FROM ${plan.base}, but node_modules/node is ${runtime.version}`);

  const h = createHash("sha256");
  h.update(
    `${RECIPE}\0${name}\0${readFileSync(join(REPO, dockerfilePath), "utf8")}\0${ignoreText}\0${from.name}:${from.hash}\0`,
  );
  fileHash(h, join(REPO, "package.json"), "annotations:package.json");
  for (const c of plan.copies) {
    if (c.from !== undefined)
      for (const f of ["package.json", "package-lock.json"]) fileHash(h, join(REPO, f), `deps:${f}`);
  }
  const contextFiles = imageContextFiles(plan, ignored, dockerfilePath);
  for (const f of contextFiles) fileHash(h, join(REPO, f.src), `${f.src}->${f.dest}`);
  // The sources a build stage compiles, by stage.
  const builds = new Map<string, { src: string; dest: string }[]>();
  for (const c of plan.copies) {
    if (c.from === undefined || builderKind(plan.stages[c.from], plan.base) !== "build" || builds.has(c.from)) continue;
    const files = stageContextFiles(plan.stages[c.from]!, ignored, dockerfilePath);
    for (const f of files) fileHash(h, join(REPO, f.src), `${c.from}:${f.src}->${f.dest}`);
    builds.set(c.from, files);
  }

  return {
    name,
    hash: h.digest("hex").slice(0, 16),
    from,
    annotations: imageAnnotations(name),
    config: {
      env: { ...base.env, ...plan.env },
      workdir: plan.workdir,
      user: plan.user,
      expose: plan.expose,
      entrypoint: plan.entrypoint,
    },
    populate(rootfs) {
      mkdirSync(join(rootfs, plan.workdir), { recursive: true });
      for (const f of contextFiles) {
        const to = join(rootfs, f.dest);
        mkdirSync(dirname(to), { recursive: true });
        copyFileSync(join(REPO, f.src), to);
        chmodSync(to, statSync(join(REPO, f.src)).mode & 0o755);
      }
      const compiled = new Map<string, string>();
      try {
        for (const c of plan.copies) {
          if (c.from === undefined) continue;
          const stage = plan.stages[c.from]!;
          if (builderKind(stage, plan.base) === "deps") {
            // As Docker copies a directory: its contents into the destination.
            const from = join(
              productionDependencies(stage.runs.includes(PRUNE_RUN)),
              depsSource(stage, c.sources[0]!)!,
            );
            if (!existsSync(from))
              throw new Error(
                `${dockerfilePath}: COPY --from=${c.from} ${c.sources[0]}: npm ci --omit=dev installs no such package (is it among package.json's dependencies?)`,
              );
            mkdirSync(join(rootfs, c.dest), { recursive: true });
            sh("cp", ["-a", `${from}/.`, join(rootfs, c.dest)]);
            continue;
          }
          if (!compiled.has(c.from)) compiled.set(c.from, compileStage(stage, builds.get(c.from)!));
          mkdirSync(join(rootfs, c.dest), { recursive: true });
          sh("cp", [
            "-a",
            `${join(compiled.get(c.from)!, posix.relative(stage.workdir, c.sources[0]!))}/.`,
            join(rootfs, c.dest),
          ]);
        }
      } finally {
        for (const dir of compiled.values()) rmSync(dir, { recursive: true, force: true });
      }
    },
  };
}

/**
 * A build stage's COPY instructions from the context, as the files they take and where they
 * land: package.json and the lock file first (package.json's `"type": "module"` is what makes
 * the compiler emit ES modules), then the configs and sources it compiles.
 */
export function stageContextFiles(
  stage: Stage,
  ignored: (path: string) => boolean,
  dockerfilePath: string,
): { src: string; dest: string }[] {
  const copies = stage.copies.map((c) => {
    const sources = c.slice(0, -1);
    const dest = c.at(-1)!;
    return { sources, dest: dest.replace(/(.)\/$/, "$1"), destIsDir: dest.endsWith("/") || sources.length > 1 };
  });
  return imageContextFiles({ copies }, ignored, dockerfilePath);
}

/**
 * The build stage of a Dockerfile (`runtime/Dockerfile`, `operator/Dockerfile`) carried out as
 * an image build carries it out: only the files its COPY lines take, compiled. Returns the
 * stage's WORKDIR as a directory here (its compiled output under the config's outDir, the
 * repository's node_modules beside it); the caller removes it.
 */
export function compileBuildStage(dockerfilePath: string): string {
  const plan = readDockerfile(join(REPO, dockerfilePath));
  const name = Object.keys(plan.stages).find((n) => builderKind(plan.stages[n], plan.base) === "build");
  if (!name) throw new Error(`${dockerfilePath} has no build stage`);
  const stage = plan.stages[name]!;
  return compileStage(stage, stageContextFiles(stage, dockerignore(ignoreFileText(dockerfilePath)), dockerfilePath));
}

/**
 * A build stage carried out here: its sources in a staging directory that stands for the
 * stage's WORKDIR, this repository's node_modules (installed from the same lock file) beside
 * them, and its `npx tsc -p <config>` (and its bundle script) run there. Returns the directory; the caller removes it.
 */
function compileStage(stage: Stage, files: { src: string; dest: string }[]): string {
  const root = mkdtempSync(join(tmpdir(), "ifp-image-build-"));
  for (const f of files) {
    const to = join(root, posix.relative(stage.workdir, f.dest));
    mkdirSync(dirname(to), { recursive: true });
    copyFileSync(join(REPO, f.src), to);
  }
  symlinkSync(join(REPO, "node_modules"), join(root, "node_modules"));
  sh(
    process.execPath,
    [join(REPO, "node_modules", "typescript", "bin", "tsc"), "-p", TSC_RUN.exec(stage.runs[1]!)![1]!],
    { cwd: root },
  );
  if (isBundleRun(stage.runs[2])) sh(process.execPath, stage.runs[2]!.split(" ").slice(1), { cwd: root });
  return root;
}

/**
 * The `deps` stage: `npm ci --omit=dev --ignore-scripts` of this repository's lock file, then,
 * when `pruned`, PRUNE_RUN as written; cached by their hash. Returns the stage's WORKDIR here.
 */
export function productionDependencies(pruned: boolean): string {
  const lock = readFileSync(join(REPO, "package-lock.json"));
  const pkg = readFileSync(join(REPO, "package.json"));
  const key = createHash("sha256")
    .update(lock)
    .update("\0")
    .update(pkg)
    .update(pruned ? `\0${PRUNE_RUN}` : "")
    .digest("hex")
    .slice(0, 16);
  const variant = pruned ? "deps-pruned-" : "deps-full-";
  const dir = join(imagesCache(), `${variant}${key}`);
  if (existsSync(join(dir, "node_modules"))) return dir;
  const staging = mkdtempSync(join(imagesCache(), ".deps-"));
  try {
    writeFileSync(join(staging, "package.json"), pkg);
    writeFileSync(join(staging, "package-lock.json"), lock);
    sh("npm", ["ci", "--omit=dev", "--ignore-scripts", "--no-audit", "--no-fund", "--prefer-offline"], {
      cwd: staging,
    });
    if (pruned) sh("sh", ["-c", PRUNE_RUN], { cwd: staging });
    rmSync(dir, { recursive: true, force: true });
    renameSync(staging, dir);
    for (const e of readdirSync(imagesCache()))
      if ((e.startsWith(variant) || /^deps-[0-9a-f]{16}$/.test(e)) && join(imagesCache(), e) !== dir)
        rmSync(join(imagesCache(), e), { recursive: true, force: true });
  } finally {
    rmSync(staging, { recursive: true, force: true });
  }
  return dir;
}

function pauseRecipe(): Recipe {
  const bin = toolPath("pause");
  const h = createHash("sha256");
  h.update(`${RECIPE}\0pause\0`);
  fileHash(h, bin, "pause");
  return {
    name: "pause",
    hash: h.digest("hex").slice(0, 16),
    config: { env: {}, workdir: "/", user: "65535:65535", expose: [], entrypoint: ["/pause"] },
    populate(rootfs) {
      copyFileSync(bin, join(rootfs, "pause"));
      chmodSync(join(rootfs, "pause"), 0o755);
    },
  };
}

/**
 * A NATS server image for the chart's NATS StatefulSet (nats.image): the tool cache's
 * nats-server (a static Go binary) at /usr/local/bin/nats-server, where the official
 * `nats:*-alpine` images have it and the chart's preStop hook calls it by name; its entrypoint,
 * so that the chart's args (`--config …`) are nats-server's. No shell, no other file.
 */
function natsRecipe(): Recipe {
  const bin = toolPath("nats-server");
  const version = /nats-server-(v[\w.]+)/.exec(bin)?.[1] ?? "unknown";
  const h = createHash("sha256");
  h.update(`${RECIPE}\0nats\0${version}\0`);
  fileHash(h, bin, "nats-server");
  return {
    name: "nats",
    hash: h.digest("hex").slice(0, 16),
    config: {
      env: { PATH: BASE_PATH },
      workdir: "/",
      user: "65534:65534",
      expose: ["4222", "6222", "8222"],
      entrypoint: ["/usr/local/bin/nats-server"],
    },
    populate(rootfs) {
      mkdirSync(join(rootfs, "usr/local/bin"), { recursive: true });
      mkdirSync(join(rootfs, "tmp"));
      chmodSync(join(rootfs, "tmp"), 0o1777);
      copyFileSync(bin, join(rootfs, "usr/local/bin/nats-server"));
      chmodSync(join(rootfs, "usr/local/bin/nats-server"), 0o755);
    },
  };
}

export const IMAGES: Record<string, () => Recipe> = {
  runtime: () => imageRecipe("ifp-runtime", "runtime/Dockerfile"),
  operator: () => imageRecipe("ifp-operator", "operator/Dockerfile"),
  app: () => imageRecipe("ifp-example-app", "examples/app/Dockerfile"),
  pause: pauseRecipe,
  nats: natsRecipe,
};

export function imagesCache(): string {
  const dir = join(dirname(cacheRoot()), "images");
  mkdirSync(dir, { recursive: true });
  return dir;
}

/** Build one image into an OCI archive (first run only; later runs find it by its inputs' hash). */
export function buildImage(kind: string): BuiltImage {
  const make = IMAGES[kind];
  if (!make) throw new Error(`unknown image ${kind}; known: ${Object.keys(IMAGES).join(", ")}`);
  return buildRecipe(make());
}

/** The digest of the one image of an OCI archive (its manifest's). */
export function archiveDigest(archive: string): string {
  const index = JSON.parse(sh("tar", ["-xOf", archive, "index.json"]));
  if (index.manifests?.length !== 1) throw new Error(`${archive}: ${index.manifests?.length} images, not one`);
  return index.manifests[0].digest;
}

/**
 * A copy of an OCI archive whose image carries more annotations (a release's revision and date):
 * its manifest rewritten with them, so it has another digest; its config and layers the same
 * blobs. Written as a tar of the layout with fixed owners and times, so that the same input gives
 * the same bytes.
 */
export function annotateArchive(archive: string, dest: string, annotations: Record<string, string>): string {
  const work = mkdtempSync(join(tmpdir(), "ifp-image-annotate-"));
  try {
    sh("tar", ["-xf", archive, "-C", work]);
    const index = JSON.parse(readFileSync(join(work, "index.json"), "utf8"));
    if (index.manifests?.length !== 1) throw new Error(`${archive}: ${index.manifests?.length} images, not one`);
    const [descriptor] = index.manifests;
    const blob = (digest: string) => join(work, "blobs", ...digest.split(":"));
    const manifest = JSON.parse(readFileSync(blob(descriptor.digest), "utf8"));
    manifest.annotations = { ...manifest.annotations, ...annotations };
    const bytes = Buffer.from(JSON.stringify(manifest));
    const digest = `sha256:${createHash("sha256").update(bytes).digest("hex")}`;
    rmSync(blob(descriptor.digest));
    writeFileSync(blob(digest), bytes);
    index.manifests = [{ ...descriptor, digest, size: bytes.length }];
    writeFileSync(join(work, "index.json"), JSON.stringify(index));
    const partial = `${dest}.${process.pid}.partial`;
    sh("tar", [
      "--sort=name",
      "--owner=0",
      "--group=0",
      "--numeric-owner",
      "--mtime=@0",
      "--format=ustar",
      "-cf",
      partial,
      "-C",
      work,
      "oci-layout",
      "index.json",
      "blobs",
    ]);
    renameSync(partial, dest);
    return digest;
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

/** How long a build waits for another process's build of the same image before it fails. */
const BUILD_LOCK_WAIT_MS = 30 * 60_000;

/**
 * `build` run holding the lock of `archive` (a directory beside it), unless the archive is there
 * once the lock is held: two processes that want the same image (a release and a test of one
 * commit, started together) build it once, the second waiting for the first.
 */
export function builtOnce(archive: string, build: () => void): void {
  const lock = `${archive}.lock`;
  const deadline = Date.now() + BUILD_LOCK_WAIT_MS;
  while (!tryDirLock(lock)) {
    if (Date.now() > deadline)
      throw new Error(`${archive} is being built by process ${lockHolder(lock)}: no archive after 30 minutes`);
    // The build is synchronous: sleep the thread, not the event loop's timers.
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 500);
  }
  try {
    if (!existsSync(archive)) build();
  } finally {
    releaseDirLock(lock);
  }
}

function buildRecipe(recipe: Recipe): BuiltImage {
  const ref = `ifp.local/${recipe.name}:${recipe.hash}`;
  const archive = join(imagesCache(), `${recipe.name}-${recipe.hash}.oci.tar`);
  if (existsSync(archive)) return { ref, archive };
  // The base first (cached as any image), and named with its digest in the image's manifest.
  const base = recipe.from && buildRecipe(recipe.from);
  builtOnce(archive, () => buildArchive(recipe, ref, archive, base));
  return { ref, archive };
}

/** Build `recipe`'s image into `archive` (on `base` when it has one). */
function buildArchive(recipe: Recipe, ref: string, archive: string, base: BuiltImage | undefined): void {
  const annotations = {
    ...recipe.annotations,
    ...(base && {
      "org.opencontainers.image.base.name": base.ref,
      "org.opencontainers.image.base.digest": archiveDigest(base.archive),
    }),
  };
  ensureBuildah();
  const started = Date.now();
  process.stderr.write(`images: building ${ref} (first run only; cached in ${imagesCache()})\n`);
  const work = mkdtempSync(join(tmpdir(), `ifp-image-${recipe.name}-`));
  // A private buildah store, removed with the work directory: nothing is left in /var/lib/containers.
  const store = ["--root", join(work, "storage"), "--runroot", join(work, "run"), "--storage-driver", "vfs"];
  const rootfs = join(work, "rootfs");
  mkdirSync(rootfs);
  let container = "";
  try {
    recipe.populate(rootfs);
    container = sh("buildah", [...store, "from", "--quiet", base ? `oci-archive:${base.archive}` : "scratch"]).trim();
    sh("buildah", [...store, "copy", "--quiet", container, `${rootfs}/.`, "/"]);
    const c = recipe.config;
    const cfg = [
      "--workingdir",
      c.workdir,
      "--user",
      c.user,
      "--entrypoint",
      JSON.stringify(c.entrypoint),
      "--cmd",
      "",
      "--os",
      "linux",
      "--arch",
      "amd64",
    ];
    for (const [k, v] of Object.entries(c.env)) cfg.push("--env", `${k}=${v}`);
    for (const p of c.expose) cfg.push("--port", p);
    for (const [k, v] of Object.entries(annotations)) cfg.push("--annotation", `${k}=${v}`, "--label", `${k}=${v}`);
    sh("buildah", [...store, "config", ...cfg, container]);
    sh("buildah", [...store, "commit", "--quiet", "--format", "oci", "--timestamp", "0", container, ref]);
    const partial = `${archive}.${process.pid}.partial`;
    sh("buildah", [...store, "push", "--quiet", ref, `oci-archive:${partial}:${ref}`]);
    renameSync(partial, archive);
    // Older builds of the same image go but the newest few: another checkout or commit built
    // at the same time (a release, a test of another tree) may still be about to read its own.
    const older = readdirSync(imagesCache())
      .filter(
        (e) => e.startsWith(`${recipe.name}-`) && /^[0-9a-f]{16}\.oci\.tar$/.test(e.slice(recipe.name.length + 1)),
      )
      .map((e) => join(imagesCache(), e))
      .filter((p) => p !== archive)
      .map((p) => ({ p, at: existsSync(p) ? (statSync(p, { throwIfNoEntry: false })?.mtimeMs ?? 0) : 0 }))
      .sort((a, b) => b.at - a.at)
      .map(({ p }) => p);
    for (const p of older.slice(KEPT_BUILDS - 1)) rmSync(p, { force: true });
  } finally {
    if (container) spawnSync("buildah", [...store, "rm", container], { stdio: "ignore" });
    spawnSync("buildah", [...store, "rmi", "--all", "--force"], { stdio: "ignore" });
    // vfs layers may be mounted read-only by buildah's store; unmount before removing.
    spawnSync("sh", ["-c", `grep -o ' ${work}[^ ]*' /proc/self/mountinfo | sort -r | xargs -r -n1 umount -l`], {
      stdio: "ignore",
    });
    rmSync(work, { recursive: true, force: true });
  }
  process.stderr.write(`images: built ${ref} in ${Math.round((Date.now() - started) / 1000)} s\n`);
}

/** buildah from Debian's package, installed when missing (CI runs as root). */
export function ensureBuildah(): void {
  if (spawnSync("buildah", ["--version"], { stdio: "ignore" }).status === 0) return;
  installDebianPackages(["buildah"]);
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const wanted = process.argv.slice(2);
  let failed = false;
  for (const kind of wanted.length ? wanted : Object.keys(IMAGES)) {
    try {
      const img = buildImage(kind);
      process.stdout.write(`${img.ref}=${img.archive}\n`);
    } catch (err) {
      failed = true;
      process.stderr.write(`images: ${kind}: ${(err as Error).message}\n`);
    }
  }
  process.exitCode = failed ? 1 : 0;
}
