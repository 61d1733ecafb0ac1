#!/usr/bin/env node
// The kubectl plugin as a user installs it (krew, or by hand; docs/kubectl-plugin.md): plain
// JavaScript that runs on the user's own Node, 20.19.0 or later, with no node_modules and no
// checkout. From the sources, not tsc's output: rolldown strips the types as Node does, and lowers
// the syntax to that Node's.
//
//   node operator/plugin-bundle.ts [--out DIR]     (DIR: dist/bundle/kubectl-ifp by default)
//
// writes DIR/:
//   kubectl-ifp                  what kubectl runs (executable): checks the Node that runs it and
//                                ends with one line naming the Node it needs on an older one, then
//                                loads kubectl-ifp.mjs; CommonJS of ES2015 syntax, so that the
//                                check itself parses on any Node since 12
//   kubectl-ifp.mjs              the plugin (operator/bin/kubectl-ifp.ts) and every package it
//                                imports in one minified ES module, the version and commit of
//                                the build written into it (nothing beside it tells them)
//   THIRD-PARTY-LICENSES.txt     name, version, licence and licence files of each package bundled
//   LICENSE                      the project's
//
// The Kubernetes client's HTTP is undici 8 in the images, which needs Node 22.19; the plugin's
// bundle takes undici 7 in its place (the same fetch, Agent and ProxyAgent; Node 20.18.1 and
// later), and the bundling fails should any bundled package ask for a Node newer than
// PLUGIN_NODE (operator/src/commands/plugin/node-version.ts), but for those ENGINES_ABOVE_NEED names. The release archives DIR
// (e2e/release/krew.ts).
import { chmodSync, readFileSync, writeFileSync } from "node:fs";
import { join, relative } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import { build } from "rolldown";
import semver from "semver";
import { type BundleResult, bundleImage } from "../runtime/bundle.ts";
import { buildInfo } from "../runtime/src/util/version.ts";
import { ENGINES_ABOVE_NEED, PLUGIN_NODE } from "./src/commands/plugin/node-version.ts";

const REPO = fileURLToPath(new URL("../", import.meta.url));

/** The files of the plugin's directory, as they are archived. */
export const PLUGIN_FILES = ["kubectl-ifp", "kubectl-ifp.mjs", "THIRD-PARTY-LICENSES.txt", "LICENSE"] as const;

/** The bundled packages whose `engines.node` does not admit `node`, each as `name@version (range)`. */
export function needNewerNode(roots: string[], node: string): string[] {
  return roots.flatMap((root) => {
    const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as {
      name: string;
      version: string;
      engines?: { node?: string };
    };
    const range = pkg.engines?.node;
    if (!range || semver.satisfies(node, range) || Object.hasOwn(ENGINES_ABOVE_NEED, pkg.name)) return [];
    return [`${pkg.name}@${pkg.version} (node ${range})`];
  });
}

/** The plugin bundled into `outDir` (emptied first), as the file header says. */
export async function bundlePlugin(outDir: string): Promise<BundleResult> {
  const bundled = await bundleImage({
    image: "kubectl-ifp",
    runner: "kubectl-ifp",
    code: "the kubectl plugin",
    entries: { "kubectl-ifp": join(REPO, "operator/bin/kubectl-ifp.ts") },
    outDir,
    files: { LICENSE: join(REPO, "LICENSE") },
    single: {
      target: `node${PLUGIN_NODE}`,
      alias: { undici: "undici-7" },
      define: { IFP_BUNDLED_BUILD: JSON.stringify(buildInfo()) },
    },
  });
  const tooNew = needNewerNode(bundled.roots, PLUGIN_NODE);
  if (tooNew.length)
    throw new Error(
      `the plugin's bundle runs on Node ${PLUGIN_NODE}, which these packages refuse: ${tooNew.join(", ")}`,
    );
  const launcher = await build({
    input: join(REPO, "operator/bin/kubectl-ifp-launcher.ts"),
    platform: "node",
    transform: { target: "es2015" },
    external: [/\.mjs$/],
    onLog(level, log) {
      if (level === "warn") throw new Error(`rolldown: ${log.message}`);
    },
    output: {
      format: "cjs",
      banner: "#!/usr/bin/env node",
      comments: false,
      // Node's modules by their plain names: Node 12 knows no `node:` prefix in require().
      paths: (id) => id.replace(/^node:/, ""),
    },
    write: false,
  });
  const [code] = launcher.output;
  writeFileSync(join(outDir, "kubectl-ifp"), code.code);
  chmodSync(join(outDir, "kubectl-ifp"), 0o755);
  return { ...bundled, files: [...bundled.files, "kubectl-ifp"].sort() };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  try {
    const { values } = parseArgs({ options: { out: { type: "string" } } });
    const out = values.out ?? "dist/bundle/kubectl-ifp";
    const r = await bundlePlugin(out);
    process.stdout.write(
      `bundled ${r.packages.length} packages into ${r.files.map((f) => relative(".", join(out, f))).join(", ")}\n`,
    );
  } catch (err) {
    process.stderr.write(`plugin-bundle: ${(err as Error).message}\n`);
    process.exitCode = 1;
  }
}
