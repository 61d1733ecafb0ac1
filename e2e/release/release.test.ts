// `npm run release`: a release of the commit checked out, made as a user makes it, and what it
// holds read back with the tools a platform team uses (sha256sum, tar, helm). The release signed
// with a key of the user's own is the one the real node installs, made once per commit
// (e2e/release/of-head.ts); a second run of the commit, keyless, is made here. Building the images
// needs root (buildah); elsewhere the build is skipped with one line and the rest still runs.
import { spawnSync } from "node:child_process";
import { createHash, X509Certificate } from "node:crypto";
import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse } from "yaml";
import { releaseDir, tempDir } from "../support/process.ts";
import { installBlock, OFFLINE_COSIGN_ENV, sh, verifiedDigests } from "../support/install-docs.ts";
import { type Registry, startRegistry } from "../support/registry.ts";
import { toolPath } from "../tools/tools.ts";
import { BUNDLE_LICENCES, imagesCache } from "../images/build.ts";
import { readLock } from "../images/debian.ts";
import { verifyPlugin } from "./krew.ts";
import { SLSA_PROVENANCE_V1, STATEMENT_TYPE } from "./provenance.ts";
import { releaseOfHead, type ReleaseOfHead } from "./of-head.ts";
import { publish } from "./sign.ts";
import {
  bundledPackages,
  changelogEntry,
  draftEntry,
  imageFile,
  imageFiles,
  imageMembers,
  RELEASED_IMAGES,
  type Release,
  readArchive,
  release,
  tarMembers,
  verifyRelease,
  withDraft,
} from "./release.ts";

const version = JSON.parse(readFileSync("package.json", "utf8")).version as string;
const noBuild = process.getuid?.() !== 0 ? "building the images needs root (buildah)" : undefined;
if (noBuild) process.stderr.write(`e2e/release/release.test.ts: the release itself skipped: ${noBuild}\n`);

/** The images that run a bundle: where it is under /app, its commands, and packages it must hold. */
const BUNDLED: Record<string, { dir: string; bins: string[]; holds: string[] }> = {
  "ifp-operator": { dir: "operator", bins: ["ifp-operator.js"], holds: ["@kubernetes/client-node"] },
  "ifp-runtime": {
    dir: "runtime",
    bins: ["ifp-runtime.js", "ifp.js"],
    holds: ["fastify", "@nats-io/transport-node", "@kubernetes/client-node"],
  },
};

const sha256 = (data: Buffer | string) => createHash("sha256").update(data).digest("hex");
/** One qualifier of a package URL, decoded. */
const purlQualifier = (purl: string, key: string) =>
  new URLSearchParams(purl.slice(purl.indexOf("?") + 1)).get(key) ?? undefined;

