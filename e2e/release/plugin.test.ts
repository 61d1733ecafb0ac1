// The release's kubectl plugin as a user gets it: the archive and krew manifest the release writes
// (krew.ts releasePlugin, from this checkout as the release does from its commit), checked by
// krew's own validator, installed by krew from the archive as docs/kubectl-plugin.md says, and the
// installed `kubectl-ifp` run by `node` of PATH — the machine's Node 20, Node 22 and the
// project's Node 24 — against a real API server; Node 12 and 18 refused with one line.
import { spawnSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, readFileSync, realpathSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse } from "yaml";
import { PLUGIN_FILES } from "../../operator/plugin-bundle.ts";
import { ENGINES_ABOVE_NEED, PLUGIN_NODE } from "../../operator/src/commands/plugin/node-version.ts";
import { buildInfo } from "../../runtime/src/util/version.ts";
import { startControlPlane, type ControlPlane } from "../support/controlplane.ts";
import { releaseDir, tempDir } from "../support/process.ts";
import { waitFor } from "../support/wait.ts";
import { OTHER_NODES, toolPath } from "../tools/tools.ts";
import { KREW_MANIFEST, KREW_PLATFORMS, pluginArchiveName, releasePlugin, verifyPlugin } from "./krew.ts";

const { version, commit } = buildInfo();
const work = tempDir("ifp-plugin-release-");
const out = join(work, "out");
const krewRoot = join(work, "krew");
let cp: ControlPlane;
let plugin: ReturnType<typeof releasePlugin>;

/** A directory holding only `node`, a link to this Node binary: what a user's PATH finds. */
function nodeOnPath(binary: string): string {
  const dir = join(work, `path-${binary.replace(/\W+/g, "-")}`);
  if (!existsSync(dir)) {
    mkdirSync(dir);
    symlinkSync(binary, join(dir, "node"));
  }
  return dir;
}

