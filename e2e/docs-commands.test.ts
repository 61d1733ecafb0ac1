// Every command the README and the docs tell a reader to run (the lines of their fenced shell
// blocks) is run: here on a real API server, by the test named for it (which must hold it), or,
// where this machine cannot, listed with the reason. A command added to the docs and not
// accounted for here fails the first test; one removed from the docs fails it too.
import { spawnSync } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseFlags } from "../operator/src/main.ts";
import { readFlags } from "../runtime/src/cli/runtime.ts";
import { toolPath } from "./tools/tools.ts";
import { startControlPlane, type ControlPlane } from "./support/controlplane.ts";
import { tempDir } from "./support/process.ts";

/** Where readers find commands. */
const SOURCES = ["README.md", "e2e/README.md", "examples/README.md", "charts/ifp-operator/README.md", ...readdirSync("docs").filter((f) => f.endsWith(".md")).map((f) => `docs/${f}`)];
/** The programs a documented command starts with. */
const PROGRAMS = /^(npm|npx|kubectl|helm|ifp-runtime|ifp-operator|ifp|node|curl|docker|kind|ctr|openssl|go|nats)\s/;

/** The command lines of a Markdown text's fenced shell blocks: continuations joined, comments and prompts dropped. */
export function documentedCommands(markdown: string): string[] {
  const out: string[] = [];
  for (const m of markdown.matchAll(/^```(\w*)\n([\s\S]*?)^```/gm)) {
    if (!["", "sh", "bash", "shell", "console"].includes(m[1]!)) continue;
    const joined = m[2]!.replace(/\\\n\s*/g, "");
    for (const raw of joined.split("\n")) {
      const line = raw.replace(/^\s*\$\s+/, "").replace(/\s+#\s.*$/, "").trim();
      // Environment assignments before the program (NAME=value …) belong to the command.
      if (PROGRAMS.test(line.replace(/^([A-Z_][A-Z0-9_]*=\S*\s+)+/, ""))) out.push(line.replace(/\s+/g, " "));
    }
  }
  return out;
}

type Check =
  /** Run in this file, on its control plane (in the order of the table). */
  | { here: true }
  /** Its flags are parsed by the program's own parser: the documented form is accepted as written. */
  | { flags: "runtime" | "operator" }
  /** Run by another test, which holds each of these strings where it runs it. */
  | { by: string; holds: string[] }
  /** Not run on this machine, and why. */
  | { not: string };

const CHECKS: Record<string, Check> = {
  "npm ci": { by: ".ci/run", holds: ["npm ci"] },
  "npm test": { by: ".ci/run", holds: ["npm test"] },
  "npm start": { by: "e2e/local-stack.test.ts", holds: ['spawnProcess("npm start", "npm", ["start"'] },
  "npx ifp send --from-key ~/.local/state/ifp-operator/stack/bob.key --from bob-agent --to https://localhost:8443 --text \"Hello from Bob's agent\" --ca-file ~/.local/state/ifp-operator/stack/ca.crt": {
    by: "e2e/local-stack.test.ts",
    holds: ["npx ifp send", "the ready-to-paste command"],
  },
  // The path a user takes on a cluster: run here up to what needs running pods.
  "helm install ifp charts/ifp-operator -n ifp-system --create-namespace --set image.repository=registry.example/ifp-operator --set image.tag=0.1.0 --set runtimeImage.repository=registry.example/ifp-runtime --set runtimeImage.tag=0.1.0": { here: true },
  "helm install ifp charts/ifp-operator --namespace ifp-system --create-namespace": { here: true },
  "kubectl apply -f examples/namespaces.yaml": { here: true },
  "helm install ifp charts/ifp-operator --namespace ifp-system --create-namespace --set 'watchNamespaces={ifp-alice,ifp-bob,ifp-relay}'": { here: true },
  "kubectl apply -f examples/": { here: true },
  "kubectl get agents.ifp.dev,relays.ifp.dev -A": { here: true },
  "helm upgrade ifp charts/ifp-operator -n ifp-system --reuse-values": { here: true },
  "kubectl -n ifp-system rollout status deployment/ifp-ifp-operator": { by: "e2e/node.test.ts", holds: ['"--wait"'] },
  "kubectl -n ifp-system rollout status statefulset/ifp-ifp-operator-nats": { by: "e2e/node.test.ts", holds: ['"--wait"'] },
  "helm test ifp -n ifp-system": { by: "e2e/node.test.ts", holds: ['helm(["test", RELEASE, "-n", SYSTEM'] },
  "kubectl -n ifp-bob logs deployment/bob -c app": { by: "e2e/node.test.ts", holds: ['"logs", p.metadata.name, "-c", "app"'] },
  "kubectl -n team get configmap alice-trust -o jsonpath='{.data.ca\\.crt}' > install-ca.crt": { by: "e2e/node.test.ts", holds: ['"get", "configmap", "dave-trust"', '?.data?.["ca.crt"]'] },
  "npx ifp discover https://alice.team.svc --ca-file install-ca.crt": { by: "runtime/test/ifp-cli.test.ts", holds: ['ifp("discover", url, "--ca-file"'] },
  "npx ifp check https://agent.example": { by: "runtime/test/check.test.ts", holds: ['ifp("check", `https://localhost:${port}`'] },
  "npx ifp check https://agent.example --key my.key --from my-agent": { by: "runtime/test/check.test.ts", holds: ['"--key", keyFile, "--from", checker.agentId'] },
  "npx ifp check https://relay.example --relay --key my.key --from my-agent": { by: "runtime/test/check.test.ts", holds: ['ifp("check", baseUrl(relay), "--relay", "--key", keyFile, "--from"'] },
  "npx ifp check https://localhost:8443 --ca-file ca.crt --only inbox --json": { by: "runtime/test/check.test.ts", holds: ['"--json", "--only"'] },
  // examples/README.md
  "kubectl -n ifp-alice wait --for=condition=Ready agent/alice --timeout=5m": { by: "e2e/node.test.ts", holds: ["the operator makes every Agent and Relay Ready", 'c.type === "Ready")?.status === "True"'] },
  "kubectl -n ifp-bob wait --for=condition=Ready agent/bob --timeout=5m": { by: "e2e/node.test.ts", holds: ["the operator makes every Agent and Relay Ready"] },
  "kubectl -n ifp-relay wait --for=condition=Ready relay/relay --timeout=5m": { by: "e2e/node.test.ts", holds: ["the operator makes every Agent and Relay Ready"] },
  "kubectl -n ifp-alice logs deployment/alice -c app": { by: "e2e/node.test.ts", holds: ['"logs", p.metadata.name, "-c", "app"'] },
  "curl --cacert /etc/ifp/trust/ca.crt -H \"Authorization: Bearer $(cat /etc/ifp/local-api/token)\" -H 'content-type: application/json' -d '{\"to\":\"alice-agent\",\"text\":\"Hello from another pod\"}' https://bob-local-api.ifp-bob.svc:9443/outbox": {
    by: "e2e/node.test.ts",
    holds: ['authorization: "Bearer " + process.env.TOKEN', 'process.env.LOCAL_API + "/outbox"'],
  },
  "docker build -f examples/app/Dockerfile -t ghcr.io/ifp-dev/ifp-example-app:0.1.0 .": { not: "no Docker engine here; e2e/images/build.ts builds the same Dockerfile's image without one, and `npm run e2e:kind` runs this build where Docker is" },
  "IFP_APP_PORT=8080 IFP_LOCAL_API=http://127.0.0.1:8081 node examples/app/main.ts": { by: "examples/app/app.test.ts", holds: ["spawnProcess(name, process.execPath, [MAIN]", "IFP_APP_PORT"] },
  "npx ifp-operator --nats-url nats://nats:4222 --runtime-image ghcr.io/ifp-dev/ifp-runtime:0.1.0": { flags: "operator" },
  "ifp-runtime agent --manifest agent.yaml --port 8443 --tls-cert tls.crt --tls-key tls.key --signing-key signing.key --nats nats://127.0.0.1:4222": { flags: "runtime" },
  "ifp-runtime relay --manifest relay.yaml --port 8443 --tls-cert tls.crt --tls-key tls.key --nats nats://127.0.0.1:4222 [--ca-file ca.pem]": { flags: "runtime" },
  "ifp-runtime agent --manifest=/etc/ifp/manifest/manifest.yaml --port=8443 --metrics-port=9090 --tls-cert=/etc/ifp/tls/tls.crt --tls-key=/etc/ifp/tls/tls.key --nats=<--nats-url> --ca-file=/etc/ifp/trust/ca.crt --signing-key=/etc/ifp/signing/signing.key --encryption-key=/etc/ifp/signing/encryption.key": { flags: "runtime" },
};

const documented = () => [...new Set(SOURCES.flatMap((f) => documentedCommands(readFileSync(f, "utf8"))))];
/** A documented command line as arguments: `[--optional flags]` as given, no shell. */
const argsOf = (command: string) => command.replace(/[[\]]/g, "").split(" ").slice(1);

describe("documented commands", () => {
  it("are each accounted for, and nothing else is", () => {
    const docs = documented();
    expect(docs.filter((c) => !(c in CHECKS)), "documented but not checked: add them to CHECKS").toEqual([]);
    expect(Object.keys(CHECKS).filter((c) => !docs.includes(c)), "checked but no longer documented").toEqual([]);
  });

  it("that other tests run are in those tests", () => {
    for (const [command, check] of Object.entries(CHECKS)) {
      if (!("by" in check)) continue;
      const text = readFileSync(check.by, "utf8");
      for (const s of check.holds) expect(text.includes(s), `${check.by} runs \`${command}\` (holds ${s})`).toBe(true);
    }
  });

  it("parse as their programs take them", () => {
    for (const [command, check] of Object.entries(CHECKS)) {
      if (!("flags" in check)) continue;
      const args = argsOf(command.replace(/^npx /, ""));
      if (check.flags === "operator") expect(() => parseFlags(args, {}), command).not.toThrow();
      else expect(readFlags(args).mode, command).toBe(command.split(" ")[1]);
    }
    // The parsers are strict: a flag the docs could misspell is refused.
    expect(() => readFlags(["agent", "--manifets", "a.yaml"])).toThrow(/Unknown option/);
    expect(() => parseFlags(["--nats-ulr", "x"], {})).toThrow();
  });

  describe("on a real API server", () => {
    let cp: ControlPlane;
    let env: NodeJS.ProcessEnv;
    beforeAll(async () => {
      const home = tempDir("ifp-helm-home-");
      env = { ...process.env, HELM_CACHE_HOME: join(home, "cache"), HELM_CONFIG_HOME: join(home, "config"), HELM_DATA_HOME: join(home, "data") };
      // A new cluster: the chart brings the CRDs.
      cp = await startControlPlane({ controllerManager: false });
    }, 300_000);
    afterAll(async () => {
      await cp?.stop();
    });
    /** A documented helm or kubectl command as written, against the control plane. */
    const run = (command: string) => {
      // Words as the shell splits them: single quotes keep a word whole (and its braces unexpanded).
      const [program, ...args] = (command.match(/'[^']*'|\S+/g) ?? []).map((w) => w.replace(/^'(.*)'$/, "$1"));
      const r = spawnSync(program === "helm" ? toolPath("helm") : "kubectl", [...args, "--kubeconfig", cp.kubeconfig], { encoding: "utf8", timeout: 60_000, env });
      if (r.status !== 0) throw new Error(`\`${command}\` failed (exit ${r.status ?? r.error?.message}): ${r.stdout}${r.stderr}`);
      return r.stdout;
    };

    it("install, apply the examples, list them and upgrade as the docs say", () => {
      const here = Object.entries(CHECKS).filter(([, c]) => "here" in c).map(([command]) => command);
      const [imagesInstall, install, namespaces, examplesInstall, apply, list, upgrade] = here;
      const operatorArgs = () => cp.json(["-n", "ifp-system", "get", "deployment", "ifp-ifp-operator"]).spec.template.spec.containers[0].args as string[];
      // The three installs are alternatives: with a private registry's images, plain (the operator
      // watches its own namespace only), and for the examples; each but the last removed again.
      run(imagesInstall!);
      expect(cp.json(["-n", "ifp-system", "get", "deployment", "ifp-ifp-operator"]).spec.template.spec.containers[0].image).toBe("registry.example/ifp-operator:0.1.0");
      run("helm uninstall ifp -n ifp-system");
      run(install!);
      expect(operatorArgs()).toContain("--watch-namespaces=ifp-system");
      run("helm uninstall ifp -n ifp-system");
      run(namespaces!);
      run(examplesInstall!);
      expect(operatorArgs()).toContain("--watch-namespaces=ifp-system,ifp-alice,ifp-bob,ifp-relay");
      run(apply!);
      const listed = run(list!);
      for (const name of ["agent.ifp.dev/alice", "agent.ifp.dev/bob", "relay.ifp.dev/"]) expect(listed).toContain(name);
      run(upgrade!);
      expect(run("helm status ifp -n ifp-system")).toMatch(/REVISION: 2/);
    });
  });
});
