#!/usr/bin/env node
// An image's code: tsc's output (under dist/, tsconfig.build.json) of its commands and every
// package they import, linked and minified by rolldown into a few ES module files that need no
// node_modules. The runtime image's, run from the directory that holds dist/ (the Dockerfile's
// build stage):
//
//   node runtime/bundle.ts
//
// writes dist/bundle/runtime/ (what the image copies to /app/runtime):
//   bin/ifp-runtime.js           the entry point (ENTRYPOINT node runtime/bin/ifp-runtime.js)
//   bin/ifp.js                   the ifp command, which kubectl ifp runs in an Agent's pod
//   lib/*.js                     the chunks they load: the agent, the relay, the commands of ifp,
//                                the Kubernetes client (loaded only to write Events), and the
//                                code they share
//   THIRD-PARTY-LICENSES.txt     name, version, licence and licence files of each package bundled
// and the source maps, kept out of the image, under dist/bundle-maps/runtime/. The operator
// image's bundle is made by the same function (operator/bundle.ts).
//
// Why: Node keeps the source of every module it loads in the heap, and each module of
// node_modules is a file opened, read and compiled on its own. One minified bundle of the same
// code takes about 20 MiB off every Agent's and Relay's pod (docs/benchmarks.md).
import { copyFileSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, relative, resolve, sep } from "node:path";
import { pathToFileURL } from "node:url";
import { build } from "rolldown";

export interface BundleOptions {
  /** The image's name and what it runs, for the licence file's header. */
  image: string;
  code: string;
  /** Each command of the image: its name (bin/<name>.js) and tsc's output of its entry. */
  entries: Record<string, string>;
  /** Where the files of the image go (emptied first). */
  outDir: string;
  /** Where the source maps go (emptied first); never copied into the image. None without it. */
  mapsDir?: string;
  /** Files the code reads at run time, copied as they are: each one's place under outDir and its source. */
  files?: Record<string, string>;
  /**
   * One file per command and no chunks (`<name>.mjs` at the top of outDir), its syntax lowered to
   * `target`, packages swapped for others by `alias` and identifiers replaced by `define`: the
   * kubectl plugin's bundle, which runs on the user's Node (operator/plugin-bundle.ts).
   */
  single?: { target: string; alias?: Record<string, string>; define?: Record<string, string> };
  /** Who the licence file's header says runs the code; "The <image> image" unless given. */
  runner?: string;
}

export interface BundleResult {
  /** The files written under outDir, relative to it. */
  files: string[];
  /** The packages bundled, as name@version. */
  packages: string[];
  /** Their directories. */
  roots: string[];
}

/** The directory of the package a module of node_modules belongs to (the innermost node_modules). */
function packageRoot(id: string): string | undefined {
  const m = /^(.*[\\/]node_modules[\\/](?:@[^\\/]+[\\/])?[^\\/]+)[\\/]/.exec(id);
  return m?.[1];
}

const LICENCE_FILE = /^(licen[cs]e|copying|notice)/i;

/** Each package's name, version, declared licence and the text of its licence files. */
function licences(roots: Iterable<string>, runner: string, code: string): { text: string; packages: string[] } {
  const entries: { key: string; text: string }[] = [];
  for (const root of roots) {
    const manifest = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as {
      name: string;
      version: string;
      license?: string | { type?: string };
      homepage?: string;
    };
    const declared = typeof manifest.license === "string" ? manifest.license : (manifest.license?.type ?? "UNKNOWN");
    const files = readdirSync(root)
      .filter((f) => LICENCE_FILE.test(f))
      .sort();
    let text = `${manifest.name}@${manifest.version}\nLicense: ${declared}\n`;
    if (manifest.homepage) text += `Homepage: ${manifest.homepage}\n`;
    for (const f of files) text += `\n--- ${f} ---\n${readFileSync(join(root, f), "utf8").trim()}\n`;
    if (!files.length) text += "(the package has no licence file; its package.json declares the licence above)\n";
    entries.push({ key: `${manifest.name}@${manifest.version}`, text });
  }
  entries.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  const unique = entries.filter((e, i) => i === 0 || entries[i - 1]!.key !== e.key);
  const header =
    `${runner} runs ${code} as one bundle of its own code (Apache-2.0) and the\n` +
    "packages below, linked and minified by rolldown. Each package's licence and notices follow.\n";
  return {
    text: `${header}\n${unique.map((e) => `${"=".repeat(78)}\n${e.text}`).join("\n")}`,
    packages: unique.map((e) => e.key),
  };
}

