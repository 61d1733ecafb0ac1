// The kubectl plugin (operator/bin/kubectl-ifp.ts) run as kubectl runs it, against a real API
// server, with Agents and Relays whose status is written as the operator writes it: `kubectl ifp
// status`, `kubectl ifp describe agent alice -n team`, `kubectl ifp report -o bundle.tar.gz`, their
// json forms, and bad input (an unknown resource, a missing name, no such namespace) answered
// with one line and exit code 2 or 1, never a stack trace. No Secret value reaches the bundle.
import { spawnSync } from "node:child_process";
import { readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startControlPlane, type ControlPlane } from "../../../e2e/support/controlplane.ts";
import { tempDir } from "../../../e2e/support/process.ts";
import { createCA } from "../../../e2e/support/tls.ts";
import { kubectlOrError, perTest } from "../support/helpers.ts";

let cp: ControlPlane;
const NS = "team";
const OPERATOR_NS = "ifp-system";
const BIN = join(import.meta.dirname, "../../bin/kubectl-ifp.ts");
let caNotAfter: Date;

/** Values planted in Secrets: none may appear in any output or in the bundle, in any encoding. */
const SECRET_VALUES = ["s3cr3t-signing-key-material", "hand-off-secret-value-42", "token-value-never-shown"];
const NATS_SEED = "SUAKNATSSEEDNEVERTOBESHOWNXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX";

