#!/usr/bin/env node
// The Debian packages under the images (e2e/images/build.ts), as a distroless base has them: the
// C and C++ runtime Node links, the CA certificates, the time zones, /etc/os-release and the
// network databases; no shell, no package manager. Each is pinned in debian.lock.json beside this
// file by version and the SHA-256 of its .deb:
//
//   npm run images:lock     pin the candidates of this machine's apt sources (apt-get update first)
//
// The .debs are fetched with `apt-get download` from the machine's apt sources, checked against
// the lock and cached outside the repository by name and version; `dpkg-deb` unpacks them. What
// dpkg would leave behind is written as distroless writes it: one status file per package under
// var/lib/dpkg/status.d/ (the package's control file, installed) with its md5sums beside it, which
// is where Syft, Trivy and Grype read an image's OS packages, and the CA bundle at
// /etc/ssl/certs/ca-certificates.crt as update-ca-certificates makes it.
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { dirname, join, posix } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { cacheRoot } from "../tools/tools.ts";

/** The packages of the base, each with what it gives an image. */
export const DEBIAN_PACKAGES: Record<string, string> = {
  "base-files": "/etc/os-release (how scanners tell the distribution), /etc/debian_version, the common licences",
  netbase: "/etc/services, /etc/protocols",
  tzdata: "/usr/share/zoneinfo",
  "ca-certificates": "the Mozilla CA certificates, bundled into /etc/ssl/certs/ca-certificates.crt",
  "gcc-12-base": "what libgcc-s1 and libstdc++6 depend on (their copyright)",
  libc6: "the C library and the dynamic loader Node runs with",
  "libgcc-s1": "libgcc_s.so.1",
  "libstdc++6": "libstdc++.so.6",
};

export const LOCK_FILE = fileURLToPath(new URL("./debian.lock.json", import.meta.url));
export const CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt";
/** Where scanners read an image's packages from, in a distroless image. */
export const STATUS_DIR = "var/lib/dpkg/status.d";

export interface LockedPackage {
  package: string;
  version: string;
  architecture: string;
  /** The source package's name, when it is another than the package's. */
  source?: string;
  /** The file's path in a Debian archive (`pool/…`), as apt names it. */
  filename: string;
  size: number;
  sha256: string;
}

export interface DebianLock {
  /** `<ID>-<VERSION_ID>` of base-files' os-release: the `distro` of the packages' purls. */
  distro: string;
  architecture: string;
  packages: LockedPackage[];
}

const NAME = /^[a-z0-9][a-z0-9+.-]+$/;
const VERSION = /^(?:\d+:)?[0-9A-Za-z.+~-]+$/;
const ARCH = /^(?:amd64|all)$/;
const POOL = /^pool\/(?:[\w.+~%-]+\/)+[\w.+~%-]+\.deb$/;

/** The lock file, checked: every package of DEBIAN_PACKAGES once, nothing else, each field well formed. */
export function readLock(path = LOCK_FILE): DebianLock {
  const raw = JSON.parse(readFileSync(path, "utf8")) as Partial<DebianLock>;
  const problems: string[] = [];
  if (typeof raw.distro !== "string" || !/^[a-z]+-\d+$/.test(raw.distro)) problems.push("distro");
  if (raw.architecture !== "amd64") problems.push("architecture (amd64 only)");
  const packages = Array.isArray(raw.packages) ? raw.packages : [];
  for (const p of packages) {
    const bad = [
      !NAME.test(String(p?.package)) && "package",
      !VERSION.test(String(p?.version)) && "version",
      !ARCH.test(String(p?.architecture)) && "architecture",
      p?.source !== undefined && !NAME.test(String(p.source)) && "source",
      (!POOL.test(String(p?.filename)) || String(p?.filename).includes("..")) && "filename",
      !(Number.isSafeInteger(p?.size) && p.size > 0) && "size",
      !/^[0-9a-f]{64}$/.test(String(p?.sha256)) && "sha256",
    ].filter(Boolean);
    if (bad.length) problems.push(`${JSON.stringify(p?.package)}: ${bad.join(", ")}`);
  }
  const names = packages.map((p) => p?.package).sort();
  const wanted = Object.keys(DEBIAN_PACKAGES).sort();
  if (names.join(",") !== wanted.join(","))
    problems.push(`packages ${names.join(", ")}; e2e/images/debian.ts names ${wanted.join(", ")}`);
  if (problems.length) throw new Error(`${path}: ${problems.join("; ")}: pin them again with npm run images:lock`);
  return raw as DebianLock;
}