export async function bundleImage(opts: BundleOptions): Promise<BundleResult> {
  const { single } = opts;
  const out = await build({
    input: Object.fromEntries(Object.entries(opts.entries).map(([name, path]) => [name, resolve(path)])),
    platform: "node",
    ...(single && {
      transform: { target: single.target, define: single.define },
      resolve: { alias: single.alias },
    }),
    // Every warning is a build failure: an import left unresolved would fail only when a pod runs it.
    onLog(level, log) {
      if (level === "warn") throw new Error(`rolldown: ${log.message}`);
    },
    output: {
      format: "esm",
      minify: true,
      entryFileNames: single ? "[name].mjs" : "bin/[name].js",
      chunkFileNames: "lib/[name]-[hash].js",
      ...(single && { codeSplitting: false }),
      // Licences go in THIRD-PARTY-LICENSES.txt, whole.
      comments: { legal: false },
      sourcemap: opts.mapsDir ? "hidden" : false,
    },
    write: false,
  });
  rmSync(opts.outDir, { recursive: true, force: true });
  if (opts.mapsDir) rmSync(opts.mapsDir, { recursive: true, force: true });
  const files: string[] = [];
  const roots = new Set<string>();
  for (const o of out.output) {
    const isMap = o.type === "asset" && o.fileName.endsWith(".map");
    const to = join(isMap && opts.mapsDir ? opts.mapsDir : opts.outDir, o.fileName);
    mkdirSync(dirname(to), { recursive: true });
    writeFileSync(to, o.type === "chunk" ? o.code : o.source);
    if (!isMap) files.push(o.fileName);
    if (o.type === "chunk")
      for (const id of o.moduleIds) {
        const root = packageRoot(id);
        if (root) roots.add(root);
      }
  }
  for (const [name, from] of Object.entries(opts.files ?? {})) {
    const to = join(opts.outDir, name);
    mkdirSync(dirname(to), { recursive: true });
    copyFileSync(from, to);
    files.push(name);
  }
  const { text, packages } = licences(roots, opts.runner ?? `The ${opts.image} image`, opts.code);
  writeFileSync(join(opts.outDir, "THIRD-PARTY-LICENSES.txt"), text);
  files.push("THIRD-PARTY-LICENSES.txt");
  return { files: files.sort(), packages, roots: [...roots].sort() };
}

/** Bundles an image's commands into outDir and prints what it wrote; the CLI of both bundle scripts. */
export async function bundleCommand(opts: BundleOptions): Promise<void> {
  const r = await bundleImage(opts);
  process.stdout.write(
    `bundled ${r.packages.length} packages into ${r.files.map((f) => relative(".", join(opts.outDir, f)).split(sep).join("/")).join(", ")}\n`,
  );
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  await bundleCommand({
    image: "ifp-runtime",
    code: "the runtime and the ifp command",
    entries: { "ifp-runtime": "dist/runtime/bin/ifp-runtime.js", ifp: "dist/runtime/bin/ifp.js" },
    outDir: "dist/bundle/runtime",
    mapsDir: "dist/bundle-maps/runtime",
    // The gRPC binding's contract (runtime/src/a2a/grpc.ts), at ../contract/ of the code in bin/ and lib/.
    files: {
      "contract/a2a.proto": "runtime/src/contract/a2a.proto",
      "contract/google-rpc-status.proto": "runtime/src/contract/google-rpc-status.proto",
    },
  });
}
