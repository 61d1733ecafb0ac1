import { spawnSync } from "node:child_process";
import type { Server } from "node:http";
import { createServer as createHttpsServer } from "node:https";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from "vitest";
import { parseAllDocuments, stringify } from "yaml";
import { LocalApiClient } from "../runtime/src/client/local.ts";
import { HttpClient } from "../runtime/src/net/http-client.ts";
import { didKeyFromPublicKey } from "../runtime/src/protocol/did-key.ts";
import { generateSigningKey, privateKeyFromPem } from "../runtime/src/protocol/keys.ts";
import { signMessage } from "../runtime/src/protocol/signing.ts";
import { composeMessage } from "../runtime/src/agent/outbound/compose.ts";
import { agentNames } from "../runtime/src/agent/names.ts";
import { EXAMPLES_NAMESPACES_FILE, exampleWatchValue } from "./support/examples.ts";
import { RelayClient } from "../runtime/src/net/relay-client.ts";
import { toolPath } from "./tools/tools.ts";
import { startControlPlane, type ControlPlane } from "./support/controlplane.ts";
import { httpsRequest } from "./support/https.ts";
import { runDeploymentLocally, type LocalRuntime } from "./support/materialize.ts";
import { startNats, type NatsServer } from "./support/nats.ts";
import { addFakeNodes } from "./support/nodes.ts";
import { describeExit, releaseDir, spawnProcess, tempDir, type ManagedProcess } from "./support/process.ts";
import { localhostTls } from "./support/tls.ts";
import { freePort, waitFor } from "./support/ports.ts";

/**
 * The whole path on a real control plane: helm install, the operator running as the chart's
 * service account, the examples applied, the runtimes run locally from what the operator
 * rendered, and real messages between them.
 */
/** The examples' namespaces (each file names its own). */
const NS = { alice: "ifp-alice", bob: "ifp-bob", relay: "ifp-relay" } as const;
const SYSTEM = "ifp-system";
let cp: ControlPlane;
let nats: NatsServer;
let operator: ManagedProcess | undefined;
const runtimes: LocalRuntime[] = [];
const dir = tempDir("ifp-e2e-");

const json = (args: string[]) => cp.json(args);
const tryJson = (args: string[]) => cp.tryJson(args);
const ready = (kind: string, name: keyof typeof NS) =>
  tryJson(["-n", NS[name], "get", kind, name])?.status?.conditions?.find((c: any) => c.type === "Ready")?.status ===
  "True";
const examples = (file: string) =>
  parseAllDocuments(readFileSync(`examples/${file}`, "utf8"))
    .map((d) => d.toJSON())
    .filter(Boolean);

/** A step shared by several tests, run by the first that needs it; a failure fails each of them with its cause. */
const once = <T>(fn: () => Promise<T>) => {
  let result: Promise<T> | undefined;
  return () => (result ??= fn());
};

/** The operator, run locally with the chart's service account and rendered args; retried on new ports if one was taken. */
async function startOperator(kubeconfig: string, args: string[]): Promise<ManagedProcess> {
  for (let attempt = 1; ; attempt++) {
    const [health, metrics] = [await freePort(), await freePort()];
    const p = spawnProcess(
      "operator",
      process.execPath,
      [
        "operator/bin/ifp-operator.ts",
        ...args.filter((a) => !/^--(health|metrics)-port=/.test(a)),
        `--kubeconfig=${kubeconfig}`,
        `--health-port=${health}`,
        `--metrics-port=${metrics}`,
      ],
      { logFile: join(dir, "operator.log") },
    );
    const died = p.exited.then((e) =>
      Promise.reject(new Error(`the operator ${describeExit(e)}:\n${p.log().slice(-4000)}`)),
    );
    died.catch(() => {});
    try {
      await Promise.race([
        died,
        waitFor(
          "the operator to be ready",
          async () => (await fetch(`http://127.0.0.1:${health}/readyz`).catch(() => undefined))?.status === 200,
          60_000,
          250,
        ),
      ]);
      return p;
    } catch (err) {
      await p.stop();
      if (!/EADDRINUSE/.test(p.log()) || attempt >= 3) throw err;
    }
  }
}

