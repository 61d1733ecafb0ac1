// The Debian base of the images (e2e/images/debian.ts): its lock file read as an attacker would
// write it, the control files scanners read, the purls the SBOMs carry, and the .debs checked
// against the lock when they are fetched.
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { releaseDir, tempDir } from "../support/process.ts";
import {
  DEBIAN_PACKAGES,
  type DebianLock,
  debPurl,
  fetchDeb,
  LOCK_FILE,
  parseControl,
  readLock,
  refreshLock,
} from "./debian.ts";

const lock = readLock();

/** The lock with one change, written to a file, read back: the error, or "" when it is accepted. */
function refusal(change: (l: DebianLock) => void): string {
  const dir = tempDir("ifp-debian-lock-");
  try {
    const copy = JSON.parse(readFileSync(LOCK_FILE, "utf8")) as DebianLock;
    change(copy);
    writeFileSync(join(dir, "lock.json"), JSON.stringify(copy));
    readLock(join(dir, "lock.json"));
    return "";
  } catch (err) {
    return (err as Error).message;
  } finally {
    releaseDir(dir);
  }
}

describe("the Debian base's lock file", () => {
  it("pins every package the base names, once, by version and SHA-256, for debian-12 on amd64", () => {
    expect(lock.distro).toBe("debian-12");
    expect(lock.architecture).toBe("amd64");
    expect(lock.packages.map((p) => p.package).sort()).toEqual(Object.keys(DEBIAN_PACKAGES).sort());
    for (const p of lock.packages) {
      expect(p.sha256, p.package).toMatch(/^[0-9a-f]{64}$/);
      expect(p.filename, p.package).toMatch(new RegExp(`^pool/.*/${p.package.replace(/\+/g, "\\+")}_`));
    }
    // What Node links is there: the C library, libgcc_s and libstdc++.
    for (const p of ["libc6", "libgcc-s1", "libstdc++6", "ca-certificates", "tzdata"])
      expect(lock.packages.map((l) => l.package)).toContain(p);
  });

  it.skipIf(spawnSync("apt-get", ["--version"]).status !== 0)(
    "npm run images:lock pins the candidates of this machine's apt sources, each .deb's digest its own",
    () => {
      const dir = tempDir("ifp-debian-relock-");
      try {
        // Without `apt-get update`, which the command runs first as root: the lists as they are.
        const fresh = refreshLock(join(dir, "lock.json"), { update: false });
        expect(fresh.distro).toBe("debian-12");
        expect(fresh.packages.map((p) => p.package)).toEqual(Object.keys(DEBIAN_PACKAGES).sort());
        for (const p of fresh.packages) {
          const deb = fetchDeb(p);
          expect(createHash("sha256").update(readFileSync(deb)).digest("hex"), p.package).toBe(p.sha256);
        }
        expect(readFileSync(join(dir, "lock.json"), "utf8")).toBe(`${JSON.stringify(fresh, null, 2)}\n`);
      } finally {
        releaseDir(dir);
      }
    },
    300_000,
  );

  it("refuses a lock that names other packages, paths out of the pool, or malformed versions and digests", () => {
    expect(refusal(() => {})).toBe("");
    const cases: [string, (l: DebianLock) => void, RegExp][] = [
      ["a package missing", (l) => l.packages.pop(), /packages .*; e2e\/images\/debian\.ts names/],
      [
        "a package the base does not name",
        (l) => l.packages.push({ ...l.packages[0]!, package: "bash" }),
        /packages .*bash/,
      ],
      ["a package twice", (l) => l.packages.push(l.packages[0]!), /packages /],
      ["a path out of the pool", (l) => (l.packages[0]!.filename = "pool/../../etc/passwd.deb"), /: filename/],
      ["an absolute path", (l) => (l.packages[0]!.filename = "/etc/x.deb"), /: filename/],
      ["a name that is a path", (l) => (l.packages[0]!.package = "../libc6"), /"\.\.\/libc6": package/],
      ["a version with a space", (l) => (l.packages[0]!.version = "1.0 x"), /: version/],
      ["a version that is a path", (l) => (l.packages[0]!.version = "1/../../x"), /: version/],
      ["a short digest", (l) => (l.packages[0]!.sha256 = "abc"), /: sha256/],
      ["another architecture", (l) => (l.packages[0]!.architecture = "arm64"), /: architecture/],
      ["a size that is not a number", (l) => ((l.packages[0] as { size: unknown }).size = "1"), /: size/],
      ["an image of another architecture", (l) => (l.architecture = "arm64"), /architecture \(amd64 only\)/],
      ["no distribution", (l) => (l.distro = ""), /distro/],
    ];
    for (const [what, change, message] of cases) {
      const m = refusal(change);
      expect(m, what).toMatch(message);
      expect(m, what).toMatch(/pin them again with npm run images:lock$/);
    }
  });
});