/** What identifies the base's packages: a hash of the lock's content. */
export function lockKey(lock: DebianLock): string {
  return createHash("sha256").update(JSON.stringify(lock)).digest("hex").slice(0, 16);
}

function sh(cmd: string, args: string[], opts: { cwd?: string; input?: Buffer } = {}): Buffer {
  const r = spawnSync(cmd, args, { cwd: opts.cwd, input: opts.input, maxBuffer: 512 << 20 });
  if (r.error) throw new Error(`${cmd} could not start: ${r.error.message}`);
  if (r.status !== 0)
    throw new Error(`${cmd} ${args.join(" ")} failed (${r.status}): ${r.stderr.toString("utf8").slice(-2000)}`);
  return r.stdout;
}

const sha256File = (path: string) => createHash("sha256").update(readFileSync(path)).digest("hex");

function debCache(): string {
  const dir = join(dirname(cacheRoot()), "debian");
  mkdirSync(dir, { recursive: true });
  return dir;
}

const debFileName = (p: Pick<LockedPackage, "package" | "version" | "architecture">) =>
  `${p.package}_${p.version.replace(":", "%3a")}_${p.architecture}.deb`;

/**
 * `apt-get download NAME=VERSION` into a new directory of the cache; returns the .deb. When apt's
 * lists do not have that version (older lists than the lock), they are brought up to date first
 * (as root) and the download tried once more.
 */
function aptDownload(spec: string): string {
  const work = mkdtempSync(join(debCache(), ".download-"));
  const attempt = () => spawnSync("apt-get", ["download", "-q", spec], { cwd: work, encoding: "utf8" });
  let r = attempt();
  if (r.status !== 0 && process.getuid?.() === 0) {
    sh("apt-get", ["update", "-q"]);
    r = attempt();
  }
  if (r.error) throw new Error(`apt-get could not start: ${r.error.message}`);
  const debs = readdirSync(work).filter((f) => f.endsWith(".deb"));
  if (r.status !== 0 || debs.length !== 1) {
    rmSync(work, { recursive: true, force: true });
    throw new Error(
      `apt-get download ${spec} failed (${r.status}): ${r.stderr.trim().slice(-1000)}; when Debian no longer serves this version, pin the current ones with npm run images:lock`,
    );
  }
  return join(work, debs[0]!);
}

/** The .deb of a locked package from the cache, fetched first when missing; its SHA-256 is the lock's. */
export function fetchDeb(p: LockedPackage): string {
  const path = join(debCache(), debFileName(p));
  if (existsSync(path) && sha256File(path) === p.sha256) return path;
  const downloaded = aptDownload(`${p.package}=${p.version}`);
  try {
    const got = sha256File(downloaded);
    if (got !== p.sha256)
      throw new Error(
        `${p.package} ${p.version}: the .deb apt-get fetched has SHA-256 ${got}, the lock says ${p.sha256}`,
      );
    renameSync(downloaded, path);
  } finally {
    rmSync(dirname(downloaded), { recursive: true, force: true });
  }
  return path;
}

/** The paragraphs of a Debian control file (or of a dpkg status file), field names as written. */
export function parseControl(text: string): Record<string, string>[] {
  const paragraphs: Record<string, string>[] = [];
  let current: Record<string, string> = {};
  let last: string | undefined;
  for (const line of text.split("\n")) {
    if (!line.trim()) {
      if (Object.keys(current).length) paragraphs.push(current);
      current = {};
      last = undefined;
    } else if (/^[ \t]/.test(line)) {
      if (last !== undefined) current[last] += `\n${line}`;
    } else {
      const m = /^([^:\s]+):\s*(.*)$/.exec(line);
      if (!m) throw new Error(`not a control field: ${JSON.stringify(line.slice(0, 80))}`);
      last = m[1]!;
      current[last] = m[2]!;
    }
  }
  if (Object.keys(current).length) paragraphs.push(current);
  return paragraphs;
}

