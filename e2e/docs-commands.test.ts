// Every command the README and the docs tell a reader to run (the lines of their fenced shell
// blocks, and the inline code spans that are commands) is run: here on a real API server, by the
// test named for it (which must hold it), parsed by its program, or, where this machine cannot,
// listed with the reason; a mention of a command (`helm install`) names the documented command it
// is part of. A command added to the docs and not accounted for here fails the first test; one
// removed from the docs fails it too.
import { execFile, spawn, spawnSync } from "node:child_process";
import { copyFileSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { KubeConfig } from "@kubernetes/client-node";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseFlags } from "../operator/src/commands/main.ts";
import { loadNatsIssuer } from "../operator/src/concerns/nats/runtime-credential.ts";
import { Kube } from "../operator/src/kube/client.ts";
import { CredentialIssuer, generateKeys } from "../operator/src/concerns/nats/credential-issuer.ts";
import { readFlags } from "../runtime/src/cli/runtime.ts";
import { IMAGES } from "./images/build.ts";
import { toolPath } from "./tools/tools.ts";
import { startControlPlane, type ControlPlane } from "./support/controlplane.ts";
import { Kubelet } from "./support/kubelet.ts";
import { freePort } from "./support/ports.ts";
import { tempDir } from "./support/process.ts";
import { type Registry, startRegistry } from "./support/registry.ts";
import { waitFor } from "./support/wait.ts";

/** Where readers find commands. */
const SOURCES = [
  "README.md",
  "e2e/README.md",
  "examples/README.md",
  "charts/ifp-operator/README.md",
  ...readdirSync("docs")
    .filter((f) => f.endsWith(".md"))
    .map((f) => `docs/${f}`),
];
/** The programs a documented command starts with. */
const PROGRAMS =
  /^(npm|npx|kubectl|helm|ifp-runtime|ifp-operator|ifp|node|curl|docker|kind|ctr|openssl|go|nats|crane|cosign|syft)\s/;

/** The programs an inline code span that is a command starts with. */
const SPAN_PROGRAMS = /^(kubectl|helm|npm|npx|node|ctr|kind|docker|crane|sha256sum|cosign) /;

