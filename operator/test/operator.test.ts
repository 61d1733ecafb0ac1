import { jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startControlPlane, type ControlPlane } from "../../e2e/support/controlplane.ts";
import { startNats, type NatsServer } from "../../e2e/support/nats.ts";
import { waitFor } from "../../e2e/support/ports.ts";
import { privateKeyFromPem, rawPublicKey } from "../../runtime/src/protocol/keys.ts";
import { startManager, type RunningManager } from "../src/manager.ts";

let cp: ControlPlane;
let nats: NatsServer;
let manager: RunningManager;
const NS = "ifp-test";

const settings = { runtimeImage: "ghcr.io/ifp-dev/ifp-runtime:test", runtimeImagePullPolicy: "IfNotPresent", natsUrl: "nats://nats.test:4222" };
const start = () =>
  startManager({
    kubeconfig: cp.kubeconfig,
    settings,
    nats: { url: nats.url },
    watchNamespaces: [],
    healthPort: 0,
    resyncMs: 2_000,
    log: pino({ level: process.env.IFP_TEST_LOG ?? "silent" }),
  });

const json = (args: string[]) => JSON.parse(cp.kubectl([...args, "-o", "json"]));
const tryJson = (args: string[]) => {
  try {
    return json(args);
  } catch {
    return undefined;
  }
};
const condition = (obj: any, type: string) => obj?.status?.conditions?.find((c: any) => c.type === type);
const writes = async () => {
  const m = await manager.metrics.writes.get();
  return m.values.reduce((a, v) => a + v.value, 0);
};

beforeAll(async () => {
  [cp, nats] = await Promise.all([startControlPlane({ crds: ["crds/agents.ifp.dev.yaml", "crds/relays.ifp.dev.yaml"] }), startNats()]);
  cp.kubectl(["create", "namespace", NS]);
  manager = await start();
}, 300_000);
afterAll(async () => {
  await manager?.stop();
  await Promise.all([cp?.stop(), nats?.close()]);
});

const agentYaml = (name: string, extra = "") => `apiVersion: ifp.dev/v1alpha1
kind: Agent
metadata: {name: ${name}, namespace: ${NS}}
spec:
  agentId: ${name}-id
  capabilities:
    - {name: gossip.exchange, description: Gossip}
${extra}`;

