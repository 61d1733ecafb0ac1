import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import type { Server } from "node:http";
import { createServer as createHttpsServer } from "node:https";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseAllDocuments, stringify } from "yaml";
import { LocalApiClient } from "../runtime/src/client/local.ts";
import { HttpClient } from "../runtime/src/net/http-client.ts";
import { privateKeyFromPem } from "../runtime/src/protocol/keys.ts";
import { signMessage } from "../runtime/src/protocol/signing.ts";
import { composeMessage } from "../runtime/src/agent/compose.ts";
import { agentNames } from "../runtime/src/agent/names.ts";
import { RelayClient } from "../runtime/src/relay/client.ts";
import { toolPath } from "./tools/tools.ts";
import { startControlPlane, type ControlPlane } from "./support/controlplane.ts";
import { httpsRequest } from "./support/https.ts";
import { runDeploymentLocally, type LocalRuntime } from "./support/materialize.ts";
import { startNats, type NatsServer } from "./support/nats.ts";
import { addFakeNodes } from "./support/nodes.ts";
import { localhostTls } from "./support/tls.ts";
import { freePort, waitFor } from "./support/ports.ts";

/**
 * The whole path on a real control plane: helm install, the operator running as the chart's
 * service account, the examples applied, the runtimes run locally from what the operator
 * rendered, and real messages between them.
 */
const NS = "ifp-examples";
const SYSTEM = "ifp-system";
let cp: ControlPlane;
let nats: NatsServer;
let operator: ChildProcess | undefined;
let operatorLog = "";
const runtimes: LocalRuntime[] = [];
let hookTls: Awaited<ReturnType<typeof localhostTls>>;
const dir = mkdtempSync(join(tmpdir(), "ifp-e2e-"));

const json = (args: string[]) => cp.json(args);
const tryJson = (args: string[]) => cp.tryJson(args);
const ready = (kind: string, name: string) => tryJson(["-n", NS, "get", kind, name])?.status?.conditions?.find((c: any) => c.type === "Ready")?.status === "True";
const examples = (file: string) => parseAllDocuments(readFileSync(`examples/${file}`, "utf8")).map((d) => d.toJSON()).filter(Boolean);

beforeAll(async () => {
  [cp, nats] = await Promise.all([startControlPlane({}), startNats()]);
  await addFakeNodes(cp);
  // 1. helm install into the real API server (CRDs, RBAC, the operator's Deployment).
  const helm = spawnSync(
    toolPath("helm"),
    ["install", "ifp", "charts/ifp-operator", "--kubeconfig", cp.kubeconfig, "-n", SYSTEM, "--create-namespace", "--set", "nats.install=false", "--set", `nats.url=${nats.url}`, "--set", "tests.enabled=false", "--wait", "--timeout", "2m"],
    { encoding: "utf8" },
  );
  if (helm.status !== 0) throw new Error(`helm install failed: ${helm.stderr}`);
  // 2. The operator itself, run locally with the chart's service account and rendered args.
  const token = cp.kubectl(["-n", SYSTEM, "create", "token", "ifp-ifp-operator"]).trim();
  const kubeconfig = join(dir, "operator.kubeconfig");
  writeFileSync(kubeconfig, stringify({ apiVersion: "v1", kind: "Config", clusters: [{ name: "c", cluster: { server: cp.server, "certificate-authority-data": Buffer.from(cp.ca).toString("base64") } }], users: [{ name: "sa", user: { token } }], contexts: [{ name: "c", context: { cluster: "c", user: "sa" } }], "current-context": "c" }));
  const args = json(["-n", SYSTEM, "get", "deployment", "ifp-ifp-operator"]).spec.template.spec.containers[0].args as string[];
  const [health, metrics] = [await freePort(), await freePort()];
  operator = spawn(process.execPath, ["operator/bin/ifp-operator.ts", ...args.filter((a) => !/^--(health|metrics)-port=/.test(a)), `--kubeconfig=${kubeconfig}`, `--health-port=${health}`, `--metrics-port=${metrics}`], { stdio: ["ignore", "pipe", "pipe"] });
  operator.stdout!.on("data", (d) => (operatorLog = (operatorLog + d).slice(-20_000)));
  operator.stderr!.on("data", (d) => (operatorLog = (operatorLog + d).slice(-20_000)));
  await waitFor("the operator to be ready", async () => (await fetch(`http://127.0.0.1:${health}/readyz`).catch(() => undefined))?.status === 200, 60_000, 250).catch((err) => {
    throw new Error(`${err.message}\n${operatorLog}`);
  });
}, 600_000);

