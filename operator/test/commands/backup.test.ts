// `kubectl ifp backup` and `kubectl ifp restore` (docs/backup.md), run as kubectl runs the plugin,
// between two installs, each a real API server, a real nats-server in operator (JWT) mode and the
// operator: an Agent whose real runtime accepted signed messages into its inbox that nobody took
// yet, and a Relay with mail in its stream, backed up from the first; restored into a fresh control
// plane and a fresh NATS — the keys first (the NATS server then starts on the restored
// configuration), then the resources and the streams. The operator signs with the same key, and
// the runtime started from what it renders hands the application every waiting message once, by
// id. A second restore changes nothing. Refused: a changed archive, a version the plugin does not
// read, entries that climb out of it, and another install's archive over a running one's keys
// without --force.
import { spawn } from "node:child_process";
import { existsSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { connect, credsAuthenticator, headers, type NatsConnection } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startControlPlane, type ControlPlane } from "../../../e2e/support/controlplane.ts";
import { httpsRequest } from "../../../e2e/support/https.ts";
import { onLoopback, runDeploymentLocally, type LocalRuntime } from "../../../e2e/support/materialize.ts";
import { startNats, type NatsServer } from "../../../e2e/support/nats.ts";
import { freePort } from "../../../e2e/support/ports.ts";
import { releaseDir, tempDir } from "../../../e2e/support/process.ts";
import { LocalApiClient } from "../../../runtime/src/client/local.ts";
import { relayNames } from "../../../runtime/src/contract/relay-stream.ts";
import { generateSigningKey, privateKeyFromPem } from "../../../runtime/src/protocol/keys.ts";
import { signMessage } from "../../../runtime/src/protocol/signing.ts";
import { message } from "../../../runtime/test/support/fixtures.ts";
import { startManager, type RunningManager } from "../../src/commands/manager.ts";
import {
  CredentialIssuer,
  generateKeys,
  KEY_FIELDS,
  serverConfig,
  SERVER_CONFIG_FIELD,
} from "../../src/concerns/nats/credential-issuer.ts";
import { issuerOfSecret } from "../../src/concerns/nats/runtime-credential.ts";
import { capturedLog, getOrAbsent, kubectlOrError, perTest, until, untilRuntimeReady } from "../support/helpers.ts";

const NS = "team";
const OPS = "ifp-system";
const BIN = join(import.meta.dirname, "../../bin/kubectl-ifp.ts");
const dir = tempDir("ifp-backup-");
const sender = generateSigningKey();
const WAITING = 5;
const RELAY_MAIL = 3;

interface Install {
  name: string;
  cp: ControlPlane;
  nats?: NatsServer;
  manager?: RunningManager;
  log: ReturnType<typeof capturedLog>;
  runtimes: LocalRuntime[];
}
const installs: Install[] = [];

/**
 * The plugin as kubectl runs it, a process of its own; awaited, never run synchronously: the
 * operators of these installs run in this process and must go on reconciling meanwhile.
 */
function plugin(i: Install, args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, [BIN, ...args], {
    cwd: dir,
    env: { ...process.env, KUBECONFIG: i.cp.kubeconfig },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (b) => (stdout += b));
  child.stderr.on("data", (b) => (stderr += b));
  const timer = setTimeout(() => child.kill("SIGKILL"), 240_000);
  return new Promise((resolve) =>
    child.on("close", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    }),
  );
}

/** The operator's Deployment as the chart renders the part the plugin reads: its labels and its flags. */
const operatorDeployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: ifp-ifp-operator
  namespace: ${OPS}
  labels: {app.kubernetes.io/part-of: ifp-operator, app.kubernetes.io/component: operator}
spec:
  selector: {matchLabels: {app.kubernetes.io/name: ifp-operator}}
  template:
    metadata: {labels: {app.kubernetes.io/name: ifp-operator}}
    spec:
      containers:
        - name: operator
          image: ghcr.io/ifp-dev/ifp-operator:test
          args: [--ca-secret=ifp-operator-ca, --nats-account-secret=ifp-nats-account]
