// The previous release as e2e/upgrade/previous-release.ts names it: the CHANGELOG's newest
// released version, its commits in this clone, its chart of that version; and a commit the clone
// lacks refused with what to fetch.
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { parse } from "yaml";
import { PREVIOUS_RELEASE, previousChart, requireCommit } from "./previous-release.ts";

const dir = mkdtempSync(join(tmpdir(), "ifp-previous-release-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("the previous release", () => {
  it("is the CHANGELOG's newest released version", () => {
    const changelog = readFileSync(new URL("../../CHANGELOG.md", import.meta.url), "utf8");
    const released = /^## \[(\d+\.\d+\.\d+[^\]]*)\] - \d{4}-\d{2}-\d{2}$/m.exec(changelog)?.[1];
    expect(released).toBe(PREVIOUS_RELEASE.version);
  });

  it("has its commits in this clone, the release's CHANGELOG entry in the first and its chart of that version in the source", () => {
    requireCommit(PREVIOUS_RELEASE.commit);
    requireCommit(PREVIOUS_RELEASE.source);
    const changelog = spawnSync("git", ["show", `${PREVIOUS_RELEASE.commit}:CHANGELOG.md`], { encoding: "utf8" });
    expect(changelog.stdout).toContain(`## [${PREVIOUS_RELEASE.version}] - `);
    // The source is the release's commit or one after it.
    const after = spawnSync("git", ["merge-base", "--is-ancestor", PREVIOUS_RELEASE.commit, PREVIOUS_RELEASE.source]);
    expect(after.status).toBe(0);
    const chart = parse(readFileSync(join(previousChart(dir), "Chart.yaml"), "utf8"));
    expect({ version: chart.version, appVersion: chart.appVersion }).toEqual({
      version: PREVIOUS_RELEASE.version,
      appVersion: PREVIOUS_RELEASE.version,
    });
  });

  it("refuses a commit the clone does not have, saying what to fetch", () => {
    const missing = "0123456789abcdef0123456789abcdef01234567";
    expect(() => requireCommit(missing)).toThrow(/is not in this clone's history.*git fetch --unshallow/);
  });
});