beforeAll(async () => {
  [cp, nats] = await Promise.all([startControlPlane({}), startNats()]);
  await addFakeNodes(cp);
  // 1. The examples' namespaces, then helm install into the real API server (CRDs, RBAC, the
  // operator's Deployment) watching them, as the README does.
  cp.kubectl(["apply", "-f", EXAMPLES_NAMESPACES_FILE]);
  const helm = spawnSync(
    toolPath("helm"),
    [
      "install",
      "ifp",
      "charts/ifp-operator",
      "--kubeconfig",
      cp.kubeconfig,
      "-n",
      SYSTEM,
      "--create-namespace",
      "--set",
      exampleWatchValue(),
      "--set",
      "allowedDnsNames={localhost}",
      "--set",
      "nats.install=false",
      "--set",
      `nats.url=${nats.url}`,
      // A NATS of the user's own without accounts (no operator mode): the per-agent layout, as
      // docs/scale.md tells such an install to choose.
      "--set",
      "runtime.natsLayout=per-agent",
      "--set",
      "tests.enabled=false",
      "--wait",
      "--timeout",
      "2m",
    ],
    { encoding: "utf8", timeout: 150_000 },
  );
  if (helm.status !== 0)
    throw new Error(`helm install failed (${helm.error?.message ?? `exit ${helm.status}`}): ${helm.stderr}`);
  // 2. The operator itself.
  const token = cp.kubectl(["-n", SYSTEM, "create", "token", "ifp-ifp-operator"]).trim();
  const kubeconfig = join(dir, "operator.kubeconfig");
  writeFileSync(
    kubeconfig,
    stringify({
      apiVersion: "v1",
      kind: "Config",
      clusters: [
        {
          name: "c",
          cluster: { server: cp.server, "certificate-authority-data": Buffer.from(cp.ca).toString("base64") },
        },
      ],
      users: [{ name: "sa", user: { token } }],
      contexts: [{ name: "c", context: { cluster: "c", user: "sa" } }],
      "current-context": "c",
    }),
  );
  const args = json(["-n", SYSTEM, "get", "deployment", "ifp-ifp-operator"]).spec.template.spec.containers[0]
    .args as string[];
  operator = await startOperator(kubeconfig, args);
}, 600_000);

afterAll(async () => {
  await Promise.all([...runtimes.map((r) => r.stop()), operator?.stop()]);
  await Promise.all([cp?.stop(), nats?.close()]);
  releaseDir(dir);
});

// The examples, with serving certificates that also name localhost (which the install allows,
// allowedDnsNames), so that the local processes below can check them.
const examplesApplied = once(async () => {
  for (const file of ["agent-alice.yaml", "agent-bob.yaml", "relay.yaml"]) {
    const docs = examples(file).map((d) =>
      d.kind === "Agent" || d.kind === "Relay" ? { ...d, spec: { ...d.spec, tls: { dnsNames: ["localhost"] } } } : d,
    );
    cp.kubectl(["apply", "-f", "-"], docs.map((d) => stringify(d)).join("---\n"));
  }
});

const examplesReady = once(async () => {
  await examplesApplied();
  await waitFor(
    "alice, bob and the relay Ready",
    () => ready("agent", "alice") && ready("agent", "bob") && ready("relay", "relay"),
    120_000,
    500,
  ).catch((err) => {
    throw new Error(`${err.message}\n${cp.kubectl(["get", "agents,relays", "-A", "-o", "yaml"]).slice(0, 4000)}`);
  });
});

/**
 * The runtimes, run from exactly what the operator rendered, each on a loopback port picked for it:
 * the relay first, then bob, then alice, whose files name bob's and the relay's ports.
 */