`;

const agentYaml = `apiVersion: ifp.dev/v1alpha1
kind: Agent
metadata: {name: bob, namespace: ${NS}, labels: {tier: backend}}
spec:
  agentId: bob-id
  replicas: 2
  tls: {dnsNames: [localhost]}
  peers:
    - agentId: sender-id
      keys: [{keyId: k1, publicKey: ${sender.publicKey}}]
`;
const relayYaml = `apiVersion: ifp.dev/v1alpha1
kind: Relay
metadata: {name: hub, namespace: ${NS}}
spec:
  url: https://hub.example
`;

async function newInstall(name: string): Promise<Install> {
  const i: Install = {
    name,
    cp: await startControlPlane({
      crds: ["crds/agents.ifp.dev.yaml", "crds/relays.ifp.dev.yaml"],
      controllerManager: false,
    }),
    log: capturedLog(300),
    runtimes: [],
  };
  installs.push(i);
  return i;
}

/** The install's NATS, started on the configuration its account Secret holds (as the chart's NATS mounts it). */
async function startInstallNats(i: Install): Promise<void> {
  const issuer = issuerOfSecret(secret(i, OPS, "ifp-nats-account"));
  const conf = Buffer.from(secret(i, OPS, "ifp-nats-account").data[SERVER_CONFIG_FIELD], "base64")
    .toString()
    .replace('dir: "/data/jwt"', `dir: "${join(dir, i.name, "jwt")}"`);
  i.nats = await startNats({
    storeDir: join(dir, i.name, "store"),
    config: conf,
    connect: { authenticator: credsAuthenticator(await issuer.systemCreds()) },
  });
}

async function startOperator(i: Install): Promise<void> {
  i.cp.kubectl(["apply", "-f", "-"], operatorDeployment);
  i.manager = await startManager({
    kubeconfig: i.cp.kubeconfig,
    settings: {
      runtimeImage: "ghcr.io/ifp-dev/ifp-runtime:test",
      runtimeImagePullPolicy: "IfNotPresent",
      natsUrl: i.nats!.url,
      allowedDnsNames: ["localhost"],
      clusterNetworks: ["127.0.0.0/8"],
    },
    nats: { url: i.nats!.url },
    natsAccount: { namespace: OPS, name: "ifp-nats-account" },
    trust: { namespace: OPS, secretName: "ifp-operator-ca" },
    watchNamespaces: [NS],
    resyncMs: 1_000,
    log: i.log.log,
  });
  await i.manager.started;
}

/** The install's NATS account Secret, holding these fields. */
function accountSecret(i: Install, fields: Record<string, string>): void {
  i.cp.kubectl([
    "-n",
    OPS,
    "create",
    "secret",
    "generic",
    "ifp-nats-account",
    ...Object.entries(fields).map(([f, v]) => `--from-literal=${f}=${v}`),
  ]);
}

const get = (i: Install, kind: string, name: string, ns = NS) => getOrAbsent(i.cp, ["-n", ns, "get", kind, name]);
const secret = (i: Install, ns: string, name: string) => get(i, "secret", name, ns);

/** Bob's runtime, run from what the install's operator rendered (its manifest, signing Secret, certificate, NATS credential). */
async function runBob(i: Install): Promise<{ url: string; ca: string; localApi: LocalApiClient }> {
  const port = await freePort();
  const metricsPort = await freePort();
  rmSync(join(dir, i.name, "bob"), { recursive: true, force: true });
  const r = runDeploymentLocally(i.cp, NS, "bob", join(dir, i.name), onLoopback(port, metricsPort));
  i.runtimes.push(r);
  const urls = await r.listening(60_000);
  const ca = get(i, "configmap", "bob-trust").data["ca.crt"] as string;
  const url = `https://localhost:${port}`;
  await untilRuntimeReady("bob", url, ca);
  return { url, ca, localApi: new LocalApiClient(urls.localApiUrl!) };
}

