import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { compileCacheDir } from "./compile-cache.ts";

const IFP = fileURLToPath(new URL("../../bin/ifp.ts", import.meta.url));
const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

function scratch(): string {
  const d = mkdtempSync(join(tmpdir(), "ifp-compile-cache-"));
  dirs.push(d);
  return d;
}

/** `ifp --help` as a user starts it, with only the named cache variables set. */
function ifpHelp(env: Record<string, string>): { status: number | null; stdout: string; stderr: string } {
  const { NODE_COMPILE_CACHE: _a, NODE_DISABLE_COMPILE_CACHE: _b, XDG_CACHE_HOME: _c, ...rest } = process.env;
  const r = spawnSync(process.execPath, [IFP, "--help"], { env: { ...rest, ...env }, encoding: "utf8" });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** Every file under `dir`, relative. */
function files(dir: string): string[] {
  return existsSync(dir)
    ? readdirSync(dir, { recursive: true, withFileTypes: true })
        .filter((e) => e.isFile())
        .map((e) => e.name)
    : [];
}

describe("compile cache of the commands", () => {
  it("lives in NODE_COMPILE_CACHE, else in the user's cache directory, never in a shared /tmp", () => {
    expect(compileCacheDir({ NODE_COMPILE_CACHE: "/c" })).toBe("/c");
    expect(compileCacheDir({ XDG_CACHE_HOME: "/x" })).toBe("/x/ifp-operator/node-compile-cache");
    expect(compileCacheDir({ XDG_CACHE_HOME: "" })).toMatch(/\/\.cache\/ifp-operator\/node-compile-cache$/);
  });

  it("is written by a command's first run, under XDG_CACHE_HOME, with the same answer as without it; NODE_DISABLE_COMPILE_CACHE=1 turns it off", () => {
    const home = scratch();
    const first = ifpHelp({ XDG_CACHE_HOME: home });
    const cached = files(join(home, "ifp-operator", "node-compile-cache"));
    // The modules `ifp` loads, dozens of them, each one entry.
    expect(cached.length).toBeGreaterThan(20);
    const again = ifpHelp({ XDG_CACHE_HOME: home });
    const offHome = scratch();
    const off = ifpHelp({ XDG_CACHE_HOME: offHome, NODE_DISABLE_COMPILE_CACHE: "1" });
    expect(files(join(offHome, "ifp-operator", "node-compile-cache"))).toEqual([]);
    expect(first.stdout).toContain("ifp");
    expect([again.stdout, off.stdout]).toEqual([first.stdout, first.stdout]);
    expect([first.status, again.status]).toEqual([off.status, off.status]);
  });

  it("stays off, without a word, where it cannot be written", () => {
    const blocked = scratch();
    // A file where the cache directory would be made: nothing can be written under it.
    writeFileSync(join(blocked, "ifp-operator"), "");
    const r = ifpHelp({ XDG_CACHE_HOME: blocked });
    expect(r.stderr).toBe("");
    expect(r.stdout).toContain("ifp");
  });
});
