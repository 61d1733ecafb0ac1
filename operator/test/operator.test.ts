// The operator against a real control plane (etcd, kube-apiserver, kube-controller-manager) and
// a real nats-server: cluster state and conditions, not API calls.
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
const RESYNC_MS = 2_000;

const settings = { runtimeImage: "ghcr.io/ifp-dev/ifp-runtime:test", runtimeImagePullPolicy: "IfNotPresent", natsUrl: "nats://nats.test:4222" };
const start = async () => {
  const m = await startManager({
    kubeconfig: cp.kubeconfig,
    settings,
    nats: { url: nats.url },
    watchNamespaces: [],
    resyncMs: RESYNC_MS,
    log: pino({ level: process.env.IFP_TEST_LOG ?? "silent" }),
  });
  await m.started;
  return m;
};

const json = (args: string[]) => JSON.parse(cp.kubectl([...args, "-o", "json"]));
const tryJson = (args: string[]) => {
  try {
    return json(args);
  } catch {
    return undefined;
  }
};
const get = (kind: string, name: string) => tryJson(["-n", NS, "get", kind, name]);
const condition = (obj: any, type: string) => obj?.status?.conditions?.find((c: any) => c.type === type);
const counter = async (c: { get(): Promise<{ values: { value: number }[] }> }) => (await c.get()).values.reduce((a, v) => a + v.value, 0);
/** Wait until the resource's Ready condition has this reason (and return the resource). */
const untilReason = (kind: string, name: string, reason: string, type = "Ready", timeoutMs = 30_000) =>
  waitFor(`${kind}/${name} ${type} reason ${reason}`, () => {
    const o = get(kind, name);
    return condition(o, type)?.reason === reason ? o : undefined;
  }, timeoutMs, 200);
const events = (name: string) => json(["-n", NS, "get", "events", "--field-selector", `involvedObject.name=${name}`]).items as any[];

beforeAll(async () => {
  [cp, nats] = await Promise.all([startControlPlane({ crds: ["crds/agents.ifp.dev.yaml", "crds/relays.ifp.dev.yaml"] }), startNats()]);
  cp.kubectl(["create", "namespace", NS]);
  manager = await start();
}, 300_000);
afterAll(async () => {
  await manager?.stop();
  await Promise.all([cp?.stop(), nats?.close()]);
});

const agentYaml = (name: string, extra = "", capabilities = "") => `apiVersion: ifp.dev/v1alpha1
kind: Agent
metadata: {name: ${name}, namespace: ${NS}}
spec:
  agentId: ${name}-id
  capabilities:
    - {name: gossip.exchange, description: Gossip}
${capabilities}${extra}`;