/** `<ID>-<VERSION_ID>` of an os-release file (`debian-12`), as purls name the distribution; "" without them. */
export function osReleaseDistro(osRelease: string): string {
  const field = (k: string) => new RegExp(`^${k}="?([^"\\n]*)"?$`, "m").exec(osRelease)?.[1];
  return field("ID") && field("VERSION_ID") ? `${field("ID")}-${field("VERSION_ID")}` : "";
}

/**
 * The package URL of an installed Debian package, as Syft writes it (the source package as
 * `upstream` when it differs), its qualifiers in the canonical order.
 */
export function debPurl(entry: Record<string, string>, distro: string): string {
  const q = [`arch=${entry.Architecture}`, `distro=${distro}`];
  const source = entry.Source?.split(" ")[0];
  if (source && source !== entry.Package) q.push(`upstream=${encodeURIComponent(source)}`);
  return `pkg:deb/debian/${encodeURIComponent(entry.Package!)}@${encodeURIComponent(entry.Version!)}?${q.join("&")}`;
}

/** What of a package's files an image leaves out: its documentation but the copyright, manuals, lintian's notes. */
const LEFT_OUT = /^usr\/share\/(?:doc\/[^/]+\/(?!copyright$).+|man\/.+|info\/.+|lintian\/.+)$/;

function walkFiles(root: string, rel: string, out: string[]): void {
  for (const e of readdirSync(join(root, rel), { withFileTypes: true })) {
    const p = rel ? `${rel}/${e.name}` : e.name;
    if (e.isDirectory()) walkFiles(root, p, out);
    else out.push(p);
  }
}

/**
 * The base's packages unpacked into `rootfs`, each with its status file and md5sums under
 * var/lib/dpkg/status.d/, and the CA bundle. Returns the status entries, by package.
 */
export function unpackDebianBase(rootfs: string, lock: DebianLock): Record<string, string>[] {
  mkdirSync(join(rootfs, STATUS_DIR), { recursive: true });
  const entries: Record<string, string>[] = [];
  for (const p of lock.packages) {
    const deb = fetchDeb(p);
    const control = sh("dpkg-deb", ["--info", deb, "control"]).toString("utf8");
    const [fields] = parseControl(control);
    if (fields?.Package !== p.package || fields.Version !== p.version || fields.Architecture !== p.architecture)
      throw new Error(`${deb}: its control file is ${fields?.Package} ${fields?.Version} ${fields?.Architecture}`);
    const unpacked = mkdtempSync(join(dirname(rootfs), `.deb-${p.package}-`));
    try {
      sh("dpkg-deb", ["--extract", deb, unpacked]);
      const files: string[] = [];
      walkFiles(unpacked, "", files);
      for (const f of files.filter((f) => LEFT_OUT.test(f))) rmSync(join(unpacked, f));
      sh("cp", ["-a", `${unpacked}/.`, rootfs]);
    } finally {
      rmSync(unpacked, { recursive: true, force: true });
    }
    // dpkg's record of an installed package: its control file with the state dpkg writes.
    const status = control.replace(/^(Package: .*\n)/, "$1Status: install ok installed\n");
    writeFileSync(join(rootfs, STATUS_DIR, p.package), status.endsWith("\n") ? status : `${status}\n`);
    const md5sums = spawnSync("dpkg-deb", ["--info", deb, "md5sums"], { encoding: "utf8" });
    if (md5sums.status === 0) {
      const kept = md5sums.stdout
        .split("\n")
        .filter((l) => /^[0-9a-f]{32} {2}/.test(l) && !LEFT_OUT.test(l.slice(34)))
        .map((l) => `${l}\n`)
        .join("");
      writeFileSync(join(rootfs, STATUS_DIR, `${p.package}.md5sums`), kept);
    }
    entries.push({ ...fields, Status: "install ok installed" });
  }
  writeCaBundle(rootfs);
  return entries;
}

/**
 * /etc/ssl/certs/ca-certificates.crt as update-ca-certificates writes it from the package's
 * default configuration (every certificate under /usr/share/ca-certificates): the certificates in
 * the byte order of their paths, each ending with a newline.
 */