const running = once(async () => {
  await examplesReady();
  // Each runtime's HTTPS port is picked before any starts: the base URL the operator rendered
  // for each (its Service's name) becomes https://localhost:<its port> in every file, its own
  // among them, as the Service's name would reach it in a cluster.
  const ports = { alice: await freePort(), bob: await freePort(), relay: await freePort(), aliceApi: 0 };
  const local = (text: string) =>
    text.replace(
      /https:\/\/(alice|bob|relay)\.ifp-(?:alice|bob|relay)\.svc/g,
      (_m, n: "alice" | "bob" | "relay") => `https://localhost:${ports[n]}`,
    );
  const hookTls = await localhostTls();
  // The test's own clients trust what a runtime of the install trusts: the bundle the operator
  // published (the install CA issued every serving certificate). The runtimes get it from their
  // rendered --ca-file, nothing added.
  const bundle = join(dir, "ca-bundle.crt");
  writeFileSync(bundle, json(["-n", NS.alice, "get", "configmap", "alice-trust"]).data["ca.crt"]);
  const ca = readFileSync(bundle, "utf8");
  const start = async (name: "alice" | "bob" | "relay", extra: string[]) => {
    // The rendered --metrics-port=9090 on a free port of its own: three runtimes share loopback.
    const metricsPort = await freePort();
    const r = runDeploymentLocally(cp, NS[name], name, dir, {
      // Peers and relays are reached on loopback. Request signatures cover the relay's authority,
      // so the relay's public URL becomes https://localhost (a replica reached directly is
      // accepted on the port it listens on); it names the relay in traces.
      rewriteFile: (_p, text) =>
        name === "relay" ? text.replace(/https:\/\/relay\.ifp-relay\.svc/g, "https://localhost") : local(text),
      // The cluster's networks, which the operator allows the runtimes to reach, are loopback here.
      rewriteArg: (a) =>
        a.startsWith("--port=")
          ? `--port=${ports[name]}`
          : a.startsWith("--local-api-tls-port=")
            ? "--local-api-tls-port=0"
            : a.startsWith("--allow-private-targets=")
              ? `${a},127.0.0.0/8`
              : a.startsWith("--metrics-port=")
                ? `--metrics-port=${metricsPort}`
                : a,
      extraArgs: ["--host=127.0.0.1", ...extra],
      // The test's webhook receiver has a certificate of the test CA; info level logs the port.
      env: { IFP_LOG_LEVEL: "info", NODE_EXTRA_CA_CERTS: hookTls.files.ca },
    });
    runtimes.push(r);
    const urls = await r.listening();
    ports[name] = Number(new URL(urls.url).port);
    if (urls.localApiUrl)
      Object.assign(ports, name === "alice" ? { aliceApi: Number(new URL(urls.localApiUrl).port) } : {});
    await waitFor(
      `${name} ready`,
      async () =>
        (await httpsRequest(`https://localhost:${ports[name]}/readyz`, { ca }).catch(() => undefined))?.status === 200,
      60_000,
      250,
    );
    return r;
  };
  await start("relay", []);
  await start("bob", ["--local-api-port=0"]);
  await start("alice", ["--local-api-port=0"]);
  return { ports, ca, bundle, hookTls };
});

