// The kubectl plugin's part of a release (release.ts): the commit's plugin bundled by the commit's
// operator/plugin-bundle.ts, one archive of it, and the krew manifest that installs it:
//
//   kubectl-ifp-<v>.tar.gz   kubectl-ifp (the launcher, which kubectl runs), kubectl-ifp.mjs (the
//                            bundle), THIRD-PARTY-LICENSES.txt and LICENSE; JavaScript only, so the
//                            one archive serves every platform krew installs it on
//   ifp.yaml                 the krew plugin manifest (krew.googlecontainertools.github.com/v1alpha2):
//                            the plugin `ifp` at v<v>, for linux and darwin on amd64 and arm64,
//                            each the archive by its URL on the GitHub release and its SHA-256
//
// `kubectl krew install --manifest=ifp.yaml --archive=kubectl-ifp-<v>.tar.gz` installs it from
// the release's files (docs/kubectl-plugin.md); the archive is made the same for the same commit
// (its members in one order, owner 0, the commit's date, gzip without a name or time).
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { gzipSync } from "node:zlib";
import { parse, stringify } from "yaml";
import { PLUGIN_FILES } from "../../operator/plugin-bundle.ts";
import { PLUGIN_NODE } from "../../operator/src/commands/plugin/node-version.ts";

/** The platforms the manifest offers the archive to, as krew's selector labels. */
export const KREW_PLATFORMS = [
  { os: "linux", arch: "amd64" },
  { os: "linux", arch: "arm64" },
  { os: "darwin", arch: "amd64" },
  { os: "darwin", arch: "arm64" },
] as const;

/** The manifest's file name: krew wants the plugin's name. */
export const KREW_MANIFEST = "ifp.yaml";

export const pluginArchiveName = (version: string) => `kubectl-ifp-${version}.tar.gz`;

function run(cmd: string, args: string[], cwd: string): Buffer {
  const r = spawnSync(cmd, args, { cwd, maxBuffer: 256 << 20 });
  if (r.error) throw new Error(`${cmd} could not start: ${r.error.message}`);
  if (r.status !== 0)
    throw new Error(`${cmd} ${args.join(" ")} failed (${r.status}): ${String(r.stderr).slice(-2000)}`);
  return r.stdout;
}

/** The gzipped tar of the plugin's directory `dir` (operator/plugin-bundle.ts), the same bytes for the same files and `mtime`. */
export function pluginArchive(dir: string, mtime: Date): Buffer {
  const tar = run(
    "tar",
    [
      "-c",
      "--owner=0",
      "--group=0",
      "--numeric-owner",
      `--mtime=@${Math.floor(mtime.getTime() / 1000)}`,
      "-f",
      "-",
      ...PLUGIN_FILES,
    ],
    dir,
  );
  return gzipSync(tar, { level: 9 });
}

/** The GitHub web address of package.json's `repository` (`git+https://github.com/o/r.git` → `https://github.com/o/r`). */
export function repositoryUrl(repository: string | { url?: string } | undefined): string {
  const url = typeof repository === "string" ? repository : repository?.url;
  const m = /^(?:git\+)?(https:\/\/github\.com\/[\w.-]+\/[\w.-]+?)(?:\.git)?$/.exec(url ?? "");
  if (!m) throw new Error(`package.json's repository ${JSON.stringify(url)} is not a GitHub repository's URL`);
  return m[1]!;
}