describe("Agent", () => {
  it("reconciles into owned children that run the runtime's start contract", async () => {
    cp.kubectl(["apply", "-f", "-"], agentYaml("alice"));
    const dep = await waitFor("the Deployment", () => get("deployment", "alice"), 30_000, 200);
    const pod = dep.spec.template.spec;
    const c = pod.containers[0];
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
    expect(c.readinessProbe.httpGet).toMatchObject({ path: "/readyz", port: "https", scheme: "HTTPS" });
    expect(c.livenessProbe.httpGet).toMatchObject({ path: "/healthz", scheme: "HTTPS" });
    expect(c.securityContext).toMatchObject({ readOnlyRootFilesystem: true, allowPrivilegeEscalation: false });
    expect(pod.serviceAccountName).toBe("alice-runtime");
    expect(pod.volumes).toEqual(expect.arrayContaining([
      expect.objectContaining({ name: "manifest", configMap: expect.objectContaining({ name: "alice-manifest" }) }),
      expect.objectContaining({ name: "tls", secret: expect.objectContaining({ secretName: "alice-tls" }) }),
      expect.objectContaining({ name: "signing", secret: expect.objectContaining({ secretName: "alice-signing" }) }),
    ]));
    expect(dep.spec.template.metadata.annotations["ifp.dev/config-hash"]).toMatch(/^[0-9a-f]{16}$/);

    const agent = get("agent", "alice");
    for (const [kind, name] of [["configmap", "alice-manifest"], ["service", "alice"], ["deployment", "alice"], ["secret", "alice-tls"], ["serviceaccount", "alice-runtime"], ["role", "alice-runtime"], ["rolebinding", "alice-runtime"]] as const) {
      const child = await waitFor(`${kind}/${name}`, () => get(kind, name), 30_000, 200);
      expect(child.metadata.ownerReferences, `${kind}/${name}`).toEqual([expect.objectContaining({ apiVersion: "ifp.dev/v1alpha1", kind: "Agent", name: "alice", uid: agent.metadata.uid, controller: true, blockOwnerDeletion: true })]);
      const managers = json(["-n", NS, "get", kind, name, "--show-managed-fields"]).metadata.managedFields.map((f: any) => f.manager);
      expect(managers, `${kind}/${name}`).toContain("ifp-operator");
    }
    // The local application API stays on loopback: the Service has the HTTPS port only.
    expect(get("service", "alice").spec.ports).toEqual([expect.objectContaining({ name: "https", port: 443, targetPort: "https" })]);
    const cm = get("configmap", "alice-manifest");
    expect(cm.data["manifest.yaml"]).toMatch(/agentId: alice-id/);
    expect(cm.data["manifest.yaml"]).toMatch(/ifp.dev\/signing-key-created/);
    expect(cm.data["manifest.yaml"]).not.toMatch(/last-applied-configuration/);
    const tls = get("secret", "alice-tls");
    expect(tls.type).toBe("kubernetes.io/tls");
    expect(Object.keys(tls.data).sort()).toEqual(["ca.crt", "tls.crt", "tls.key"]);
    // The signing key is the agent's identity: labelled as ours, but not garbage-collected with the Agent.
    const signing = get("secret", "alice-signing");
    expect(signing.metadata.ownerReferences).toBeUndefined();
    expect(signing.metadata.labels).toMatchObject({ "app.kubernetes.io/managed-by": "ifp-operator", "app.kubernetes.io/instance": "alice" });
    expect(() => privateKeyFromPem(Buffer.from(signing.data["signing.key"], "base64").toString())).not.toThrow();
  });

  it("reports status through /status: observedGeneration, conditions, endpoint, public key", async () => {
    const agent = await untilReason("agent", "alice", "RuntimeNotReady");
    expect(agent.status.observedGeneration).toBe(1);
    expect(condition(agent, "Ready")).toMatchObject({ status: "False", observedGeneration: 1, message: "0/1 runtime replicas ready" });
    // Ready-able: every child applied and observed by its controller; only the pods are missing.
    expect(condition(agent, "Reconciling")).toMatchObject({ status: "True", reason: "WaitingForRuntime" });
    expect(condition(agent, "Stalled")).toMatchObject({ status: "False" });
    expect(agent.status.endpoint).toBe(`https://alice.${NS}.svc`);
    expect(agent.status.capabilitiesHash).toMatch(/^[0-9a-f]{64}$/);
    const secret = get("secret", "alice-signing");
    const pub = rawPublicKey(privateKeyFromPem(Buffer.from(secret.data["signing.key"], "base64").toString()));
    expect(agent.status.signingKey).toMatchObject({ keyId: "key-1", publicKey: pub, secretName: "alice-signing" });
    expect(agent.status).not.toHaveProperty("phase");
    expect(cp.kubectl(["-n", NS, "get", "agents"])).toMatch(/alice\s+alice-id\s+https:\/\/alice\.ifp-test\.svc\s+False/);
    expect(events("alice").map((e) => e.reason)).toEqual(expect.arrayContaining(["GeneratedSigningKey", "IssuedCertificate", "Applied"]));
  });

  it("is Ready once the runtime's Deployment is", async () => {
    // No kubelet here: mark the runtime's pod Ready as a kubelet would, and let the real
    // ReplicaSet and Deployment controllers carry it up.
    const pod = await waitFor("the runtime pod", () => json(["-n", NS, "get", "pods", "-l", "app.kubernetes.io/instance=alice"]).items[0], 30_000, 250);
    const now = new Date().toISOString().replace(/\.\d+Z$/, "Z");
    cp.kubectl(["-n", NS, "patch", "pod", pod.metadata.name, "--subresource=status", "--type=merge", "-p", JSON.stringify({ status: { phase: "Running", conditions: [{ type: "Ready", status: "True", lastTransitionTime: now }, { type: "ContainersReady", status: "True", lastTransitionTime: now }] } })]);
    const agent = await untilReason("agent", "alice", "RuntimeReady");
    expect(condition(agent, "Ready")).toMatchObject({ status: "True", message: "1/1 runtime replicas ready" });
    expect(condition(agent, "Reconciling")).toMatchObject({ status: "False" });
    expect(agent.status.readyReplicas).toBe(1);
  });

  it("rolls the pods when the spec changes, and keeps the signing key", async () => {
    const before = get("deployment", "alice");
    const key = get("secret", "alice-signing").data["signing.key"];
    cp.kubectl(["apply", "-f", "-"], agentYaml("alice", "", "    - {name: ping, description: Pong}\n"));
    const after = await waitFor("a new config hash", () => {
      const d = get("deployment", "alice");
      return d.spec.template.metadata.annotations["ifp.dev/config-hash"] !== before.spec.template.metadata.annotations["ifp.dev/config-hash"] ? d : undefined;
    });
    expect(after.metadata.generation).toBeGreaterThan(before.metadata.generation);
    expect(get("configmap", "alice-manifest").data["manifest.yaml"]).toMatch(/name: ping/);
    const agent = await waitFor("observedGeneration 2", () => {
      const a = get("agent", "alice");
      return a.status?.observedGeneration === 2 ? a : undefined;
    });
    expect(condition(agent, "Ready").observedGeneration).toBe(2);
    expect(get("secret", "alice-signing").data["signing.key"]).toBe(key);
  });

  it("recreates a child deleted by hand, and undoes a hand edit of a field it owns", async () => {
    const uid = get("service", "alice").metadata.uid;
    cp.kubectl(["-n", NS, "delete", "service", "alice"]);
    const svc = await waitFor("the Service back", () => {
      const s = get("service", "alice");
      return s && s.metadata.uid !== uid ? s : undefined;
    });
    expect(svc.spec.ports[0]).toMatchObject({ name: "https", port: 443, targetPort: "https" });

    cp.kubectl(["-n", NS, "scale", "deployment", "alice", "--replicas=3"]);
    await waitFor("replicas back to spec.replicas", () => get("deployment", "alice").spec.replicas === 1, 30_000, 200);
  });

  it("has invalid specs rejected by the API server with a clear message", () => {
    const apply = (yaml: string) => () => cp.kubectl(["apply", "-f", "-"], yaml);
    expect(apply(agentYaml("bad", "", "    - {name: 'no spaces allowed', description: x}\n"))).toThrow(/spec.capabilities\[1\].name/);
    expect(apply(`apiVersion: ifp.dev/v1alpha1\nkind: Agent\nmetadata: {name: bad2, namespace: ${NS}}\nspec: {}\n`)).toThrow(/agentId: Required value/);
    expect(apply(agentYaml("bad3", "  baseUrl: http://plain.example\n"))).toThrow(/spec.baseUrl: Invalid value.*must be an https:\/\/ URL/);
    expect(apply(agentYaml("bad4", "  tls: {secretName: a, issuerRef: {name: b}}\n"))).toThrow(/spec.tls takes secretName or issuerRef, not both/);
    expect(apply(agentYaml("9lives"))).toThrow(/metadata.name must be a DNS-1035 label/);
    expect(apply(agentYaml("bad5", "  replicas: -1\n"))).toThrow(/spec.replicas: Invalid value: -1/);
    expect(() => cp.kubectl(["-n", NS, "patch", "agent", "alice", "--type=merge", "-p", '{"spec":{"agentId":"someone-else"}}'])).toThrow(/agentId is the agent's identity and cannot change/);
  });

  it("reports a spec the API server accepts but the runtime would refuse as InvalidSpec, and does not act on it", async () => {
    cp.kubectl(["apply", "-f", "-"], agentYaml("vague", "  baseUrl: 'https://'\n"));
    const agent = await untilReason("agent", "vague", "InvalidSpec");
    expect(condition(agent, "Ready").message).toMatch(/spec.baseUrl/);
    expect(condition(agent, "Stalled")).toMatchObject({ status: "True", reason: "InvalidSpec" });
    expect(get("deployment", "vague")).toBeUndefined();
    cp.kubectl(["-n", NS, "delete", "agent", "vague"]);
  });

  it("refuses to take over an object of the same name that is not its own", async () => {
    cp.kubectl(["-n", NS, "create", "service", "clusterip", "carol", "--tcp=80:80"]);
    cp.kubectl(["apply", "-f", "-"], agentYaml("carol"));
    const agent = await untilReason("agent", "carol", "ChildConflict");
    expect(condition(agent, "Ready").message).toMatch(/Service carol already exists/);
    expect(condition(agent, "Stalled")).toMatchObject({ status: "True" });
    expect(get("service", "carol").metadata.ownerReferences).toBeUndefined();
    cp.kubectl(["-n", NS, "delete", "service", "carol"]);
    await waitFor("carol's own Service", () => get("service", "carol")?.metadata.ownerReferences?.[0]?.name === "carol", 40_000, 500);
    await untilReason("agent", "carol", "RuntimeNotReady");
  });

  it("mounts the TLS Secret the spec names, and says so while it is missing", async () => {
    cp.kubectl(["apply", "-f", "-"], agentYaml("dave", "  tls: {secretName: dave-own-tls}\n"));
    const agent = await untilReason("agent", "dave", "TLSSecretMissing");
    expect(condition(agent, "Ready").message).toBe(`Secret dave-own-tls named in spec.tls.secretName does not exist in namespace ${NS}`);
    expect(condition(agent, "Stalled")).toMatchObject({ status: "True", reason: "TLSSecretMissing" });
    const pem = (await import("../src/certs.ts")).selfSignedServing("dave", ["dave"]);
    const { cert, key } = await pem;
    cp.kubectl(["-n", NS, "create", "secret", "tls", "dave-own-tls", `--cert=${await tmpFile("tls.crt", cert)}`, `--key=${await tmpFile("tls.key", key)}`]);
    cp.kubectl(["-n", NS, "annotate", "agent", "dave", "example.com/poke=1"]); // a change brings a pass at once
    const ready = await untilReason("agent", "dave", "RuntimeNotReady");
    expect(ready.status.tlsSecretName).toBe("dave-own-tls");
    expect(get("deployment", "dave").spec.template.spec.volumes.find((v: any) => v.name === "tls").secret.secretName).toBe("dave-own-tls");
    expect(get("secret", "dave-tls")).toBeUndefined();
  });

  it("asks cert-manager for the certificate when spec.tls.issuerRef is set, once its API exists", async () => {
    cp.kubectl(["apply", "-f", "-"], agentYaml("erin", "  baseUrl: https://erin.example.org\n  tls: {issuerRef: {name: letsencrypt, kind: ClusterIssuer}}\n"));
    const missing = await untilReason("agent", "erin", "CertManagerMissing");
    expect(condition(missing, "Ready").message).toMatch(/install cert-manager or use spec.tls.secretName/);
    expect(condition(missing, "Stalled")).toMatchObject({ status: "True" });
    // cert-manager's API (its CRD only: nothing issues here) appears later.
    cp.kubectl(["apply", "-f", "-"], CERTIFICATE_CRD);
    cp.kubectl(["wait", "--for=condition=Established", "--timeout=60s", "crd/certificates.cert-manager.io"]);
    cp.kubectl(["-n", NS, "annotate", "agent", "erin", "example.com/poke=1"]);
    const waiting = await untilReason("agent", "erin", "CertificateNotReady");
    expect(condition(waiting, "Reconciling")).toMatchObject({ status: "True" });
    const cert = json(["-n", NS, "get", "certificates.cert-manager.io", "erin-tls"]);
    expect(cert.metadata.ownerReferences[0]).toMatchObject({ kind: "Agent", name: "erin", controller: true });
    expect(cert.spec).toMatchObject({ secretName: "erin-tls", issuerRef: { name: "letsencrypt", kind: "ClusterIssuer", group: "cert-manager.io" } });
    expect(cert.spec.dnsNames).toEqual(["erin", `erin.${NS}`, `erin.${NS}.svc`, `erin.${NS}.svc.cluster.local`, "erin.example.org"]);
    expect(get("deployment", "erin").spec.template.spec.volumes.find((v: any) => v.name === "tls").secret.secretName).toBe("erin-tls");
    cp.kubectl(["-n", NS, "patch", "certificates.cert-manager.io", "erin-tls", "--subresource=status", "--type=merge", "-p", JSON.stringify({ status: { conditions: [{ type: "Ready", status: "True", reason: "Ready", message: "issued" }] } })]);
    await untilReason("agent", "erin", "RuntimeNotReady", "Ready", 40_000);
  });

  it("is garbage-collected with its children when deleted, keeping the signing key for a new Agent of the name", async () => {
    cp.kubectl(["apply", "-f", "-"], agentYaml("doomed"));
    const first = await untilReason("agent", "doomed", "RuntimeNotReady");
    cp.kubectl(["-n", NS, "delete", "agent", "doomed", "--wait=false"]);
    await waitFor("garbage collection", () => !get("deployment", "doomed") && !get("configmap", "doomed-manifest") && !get("service", "doomed") && !get("secret", "doomed-tls") && !get("rolebinding", "doomed-runtime"), 60_000, 500);
    expect(get("secret", "doomed-signing")).toBeDefined();
    cp.kubectl(["apply", "-f", "-"], agentYaml("doomed"));
    const again = await untilReason("agent", "doomed", "RuntimeNotReady");
    expect(again.metadata.uid).not.toBe(first.metadata.uid);
    expect(again.status.signingKey.publicKey).toBe(first.status.signingKey.publicKey);
  });

  it("picks up where it left off after an operator restart", async () => {
    await manager.stop();
    cp.kubectl(["-n", NS, "delete", "configmap", "alice-manifest"]);
    cp.kubectl(["-n", NS, "patch", "agent", "alice", "--type=merge", "-p", '{"spec":{"replicas":2}}']);
    manager = await start();
    await waitFor("the ConfigMap back", () => get("configmap", "alice-manifest"), 30_000, 200);
    await waitFor("replicas 2", () => get("deployment", "alice").spec.replicas === 2, 30_000, 200);
    cp.kubectl(["-n", NS, "patch", "agent", "alice", "--type=merge", "-p", '{"spec":{"replicas":1}}']);
  });
});

describe("Relay", () => {
  const relayYaml = (name: string, retention: string) => `apiVersion: ifp.dev/v1alpha1
kind: Relay
metadata: {name: ${name}, namespace: ${NS}}
spec:
  url: https://${name}.example
  retention: ${retention}
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
    cp.kubectl(["apply", "-f", "-"], relayYaml("hub", "{maxAge: 168h, maxMessages: 100000}"));
    const name = "IFP_RELAY_ifp-test_2Fhub";
    const created = await waitFor("the stream", () => stream(name), 30_000, 250);
    expect(created.config).toMatchObject({ max_age: 168 * 3600e9, max_msgs: 100000, max_bytes: -1, discard: "new", allow_msg_ttl: true, storage: "file", num_replicas: 1, duplicate_window: 48 * 3600e9 });
    const relay = await untilReason("relay", "hub", "RuntimeNotReady");
    expect(condition(relay, "StreamReady")).toMatchObject({ status: "True", reason: "StreamInSync" });
    expect(relay.status.stream).toEqual({ name, maxAge: `${168 * 3600}s`, maxBytes: -1, maxMessages: 100000, replicas: 1, storage: "file", duplicateWindow: `${48 * 3600}s` });
    const dep = get("deployment", "hub");
    expect(dep.spec.template.spec.containers[0].args[0]).toBe("relay");
    expect(dep.spec.template.spec.containers[0].args).not.toContainEqual(expect.stringMatching(/^--signing-key/));
    expect(get("serviceaccount", "hub-runtime").automountServiceAccountToken).toBe(false);

    cp.kubectl(["-n", NS, "patch", "relay", "hub", "--type=merge", "-p", '{"spec":{"retention":{"maxAge":"72h"}}}']);
    await waitFor("max_age to follow", async () => (await stream(name))?.config.max_age === 72 * 3600e9, 30_000, 250);
    const after = await waitFor("status to follow", () => {
      const r = get("relay", "hub");
      return r.status?.stream?.maxAge === `${72 * 3600}s` && r.status.observedGeneration === 2 ? r : undefined;
    });
    expect(after.status.stream.duplicateWindow).toBe(`${48 * 3600}s`);
    const reasons = events("hub").map((e) => `${e.type}/${e.reason}`);
    expect(reasons).toEqual(expect.arrayContaining(["Normal/StreamCreated", "Warning/RetentionLowered", "Normal/StreamUpdated"]));
    expect(events("hub").find((e) => e.reason === "RetentionLowered").message).toMatch(/maxAge lowered from 168h to 72h/);
  });

  it("says when NATS is away and catches up when it is back", async () => {
    await nats.stop();
    cp.kubectl(["-n", NS, "patch", "relay", "hub", "--type=merge", "-p", '{"spec":{"retention":{"maxMessages":50000}}}']);
    const away = await untilReason("relay", "hub", "NatsUnavailable", "StreamReady", 30_000);
    expect(condition(away, "Ready")).toMatchObject({ status: "False", reason: "NatsUnavailable" });
    expect(away.status.stream.maxMessages).toBe(100000); // the config last applied
    await nats.restart();
    await untilReason("relay", "hub", "StreamInSync", "StreamReady", 60_000);
    expect((await stream("IFP_RELAY_ifp-test_2Fhub"))?.config.max_msgs).toBe(50000);
  });

  it("keeps the stream when the Relay is deleted, unless deleteOnRemoval asks otherwise", async () => {
    const name = "IFP_RELAY_ifp-test_2Fhub";
    cp.kubectl(["-n", NS, "patch", "relay", "hub", "--type=merge", "-p", '{"spec":{"retention":{"deleteOnRemoval":true}}}']);
    await waitFor("the finalizer", () => get("relay", "hub").metadata.finalizers?.includes("ifp.dev/stream"));
    cp.kubectl(["-n", NS, "delete", "relay", "hub", "--wait=false"]);
    await waitFor("the stream removed", async () => !(await stream(name)), 30_000, 250);
    await waitFor("the Relay gone", () => !get("relay", "hub"), 30_000, 250);

    cp.kubectl(["apply", "-f", "-"], relayYaml("keeper", "{maxAge: 24h}"));
    const kept = "IFP_RELAY_ifp-test_2Fkeeper";
    const s = await waitFor("keeper's stream", () => stream(kept), 30_000, 250);
    // The duplicate window never exceeds maxAge (JetStream would refuse it).
    expect(s.config.duplicate_window).toBe(24 * 3600e9);
    expect(get("relay", "keeper").metadata.finalizers ?? []).not.toContain("ifp.dev/stream");
    cp.kubectl(["-n", NS, "delete", "relay", "keeper"]);
    await new Promise((r) => setTimeout(r, 1000));
    expect(await stream(kept)).toBeDefined();
  });

  it("refuses to change storage in place", () => {
    cp.kubectl(["apply", "-f", "-"], relayYaml("fixed", "{maxAge: 24h}"));
    expect(() => cp.kubectl(["-n", NS, "patch", "relay", "fixed", "--type=merge", "-p", '{"spec":{"retention":{"storage":"memory"}}}'])).toThrow(/retention.storage cannot change in place/);
    expect(() => cp.kubectl(["apply", "-f", "-"], relayYaml("plain", "{maxAge: 24h}").replace("https://plain", "http://plain"))).toThrow(/spec.url: Invalid value.*must be an https:\/\/ URL/);
  });
});

describe("steady state", () => {
  it("makes no writes when nothing changed, over several resyncs of every object", async () => {
    const names = () => {
      const all = json(["-n", NS, "get", "agents,relays,deployments,services,configmaps,secrets,serviceaccounts,roles,rolebindings"]).items as any[];
      return Object.fromEntries(all.map((o) => [`${o.kind}/${o.metadata.name}`, o.metadata.resourceVersion]));
    };
    // Let everything settle (the fixed relay's stream, erin's requeues …).
    await untilReason("relay", "fixed", "StreamInSync", "StreamReady");
    await new Promise((r) => setTimeout(r, 2 * RESYNC_MS));
    const writesBefore = await counter(manager.metrics.writes);
    const reconcilesBefore = await counter(manager.metrics.reconciles);
    const versionsBefore = names();
    await new Promise((r) => setTimeout(r, 3 * RESYNC_MS + 500));
    const reconciled = (await counter(manager.metrics.reconciles)) - reconcilesBefore;
    const objects = (json(["-n", NS, "get", "agents,relays"]).items as any[]).length;
    // Every Agent and Relay was looked at at least twice in the window …
    expect(reconciled).toBeGreaterThanOrEqual(2 * objects);
    // … and nothing was written.
    expect(await counter(manager.metrics.writes)).toBe(writesBefore);
    expect(names()).toEqual(versionsBefore);
  });
});

async function tmpFile(name: string, text: string): Promise<string> {
  const { mkdtempSync, writeFileSync } = await import("node:fs");
  const { join } = await import("node:path");
  const { tmpdir } = await import("node:os");
  const p = join(mkdtempSync(join(tmpdir(), "ifp-tls-")), name);
  writeFileSync(p, text, { mode: 0o600 });
  return p;
}

/** cert-manager's Certificate API as far as the operator uses it (the CRD alone: nothing issues). */
const CERTIFICATE_CRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: certificates.cert-manager.io}
spec:
  group: cert-manager.io
  names: {kind: Certificate, listKind: CertificateList, plural: certificates, singular: certificate}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      subresources: {status: {}}
      schema:
        openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
`;