afterAll(async () => {
  for (const r of runtimes) r.proc.kill("SIGTERM");
  operator?.kill("SIGTERM");
  await Promise.all([cp?.stop(), nats?.close()]);
});

describe("end to end on the local control plane", () => {
  const ports = { alice: 0, bob: 0, relay: 0, aliceApi: 0 };
  const local = (text: string) => text.replace(/https:\/\/(alice|bob|relay)\.ifp-examples\.svc/g, (_m, n: "alice" | "bob" | "relay") => `https://localhost:${ports[n]}`);

  it("applies the examples and the operator makes them Ready", async () => {
    cp.kubectl(["create", "namespace", NS]);
    // The serving certificates also name localhost, so that the local processes below can check them.
    for (const file of ["signing-keys.yaml", "agent-alice.yaml", "agent-bob.yaml", "relay.yaml"]) {
      const docs = examples(file).map((d) => (d.kind === "Agent" || d.kind === "Relay" ? { ...d, spec: { ...d.spec, tls: { dnsNames: ["localhost"] } } } : d));
      cp.kubectl(["apply", "-n", NS, "-f", "-"], docs.map((d) => stringify(d)).join("---\n"));
    }
    await waitFor("alice, bob and the relay Ready", () => ready("agent", "alice") && ready("agent", "bob") && ready("relay", "relay"), 120_000, 500).catch((err) => {
      throw new Error(`${err.message}\n${cp.kubectl(["-n", NS, "get", "agents,relays", "-o", "yaml"]).slice(0, 4000)}\n${operatorLog.slice(-4000)}`);
    });
    expect(cp.kubectl(["-n", NS, "get", "agents"])).toMatch(/alice\s+alice-agent\s+https:\/\/alice\.ifp-examples\.svc\s+True/);
  });

  it("runs the runtimes from exactly what the operator rendered", async () => {
    Object.assign(ports, { alice: await freePort(), bob: await freePort(), relay: await freePort(), aliceApi: await freePort() });
    hookTls = await localhostTls();
    const bundle = join(dir, "ca-bundle.crt");
    writeFileSync(bundle, ["alice-tls", "bob-tls", "relay-tls"].map((s) => Buffer.from(json(["-n", NS, "get", "secret", s]).data["ca.crt"], "base64").toString()).join(""));
    const start = (name: "alice" | "bob" | "relay", extra: string[]) =>
      runDeploymentLocally(cp, NS, name, dir, {
        // Peers and relays are reached on loopback; a relay keeps its own URL, which names it in traces.
        rewriteFile: (_p, text) => (name === "relay" ? text : local(text)),
        rewriteArg: (a) => (a.startsWith("--port=") ? `--port=${ports[name]}` : a),
        extraArgs: ["--host=127.0.0.1", ...extra],
        // The test's webhook receiver has a certificate of the test CA.
        env: { IFP_LOG_LEVEL: "warn", NODE_EXTRA_CA_CERTS: hookTls.files.ca },
      });
    runtimes.push(start("relay", []));
    runtimes.push(start("bob", ["--ca-file", bundle, "--local-api-port=0"]));
    runtimes.push(start("alice", ["--ca-file", bundle, `--local-api-port=${ports.aliceApi}`]));
    for (const r of runtimes) expect(r.args.some((a) => a === `--nats=${nats.url}`), r.name).toBe(true);
    const ca = readFileSync(bundle, "utf8");
    for (const [name, port] of [["alice", ports.alice], ["bob", ports.bob], ["relay", ports.relay]] as const) {
      await waitFor(`${name} ready`, async () => (await httpsRequest(`https://localhost:${port}/readyz`, { ca }).catch(() => undefined))?.status === 200, 60_000, 250).catch((err) => {
        throw new Error(`${err.message}\n${runtimes.find((r) => r.name === name)?.output()}`);
      });
    }
    const caps = await httpsRequest(`https://localhost:${ports.alice}/.well-known/agent/capabilities`, { ca });
    expect(caps.json()).toMatchObject({ ifp: 7, agent_id: "alice-agent" });
  });

  it("delivers a message from alice to bob's inbox over HTTPS", async () => {
    const sent = await new LocalApiClient(`http://127.0.0.1:${ports.aliceApi}`).send({ to: "bob-agent", phase: "greeting", text: "Hello Bob, from Alice" });
    await waitFor("delivered", async () => (await new LocalApiClient(`http://127.0.0.1:${ports.aliceApi}`).status(sent.message_id)).state === "delivered", 30_000, 250);
    const nc = await connect({ servers: nats.url });
    try {
      const names = agentNames("bob-agent");
      const stored = await (await jetstreamManager(nc)).streams.getMessage(names.inboxStream, { last_by_subj: names.inbox(sent.message_id) });
      expect(stored?.json<any>().body.text).toBe("Hello Bob, from Alice");
    } finally {
      await nc.close();
    }
  });

  it("carries a message from alice through the relay to bob, pulled and pushed", async () => {
    const http = new HttpClient({ extraCa: readFileSync(join(dir, "ca-bundle.crt"), "utf8") });
    const key = (name: string, agent: string) => ({ agentId: agent, keyId: "key-1", privateKey: privateKeyFromPem(Buffer.from(json(["-n", NS, "get", "secret", `${name}-signing-key`]).data["signing.key"], "base64").toString()) });
    const alice = new RelayClient(`https://localhost:${ports.relay}`, key("alice", "alice-agent"), http);
    const bob = new RelayClient(`https://localhost:${ports.relay}`, key("bob", "bob-agent"), http);
    const msg = (text: string) => signMessage(composeMessage({ to: "bob-agent", text }, { agentId: "alice-agent" }), key("alice", "alice-agent"));
    try {
      const pulled = msg("pull me");
      expect((await alice.publish(pulled)).status).toBe(202);
      const { messages } = await bob.pull();
      expect(messages.map((m) => m.headers.message_id)).toContain(pulled.headers.message_id);
      expect(messages[0]!.trace!.received![0]).toMatchObject({ by: "relay:https://relay.ifp-examples.svc", from: "alice-agent" });
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
      await new Promise<void>((r) => hook.listen(0, "127.0.0.1", r));
      await bob.registerWebhook(`https://localhost:${(hook.address() as { port: number }).port}/push`);
      const pushed = msg("push me");
      await alice.publish(pushed);
      await waitFor("the push", () => got.some((m) => m.headers.message_id === pushed.headers.message_id), 30_000, 250);
      hook.close();
    } finally {
      await http.close();
    }
  });

  it("follows an edit of the Relay's retention.maxAge into the JetStream stream", async () => {
    cp.kubectl(["-n", NS, "patch", "relay", "relay", "--type=merge", "-p", '{"spec":{"retention":{"maxAge":"24h"}}}']);
    const nc = await connect({ servers: nats.url });
    try {
      const jsm = await jetstreamManager(nc);
      const stream = json(["-n", NS, "get", "relay", "relay"]).status.stream.name;
      await waitFor("max_age 24h", async () => (await jsm.streams.info(stream)).config.max_age === 24 * 3600e9, 30_000, 250);
    } finally {
      await nc.close();
    }
  });

  it("garbage-collects everything of a deleted Agent", async () => {
    const owned = (kind: string) => json(["-n", NS, "get", kind]).items.filter((o: any) => o.metadata.ownerReferences?.some((r: any) => r.kind === "Agent" && r.name === "alice"));
    expect(owned("deployments")).toHaveLength(1);
    cp.kubectl(["-n", NS, "delete", "agent", "alice"]);
    await waitFor("nothing of alice left", () => ["deployments", "services", "configmaps", "secrets", "serviceaccounts", "pods"].every((k) => owned(k).length === 0 && !tryJson(["-n", NS, "get", "deployment", "alice"])), 60_000, 500);
  });
});
