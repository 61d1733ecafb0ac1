#!/usr/bin/env node
// The project's tool cache: every binary the tests need, built from the Go module proxy
// into a per-user cache keyed by version, so only the first run pays.
//
//   npm run tools                 build whatever is missing, print NAME=/absolute/path lines
//   npm run tools -- nats-server  only the named tools
import { spawn, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import {
  chmodSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { availableParallelism, homedir, tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

export const KUBERNETES_VERSION = "v1.34.4";
const ETCD_VERSION = "v3.6.16";
const COREDNS_VERSION = "v1.14.7";
export const GATEWAY_API_VERSION = "v1.6.3";
export const COSIGN_VERSION = "v2.6.5";
const PAUSE_SOURCE = fileURLToPath(new URL("../node/pause/main.go", import.meta.url));

const A2A_GO03_SOURCE = fileURLToPath(new URL("./a2a-go03/main.go", import.meta.url));
const A2A_GO_VERSION = "v0.3.3";
const CARD_VERIFY_SOURCE = fileURLToPath(new URL("./card-verify/main.go", import.meta.url));
/** go-jose and the RFC 8785 reference implementation, for the card check of another language (card-verify). */
const CARD_VERIFY_MODULES = [
  "github.com/go-jose/go-jose/v4@v4.1.3",
  "github.com/cyberphone/json-canonicalization@v0.0.0-20241213102144-19d51d7fe467",
];
/** Nodes other than the project's and the machine's that the plugin test runs the plugin on (the tool `nodes`). */
export const OTHER_NODES = ["12.22.12", "18.20.8", "22.23.3"];

/** The first 12 hex digits of the SHA-256 of a source file: a tool built from it is keyed by its content. */
function sourceHash(path: string): string {
  return createHash("sha256").update(readFileSync(path)).digest("hex").slice(0, 12);
}

interface ToolSpec {
  /** Directory name in the cache, unique per version. */
  key: string;
  /** Binaries the tool provides (printed as NAME=path). */
  binaries: string[];
  build(outDir: string, workDir: string): void;
  /** About how long its build takes from empty Go caches on two cores, in seconds: ensureTools starts the longest first. */
  coldSeconds: number;
}

export function cacheRoot(): string {
  if (process.env.IFP_TOOLS_CACHE) return process.env.IFP_TOOLS_CACHE;
  const base = process.env.XDG_CACHE_HOME ?? join(homedir(), ".cache");
  return join(base, "ifp-operator", "tools");
}

function run(cmd: string, args: string[], cwd: string, env: Record<string, string> = {}): void {
  const res = spawnSync(cmd, args, {
    cwd,
    stdio: ["ignore", process.stderr, process.stderr],
    env: { ...process.env, CGO_ENABLED: "0", GOFLAGS: "-mod=mod", GOTOOLCHAIN: "local", ...env },
  });
  if (res.error) throw new Error(`${cmd} could not start: ${res.error.message}`);
  if (res.status !== 0) throw new Error(`${cmd} ${args.join(" ")} failed with exit code ${res.status}`);
}

/** `go install module/cmd@version`, for modules whose go.mod has no replace directives. */
function goInstall(pkg: string, version: string, ldflags = "", tags = ""): ToolSpec["build"] {
  return (outDir, workDir) => {
    const args = ["install", "-trimpath"];
    if (ldflags) args.push(`-ldflags=${ldflags}`);
    if (tags) args.push(`-tags=${tags}`);
    run("go", [...args, `${pkg}@${version}`], workDir, { GOBIN: outDir });
  };
}

/**
 * Build main packages of a module whose go.mod relies on replace directives (etcd, Kubernetes):
 * a throwaway wrapper module requires it, carries the needed replaces, and `go build`s the commands.
 */
function wrapperBuild(opts: {
  module: string;
  version: string;
  packages: Record<string, string>; // binary name -> package path
  replaces?: (modFile: string) => string[];
  ldflags?: string;
}): ToolSpec["build"] {
  return (outDir, workDir) => {
    run("go", ["mod", "init", "ifp.dev/tools-wrapper"], workDir);
    run("go", ["mod", "download", "-json", `${opts.module}@${opts.version}`], workDir);
    const modCache = spawnSync("go", ["env", "GOMODCACHE"], { encoding: "utf8" }).stdout.trim();
    const escaped = opts.module.replace(/[A-Z]/g, (c) => `!${c.toLowerCase()}`);
    const modFile = readFileSync(join(modCache, "cache", "download", escaped, "@v", `${opts.version}.mod`), "utf8");
    const replaces = opts.replaces ? opts.replaces(modFile) : [];
    const imports = Object.values(opts.packages)
      .map((p) => `\t_ "${p}"`)
      .join("\n");
    writeFileSync(join(workDir, "tools.go"), `//go:build tools\n\npackage tools\n\nimport (\n${imports}\n)\n`);
    let goMod = readFileSync(join(workDir, "go.mod"), "utf8");
    goMod += `\nrequire ${opts.module} ${opts.version}\n`;
    if (replaces.length) goMod += `\nreplace (\n${replaces.map((r) => `\t${r}`).join("\n")}\n)\n`;
    writeFileSync(join(workDir, "go.mod"), goMod);
    run("go", ["mod", "tidy"], workDir);
    for (const [bin, pkg] of Object.entries(opts.packages)) {
      const args = ["build", "-trimpath", "-o", join(outDir, bin)];
      if (opts.ldflags) args.push(`-ldflags=${opts.ldflags}`);
      run("go", [...args, pkg], workDir);
    }
  };
}

/**
 * Build a main package written here (`main.go` text) in a throwaway module that requires the
 * given module at one version: for programs assembled from a library's packages (CoreDNS with
 * only the plugins the tests use, rather than every cloud provider's SDK).
 */
function wrapperMain(opts: {
  module: string;
  version: string;
  binary: string;
  main: string;
  ldflags?: string;
}): ToolSpec["build"] {
  return (outDir, workDir) => {
    run("go", ["mod", "init", "ifp.dev/tools-wrapper"], workDir);
    writeFileSync(join(workDir, "main.go"), opts.main);
    run("go", ["get", `${opts.module}@${opts.version}`], workDir);
    run("go", ["mod", "tidy"], workDir);
    const args = ["build", "-trimpath", "-o", join(outDir, opts.binary)];
    if (opts.ldflags) args.push(`-ldflags=${opts.ldflags}`);
    run("go", [...args, "."], workDir);
  };
}

/** CoreDNS with the plugins a test cluster's DNS needs: no forwarding, so no query leaves the machine. */
const COREDNS_MAIN = `package main

import (
\t"github.com/coredns/coredns/coremain"

\t_ "github.com/coredns/coredns/plugin/bind"
\t_ "github.com/coredns/coredns/plugin/cache"
\t_ "github.com/coredns/coredns/plugin/errors"
\t_ "github.com/coredns/coredns/plugin/health"
\t_ "github.com/coredns/coredns/plugin/kubernetes"
\t_ "github.com/coredns/coredns/plugin/log"
\t_ "github.com/coredns/coredns/plugin/ready"
)

func main() { coremain.Run() }
`;

/** Kubernetes' staging modules are replaced with their published v0.N.x twins. */
function kubernetesReplaces(modFile: string): string[] {
  const staging = [...modFile.matchAll(/^\s*(k8s\.io\/[\w.-]+) => \.\/staging\/src\/k8s\.io\/[\w.-]+$/gm)].map(
    (m) => m[1]!,
  );
  const v0 = KUBERNETES_VERSION.replace(/^v1\./, "v0.");
  return staging.map((m) => `${m} => ${m} ${v0}`);
}

function kubernetesLdflags(): string {
  const [major, minor] = KUBERNETES_VERSION.replace(/^v/, "").split(".");
  const flags: string[] = ["-s", "-w"];
  for (const pkg of ["k8s.io/component-base/version", "k8s.io/client-go/pkg/version"]) {
    flags.push(
      `-X ${pkg}.gitVersion=${KUBERNETES_VERSION}`,
      `-X ${pkg}.gitMajor=${major}`,
      `-X ${pkg}.gitMinor=${minor}`,
      `-X ${pkg}.gitTreeState=clean`,
      `-X ${pkg}.buildDate=1970-01-01T00:00:00Z`,
    );
  }
  return flags.join(" ");
}

/** Helm's version, and the Kubernetes version `helm template` and `helm lint` assume by default. */
function helmLdflags(version: string): string {
  const [major, minor] = KUBERNETES_VERSION.replace(/^v/, "").split(".");
  return [
    "-s -w",
    `-X helm.sh/helm/v3/internal/version.version=${version}`,
    `-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=${major}`,
    `-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=${minor}`,
    `-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=${major}`,
    `-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=${minor}`,
  ].join(" ");
}

/** Etcd's own go.mod points its sibling modules at ../; use the published ones of the same version. */
function etcdReplaces(modFile: string): string[] {
  return [...modFile.matchAll(/^\s*(go\.etcd\.io\/etcd\/[\w/.-]+) => \.\.\/[\w/.-]+$/gm)].map(
    (m) => `${m[1]} => ${m[1]} ${ETCD_VERSION}`,
  );
}

/**
 * The Gateway API's CRDs (gateway.networking.k8s.io only) of both release channels, from the
 * module's config/crd/ as the Go module proxy serves it: one YAML stream per channel.
 */
function gatewayApiCrds(version: string): ToolSpec["build"] {
  return (outDir, workDir) => {
    const res = spawnSync("go", ["mod", "download", "-json", `sigs.k8s.io/gateway-api@${version}`], {
      cwd: workDir,
      encoding: "utf8",
      env: { ...process.env, GOFLAGS: "-mod=mod", GOTOOLCHAIN: "local" },
    });
    if (res.error) throw new Error(`go could not start: ${res.error.message}`);
    const info = JSON.parse(res.stdout || "{}") as { Dir?: string; Error?: string };
    if (res.status !== 0 || !info.Dir)
      throw new Error(`go mod download sigs.k8s.io/gateway-api@${version} failed: ${info.Error ?? res.stderr}`);
    for (const channel of ["standard", "experimental"]) {
      const dir = join(info.Dir, "config", "crd", channel);
      const files = readdirSync(dir)
        .filter((f) => f.startsWith("gateway.networking.k8s.io_") && f.endsWith(".yaml") && !f.includes("_vap_"))
        .sort();
      if (!files.length) throw new Error(`no CRDs in ${dir}`);
      writeFileSync(
        join(outDir, `${channel}-install.yaml`),
        files.map((f) => readFileSync(join(dir, f), "utf8").replace(/^---\n/, "")).join("\n---\n"),
      );
    }
  };
}

/**
 * The Prometheus Operator's CRDs of the objects the chart renders (PrometheusRule, ServiceMonitor,
 * PodMonitor), from the module's example/prometheus-operator-crd: the chart test applies them to
 * its API server and dry-runs the monitoring objects against their schemas.
 */
function prometheusOperatorCrds(version: string): ToolSpec["build"] {
  return (outDir, workDir) => {
    const module = "github.com/prometheus-operator/prometheus-operator";
    const res = spawnSync("go", ["mod", "download", "-json", `${module}@${version}`], {
      cwd: workDir,
      encoding: "utf8",
      env: { ...process.env, GOFLAGS: "-mod=mod", GOTOOLCHAIN: "local" },
    });
    if (res.error) throw new Error(`go could not start: ${res.error.message}`);
    const info = JSON.parse(res.stdout || "{}") as { Dir?: string; Error?: string };
    if (res.status !== 0 || !info.Dir)
      throw new Error(`go mod download ${module}@${version} failed: ${info.Error ?? res.stderr}`);
    const dir = join(info.Dir, "example", "prometheus-operator-crd");
    writeFileSync(
      join(outDir, "monitoring-crds.yaml"),
      ["prometheusrules", "servicemonitors", "podmonitors"]
        .map((kind) => readFileSync(join(dir, `monitoring.coreos.com_${kind}.yaml`), "utf8").replace(/^---\n/, ""))
        .join("\n---\n"),
    );
  };
}

export const TOOLS: Record<string, ToolSpec> = {
  "nats-server": {
    key: "nats-server-v2.12.15",
    coldSeconds: 32,
    binaries: ["nats-server"],
    build: goInstall("github.com/nats-io/nats-server/v2", "v2.12.15", "-s -w"),
  },
  etcd: {
    key: `etcd-${ETCD_VERSION}`,
    coldSeconds: 31,
    binaries: ["etcd"],
    build: wrapperBuild({
      module: "go.etcd.io/etcd/server/v3",
      version: ETCD_VERSION,
      packages: { etcd: "go.etcd.io/etcd/server/v3" },
      replaces: etcdReplaces,
      ldflags: "-s -w",
    }),
  },
  kubernetes: {
    key: `kubernetes-${KUBERNETES_VERSION}`,
    coldSeconds: 254,
    binaries: ["kube-apiserver", "kube-controller-manager", "kube-scheduler"],
    build: wrapperBuild({
      module: "k8s.io/kubernetes",
      version: KUBERNETES_VERSION,
      packages: {
        "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
        "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
        "kube-scheduler": "k8s.io/kubernetes/cmd/kube-scheduler",
      },
      replaces: kubernetesReplaces,
      ldflags: kubernetesLdflags(),
    }),
  },
  // The node components, from the same module and version as the control plane; a cache entry
  // of their own, so that adding them left the control plane's entry valid.
  "kubernetes-node": {
    key: `kubernetes-node-${KUBERNETES_VERSION}`,
    coldSeconds: 37,
    binaries: ["kubelet", "kube-proxy"],
    build: wrapperBuild({
      module: "k8s.io/kubernetes",
      version: KUBERNETES_VERSION,
      packages: {
        kubelet: "k8s.io/kubernetes/cmd/kubelet",
        "kube-proxy": "k8s.io/kubernetes/cmd/kube-proxy",
      },
      replaces: kubernetesReplaces,
      ldflags: kubernetesLdflags(),
    }),
  },
  coredns: {
    key: `coredns-${COREDNS_VERSION}`,
    coldSeconds: 75,
    binaries: ["coredns"],
    build: wrapperMain({
      module: "github.com/coredns/coredns",
      version: COREDNS_VERSION,
      binary: "coredns",
      main: COREDNS_MAIN,
      ldflags: "-s -w",
    }),
  },
  // The sandbox ("pause") process of every pod on the real test node: e2e/node/pause, built
  // from this repository's source, keyed by its content.
  pause: {
    key: `pause-${sourceHash(PAUSE_SOURCE)}`,
    coldSeconds: 1,
    binaries: ["pause"],
    build: (outDir, workDir) => {
      run("go", ["mod", "init", "ifp.dev/pause"], workDir);
      writeFileSync(join(workDir, "main.go"), readFileSync(PAUSE_SOURCE));
      run("go", ["build", "-trimpath", "-ldflags=-s -w", "-o", join(outDir, "pause"), "."], workDir);
    },
  },
  // The official Go SDK's A2A 0.3 client as a command (e2e/tools/a2a-go03), for the 0.3 test.
  "a2a-go03": {
    key: `a2a-go03-${A2A_GO_VERSION}-${sourceHash(A2A_GO03_SOURCE)}`,
    coldSeconds: 40,
    binaries: ["a2a-go03"],
    build: (outDir, workDir) => {
      run("go", ["mod", "init", "ifp.dev/a2a-go03"], workDir);
      writeFileSync(join(workDir, "main.go"), readFileSync(A2A_GO03_SOURCE));
      run("go", ["get", `github.com/a2aproject/a2a-go@${A2A_GO_VERSION}`], workDir);
      run("go", ["build", "-trimpath", "-ldflags=-s -w", "-o", join(outDir, "a2a-go03"), "."], workDir);
    },
  },
  // An agent card's signatures checked with go-jose and the RFC 8785 reference implementation
  // (e2e/tools/card-verify), for the card test of runtime/test/a2a/a2a.test.ts.
  "card-verify": {
    key: `card-verify-${sourceHash(CARD_VERIFY_SOURCE)}`,
    coldSeconds: 15,
    binaries: ["card-verify"],
    build: (outDir, workDir) => {
      run("go", ["mod", "init", "ifp.dev/card-verify"], workDir);
      writeFileSync(join(workDir, "main.go"), readFileSync(CARD_VERIFY_SOURCE));
      run("go", ["get", ...CARD_VERIFY_MODULES], workDir);
      run("go", ["build", "-trimpath", "-ldflags=-s -w", "-o", join(outDir, "card-verify"), "."], workDir);
    },
  },
  helm: {
    key: `helm-v3.19.5-k8s${KUBERNETES_VERSION}`,
    coldSeconds: 66,
    binaries: ["helm"],
    build: goInstall("helm.sh/helm/v3/cmd/helm", "v3.19.5", helmLdflags("v3.19.5")),
  },
  // kube-linter's module path is not served by the Go module proxy; kube-score is the
  // static checker of rendered manifests that is.
  "kube-score": {
    key: "kube-score-v1.20.0",
    coldSeconds: 20,
    binaries: ["kube-score"],
    build: goInstall("github.com/zegl/kube-score/cmd/kube-score", "v1.20.0", "-s -w"),
  },
  // Prometheus's rule checker and unit tester: the chart's alerts are evaluated by `promtool
  // test rules` (e2e/alerts.test.ts). Prometheus 3.16.0 is module version v0.316.0; built
  // without the service discovery plugins (remove_all_sd), which rule tests never use and which
  // bring every cloud provider's SDK.
  promtool: {
    key: "promtool-v0.316.0-nosd",
    coldSeconds: 93,
    binaries: ["promtool"],
    build: goInstall("github.com/prometheus/prometheus/cmd/promtool", "v0.316.0", "-s -w", "remove_all_sd"),
  },
  // Not a binary: the Gateway API's CRD manifests, for the operator's tests of spec.expose.gateway.
  "gateway-api": {
    key: `gateway-api-${GATEWAY_API_VERSION}`,
    coldSeconds: 1,
    binaries: ["standard-install.yaml", "experimental-install.yaml"],
    build: gatewayApiCrds(GATEWAY_API_VERSION),
  },
  // Not a binary: the Prometheus Operator's CRDs of the chart's monitoring objects.
  "prometheus-operator-crds": {
    key: "prometheus-operator-crds-v0.85.0",
    coldSeconds: 1,
    binaries: ["monitoring-crds.yaml"],
    build: prometheusOperatorCrds("v0.85.0"),
  },
  // An OCI registry client and, with `crane registry serve`, a registry: the release test pushes
  // the release's image archives with it as docs/install.md says, into a registry it serves on
  // loopback.
  crane: {
    key: "crane-v0.22.1",
    coldSeconds: 9,
    binaries: ["crane"],
    build: goInstall("github.com/google/go-containerregistry/cmd/crane", "v0.22.1", "-s -w"),
  },
  // Signs the release's images and attests their provenance (e2e/release/sign.ts); the release
  // test verifies both against its loopback registry as docs/install.md says.
  cosign: {
    key: `cosign-${COSIGN_VERSION}`,
    coldSeconds: 240,
    binaries: ["cosign"],
    build: goInstall(
      "github.com/sigstore/cosign/v2/cmd/cosign",
      COSIGN_VERSION,
      `-s -w -X sigs.k8s.io/release-utils/version.gitVersion=${COSIGN_VERSION}`,
    ),
  },
  // The checker of the GitHub Actions workflows in .github/workflows (e2e/workflows.test.ts).
  actionlint: {
    key: "actionlint-v1.7.12",
    coldSeconds: 20,
    binaries: ["actionlint"],
    build: goInstall(
      "github.com/rhysd/actionlint/cmd/actionlint",
      "v1.7.12",
      "-s -w -X github.com/rhysd/actionlint.version=v1.7.12",
    ),
  },
  // A scanner of images' packages: the release test lists each image archive's OS packages with
  // it, as Trivy, Grype or a registry's scanner would find them, against the release's SBOMs.
  syft: {
    key: "syft-v1.57.1",
    coldSeconds: 240,
    binaries: ["syft"],
    build: goInstall("github.com/anchore/syft/cmd/syft", "v1.57.1", "-s -w -X main.version=1.57.1"),
  },
  kind: {
    key: "kind-v0.33.0",
    coldSeconds: 30,
    binaries: ["kind"],
    build: goInstall("sigs.k8s.io/kind", "v0.33.0", "-s -w"),
  },
  // krew, kubectl's plugin manager, and its manifest validator: the plugin test installs the
  // release's plugin archive with `krew install --manifest --archive` as docs/kubectl-plugin.md
  // says, after the validator checked its manifest.
  krew: {
    key: "krew-v0.4.3",
    coldSeconds: 45,
    binaries: ["krew", "validate-krew-manifest"],
    build: (outDir, workDir) => {
      for (const cmd of ["krew", "validate-krew-manifest"])
        goInstall(`sigs.k8s.io/krew/cmd/${cmd}`, "v0.4.3", "-s -w")(outDir, workDir);
    },
  },
  // Not from the Go module proxy: Node's own binaries as the npm registry serves them (the
  // packages the npm `node` package installs), for the plugin test to run the release's plugin on
  // the Nodes users have: 22 (beside the machine's and the project's), and two older than it
  // allows, which must be refused with one line.
  nodes: {
    key: `nodes-${OTHER_NODES.join("-")}`,
    coldSeconds: 30,
    binaries: OTHER_NODES.map((v) => `node${v.split(".")[0]}`),
    build: (outDir, workDir) => {
      const pkg = `node-${process.platform}-${process.arch}`;
      for (const version of OTHER_NODES) {
        const prefix = join(workDir, version);
        mkdirSync(prefix);
        run(
          "npm",
          ["install", "--no-save", "--no-audit", "--no-fund", "--prefix", prefix, `${pkg}@${version}`],
          workDir,
        );
        copyFileSync(join(prefix, "node_modules", pkg, "bin", "node"), join(outDir, `node${version.split(".")[0]}`));
        chmodSync(join(outDir, `node${version.split(".")[0]}`), 0o755);
      }
    },
  },
  kwok: {
    key: "kwok-v0.8.0",
    coldSeconds: 73,
    binaries: ["kwok"],
    build: goInstall("sigs.k8s.io/kwok/cmd/kwok", "v0.8.0", "-s -w"),
  },
};

/**
 * What the real test node (e2e/support/node.ts) takes from Debian rather than from source: the
 * container runtime, its low-level runtime, the CNI plugins (in /usr/lib/cni), buildah for the
 * images, and the iptables and conntrack tools kube-proxy drives.
 */
export const NODE_PACKAGES = [
  "containerd",
  "runc",
  "containernetworking-plugins",
  "buildah",
  "iptables",
  "nftables",
  "conntrack",
];

/** `apt-get install` of the Debian packages that are missing (after `apt-get update`); needs root. */
export function installDebianPackages(packages: string[]): void {
  const installed = (p: string) =>
    spawnSync("dpkg-query", ["-W", "-f=${Status}", p], { encoding: "utf8" }).stdout === "install ok installed";
  const missing = packages.filter((p) => !installed(p));
  if (!missing.length) return;
  if (process.getuid?.() !== 0)
    throw new Error(`missing Debian packages; as root: apt-get install -y ${missing.join(" ")}`);
  process.stderr.write(`tools: installing Debian packages ${missing.join(" ")}\n`);
  const env = { DEBIAN_FRONTEND: "noninteractive" };
  // Another install on the machine (a second test file's tools, the machine's own updates) may
  // hold dpkg's lock: wait for it rather than fail.
  const wait = ["-o", "DPkg::Lock::Timeout=600"];
  run("apt-get", [...wait, "update", "-q"], "/", env);
  run("apt-get", [...wait, "install", "-y", "-q", "--no-install-recommends", ...missing], "/", env);
}

function toolSpec(name: string): ToolSpec {
  const spec = TOOLS[name];
  if (!spec) throw new Error(`unknown tool ${name}; known: ${Object.keys(TOOLS).join(", ")}`);
  return spec;
}

/** Whether the cache holds every binary of the tool. */
function cached(spec: ToolSpec): boolean {
  return spec.binaries.every((b) => existsSync(join(cacheRoot(), spec.key, b)));
}

/** Absolute paths of a tool's binaries, building it first when the cache lacks it. */
export function ensureTool(name: string): Record<string, string> {
  const spec = toolSpec(name);
  const root = cacheRoot();
  const dir = join(root, spec.key);
  const paths = Object.fromEntries(spec.binaries.map((b) => [b, join(dir, b)]));
  if (cached(spec)) return paths;
  mkdirSync(root, { recursive: true });
  const lock = `${dir}.lock`;
  acquireLock(lock);
  try {
    if (cached(spec)) return paths;
    process.stderr.write(`tools: building ${spec.key} (first run only; cached in ${root})\n`);
    const started = Date.now();
    const staging = mkdtempSync(join(root, `.${spec.key}-`));
    const work = mkdtempSync(join(tmpdir(), `ifp-tools-${name}-`));
    try {
      spec.build(staging, work);
      rmSync(dir, { recursive: true, force: true });
      renameSync(staging, dir);
    } finally {
      rmSync(work, { recursive: true, force: true });
      rmSync(staging, { recursive: true, force: true });
    }
    process.stderr.write(`tools: built ${spec.key} in ${Math.round((Date.now() - started) / 1000)} s\n`);
    return paths;
  } finally {
    rmSync(lock, { recursive: true, force: true });
  }
}

function acquireLock(lock: string): void {
  const deadline = Date.now() + 60 * 60 * 1000;
  for (;;) {
    try {
      mkdirSync(lock);
      writeFileSync(join(lock, "pid"), String(process.pid));
      return;
    } catch {
      let holder = 0;
      try {
        holder = Number(readFileSync(join(lock, "pid"), "utf8"));
      } catch {}
      if (holder && !isAlive(holder)) {
        rmSync(lock, { recursive: true, force: true });
        continue;
      }
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${lock}`);
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 2000);
    }
  }
}

export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

const SELF = fileURLToPath(import.meta.url);

/**
 * Build the missing ones of `names`, several at once (at most `parallel`), each in a process of
 * its own (`node tools.ts NAME`, which takes the tool's lock as ensureTool does), the longest
 * first. One `go build` leaves cores idle while it downloads modules and links: from empty caches
 * on two cores, two at a time built everything in about 9 minutes where one after the other
 * took 11.5. Resolves to the names of those whose build failed (their errors went to stderr).
 */
export async function ensureTools(
  names: string[],
  parallel = Math.min(4, Math.max(2, availableParallelism())),
): Promise<string[]> {
  const queue = names
    .filter((n) => !cached(toolSpec(n)))
    .sort((a, b) => toolSpec(b).coldSeconds - toolSpec(a).coldSeconds);
  const failed: string[] = [];
  const worker = async () => {
    for (let name = queue.shift(); name !== undefined; name = queue.shift()) {
      const code = await new Promise<number | null>((resolve) =>
        spawn(process.execPath, [SELF, name], { stdio: ["ignore", "ignore", "inherit"] })
          .on("error", () => resolve(null))
          .on("close", resolve),
      );
      if (code !== 0) failed.push(name);
    }
  };
  await Promise.all(Array.from({ length: Math.min(parallel, queue.length) }, worker));
  return failed;
}

/** The path of one binary, e.g. toolPath("kubernetes", "kube-apiserver"). */
export function toolPath(name: string, binary = name): string {
  const p = ensureTool(name)[binary];
  if (!p) throw new Error(`tool ${name} has no binary ${binary}`);
  return p;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const wanted = process.argv.slice(2);
  // kind is only for machines with a Docker engine (npm run e2e:kind builds it there); the real
  // node's components only where e2e/node.test.ts runs (the tests' global set-up builds them).
  const nodeOnly = new Set(["kind", "kubernetes-node", "coredns", "pause"]);
  const names = wanted.length ? wanted : Object.keys(TOOLS).filter((t) => !nodeOnly.has(t));
  // Several named: built side by side, each by a process of its own; one: built here.
  // An unknown name is reported by ensureTool below, with the known ones.
  const failures = names.length > 1 ? await ensureTools(names.filter((n) => n in TOOLS)) : [];
  let failed = failures.length > 0;
  for (const name of names.filter((n) => !failures.includes(n))) {
    try {
      for (const [bin, path] of Object.entries(ensureTool(name))) process.stdout.write(`${bin}=${path}\n`);
    } catch (err) {
      failed = true;
      process.stderr.write(`tools: ${name}: ${(err as Error).message}\n`);
    }
  }
  process.exitCode = failed ? 1 : 0;
}