/** The installed plugin run as kubectl runs it: `kubectl-ifp` of krew's bin, by the `node` of `nodeDir`. */
function kubectlIfp(nodeDir: string, args: string[]) {
  const r = spawnSync(join(krewRoot, "bin", "kubectl-ifp"), args, {
    encoding: "utf8",
    timeout: 60_000,
    cwd: work,
    env: { PATH: `${nodeDir}:/usr/bin:/bin`, HOME: work, KUBECONFIG: cp.kubeconfig },
  });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

const krew = (args: string[], env: NodeJS.ProcessEnv = {}) =>
  spawnSync(toolPath("krew"), args, {
    encoding: "utf8",
    timeout: 120_000,
    env: { ...process.env, KREW_ROOT: krewRoot, HOME: work, ...env },
  });

/** `kubectl krew install --manifest=ifp.yaml --archive=ARCHIVE`, into krew's root `root`. */
const krewInstall = (archive: string, root = krewRoot) =>
  krew(["install", `--manifest=${join(out, KREW_MANIFEST)}`, `--archive=${archive}`], { KREW_ROOT: root });

/** The Nodes that run the plugin: the machine's (`/usr/bin/node`, when it is new enough), 22 and the project's. */
function nodes(): [string, string][] {
  const found: [string, string][] = [];
  const machine = spawnSync("/usr/bin/node", ["--version"], { encoding: "utf8" }).stdout?.trim();
  if (machine && Number(machine.slice(1).split(".")[0]) < 22) found.push([`the machine's ${machine}`, "/usr/bin/node"]);
  else process.stderr.write(`e2e/release/plugin.test.ts: no Node 20 at /usr/bin/node (${machine ?? "none"})\n`);
  found.push([`v${OTHER_NODES[2]}`, toolPath("nodes", "node22")]);
  found.push([`the project's ${process.version}`, process.execPath]);
  return found;
}

beforeAll(async () => {
  mkdirSync(out);
  const mtime = new Date("2026-12-01T10:00:00Z");
  [plugin, cp] = await Promise.all([
    Promise.resolve().then(() => releasePlugin({ source: process.cwd(), work, out, version, mtime })),
    startControlPlane({ crds: ["crds/agents.ifp.dev.yaml", "crds/relays.ifp.dev.yaml"], controllerManager: false }),
  ]);
  // An install as the chart and the operator make it: the operator at one version, an Agent whose
  // runtime runs another.
  const labels = (component: string) =>
    `{app.kubernetes.io/name: ifp-operator, app.kubernetes.io/part-of: ifp-operator, app.kubernetes.io/component: ${component}, app.kubernetes.io/version: 0.2.0}`;
  const runtime =
    "{app.kubernetes.io/instance: alice, app.kubernetes.io/managed-by: ifp-operator, app.kubernetes.io/name: ifp-runtime, app.kubernetes.io/component: agent, app.kubernetes.io/version: 0.1.0}";
  cp.kubectl(["create", "namespace", "ifp-system"]);
  cp.kubectl(["create", "namespace", "team"]);
  cp.kubectl(
    ["apply", "-f", "-"],
    `apiVersion: apps/v1
kind: Deployment
metadata: {name: ifp-operator, namespace: ifp-system, labels: ${labels("operator")}}
spec:
  selector: {matchLabels: {app.kubernetes.io/component: operator}}
  template:
    metadata: {labels: ${labels("operator")}}
    spec: {containers: [{name: operator, image: op:1}]}
---
apiVersion: ifp.dev/v1alpha1
kind: Agent
metadata: {name: alice, namespace: team}
spec: {agentId: https://alice.example/agents/alice}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: alice, namespace: team, labels: ${runtime}}
spec:
  selector: {matchLabels: {app.kubernetes.io/instance: alice}}
  template:
    metadata: {labels: ${runtime}}
    spec: {containers: [{name: runtime, image: rt:1}]}
`,
  );
  // Installed as docs/kubectl-plugin.md says: `kubectl krew install --manifest --archive`.
  const installed = krewInstall(join(out, plugin.archive));
  if (installed.status !== 0) throw new Error(`krew install: ${installed.stderr}`);
  // Read back as the plugin reads them: both kinds listed, once the API server serves their lists.
  await waitFor("the Agent listed", () => /alice/.test(cp.kubectl(["get", "agents,relays", "-A"])));
}, 300_000);

afterAll(async () => {
  await cp?.stop();
  releaseDir(work);
});

describe("the release's kubectl plugin", () => {
  it("is one archive of the launcher, one bundle and the licences, offered to every platform by ifp.yaml", () => {
    expect(plugin.archive).toBe(pluginArchiveName(version));
    const listed = spawnSync("tar", ["-tvzf", join(out, plugin.archive)], { encoding: "utf8" });
    expect(listed.status).toBe(0);
    const members = listed.stdout.trim().split("\n");
    expect(members.map((l) => l.split(/\s+/).pop())).toEqual([...PLUGIN_FILES]);
    // The launcher is executable; every member is root's, of the commit's date.
    expect(members.find((l) => l.endsWith(" kubectl-ifp"))).toMatch(/^-rwxr-xr-x 0\/0 .* 2026-12-01 /);
    for (const m of members) expect(m).toMatch(/^-\S+ 0\/0 /);
    // The same bytes again for the same files.
    const again = releasePlugin({
      source: process.cwd(),
      work,
      out: work,
      version,
      mtime: new Date("2026-12-01T10:00:00Z"),
    });
    expect(again.sha256).toBe(plugin.sha256);

    const manifest = parse(readFileSync(join(out, KREW_MANIFEST), "utf8"));
    expect(manifest).toMatchObject({
      apiVersion: "krew.googlecontainertools.github.com/v1alpha2",
      kind: "Plugin",
      metadata: { name: "ifp" },
      spec: { version: `v${version}`, homepage: "https://github.com/ifp-dev/ifp-operator" },
    });
    expect(manifest.spec.caveats).toContain(`Node.js ${PLUGIN_NODE} or later`);
    expect(manifest.spec.platforms).toEqual(
      KREW_PLATFORMS.map((p) => ({
        selector: { matchLabels: p },
        uri: `https://github.com/ifp-dev/ifp-operator/releases/download/v${version}/${plugin.archive}`,
        sha256: plugin.sha256,
        bin: "kubectl-ifp",
      })),
    );
    expect(verifyPlugin(out, plugin)).toEqual([]);
  });

  it("--verify names a manifest that offers another archive or other bytes, and a plugin file that is not there", () => {
    const dir = join(work, "verify");
    mkdirSync(dir);
    cpSync(join(out, plugin.archive), join(dir, plugin.archive));
    const text = readFileSync(join(out, KREW_MANIFEST), "utf8");
    writeFileSync(join(dir, KREW_MANIFEST), text.replaceAll(plugin.sha256, "f".repeat(64)));
    expect(verifyPlugin(dir, plugin)).toEqual(
      KREW_PLATFORMS.map(
        (_, i) => `ifp.yaml: platform ${i} has sha256 ${"f".repeat(64)}, ${plugin.archive} is ${plugin.sha256}`,
      ),
    );
    writeFileSync(join(dir, KREW_MANIFEST), text.replaceAll(`/${plugin.archive}`, "/other.tar.gz"));
    expect(verifyPlugin(dir, plugin)[0]).toMatch(
      /^ifp\.yaml: platform 0 offers https:\/\/\S+\/other\.tar\.gz, not kubectl-ifp-/,
    );
    writeFileSync(join(dir, KREW_MANIFEST), "spec: [");
    expect(verifyPlugin(dir, plugin)[0]).toMatch(/^ifp\.yaml: /);
    writeFileSync(join(dir, KREW_MANIFEST), "spec: {}\n");
    expect(verifyPlugin(dir, plugin)).toEqual(["ifp.yaml: no platforms"]);
    expect(verifyPlugin(dir, { archive: "../out/x.tar.gz", manifest: KREW_MANIFEST })).toEqual([
      'no plugin archive "../out/x.tar.gz"',
    ]);
    expect(verifyPlugin(dir, { archive: plugin.archive, manifest: "/etc/passwd" })).toEqual([
      'no krew manifest "/etc/passwd"',
    ]);
    expect(verifyPlugin(dir, undefined)).toEqual(["release.json names no plugin archive and manifest"]);
  });

  it("bundles the plugin into one minified file with the build's version, and undici 7 for Node 20", () => {
    const dir = join(work, "kubectl-ifp");
    const bundle = readFileSync(join(dir, "kubectl-ifp.mjs"), "utf8");
    expect(bundle.length / bundle.split("\n").length).toBeGreaterThan(400);
    // Not printed on a failure: 2.5 MB of one line.
    expect(bundle.includes(commit), "the commit in the bundle").toBe(true);
    expect(bundle.includes("node_modules"), "a path of node_modules in the bundle").toBe(false);
    const licences = readFileSync(join(dir, "THIRD-PARTY-LICENSES.txt"), "utf8");
    expect(licences).toMatch(/^kubectl-ifp runs the kubectl plugin as one bundle/);
    expect(licences).toMatch(/\nundici@7\.\d+\.\d+\nLicense: MIT\n/);
    expect(licences).not.toMatch(/\nundici@8\./);
    expect(licences).toMatch(/\n@kubernetes\/client-node@\d/);
  });

  it("bundles the packages whose engines ask for a newer Node only as what runs on Node 20", () => {
    // What each is used for in the bundle, run by the oldest Node the plugin is run on here.
    const uses: Record<keyof typeof ENGINES_ABOVE_NEED, string> = {
      "@nats-io/nuid": 'const { nuid } = await import("@nats-io/nuid"); out.push(nuid.next().length);',
      canonicalize: 'const c = (await import("canonicalize")).default; out.push(c({ b: [1, "x"], a: null }));',
    };
    expect(Object.keys(uses).sort()).toEqual(Object.keys(ENGINES_ABOVE_NEED).sort());
    const [, oldest] = nodes()[0]!;
    const r = spawnSync(
      oldest,
      [
        "--input-type=module",
        "-e",
        `const out = []; ${Object.values(uses).join(" ")} console.log(JSON.stringify(out));`,
      ],
      { encoding: "utf8", cwd: process.cwd() },
    );
    expect(r.stderr).toBe("");
    expect(JSON.parse(r.stdout)).toEqual([22, '{"a":null,"b":[1,"x"]}']);
  });

  it("passes krew's validator, which refuses a manifest whose platform lacks its sha256", () => {
    const validate = (file: string) =>
      spawnSync(toolPath("krew", "validate-krew-manifest"), ["-manifest", file, "-skip-install"], { encoding: "utf8" });
    const ok = validate(join(out, KREW_MANIFEST));
    expect(ok.status, ok.stderr).toBe(0);
    const bad = join(work, "bad", KREW_MANIFEST);
    mkdirSync(join(work, "bad"));
    writeFileSync(bad, readFileSync(join(out, KREW_MANIFEST), "utf8").replace(/sha256: \w+/, "sha256: 1234"));
    const refused = validate(bad);
    expect(refused.status).not.toBe(0);
    expect(refused.stderr).toMatch(/sha256/);
  });

  it("is installed by krew from the release's archive, which refuses an archive of other bytes", () => {
    // An archive that is not the manifest's: krew checks its SHA-256 before it installs anything.
    const other = join(work, "other.tar.gz");
    cpSync(join(out, plugin.archive), other);
    writeFileSync(other, Buffer.concat([readFileSync(other), Buffer.from([0])]));
    const elsewhere = join(work, "krew-refused");
    const refused = krewInstall(other, elsewhere);
    expect(refused.status).not.toBe(0);
    expect(refused.stderr).toMatch(/sha256|checksum/i);
    expect(existsSync(join(elsewhere, "bin", "kubectl-ifp"))).toBe(false);
    // And removed again.
    const another = join(work, "krew-removed");
    expect(krewInstall(join(out, plugin.archive), another).status).toBe(0);
    expect(existsSync(join(another, "bin", "kubectl-ifp"))).toBe(true);
    // krew uninstalls with its plugin index in place, which a krew of a user's machine has (a
    // git checkout of krew-index, `kubectl krew update`); an empty one here.
    mkdirSync(join(another, "index", "default", "plugins"), { recursive: true });
    expect(spawnSync("git", ["init", "-q", join(another, "index", "default")]).status).toBe(0);
    const removed = krew(["uninstall", "ifp"], { KREW_ROOT: another });
    expect(removed.status, removed.stderr).toBe(0);
    expect(existsSync(join(another, "bin", "kubectl-ifp"))).toBe(false);
    expect(existsSync(join(another, "store", "ifp"))).toBe(false);
    // The install beforeAll made: krew's bin links to the launcher in krew's store.
    expect(realpathSync(join(krewRoot, "bin", "kubectl-ifp"))).toBe(
      join(realpathSync(krewRoot), "store", "ifp", `v${version}`, "kubectl-ifp"),
    );
  });

  it.each(nodes())("runs on %s: --version, completion bash, status against the API server", (_name, binary) => {
    const path = nodeOnPath(binary);
    const v = kubectlIfp(path, ["--version"]);
    expect(v.stderr).toBe("");
    expect(v.code).toBe(0);
    expect(v.stdout).toBe(`kubectl-ifp ${version} (commit ${commit.slice(0, 12)})\n`);
    const completion = kubectlIfp(path, ["completion", "bash"]);
    expect(completion.code, completion.stderr).toBe(0);
    expect(completion.stdout).toMatch(/^# bash completion for kubectl-ifp/);
    expect(completion.stdout).toContain("complete -o default -F _kubectl_ifp_complete kubectl-ifp");
    const status = kubectlIfp(path, ["status"]);
    expect(status.stderr).toBe("");
    expect(status.code).toBe(0);
    expect(status.stdout).toMatch(
      /^Operator: {4}ifp-system\/ifp-operator {2}0\/1 ready {2}version 0\.2\.0 {2}no leader\n/,
    );
    expect(status.stdout).toMatch(/\nteam +Agent +alice +Unknown +0\.1\.0\n/);
    expect(status.stdout).toMatch(
      /\nWarning: 1 of 1 runtimes run another version than the operator's 0\.2\.0: agent team\/alice 0\.1\.0\n$/,
    );
    // A failure is one line too, on every Node.
    const missing = kubectlIfp(path, ["describe", "agent", "nobody", "-n", "team"]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/^kubectl ifp: .*nobody.*\n$/);
  });

  it.each([
    ["12", OTHER_NODES[0]!],
    ["18", OTHER_NODES[1]!],
  ])("refuses Node %s with one line naming the Node it needs, before it loads the bundle", (major, full) => {
    const binary = toolPath("nodes", `node${major}`);
    for (const args of [["--version"], ["status"], ["completion", "bash"]]) {
      const r = kubectlIfp(nodeOnPath(binary), args);
      expect(r.code).toBe(1);
      expect(r.stdout).toBe("");
      expect(r.stderr).toBe(
        `kubectl ifp: needs Node.js ${PLUGIN_NODE} or later on PATH; ${realpathSync(binary)} is Node.js v${full}\n`,
      );
    }
  });
});
