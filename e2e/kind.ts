#!/usr/bin/env node
// npm run e2e:kind — the end-to-end path on a kind cluster, for machines with a Docker engine:
// build the images, load them into kind, helm install, apply the examples, send a message
// between agents through the cluster's Services and see the example applications log it and the
// reply, run helm test, delete the cluster.
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { parseAllDocuments, stringify } from "yaml";
import { EXAMPLES_NAMESPACES_FILE, exampleWatchValue } from "./support/examples.ts";
import { toolPath } from "./tools/tools.ts";

const CLUSTER = process.env.IFP_KIND_CLUSTER ?? "ifp-e2e";

function run(cmd: string, args: string[], input?: string): string {
  process.stderr.write(`+ ${cmd} ${args.join(" ")}\n`);
  const r = spawnSync(cmd, args, {
    input,
    encoding: "utf8",
    stdio: [input === undefined ? "inherit" : "pipe", "pipe", "inherit"],
  });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(" ")} failed with ${r.status}`);
  return r.stdout;
}

if (spawnSync("docker", ["info"], { stdio: "ignore" }).status !== 0) {
  console.log(
    "e2e:kind skipped: no Docker engine answers on this machine (`docker info` failed); npm run e2e covers the same path on a local control plane",
  );
  process.exit(0);
}

const kind = toolPath("kind");
const helm = toolPath("helm");
const kubectl = (...args: string[]) => run("kubectl", ["--context", `kind-${CLUSTER}`, ...args]);
let failed = false;
try {
  run(kind, ["create", "cluster", "--name", CLUSTER, "--wait", "180s"]);
  run("docker", ["build", "-f", "runtime/Dockerfile", "-t", "ifp-runtime:e2e", "."]);
  run("docker", ["build", "-f", "operator/Dockerfile", "-t", "ifp-operator:e2e", "."]);
  // The examples' application sidecar, under the name the examples give it.
  const appImage = parseAllDocuments(readFileSync("examples/agent-alice.yaml", "utf8"))
    .map((d) => d.toJSON())
    .find((d) => d?.kind === "Agent").spec.deployment.sidecars[0].image as string;
  run("docker", ["build", "-f", "examples/app/Dockerfile", "-t", appImage, "."]);
  for (const image of ["ifp-runtime:e2e", "ifp-operator:e2e", appImage])
    run(kind, ["load", "docker-image", image, "--name", CLUSTER]);
  const values = [
    "image.repository=ifp-operator",
    "image.tag=e2e",
    "image.pullPolicy=Never",
    "runtimeImage.repository=ifp-runtime",
    "runtimeImage.tag=e2e",
    "runtimeImage.pullPolicy=Never",
  ];
  // The examples' namespaces (alice in ifp-alice, bob in ifp-bob, the relay in ifp-relay) exist
  // before the install, which makes the operator watch them.
  kubectl("apply", "-f", EXAMPLES_NAMESPACES_FILE);
  run(helm, [
    "install",
    "ifp",
    "charts/ifp-operator",
    "--kube-context",
    `kind-${CLUSTER}`,
    "-n",
    "ifp-system",
    "--create-namespace",
    "--wait",
    "--timeout",
    "5m",
    ...[exampleWatchValue(), ...values].flatMap((v) => ["--set", v]),
  ]);
  kubectl("apply", "-f", "examples/");
  kubectl("-n", "ifp-alice", "wait", "--for=condition=Ready", "--timeout=300s", "agent/alice");
  kubectl("-n", "ifp-bob", "wait", "--for=condition=Ready", "--timeout=300s", "agent/bob");
  kubectl("-n", "ifp-relay", "wait", "--for=condition=Ready", "--timeout=300s", "relay/relay");
  // bob's agent key sends alice a signed message through alice's Service, from inside the cluster,
  // trusting what bob's runtime trusts: the bundle the operator publishes for bob (the install CA
  // that issued alice's certificate), mounted and passed as the operator renders it for runtimes.
  const job = {
    apiVersion: "batch/v1",
    kind: "Job",
    metadata: { name: "send", namespace: "ifp-bob" },
    spec: {
      backoffLimit: 2,
      template: {
        spec: {
          restartPolicy: "Never",
          containers: [
            {
              name: "send",
              image: "ifp-runtime:e2e",
              imagePullPolicy: "Never",
              command: [
                "node",
                "runtime/bin/ifp.js",
                "send",
                "--from-key",
                "/keys/signing.key",
                "--from",
                "bob-agent",
                "--to",
                "https://alice.ifp-alice.svc",
                "--text",
                "Hello through the cluster",
                "--ca-file",
                "/etc/ifp/trust/ca.crt",
              ],
              volumeMounts: [
                { name: "key", mountPath: "/keys" },
                { name: "trust", mountPath: "/etc/ifp/trust" },
              ],
            },
          ],
          volumes: [
            { name: "key", secret: { secretName: "bob-signing-key" } },
            { name: "trust", configMap: { name: "bob-trust" } },
          ],
        },
      },
    },
  };
  run("kubectl", ["--context", `kind-${CLUSTER}`, "apply", "-f", "-"], stringify(job));
  kubectl("-n", "ifp-bob", "wait", "--for=condition=Complete", "--timeout=120s", "job/send");
  console.log(kubectl("-n", "ifp-bob", "logs", "job/send"));
  // alice's application logs the message and replies; bob's logs the reply (and, before, alice's greeting).
  const appLogs = (agent: string) => kubectl("-n", `ifp-${agent}`, "logs", `deployment/${agent}`, "-c", "app");
  for (let i = 0; ; i++) {
    const [alice, bob] = [appLogs("alice"), appLogs("bob")];
    if (
      /received context \S+ from bob-agent .*"Hello through the cluster"/.test(alice) &&
      /received context \S+ from alice-agent .*Hello through the cluster/.test(bob) &&
      /received greeting \S+ from alice-agent/.test(bob)
    ) {
      console.log(`alice's application:\n${alice}\nbob's application:\n${bob}`);
      break;
    }
    if (i >= 60)
      throw new Error(`the applications did not log the exchange within 120 s:\nalice:\n${alice}\nbob:\n${bob}`);
    spawnSync("sleep", ["2"]);
  }
  run(helm, ["test", "ifp", "--kube-context", `kind-${CLUSTER}`, "-n", "ifp-system", "--timeout", "5m"]);
  console.log("e2e:kind passed");
} catch (err) {
  failed = true;
  console.error(`e2e:kind failed: ${(err as Error).message}`);
} finally {
  if (!process.env.IFP_KIND_KEEP) spawnSync(kind, ["delete", "cluster", "--name", CLUSTER], { stdio: "inherit" });
}
process.exit(failed ? 1 : 0);