/** A connection into the account of a resource's runtime, as a user the test issues with the install's keys. */
async function inAccountOf(i: Install, kind: string, name: string): Promise<NatsConnection> {
  const issuer = issuerOfSecret(secret(i, OPS, "ifp-nats-account"));
  const uid = get(i, kind, name).metadata.uid as string;
  const creds = await issuer.issue("test", { pub: [">"], sub: [">"] }, Date.now(), 600_000, issuer.accountOf(uid));
  return connect({ servers: i.nats!.url, authenticator: credsAuthenticator(new TextEncoder().encode(creds)) });
}

const relay = { metadata: { namespace: NS, name: "hub" }, spec: { url: "https://hub.example" } } as Parameters<
  typeof relayNames
>[0];

/** The message ids in the relay's stream, by reading every message. */
async function relayMail(i: Install): Promise<string[]> {
  const nc = await inAccountOf(i, "relay", "hub");
  try {
    const jsm = await jetstreamManager(nc);
    const info = await jsm.streams.info(relayNames(relay).stream);
    const ids: string[] = [];
    for (let seq = info.state.first_seq; seq <= info.state.last_seq; seq++) {
      const m = await jsm.streams.getMessage(relayNames(relay).stream, { seq }).catch(() => null);
      if (m) ids.push(m.header?.get("Nats-Msg-Id") ?? "");
    }
    return ids;
  } finally {
    await nc.close();
  }
}

let a: Install;
let b: Install;
let archive: string;
const sentIds: string[] = [];
const relayIds: string[] = [];
let bobKey: { keyId: string; publicKey: string };

beforeAll(async () => {
  a = await newInstall("a");
  a.cp.kubectl(["create", "namespace", OPS]);
  a.cp.kubectl(["create", "namespace", NS]);
  // The install's NATS keys, as the operator writes them at its first start.
  const keys = generateKeys();
  const fields: Record<string, string> = {
    "account.pub": CredentialIssuer.fromKeys(keys).accountKey,
    [SERVER_CONFIG_FIELD]: await serverConfig(keys),
  };
  for (const [k, f] of Object.entries(KEY_FIELDS)) fields[f] = keys[k as keyof typeof keys];
  accountSecret(a, fields);
  await startInstallNats(a);
  await startOperator(a);
}, 300_000);
afterAll(async () => {
  for (const i of installs) {
    await Promise.all(i.runtimes.map((r) => r.stop()));
    await i.manager?.stop();
    await Promise.all([i.cp.stop(), i.nats?.close()]);
  }
  releaseDir(dir);
});
perTest(() =>
  installs
    .flatMap((i) => [
      `install ${i.name} operator log:`,
      ...i.log.lines().slice(-60),
      kubectlOrError(i.cp, ["-n", NS, "get", "agents,relays,secrets", "-o", "wide"]),
      ...i.runtimes.map((r) => `${r.name} (runtime) log:\n${r.output().slice(-3000)}`),
    ])
    .join("\n"),
);