describe("Agent", () => {
  it("reconciles into owned children that run the runtime's start contract", async () => {
    cp.kubectl(["apply", "-f", "-"], agentYaml("alice"));
    const dep = await waitFor("the Deployment", () => tryJson(["-n", NS, "get", "deployment", "alice"]), 30_000, 200);
    const c = dep.spec.template.spec.containers[0];
    expect(c.image).toBe(settings.runtimeImage);
    expect(c.args).toEqual([
      "agent",
      "--manifest=/etc/ifp/manifest/manifest.yaml",
      "--port=8443",
      "--tls-cert=/etc/ifp/tls/tls.crt",
      "--tls-key=/etc/ifp/tls/tls.key",
      "--nats=nats://nats.test:4222",
      "--signing-key=/etc/ifp/signing/signing.key",
    ]);
    expect(c.readinessProbe.httpGet).toMatchObject({ path: "/readyz", scheme: "HTTPS" });
    expect(c.securityContext).toMatchObject({ readOnlyRootFilesystem: true, allowPrivilegeEscalation: false });
    const agent = json(["-n", NS, "get", "agent", "alice"]);
    for (const [kind, name] of [["configmap", "alice-manifest"], ["service", "alice"], ["deployment", "alice"], ["secret", "alice-signing"], ["secret", "alice-tls"], ["serviceaccount", "alice-runtime"], ["role", "alice-runtime"], ["rolebinding", "alice-runtime"]] as const) {
      const child = await waitFor(`${kind}/${name}`, () => tryJson(["-n", NS, "get", kind, name]), 30_000, 200);
      expect(child.metadata.ownerReferences, `${kind}/${name}`).toEqual([expect.objectContaining({ kind: "Agent", name: "alice", uid: agent.metadata.uid, controller: true })]);
    }
    const cm = json(["-n", NS, "get", "configmap", "alice-manifest"]);
    expect(cm.data["manifest.yaml"]).toMatch(/agentId: alice-id/);
    expect(cm.data["manifest.yaml"]).toMatch(/ifp.dev\/signing-key-created/);
    const tls = json(["-n", NS, "get", "secret", "alice-tls"]);
    expect(tls.type).toBe("kubernetes.io/tls");
  });

  it("reports status through /status: observedGeneration, conditions, endpoint, public key", async () => {
    const agent = await waitFor("status", () => {
      const a = json(["-n", NS, "get", "agent", "alice"]);
      return a.status?.observedGeneration === 1 ? a : undefined;
    });
    expect(condition(agent, "Ready")).toMatchObject({ status: "False", reason: "RuntimeNotReady", observedGeneration: 1, message: "0/1 runtime replicas ready" });
    expect(agent.status.endpoint).toBe(`https://alice.${NS}.svc`);
    const secret = json(["-n", NS, "get", "secret", "alice-signing"]);
    const pub = rawPublicKey(privateKeyFromPem(Buffer.from(secret.data["signing.key"], "base64").toString()));
    expect(agent.status.signingKey).toEqual({ keyId: "key-1", publicKey: pub, secretName: "alice-signing" });
    expect(cp.kubectl(["-n", NS, "get", "agents"])).toMatch(/alice\s+alice-id\s+https:\/\/alice\.ifp-test\.svc\s+False/);
  });

  it("is Ready once the runtime's Deployment is", async () => {
    // No kubelet here: mark the runtime's pod Ready as a kubelet would, and let the real
    // ReplicaSet and Deployment controllers carry it up.
    const pod = await waitFor("the runtime pod", () => json(["-n", NS, "get", "pods", "-l", "app.kubernetes.io/instance=alice"]).items[0], 30_000, 250);
    const now = new Date().toISOString();
    cp.kubectl(["-n", NS, "patch", "pod", pod.metadata.name, "--subresource=status", "--type=merge", "-p", JSON.stringify({ status: { phase: "Running", conditions: [{ type: "Ready", status: "True", lastTransitionTime: now }, { type: "ContainersReady", status: "True", lastTransitionTime: now }] } })]);
    const agent = await waitFor("Ready=True", () => {
      const a = json(["-n", NS, "get", "agent", "alice"]);
      return condition(a, "Ready")?.status === "True" ? a : undefined;
    });
    expect(condition(agent, "Ready")).toMatchObject({ reason: "RuntimeReady" });
  });

  it("rolls the pods when the spec changes, and keeps the signing key", async () => {
    const before = json(["-n", NS, "get", "deployment", "alice"]);
    const key = json(["-n", NS, "get", "secret", "alice-signing"]).data["signing.key"];
    cp.kubectl(["apply", "-f", "-"], agentYaml("alice", "    - {name: ping, description: Pong}\n"));
    const after = await waitFor("a new config hash", () => {
      const d = json(["-n", NS, "get", "deployment", "alice"]);
      return d.spec.template.metadata.annotations["ifp.dev/config-hash"] !== before.spec.template.metadata.annotations["ifp.dev/config-hash"] ? d : undefined;
    });
    expect(after.metadata.generation).toBeGreaterThan(before.metadata.generation);
    expect(json(["-n", NS, "get", "configmap", "alice-manifest"]).data["manifest.yaml"]).toMatch(/name: ping/);
    await waitFor("observedGeneration 2", () => json(["-n", NS, "get", "agent", "alice"]).status?.observedGeneration === 2);
    expect(json(["-n", NS, "get", "secret", "alice-signing"]).data["signing.key"]).toBe(key);
  });

  it("makes no writes on a steady-state resync", async () => {
    await new Promise((r) => setTimeout(r, 3000));
    const before = await writes();
    await new Promise((r) => setTimeout(r, 5000)); // at least two resyncs of every object
    expect(await writes()).toBe(before);
  });

  it("recreates a child deleted by hand", async () => {
    const uid = json(["-n", NS, "get", "service", "alice"]).metadata.uid;
    cp.kubectl(["-n", NS, "delete", "service", "alice"]);
    const svc = await waitFor("the Service back", () => {
      const s = tryJson(["-n", NS, "get", "service", "alice"]);
      return s && s.metadata.uid !== uid ? s : undefined;
    });
    expect(svc.spec.ports[0]).toMatchObject({ name: "https", port: 443, targetPort: "https" });
  });

  it("has invalid specs rejected by the API server with a clear message", () => {
    expect(() => cp.kubectl(["apply", "-f", "-"], agentYaml("bad", "    - {name: 'no spaces allowed', description: x}\n"))).toThrow(/spec.capabilities\[1\].name/);
    expect(() => cp.kubectl(["apply", "-f", "-"], `apiVersion: ifp.dev/v1alpha1\nkind: Agent\nmetadata: {name: bad2, namespace: ${NS}}\nspec: {}\n`)).toThrow(/agentId: Required value/);
    expect(() => cp.kubectl(["-n", NS, "patch", "agent", "alice", "--type=merge", "-p", '{"spec":{"agentId":"someone-else"}}'])).toThrow(/agentId is the agent's identity and cannot change/);
  });

  it("is garbage-collected with its children when deleted", async () => {
    cp.kubectl(["apply", "-f", "-"], agentYaml("doomed"));
    await waitFor("doomed's Deployment", () => tryJson(["-n", NS, "get", "deployment", "doomed"]), 30_000, 200);
    cp.kubectl(["-n", NS, "delete", "agent", "doomed", "--wait=false"]);
    await waitFor("garbage collection", () => !tryJson(["-n", NS, "get", "deployment", "doomed"]) && !tryJson(["-n", NS, "get", "configmap", "doomed-manifest"]) && !tryJson(["-n", NS, "get", "secret", "doomed-signing"]), 60_000, 500);
  });

  it("picks up where it left off after an operator restart", async () => {
    await manager.stop();
    cp.kubectl(["-n", NS, "delete", "configmap", "alice-manifest"]);
    manager = await start();
    await waitFor("the ConfigMap back", () => tryJson(["-n", NS, "get", "configmap", "alice-manifest"]), 30_000, 200);
  });
});

describe("Relay", () => {
  const relayYaml = (maxAge: string, extra = "") => `apiVersion: ifp.dev/v1alpha1
kind: Relay
metadata: {name: hub, namespace: ${NS}}
spec:
  url: https://hub.example
  retention: {maxAge: ${maxAge}${extra}}
`;
  const stream = async (name: string) => {
    const nc = await connect({ servers: nats.url });
    try {
      return await (await jetstreamManager(nc)).streams.info(name);
    } catch {
      return undefined;
    } finally {
      await nc.close();
    }
  };

  it("creates the relay's JetStream stream from spec.retention, and edits of maxAge reach it", async () => {
    cp.kubectl(["apply", "-f", "-"], relayYaml("168h"));
    const name = "IFP_RELAY_ifp-test_2Fhub";
    const created = await waitFor("the stream", () => stream(name), 30_000, 250);
    expect(created.config).toMatchObject({ max_age: 168 * 3600e9, discard: "new", allow_msg_ttl: true, storage: "file", num_replicas: 1 });
    const relay = await waitFor("StreamReady", () => {
      const r = json(["-n", NS, "get", "relay", "hub"]);
      return condition(r, "StreamReady")?.status === "True" ? r : undefined;
    });
    expect(relay.status.stream).toMatchObject({ name, maxAge: `${168 * 3600}s`, storage: "file" });
    expect(tryJson(["-n", NS, "get", "deployment", "hub"]).spec.template.spec.containers[0].args[0]).toBe("relay");

    cp.kubectl(["-n", NS, "patch", "relay", "hub", "--type=merge", "-p", '{"spec":{"retention":{"maxAge":"72h"}}}']);
    await waitFor("max_age to follow", async () => (await stream(name))?.config.max_age === 72 * 3600e9, 30_000, 250);
    await waitFor("status to follow", () => json(["-n", NS, "get", "relay", "hub"]).status?.stream?.maxAge === `${72 * 3600}s`);
    const events = json(["-n", NS, "get", "events", "--field-selector", "involvedObject.name=hub"]);
    expect(events.items.map((e: any) => e.reason)).toEqual(expect.arrayContaining(["StreamCreated", "RetentionLowered", "StreamUpdated"]));
  });

  it("keeps the stream when the Relay is deleted, unless deleteOnRemoval asks otherwise", async () => {
    const name = "IFP_RELAY_ifp-test_2Fhub";
    cp.kubectl(["-n", NS, "patch", "relay", "hub", "--type=merge", "-p", '{"spec":{"retention":{"deleteOnRemoval":true}}}']);
    await waitFor("the finalizer", () => json(["-n", NS, "get", "relay", "hub"]).metadata.finalizers?.includes("ifp.dev/stream"));
    cp.kubectl(["-n", NS, "delete", "relay", "hub", "--wait=false"]);
    await waitFor("the stream removed", async () => !(await stream(name)), 30_000, 250);
    await waitFor("the Relay gone", () => !tryJson(["-n", NS, "get", "relay", "hub"]), 30_000, 250);

    cp.kubectl(["apply", "-f", "-"], relayYaml("24h").replace("name: hub", "name: keeper"));
    const kept = "IFP_RELAY_ifp-test_2Fkeeper";
    await waitFor("keeper's stream", () => stream(kept), 30_000, 250);
    cp.kubectl(["-n", NS, "delete", "relay", "keeper"]);
    await new Promise((r) => setTimeout(r, 1000));
    expect(await stream(kept)).toBeDefined();
  });

  it("refuses to change storage in place", () => {
    cp.kubectl(["apply", "-f", "-"], relayYaml("24h").replace("name: hub", "name: fixed"));
    expect(() => cp.kubectl(["-n", NS, "patch", "relay", "fixed", "--type=merge", "-p", '{"spec":{"retention":{"storage":"memory"}}}'])).toThrow(/retention.storage cannot change in place/);
  });
});