describe("what scanners read of the base", () => {
  it("control files: fields, continuation lines, several paragraphs", () => {
    const text = [
      "Package: libstdc++6",
      "Status: install ok installed",
      "Source: gcc-12 (12.2.0-14+deb12u1)",
      "Version: 12.2.0-14+deb12u1",
      "Architecture: amd64",
      "Description: GNU Standard C++ Library v3",
      " This package contains an additional runtime library.",
      " .",
      " More.",
      "",
      "Package: tzdata",
      "Version: 2026f-0+deb12u1",
      "Architecture: all",
      "",
    ].join("\n");
    const [a, b, ...rest] = parseControl(text);
    expect(rest).toEqual([]);
    expect(a).toMatchObject({ Package: "libstdc++6", Architecture: "amd64" });
    expect(a!.Description).toBe(
      "GNU Standard C++ Library v3\n This package contains an additional runtime library.\n .\n More.",
    );
    expect(b).toEqual({ Package: "tzdata", Version: "2026f-0+deb12u1", Architecture: "all" });
    expect(() => parseControl("Package libc6\n")).toThrow(/not a control field/);
    // Their purls, as Syft writes them: name and version percent-encoded, the source package as upstream.
    expect(debPurl(a!, "debian-12")).toBe(
      "pkg:deb/debian/libstdc%2B%2B6@12.2.0-14%2Bdeb12u1?arch=amd64&distro=debian-12&upstream=gcc-12",
    );
    expect(debPurl(b!, "debian-12")).toBe("pkg:deb/debian/tzdata@2026f-0%2Bdeb12u1?arch=all&distro=debian-12");
  });

  it.skipIf(spawnSync("apt-get", ["--version"]).status !== 0)(
    "a .deb is taken only with the lock's SHA-256: a changed cached file is fetched again, a lock with another digest refused",
    () => {
      const cache = tempDir("ifp-debian-cache-");
      const before = process.env.IFP_TOOLS_CACHE;
      process.env.IFP_TOOLS_CACHE = join(cache, "tools");
      try {
        const netbase = lock.packages.find((p) => p.package === "netbase")!;
        const path = fetchDeb(netbase);
        const sha = () => createHash("sha256").update(readFileSync(path)).digest("hex");
        expect(sha()).toBe(netbase.sha256);
        writeFileSync(path, "not the package");
        expect(fetchDeb(netbase)).toBe(path);
        expect(sha()).toBe(netbase.sha256);
        const other = { ...netbase, sha256: "0".repeat(64) };
        expect(() => fetchDeb(other)).toThrow(
          new RegExp(`netbase 6\\.4: the \\.deb apt-get fetched has SHA-256 ${netbase.sha256}, the lock says 0{64}`),
        );
        // The cached file with the right digest is still the one taken.
        expect(existsSync(path) && sha()).toBe(netbase.sha256);
      } finally {
        if (before === undefined) delete process.env.IFP_TOOLS_CACHE;
        else process.env.IFP_TOOLS_CACHE = before;
        releaseDir(cache);
      }
    },
    120_000,
  );
});