/** The krew manifest of the plugin `ifp` at `version`, offering the archive at `uri` with this SHA-256 to every platform. */
export function krewManifest(opts: { version: string; homepage: string; uri: string; sha256: string }): string {
  const manifest = {
    apiVersion: "krew.googlecontainertools.github.com/v1alpha2",
    kind: "Plugin",
    metadata: { name: "ifp" },
    spec: {
      version: `v${opts.version}`,
      homepage: opts.homepage,
      shortDescription: "Status, support bundles and messages of ifp-operator",
      description: [
        "Day-2 answers about an ifp-operator install: the operator, NATS, the install CA and every",
        "Agent and Relay at a glance (status), what an Agent or Relay renders (describe), a support",
        "bundle with every Secret redacted (report), and messages sent as an Agent and followed",
        "(send, tail, redrive), with your kubeconfig's own rights.",
        "",
      ].join("\n"),
      caveats: [
        `The plugin is JavaScript: it needs Node.js ${PLUGIN_NODE} or later as \`node\` on your PATH.`,
        "Shell completion: source <(kubectl ifp completion bash), or completion zsh.",
        "",
      ].join("\n"),
      platforms: KREW_PLATFORMS.map((p) => ({
        selector: { matchLabels: { os: p.os, arch: p.arch } },
        uri: opts.uri,
        sha256: opts.sha256,
        bin: "kubectl-ifp",
      })),
    },
  };
  return stringify(manifest, { lineWidth: 0 });
}

/**
 * The plugin of the release's source (a `git archive` of the commit with node_modules beside it):
 * bundled by its own operator/plugin-bundle.ts into `work`, archived into `out`, and `ifp.yaml`
 * beside it. Returns the two files' names and the archive's SHA-256.
 */
export function releasePlugin(opts: { source: string; work: string; out: string; version: string; mtime: Date }): {
  archive: string;
  manifest: string;
  sha256: string;
} {
  const dir = join(opts.work, "kubectl-ifp");
  run(process.execPath, [join(opts.source, "operator/plugin-bundle.ts"), "--out", dir], opts.source);
  const archive = pluginArchiveName(opts.version);
  const bytes = pluginArchive(dir, opts.mtime);
  writeFileSync(join(opts.out, archive), bytes);
  const sha256 = createHash("sha256").update(bytes).digest("hex");
  const pkg = JSON.parse(readFileSync(join(opts.source, "package.json"), "utf8")) as { repository?: string };
  const homepage = repositoryUrl(pkg.repository);
  writeFileSync(
    join(opts.out, KREW_MANIFEST),
    krewManifest({
      version: opts.version,
      homepage,
      uri: `${homepage}/releases/download/v${opts.version}/${archive}`,
      sha256,
    }),
  );
  return { archive, manifest: KREW_MANIFEST, sha256 };
}

/**
 * The plugin's files of a release directory checked: the archive release.json names, and every
 * platform of its krew manifest offering that archive by its SHA-256. The problems, one line each.
 */
export function verifyPlugin(dir: string, plugin: { archive?: string; manifest?: string } | undefined): string[] {
  if (!plugin?.archive || !plugin.manifest) return ["release.json names no plugin archive and manifest"];
  const safe = (f: string) => !/[/\\]/.test(f) && existsSync(join(dir, f));
  if (!safe(plugin.archive)) return [`no plugin archive ${JSON.stringify(plugin.archive)}`];
  if (!safe(plugin.manifest)) return [`no krew manifest ${JSON.stringify(plugin.manifest)}`];
  const sha256 = createHash("sha256")
    .update(readFileSync(join(dir, plugin.archive)))
    .digest("hex");
  let platforms: { uri?: string; sha256?: string }[];
  try {
    platforms = (parse(readFileSync(join(dir, plugin.manifest), "utf8"))?.spec?.platforms ?? []) as typeof platforms;
  } catch (err) {
    return [`${plugin.manifest}: ${(err as Error).message.slice(0, 200)}`];
  }
  if (!platforms.length) return [`${plugin.manifest}: no platforms`];
  return platforms.flatMap((p, i) => [
    ...(p.sha256 !== sha256
      ? [`${plugin.manifest}: platform ${i} has sha256 ${p.sha256}, ${plugin.archive} is ${sha256}`]
      : []),
    ...(!p.uri?.endsWith(`/${plugin.archive}`)
      ? [`${plugin.manifest}: platform ${i} offers ${p.uri}, not ${plugin.archive}`]
      : []),
  ]);
}
