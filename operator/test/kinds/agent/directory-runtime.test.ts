// The operator as a directory, end to end: two Agents that trust each other only through
// spec.peerSelector (no key copied by hand), run as real runtimes from exactly what the operator
// rendered — the manifest ConfigMap, the signing Secret, the certificates and the trust bundle,
// through e2e/support/materialize.ts as e2e/e2e.test.ts runs the examples — against a real
// nats-server and a real API server. A signed message between them is verified at level 2 (the
// keys the directory wrote are confirmed out of band); after a rotation of the sender's key the
// receiver, rolled onto its new manifest, still accepts it and knows the new key; a key the
// directory does not list, and one it lists as revoked, are refused.
import { rmSync } from "node:fs";
import { join } from "node:path";
import { jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from "vitest";
import { parse } from "yaml";
import { startControlPlane, type ControlPlane } from "../../../../e2e/support/controlplane.ts";
import { httpsRequest } from "../../../../e2e/support/https.ts";
import { onLoopback, runDeploymentLocally, type LocalRuntime } from "../../../../e2e/support/materialize.ts";
import { startNats, type NatsServer } from "../../../../e2e/support/nats.ts";
import { freePort } from "../../../../e2e/support/ports.ts";
import { releaseDir, tempDir } from "../../../../e2e/support/process.ts";
import { LocalApiClient } from "../../../../runtime/src/client/local.ts";
import { agentNames } from "../../../../runtime/src/agent/names.ts";
import { generateSigningKey, privateKeyFromPem } from "../../../../runtime/src/protocol/keys.ts";
import { signMessage } from "../../../../runtime/src/protocol/signing.ts";
import { message } from "../../../../runtime/test/support/fixtures.ts";
import { startManager, type RunningManager } from "../../../src/commands/manager.ts";
import { capturedLog, getOrAbsent, kubectlOrError, perTest, until, untilRuntimeReady } from "../../support/helpers.ts";

let cp: ControlPlane;
let nats: NatsServer;
let manager: RunningManager;
const NS = "dir-run";
const operatorLog = capturedLog(400);
const dir = tempDir("ifp-dir-run-");
const running = new Map<string, LocalRuntime>();
/** The loopback port each running runtime listens on, by Agent name. */
const ports = new Map<string, number>();

beforeAll(async () => {
  [cp, nats] = await Promise.all([
    startControlPlane({ crds: ["crds/agents.ifp.dev.yaml", "crds/relays.ifp.dev.yaml"], controllerManager: false }),
    startNats(),
  ]);
  cp.kubectl(["create", "namespace", NS]);
  // The runtimes run on loopback: their certificates may name localhost, and loopback is the
  // cluster's network they may reach (--allow-private-targets), as e2e/e2e.test.ts sets it up.
  const settings = {
    runtimeImage: "ghcr.io/ifp-dev/ifp-runtime:test",
    runtimeImagePullPolicy: "IfNotPresent",
    natsUrl: nats.url,
    allowedDnsNames: ["localhost"],
    clusterNetworks: ["127.0.0.0/8"],
  };
  manager = await startManager({
    kubeconfig: cp.kubeconfig,
    settings,
    nats: { url: nats.url },
    watchNamespaces: [NS],
    resyncMs: 60_000,
    log: operatorLog.log,
  });
  await manager.started;
}, 300_000);
afterAll(async () => {
  await Promise.all([...running.values()].map((r) => r.stop()));
  await manager?.stop();
  await Promise.all([cp?.stop(), nats?.close()]);
  releaseDir(dir);
});
perTest(() =>
  [
    "operator log:",
    ...operatorLog.lines().slice(-80),
    "agents:",
    kubectlOrError(cp, ["-n", NS, "get", "agents", "-o", "wide"]),
    ...[...running.values()].flatMap((r) => [`${r.name} (runtime) log:`, r.output().slice(-4000)]),
  ].join("\n"),
);

const get = (kind: string, name: string) => getOrAbsent(cp, ["-n", NS, "get", kind, name]);
const agentYaml = (name: string, extra = "") => `apiVersion: ifp.dev/v1alpha1
kind: Agent
metadata: {name: ${name}, namespace: ${NS}, labels: {mesh: directory}}
spec:
  agentId: ${name}-id
  capabilities:
    - {name: gossip.exchange, description: Gossip}
  tls: {dnsNames: [localhost]}
  peerSelector: {agentSelector: {matchLabels: {mesh: directory}}}
${extra}`;
type Peer = { agentId: string; url?: string; keys: { keyId: string; publicKey: string; status: string }[] };
/** The peers of the manifest the operator rendered for an Agent's runtime. */
const renderedPeers = (name: string): Peer[] | undefined => {
  const cm = get("configmap", `${name}-manifest`);
  return cm ? parse(cm.data["manifest.yaml"]).spec.peers : undefined;
};
const signingSecret = (name: string) => {
  const data = get("secret", `${name}-signing`).data as Record<string, string>;
  return Object.fromEntries(Object.entries(data).map(([k, v]) => [k, Buffer.from(v, "base64").toString()]));
};

/**
 * Start (or restart, as a rollout would) an Agent's runtime from what the operator rendered now,
 * with the URLs of the runtimes already running, and its own, rewritten to their loopback ports.
 */
async function run(name: string): Promise<{ url: string; localApi: LocalApiClient; ca: string }> {
  await running.get(name)?.stop();
  running.delete(name);
  ports.delete(name);
  // Mounted afresh, as a new pod's volumes are: no file of a key the Secret no longer holds.
  rmSync(join(dir, name), { recursive: true, force: true });
  const metricsPort = await freePort();
  // Its port picked first: the base URL rendered for it (its Service's name) names it too.
  const port = await freePort();
  ports.set(name, port);
  const r = runDeploymentLocally(cp, NS, name, dir, {
    rewriteFile: (_p, text) =>
      text.replace(new RegExp(`https://([a-z]+)\\.${NS}\\.svc`, "g"), (m, other: string) =>
        ports.has(other) ? `https://localhost:${ports.get(other)}` : m,
      ),
    ...onLoopback(port, metricsPort),
  });
  running.set(name, r);
  const urls = await r.listening();
  const ca = get("configmap", `${name}-trust`).data["ca.crt"] as string;
  const url = `https://localhost:${ports.get(name)}`;
  await untilRuntimeReady(name, url, ca);
  return { url, localApi: new LocalApiClient(urls.localApiUrl!), ca };
}

/** The message as the receiver stored it in its inbox stream, with the level it was verified at. */
async function stored(receiver: string, messageId: string) {
  const nc = await connect({ servers: nats.url });
  try {
    const names = agentNames(`${NS}/${receiver}`);
    const m = await (await jetstreamManager(nc)).streams.getMessage(names.inboxStream, {
      last_by_subj: names.inbox(messageId),
    });
    return {
      level: m?.header?.get("Ifp-Auth-Level"),
      source: m?.header?.get("Ifp-Auth-Source"),
      sender: m?.header?.get("Ifp-Sender"),
      body: m?.json<any>(),
    };
  } finally {
    await nc.close();
  }
}

const post = (to: { url: string; ca: string }, body: unknown) =>
  httpsRequest(`${to.url}/.well-known/agent/inbox`, {
    method: "POST",
    headers: { "content-type": "application/json; charset=utf-8", accept: "application/json" },
    body: JSON.stringify(body),
    ca: to.ca,
  });
let conversations = 0;
/** A message from sender-id to receiver-id in a conversation of its own, signed with `key` only. */
const signedBy = (keyId: string, privateKeyPem: string) =>
  signMessage(message("sender-id", "receiver-id", { conversation_id: `conv:directory-${++conversations}` }), {
    agentId: "sender-id",
    keyId,
    privateKey: privateKeyFromPem(privateKeyPem),
  });

describe("spec.peerSelector end to end", () => {
  it("lets two runtimes of the install exchange messages verified at level 2 on the keys the directory wrote, across a rotation, and refuses a key it does not list", {
    timeout: 300_000,
  }, async () => {
    // The receiver takes nothing below level 2: only keys confirmed out of band.
    cp.kubectl(["apply", "-f", "-"], agentYaml("receiver", "  inbox: {minAuthLevel: 2}\n"));
    cp.kubectl(["apply", "-f", "-"], agentYaml("sender"));
    // No key was copied: each finds the other in its rendered manifest, with the key its status publishes.
    const senderKey = await until("the sender's key in status", () => get("agent", "sender")?.status?.signingKey);
    const receiverKey = await until("the receiver's key in status", () => get("agent", "receiver")?.status?.signingKey);
    await until(
      "each in the other's rendered peers",
      () =>
        renderedPeers("receiver")?.find((p) => p.agentId === "sender-id")?.keys[0]?.publicKey === senderKey.publicKey &&
        renderedPeers("sender")?.find((p) => p.agentId === "receiver-id")?.keys[0]?.publicKey === receiverKey.publicKey,
    );
    expect(get("agent", "sender").spec.peers ?? []).toEqual([]);
    expect(get("agent", "receiver").spec.peers ?? []).toEqual([]);

    let receiver = await run("receiver");
    let sender = await run("sender");
    onTestFinished(async () => {
      await Promise.all([...running.values()].map((r) => r.stop()));
    });

    // 1. The sender's runtime signs and delivers; the receiver verifies at level 2 from its peers.
    const first = await sender.localApi.send({
      to: "receiver-id",
      phase: "greeting",
      text: "hello through the directory",
    });
    await until(
      "the first message delivered",
      async () => (await sender.localApi.status(first.message_id)).state === "delivered",
      30_000,
      250,
    );
    expect(await stored("receiver", first.message_id)).toMatchObject({
      level: "2",
      source: "peers",
      sender: "sender-id",
      body: { body: { text: "hello through the directory" } },
    });
    expect(first.message.security!.signatures!.map((s) => s.key_id)).toEqual([`sender-id#${senderKey.keyId}`]);

    // 2. The sender's key is rotated; the directory follows it into the receiver's manifest, and
    // both runtimes roll onto what was rendered (the receiver first: the sender's file names its port).
    cp.kubectl([
      "-n",
      NS,
      "patch",
      "agent",
      "sender",
      "--type=merge",
      "-p",
      '{"spec":{"signing":{"rotate":"2026-11","transition":"168h"}}}',
    ]);
    const keys = await until("both of the sender's keys in the receiver's manifest", () => {
      const k = renderedPeers("receiver")?.find((p) => p.agentId === "sender-id")?.keys;
      return k?.length === 2 ? k : undefined;
    });
    expect(keys.map((k) => [k.keyId, k.status, k.publicKey === senderKey.publicKey])).toEqual([
      [senderKey.keyId, "retired", true],
      [`${senderKey.keyId}-r2`, "active", false],
    ]);
    await until("the rotated key in the sender's Secret", () => signingSecret("sender")["keys.json"]);
    const rotatedSecret = signingSecret("sender");
    receiver = await run("receiver");
    sender = await run("sender");
    const second = await sender.localApi.send({ to: "receiver-id", phase: "greeting", text: "after the rotation" });
    await until(
      "the message after the rotation delivered",
      async () => (await sender.localApi.status(second.message_id)).state === "delivered",
      30_000,
      250,
    );
    expect(second.message.security!.signatures!.map((s) => s.key_id)).toEqual([
      `sender-id#${senderKey.keyId}-r2`,
      `sender-id#${senderKey.keyId}`,
    ]);
    expect(await stored("receiver", second.message_id)).toMatchObject({
      level: "2",
      source: "peers",
      sender: "sender-id",
    });
    // The receiver knows the new key from the directory alone: a message signed by it only is accepted at level 2.
    const newOnly = signedBy(`${senderKey.keyId}-r2`, rotatedSecret["signing.key"]!);
    const accepted = await post(receiver, newOnly);
    expect(accepted.status, accepted.text).toBe(202);
    expect(await stored("receiver", newOnly.headers.message_id)).toMatchObject({ level: "2", source: "peers" });

    // 3. A key the directory does not list is refused, under a key id of its own or the active key's.
    const stranger = generateSigningKey().privateKeyPem;
    const unknown = await post(receiver, signedBy("key-9", stranger));
    expect(unknown.status, unknown.text).toBe(401);
    expect(unknown.json()).toMatchObject({ code: "unknown_sender" });
    const forged = await post(receiver, signedBy(`${senderKey.keyId}-r2`, stranger));
    expect(forged.status, forged.text).toBe(401);
    expect(forged.json()).toMatchObject({ code: "invalid_signature" });

    // 4. The old key revoked at once: the directory says so, and the receiver, rolled, refuses it with the reason.
    cp.kubectl([
      "-n",
      NS,
      "patch",
      "agent",
      "sender",
      "--type=merge",
      "-p",
      JSON.stringify({ spec: { signing: { revoke: [senderKey.keyId] } } }),
    ]);
    await until(
      "the old key revoked in the receiver's manifest",
      () => renderedPeers("receiver")?.find((p) => p.agentId === "sender-id")?.keys[0]?.status === "revoked",
    );
    receiver = await run("receiver");
    const revoked = await post(receiver, signedBy(senderKey.keyId, rotatedSecret["retired-1.key"]!));
    expect(revoked.status, revoked.text).toBe(401);
    expect(revoked.json()).toMatchObject({
      code: "invalid_signature",
      message: expect.stringMatching(/has been revoked/),
    });
    const still = await post(receiver, signedBy(`${senderKey.keyId}-r2`, rotatedSecret["signing.key"]!));
    expect(still.status, still.text).toBe(202);
  });
});
