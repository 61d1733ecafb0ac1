// `npm run release`: a release of the commit checked out, made as a user makes it, and what it
// holds read back with the tools a platform team uses (sha256sum, tar, helm). Building the images
// needs root (buildah); elsewhere the build is skipped with one line and the rest still runs.
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse } from "yaml";
import { releaseDir, tempDir } from "../support/process.ts";
import { toolPath } from "../tools/tools.ts";
import {
  changelogEntry,
  draftEntry,
  imageFiles,
  RELEASED_IMAGES,
  type Release,
  readArchive,
  release,
  withDraft,
} from "./release.ts";

const version = JSON.parse(readFileSync("package.json", "utf8")).version as string;
const noBuild = process.getuid?.() !== 0 ? "building the images needs root (buildah)" : undefined;
if (noBuild) process.stderr.write(`e2e/release/release.test.ts: the release itself skipped: ${noBuild}\n`);

const sha256 = (data: Buffer) => createHash("sha256").update(data).digest("hex");

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

  describe.skipIf(noBuild !== undefined)("the release of the commit checked out", () => {
    let out: string;
    let made: Release;
    let files: string[];
    let head: string;
    beforeAll(() => {
      head = spawnSync("git", ["rev-parse", "HEAD"], { encoding: "utf8" }).stdout.trim();
      out = tempDir("ifp-release-");
      made = release({ version, out, log: () => {} });
      files = readdirSync(out).sort();
    }, 20 * 60_000);
    afterAll(() => releaseDir(out));

    it("holds the archives, SBOMs, chart, notes and manifest, each in SHA256SUMS", () => {
      expect(made.commit).toBe(head);
      expect(files).toEqual(
        [
          ...RELEASED_IMAGES.flatMap((i) => [`${i.name}-${version}.oci.tar`, `${i.name}-${version}.cdx.json`]),
          `ifp-operator-${version}.tgz`,
          "release-notes.md",
          "release.json",
          "SHA256SUMS",
        ].sort(),
      );
      const sums = readFileSync(join(out, "SHA256SUMS"), "utf8").trim().split("\n");
      expect(sums.map((l) => l.split("  ")[1]).sort()).toEqual(files.filter((f) => f !== "SHA256SUMS"));
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
      expect(manifest).toMatchObject({ version, commit: head, chart: made.chart });
      expect(manifest.images).toEqual(JSON.parse(JSON.stringify(made.images)));
    });

    it("each image: one manifest whose digest is its content's, Node without a shell or npm, user 65532, pruned modules", () => {
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
        // The packages the image holds, by their package.json, are the SBOM's libraries.
        const held = new Set(
          imageFiles(join(out, img.archive))
            .files.map((f) => /node_modules\/((?:@[^/]+\/)?[^/]+)\/package\.json$/.exec(f)?.[1])
            .filter((n): n is string => n !== undefined),
        );
        const libraries = new Set(
          (bom.components as { type: string; name: string }[]).filter((c) => c.type === "library").map((c) => c.name),
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

    it(
      "a second run of the same commit makes the same images and chart values",
      () => {
        const again = tempDir("ifp-release-again-");
        try {
          mkdirSync(again, { recursive: true });
          const second = release({ version, out: again, ref: made.commit, log: () => {} });
          expect(second.images.map((i) => i.digest)).toEqual(made.images.map((i) => i.digest));
          for (const img of second.images) expect(existsSync(join(again, img.archive))).toBe(true);
        } finally {
          releaseDir(again);
        }
      },
      10 * 60_000,
    );
  });
});