describe("npm run release", () => {
  it("refuses what is not a release before it builds anything", () => {
    const out = tempDir("ifp-release-refused-");
    try {
      for (const bad of ["1.2", "v1.2.3", "01.2.3", "1.2.3 ", "", "1.2.3-"])
        expect(() => release({ version: bad, out, log: () => {} }), JSON.stringify(bad)).toThrow(/is not a version/);
      // Another version than package.json's: the images would carry the wrong one.
      expect(() => release({ version: "99.0.0", out, log: () => {} })).toThrow(
        /package\.json of [0-9a-f]{12} says version .*: set it to 99\.0\.0/,
      );
      expect(() => release({ version, out, ref: "no-such-ref-anywhere", log: () => {} })).toThrow(/git rev-parse/);
      // A commit from before CHANGELOG.md had this version's entry.
      const before = spawnSync("git", ["log", "--format=%H", "-1", "--diff-filter=A", "--", "CHANGELOG.md"], {
        encoding: "utf8",
      }).stdout.trim();
      if (before) expect(() => release({ version, out, ref: `${before}~1`, log: () => {} })).toThrow(/no entry for/);
      expect(readdirSync(out)).toEqual([]);
    } finally {
      releaseDir(out);
    }
  });

  it("takes the version's entry of CHANGELOG.md, and drafts one from git log", () => {
    const changelog = [
      "# Changelog",
      "",
      "## [Unreleased]",
      "",
      "## [1.1.0] - 2026-12-01",
      "",
      "### Fixed",
      "",
      "- b",
      "",
      "## [1.0.0] - 2026-11-01",
      "",
      "- a",
      "",
      "[1.1.0]: https://example.invalid/1.1.0",
    ].join("\n");
    expect(changelogEntry(changelog, "1.1.0")).toBe("### Fixed\n\n- b");
    expect(changelogEntry(changelog, "1.0.0")).toBe("- a");
    expect(changelogEntry(changelog, "1.0")).toBeUndefined();
    expect(changelogEntry(changelog, "Unreleased")).toBeUndefined();
    // The version's dots are not wildcards.
    expect(changelogEntry(changelog, "1x1x0")).toBeUndefined();
    const newest = spawnSync("git", ["log", "-1", "--no-merges", "--format=%s"], { encoding: "utf8" }).stdout.trim();
    const draft = draftEntry("1.2.0", "2026-12-24");
    expect(draft).toMatch(/^## \[1\.2\.0\] - 2026-12-24\n\n### Changed\n\n- /);
    expect(draft).toContain(`- ${newest.slice(0, 15)}`);
    for (const line of draft.split("\n").filter((l) => l.startsWith("- ")))
      expect(line.length, line).toBeLessThanOrEqual(202);
    // `--draft-changelog` puts it above the newest entry, under Unreleased.
    const drafted = withDraft(changelog, draft);
    expect(changelogEntry(drafted, "1.2.0")).toContain("### Changed");
    expect(drafted.indexOf("## [1.2.0]")).toBeLessThan(drafted.indexOf("## [1.1.0]"));
    expect(changelogEntry(readFileSync("CHANGELOG.md", "utf8"), version)).toBeTruthy();
    // The command line: no version is a usage error, as is an unknown word.
    for (const args of [[], [version, "extra"], [version, "--out"]]) {
      const r = spawnSync(process.execPath, ["e2e/release/release.ts", ...args], { encoding: "utf8" });
      expect(r.status, args.join(" ")).toBe(1);
      expect(r.stderr).toMatch(/^release: (usage|--out needs a value)/);
    }
    const r = spawnSync(process.execPath, ["e2e/release/release.ts", "x.y", "--draft-changelog"], { encoding: "utf8" });
    expect(r.stderr).toMatch(/is not a version/);
  });

  it("--verify refuses a directory that is not a whole release, naming each problem", () => {
    const dir = tempDir("ifp-release-verify-bad-");
    const failure = () => {
      try {
        verifyRelease(dir);
        return "";
      } catch (err) {
        return (err as Error).message;
      }
    };
    try {
      expect(failure()).toMatch(/fails verification:\n {2}no SHA256SUMS\n {2}release\.json: ENOENT/);
      writeFileSync(
        join(dir, "release.json"),
        JSON.stringify({
          version,
          chart: "../ifp-operator.tgz",
          images: [
            { name: "ifp-operator", archive: "../../etc/passwd", digest: `sha256:${"0".repeat(64)}` },
            {
              name: "ifp-runtime",
              archive: "ifp-runtime.oci.tar",
              digest: `sha256:${"0".repeat(64)}`,
              sbom: "ifp-runtime.cdx.json",
            },
          ],
        }),
      );
      writeFileSync(join(dir, "ifp-runtime.oci.tar"), "not a tar archive ".repeat(64));
      writeFileSync(
        join(dir, "ifp-runtime.cdx.json"),
        JSON.stringify({ metadata: { component: { hashes: [{ alg: "SHA-256", content: "1".repeat(64) }] } } }),
      );
      writeFileSync(
        join(dir, "SHA256SUMS"),
        `${"0".repeat(64)}  release.json\nnot a line\n${sha256("")}  missing.txt\n${sha256("")}  ../outside\n`,
      );
      const message = failure();
      for (const problem of [
        "release.json: its SHA-256 is not the one in SHA256SUMS",
        'SHA256SUMS: not a checksum line: "not a line"',
        `SHA256SUMS: not a checksum line: "${sha256("")}  ../outside"`,
        "missing.txt: listed in SHA256SUMS, missing",
        "ifp-runtime.oci.tar: not in SHA256SUMS",
        'ifp-operator: no archive "../../etc/passwd"',
        "ifp-runtime.oci.tar: not a tar archive (bad header checksum at byte 0)",
        'no chart "../ifp-operator.tgz"',
        `ifp-runtime.cdx.json: describes the image sha256:${"1".repeat(64)}, release.json says sha256:${"0".repeat(64)}`,
        "ifp-operator: release.json names no SBOM",
        "release.json names no plugin archive and manifest",
      ])
        expect(message, problem).toContain(problem);
      // The command line: --verify takes a directory and nothing else.
      for (const args of [["--verify"], ["--verify", dir, version], [version, "--verify", dir]]) {
        const r = spawnSync(process.execPath, ["e2e/release/release.ts", ...args], { encoding: "utf8" });
        expect(r.status, args.join(" ")).toBe(1);
        expect(r.stderr).toMatch(/^release: (usage: npm run release -- --verify DIR|--verify needs a value)/);
      }
      const r = spawnSync(process.execPath, ["e2e/release/release.ts", "--verify", dir], { encoding: "utf8" });
      expect(r.status).toBe(1);
      expect(r.stderr).toContain("missing.txt: listed in SHA256SUMS, missing");
    } finally {
      releaseDir(dir);
    }
  });

  describe.skipIf(noBuild !== undefined)("the release of the commit checked out", () => {
    let out: string;
    /** The release of HEAD, made with a key pair of a user's own (`--key`), in a directory of this file's. */
    let made: ReleaseOfHead;
    let files: string[];
    let head: string;
    beforeAll(async () => {
      head = spawnSync("git", ["rev-parse", "HEAD"], { encoding: "utf8" }).stdout.trim();
      out = tempDir("ifp-release-");
      made = await releaseOfHead(out);
      files = readdirSync(out).sort();
    }, 20 * 60_000);
    afterAll(() => {
      releaseDir(out);
    });

    it("holds the archives, SBOMs, signatures, provenance, chart, notes and manifest, each in SHA256SUMS", () => {
      expect(made.commit).toBe(head);
      expect(files).toEqual(
        [
          ...RELEASED_IMAGES.flatMap((i) =>
            ["oci.tar", "cdx.json", "payload.json", "sig", "intoto.json", "att.json"].map(
              (ext) => `${i.name}-${version}.${ext}`,
            ),
          ),
          `ifp-operator-${version}.tgz`,
          `kubectl-ifp-${version}.tar.gz`,
          "ifp.yaml",
          "cosign.pub",
          "release-notes.md",
          "release.json",
          "SHA256SUMS",
          "SHA256SUMS.sig",
        ].sort(),
      );
      const sums = readFileSync(join(out, "SHA256SUMS"), "utf8").trim().split("\n");
      // Every file but SHA256SUMS and its signature.
      expect(sums.map((l) => l.split("  ")[1]).sort()).toEqual(files.filter((f) => !f.startsWith("SHA256SUMS")));
      for (const line of sums) {
        const [hex, file] = line.split("  ") as [string, string];
        expect(sha256(readFileSync(join(out, file))), file).toBe(hex);
      }
      // As a user checks them.
      const check = spawnSync("sha256sum", ["-c", "SHA256SUMS"], { cwd: out, encoding: "utf8" });
      expect(check.status, check.stdout + check.stderr).toBe(0);
      expect(readFileSync(join(out, "release-notes.md"), "utf8")).toContain(
        changelogEntry(readFileSync("CHANGELOG.md", "utf8"), version)!,
      );
      const manifest = JSON.parse(readFileSync(join(out, "release.json"), "utf8"));
      expect(manifest).toMatchObject({
        version,
        commit: head,
        chart: made.chart,
        plugin: made.plugin,
        signing: "key",
        publicKey: "cosign.pub",
      });
    });

    it("holds the kubectl plugin's archive, which ifp.yaml offers by its SHA-256, and which runs on the machine's Node", () => {
      expect(made.plugin).toEqual({
        archive: `kubectl-ifp-${version}.tar.gz`,
        manifest: "ifp.yaml",
        sha256: sha256(readFileSync(join(out, `kubectl-ifp-${version}.tar.gz`))),
      });
      expect(verifyPlugin(out, made.plugin)).toEqual([]);
      const dir = tempDir("ifp-release-plugin-");
      try {
        expect(spawnSync("tar", ["-xzf", join(out, made.plugin.archive), "-C", dir]).status).toBe(0);
        // The plugin tests run it on more Nodes (e2e/release/plugin.test.ts); here the release's own file.
        const node = existsSync("/usr/bin/node") ? "/usr/bin/node" : process.execPath;
        const r = spawnSync(node, [join(dir, "kubectl-ifp"), "--version"], { encoding: "utf8" });
        expect(r.stderr).toBe("");
        expect(r.stdout).toBe(`kubectl-ifp ${version} (commit ${head.slice(0, 12)})\n`);
      } finally {
        releaseDir(dir);
      }
    });

    it("each image: one manifest whose digest is its content's, Node without a shell or npm, user 65532, pruned modules or a bundle", () => {
      for (const img of made.images) {
        const archive = join(out, img.archive);
        const a = readArchive(archive);
        expect(a.digest).toBe(img.digest);
        // The digest is the manifest's own hash: a registry serves it under the same one.
        const manifest = spawnSync("tar", ["-xOf", archive, `blobs/${img.digest.replace(":", "/")}`]).stdout;
        expect(`sha256:${sha256(manifest)}`).toBe(img.digest);
        expect(a.config.config.User, img.name).toBe("65532:65532");
        expect(a.config.config.Entrypoint?.[0], img.name).toBe("/nodejs/bin/node");
        const { files: inImage, unpacked } = imageFiles(archive);
        expect(unpacked).toBe(img.size.unpacked);
        expect(inImage, img.name).toContain("nodejs/bin/node");
        const forbidden = inImage.filter(
          (f) =>
            /^(usr\/)?s?bin\/(sh|bash|dash|busybox|apt|apt-get|dpkg)$/.test(f) ||
            /(^|\/)node_modules\/(npm|corepack)(\/|$)/.test(f) ||
            /(^|\/)bin\/(npm|npx|corepack)$/.test(f),
        );
        expect(forbidden, img.name).toEqual([]);
        const modules = inImage.filter((f) => f.includes("/node_modules/"));
        const bundle = BUNDLED[img.name];
        if (bundle) {
          // The bundle (runtime/bundle.ts, operator/bundle.ts): no node_modules, the bundled packages' licences in one file.
          expect(modules, img.name).toEqual([]);
          for (const bin of bundle.bins) expect(inImage).toContain(`app/${bundle.dir}/bin/${bin}`);
          expect(inImage).toContain(`app/${bundle.dir}/${BUNDLE_LICENCES}`);
          expect(inImage.filter((f) => f.endsWith(".map"))).toEqual([]);
          continue;
        }
        expect(modules.length, img.name).toBeGreaterThan(0);
        expect(
          modules.filter((f) => /\.(ts|mts|cts|map)$/.test(f) || (/\.md$/i.test(f) && !/\/licen[cs]e[^/]*$/i.test(f))),
          img.name,
        ).toEqual([]);
        // Licences stay.
        if (img.name !== "ifp-example-app") expect(modules.some((f) => /\/licen[cs]e[^/]*$/i.test(f))).toBe(true);
      }
      const app = imageFiles(join(out, made.images.find((i) => i.name === "ifp-example-app")!.archive)).files;
      expect(app.filter((f) => /node_modules\/[^/]+\/package\.json$/.test(f))).toEqual([
        "app/node_modules/eventsource-parser/package.json",
      ]);
    });

    it("each SBOM is CycloneDX of the image: its digest, Node, and exactly the packages it holds", () => {
      for (const img of made.images) {
        const bom = JSON.parse(readFileSync(join(out, img.sbom), "utf8"));
        expect(bom).toMatchObject({ bomFormat: "CycloneDX", specVersion: "1.5" });
        expect(bom.metadata.component).toMatchObject({
          type: "container",
          name: img.name,
          version,
          hashes: [{ alg: "SHA-256", content: img.digest.replace("sha256:", "") }],
        });
        const names = (bom.components as { name: string; version: string }[]).map((c) => c.name);
        expect(names).toContain("node");
        expect(names).toContain("ifp-operator");
        const refs = new Set([
          bom.metadata.component["bom-ref"],
          ...(bom.components as { "bom-ref": string }[]).map((c) => c["bom-ref"]),
        ]);
        for (const d of bom.dependencies as { ref: string; dependsOn: string[] }[]) {
          expect(refs.has(d.ref), d.ref).toBe(true);
          for (const r of d.dependsOn) expect(refs.has(r), `${d.ref} -> ${r}`).toBe(true);
        }
        // The packages the image holds, by their package.json (or, bundled, by the bundle's
        // licence file), are the SBOM's libraries.
        const bundle = BUNDLED[img.name];
        const bundled = bundle && imageFile(join(out, img.archive), `app/${bundle.dir}/${BUNDLE_LICENCES}`);
        if (bundle) expect(bundled, img.name).toBeTruthy();
        const held = new Set(
          bundled
            ? bundledPackages(bundled.toString("utf8")).map((p) => p.slice(0, p.lastIndexOf("@")))
            : imageFiles(join(out, img.archive))
                .files.map((f) => /node_modules\/((?:@[^/]+\/)?[^/]+)\/package\.json$/.exec(f)?.[1])
                .filter((n): n is string => n !== undefined),
        );
        expect(held.size, img.name).toBeGreaterThan(0);
        if (bundle) for (const pkg of bundle.holds) expect(held, img.name).toContain(pkg);
        const libraries = new Set(
          (bom.components as { type: string; name: string; purl?: string }[])
            .filter((c) => c.type === "library" && c.purl?.startsWith("pkg:npm/"))
            .map((c) => c.name),
        );
        expect(
          [...held].filter((n) => !libraries.has(n)),
          `${img.name}: held, not in its SBOM`,
        ).toEqual([]);
        expect(
          [...libraries].filter((n) => !held.has(n)),
          `${img.name}: in its SBOM, not held`,
        ).toEqual([]);
      }
    });

    it("each image's SLSA provenance names its digest, the commit, its Dockerfile and the lock file by digest, and the builder; signed by the release's key", () => {
      const atHead = (path: string) => spawnSync("git", ["show", `${head}:${path}`], { maxBuffer: 64 << 20 }).stdout;
      expect(readFileSync(join(out, "cosign.pub"), "utf8")).toBe(made.signedWith);
      for (const img of made.images) {
        const statement = JSON.parse(readFileSync(join(out, img.provenance), "utf8"));
        expect(statement).toMatchObject({
          _type: STATEMENT_TYPE,
          subject: [{ name: `ghcr.io/ifp-dev/${img.name}`, digest: { sha256: img.digest.replace("sha256:", "") } }],
          predicateType: SLSA_PROVENANCE_V1,
        });
        const { buildDefinition, runDetails } = statement.predicate;
        const dockerfile = RELEASED_IMAGES.find((r) => r.name === img.name)!.dockerfile;
        expect(buildDefinition.externalParameters).toMatchObject({ version, image: img.name, dockerfile });
        expect(buildDefinition.resolvedDependencies).toEqual(
          expect.arrayContaining([
            { uri: `git+https://github.com/ifp-dev/ifp-operator@${head}`, digest: { gitCommit: head } },
            { name: dockerfile, digest: { sha256: sha256(atHead(dockerfile)) } },
            { name: "package-lock.json", digest: { sha256: sha256(atHead("package-lock.json")) } },
          ]),
        );
        expect(runDetails.builder.id).toMatch(/^https:\/\//);
        expect(Date.parse(runDetails.metadata.finishedOn)).toBeGreaterThanOrEqual(
          Date.parse(runDetails.metadata.startedOn),
        );
        expect(runDetails.byproducts).toEqual([
          { name: img.sbom, digest: { sha256: sha256(readFileSync(join(out, img.sbom))) } },
        ]);
        // The attestation is that statement signed: a DSSE envelope whose payload is the file's bytes.
        const envelope = JSON.parse(readFileSync(join(out, img.attestation!), "utf8"));
        expect(envelope.payloadType).toBe("application/vnd.in-toto+json");
        expect(Buffer.from(envelope.payload, "base64").equals(readFileSync(join(out, img.provenance)))).toBe(true);
        expect(envelope.signatures).toHaveLength(1);
        // The signature's payload is cosign's, of the image's digest.
        expect(JSON.parse(readFileSync(join(out, img.payload), "utf8")).critical).toEqual({
          identity: { "docker-reference": `ghcr.io/ifp-dev/${img.name}` },
          image: { "docker-manifest-digest": img.digest },
          type: "cosign container image signature",
        });
      }
    });

    it("each image, as a scanner sees it (Syft, with the commands of docs/install.md): the lock's Debian packages, which are its SBOM's pkg:deb components, and Node", async () => {
      const locked = readLock()
        .packages.map((p) => `${p.package} ${p.version} ${p.architecture}`)
        .sort();
      const lines = installBlock("syft scan", "registry.example");
      expect(lines).toHaveLength(made.images.length);
      const env = { PATH: `${dirname(toolPath("syft"))}:${process.env.PATH}`, SYFT_CHECK_FOR_APP_UPDATE: "false" };
      // The three at once: each is mostly reading and unpacking its layers.
      const scans = await Promise.all(lines.map((line) => sh(`${line} -o json -q`, out, env)));
      for (const img of made.images) {
        const at = lines.findIndex((l) => l.includes(` oci-archive:${img.archive}`));
        expect(at, `docs/install.md scans ${img.archive}`).toBeGreaterThanOrEqual(0);
        const scan = scans[at]!;
        expect(scan.code, scan.stderr).toBe(0);
        const found = JSON.parse(scan.stdout) as {
          artifacts: { type: string; name: string; version: string; purl: string }[];
          distro: { id?: string; versionID?: string };
        };
        expect(found.distro.id, img.name).toBe("debian");
        expect(found.distro.versionID, img.name).toMatch(/^12(\.|$)/);
        const debs = found.artifacts.filter((a) => a.type === "deb");
        const scanned = debs.map((a) => `${a.name} ${a.version} ${purlQualifier(a.purl, "arch")}`).sort();
        expect(scanned, img.name).toEqual(locked);
        // Syft reads each package's copyright: a licence for most of them.
        const bom = JSON.parse(readFileSync(join(out, img.sbom), "utf8"));
        const listed = (bom.components as { purl?: string; name: string; version: string }[])
          .filter((c) => c.purl?.startsWith("pkg:deb/"))
          .map((c) => {
            expect(c.purl, c.name).toMatch(
              /^pkg:deb\/debian\/[^@]+@[^?]+\?arch=(amd64|all)&distro=debian-12(&upstream=[\w.+%-]+)?$/,
            );
            const [name, version] = decodeURIComponent(
              c.purl!.slice("pkg:deb/debian/".length, c.purl!.indexOf("?")),
            ).split("@");
            expect([name, version], c.purl).toEqual([c.name, c.version]);
            return `${c.name} ${c.version} ${purlQualifier(c.purl!, "arch")}`;
          })
          .sort();
        expect(listed, `${img.sbom}: its pkg:deb components, as Syft found them`).toEqual(scanned);
        // The same purls, but for the distribution's point release Syft adds (debian-12.N).
        for (const d of debs)
          expect(
            bom.components.map((c: { purl?: string }) => c.purl),
            d.purl,
          ).toContain(d.purl.replace(/&distro=debian-12\.\d+/, "&distro=debian-12"));
        // Node, as Syft tells it by its binary, is the SBOM's.
        const node = found.artifacts.find((a) => a.name === "node" && a.type === "binary");
        expect(node?.version, img.name).toBe(bom.components.find((c: { name: string }) => c.name === "node").version);
      }
    }, 300_000);

    it("each image: its CA bundle at SSL_CERT_FILE, its base's packages recorded as distroless records them, its annotations filled", () => {
      const commitDate = new Date(
        spawnSync("git", ["show", "-s", "--format=%cI", head], { encoding: "utf8" }).stdout.trim(),
      );
      for (const img of made.images) {
        const archive = join(out, img.archive);
        const a = readArchive(archive);
        const env = Object.fromEntries((a.config.config.Env ?? []).map((e) => e.split(/=(.*)/s).slice(0, 2)));
        expect(env.SSL_CERT_FILE, img.name).toBe("/etc/ssl/certs/ca-certificates.crt");
        // The files in question, from one pass over the layers.
        const members = imageMembers(
          archive,
          (p) => p === env.SSL_CERT_FILE!.slice(1) || p.startsWith("var/lib/dpkg/status.d/"),
        );
        const bundle = members.get(env.SSL_CERT_FILE!.slice(1))?.toString("utf8") ?? "";
        const pems = bundle.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? [];
        expect(pems.length, img.name).toBeGreaterThan(100);
        const subjects = pems.map((p) => new X509Certificate(p).subject);
        expect(subjects.some((s) => s.includes("CN=ISRG Root X1"))).toBe(true);
        // One status file per package, with its md5sums, as distroless writes them.
        const status = [...members.keys()].filter((f) => f.startsWith("var/lib/dpkg/status.d/")).sort();
        expect(status, img.name).toEqual(
          readLock()
            .packages.flatMap((p) => [
              `var/lib/dpkg/status.d/${p.package}`,
              `var/lib/dpkg/status.d/${p.package}.md5sums`,
            ])
            .sort(),
        );
        for (const p of readLock().packages)
          expect(members.get(`var/lib/dpkg/status.d/${p.package}`)?.toString("utf8"), p.package).toMatch(
            new RegExp(`^Package: ${p.package.replace(/\+/g, "\\+")}\nStatus: install ok installed\n`),
          );
        const annotations = a.manifest.annotations ?? {};
        for (const key of ["base.name", "base.digest", "source", "revision", "version", "licenses", "created", "title"])
          expect(annotations[`org.opencontainers.image.${key}`], `${img.name}: ${key}`).toBeTruthy();
        expect(annotations).toMatchObject({
          "org.opencontainers.image.revision": head,
          "org.opencontainers.image.version": version,
          "org.opencontainers.image.licenses": "Apache-2.0",
          "org.opencontainers.image.title": img.name,
          "org.opencontainers.image.created": commitDate.toISOString().replace(/\.\d{3}Z$/, "Z"),
        });
        expect(annotations["org.opencontainers.image.source"]).toMatch(/^https:\/\/github\.com\/[\w-]+\/[\w-]+$/);
        // The base, by the name and digest the image gives: the image's first layers are its layers.
        const baseName = annotations["org.opencontainers.image.base.name"]!;
        const m = /^ifp\.local\/(ifp-base-nodejs24-debian12):([0-9a-f]{16})$/.exec(baseName);
        expect(m, baseName).toBeTruthy();
        const base = readArchive(join(imagesCache(), `${m![1]}-${m![2]}.oci.tar`));
        expect(base.digest).toBe(annotations["org.opencontainers.image.base.digest"]);
        expect(a.config.rootfs.diff_ids.slice(0, base.config.rootfs.diff_ids.length)).toEqual(
          base.config.rootfs.diff_ids,
        );
        expect(a.manifest.layers.length).toBe(base.manifest.layers.length + 1);
      }
    });

    it("the packaged chart is the version, and runs the operator and the runtime by the archives' digests", () => {
      const tgz = join(out, made.chart);
      const dir = tempDir("ifp-release-chart-");
      try {
        expect(spawnSync("tar", ["-xzf", tgz, "-C", dir]).status).toBe(0);
        const chart = parse(readFileSync(join(dir, "ifp-operator", "Chart.yaml"), "utf8"));
        expect(chart).toMatchObject({ name: "ifp-operator", version, appVersion: version });
        const values = parse(readFileSync(join(dir, "ifp-operator", "values.yaml"), "utf8"));
        const digest = (name: string) => made.images.find((i) => i.name === name)!.digest;
        expect(values.image).toMatchObject({ tag: version, digest: digest("ifp-operator") });
        expect(values.runtimeImage).toMatchObject({ tag: version, digest: digest("ifp-runtime") });
        // The chart's comments are kept.
        expect(readFileSync(join(dir, "ifp-operator", "values.yaml"), "utf8")).toMatch(/# image is the operator's/);
        const rendered = spawnSync(toolPath("helm"), ["template", "ifp", tgz, "-n", "ifp-system"], {
          encoding: "utf8",
          maxBuffer: 64 << 20,
        });
        expect(rendered.status, rendered.stderr).toBe(0);
        expect(rendered.stdout).toContain(`image: "ghcr.io/ifp-dev/ifp-operator@${digest("ifp-operator")}"`);
        expect(rendered.stdout).toContain(`--runtime-image=ghcr.io/ifp-dev/ifp-runtime@${digest("ifp-runtime")}`);
        expect(rendered.stdout).not.toMatch(/ghcr\.io\/ifp-dev\/ifp-(operator|runtime):/);
        // A user's registry in place of ghcr.io, the digests kept.
        const moved = spawnSync(
          toolPath("helm"),
          ["template", "ifp", tgz, "-n", "ifp-system", "--set", "global.imageRegistry=registry.example"],
          { encoding: "utf8", maxBuffer: 64 << 20 },
        );
        expect(moved.stdout).toContain(`registry.example/ifp-dev/ifp-operator@${digest("ifp-operator")}`);
      } finally {
        releaseDir(dir);
      }
    });

    describe("pushed to a registry as docs/install.md says (crane registry serve on loopback)", () => {
      let registry: Registry;
      let helmEnv: NodeJS.ProcessEnv;
      beforeAll(async () => {
        registry = await startRegistry("release");
        const home = tempDir("ifp-release-helm-");
        helmEnv = {
          HELM_CACHE_HOME: join(home, "cache"),
          HELM_CONFIG_HOME: join(home, "config"),
          HELM_DATA_HOME: join(home, "data"),
        };
      }, 300_000);
      afterAll(() => registry?.stop());
      const recorded = (name: string) => {
        const digest = made.images.find((i) => i.name === name)?.digest;
        if (!digest) throw new Error(`no released image ${name}`);
        return digest;
      };
      /** A directory with the release's files, where a reader runs the documented commands. */
      const workDir = () => {
        const dir = tempDir("ifp-release-push-");
        for (const f of files) symlinkSync(join(out, f), join(dir, f));
        return dir;
      };

      it("crane push of each archive: the registry serves it by the digest release.json and the chart record", async () => {
        const work = workDir();
        try {
          const onDisk = JSON.parse(readFileSync(join(out, "release.json"), "utf8")) as Release;
          const pushed = new Set<string>();
          for (const line of installBlock("crane push", registry.host)) {
            const r = await sh(line, work);
            expect(r.code, `${line}\n${r.stderr}`).toBe(0);
            const push = /^crane push \S+ \S+\/ifp-dev\/([\w-]+):(\S+)$/.exec(line);
            if (push) {
              pushed.add(push[1]!);
              expect(push[2]).toBe(version);
              // crane prints the reference it pushed, by digest.
              expect(r.stdout.trim(), line).toBe(`${registry.host}/ifp-dev/${push[1]}@${recorded(push[1]!)}`);
            }
            const digest = /^crane digest \S+\/ifp-dev\/([\w-]+):\S+$/.exec(line);
            if (digest) expect(r.stdout.trim(), line).toBe(recorded(digest[1]!));
          }
          expect([...pushed].sort()).toEqual(RELEASED_IMAGES.map((i) => i.name).sort());
          const values = parse(
            spawnSync("tar", ["-xzOf", join(out, made.chart), "ifp-operator/values.yaml"], { encoding: "utf8" }).stdout,
          );
          for (const img of made.images) {
            const ref = `${registry.host}/ifp-dev/${img.name}:${version}`;
            // What the registry serves for the tag: the archive's manifest, byte for byte, whose
            // hash is the digest release.json on disk records and the chart references.
            const served = await sh(`crane manifest ${ref}`, work);
            expect(served.code, served.stderr).toBe(0);
            const inArchive = spawnSync("tar", [
              "-xOf",
              join(out, img.archive),
              `blobs/${img.digest.replace(":", "/")}`,
            ]).stdout as Buffer;
            expect(served.stdout).toBe(inArchive.toString("utf8"));
            expect(`sha256:${sha256(served.stdout)}`).toBe(img.digest);
            expect(onDisk.images.find((i) => i.name === img.name)?.digest).toBe(img.digest);
            const value = RELEASED_IMAGES.find((r) => r.name === img.name)?.value;
            if (value) expect(values[value].digest, value).toBe(img.digest);
            // Pulled by digest, as the chart's pods pull it.
            const byDigest = await sh(`crane digest ${registry.host}/ifp-dev/${img.name}@${img.digest}`, work);
            expect(byDigest.stdout.trim(), byDigest.stderr).toBe(img.digest);
          }
          // A tag or a digest the registry does not have is an error, not an empty answer.
          const unknownTag = await sh(`crane digest ${registry.host}/ifp-dev/ifp-operator:9.9.9`, work);
          expect(unknownTag.code).not.toBe(0);
          expect(unknownTag.stderr).toMatch(/MANIFEST_UNKNOWN|NAME_UNKNOWN|404/);
          const unknownDigest = await sh(
            `crane manifest ${registry.host}/ifp-dev/ifp-operator@sha256:${"0".repeat(64)}`,
            work,
          );
          expect(unknownDigest.code).not.toBe(0);
        } finally {
          releaseDir(work);
        }
      }, 300_000);

      const cosignEnv = OFFLINE_COSIGN_ENV;

      it("cosign attach, verify and verify-attestation as docs/install.md says: every image's signature and provenance verify by the release's key", async () => {
        const work = workDir();
        try {
          for (const line of installBlock("cosign attach", registry.host)) {
            const r = await sh(line, work);
            expect(r.code, `${line}\n${r.stderr}`).toBe(0);
          }
          const verified = { verify: new Set<string>(), "verify-attestation": new Set<string>() };
          for (const line of installBlock("cosign verify --key", registry.host)) {
            const r = await sh(line, work, cosignEnv);
            expect(r.code, `${line}\n${r.stderr}`).toBe(0);
            const m = /^cosign (verify|verify-attestation) .*\/ifp-dev\/([\w-]+):\S+$/.exec(line);
            if (!m) continue;
            const kind = m[1] as keyof typeof verified;
            expect(verifiedDigests(kind, r.stdout), line).toEqual([recorded(m[2]!)]);
            verified[kind].add(m[2]!);
          }
          const names = RELEASED_IMAGES.map((i) => i.name).sort();
          expect([...verified.verify].sort()).toEqual(names);
          expect([...verified["verify-attestation"]].sort()).toEqual(names);
          // Beside each image, as cosign names them: sha256-<hex>.sig and .att.
          const tags = await sh(`crane ls ${registry.host}/ifp-dev/ifp-operator`, work);
          const hex = recorded("ifp-operator").replace("sha256:", "");
          expect(tags.stdout.split("\n")).toEqual(expect.arrayContaining([`sha256-${hex}.sig`, `sha256-${hex}.att`]));
        } finally {
          releaseDir(work);
        }
      }, 120_000);

      it("a flipped byte fails cosign verify: of the signature, of the attestation's signature, of SHA256SUMS, of the image", async () => {
        const work = workDir();
        const fresh = await startRegistry("flipped");
        try {
          const lines = installBlock("cosign verify --key", fresh.host);
          const attach = installBlock("cosign attach", fresh.host);
          const of = (list: string[], name: string) => list.filter((l) => l.includes(`/ifp-dev/${name}:`));
          const [unpackOp, pushOp] = installBlock("crane push", fresh.host).filter((l) => l.includes("ifp-operator"));
          expect((await sh(unpackOp!, work)).code).toBe(0);
          expect((await sh(pushOp!, work)).code).toBe(0);
          // One bit of the operator's signature and of its attestation's signature flipped, in the files attached.
          const operator = made.images.find((i) => i.name === "ifp-operator")!;
          const flip = (b: Buffer) => {
            b[b.length >> 1] = b[b.length >> 1]! ^ 0x01;
            return b;
          };
          const replace = (file: string, data: string | Buffer) => {
            const path = join(work, file);
            rmSync(path);
            writeFileSync(path, data);
          };
          replace(
            operator.signature!,
            flip(Buffer.from(readFileSync(join(out, operator.signature!), "utf8"), "base64")).toString("base64"),
          );
          const envelope = JSON.parse(readFileSync(join(out, operator.attestation!), "utf8"));
          envelope.signatures[0].sig = flip(Buffer.from(envelope.signatures[0].sig, "base64")).toString("base64");
          replace(operator.attestation!, JSON.stringify(envelope));
          for (const line of of(attach, "ifp-operator")) expect((await sh(line, work)).code, line).toBe(0);
          for (const line of of(lines, "ifp-operator")) {
            const r = await sh(line, work, cosignEnv);
            expect(r.code, line).not.toBe(0);
            expect(r.stderr, line).toMatch(/no matching (signatures|attestations)|invalid signature/);
          }

          // The image changed: the runtime's manifest with other bytes (the same content
          // respaced), pushed under the tag, and the release's own signature and attestation of
          // the runtime attached to it: they name another digest, and neither verifies.
          const runtime = made.images.find((i) => i.name === "ifp-runtime")!;
          const [unpackRt] = installBlock("crane push", fresh.host).filter((l) => l.includes("ifp-runtime"));
          expect((await sh(unpackRt!, work)).code).toBe(0);
          const manifestFile = join(work, `ifp-runtime-${version}`, "blobs", runtime.digest.replace(":", "/"));
          const respaced = JSON.stringify(JSON.parse(readFileSync(manifestFile, "utf8")), null, 1);
          writeFileSync(manifestFile, respaced);
          const pushed = await sh(
            `crane push ifp-runtime-${version} ${fresh.host}/ifp-dev/ifp-runtime:${version}`,
            work,
          );
          expect(pushed.code, pushed.stderr).toBe(0);
          expect(pushed.stdout.trim()).toBe(`${fresh.host}/ifp-dev/ifp-runtime@sha256:${sha256(respaced)}`);
          for (const line of of(attach, "ifp-runtime")) expect((await sh(line, work)).code, line).toBe(0);
          for (const line of of(lines, "ifp-runtime")) {
            const r = await sh(line, work, cosignEnv);
            expect(r.code, line).not.toBe(0);
            expect(r.stderr, line).toMatch(/no matching (signatures|attestations)|digest|subject/i);
          }

          // SHA256SUMS with one bit flipped no longer verifies by its signature.
          const blob = lines.find((l) => l.startsWith("cosign verify-blob"))!;
          expect((await sh(blob, work, cosignEnv)).code, blob).toBe(0);
          replace("SHA256SUMS", flip(readFileSync(join(out, "SHA256SUMS"))));
          const changed = await sh(blob, work, cosignEnv);
          expect(changed.code).not.toBe(0);
          expect(changed.stderr).toMatch(/invalid signature/);
        } finally {
          await fresh.stop();
          releaseDir(work);
        }
      }, 120_000);

      it("npm run release -- --publish pushes each image with its signature and provenance and the chart, and verifies them; refuses what is not a target or a release", async () => {
        const target = await startRegistry("publish");
        const bad = tempDir("ifp-release-publish-bad-");
        try {
          const cli = (args: string[]) =>
            sh([process.execPath, "e2e/release/release.ts", ...args].map((a) => `'${a}'`).join(" "), process.cwd());
          const r = await cli(["--publish", out, "--to", `${target.host}/ifp-dev`]);
          expect(r.code, r.stderr).toBe(0);
          for (const img of made.images)
            expect(r.stderr).toContain(
              `publish: ${target.host}/ifp-dev/${img.name}@${img.digest}: pushed, signed and attested`,
            );
          expect(r.stderr).toMatch(
            new RegExp(`publish: ${target.host}/ifp-dev/charts/ifp-operator@sha256:[0-9a-f]{64}: pushed`),
          );
          const served = await sh(`crane digest ${target.host}/ifp-dev/ifp-runtime:${version}`, out);
          expect(served.stdout.trim()).toBe(recorded("ifp-runtime"));
          // A release signed with a key is not published as a keyless one, nor to what is not HOST/NAMESPACE.
          const keyless = await cli(["--publish", out, "--to", `${target.host}/ifp-dev`, "--keyless"]);
          expect(keyless.code).toBe(1);
          expect(keyless.stderr).toContain("is signed with a key: publish it without --keyless");
          for (const to of [
            "ifp-dev",
            `${target.host}/`,
            `${target.host}/IFP`,
            `${target.host}/a/../b`,
            `-x.example/a`,
          ]) {
            const refused = await cli(["--publish", out, "--to", to]);
            expect(refused.code, to).toBe(1);
            expect(refused.stderr, to).toContain(`--to ${JSON.stringify(to)} is not HOST[:PORT]/NAMESPACE`);
          }
          const usage = await cli(["--publish", out]);
          expect(usage.stderr).toMatch(/^release: usage: npm run release -- --publish DIR --to HOST\/NAMESPACE/);
          // A release.json naming files outside its directory is refused before anything is pushed.
          for (const name of ["../../etc/passwd", "/etc/passwd", ".hidden"]) {
            writeFileSync(
              join(bad, "release.json"),
              JSON.stringify({
                version,
                chart: "ifp-operator.tgz",
                signing: "key",
                images: [
                  { name: "ifp-operator", archive: "a.oci.tar", digest: recorded("ifp-operator"), payload: name },
                ],
              }),
            );
            expect(() => publish({ dir: bad, to: `${target.host}/ifp-dev`, log: () => {} }), name).toThrow(
              `release.json names ${JSON.stringify(name)}: not a file of the release directory`,
            );
          }
        } finally {
          await target.stop();
          releaseDir(bad);
        }
      }, 120_000);

      it("helm push of the chart: shown and rendered back from oci:// with the version, and images by digest the registry serves", async () => {
        const work = workDir();
        try {
          // The loopback registry speaks plain HTTP: Helm is told so, as docs/install.md says for
          // a registry without TLS.
          const lines = installBlock("helm push", registry.host).map((l) => `${l} --plain-http`);
          expect(lines.map((l) => l.split(" ").slice(0, 2).join(" "))).toEqual([
            "helm push",
            "helm show",
            "helm template",
            "helm install",
          ]);
          const chartRef = `oci://${registry.host}/charts/ifp-operator`;
          const run = async (line: string) => {
            const r = await sh(line, work, helmEnv);
            expect(r.code, `${line}\n${r.stderr}`).toBe(0);
            return r;
          };
          const pushed = await run(lines[0]!);
          expect(pushed.stdout + pushed.stderr).toContain(`Pushed: ${registry.host}/charts/ifp-operator:${version}`);
          const shown = parse((await run(lines[1]!)).stdout);
          expect(shown).toMatchObject({ name: "ifp-operator", version, appVersion: version });
          // `helm install` needs a cluster; the same words with `helm template` render what it would install.
          const rendered = [
            (await run(lines[2]!)).stdout,
            (await run(lines[3]!.replace(/^helm install /, "helm template "))).stdout,
          ];
          for (const text of rendered) {
            expect(text).toContain(`image: "${registry.host}/ifp-dev/ifp-operator@${recorded("ifp-operator")}"`);
            expect(text).toContain(`--runtime-image=${registry.host}/ifp-dev/ifp-runtime@${recorded("ifp-runtime")}`);
            expect(text).not.toMatch(/\/ifp-dev\/ifp-(operator|runtime):/);
          }
          // Every image of the release the rendered chart names is in the registry by that digest.
          const refs = [
            ...new Set(
              [...rendered[0]!.matchAll(/[\w.:-]+\/ifp-dev\/ifp-(?:operator|runtime)@sha256:[0-9a-f]{64}/g)].map(
                (m) => m[0],
              ),
            ),
          ];
          expect(refs.length).toBe(2);
          for (const ref of refs) {
            const served = await sh(`crane digest ${ref}`, work);
            expect(served.stdout.trim(), `${ref}: ${served.stderr}`).toBe(ref.slice(ref.indexOf("@") + 1));
          }
          // The chart the registry serves is the packaged file, byte for byte.
          const pulled = tempDir("ifp-release-pulled-");
          await run(`helm pull ${chartRef} --version ${version} -d ${pulled} --plain-http`);
          const sums = readFileSync(join(out, "SHA256SUMS"), "utf8");
          expect(sums).toContain(`${sha256(readFileSync(join(pulled, made.chart)))}  ${made.chart}\n`);
          // A version that was never pushed is refused.
          const missing = await sh(`helm show chart ${chartRef} --version 9.9.9 --plain-http`, work, helmEnv);
          expect(missing.code).not.toBe(0);
          expect(missing.stderr).toMatch(/not found/);
        } finally {
          releaseDir(work);
        }
      }, 300_000);

      it("a changed byte is caught: sha256sum -c and --verify fail, the registry refuses the changed layer, a changed manifest is served by another digest", async () => {
        const copy = tempDir("ifp-release-changed-");
        const fresh = await startRegistry("fresh");
        try {
          cpSync(out, copy, { recursive: true });
          // Every file but SHA256SUMS and its signature.
          expect(verifyRelease(copy)).toMatchObject({ version, files: files.length - 2 });
          const runtime = made.images.find((i) => i.name === "ifp-runtime")!;
          const archive = join(copy, runtime.archive);
          const layer = readArchive(archive).manifest.layers.reduce((a, b) => (b.size > a.size ? b : a));
          const tar = readFileSync(archive);
          // A view of the archive's bytes: flipping a bit in it flips it in the archive.
          const bytes = tarMembers(tar).get(`blobs/${layer.digest.replace(":", "/")}`)!;
          expect(bytes.length).toBe(layer.size);
          const flip = Math.floor(bytes.length / 2);
          bytes[flip] = bytes[flip]! ^ 0x01;
          writeFileSync(archive, tar);

          const check = spawnSync("sha256sum", ["-c", "SHA256SUMS"], { cwd: copy, encoding: "utf8" });
          expect(check.status).toBe(1);
          expect(check.stdout).toContain(`${runtime.archive}: FAILED`);
          expect(check.stdout).toContain(`${made.chart}: OK`);
          const blob = new RegExp(`blob ${layer.digest.slice(0, 19)}… does not hash to its digest`);
          const failure = (() => {
            try {
              verifyRelease(copy);
              return "";
            } catch (err) {
              return (err as Error).message;
            }
          })();
          expect(failure).toMatch(/ifp-runtime-.*\.oci\.tar: its SHA-256 is not the one in SHA256SUMS/);
          expect(failure).toMatch(blob);
          // Nothing else is wrong.
          expect(failure.split("\n").slice(1)).toHaveLength(2);
          const cli = spawnSync(process.execPath, ["e2e/release/release.ts", "--verify", copy], { encoding: "utf8" });
          expect(cli.status).toBe(1);
          expect(cli.stderr).toMatch(/^release: .* fails verification:\n {2}ifp-runtime-/);
          // SHA256SUMS made to match the changed file, as whoever changed both would: the archive
          // itself still tells.
          const sums = readFileSync(join(copy, "SHA256SUMS"), "utf8").replace(
            new RegExp(`^[0-9a-f]{64}(?=  ${runtime.archive.replace(/\./g, "\\.")}$)`, "m"),
            sha256(tar),
          );
          writeFileSync(join(copy, "SHA256SUMS"), sums);
          expect(spawnSync("sha256sum", ["-c", "SHA256SUMS"], { cwd: copy }).status).toBe(0);
          const message = (() => {
            try {
              verifyRelease(copy);
              return "";
            } catch (err) {
              return (err as Error).message;
            }
          })();
          expect(message).toMatch(blob);
          expect(message).not.toMatch(/SHA256SUMS/);

          // Pushed as the docs say anyway: a registry without that layer refuses its bytes.
          const [unpack, push] = installBlock("crane push", fresh.host).filter((l) => l.includes("ifp-runtime"));
          expect((await sh(unpack!, copy)).code).toBe(0);
          const refused = await sh(push!, copy);
          expect(refused.code).not.toBe(0);
          expect(refused.stderr).toMatch(/DIGEST_INVALID/);
          const nothing = await sh(`crane digest ${fresh.host}/ifp-dev/ifp-runtime:${version}`, copy);
          expect(nothing.code).not.toBe(0);

          // A changed manifest (the same content, other bytes) is pushed, and the registry serves
          // it by its own digest: not the one release.json records, which the chart pulls.
          const operator = made.images.find((i) => i.name === "ifp-operator")!;
          const [unpackOp] = installBlock("crane push", fresh.host).filter((l) => l.includes("ifp-operator"));
          expect((await sh(unpackOp!, copy)).code).toBe(0);
          const manifestFile = join(copy, `ifp-operator-${version}`, "blobs", operator.digest.replace(":", "/"));
          const respaced = JSON.stringify(JSON.parse(readFileSync(manifestFile, "utf8")), null, 1);
          writeFileSync(manifestFile, respaced);
          const pushed = await sh(
            `crane push ifp-operator-${version} ${fresh.host}/ifp-dev/ifp-operator:${version}`,
            copy,
          );
          expect(pushed.code, pushed.stderr).toBe(0);
          // crane prints what it pushed: the manifest's own digest, not the layout's claim.
          expect(pushed.stdout.trim()).toBe(`${fresh.host}/ifp-dev/ifp-operator@sha256:${sha256(respaced)}`);
          const served = await sh(`crane digest ${fresh.host}/ifp-dev/ifp-operator:${version}`, copy);
          expect(served.stdout.trim()).toBe(`sha256:${sha256(respaced)}`);
          expect(served.stdout.trim()).not.toBe(operator.digest);
        } finally {
          await fresh.stop();
          releaseDir(copy);
        }
      }, 300_000);
    });

    it(
      "a second run of the same commit makes the same images and chart values; --keyless leaves the signing to publishing",
      async () => {
        const again = tempDir("ifp-release-again-");
        try {
          mkdirSync(again, { recursive: true });
          const second = release({ version, out: again, ref: made.commit, keyless: true, log: () => {} });
          expect(second.images.map((i) => i.digest)).toEqual(made.images.map((i) => i.digest));
          for (const img of second.images) expect(existsSync(join(again, img.archive))).toBe(true);
          // The payloads and the provenance, the same statements but for when they were made; no signature, no key.
          expect(second).toMatchObject({ signing: "keyless", publicKey: undefined, checksumsSignature: undefined });
          // What it returns is what its release.json says.
          const { dir: _dir, checksums: _sums, checksumsSignature: _sig, ...recorded } = second;
          expect(JSON.parse(readFileSync(join(again, "release.json"), "utf8"))).toEqual(
            JSON.parse(JSON.stringify(recorded)),
          );
          const left = readdirSync(again);
          expect(left.filter((f) => /\.(sig|att\.json|pub)$/.test(f))).toEqual([]);
          for (const img of second.images) {
            expect(img.signature).toBeUndefined();
            const first = made.images.find((i) => i.name === img.name)!;
            expect(readFileSync(join(again, img.payload), "utf8")).toBe(readFileSync(join(out, first.payload), "utf8"));
            const statement = JSON.parse(readFileSync(join(again, img.provenance), "utf8"));
            const before = JSON.parse(readFileSync(join(out, first.provenance), "utf8"));
            expect(statement.subject).toEqual(before.subject);
            expect(statement.predicate.buildDefinition.resolvedDependencies).toEqual(
              before.predicate.buildDefinition.resolvedDependencies,
            );
          }
          expect(verifyRelease(again)).toMatchObject({ version });
          // Published as what it is: keyless, never by a key it does not have.
          const r = await sh(
            `'${process.execPath}' e2e/release/release.ts --publish '${again}' --to 127.0.0.1:1/ifp-dev`,
            process.cwd(),
          );
          expect(r.code).toBe(1);
          expect(r.stderr).toContain("is a keyless release: publish it with --keyless");
        } finally {
          releaseDir(again);
        }
      },
      10 * 60_000,
    );
  });
});