/** The command lines of a Markdown text's fenced shell blocks: continuations joined, comments and prompts dropped. */
export function documentedCommands(markdown: string): string[] {
  const out: string[] = [];
  for (const m of markdown.matchAll(/^```(\w*)\n([\s\S]*?)^```/gm)) {
    if (!["", "sh", "bash", "shell", "console"].includes(m[1]!)) continue;
    const joined = m[2]!.replace(/\\\n\s*/g, "");
    for (const raw of joined.split("\n")) {
      const line = raw
        .replace(/^\s*\$\s+/, "")
        .replace(/\s+#\s.*$/, "")
        .trim();
      // Environment assignments before the program (NAME=value …) belong to the command.
      if (PROGRAMS.test(line.replace(/^([A-Z_][A-Z0-9_]*=\S*\s+)+/, ""))) out.push(line.replace(/\s+/g, " "));
    }
  }
  return out;
}

/**
 * The inline code spans of a Markdown text (outside its fenced blocks) that are commands, each
 * on one line, a table cell's `\|` read as `|`.
 */
export function documentedSpans(markdown: string): string[] {
  const text = markdown.replace(/^```[^\n]*\n[\s\S]*?^```/gm, "");
  const out: string[] = [];
  for (const m of text.matchAll(/(`+)([^`][\s\S]*?)\1(?!`)/g)) {
    const span = m[2]!
      .replace(/\s*\n\s*/g, " ")
      .replace(/\\\|/g, "|")
      .trim();
    if (SPAN_PROGRAMS.test(span)) out.push(span);
  }
  return out;
}

type Check =
  /** Run in this file, on its control plane, by the walk-through below (which must run each). */
  | { here: true }
  /**
   * Parsed by the program's own parser: the documented form is accepted as written (`ifp`: run
   * against a relay that is not there, it fails on the connection, not on its arguments;
   * `images`: the image names are the ones e2e/images/build.ts builds).
   */
  | { flags: "runtime" | "operator" | "ifp" | "images" }
  /** Run by another test, which holds each of these strings where it runs it. */
  | { by: string; holds: string[] }
  /** A mention of a command (its words, in order, within it) documented in full and checked as this one. */
  | { part: string }
  /** Not run on this machine, and why. */
  | { not: string };

const KEYLESS =
  "signs keyless: needs GitHub's OIDC token and Sigstore's Fulcio and Rekor, which only the public CI's release workflow reaches (its publish step verifies so, e2e/release/sign.ts verifyImage); the key-signed lines are run by e2e/release/release.test.ts";
const COSIGN_ATTACH: Check = {
  by: "e2e/release/release.test.ts",
  holds: ['installBlock("cosign attach", registry.host)', "expect(r.code, `${line}\\n${r.stderr}`).toBe(0);"],
};
const COSIGN_VERIFY: Check = {
  by: "e2e/release/release.test.ts",
  holds: [
    'installBlock("cosign verify --key", registry.host)',
    "sh(line, work, cosignEnv)",
    "expect(verifiedDigests(kind, r.stdout), line).toEqual([recorded(m[2]!)]);",
  ],
};

const CHECKS: Record<string, Check> = {
  "npm ci": { by: ".ci/run", holds: ["npm ci"] },
  "npm test": { by: ".ci/run", holds: ["npm test"] },
  "npm start": { by: "e2e/support/local-stack.ts", holds: ['spawnProcess("npm start", "npm", ["start"'] },
  'npx ifp send --from-key ~/.local/state/ifp-operator/stack/bob.key --from bob-agent --to https://localhost:8443 --text "Hello from Bob\'s agent" --ca-file ~/.local/state/ifp-operator/stack/ca.crt':
    {
      by: "e2e/local-stack.test.ts",
      holds: ['execFile("sh", ["-c", command]', "Hello from Bob's agent"],
    },
  // The path a user takes on a cluster: run here up to what needs running pods.
  "helm install ifp charts/ifp-operator -n ifp-system --create-namespace --set image.repository=registry.example/ifp-operator --set image.tag=0.1.0 --set runtimeImage.repository=registry.example/ifp-runtime --set runtimeImage.tag=0.1.0":
    { here: true },
  "helm install ifp charts/ifp-operator --namespace ifp-system --create-namespace": { here: true },
  "kubectl apply -f examples/namespaces.yaml": { here: true },
  "helm install ifp charts/ifp-operator --namespace ifp-system --create-namespace --set 'watchNamespaces={ifp-alice,ifp-bob,ifp-relay}'":
    { here: true },
  "kubectl apply -f examples/": { here: true },
  "kubectl get agents.ifp.dev,relays.ifp.dev -A": { here: true },
  "helm upgrade ifp charts/ifp-operator -n ifp-system --reset-then-reuse-values": { here: true },
  // A release (docs/install.md): made by the release test, installed from its file by the real-node test.
  "npm run release -- 0.1.0": {
    by: "e2e/release/release.test.ts",
    holds: ["release({ version, out", 'describe("npm run release"'],
  },
  "npm sbom": { by: "e2e/release/release.ts", holds: ['"sbom", "--sbom-format", "cyclonedx", "--package-lock-only"'] },
  "helm lint --strict": { by: "e2e/release/release.ts", holds: ['run(helm, ["lint", "--strict", chart]);'] },
  "npm run release -- VERSION": { by: "package.json", holds: ['"release": "node e2e/release/release.ts"'] },
  "npm run release -- 0.2.0 --draft-changelog": {
    by: "e2e/release/release.test.ts",
    holds: ['"--draft-changelog"', "withDraft("],
  },
  "helm install ifp ifp-operator-0.1.0.tgz -n ifp-system --create-namespace --set global.imageRegistry=registry.example":
    {
      // The packaged file rendered with the same words (the real node installs it from a registry).
      by: "e2e/release/release.test.ts",
      holds: ['["template", "ifp", tgz, "-n", "ifp-system", "--set", "global.imageRegistry=registry.example"]'],
    },
  // Checking a release, and pushing it to a registry (docs/install.md): the release test runs the
  // blocks as written against `crane registry serve` on loopback (helm with --plain-http).
  "sha256sum -c SHA256SUMS": {
    by: "e2e/release/release.test.ts",
    holds: ['spawnSync("sha256sum", ["-c", "SHA256SUMS"]'],
  },
  "npm run release -- --verify dist/0.1.0": {
    by: "e2e/release/release.test.ts",
    holds: ['["e2e/release/release.ts", "--verify", copy]', "verifyRelease(copy)"],
  },
  "npm run release -- --verify dist/VERSION": {
    by: "e2e/release/release.ts",
    holds: ['const verify = flag("--verify");'],
  },
  "npm run release -- --verify DIR": {
    by: "e2e/release/release.test.ts",
    holds: ['["e2e/release/release.ts", "--verify", copy]'],
  },
  "sha256sum -c": { part: "sha256sum -c SHA256SUMS" },
  "helm pull": {
    by: "e2e/release/release.test.ts",
    holds: ["`helm pull ${chartRef} --version ${version} -d ${pulled} --plain-http`"],
  },
  "npm run tools -- crane": { by: "e2e/support/registry.ts", holds: ['toolPath("crane")'] },
  "crane manifest registry.example/ifp-dev/ifp-runtime:0.1.0": {
    by: "e2e/release/release.test.ts",
    holds: ["const served = await sh(`crane manifest ${ref}`, work);", "expect(served.stdout).toBe(inArchive"],
  },
  // The images' scan (docs/install.md): the release test runs the block on the release it makes.
  "npm run tools -- syft": { by: "e2e/release/release.test.ts", holds: ['toolPath("syft")'] },
  ...Object.fromEntries(
    ["ifp-operator", "ifp-runtime", "ifp-example-app"].map((name) => [
      `syft scan oci-archive:${name}-0.1.0.oci.tar`,
      {
        by: "e2e/release/release.test.ts",
        holds: ['installBlock("syft scan", "registry.example")', "expect(scanned, img.name).toEqual(locked);"],
      },
    ]),
  ),
  "npm run images:lock": { by: "e2e/images/debian.test.ts", holds: ['refreshLock(join(dir, "lock.json")'] },
  "crane push ifp-operator-0.1.0 registry.example/ifp-dev/ifp-operator:0.1.0": {
    by: "e2e/release/release.test.ts",
    holds: ['installBlock("crane push", registry.host)', "expect(r.code, `${line}\\n${r.stderr}`).toBe(0);"],
  },
  "crane push ifp-runtime-0.1.0 registry.example/ifp-dev/ifp-runtime:0.1.0": {
    by: "e2e/release/release.test.ts",
    holds: ['installBlock("crane push", registry.host)', "expect([...pushed].sort())"],
  },
  "crane push ifp-example-app-0.1.0 registry.example/ifp-dev/ifp-example-app:0.1.0": {
    by: "e2e/release/release.test.ts",
    holds: ['installBlock("crane push", registry.host)', "expect([...pushed].sort())"],
  },
  "crane digest registry.example/ifp-dev/ifp-operator:0.1.0": {
    by: "e2e/release/release.test.ts",
    holds: ["if (digest) expect(r.stdout.trim(), line).toBe(recorded(digest[1]!));"],
  },
  "crane digest registry.example/ifp-dev/ifp-runtime:0.1.0": {
    by: "e2e/release/release.test.ts",
    holds: ["if (digest) expect(r.stdout.trim(), line).toBe(recorded(digest[1]!));"],
  },
  "crane registry serve": {
    by: "e2e/support/registry.ts",
    holds: ['["registry", "serve", "--address", "127.0.0.1:0", "--disk", dir]'],
  },
  "crane push": { part: "crane push ifp-operator-0.1.0 registry.example/ifp-dev/ifp-operator:0.1.0" },
  "crane digest": { part: "crane digest registry.example/ifp-dev/ifp-operator:0.1.0" },
  "crane copy docker.io/library/nats:2.12.15-alpine registry.example/nats:2.12.15-alpine": {
    not: "copies from Docker Hub, which the tests never reach; crane's pushes keeping digests are run by e2e/release/release.test.ts",
  },
  "crane copy": { part: "crane copy docker.io/library/nats:2.12.15-alpine registry.example/nats:2.12.15-alpine" },
  "crane digest registry.example/nats:2.12.15-alpine": {
    not: "a mirror of Docker Hub's image; the same command on the release's images is run by e2e/release/release.test.ts",
  },
  "helm push ifp-operator-0.1.0.tgz oci://registry.example/charts": {
    by: "e2e/release/release.test.ts",
    holds: ['installBlock("helm push", registry.host)', '"helm push",', "Pushed: ${registry.host}/charts/ifp-operator"],
  },
  "helm show chart oci://registry.example/charts/ifp-operator --version 0.1.0": {
    by: "e2e/release/release.test.ts",
    holds: ['"helm show",', 'expect(shown).toMatchObject({ name: "ifp-operator", version, appVersion: version });'],
  },
  "helm template ifp oci://registry.example/charts/ifp-operator --version 0.1.0 -n ifp-system --set global.imageRegistry=registry.example":
    { by: "e2e/release/release.test.ts", holds: ['"helm template",', "(await run(lines[2]!)).stdout"] },
  "helm show chart": { part: "helm show chart oci://registry.example/charts/ifp-operator --version 0.1.0" },
  "helm template": {
    part: "helm template ifp oci://registry.example/charts/ifp-operator --version 0.1.0 -n ifp-system --set global.imageRegistry=registry.example",
  },
  // Installed here from a registry on loopback (with --plain-http) holding the checkout's chart;
  // e2e/release/release.test.ts renders the release's chart from its registry with these words.
  "helm install ifp oci://registry.example/charts/ifp-operator --version 0.1.0 -n ifp-system --create-namespace --set global.imageRegistry=registry.example":
    { here: true },
  "helm upgrade ifp oci://registry.example/charts/ifp-operator --version 0.2.0 -n ifp-system --reset-then-reuse-values":
    {
      not: "a release 0.2.0 is not made here; e2e/release/release.test.ts pushes and reads back the chart of this one from a registry, the same upgrade of the chart from the checkout is run here, and e2e/chart-upgrade.test.ts upgrades to a newer chart",
    },
  "kubectl -n ifp-system rollout status deployment/ifp-ifp-operator": { by: "e2e/node.test.ts", holds: ['"--wait"'] },
  "kubectl -n ifp-system rollout status statefulset/ifp-ifp-operator-nats": {
    by: "e2e/node.test.ts",
    holds: ['"--wait"'],
  },
  "helm test ifp -n ifp-system": { by: "e2e/node.test.ts", holds: ['helm(["test", RELEASE, "-n", SYSTEM'] },
  "kubectl -n ifp-bob logs deployment/bob -c app": {
    by: "e2e/node.test.ts",
    holds: ['"logs", p.metadata.name, "-c", "app"'],
  },
  "kubectl -n team get configmap alice-trust -o jsonpath='{.data.ca\\.crt}' > install-ca.crt": {
    by: "e2e/node.test.ts",
    holds: ['"get", "configmap", "dave-trust"', '?.data?.["ca.crt"]'],
  },
  "npx ifp discover https://alice.team.svc --ca-file install-ca.crt": {
    by: "runtime/test/cli/ifp.test.ts",
    holds: ['ifp("discover", url, "--ca-file"'],
  },
  "npx ifp check https://agent.example": {
    by: "runtime/test/cli/check.test.ts",
    holds: ['ifp("check", `https://localhost:${port}`'],
  },
  "npx ifp check https://agent.example --key my.key --from my-agent": {
    by: "runtime/test/cli/check.test.ts",
    holds: ['"--key", keyFile, "--from", checker.agentId'],
  },
  "npx ifp check https://relay.example --relay --key my.key --from my-agent": {
    by: "runtime/test/cli/check.test.ts",
    holds: ['ifp("check", baseUrl(relay), "--relay", "--key", keyFile, "--from"'],
  },
  // docs/conformance.md, against npm start
  "npx ifp keygen --out kit.key": {
    by: "e2e/local-stack-check.test.ts",
    holds: ['ifp("keygen", "--out", kitKey)'],
  },
  "npx ifp check https://localhost:8443 --strict --ca-file $S/ca.crt --key kit.key --from https://localhost:9443 --inbox-port 9443 --inbox-cert $S/tls.crt --inbox-key $S/tls.key --local-api http://127.0.0.1:8543 --send-wait 75":
    {
      by: "e2e/local-stack-check.test.ts",
      holds: [
        '"--from",\n        `https://localhost:${inboxPort}`,\n        "--inbox-port",',
        '"--local-api",\n        `http://127.0.0.1:${base + 100}`,',
        '"--send-wait",\n        "75",',
      ],
    },
  "npx ifp check https://localhost:8445 --relay --strict --ca-file $S/ca.crt --key $S/bob.key --from bob-agent --inbox-cert $S/tls.crt --inbox-key $S/tls.key":
    {
      by: "e2e/local-stack-check.test.ts",
      holds: [
        '`https://localhost:${base + 2}`,\n        "--relay",',
        'join(stateDir, "bob.key"),\n        "--from",\n        "bob-agent",',
      ],
    },
  "npx ifp check https://localhost:8443 --ca-file ca.crt --only inbox --json": {
    by: "runtime/test/cli/check.test.ts",
    holds: ['"--json", "--only"'],
  },
  // examples/README.md
  "kubectl -n ifp-alice wait --for=condition=Ready agent/alice --timeout=5m": {
    by: "e2e/node.test.ts",
    holds: ["the operator makes every Agent and Relay Ready", 'c.type === "Ready")?.status === "True"'],
  },
  "kubectl -n ifp-bob wait --for=condition=Ready agent/bob --timeout=5m": {
    by: "e2e/node.test.ts",
    holds: ["the operator makes every Agent and Relay Ready"],
  },
  "kubectl -n ifp-relay wait --for=condition=Ready relay/relay --timeout=5m": {
    by: "e2e/node.test.ts",
    holds: ["the operator makes every Agent and Relay Ready"],
  },
  "kubectl -n ifp-alice logs deployment/alice -c app": {
    by: "e2e/node.test.ts",
    holds: ['"logs", p.metadata.name, "-c", "app"'],
  },
  'curl --cacert /etc/ifp/trust/ca.crt -H "Authorization: Bearer $(cat /etc/ifp/local-api/token)" -H \'content-type: application/json\' -d \'{"to":"alice-agent","text":"Hello from another pod"}\' https://bob-local-api.ifp-bob.svc:9443/outbox':
    {
      by: "e2e/node.test.ts",
      holds: ['authorization: "Bearer " + process.env.TOKEN', 'process.env.LOCAL_API + "/outbox"'],
    },
  "docker build -f examples/app/Dockerfile -t ghcr.io/ifp-dev/ifp-example-app:0.1.0 .": {
    not: "no Docker engine here; e2e/images/build.ts builds the same Dockerfile's image without one, and `npm run e2e:kind` runs this build where Docker is",
  },
  "IFP_APP_PORT=8080 IFP_LOCAL_API=http://127.0.0.1:8081 node examples/app/main.ts": {
    by: "examples/app/app.test.ts",
    holds: ["spawnProcess(name, process.execPath, [MAIN]", "IFP_APP_PORT"],
  },
  "npx ifp-operator --nats-url nats://nats:4222 --runtime-image ghcr.io/ifp-dev/ifp-runtime:0.1.0": {
    flags: "operator",
  },
  "npx ifp-runtime agent --manifest agent.yaml --port 8443 --tls-cert tls.crt --tls-key tls.key --signing-key signing.key --nats nats://127.0.0.1:4222":
    { flags: "runtime" },
  "ifp-runtime agent --manifest agent.yaml --port 8443 --tls-cert tls.crt --tls-key tls.key --signing-key signing.key --nats nats://127.0.0.1:4222":
    { flags: "runtime" },
  "ifp-runtime relay --manifest relay.yaml --port 8443 --tls-cert tls.crt --tls-key tls.key --nats nats://127.0.0.1:4222 [--ca-file ca.pem]":
    { flags: "runtime" },
  "ifp-runtime agent --manifest=/etc/ifp/manifest/manifest.yaml --port=8443 --metrics-port=9090 --tls-cert=/etc/ifp/tls/tls.crt --tls-key=/etc/ifp/tls/tls.key --nats=<--nats-url> --ca-file=/etc/ifp/trust/ca.crt --signing-key=/etc/ifp/signing/signing.key --encryption-key=/etc/ifp/signing/encryption.key":
    { flags: "runtime" },

  // Inline in the prose. On a cluster: run here, in the walk-through below.
  "helm uninstall ifp -n ifp-system": { here: true },
  "helm uninstall ifp -n ifp-system --no-hooks": { here: true },
  "helm uninstall <release> -n <namespace>": { here: true },
  "kubectl get agents": { here: true },
  "kubectl get agents.ifp.dev": { here: true },
  "kubectl get ifpagent": { here: true },
  "kubectl get relays": { here: true },
  "kubectl get ifp": { here: true },
  "kubectl get ifp -A": { here: true },
  "kubectl explain agents.ifp.dev.spec": { here: true },
  "kubectl describe agents.ifp.dev/<name>": { here: true },
  "kubectl scale agents.ifp.dev/alice --replicas=2": { here: true },
  "kubectl scale agents.ifp.dev/<name> --replicas=3": { here: true },
  "kubectl scale relays.ifp.dev/hub --replicas=2": {
    by: "operator/test/kinds/relay/relay-scale.test.ts",
    holds: ['"scale", "relay/hub", "--replicas=2"', '"scale", "relays.ifp.dev/hub"'],
  },
  // The kubectl plugin (docs/kubectl-plugin.md), run as kubectl runs it against an API server.
  "kubectl ifp status": { by: "operator/test/commands/kubectl-ifp.test.ts", holds: ['plugin(["status"])'] },
  "kubectl ifp --help": { by: "operator/test/commands/kubectl-ifp.test.ts", holds: ['plugin(["--help"])'] },
  "kubectl ifp redrive AGENT (MESSAGE_ID | --all [--limit N])": {
    by: "operator/test/commands/kubectl-ifp.test.ts",
    holds: ['["redrive", "alice", "-n", NS, "msg:01ABC"]', '["redrive", "alice", "-n", NS, "--all", "--limit", "10"]'],
  },
  "kubectl ifp redrive AGENT MESSAGE_ID | --all": {
    by: "operator/test/commands/kubectl-ifp.test.ts",
    holds: ['["redrive", "alice", "-n", NS, "msg:01ABC"]', '["redrive", "alice", "-n", NS, "--all", "--limit", "10"]'],
  },
  "npx ifp redrive MESSAGE_ID --local-api URL": {
    by: "runtime/test/outbound/redrive.test.ts",
    holds: ['ifp("redrive", id!, "--local-api", sender.localApiUrl)', 'ifp("redrive", "--all", "--limit", "1000"'],
  },
  "kubectl ifp describe agent NAME": {
    by: "operator/test/commands/kubectl-ifp.test.ts",
    holds: ['plugin(["describe", "agent", "alice", "-n", NS])'],
  },
  "kubectl ifp report": { by: "operator/test/commands/kubectl-ifp.test.ts", holds: ['plugin(["report", "-o", file])'] },
  // Backup and restore (docs/backup.md): between two installs of real API servers and nats-servers.
  "kubectl -n ifp-system port-forward svc/ifp-ifp-operator-nats 4222:4222": {
    not: "needs the chart's NATS running in a pod on a node; operator/test/commands/backup.test.ts hands the plugin the address of a real nats-server, which is what the port-forward gives it",
  },
  "kubectl ifp backup -o ifp-backup.tar --nats-url nats://127.0.0.1:4222 --nats-server-name ifp-ifp-operator-nats.ifp-system.svc":
    {
      by: "operator/test/commands/backup.test.ts",
      holds: ['plugin(a, ["backup", "-o", archive, "--nats-url", a.nats!.url'],
    },
  "kubectl ifp restore ifp-backup.tar --keys-only": {
    by: "operator/test/commands/backup.test.ts",
    holds: ['plugin(b, ["restore", archive, "--keys-only"])'],
  },
  "kubectl ifp restore ifp-backup.tar --nats-url nats://127.0.0.1:4222 --nats-server-name ifp-ifp-operator-nats.ifp-system.svc":
    {
      by: "operator/test/commands/backup.test.ts",
      holds: ['plugin(b, ["restore", archive, "--nats-url", b.nats!.url'],
    },
  // The plugin of a release, installed by krew and run on Node 20, 22 and 24.
  "kubectl krew install --manifest=ifp.yaml --archive=kubectl-ifp-0.1.0.tar.gz": {
    by: "e2e/release/plugin.test.ts",
    holds: [
      'krew(["install", `--manifest=${join(out, KREW_MANIFEST)}`, `--archive=${archive}`]',
      "krewInstall(join(out, plugin.archive))",
    ],
  },
  "kubectl krew uninstall ifp": { by: "e2e/release/plugin.test.ts", holds: ['krew(["uninstall", "ifp"]'] },
  "kubectl ifp --version": { by: "e2e/release/plugin.test.ts", holds: ['kubectlIfp(path, ["--version"])'] },
  "kubectl ifp version": {
    by: "e2e/version.test.ts",
    holds: ['["kubectl-ifp", "operator/bin/kubectl-ifp.ts", ["version"]]'],
  },
  "kubectl ifp completion bash": {
    by: "e2e/release/plugin.test.ts",
    holds: ['kubectlIfp(path, ["completion", "bash"])'],
  },
  "kubectl ifp completion zsh": {
    by: "operator/test/commands/kubectl-ifp.test.ts",
    holds: ['plugin(["completion", "zsh"])'],
  },
  "kubectl ifp completion bash|zsh": {
    by: "operator/test/commands/kubectl-ifp.test.ts",
    holds: ['plugin(["completion", "bash"])', 'plugin(["completion", "zsh"])'],
  },
  // send and tail exec into an Agent's pod: only the real node runs pods; the API-server test runs them up to the exec.
  'kubectl ifp send AGENT --to AGENT_ID --text "…" [--phase P] [--wait S]': {
    by: "e2e/node.test.ts",
    holds: ['"send",', '"--to",', '"--text",', '"--wait",'],
  },
  "kubectl ifp tail AGENT [--since S] [--count N] [--timeout S]": {
    by: "e2e/node.test.ts",
    holds: ['plugin(["tail", to.doc.metadata.name, "-n", to.namespace, "--since"', '"--count", "1", "--timeout"'],
  },
  // The README's: alice (the first example whose peers name another by URL) to bob.
  'kubectl ifp send alice -n ifp-alice --to bob-agent --text "Hello"': {
    by: "e2e/node.test.ts",
    holds: ['"send",', "from.doc.metadata.name,", "from.namespace,", "to.doc.spec.agentId,"],
  },
  // e2e/README.md's account of that test.
  "kubectl ifp send alice --to bob-agent --text … --wait 120": {
    by: "e2e/node.test.ts",
    holds: ['"send",', "from.doc.metadata.name,", '"--wait",', '"120",'],
  },
  "kubectl ifp tail bob -n ifp-bob": {
    by: "e2e/node.test.ts",
    holds: ['plugin(["tail", to.doc.metadata.name, "-n", to.namespace'],
  },
  "npx node operator/bin/kubectl-ifp.ts status": {
    by: "operator/test/commands/kubectl-ifp.test.ts",
    holds: ["spawnSync(process.execPath, [BIN, ...args]"],
  },
  "npm install -g .": {
    not: "links the package's commands into the machine's global npm prefix; the tests run the same files from the checkout",
  },
  "kubectl auth can-i --list --as=system:serviceaccount:ifp-system:ifp-ifp-operator -n <namespace>": { here: true },
  'kubectl patch agents.ifp.dev <name> -n <ns> --type=json -p \'[{"op":"remove","path":"/metadata/finalizers"}]\'': {
    here: true,
  },
  "kubectl delete agents.ifp.dev,relays.ifp.dev --all -A": { here: true },
  "kubectl -n <ns> delete secret <agent>-signing": { here: true },
  "kubectl -n ifp-system delete secret ifp-ifp-operator-ca ifp-ifp-operator-nats-account ifp-ifp-operator-nats-tls": {
    here: true,
  },
  "kubectl -n ifp-system delete pvc -l app.kubernetes.io/instance=ifp,app.kubernetes.io/component=nats": { here: true },
  "kubectl delete crd agents.ifp.dev relays.ifp.dev": { here: true },
  "kubectl -n ifp-system create secret generic ifp-nats-account --from-literal=account.pub=<A… account key> --from-file=account-signing.seed=<the signing key's seed file>":
    { here: true },
  "npm run tools [-- NAME…]": { here: true },
  "kubectl -n ifp-system logs job/ifp-ifp-operator-uninstall": {
    not: "a pod's log comes from the kubelet that ran it; the uninstall Job's pod runs only in a cluster with nodes (in e2e/chart-upgrade.test.ts e2e/support/kubelet.ts runs it as a process), and its Job is kept only when it failed",
  },
  "kubectl port-forward deploy/<agent> 9090": {
    not: "port-forward streams through the kubelet of a running pod; only e2e/node.test.ts has one, and it reads the runtimes' metrics through Prometheus' annotations, not this way",
  },
  // Inline in the prose, run by other tests.
  "npm run tools": { by: "e2e/support/global-setup.ts", holds: ["const failed = await ensureTools(tools);"] },
  "npx tsc -p tsconfig.build.json": {
    by: "e2e/images/build.ts",
    holds: ["/^npx tsc -p (\\S+)$/", "compileStage(stage, stageContextFiles("],
  },
  "npm run build": { by: "e2e/compiled.test.ts", holds: ["compileTo(out);", 'describe("npm run build"'] },
  "node operator/bundle.ts": {
    by: "e2e/images/build.ts",
    holds: ['["node runtime/bundle.ts", "node operator/bundle.ts"]', "if (isBundleRun(stage.runs[2]))"],
  },
  "node runtime/bundle.ts": {
    by: "e2e/images/build.ts",
    holds: ['["node runtime/bundle.ts", "node operator/bundle.ts"]', "if (isBundleRun(stage.runs[2]))"],
  },
  "npm run gen": { by: "operator/src/crd/generate.test.ts", holds: ["is up to date (npm run gen)"] },
  "npm run e2e": {
    by: "package.json",
    holds: [
      '"e2e": "vitest run e2e/e2e.test.ts"',
      '"test": "npm run typecheck && npm run lint && vitest run --project unit --project suite --project node"',
    ],
  },
  "npm run e2e:node": {
    by: "package.json",
    holds: ['"e2e:node": "vitest run --project node"', '--project suite --project node"'],
  },
  "npm run test:hardening": { by: "runtime/test/system/bad-input.test.ts", holds: ["runHardening("] },
  "npm run test:faults": { by: "runtime/test/system/faults-soak.test.ts", holds: ["runFaults("] },
  "npm run test:cluster": { by: "runtime/test/nats/cluster-node-loss.test.ts", holds: ["runCluster("] },
  "npm run test:faults -- --layout per-agent": {
    by: "runtime/bench/faults.ts",
    holds: ["layout: layoutOf(process.argv.slice(2))"],
  },
  "npm run images": {
    by: "e2e/node.test.ts",
    holds: ["for (const kind of Object.keys(IMAGES).filter(", "images[kind] = buildImage(kind);"],
  },
  "npm run images -- runtime": { flags: "images" },
  "npm run images -- app": { flags: "images" },
  "npm run images [-- runtime|operator|app|nats|pause]": { flags: "images" },
  "npm ci --omit=dev": { by: "e2e/images/build.ts", holds: ['sh("npm", ["ci", "--omit=dev", "--ignore-scripts"'] },
  "npm ci --omit=dev --ignore-scripts": {
    by: "e2e/images/build.ts",
    holds: ['sh("npm", ["ci", "--omit=dev", "--ignore-scripts"'],
  },
  "ctr -n k8s.io images import <archive>": {
    by: "e2e/support/node.ts",
    holds: ['"--namespace", "k8s.io"', 'ctrArgs(["images", "import", image.archive])'],
  },
  "ctr containers info": { by: "e2e/node.test.ts", holds: ['node.ctr(["containers", "info", id])'] },
  "helm install --wait": { by: "e2e/node.test.ts", holds: ['"--wait", "--timeout", "6m"'] },
  "helm rollback": { by: "e2e/chart-upgrade.test.ts", holds: ['helm("rollback", "ifp", "1"'] },
  "helm upgrade --set crds.enabled=true": { by: "e2e/chart-upgrade.test.ts", holds: ['"--set", "crds.enabled=true"'] },
  "helm upgrade --set runtime.natsLayout=isolated": {
    by: "e2e/chart-upgrade.test.ts",
    holds: ['"--set", "runtime.natsLayout=isolated"'],
  },
  "npx vitest run examples/app/app.test.ts": { by: "vitest.config.ts", holds: ['"examples/**/*.test.ts"'] },
  "npx ifp discover https://localhost:8443 --ca-file …/ca.crt": {
    by: "runtime/test/cli/ifp.test.ts",
    holds: ['ifp("discover", url, "--ca-file"'],
  },
  "npx ifp discover URL": { by: "runtime/test/cli/ifp.test.ts", holds: ['ifp("discover", url, "--ca-file"'] },
  "npx ifp check https://localhost:8443 --ca-file …/ca.crt [--key FILE --from AGENT_ID] [--relay]": {
    by: "runtime/test/cli/check.test.ts",
    holds: ['"--key", keyFile, "--from", checker.agentId', 'ifp("check", baseUrl(relay), "--relay"'],
  },
  "npx ifp keygen --out my.key": { by: "runtime/test/cli/ifp.test.ts", holds: ['ifp("keygen", "--out", out)'] },
  "npx ifp keygen --out FILE": { by: "runtime/test/cli/ifp.test.ts", holds: ['ifp("keygen", "--out", out)'] },
  'npx ifp send --from-key FILE --from AGENT_ID --to URL --text "…"': {
    by: "runtime/test/cli/ifp.test.ts",
    holds: ['ifp("send", "--from-key", key, "--from", "pete-cli", "--to"'],
  },
  "npx ifp relay pull|tail RELAY_URL --key FILE --from AGENT_ID": { flags: "ifp" },
  'npx ifp relay publish RELAY_URL --key FILE --from AGENT_ID --to AGENT_ID --text "…"': {
    by: "runtime/test/cli/ifp-relay.test.ts",
    holds: ['ifp("relay", "publish", f.relayUrl, "--key", aliceKey, "--from", alice.agentId, "--to"'],
  },
  // Inline in the prose, not run here.
  "npm run e2e:kind": {
    not: "kind's nodes are Docker containers, and no Docker engine answers here (e2e/kind.ts says so and stops); `npm run e2e` and `npm run e2e:node` take the same path",
  },
  "kind load image-archive <archive>": {
    not: "kind's nodes are Docker containers, and no Docker engine answers here; where one does, e2e/kind.ts loads the images it built with Docker (`kind load docker-image`)",
  },
  "npm run bench:inbox": {
    not: "a benchmark: minutes at full load on every core, whose figures docs/benchmarks.md records; run inside the suite it would measure the tests around it",
  },
  "npm run bench:workers": {
    not: "a benchmark: minutes at full load on both cores, pinned with taskset, whose figures docs/benchmarks.md records; run inside the suite it would measure the tests around it",
  },
  "npm run bench:relay": {
    not: "a benchmark: minutes at full load on every core, whose figures docs/benchmarks.md records; run inside the suite it would measure the tests around it",
  },
  "npm run bench:operator": {
    not: "a benchmark: minutes at full load on every core, whose figures docs/benchmarks.md records; run inside the suite it would measure the tests around it",
  },
  "npm run bench:cache-memory": {
    not: "a benchmark: a control plane, a nats-server and the manager reconciling 200 Agents, whose figures docs/benchmarks.md records; run inside the suite it would measure the tests around it",
  },
  "npm run bench:scale -- --agents 1000,5000,10000 --relays 10 --cluster single,three [--layout per-agent,shared]": {
    not: "a benchmark: tens of minutes at full load on every core, whose figures docs/benchmarks.md records; its core runs at five agents in runtime/test/nats/scale-bench.test.ts",
  },
  "npm run bench:scale": {
    part: "npm run bench:scale -- --agents 1000,5000,10000 --relays 10 --cluster single,three [--layout per-agent,shared]",
  },
  // Mentions of a command documented in full.
  "npm run": { part: "npm run tools" },
  "npm run release": { part: "npm run release -- VERSION" },
  "kubectl ifp": { part: "kubectl ifp status" },
  "kubectl ifp describe": { part: "kubectl ifp describe agent NAME" },
  "kubectl ifp describe agent": { part: "kubectl ifp describe agent NAME" },
  "kubectl ifp redrive": { part: "kubectl ifp redrive AGENT (MESSAGE_ID | --all [--limit N])" },
  "kubectl ifp send": { part: 'kubectl ifp send AGENT --to AGENT_ID --text "…" [--phase P] [--wait S]' },
  "kubectl ifp tail": { part: "kubectl ifp tail AGENT [--since S] [--count N] [--timeout S]" },
  "kubectl ifp tail bob": { part: "kubectl ifp tail bob -n ifp-bob" },
  "kubectl ifp backup": {
    part: "kubectl ifp backup -o ifp-backup.tar --nats-url nats://127.0.0.1:4222 --nats-server-name ifp-ifp-operator-nats.ifp-system.svc",
  },
  "kubectl ifp restore": { part: "kubectl ifp restore ifp-backup.tar --keys-only" },
  "kubectl port-forward": { part: "kubectl -n ifp-system port-forward svc/ifp-ifp-operator-nats 4222:4222" },
  "npx node operator/bin/kubectl-ifp.ts": { part: "npx node operator/bin/kubectl-ifp.ts status" },
  "helm install": { part: "helm install ifp charts/ifp-operator --namespace ifp-system --create-namespace" },
  "helm upgrade": { part: "helm upgrade ifp charts/ifp-operator -n ifp-system --reset-then-reuse-values" },
  "helm test": { part: "helm test ifp -n ifp-system" },
  "helm uninstall": { part: "helm uninstall ifp -n ifp-system" },
  "helm uninstall --no-hooks": { part: "helm uninstall ifp -n ifp-system --no-hooks" },
  "kubectl apply": { part: "kubectl apply -f examples/" },
  "kubectl get": { part: "kubectl get agents" },
  "kubectl delete": { part: "kubectl delete agents.ifp.dev,relays.ifp.dev --all -A" },
  "kubectl logs -c app": { part: "kubectl -n ifp-bob logs deployment/bob -c app" },
  "kubectl auth can-i --list": {
    part: "kubectl auth can-i --list --as=system:serviceaccount:ifp-system:ifp-ifp-operator -n <namespace>",
  },
  "ctr -n k8s.io images import": { part: "ctr -n k8s.io images import <archive>" },
  // Signatures and provenance (docs/install.md): keyless from ghcr.io where the public CI published,
  // by the release's key in the release test's loopback registry, the lines as written.
  "cosign verify ghcr.io/ifp-dev/ifp-operator:0.1.0 --certificate-identity https://github.com/ifp-dev/ifp-operator/.github/workflows/release.yml@refs/tags/v0.1.0 --certificate-oidc-issuer https://token.actions.githubusercontent.com":
    { not: KEYLESS },
  "cosign verify-attestation ghcr.io/ifp-dev/ifp-operator:0.1.0 --type slsaprovenance1 --certificate-identity https://github.com/ifp-dev/ifp-operator/.github/workflows/release.yml@refs/tags/v0.1.0 --certificate-oidc-issuer https://token.actions.githubusercontent.com":
    { not: KEYLESS },
  "cosign verify-blob SHA256SUMS --bundle SHA256SUMS.sigstore.json --certificate-identity https://github.com/ifp-dev/ifp-operator/.github/workflows/release.yml@refs/tags/v0.1.0 --certificate-oidc-issuer https://token.actions.githubusercontent.com":
    { not: KEYLESS },
  "cosign attach signature --payload ifp-operator-0.1.0.payload.json --signature ifp-operator-0.1.0.sig registry.example/ifp-dev/ifp-operator:0.1.0":
    COSIGN_ATTACH,
  "cosign attach attestation --attestation ifp-operator-0.1.0.att.json registry.example/ifp-dev/ifp-operator:0.1.0":
    COSIGN_ATTACH,
  "cosign attach signature --payload ifp-runtime-0.1.0.payload.json --signature ifp-runtime-0.1.0.sig registry.example/ifp-dev/ifp-runtime:0.1.0":
    COSIGN_ATTACH,
  "cosign attach attestation --attestation ifp-runtime-0.1.0.att.json registry.example/ifp-dev/ifp-runtime:0.1.0":
    COSIGN_ATTACH,
  "cosign attach signature --payload ifp-example-app-0.1.0.payload.json --signature ifp-example-app-0.1.0.sig registry.example/ifp-dev/ifp-example-app:0.1.0":
    COSIGN_ATTACH,
  "cosign attach attestation --attestation ifp-example-app-0.1.0.att.json registry.example/ifp-dev/ifp-example-app:0.1.0":
    COSIGN_ATTACH,
  "cosign verify --key cosign.pub --insecure-ignore-tlog=true registry.example/ifp-dev/ifp-operator:0.1.0":
    COSIGN_VERIFY,
  "cosign verify-attestation --type slsaprovenance1 --key cosign.pub --insecure-ignore-tlog=true registry.example/ifp-dev/ifp-operator:0.1.0":
    COSIGN_VERIFY,
  "cosign verify --key cosign.pub --insecure-ignore-tlog=true registry.example/ifp-dev/ifp-runtime:0.1.0":
    COSIGN_VERIFY,
  "cosign verify-attestation --type slsaprovenance1 --key cosign.pub --insecure-ignore-tlog=true registry.example/ifp-dev/ifp-runtime:0.1.0":
    COSIGN_VERIFY,
  "cosign verify --key cosign.pub --insecure-ignore-tlog=true registry.example/ifp-dev/ifp-example-app:0.1.0":
    COSIGN_VERIFY,
  "cosign verify-attestation --type slsaprovenance1 --key cosign.pub --insecure-ignore-tlog=true registry.example/ifp-dev/ifp-example-app:0.1.0":
    COSIGN_VERIFY,
  "cosign verify-blob --key cosign.pub --insecure-ignore-tlog=true --signature SHA256SUMS.sig SHA256SUMS": {
    by: "e2e/release/release.test.ts",
    holds: [
      'lines.find((l) => l.startsWith("cosign verify-blob"))',
      "expect(changed.stderr).toMatch(/invalid signature/);",
    ],
  },
  "cosign verify": {
    part: "cosign verify --key cosign.pub --insecure-ignore-tlog=true registry.example/ifp-dev/ifp-operator:0.1.0",
  },
  "cosign verify-attestation": {
    part: "cosign verify-attestation --type slsaprovenance1 --key cosign.pub --insecure-ignore-tlog=true registry.example/ifp-dev/ifp-operator:0.1.0",
  },
  "cosign copy": {
    not: "copies from ghcr.io, which the tests never reach; the signatures it carries are attached and verified by e2e/release/release.test.ts",
  },
  "cosign sign": { by: "e2e/release/sign.ts", holds: ['cosign(["sign", "--yes", ref]);'] },
  "cosign attest --statement": {
    by: "e2e/release/sign.ts",
    holds: ['cosign(["attest", "--yes", "--type", "slsaprovenance1", "--statement", at(img.provenance), ref]);'],
  },
  "npm run tools -- cosign": { by: "e2e/release/sign.ts", holds: ['toolPath("cosign")'] },
  "npm run tools -- actionlint": { by: "e2e/workflows.test.ts", holds: ['toolPath("actionlint")'] },
  "npm run release -- <version> --key <key> --out <dir>": {
    by: "e2e/release/of-head.ts",
    holds: ['run("npm", ["run", "release", "--", version, "--key", key, "--out", dir]'],
  },
  "cosign generate-key-pair": {
    by: "e2e/release/sign.ts",
    holds: ['cosign(["generate-key-pair", "--output-key-prefix", "cosign"], { cwd: dir });'],
  },
  "npm run release -- --publish <dir> --to <registry>/ifp-dev": {
    by: "e2e/node.test.ts",
    holds: ['run("npm", ["run", "release", "--", "--publish", released.dir, "--to", to]'],
  },
  "npm run release -- --publish": { part: "npm run release -- --publish dist/0.1.0 --to registry.example/ifp-dev" },
  "npm run release -- --publish dist/0.1.0 --to registry.example/ifp-dev": {
    by: "e2e/release/release.test.ts",
    holds: ['cli(["--publish", out, "--to", `${target.host}/ifp-dev`])'],
  },
  "npm run release -- 0.1.0 --ref refs/tags/v0.1.0 --keyless": {
    by: "e2e/release/release.test.ts",
    holds: ["ref: made.commit, keyless: true"],
  },
  "npm run release -- --publish dist/0.1.0 --to ghcr.io/ifp-dev --keyless": {
    by: ".github/workflows/release.yml",
    holds: ['npm run release -- --publish "dist/$VERSION" --to "$REGISTRY" --keyless'],
  },
  "helm push": { part: "helm push ifp-operator-0.1.0.tgz oci://registry.example/charts" },
};

const documented = () => [
  ...new Set(
    SOURCES.flatMap((f) => [
      ...documentedCommands(readFileSync(f, "utf8")),
      ...documentedSpans(readFileSync(f, "utf8")),
    ]),
  ),
];
const squeeze = (s: string) => s.replace(/\s+/g, "");
/** A documented command line as arguments: `[--optional flags]` as given, no shell. */
const argsOf = (command: string) => command.replace(/[[\]]/g, "").split(" ").slice(1);

describe("documented commands", () => {
  it("are each accounted for, and nothing else is", () => {
    const docs = documented();
    expect(
      docs.filter((c) => !(c in CHECKS)),
      "documented but not checked: add them to CHECKS",
    ).toEqual([]);
    expect(
      Object.keys(CHECKS).filter((c) => !docs.includes(c)),
      "checked but no longer documented",
    ).toEqual([]);
  });

  it("that are mentions name a command documented in full and checked", () => {
    for (const [command, check] of Object.entries(CHECKS)) {
      if (!("part" in check)) continue;
      const whole = CHECKS[check.part];
      expect(whole && !("part" in whole), `${command}: ${check.part} is checked in full`).toBe(true);
      // The mention's words, in order, within the whole command.
      const words = check.part.split(" ");
      let at = 0;
      const inOrder = command.split(" ").every((w) => {
        at = words.indexOf(w, at) + 1;
        return at > 0;
      });
      expect(inOrder, `${command} is part of ${check.part}`).toBe(true);
    }
  });

  it("that other tests run are in those tests", () => {
    for (const [command, check] of Object.entries(CHECKS)) {
      if (!("by" in check)) continue;
      // Compared without white space, so that the formatter's line breaks do not matter.
      const text = squeeze(readFileSync(check.by, "utf8"));
      for (const s of check.holds)
        expect(text.includes(squeeze(s)), `${check.by} runs \`${command}\` (holds ${s})`).toBe(true);
    }
  });

  it("parse as their programs take them", async () => {
    const dir = tempDir("ifp-docs-flags-");
    const key = join(dir, "reader.key");
    const ifp = (args: string[]) =>
      new Promise<{ status: number; stderr: string }>((resolve) =>
        execFile(
          process.execPath,
          ["runtime/bin/ifp.ts", ...args],
          { encoding: "utf8", timeout: 30_000 },
          (err, _out, stderr) => resolve({ status: err ? Number((err as { code?: number }).code ?? 1) : 0, stderr }),
        ),
      );
    expect((await ifp(["keygen", "--out", key])).status).toBe(0);
    // Nothing listens there: a command that parsed fails on the connection (1), not on its words (2).
    const nowhere = `https://127.0.0.1:${await freePort()}`;
    for (const [command, check] of Object.entries(CHECKS)) {
      if (!("flags" in check)) continue;
      if (check.flags === "images") {
        const names = command
          .replace(/^npm run images -- |[[\]]|-- /g, "")
          .replace(/^npm run images /, "")
          .split("|");
        expect(
          names.filter((n) => !(n in IMAGES)),
          command,
        ).toEqual([]);
        continue;
      }
      if (check.flags === "ifp") {
        const words = argsOf(command.replace(/^npx /, ""));
        for (const alternative of words.find((w) => w.includes("|"))!.split("|")) {
          const args = words.map((w) =>
            w.includes("|")
              ? alternative
              : w === "FILE"
                ? key
                : w === "AGENT_ID"
                  ? "reader-agent"
                  : /_URL$|^URL$/.test(w)
                    ? nowhere
                    : w,
          );
          const r = await ifp(args);
          expect(r.status, `${command} (${alternative}): ${r.stderr}`).toBe(1);
          expect(r.stderr, command).toMatch(/fetch failed|cannot reach|ECONNREFUSED/);
        }
        continue;
      }
      const line = command.replace(/^npx /, "");
      const args = argsOf(line);
      if (check.flags === "operator") expect(() => parseFlags(args, {}), command).not.toThrow();
      else expect(readFlags(args).mode, command).toBe(line.split(" ")[1]);
    }
    // The parsers are strict: a flag the docs could misspell is refused.
    expect(() => readFlags(["agent", "--manifets", "a.yaml"])).toThrow(/Unknown option/);
    expect(() => parseFlags(["--nats-ulr", "x"], {})).toThrow();
  });

  describe("on a real API server", () => {
    const SYSTEM = "ifp-system";
    let cp: ControlPlane;
    let kubelet: Kubelet;
    /** The uninstall hooks' pods run so far. */
    let hooks: ReturnType<Kubelet["runHookJobs"]>;
    let env: NodeJS.ProcessEnv;
    /** An OCI registry the chart of the checkout is pushed to, for the documented install from one. */
    let registry: Registry;
    beforeAll(async () => {
      registry = await startRegistry("docs");
      const home = tempDir("ifp-helm-home-");
      env = {
        ...process.env,
        HELM_CACHE_HOME: join(home, "cache"),
        HELM_CONFIG_HOME: join(home, "config"),
        HELM_DATA_HOME: join(home, "data"),
      };
      // A new cluster: the chart brings the CRDs. The controller manager makes the pods of the
      // operator's Deployment and NATS's StatefulSet (and NATS's claims); the test plays the
      // kubelet of the operator's pod and the Job controller of the chart's uninstall hook.
      cp = await startControlPlane();
      kubelet = new Kubelet(cp);
      await kubelet.start();
      hooks = kubelet.runHookJobs(SYSTEM);
    }, 300_000);
    afterAll(async () => {
      await kubelet?.stop();
      await cp?.stop();
      await registry?.stop();
    });
    /** A kubeconfig whose context is in `namespace`: a reader's commands without -n act there. */
    const kubeconfigIn = (namespace: string) => {
      const file = join(cp.dir, `kubeconfig-${namespace}`);
      copyFileSync(cp.kubeconfig, file);
      cp.kubectl(["config", "set-context", "--current", `--namespace=${namespace}`, "--kubeconfig", file]);
      return file;
    };
    const ran = new Set<string>();
    /**
     * A documented command, checked `here`, as written (placeholders filled in with `fill`): helm
     * and kubectl against the control plane (in the context's namespace `namespace`), npm in
     * this repository. Not blocking this process, which plays the kubelet meanwhile.
     */
    const doc = (
      command: string,
      opts: { fill?: Record<string, string>; namespace?: string; extraArgs?: string[] } = {},
    ) => {
      const check = CHECKS[command];
      if (!check || !("here" in check)) throw new Error(`\`${command}\` is not a command checked here`);
      ran.add(command);
      let line = command;
      for (const [placeholder, value] of Object.entries(opts.fill ?? {})) line = line.split(placeholder).join(value);
      if (/<[^>]*>|…|\[/.test(line.replace(/\[\{"op".*\}\]/, "")))
        throw new Error(`\`${line}\` still has a placeholder`);
      // Words as the shell splits them: single quotes keep a word whole (and its braces unexpanded).
      const [program, ...args] = (line.match(/'[^']*'|\S+/g) ?? []).map((w) => w.replace(/^'(.*)'$/, "$1"));
      if (program !== "npm") args.push("--kubeconfig", opts.namespace ? kubeconfigIn(opts.namespace) : cp.kubeconfig);
      args.push(...(opts.extraArgs ?? []));
      const bin = program === "helm" ? toolPath("helm") : program!;
      return new Promise<string>((resolve, reject) => {
        const child = spawn(bin, args, { env });
        let out = "";
        let err = "";
        child.stdout.on("data", (d) => (out += d));
        child.stderr.on("data", (d) => (err += d));
        const timer = setTimeout(() => child.kill("SIGKILL"), 120_000);
        child.on("error", reject);
        child.on("close", (code) => {
          clearTimeout(timer);
          if (code === 0) resolve(out);
          else reject(new Error(`\`${line}\` failed (exit ${code}): ${out}${err}`));
        });
      });
    };
    const finalizers = (ns: string) =>
      (cp.json(["-n", ns, "get", "agents.ifp.dev,relays.ifp.dev"]).items as any[]).flatMap((o) =>
        (o.metadata.finalizers ?? []).map((f: string) => `${o.kind}/${o.metadata.name} ${f}`),
      );

    it("install, apply the examples, run the operator, look at them, uninstall and clean up as the docs say", {
      timeout: 420_000,
    }, async () => {
      const operatorArgs = () =>
        cp.json(["-n", SYSTEM, "get", "deployment", "ifp-ifp-operator"]).spec.template.spec.containers[0]
          .args as string[];
      // The four installs are alternatives: with a private registry's images, the chart from an
      // OCI registry, plain (the operator watches its own namespace only), and for the examples;
      // each but the last removed again.
      await doc(
        "helm install ifp charts/ifp-operator -n ifp-system --create-namespace --set image.repository=registry.example/ifp-operator --set image.tag=0.1.0 --set runtimeImage.repository=registry.example/ifp-runtime --set runtimeImage.tag=0.1.0",
      );
      expect(
        cp.json(["-n", SYSTEM, "get", "deployment", "ifp-ifp-operator"]).spec.template.spec.containers[0].image,
      ).toBe("registry.example/ifp-operator:0.1.0");
      // Without the uninstall hook (nothing of the operator's holds a finalizer yet).
      await doc("helm uninstall ifp -n ifp-system --no-hooks");
      // The chart from an OCI registry: the checkout's, packaged and pushed to the loopback
      // registry (plain HTTP), installed by version as the docs say.
      const packaged = tempDir("ifp-docs-chart-");
      const helmRun = (args: string[]) => {
        const r = spawnSync(toolPath("helm"), args, { encoding: "utf8", env });
        expect(r.status, `helm ${args.join(" ")}: ${r.stderr}`).toBe(0);
        return r.stdout;
      };
      helmRun(["package", "charts/ifp-operator", "--destination", packaged]);
      const chartVersion = readdirSync(packaged)[0]!.replace(/^ifp-operator-(.*)\.tgz$/, "$1");
      helmRun(["push", join(packaged, readdirSync(packaged)[0]!), `oci://${registry.host}/charts`, "--plain-http"]);
      await doc(
        "helm install ifp oci://registry.example/charts/ifp-operator --version 0.1.0 -n ifp-system --create-namespace --set global.imageRegistry=registry.example",
        { fill: { "registry.example": registry.host, "0.1.0": chartVersion }, extraArgs: ["--plain-http"] },
      );
      expect(helmRun(["list", "-n", SYSTEM, "--kubeconfig", cp.kubeconfig, "-o", "json"])).toContain(
        `"chart":"ifp-operator-${chartVersion}"`,
      );
      expect(
        cp.json(["-n", SYSTEM, "get", "deployment", "ifp-ifp-operator"]).spec.template.spec.containers[0].image,
      ).toBe(`${registry.host}/ifp-dev/ifp-operator:${chartVersion}`);
      await doc("helm uninstall ifp -n ifp-system --no-hooks");
      expect(cp.tryJson(["-n", SYSTEM, "get", "jobs"])?.items).toEqual([]);
      await doc("helm install ifp charts/ifp-operator --namespace ifp-system --create-namespace");
      expect(operatorArgs()).toContain("--watch-namespaces=ifp-system");
      // With it: the hook's Job ran (here, as its pod would) and deleted the operator's Deployment.
      await doc("helm uninstall ifp -n ifp-system");
      expect(hooks).toHaveLength(1);
      expect(cp.tryJson(["-n", SYSTEM, "get", "deployment", "ifp-ifp-operator"])).toBeUndefined();
      await doc("kubectl apply -f examples/namespaces.yaml");
      await doc(
        "helm install ifp charts/ifp-operator --namespace ifp-system --create-namespace --set 'watchNamespaces={ifp-alice,ifp-bob,ifp-relay}'",
      );
      expect(operatorArgs()).toContain("--watch-namespaces=ifp-system,ifp-alice,ifp-bob,ifp-relay");
      // The operator runs, as its pod would: it sets finalizers and makes Secrets the docs name.
      const operators = kubelet.runPodsOf(
        SYSTEM,
        "app.kubernetes.io/instance=ifp,app.kubernetes.io/component=operator",
        { extraArgs: ["--health-port=0", "--metrics-port=0"] },
      );
      await doc("kubectl apply -f examples/");
      // An Agent with a generated signing key (the examples bring theirs).
      cp.kubectl(
        ["apply", "-f", "-"],
        "apiVersion: ifp.dev/v1alpha1\nkind: Agent\nmetadata: {name: carol, namespace: ifp-alice}\nspec: {agentId: https://carol.example}\n",
      );
      await waitFor(
        "the operator's finalizers, the generated signing key, the install CA and the NATS account",
        () =>
          finalizers("ifp-alice").includes("Agent/alice ifp.dev/jetstream") &&
          cp.tryJson(["-n", "ifp-alice", "get", "secret", "carol-signing"]) &&
          cp.tryJson(["-n", SYSTEM, "get", "secret", "ifp-ifp-operator-ca"]) &&
          cp.tryJson(["-n", SYSTEM, "get", "secret", "ifp-ifp-operator-nats-account"]) &&
          cp.tryJson(["-n", SYSTEM, "get", "secret", "ifp-ifp-operator-nats-tls"]),
        120_000,
        500,
      );
      const listed = await doc("kubectl get agents.ifp.dev,relays.ifp.dev -A");
      for (const name of ["agent.ifp.dev/alice", "agent.ifp.dev/bob", "relay.ifp.dev/"]) expect(listed).toContain(name);
      await doc("helm upgrade ifp charts/ifp-operator -n ifp-system --reset-then-reuse-values");
      expect(
        spawnSync(toolPath("helm"), ["status", "ifp", "-n", SYSTEM, "--kubeconfig", cp.kubeconfig], {
          encoding: "utf8",
          env,
        }).stdout,
      ).toMatch(/REVISION: 2/);

      // Looking at them, in the namespace of the example's Agent or across all.
      for (const command of ["kubectl get agents", "kubectl get agents.ifp.dev", "kubectl get ifpagent"])
        expect(await doc(command, { namespace: "ifp-alice" }), command).toMatch(/^alice\s/m);
      expect(await doc("kubectl get relays", { namespace: "ifp-relay" })).toMatch(/^relay\s/m);
      expect(await doc("kubectl get ifp", { namespace: "ifp-alice" })).toMatch(/^agent\.ifp\.dev\/alice\s/m);
      const all = await doc("kubectl get ifp -A");
      for (const name of ["agent.ifp.dev/alice", "agent.ifp.dev/bob", "agent.ifp.dev/carol", "relay.ifp.dev/relay"])
        expect(all).toContain(name);
      expect(await doc("kubectl explain agents.ifp.dev.spec")).toMatch(/agentId/);
      expect(
        await doc("kubectl describe agents.ifp.dev/<name>", { fill: { "<name>": "alice" }, namespace: "ifp-alice" }),
      ).toMatch(/^Name:\s+alice$/m);
      await doc("kubectl scale agents.ifp.dev/alice --replicas=2", { namespace: "ifp-alice" });
      expect(cp.json(["-n", "ifp-alice", "get", "agents.ifp.dev", "alice"]).spec.replicas).toBe(2);
      await doc("kubectl scale agents.ifp.dev/<name> --replicas=3", {
        fill: { "<name>": "alice" },
        namespace: "ifp-alice",
      });
      expect(cp.json(["-n", "ifp-alice", "get", "agents.ifp.dev", "alice"]).spec.replicas).toBe(3);
      const rights = await doc(
        "kubectl auth can-i --list --as=system:serviceaccount:ifp-system:ifp-ifp-operator -n <namespace>",
        { fill: { "<namespace>": "ifp-alice" } },
      );
      expect(rights).toMatch(/^agents\.ifp\.dev\s.*\bupdate\b/m);

      // Uninstalled with the operator running: its pod stops, releasing every finalizer while
      // its RBAC is still there (the pre-delete hook), and what the docs say stays stays.
      await doc("helm uninstall <release> -n <namespace>", { fill: { "<release>": "ifp", "<namespace>": SYSTEM } });
      expect(hooks).toHaveLength(2);
      for (const h of hooks) expect((await h.done).code).toBe(0);
      expect(operators.length).toBeGreaterThanOrEqual(1);
      for (const o of operators) expect((await o.done).code).toBe(0);
      for (const ns of ["ifp-alice", "ifp-bob", "ifp-relay"]) expect(finalizers(ns), ns).toEqual([]);
      expect(cp.json(["get", "crd", "agents.ifp.dev"]).metadata.name).toBe("agents.ifp.dev");

      // An Agent stuck Terminating with its operator gone (say it was killed): the finalizer by hand.
      cp.kubectl([
        "-n",
        "ifp-alice",
        "patch",
        "agents.ifp.dev",
        "alice",
        "--type=merge",
        "-p",
        '{"metadata":{"finalizers":["ifp.dev/jetstream"]}}',
      ]);
      cp.kubectl(["-n", "ifp-alice", "delete", "agents.ifp.dev", "alice", "--wait=false"]);
      expect(cp.json(["-n", "ifp-alice", "get", "agents.ifp.dev", "alice"]).metadata.deletionTimestamp).toBeTruthy();
      await doc(
        'kubectl patch agents.ifp.dev <name> -n <ns> --type=json -p \'[{"op":"remove","path":"/metadata/finalizers"}]\'',
        { fill: { "<name>": "alice", "<ns>": "ifp-alice" } },
      );
      await waitFor(
        "the Agent to be gone",
        () => cp.tryJson(["-n", "ifp-alice", "get", "agents.ifp.dev", "alice"]) === undefined,
        20_000,
        200,
      );

      // What the release leaves, removed as the docs say.
      await doc("kubectl delete agents.ifp.dev,relays.ifp.dev --all -A");
      expect(cp.json(["get", "agents.ifp.dev,relays.ifp.dev", "-A"]).items).toEqual([]);
      await doc("kubectl -n <ns> delete secret <agent>-signing", { fill: { "<ns>": "ifp-alice", "<agent>": "carol" } });
      await doc(
        "kubectl -n ifp-system delete secret ifp-ifp-operator-ca ifp-ifp-operator-nats-account ifp-ifp-operator-nats-tls",
      );
      const claims = () =>
        cp.json(["-n", SYSTEM, "get", "pvc", "-l", "app.kubernetes.io/instance=ifp,app.kubernetes.io/component=nats"])
          .items as any[];
      expect(claims().length).toBeGreaterThan(0);
      await doc("kubectl -n ifp-system delete pvc -l app.kubernetes.io/instance=ifp,app.kubernetes.io/component=nats");
      expect(claims()).toEqual([]);
      await doc("kubectl delete crd agents.ifp.dev relays.ifp.dev");
      expect(cp.tryJson(["get", "crd", "agents.ifp.dev"])).toBeUndefined();

      // A NATS of one's own: the account Secret as the docs make it is one the operator uses.
      const keys = generateKeys();
      const seedFile = join(tempDir("ifp-docs-nats-"), "signing.seed");
      writeFileSync(seedFile, keys.signing);
      await doc(
        "kubectl -n ifp-system create secret generic ifp-nats-account --from-literal=account.pub=<A… account key> --from-file=account-signing.seed=<the signing key's seed file>",
        {
          fill: {
            "<A… account key>": CredentialIssuer.fromKeys(keys).accountKey,
            "<the signing key's seed file>": seedFile,
          },
        },
      );
      const kc = new KubeConfig();
      kc.loadFromFile(cp.kubeconfig);
      const issuer = await loadNatsIssuer(
        new Kube(kc, pino({ level: "silent" })),
        SYSTEM,
        "ifp-nats-account",
        pino({ level: "silent" }),
      );
      expect(issuer.accountKey).toBe(CredentialIssuer.fromKeys(keys).accountKey);

      // The tool cache, for one tool.
      expect(await doc("npm run tools [-- NAME…]", { fill: { "[-- NAME…]": "-- helm" } })).toMatch(
        /^helm=\/.*\/helm$/m,
      );

      const here = Object.entries(CHECKS)
        .filter(([, c]) => "here" in c)
        .map(([command]) => command);
      expect(
        here.filter((c) => !ran.has(c)),
        "checked here but not run",
      ).toEqual([]);
    });
  });
});