// Each test is given a timeout longer than its waits and those of the shared steps it may be
// the first to run, so that a slow step fails with its own message (and the processes' logs)
// rather than the test timing out.
describe("end to end on the local control plane", { timeout: 300_000 }, () => {
  it("applies the examples and the operator makes them Ready", async () => {
    await examplesReady();
    expect(cp.kubectl(["-n", NS.alice, "get", "agents"])).toMatch(
      /alice\s+alice-agent\s+https:\/\/alice\.ifp-alice\.svc\s+True/,
    );
  });

  it("runs the runtimes from exactly what the operator rendered", async () => {
    const { ports, ca } = await running();
    for (const r of runtimes)
      expect(
        r.args.some((a) => a === `--nats=${nats.url}`),
        r.name,
      ).toBe(true);
    // One trust domain: each runtime trusts its rendered bundle, which holds the install CA that
    // issued every serving certificate.
    for (const r of runtimes)
      expect(
        r.args.filter((a) => a.startsWith("--ca-file")),
        r.name,
      ).toEqual([`--ca-file=${join(r.dir, "etc/ifp/trust/ca.crt")}`]);
    const installCa = Buffer.from(
      json(["-n", SYSTEM, "get", "secret", "ifp-ifp-operator-ca"]).data["ca.crt"],
      "base64",
    ).toString();
    for (const name of ["alice", "bob", "relay"] as const)
      expect(json(["-n", NS[name], "get", "configmap", `${name}-trust`]).data["ca.crt"], name).toContain(
        installCa.trim(),
      );
    const caps = await httpsRequest(`https://localhost:${ports.alice}/.well-known/agent/capabilities`, { ca });
    expect(caps.json()).toMatchObject({ ifp: 7, agent_id: "alice-agent" });
  });

  it("delivers a message from alice to bob's inbox over HTTPS", async () => {
    const { ports } = await running();
    const api = new LocalApiClient(`http://127.0.0.1:${ports.aliceApi}`);
    const sent = await api.send({ to: "bob-agent", phase: "greeting", text: "Hello Bob, from Alice" });
    await waitFor("delivered", async () => (await api.status(sent.message_id)).state === "delivered", 30_000, 250);
    const nc = await connect({ servers: nats.url });
    onTestFinished(() => nc.close());
    // Named from the Agent resource (namespace/name), not from its agent id.
    const names = agentNames(`${NS.bob}/bob`);
    const stored = await (await jetstreamManager(nc)).streams.getMessage(names.inboxStream, {
      last_by_subj: names.inbox(sent.message_id),
    });
    expect(stored?.json<any>().body.text).toBe("Hello Bob, from Alice");
  });

  it("carries a message from alice through the relay to bob, pulled and pushed", async () => {
    const { ports, bundle, hookTls } = await running();
    const http = new HttpClient({ extraCa: readFileSync(bundle, "utf8") });
    onTestFinished(() => http.close());
    const key = (name: "alice" | "bob", agent: string) => ({
      agentId: agent,
      keyId: "key-1",
      privateKey: privateKeyFromPem(
        Buffer.from(
          json(["-n", NS[name], "get", "secret", `${name}-signing-key`]).data["signing.key"],
          "base64",
        ).toString(),
      ),
    });
    const alice = new RelayClient(`https://localhost:${ports.relay}`, key("alice", "alice-agent"), http);
    const bob = new RelayClient(`https://localhost:${ports.relay}`, key("bob", "bob-agent"), http);
    const msg = (text: string) =>
      signMessage(composeMessage({ to: "bob-agent", text }, { agentId: "alice-agent" }), key("alice", "alice-agent"));

    const pulled = msg("pull me");
    expect((await alice.publish(pulled)).status).toBe(202);
    const { messages } = await bob.pull();
    expect(messages.map((m) => m.headers.message_id)).toContain(pulled.headers.message_id);
    expect(messages[0]!.trace!.received![0]).toMatchObject({ by: "relay:https://localhost", from: "alice-agent" });
    expect(await bob.ack(pulled.headers.message_id)).toBe(true);

    const got: any[] = [];
    const hook: Server = createHttpsServer({ cert: hookTls.cert, key: hookTls.key }, (req, res) => {
      let body = "";
      req.on("data", (c) => (body += c));
      req.on("end", () => {
        got.push(JSON.parse(body));
        res.writeHead(200).end();
      });
    });
    onTestFinished(() => new Promise<void>((r) => hook.close(() => r())));
    await new Promise<void>((r) => hook.listen(0, "127.0.0.1", r));
    await bob.registerWebhook(`https://localhost:${(hook.address() as { port: number }).port}/push`);
    const pushed = msg("push me");
    await alice.publish(pushed);
    await waitFor("the push", () => got.some((m) => m.headers.message_id === pushed.headers.message_id), 30_000, 250);
  });

  it("takes a stranger's message for bob at the example relay, by its default policy, and refuses a sender it cannot look up", async () => {
    const { ports, bundle } = await running();
    const http = new HttpClient({ extraCa: readFileSync(bundle, "utf8") });
    onTestFinished(() => http.close());
    const relayUrl = `https://localhost:${ports.relay}`;
    const bobKey = {
      agentId: "bob-agent",
      keyId: "key-1",
      privateKey: privateKeyFromPem(
        Buffer.from(json(["-n", NS.bob, "get", "secret", "bob-signing-key"]).data["signing.key"], "base64").toString(),
      ),
    };
    const bob = new RelayClient(relayUrl, bobKey, http);
    // A sender the Relay does not list: a did:key, whose key the relay finds in its id.
    const { privateKeyPem, publicKey } = generateSigningKey();
    const did = didKeyFromPublicKey(publicKey);
    const strangerKey = { agentId: did, keyId: "key-1", privateKey: privateKeyFromPem(privateKeyPem) };
    const stranger = new RelayClient(relayUrl, strangerKey, http);
    const m = signMessage(composeMessage({ to: "bob-agent", text: "from a stranger" }, { agentId: did }), strangerKey);
    const res = await stranger.publish(m);
    expect(res.status, res.text).toBe(202);
    const { messages } = await bob.pull();
    const got = messages.find((x) => x.headers.message_id === m.headers.message_id);
    expect(got?.trace?.received?.[0]).toMatchObject({ by: "relay:https://localhost", with: "https+ifp-4", from: did });
    // The stranger cannot read or acknowledge bob's mailbox.
    const read = await stranger.request("GET", "/relay/messages");
    expect([read.status, JSON.parse(read.text).code]).toEqual([401, "unknown_sender"]);
    const ack = await stranger.request("DELETE", `/relay/messages/${encodeURIComponent(m.headers.message_id)}`);
    expect([ack.status, JSON.parse(ack.text).code]).toEqual([401, "unknown_sender"]);
    expect(await bob.ack(m.headers.message_id)).toBe(true);
    // The deny side of the default policy: a sender whose key cannot be looked up (a simple name the Relay does not list).
    const nobodyKey = { ...strangerKey, agentId: "nobody-agent" };
    const refused = await new RelayClient(relayUrl, nobodyKey, http).publish(
      signMessage(composeMessage({ to: "bob-agent", text: "refused" }, { agentId: "nobody-agent" }), nobodyKey),
    );
    expect([refused.status, JSON.parse(refused.text).code]).toEqual([401, "unknown_sender"]);
  });

  it("follows an edit of the Relay's retention.maxAge into the JetStream stream", async () => {
    await examplesReady();
    cp.kubectl([
      "-n",
      NS.relay,
      "patch",
      "relay",
      "relay",
      "--type=merge",
      "-p",
      '{"spec":{"retention":{"maxAge":"24h"}}}',
    ]);
    const nc = await connect({ servers: nats.url });
    onTestFinished(() => nc.close());
    const jsm = await jetstreamManager(nc);
    const stream = json(["-n", NS.relay, "get", "relay", "relay"]).status.stream.name;
    await waitFor(
      "max_age 24h",
      async () => (await jsm.streams.info(stream)).config.max_age === 24 * 3600e9,
      30_000,
      250,
    );
  });

  it("garbage-collects everything of a deleted Agent", async () => {
    // An Agent of its own, so that deleting it takes nothing from the other tests, in any order.
    await examplesApplied();
    const alice = examples("agent-alice.yaml").find((d) => d.kind === "Agent");
    // Its own signing key (alice's Secret is labelled for alice alone), made by the operator.
    const probe = {
      ...alice,
      metadata: { name: "gc-probe", namespace: NS.alice },
      spec: { ...alice.spec, agentId: "gc-probe-agent", signing: {} },
    };
    cp.kubectl(["apply", "-f", "-"], stringify(probe));
    const owned = (kind: string) =>
      json(["-n", NS.alice, "get", kind]).items.filter((o: any) =>
        o.metadata.ownerReferences?.some((r: any) => r.kind === "Agent" && r.name === "gc-probe"),
      );
    const pods = () => json(["-n", NS.alice, "get", "pods", "-l", "app.kubernetes.io/instance=gc-probe"]).items;
    await waitFor(
      "gc-probe's Deployment and pod",
      () => owned("deployments").length === 1 && pods().length > 0,
      90_000,
      500,
    );
    cp.kubectl(["-n", NS.alice, "delete", "agent", "gc-probe"]);
    await waitFor(
      "nothing of gc-probe left",
      () =>
        ["deployments", "services", "configmaps", "secrets", "serviceaccounts"].every((k) => owned(k).length === 0) &&
        !tryJson(["-n", NS.alice, "get", "deployment", "gc-probe"]) &&
        pods().length === 0,
      90_000,
      500,
    );
  });
});