function writeCaBundle(rootfs: string): void {
  const dir = join(rootfs, "usr/share/ca-certificates");
  const certs: string[] = [];
  walkFiles(dir, "", certs);
  const pems = certs
    .filter((c) => c.endsWith(".crt"))
    .sort((a, b) => (a < b ? -1 : a > b ? 1 : 0))
    .map((c) => {
      const text = readFileSync(join(dir, c), "utf8");
      return text.endsWith("\n") ? text : `${text}\n`;
    });
  if (pems.length < 50) throw new Error(`ca-certificates holds ${pems.length} certificates`);
  mkdirSync(join(rootfs, posix.dirname(CA_BUNDLE)), { recursive: true });
  writeFileSync(join(rootfs, CA_BUNDLE), pems.join(""));
}

/**
 * The lock pinned anew: apt's lists brought up to date (as root), each package's candidate
 * fetched, its control file and SHA-256 read from the .deb itself.
 */
export function refreshLock(path = LOCK_FILE, opts: { update?: boolean } = {}): DebianLock {
  if ((opts.update ?? true) && process.getuid?.() === 0) sh("apt-get", ["update", "-q"]);
  const packages: LockedPackage[] = [];
  let distro = "";
  const names = Object.keys(DEBIAN_PACKAGES).sort();
  // One line a package: 'URI' FILE SIZE SHA256:HEX
  const uris = sh("apt-get", ["download", "--print-uris", ...names.map((n) => `${n}:amd64`)])
    .toString("utf8")
    .split("\n");
  for (const name of names) {
    const uri = uris.find((l) => l.split(" ")[1]?.startsWith(`${name}_`)) ?? "";
    const m = /^'[^']*?\/(pool\/[^']+)' (\S+) (\d+) SHA256:([0-9a-f]{64})$/.exec(uri);
    if (!m || !/^[\w.+~%-]+\.deb$/.test(m[2]!)) throw new Error(`apt-get download --print-uris ${name}: ${uri}`);
    // The cache's copy when it has that file, else a download into a directory of its own.
    const cached = join(debCache(), m[2]!);
    const downloaded =
      existsSync(cached) && sha256File(cached) === m[4]
        ? join(mkdtempSync(join(debCache(), ".download-")), m[2]!)
        : aptDownload(`${name}:amd64`);
    if (!existsSync(downloaded)) renameSync(cached, downloaded);
    try {
      const sha256 = sha256File(downloaded);
      if (sha256 !== m[4])
        throw new Error(`${name}: apt-get fetched a .deb of SHA-256 ${sha256}, its lists say ${m[4]}`);
      const [fields] = parseControl(sh("dpkg-deb", ["--info", downloaded, "control"]).toString("utf8"));
      const source = fields!.Source?.split(" ")[0];
      const p: LockedPackage = {
        package: fields!.Package!,
        version: fields!.Version!,
        architecture: fields!.Architecture!,
        ...(source && source !== fields!.Package ? { source } : {}),
        filename: decodeURIComponent(m[1]!),
        size: statSync(downloaded).size,
        sha256,
      };
      packages.push(p);
      if (name === "base-files") {
        const osRelease = sh("tar", ["-xO", "./usr/lib/os-release"], {
          input: sh("dpkg-deb", ["--fsys-tarfile", downloaded]),
        }).toString("utf8");
        distro = osReleaseDistro(osRelease);
      }
      renameSync(downloaded, join(debCache(), debFileName(p)));
    } finally {
      rmSync(dirname(downloaded), { recursive: true, force: true });
    }
  }
  const lock: DebianLock = { distro, architecture: "amd64", packages };
  writeFileSync(path, `${JSON.stringify(lock, null, 2)}\n`);
  return readLock(path);
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  try {
    const args = process.argv.slice(2);
    if (args.join(" ") !== "--lock") throw new Error("usage: node e2e/images/debian.ts --lock (npm run images:lock)");
    const lock = refreshLock();
    for (const p of lock.packages) process.stdout.write(`${p.package} ${p.version} ${p.sha256}\n`);
  } catch (err) {
    process.stderr.write(`images: ${(err as Error).message}\n`);
    process.exitCode = 1;
  }
}