function plugin(args: string[], env: NodeJS.ProcessEnv = {}) {
  const r = spawnSync(process.execPath, [BIN, ...args], {
    encoding: "utf8",
    timeout: 60_000,
    cwd: tempDir("ifp-plugin-"),
    env: { ...process.env, KUBECONFIG: cp.kubeconfig, ...env },
  });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

const b64 = (s: string) => Buffer.from(s).toString("base64");
const jwt = (payload: object) =>
  [{ typ: "JWT", alg: "ed25519-nkey" }, payload, "sig"]
    .map((p) => Buffer.from(typeof p === "string" ? p : JSON.stringify(p)).toString("base64url"))
    .join(".");

const now = new Date().toISOString();
const cond = (type: string, status: string, reason: string, message = "") => ({
  type,
  status,
  reason,
  message,
  observedGeneration: 1,
  lastTransitionTime: now,
});

function apply(yaml: string) {
  cp.kubectl(["apply", "-f", "-"], yaml);
}
/** The status of an object, written as its controller (or a kubelet) writes it. */
function writeStatus(kind: string, name: string, status: object, namespace = NS) {
  cp.kubectl([
    "-n",
    namespace,
    "patch",
    kind,
    name,
    "--subresource=status",
    "--type=merge",
    "-p",
    JSON.stringify({ status }),
  ]);
}

/** A Role in NS of these rules (flow mappings), bound to the ServiceAccount `serviceAccount`. */
function role(name: string, serviceAccount: string, rules: string[]): string {
  return `apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: ${name}, namespace: ${NS}}
rules:
${rules.map((r) => `  - ${r}`).join("\n")}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: ${name}, namespace: ${NS}}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: ${name}}
subjects: [{kind: ServiceAccount, name: ${serviceAccount}, namespace: ${NS}}]
`;
}

/**
 * A user of NS: a ServiceAccount there with a Role of these rules and the right to read
 * namespaces, nothing else; the path of a kubeconfig that signs in as it, in NS by default.
 */
function userOf(name: string, rules: string[]): string {
  apply(`apiVersion: v1
kind: ServiceAccount
metadata: {name: ${name}, namespace: ${NS}}
---
${role(name, name, rules)}---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: ifp-test-namespace-reader}
rules: [{apiGroups: [""], resources: [namespaces], verbs: [get]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: ifp-test-${name}-namespace-reader}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: ifp-test-namespace-reader}
subjects: [{kind: ServiceAccount, name: ${name}, namespace: ${NS}}]
`);
  const token = cp.kubectl(["-n", NS, "create", "token", name]).trim();
  const admin = readFileSync(cp.kubeconfig, "utf8");
  const server = /server: (\S+)/.exec(admin)![1];
  const caData = /certificate-authority-data: (\S+)/.exec(admin)![1];
  const config = join(tempDir("ifp-plugin-"), name);
  writeFileSync(
    config,
    `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "${server}", certificate-authority-data: ${caData}}}]
users: [{name: ${name}, user: {token: "${token}"}}]
contexts: [{name: ${name}, context: {cluster: c, user: ${name}, namespace: ${NS}}}]
current-context: ${name}
`,
  );
  return config;
}

/** Bad input: refused with one line and the exit code, no stack trace, nothing on stdout; the usage with exit code 2. */
function expectRefusal(args: string[], code: number, message: RegExp) {
  const r = plugin(args);
  expect(r.code).toBe(code);
  expect(r.stderr).toMatch(message);
  expect(r.stderr.split("\n")[0]).toMatch(/^kubectl ifp: /);
  expect(r.stderr).not.toMatch(/\n\s+at |Error:|node:internal/);
  expect(r.stdout).toBe("");
  if (code === 2) expect(r.stderr).toContain("usage: kubectl ifp");
}

perTest(() => kubectlOrError(cp, ["get", "agents,relays", "-A", "-o", "yaml"]));

beforeAll(async () => {
  cp = await startControlPlane({
    crds: ["crds/agents.ifp.dev.yaml", "crds/relays.ifp.dev.yaml"],
    controllerManager: false,
  });
  cp.kubectl(["create", "namespace", NS]);
  cp.kubectl(["create", "namespace", OPERATOR_NS]);
  const ca = await createCA("ifp-operator install CA");
  caNotAfter = ca.notAfter;
  // The install as the chart makes it: the operator's Deployment, its Lease, NATS, the install CA.
  const labels = (component: string) =>
    `{app.kubernetes.io/name: ifp-operator, app.kubernetes.io/instance: ifp, app.kubernetes.io/part-of: ifp-operator, app.kubernetes.io/component: ${component}}`;
  apply(`apiVersion: apps/v1
kind: Deployment
metadata: {name: ifp-operator, namespace: ${OPERATOR_NS}, labels: ${labels("operator")}}
spec:
  replicas: 2
  selector: {matchLabels: {app.kubernetes.io/component: operator}}
  template:
    metadata: {labels: ${labels("operator")}}
    spec: {containers: [{name: operator, image: op:1, args: [--ca-secret=ifp-install-ca, --leader-elect=true]}]}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: ifp-nats, namespace: ${OPERATOR_NS}, labels: ${labels("nats")}}
spec:
  replicas: 3
  serviceName: ifp-nats-headless
  selector: {matchLabels: {app.kubernetes.io/component: nats}}
  template:
    metadata: {labels: ${labels("nats")}}
    spec: {containers: [{name: nats, image: nats:2}]}
---
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata: {name: ifp-operator, namespace: ${OPERATOR_NS}, annotations: {ifp.dev/version: 0.2.0}}
spec: {holderIdentity: ifp-operator-7d9f-abcde_1, leaseDurationSeconds: 15, renewTime: "${new Date().toISOString().replace(/\.(\d{3})Z$/, ".$1000Z")}"}
`);
  writeStatus("deployment", "ifp-operator", { replicas: 2, readyReplicas: 2, observedGeneration: 1 }, OPERATOR_NS);
  apply(`apiVersion: v1
kind: Secret
metadata: {name: ifp-install-ca, namespace: ${OPERATOR_NS}}
data: {ca.crt: ${b64(ca.cert)}, ca.key: ${b64(ca.key)}}
`);
  // alice: Ready, with keys in rotation, a peer, and the Secrets the operator renders.
  apply(`apiVersion: ifp.dev/v1alpha1
kind: Agent
metadata: {name: alice, namespace: ${NS}}
spec:
  agentId: https://alice.example/agents/alice
  peers:
    - agentId: https://bob.example/agents/bob
      url: https://bob.example
      keys: [{keyId: key-1, publicKey: ${"A".repeat(43)}}]
---
apiVersion: ifp.dev/v1alpha1
kind: Agent
metadata: {name: broken, namespace: ${NS}}
spec: {agentId: https://broken.example/agents/b}
---
apiVersion: ifp.dev/v1alpha1
kind: Relay
metadata: {name: hub, namespace: ${NS}}
spec: {url: https://hub.relays.example}
`);
  writeStatus("agent", "alice", {
    observedGeneration: 1,
    conditions: [
      cond("Ready", "True", "RuntimeReady", "1/1 runtime replicas ready"),
      cond("Reconciling", "False", "Reconciled"),
    ],
    replicas: 1,
    readyReplicas: 1,
    endpoint: "https://alice.team.svc:8443",
    summary: { acceptedLastHour: 17, backlog: 3 },
    signingKey: { keyId: "key-2", publicKey: "PUBKEY2", secretName: "alice-signing" },
    signingKeys: [
      { keyId: "key-1", publicKey: "PUBKEY1", status: "retired", retired: now, revokeAt: "2099-01-01T00:00:00Z" },
      { keyId: "key-2", publicKey: "PUBKEY2", status: "active", created: now },
    ],
    encryptionKey: { keyId: "enc-1", publicKey: "ENCPUB" },
  });
  writeStatus("agent", "broken", {
    conditions: [
      cond("Ready", "False", "InvalidSigningKey", "the Secret broken-signing holds no key"),
      cond("Stalled", "True", "InvalidSigningKey"),
    ],
    replicas: 0,
    readyReplicas: 0,
    summary: {
      acceptedLastHour: 0,
      backlog: 0,
      lastError: "Undeliverable: https://x.example answered 503",
      lastErrorTime: now,
    },
  });
  writeStatus("relay", "hub", {
    conditions: [cond("Ready", "True", "RuntimeReady"), cond("StreamReady", "True", "StreamInSync")],
    replicas: 2,
    readyReplicas: 2,
    summary: { acceptedLastHour: 5, backlog: 12 },
  });
  const managed = (name: string) =>
    `{app.kubernetes.io/instance: ${name}, app.kubernetes.io/managed-by: ifp-operator, app.kubernetes.io/name: ifp-runtime}`;
  // The labels the operator gives a runtime's pods, with its image's version.
  const runtimePod = (name: string, component: string, version: string) =>
    `{app.kubernetes.io/instance: ${name}, app.kubernetes.io/managed-by: ifp-operator, app.kubernetes.io/name: ifp-runtime, app.kubernetes.io/component: ${component}, app.kubernetes.io/version: ${version}}`;
  const creds = `-----BEGIN NATS USER JWT-----\n${jwt({ exp: Math.floor(Date.parse("2030-01-02T03:04:05Z") / 1000), iat: Math.floor(Date.now() / 1000) - 3600 })}\n------END NATS USER JWT------\n\n-----BEGIN USER NKEY SEED-----\n${NATS_SEED}\n------END USER NKEY SEED------\n`;
  apply(`apiVersion: v1
kind: Secret
metadata:
  name: alice-signing
  namespace: ${NS}
  labels: ${managed("alice")}
  annotations: {kubectl.kubernetes.io/last-applied-configuration: '{"data":{"signing.key":"${SECRET_VALUES[0]}"}}'}
stringData: {signing.key: ${SECRET_VALUES[0]}, encryption.key: ${SECRET_VALUES[0]}-enc}
---
apiVersion: v1
kind: Secret
metadata: {name: alice-handoff, namespace: ${NS}, labels: ${managed("alice")}}
stringData: {secret: ${SECRET_VALUES[1]}}
---
apiVersion: v1
kind: Secret
metadata: {name: alice-nats, namespace: ${NS}, labels: ${managed("alice")}}
data: {nats.creds: ${b64(creds)}}
---
apiVersion: v1
kind: Secret
metadata: {name: unrelated, namespace: ${NS}}
stringData: {token: ${SECRET_VALUES[2]}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: alice, namespace: ${NS}, labels: ${managed("alice")}}
spec:
  replicas: 1
  selector: {matchLabels: {app.kubernetes.io/instance: alice}}
  template:
    metadata: {labels: ${runtimePod("alice", "agent", "0.2.0")}}
    spec: {containers: [{name: runtime, image: rt:0.2.0}]}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: hub, namespace: ${NS}, labels: ${managed("hub")}}
spec:
  replicas: 2
  selector: {matchLabels: {app.kubernetes.io/instance: hub}}
  template:
    metadata: {labels: ${runtimePod("hub", "relay", "0.1.0")}}
    spec: {containers: [{name: runtime, image: rt:0.1.0}]}
---
apiVersion: v1
kind: Service
metadata: {name: alice, namespace: ${NS}, labels: ${managed("alice")}}
spec: {ports: [{name: https, port: 8443}]}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: alice-manifest, namespace: ${NS}, labels: ${managed("alice")}}
data: {manifest.yaml: "kind: Agent"}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: alice, namespace: ${NS}, labels: ${managed("alice")}}
spec: {podSelector: {matchLabels: {app.kubernetes.io/instance: alice}}, policyTypes: [Ingress]}
`);
}, 300_000);
afterAll(async () => {
  await cp?.stop();
});

/** No planted value in `text`, as written, in base64 or in base64url. */
function expectNoSecret(text: string) {
  for (const v of [...SECRET_VALUES, NATS_SEED]) {
    expect(text).not.toContain(v);
    expect(text).not.toContain(b64(v));
    expect(text).not.toContain(Buffer.from(v).toString("base64url"));
  }
}

describe("kubectl ifp status", () => {
  it("shows the operator with its leader and version, NATS, the install CA's expiry, and every Agent and Relay with its runtime's version", () => {
    const r = plugin(["status"]);
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(
      /Operator: +ifp-system\/ifp-operator +2\/2 ready +version 0\.2\.0 +leader ifp-operator-7d9f-abcde_1/,
    );
    expect(r.stdout).toMatch(/NATS: +ifp-system\/ifp-nats +0\/3 ready/);
    expect(r.stdout).toContain(
      `Install CA:  ifp-system/ifp-install-ca  expires ${caNotAfter.toISOString().slice(0, 19)}`,
    );
    const lines = r.stdout.split("\n");
    const header = lines.find((l) => l.startsWith("NAMESPACE"))!;
    expect(header.split(/\s{2,}/)).toEqual([
      "NAMESPACE",
      "KIND",
      "NAME",
      "READY",
      "REASON",
      "PODS",
      "VERSION",
      "BACKLOG",
      "ACCEPTED 1H",
      "LAST ERROR",
    ]);
    expect(lines.find((l) => / alice /.test(l))?.split(/\s{2,}/)).toEqual([
      "team",
      "Agent",
      "alice",
      "True",
      "RuntimeReady",
      "1/1",
      "0.2.0",
      "3",
      "17",
    ]);
    expect(lines.find((l) => / broken /.test(l))).toMatch(
      /team +Agent +broken +False +InvalidSigningKey +0\/0 +0 +0 +Undeliverable: https:\/\/x.example answered 503 \(\d+s ago\)/,
    );
    expect(lines.find((l) => / hub /.test(l))?.split(/\s{2,}/)).toEqual([
      "team",
      "Relay",
      "hub",
      "True",
      "RuntimeReady",
      "2/2",
      "0.1.0",
      "12",
      "5",
    ]);
    // The relay's runtime runs another version than the operator: said once, under the table.
    expect(r.stdout).toMatch(
      /\nWarning: 1 of 3 runtimes run another version than the operator's 0\.2\.0: relay team\/hub 0\.1\.0\n$/,
    );
    expectNoSecret(r.stdout);
  });

  it("gives the same as JSON with -o json, and only one namespace with -n", () => {
    const r = plugin(["status", "-o", "json"]);
    expect(r.code).toBe(0);
    const s = JSON.parse(r.stdout);
    expect(s.operator).toMatchObject({
      namespace: OPERATOR_NS,
      name: "ifp-operator",
      replicas: 2,
      readyReplicas: 2,
      ready: true,
      leader: { holder: "ifp-operator-7d9f-abcde_1" },
      version: "0.2.0",
    });
    expect(s.resources.map((x: { version?: string }) => x.version)).toEqual(["0.2.0", undefined, "0.1.0"]);
    expect(s.versionWarning).toMatch(/relay team\/hub 0\.1\.0/);
    expect(s.nats).toMatchObject({ name: "ifp-nats", replicas: 3, readyReplicas: 0, ready: false });
    expect(s.installCa).toEqual({
      namespace: OPERATOR_NS,
      secret: "ifp-install-ca",
      notAfter: new Date(`${caNotAfter.toISOString().slice(0, 19)}Z`).toISOString(),
    });
    expect(s.resources.map((x: { name: string }) => x.name)).toEqual(["alice", "broken", "hub"]);
    expect(s.resources[1]).toMatchObject({
      kind: "Agent",
      ready: "False",
      reason: "InvalidSigningKey",
      backlog: 0,
      lastError: "Undeliverable: https://x.example answered 503",
    });
    cp.kubectl(["create", "namespace", "empty"]);
    const empty = plugin(["status", "-n", "empty"]);
    expect(empty.code).toBe(0);
    expect(empty.stdout).toContain("No Agents or Relays.");
    expect(JSON.parse(plugin(["status", "-n", NS, "-o", "json"]).stdout).resources).toHaveLength(3);
  });
});

describe("kubectl ifp describe", () => {
  it("shows what an Agent renders, its keys and their states, its peers and its NATS credential's expiry, and no Secret value", () => {
    const r = plugin(["describe", "agent", "alice", "-n", NS]);
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    expect(r.stdout).toContain("Agent ID:    https://alice.example/agents/alice");
    expect(r.stdout).toMatch(/Ready: +True RuntimeReady — 1\/1 runtime replicas ready/);
    expect(r.stdout).toMatch(/Deployment +alice +0\/1 ready/);
    expect(r.stdout).toMatch(/Service +alice/);
    expect(r.stdout).toMatch(/ConfigMap +alice-manifest/);
    expect(r.stdout).toMatch(/NetworkPolicy +alice/);
    expect(r.stdout).toMatch(/Secret +alice-signing +keys: encryption.key, signing.key/);
    expect(r.stdout).toMatch(/Secret +alice-handoff +keys: secret/);
    expect(r.stdout).toMatch(/Secret +alice-nats +keys: nats.creds/);
    expect(r.stdout).not.toContain("unrelated");
    expect(r.stdout).toMatch(/key-1 +retired .*2099-01-01T00:00:00Z \(in \d+d\) +PUBKEY1/);
    expect(r.stdout).toMatch(/key-2 +active/);
    expect(r.stdout).toContain("Encryption key: enc-1 ENCPUB");
    // spec.outbound.resiliency as the API server defaults it from the CRD.
    expect(r.stdout).toContain(
      "Outbound, per destination: the circuit opens after 5 failures in a row for 30s, then one probe; at most 8 in flight; 15s per request",
    );
    expect(r.stdout).toMatch(/https:\/\/bob.example\/agents\/bob +https:\/\/bob.example +1/);
    // The circuits are read from a running pod's local API; this control plane runs none.
    expect(r.stdout).toMatch(/^Circuits not closed: cannot be read \(agent alice in \S+ has no pods/m);
    expect(r.stdout).toMatch(
      /NATS credential: Secret alice-nats, expires 2030-01-02T03:04:05.000Z \(in \d+d\), issued 6\dm ago/,
    );
    expectNoSecret(r.stdout);
    const j = JSON.parse(plugin(["describe", "ifpagent", "alice", "-n", NS, "-o", "json"]).stdout);
    expect(j.signingKeys.map((k: { keyId: string; status: string }) => `${k.keyId}:${k.status}`)).toEqual([
      "key-1:retired",
      "key-2:active",
    ]);
    expect(j.natsCredential).toMatchObject({ secret: "alice-nats", expires: "2030-01-02T03:04:05.000Z" });
    expect(j.children.find((c: { name: string }) => c.name === "alice-signing").keys).toEqual([
      "encryption.key",
      "signing.key",
    ]);
    expectNoSecret(JSON.stringify(j));
  });

  it("describes a Relay and one whose NATS credential is not issued yet, in the context's namespace by default", () => {
    const r = plugin(["describe", "relay", "hub", "--namespace", NS]);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/Relay: +team\/hub/);
    expect(r.stdout).toContain("URL:         https://hub.relays.example");
    expect(r.stdout).toMatch(/NATS credential: Secret hub-nats, not found/);
    cp.kubectl(["config", "set-context", "--current", `--namespace=${NS}`]);
    try {
      expect(plugin(["describe", "agent", "broken"]).stdout).toMatch(/Ready: +False InvalidSigningKey/);
    } finally {
      cp.kubectl(["config", "set-context", "--current", "--namespace=default"]);
    }
  });
});

describe("kubectl ifp report", () => {
  it("writes a tar.gz of logs, resources and events, the Secrets by name and keys only, and no Secret value anywhere", () => {
    const dir = tempDir("ifp-report-");
    const file = join(dir, "bundle.tar.gz");
    const r = plugin(["report", "-o", file]);
    expect(r.stderr).toMatch(/^wrote .*bundle.tar.gz \(\d+ bytes\)\n$/);
    expect(r.code).toBe(0);
    expect(statSync(file).mode & 0o077).toBe(0);
    // Extracted by the system's tar: the archive is well formed.
    const x = spawnSync("tar", ["-xzf", file, "-C", dir], { encoding: "utf8" });
    expect(x.status, x.stderr).toBe(0);
    const root = join(dir, "ifp-report");
    const files = (readdirSync(root, { recursive: true }) as string[]).map((f) => f.replaceAll("\\", "/")).sort();
    for (const f of [
      "README.txt",
      "errors.txt",
      "status.txt",
      "status.json",
      `namespaces/${NS}/agents.json`,
      `namespaces/${NS}/relays.json`,
      `namespaces/${NS}/deployments.json`,
      `namespaces/${NS}/pods.json`,
      `namespaces/${NS}/configmaps.json`,
      `namespaces/${NS}/events.json`,
      `namespaces/${NS}/secrets.json`,
      `namespaces/${OPERATOR_NS}/deployments.json`,
      `namespaces/${OPERATOR_NS}/secrets.json`,
    ])
      expect(files).toContain(f);
    const agents = JSON.parse(readFileSync(join(root, `namespaces/${NS}/agents.json`), "utf8"));
    expect(agents.map((a: { metadata: { name: string } }) => a.metadata.name).sort()).toEqual(["alice", "broken"]);
    expect(agents[0].metadata.managedFields).toBeUndefined();
    const secrets = JSON.parse(readFileSync(join(root, `namespaces/${NS}/secrets.json`), "utf8"));
    expect(secrets.find((s: { metadata: { name: string } }) => s.metadata.name === "alice-signing")).toEqual({
      apiVersion: "v1",
      kind: "Secret",
      metadata: expect.objectContaining({
        name: "alice-signing",
        namespace: NS,
        annotationKeys: ["kubectl.kubernetes.io/last-applied-configuration"],
      }),
      type: "Opaque",
      dataKeys: ["encryption.key", "signing.key"],
    });
    expect(readFileSync(join(root, "status.txt"), "utf8")).toMatch(/team +Agent +alice +True/);
    // Every byte of the archive, compressed and not, and every file in it.
    const raw = spawnSync("tar", ["-xzOf", file], { encoding: "latin1", maxBuffer: 64 << 20 }).stdout;
    expect(raw.length).toBeGreaterThan(1000);
    expectNoSecret(raw);
    expectNoSecret(readFileSync(file, "latin1"));
    expect(raw).not.toContain("BEGIN PRIVATE KEY");
    expect(raw).not.toContain("NKEY SEED");
  });

  it("limits the report to one namespace and the operator's with -n", () => {
    const dir = tempDir("ifp-report-");
    const file = join(dir, "one.tar.gz");
    expect(plugin(["report", "-n", NS, "-o", file]).code).toBe(0);
    const names = spawnSync("tar", ["-tzf", file], { encoding: "utf8" }).stdout;
    expect(names).toContain(`ifp-report/namespaces/${NS}/`);
    expect(names).toContain(`ifp-report/namespaces/${OPERATOR_NS}/`);
    expect(names).not.toContain("namespaces/empty/");
  });
});

describe("a user of one namespace", () => {
  it("sees that namespace with -n, the operator as unknown, and a clear refusal for every namespace", () => {
    // A ServiceAccount that may read Agents, Relays, its namespace's Deployments and Secrets, nothing else.
    const config = userOf("viewer", [
      "{apiGroups: [ifp.dev], resources: [agents, relays], verbs: [get, list]}",
      "{apiGroups: [apps], resources: [deployments], verbs: [list]}",
      '{apiGroups: [""], resources: [services, configmaps, secrets], verbs: [get, list]}',
      "{apiGroups: [networking.k8s.io], resources: [networkpolicies], verbs: [list]}",
    ]);
    const one = plugin(["status", "-n", NS, "--kubeconfig", config]);
    expect(one.stderr).toBe("");
    expect(one.code).toBe(0);
    expect(one.stdout).toMatch(/Operator: +unknown \(cannot read the operator's Deployment: .*forbidden/i);
    expect(one.stdout).toMatch(/team +Agent +alice +True/);
    const all = plugin(["status", "--kubeconfig", config]);
    expect(all.code).toBe(1);
    expect(all.stderr).toMatch(/^kubectl ifp: cannot read agents.ifp.dev .*forbidden.*\n$/i);
    // describe in the context's namespace, with its rights.
    expect(plugin(["describe", "agent", "alice", "--kubeconfig", config]).stdout).toMatch(
      /Secret +alice-signing +keys:/,
    );
  });
});

describe("bad input", () => {
  const cases: [string, string[], number, RegExp][] = [
    ["an unknown command", ["frobnicate"], 2, /unknown command "frobnicate"/],
    ["no command", [], 2, /no command/],
    ["an unknown resource", ["describe", "pod", "x"], 2, /unknown resource "pod": use agent or relay/],
    ["a missing name", ["describe", "agent"], 2, /describe agent needs a name/],
    ["a missing kind", ["describe"], 2, /describe needs a kind and a name/],
    ["two names", ["describe", "agent", "a", "b"], 2, /describe takes one name/],
    ["an unknown flag", ["status", "--frob"], 2, /Unknown option '--frob'/],
    ["a bad output", ["status", "-o", "yaml"], 2, /-o yaml: use json/],
    ["-n with -A", ["status", "-n", NS, "-A"], 2, /-n and -A together/],
    ["no such namespace", ["status", "-n", "nope"], 1, /namespace "nope" not found/],
    ["no such namespace (describe)", ["describe", "agent", "alice", "-n", "nope"], 1, /namespace "nope" not found/],
    ["no such agent", ["describe", "agent", "nobody", "-n", NS], 1, /agent "nobody" not found in namespace team/],
    ["no such namespace (report)", ["report", "-n", "nope", "-o", "x.tar.gz"], 1, /namespace "nope" not found/],
    ["an unknown context", ["status", "--context", "elsewhere"], 1, /no context "elsewhere" in the kubeconfig/],
    ["a missing kubeconfig", ["status", "--kubeconfig", "/nonexistent/config"], 1, /cannot read the kubeconfig/],
  ];
  it.each(cases)("%s: one line, the exit code, no stack trace", (_what, args, code, message) =>
    expectRefusal(args, code, message),
  );

  it("an API server that does not answer: one line, exit code 1", () => {
    const dir = tempDir("ifp-plugin-");
    const config = join(dir, "config");
    const kc = readFileSync(cp.kubeconfig, "utf8").replace(/server: https:\/\/[^\s]+/, "server: https://127.0.0.1:1");
    writeFileSync(config, kc);
    const r = plugin(["status", "--kubeconfig", config]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^kubectl ifp: cannot read .*\n$/);
    expect(r.stderr).not.toMatch(/\n\s+at /);
  });

  it("--help prints the usage and exits 0", () => {
    const r = plugin(["--help"]);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain("usage: kubectl ifp <command>");
  });

  it("prints a completion script for bash and zsh that completes commands, kinds and flags", () => {
    const bash = plugin(["completion", "bash"]);
    expect(bash.code, bash.stderr).toBe(0);
    const complete = (...words: string[]) => {
      const script = `${bash.stdout}\nCOMP_WORDS=(${words.map((w) => `'${w}'`).join(" ")}); COMP_CWORD=${words.length - 1}; _kubectl_ifp_complete; printf '%s\\n' "\${COMPREPLY[@]}"`;
      const r = spawnSync("bash", ["-c", script], { encoding: "utf8" });
      expect(r.status, r.stderr).toBe(0);
      return r.stdout.split("\n").filter(Boolean);
    };
    expect(complete("kubectl-ifp", "s")).toEqual(["status", "send"]);
    expect(complete("kubectl-ifp", "-n", "team", "describe", "")).toEqual(expect.arrayContaining(["agent", "relay"]));
    expect(complete("kubectl-ifp", "send", "alice", "--t")).toEqual(["--to", "--text"]);
    expect(plugin(["completion", "zsh"]).stdout).toContain("bashcompinit");
    const bad = plugin(["completion", "fish"]);
    expect(bad.code).toBe(2);
    expect(bad.stderr.split("\n")[0]).toBe("kubectl ifp: completion takes one shell: bash or zsh");
  });
});

describe("kubectl ifp send and tail, up to the exec (no node here: the real exec is e2e/node.test.ts)", () => {
  /** A pod of an Agent as its Deployment makes it, with the status a kubelet would write. */
  function pod(name: string, agent: string, containers: string[], status: object) {
    apply(`apiVersion: v1
kind: Pod
metadata:
  name: ${name}
  namespace: ${NS}
  labels: {app.kubernetes.io/name: ifp-runtime, app.kubernetes.io/instance: ${agent}, app.kubernetes.io/managed-by: ifp-operator}
spec: {containers: [${containers.map((c) => `{name: ${c}, image: rt:1}`).join(", ")}]}
`);
    writeStatus("pod", name, status);
  }
  const ready = {
    phase: "Running",
    conditions: [{ type: "Ready", status: "True", lastTransitionTime: now }],
  };
  const starting = {
    phase: "Pending",
    conditions: [{ type: "Ready", status: "False", lastTransitionTime: now }],
    containerStatuses: [
      {
        name: "runtime",
        image: "rt:1",
        imageID: "",
        ready: false,
        restartCount: 0,
        state: { waiting: { reason: "ContainerCreating" } },
      },
    ],
  };
  const send = ["send", "alice", "-n", NS, "--to", "https://bob.example/agents/bob", "--text", "hello"];

  beforeAll(() => {
    apply(`apiVersion: ifp.dev/v1alpha1
kind: Agent
metadata: {name: nosidecar, namespace: ${NS}}
spec: {agentId: https://nosidecar.example/a}
`);
    pod("nosidecar-0", "nosidecar", ["app"], ready);
  });

  it("says which Agent has no pods, which pods are not ready, and which pod lacks the runtime container", () => {
    const none = plugin(["send", "broken", "-n", NS, "--to", "x", "--text", "y"]);
    expect(none.code).toBe(1);
    expect(none.stderr).toBe(
      `kubectl ifp: agent broken in ${NS} has no pods (kubectl ifp describe agent broken -n ${NS} shows its Deployment and conditions)\n`,
    );
    pod("alice-starting", "alice", ["runtime", "app"], starting);
    const notReady = plugin(["tail", "alice", "-n", NS]);
    expect(notReady.code).toBe(1);
    expect(notReady.stderr).toBe(
      `kubectl ifp: no ready pod of agent alice in ${NS}: alice-starting (Pending, ContainerCreating, not ready)\n`,
    );
    const noRuntime = plugin(["tail", "nosidecar", "-n", NS]);
    expect(noRuntime.code).toBe(1);
    expect(noRuntime.stderr).toBe(
      `kubectl ifp: pod nosidecar-0 of agent nosidecar has no container "runtime" (it has app)\n`,
    );
    expect(noRuntime.stdout).toBe("");
  });

  // Seven runs of the plugin, one after another: a loaded machine takes seconds for each.
  it("refuses a user without pods/exec before trying, in the API server's words, and reaches the exec with it", {
    timeout: 240_000,
  }, () => {
    pod("alice-ready", "alice", ["runtime", "app"], ready);
    const config = userOf("watcher", [
      "{apiGroups: [ifp.dev], resources: [agents], verbs: [get]}",
      '{apiGroups: [""], resources: [pods], verbs: [get, list]}',
    ]);
    const refused = plugin(["send", "alice", "--to", "x", "--text", "y", "--kubeconfig", config]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(
      /^kubectl ifp: you may not exec into pod alice-ready in team \(create and get on pods\/exec\).*; kubectl ifp send, tail and redrive run ifp in the Agent's pod\n$/,
    );
    // With create on pods/exec but not get (the WebSocket exec is a GET): refused before trying, naming get.
    apply(role("watcher-exec", "watcher", ['{apiGroups: [""], resources: [pods/exec], verbs: [create]}']));
    const withCreate = plugin(["send", "alice", "--to", "x", "--text", "y", "--kubeconfig", config]);
    expect(withCreate.code).toBe(1);
    expect(withCreate.stderr).toMatch(
      /^kubectl ifp: you may not exec into pod alice-ready in team \(get on pods\/exec\).*; kubectl ifp send, tail and redrive run ifp in the Agent's pod\n$/,
    );
    cp.kubectl(["-n", NS, "delete", "rolebinding", "watcher-exec"]);
    // Without the right to read Agents: the API server's refusal, one line.
    const noAgents = plugin(["tail", "alice", "--kubeconfig", config, "-n", OPERATOR_NS]);
    expect(noAgents.code).toBe(1);
    expect(noAgents.stderr).toMatch(
      /^kubectl ifp: cannot read (namespace ifp-system|agent alice in ifp-system): .*forbidden/i,
    );
    // With the right (the admin): the ready pod with the runtime container is chosen and the
    // exec asked for; with no kubelet behind the pod the API server cannot run it, and says so.
    const tried = plugin(send);
    expect(tried.code).toBe(1);
    expect(tried.stderr).toMatch(/^kubectl ifp: send through pod alice-ready \(container runtime\)\n/);
    expect(tried.stderr).toMatch(
      /kubectl ifp: cannot exec into pod alice-ready in team: the API server answered \d{3}/,
    );
    expect(tried.stderr).not.toMatch(/\n\s+at /);
    for (const redrive of [
      ["redrive", "alice", "-n", NS, "msg:01ABC"],
      ["redrive", "alice", "-n", NS, "--all", "--limit", "10"],
    ]) {
      const r = plugin(redrive);
      expect(r.code).toBe(1);
      expect(r.stderr).toMatch(/^kubectl ifp: redrive through pod alice-ready \(container runtime\)\n/);
    }
  });

  const cases: [string, string[], number, RegExp][] = [
    ["send without an Agent", ["send"], 2, /send needs the Agent's name: send AGENT/],
    ["tail without an Agent", ["tail"], 2, /tail needs the Agent's name: tail AGENT/],
    ["two Agents", ["tail", "alice", "bob"], 2, /tail takes one Agent/],
    ["send without --to", ["send", "alice", "--text", "x"], 2, /send needs --to AGENT_ID/],
    ["send without --text", ["send", "alice", "--to", "x"], 2, /send needs --text/],
    ["an empty --phase", [...send, "--phase", ""], 2, /--phase cannot be empty/],
    ["a bad --wait", [...send, "--wait", "soon"], 2, /--wait takes whole seconds, 0 to 3600/],
    ["a tail flag on send", [...send, "--count", "1"], 2, /--count does not go with send/],
    ["a send flag on tail", ["tail", "alice", "--text", "x"], 2, /--text does not go with tail/],
    ["--count 0", ["tail", "alice", "--count", "0"], 2, /--count takes a whole number of messages, 1 or more/],
    ["a negative --since", ["tail", "alice", "--since", "-5"], 2, /--since/],
    ["a --since past a week", ["tail", "alice", "--since", "604801"], 2, /--since takes whole seconds, 0 to 604800/],
    ["-A", ["tail", "alice", "-A"], 2, /tail reads one namespace: -n NS, not -A/],
    ["-o", ["tail", "alice", "-o", "json"], 2, /tail has no -o/],
    ["a messaging flag elsewhere", ["status", "--to", "x"], 2, /--to goes with send, tail or redrive, not status/],
    ["--all elsewhere", ["status", "--all"], 2, /--all goes with send, tail or redrive, not status/],
    ["redrive without an Agent", ["redrive"], 2, /redrive needs the Agent's name: redrive AGENT/],
    ["redrive of nothing", ["redrive", "alice"], 2, /redrive takes one MESSAGE_ID, or --all/],
    ["redrive of one and all", ["redrive", "alice", "msg:1", "--all"], 2, /redrive takes one MESSAGE_ID, or --all/],
    ["redrive of two", ["redrive", "alice", "msg:1", "msg:2"], 2, /redrive takes one Agent and one MESSAGE_ID/],
    ["--limit without --all", ["redrive", "alice", "msg:1", "--limit", "5"], 2, /--limit goes with --all/],
    [
      "--limit past 1000",
      ["redrive", "alice", "--all", "--limit", "1001"],
      2,
      /--limit goes with --all and takes 1 to 1000/,
    ],
    ["a send flag on redrive", ["redrive", "alice", "--all", "--text", "x"], 2, /--text does not go with redrive/],
    ["--all on tail", ["tail", "alice", "--all"], 2, /--all does not go with tail/],
    ["no such namespace", ["tail", "alice", "-n", "nope"], 1, /namespace "nope" not found/],
    [
      "no such Agent",
      ["send", "nobody", "-n", NS, "--to", "x", "--text", "y"],
      1,
      /agent "nobody" not found in namespace team/,
    ],
  ];
  it.each(cases)("%s: one line, the exit code, no stack trace", (_what, args, code, message) =>
    expectRefusal(args, code, message),
  );
});