describe("kubectl ifp backup and restore", () => {
  it("backs up an install with messages waiting in an Agent's inbox and a Relay's stream", {
    timeout: 300_000,
  }, async () => {
    a.cp.kubectl(["apply", "-f", "-"], agentYaml);
    a.cp.kubectl(["apply", "-f", "-"], relayYaml);
    bobKey = await until("bob's signing key in status", () => get(a, "agent", "bob")?.status?.signingKey);
    await until("bob's NATS credential", () => secret(a, NS, "bob-nats"));
    await until("the relay's stream", () =>
      get(a, "relay", "hub")?.status?.conditions?.some((c: { type: string; status: string }) => c.type === "Ready"),
    );
    const bob = await runBob(a);
    for (let n = 0; n < WAITING; n++) {
      const signed = signMessage(message("sender-id", "bob-id", { conversation_id: `conv:backup-${n}` }), {
        agentId: "sender-id",
        keyId: "k1",
        privateKey: privateKeyFromPem(sender.privateKeyPem),
      });
      const r = await httpsRequest(`${bob.url}/.well-known/agent/inbox`, {
        method: "POST",
        headers: { "content-type": "application/json; charset=utf-8", accept: "application/json" },
        body: JSON.stringify(signed),
        ca: bob.ca,
      });
      expect(r.status, r.text).toBe(202);
      sentIds.push(signed.headers.message_id);
    }
    await Promise.all(a.runtimes.map((r) => r.stop()));
    // Mail in the relay's stream, as the relay runtime stores a copy per recipient.
    const nc = await inAccountOf(a, "relay", "hub");
    await until("the relay stream in the relay's account", async () =>
      (await jetstreamManager(nc)).streams.info(relayNames(relay).stream).then(
        () => true,
        () => false,
      ),
    );
    for (let n = 0; n < RELAY_MAIL; n++) {
      const id = `mail-${n}`;
      const h = headers();
      h.set("Nats-Msg-Id", id);
      await jetstream(nc).publish(relayNames(relay).copy("carol-id", id), `mail ${n}`, { headers: h });
      relayIds.push(id);
    }
    await nc.close();

    archive = join(dir, "install.tar");
    const r = await plugin(a, ["backup", "-o", archive, "--nats-url", a.nats!.url]);
    expect(r.stderr).toContain(`wrote ${archive}`);
    expect(r.code, r.stderr).toBe(0);
    // The archive holds keys: its mode says so; nothing of them was printed.
    expect(statSync(archive).mode & 0o777).toBe(0o600);
    for (const seed of Object.values(KEY_FIELDS)) {
      const value = Buffer.from(secret(a, OPS, "ifp-nats-account").data[seed], "base64").toString();
      expect(r.stdout + r.stderr).not.toContain(value);
    }
    const signingPem = Buffer.from(secret(a, NS, "bob-signing").data["signing.key"], "base64").toString();
    expect(r.stdout + r.stderr).not.toContain(signingPem.split("\n")[1]);
    expect(r.stderr).toMatch(new RegExp(`IFP_INBOX_\\S+ of agent ${NS}/bob: ${WAITING} messages`));
    expect(r.stderr).toMatch(new RegExp(`IFP_RELAY_\\S+ of relay ${NS}/hub: ${RELAY_MAIL} messages`));
    // The same archive twice is never overwritten.
    expect((await plugin(a, ["backup", "-o", archive, "--nats-url", a.nats!.url])).code).toBe(1);
  });

  it("refuses a changed archive and one it cannot read before it writes anything", { timeout: 120_000 }, async () => {
    b = await newInstall("b");
    const bytes = readFileSync(archive);
    const stream = bytes.indexOf(Buffer.from(".tar.s2\0"));
    expect(stream).toBeGreaterThan(0);
    const tampered = Buffer.from(bytes);
    // A byte of the last file's data (a stream snapshot), well past its header.
    const at = bytes.length - 1024 - 600;
    tampered[at] = tampered[at]! ^ 0xff;
    writeFileSync(join(dir, "tampered.tar"), tampered);
    const r = await plugin(b, ["restore", join(dir, "tampered.tar"), "--keys-only"]);
    expect(r.code, r.stderr).toBe(1);
    expect(r.stderr).toMatch(/changed or damaged|checksum/);
    expect(r.stderr.trim().split("\n")).toHaveLength(1);
    // A newer format.
    const manifest = bytes.indexOf(Buffer.from('"version": 1'));
    const newer = Buffer.from(bytes);
    newer.write('"version": 2', manifest);
    writeFileSync(join(dir, "newer.tar"), newer);
    expect((await plugin(b, ["restore", join(dir, "newer.tar")])).stderr).toMatch(/does not match|version 2/);
    // Nothing was written into the cluster.
    expect(getOrAbsent(b.cp, ["get", "namespace", OPS])).toBeUndefined();
  });

  it("refuses entries that climb out of the archive, and writes nothing outside it", { timeout: 60_000 }, async () => {
    const { tar } = await import("../../src/commands/plugin/report.ts");
    const evil = tar(
      new Map([
        ["manifest.json", Buffer.from("{}")],
        ["../../escaped.json", Buffer.from("{}")],
      ]),
    );
    writeFileSync(join(dir, "evil.tar"), evil);
    const r = await plugin(b, ["restore", join(dir, "evil.tar")]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/not a (plain relative path|backup archive)/);
    expect(existsSync(join(dir, "..", "..", "escaped.json"))).toBe(false);
  });

  it("restores into a fresh control plane and NATS: the same key, every waiting message once", {
    timeout: 420_000,
  }, async () => {
    // 1. The keys, before the chart: its NATS starts on the restored configuration.
    let r = await plugin(b, ["restore", archive, "--keys-only"]);
    expect(r.code, r.stderr).toBe(0);
    expect(secret(b, OPS, "ifp-nats-account").data).toEqual(secret(a, OPS, "ifp-nats-account").data);
    expect(secret(b, OPS, "ifp-operator-ca").data).toEqual(secret(a, OPS, "ifp-operator-ca").data);
    expect(secret(b, NS, "bob-signing").data).toEqual(secret(a, NS, "bob-signing").data);
    expect(get(b, "agent", "bob")).toBeUndefined();
    await startInstallNats(b);
    await startOperator(b);
    // 2. The resources and their streams.
    r = await plugin(b, ["restore", archive, "--nats-url", b.nats!.url]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toMatch(new RegExp(`IFP_INBOX_\\S+ of agent ${NS}/bob: restored, ${WAITING} messages`));
    expect(r.stderr).toMatch(new RegExp(`IFP_RELAY_\\S+ of relay ${NS}/hub: restored, ${RELAY_MAIL} messages`));
    // A new resource (a new uid, so a new NATS account), its spec as it was, replicas given back.
    const restored = get(b, "agent", "bob");
    expect(restored.metadata.uid).not.toBe(get(a, "agent", "bob").metadata.uid);
    expect(restored.spec).toEqual(get(a, "agent", "bob").spec);
    expect(restored.metadata.labels).toEqual({ tier: "backend" });

    // 3. Again: nothing changes.
    r = await plugin(b, ["restore", archive, "--nats-url", b.nats!.url]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toMatch(/secret ifp-system\/ifp-nats-account: unchanged/);
    expect(r.stderr).toMatch(/agent team\/bob: unchanged/);
    expect(r.stderr).toMatch(new RegExp(`of agent ${NS}/bob: already holds the archive's ${WAITING} messages`));

    // 4. The operator signs with the same key; the relay's mail is there, each copy once.
    await until("bob's key in status", () => get(b, "agent", "bob")?.status?.signingKey);
    expect(get(b, "agent", "bob").status.signingKey).toMatchObject({
      keyId: bobKey.keyId,
      publicKey: bobKey.publicKey,
    });
    // The same key set; a key's creation date without a rotation is its Secret's, made anew here.
    const keySet = (i: Install) =>
      get(i, "agent", "bob").status.signingKeys.map((k: { keyId: string; publicKey: string; status: string }) => [
        k.keyId,
        k.publicKey,
        k.status,
      ]);
    expect(keySet(b)).toEqual(keySet(a));
    expect(await relayMail(b)).toEqual(relayIds);
    // A stream holding other messages than the archive's is refused, and left as it is; --force
    // puts the archive's back (the operator, which keeps the relay stream, runs meanwhile).
    const nc = await inAccountOf(b, "relay", "hub");
    const late = headers();
    late.set("Nats-Msg-Id", "late");
    await jetstream(nc).publish(relayNames(relay).copy("carol-id", "late"), "late", { headers: late });
    await nc.close();
    r = await plugin(b, ["restore", archive, "--nats-url", b.nats!.url]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(
      new RegExp(`IFP_RELAY_\\S+ of relay ${NS}/hub: exists with ${RELAY_MAIL + 1} messages .*--force replaces it`),
    );
    expect(await relayMail(b)).toEqual([...relayIds, "late"]);
    r = await plugin(b, ["restore", archive, "--nats-url", b.nats!.url, "--force"]);
    expect(r.code, r.stderr).toBe(0);
    expect(await relayMail(b)).toEqual(relayIds);

    // 5. Bob's runtime, from what the new operator rendered, hands over every waiting message once.
    const bob = await runBob(b);
    const got: string[] = [];
    await until(
      "every waiting message handed to the application",
      async () => {
        for (const d of await bob.localApi.pull(10, 1)) {
          got.push(d.message.headers.message_id);
          await bob.localApi.ack(d.message.headers.message_id);
        }
        return got.length >= WAITING;
      },
      60_000,
      250,
    );
    expect(await bob.localApi.pull(10, 2)).toEqual([]);
    expect([...got].sort()).toEqual([...sentIds].sort());
    expect(new Set(got).size).toBe(WAITING);
  });

  it("refuses another install's archive over a running install's keys without --force, and replaces them with it", {
    timeout: 180_000,
  }, async () => {
    const other = await newInstall("other");
    other.cp.kubectl(["create", "namespace", OPS]);
    other.cp.kubectl(["apply", "-f", "-"], operatorDeployment);
    other.cp.kubectl(["-n", OPS, "create", "secret", "generic", "ifp-operator-ca", "--from-literal=ca.crt=other-ca"]);
    const keys = generateKeys();
    accountSecret(other, {
      "account.pub": CredentialIssuer.fromKeys(keys).accountKey,
      [KEY_FIELDS.signing]: keys.signing,
    });
    const theirs = join(dir, "other.tar");
    await until("the other install's API serves Agents and Relays", () => {
      try {
        return other.cp.kubectl(["get", "agents.ifp.dev,relays.ifp.dev", "-A"]) !== undefined;
      } catch {
        return false;
      }
    });
    const mine = await plugin(other, ["backup", "-o", theirs, "--no-data"]);
    expect(mine.code, mine.stderr).toBe(0);
    const before = secret(b, OPS, "ifp-nats-account").data;
    const r = await plugin(b, ["restore", theirs]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(
      /refused: .*Secret ifp-system\/ifp-operator-ca.*Secret ifp-system\/ifp-nats-account.*--force/,
    );
    expect(secret(b, OPS, "ifp-nats-account").data).toEqual(before);
    // Told to: the other install's keys, over the one without a running operator.
    const forced = await plugin(other, ["restore", archive, "--keys-only", "--force"]);
    expect(forced.code, forced.stderr).toBe(0);
    expect(secret(other, OPS, "ifp-nats-account").data).toEqual(secret(a, OPS, "ifp-nats-account").data);
  });

  it("answers bad arguments with the usage and exit code 2", { timeout: 240_000 }, async () => {
    for (const args of [
      ["backup"],
      ["backup", "--nats-url", "nats://x:4222", "--no-data"],
      ["backup", "--nats-url", "http://x"],
      ["backup", "--force", "--no-data"],
      ["restore"],
      ["restore", "a.tar", "b.tar"],
      ["restore", "a.tar", "-n", "x"],
      ["restore", "a.tar", "--timeout", "0"],
      ["status", "--force"],
    ]) {
      const r = await plugin(b, args);
      expect(r.code, args.join(" ")).toBe(2);
      expect(r.stderr, args.join(" ")).toMatch(/^kubectl ifp: .*\n\nusage:/);
    }
    expect((await plugin(b, ["restore", join(dir, "absent.tar")])).code).toBe(1);
  });
});
