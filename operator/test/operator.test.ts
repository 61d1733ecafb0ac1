// The operator against a real control plane (etcd, kube-apiserver, kube-controller-manager) and
// a real nats-server: cluster state and conditions, not API calls. Every test makes the objects
// it looks at, so that each runs alone (`-t`) as well as in the file.
import { jetstreamManager, RetentionPolicy, StorageType } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { X509Certificate } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startControlPlane, type ControlPlane } from "../../e2e/support/controlplane.ts";
import { startNats, withNatsDown, type NatsServer } from "../../e2e/support/nats.ts";
import { consistently, waitFor } from "../../e2e/support/wait.ts";
import { generateSigningKey, privateKeyFromPem, rawPublicKey } from "../../runtime/src/protocol/keys.ts";
import { encryptionKeyFromPem } from "../../runtime/src/protocol/encryption.ts";
import { startManager, type RunningManager } from "../src/commands/manager.ts";
import {
  CERTIFICATE_CRD,
  capturedLog,
  getOrAbsent,
  kubectlOrError,
  perTest,
  deleteStreamAt,
  streamOrAbsent,
  until,
} from "./support.ts";

let cp: ControlPlane;
let nats: NatsServer;
let manager: RunningManager;
const NS = "ifp-test";
const RESYNC_MS = 2_000;
const operatorLog = capturedLog(600);

const settings = {
  runtimeImage: "ghcr.io/ifp-dev/ifp-runtime:test",
  runtimeImagePullPolicy: "IfNotPresent",
  natsUrl: "nats://nats.test:4222",
  allowedImages: ["registry.example/ifp/*"],
  allowedIssuers: ["ClusterIssuer/letsencrypt"],
  allowedDnsNames: ["*.agents.example.net"],
  allowedHosts: { [NS]: ["erin.example.org", "*.relays.example"] },
};
const start = async () => {
  const m = await startManager({
    kubeconfig: cp.kubeconfig,
    settings,
    nats: { url: nats.url },
    watchNamespaces: [],
    resyncMs: RESYNC_MS,
    log: operatorLog.log,
  });
  await m.started;
  return m;
};

const json = (args: string[]) => cp.json(args);
/** The object, or undefined when the API server says NotFound (any other failure throws). */
const get = (kind: string, name: string) => getOrAbsent(cp, ["-n", NS, "get", kind, name]);
const condition = (obj: any, type: string) => obj?.status?.conditions?.find((c: any) => c.type === type);
const counter = async (c: { get(): Promise<{ values: { value: number }[] }> }) =>
  (await c.get()).values.reduce((a, v) => a + v.value, 0);
/** Wait until the resource's condition (Ready by default) has this reason (and return the resource). */
const untilReason = (kind: string, name: string, reason: string, type = "Ready", timeoutMs = 30_000) =>
  until(
    `${kind}/${name} ${type} reason ${reason}`,
    () => {
      const o = get(kind, name);
      return condition(o, type)?.reason === reason ? o : undefined;
    },
    timeoutMs,
  );
/** Wait until the resource's status is for this generation (and return the resource). */
const untilObserved = (kind: string, name: string, generation: number) =>
  until(`${kind}/${name} observedGeneration ${generation}`, () => {
    const o = get(kind, name);
    return o?.status?.observedGeneration === generation && condition(o, "Ready")?.observedGeneration === generation
      ? o
      : undefined;
  });
const events = (name: string) =>
  json(["-n", NS, "get", "events", "--field-selector", `involvedObject.name=${name}`]).items as any[];
const stream = (name: string) => streamOrAbsent(nats.url, name);
const deleteStream = (name: string) => deleteStreamAt(nats.url, name);
const streamName = (relay: string) => `IFP_RELAY_${NS}_2F${relay}`;
/** A change that brings a reconcile at once without changing the spec. */
const poke = (kind: string, name: string) =>
  cp.kubectl(["-n", NS, "annotate", "--overwrite", kind, name, `example.com/poke=${Date.now()}`]);

perTest(() => {
  const state = (args: string[]) => kubectlOrError(cp, args);
  return [
    `operator log (last ${Math.min(150, operatorLog.lines().length)} lines):`,
    ...operatorLog.lines().slice(-150),
    "agents and relays:",
    state(["-n", NS, "get", "agents,relays", "-o", "wide"]),
    "events:",
    state(["-n", NS, "get", "events", "--sort-by=.lastTimestamp"]).split("\n").slice(-40).join("\n"),
  ].join("\n");
});

beforeAll(async () => {
  [cp, nats] = await Promise.all([
    startControlPlane({ crds: ["crds/agents.ifp.dev.yaml", "crds/relays.ifp.dev.yaml"] }),
    startNats(),
  ]);
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
/** Apply an Agent and wait until it is Ready-able (every child applied; only pods missing). */
const readyAgent = async (name: string, extra = "") => {
  cp.kubectl(["apply", "-f", "-"], agentYaml(name, extra));
  return await untilReason("agent", name, "RuntimeNotReady");
};
const secretYaml = (name: string, data: Record<string, string>, labels?: Record<string, string>) =>
  JSON.stringify({
    apiVersion: "v1",
    kind: "Secret",
    type: "Opaque",
    metadata: { name, namespace: NS, ...(labels ? { labels } : {}) },
    data: Object.fromEntries(Object.entries(data).map(([k, v]) => [k, Buffer.from(v).toString("base64")])),
  });

describe("steady state", () => {
  it("makes no writes when nothing changed, over several resyncs of every object", { timeout: 150_000 }, async () => {
    const versions = () => {
      const all = json([
        "-n",
        NS,
        "get",
        "agents,relays,deployments,services,configmaps,secrets,serviceaccounts,roles,rolebindings",
      ]).items as any[];
      return Object.fromEntries(all.map((o) => [`${o.kind}/${o.metadata.name}`, o.metadata.resourceVersion]));
    };
    // It runs first, before other tests leave objects whose status may still move (a message
    // expiring changes an Agent's summary, a real change that is written).
    await readyAgent("calm");
    cp.kubectl(
      ["apply", "-f", "-"],
      `apiVersion: ifp.dev/v1alpha1\nkind: Relay\nmetadata: {name: still, namespace: ${NS}}\nspec: {url: 'https://still.relays.example'}\n`,
    );
    await untilReason("relay", "still", "StreamInSync", "StreamReady");
    const objects = (json(["-n", NS, "get", "agents,relays"]).items as any[]).length;
    /** Resolves once the reconcile counter moved by `n` (the resync enqueues every object every RESYNC_MS). */
    const reconciled = async (n: number) => {
      const from = await counter(manager.metrics.reconciles);
      await until(`${n} reconciles`, async () => (await counter(manager.metrics.reconciles)) - from >= n);
    };
    // Settled: two whole resyncs' worth of reconciles that wrote nothing (earlier tests' objects
    // may still be on their way, some on a retry's backoff).
    await until(
      "a resync that writes nothing",
      async () => {
        const writes = await counter(manager.metrics.writes);
        await reconciled(2 * objects);
        return (await counter(manager.metrics.writes)) === writes;
      },
      90_000,
      0,
    );
    const writesAtStart = await manager.metrics.writes.get();
    const versionsBefore = versions();
    // Every Agent and Relay looked at about three more times …
    await reconciled(3 * objects);
    // … and nothing was written.
    expect(versions()).toEqual(versionsBefore);
    expect(await manager.metrics.writes.get()).toEqual(writesAtStart);
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

describe("Agent", () => {
  it("reconciles into owned children that run the runtime's start contract", async () => {
    cp.kubectl(["apply", "-f", "-"], agentYaml("alice"));
    const dep = await until("the Deployment", () => get("deployment", "alice"));
    const pod = dep.spec.template.spec;
    const c = pod.containers[0];
    expect(c.image).toBe(settings.runtimeImage);
    expect(c.args).toEqual([
      "agent",
      "--manifest=/etc/ifp/manifest/manifest.yaml",
      "--port=8443",
      "--metrics-port=9090",
      "--tls-cert=/etc/ifp/tls/tls.crt",
      "--tls-key=/etc/ifp/tls/tls.key",
      "--nats=nats://nats.test:4222",
      "--ca-file=/etc/ifp/trust/ca.crt",
      "--signing-key=/etc/ifp/signing/signing.key",
      "--encryption-key=/etc/ifp/signing/encryption.key",
    ]);
    expect(c.readinessProbe.httpGet).toMatchObject({ path: "/readyz", port: "https", scheme: "HTTPS" });
    expect(c.livenessProbe.httpGet).toMatchObject({ path: "/healthz", scheme: "HTTPS" });
    expect(c.securityContext).toMatchObject({ readOnlyRootFilesystem: true, allowPrivilegeEscalation: false });
    expect(pod.serviceAccountName).toBe("alice-runtime");
    expect(pod.automountServiceAccountToken).toBe(false);
    expect(pod.volumes).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ name: "manifest", configMap: expect.objectContaining({ name: "alice-manifest" }) }),
        expect.objectContaining({ name: "tls", secret: expect.objectContaining({ secretName: "alice-tls" }) }),
        expect.objectContaining({ name: "signing", secret: expect.objectContaining({ secretName: "alice-signing" }) }),
      ]),
    );
    expect(dep.spec.template.metadata.annotations["ifp.dev/config-hash"]).toMatch(/^[0-9a-f]{16}$/);

    const agent = get("agent", "alice");
    for (const [kind, name] of [
      ["configmap", "alice-manifest"],
      ["service", "alice"],
      ["deployment", "alice"],
      ["secret", "alice-tls"],
    ] as const) {
      const child = await until(`${kind}/${name}`, () => get(kind, name));
      expect(child.metadata.ownerReferences, `${kind}/${name}`).toEqual([
        expect.objectContaining({
          apiVersion: "ifp.dev/v1alpha1",
          kind: "Agent",
          name: "alice",
          uid: agent.metadata.uid,
          controller: true,
          blockOwnerDeletion: true,
        }),
      ]);
      const managers = json(["-n", NS, "get", kind, name, "--show-managed-fields"]).metadata.managedFields.map(
        (f: any) => f.manager,
      );
      expect(managers, `${kind}/${name}`).toContain("ifp-operator");
    }
    // The runtime's own ServiceAccount, Role and RoleBinding, owned by the Agent (runtime-identity.test.ts has the rest).
    for (const kind of ["serviceaccount", "role", "rolebinding"]) {
      const own = await until(`${kind}/alice-runtime`, () => get(kind, "alice-runtime"));
      expect(own.metadata.ownerReferences, kind).toEqual([
        expect.objectContaining({ kind: "Agent", name: "alice", uid: agent.metadata.uid, controller: true }),
      ]);
      expect(get(kind, "ifp-agent-runtimes"), kind).toBeUndefined();
    }
    // The local application API stays on loopback: the Service has the HTTPS port only.
    expect(get("service", "alice").spec.ports).toEqual([
      expect.objectContaining({ name: "https", port: 443, targetPort: "https" }),
    ]);
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
    expect(signing.metadata.labels).toMatchObject({
      "app.kubernetes.io/managed-by": "ifp-operator",
      "app.kubernetes.io/instance": "alice",
    });
    expect(() => privateKeyFromPem(Buffer.from(signing.data["signing.key"], "base64").toString())).not.toThrow();
    // Beside it, the X25519 encryption key, mounted next to the signing key.
    const enc = encryptionKeyFromPem(Buffer.from(signing.data["encryption.key"], "base64").toString());
    // The whole Secret is mounted: signing.key, encryption.key and, after a rotation, keys.json and the retired keys.
    expect(pod.volumes.find((v: any) => v.name === "signing").secret).toEqual({
      secretName: "alice-signing",
      defaultMode: 420,
    });
    await until(
      "status.encryptionKey",
      () => get("agent", "alice").status?.encryptionKey?.publicKey === enc.publicKey || undefined,
    );
    expect(get("agent", "alice").status.encryptionKey).toEqual({ keyId: enc.keyId, publicKey: enc.publicKey });
  });

  it("adds an encryption key to a signing Secret it made without one, and never replaces it", async () => {
    cp.kubectl(["apply", "-f", "-"], agentYaml("gina"));
    const first = await until("gina's signing Secret", () =>
      get("secret", "gina-signing")?.data?.["encryption.key"] ? get("secret", "gina-signing") : undefined,
    );
    // As an operator before encryption keys would have left it: the signing key alone.
    const { "encryption.key": _dropped, ...rest } = first.data;
    cp.kubectl([
      "-n",
      NS,
      "patch",
      "secret",
      "gina-signing",
      "--type=json",
      "-p",
      JSON.stringify([{ op: "remove", path: "/data/encryption.key" }]),
    ]);
    cp.kubectl(["-n", NS, "patch", "agent", "gina", "--type=merge", "-p", '{"spec":{"replicas":2}}']);
    const added = await until("the encryption key added again", () => {
      const s = get("secret", "gina-signing");
      return s.data["encryption.key"] && s.data["encryption.key"] !== first.data["encryption.key"] ? s : undefined;
    });
    expect(added.data["signing.key"]).toBe(rest["signing.key"]);
    const pub = encryptionKeyFromPem(Buffer.from(added.data["encryption.key"], "base64").toString()).publicKey;
    await until(
      "status with the new key",
      () => get("agent", "gina").status?.encryptionKey?.publicKey === pub || undefined,
    );
    // Later passes leave it as it is.
    cp.kubectl(["-n", NS, "patch", "agent", "gina", "--type=merge", "-p", '{"spec":{"replicas":1}}']);
    await untilObserved("agent", "gina", 3);
    await consistently(
      "the encryption key kept",
      () => get("secret", "gina-signing").data["encryption.key"] === added.data["encryption.key"],
      RESYNC_MS + 500,
      250,
    );
    expect(events("gina").map((e) => e.reason)).toContain("GeneratedEncryptionKey");
  });

  it("reports status through /status: observedGeneration, conditions, endpoint, public key", async () => {
    const agent = await readyAgent("bob");
    expect(agent.status.observedGeneration).toBe(1);
    expect(condition(agent, "Ready")).toMatchObject({
      status: "False",
      observedGeneration: 1,
      message: "0/1 runtime replicas ready",
    });
    // Ready-able: every child applied and observed by its controller; only the pods are missing.
    expect(condition(agent, "Reconciling")).toMatchObject({ status: "True", reason: "WaitingForRuntime" });
    expect(condition(agent, "Stalled")).toMatchObject({ status: "False" });
    expect(agent.status.endpoint).toBe(`https://bob.${NS}.svc`);
    expect(agent.status.capabilitiesHash).toMatch(/^[0-9a-f]{64}$/);
    const secret = get("secret", "bob-signing");
    const pub = rawPublicKey(privateKeyFromPem(Buffer.from(secret.data["signing.key"], "base64").toString()));
    expect(agent.status.signingKey).toMatchObject({ keyId: "key-1", publicKey: pub, secretName: "bob-signing" });
    expect(agent.status).not.toHaveProperty("phase");
    expect(cp.kubectl(["-n", NS, "get", "agent", "bob"])).toMatch(
      /bob\s+bob-id\s+https:\/\/bob\.ifp-test\.svc\s+False/,
    );
    // The pass that made it recorded one Event listing all it did, under its most significant action's reason.
    const normal = events("bob").filter((e) => e.type === "Normal" && e.involvedObject.kind === "Agent");
    expect(normal.map((e) => e.reason)).toEqual(["GeneratedSigningKey"]);
    expect(normal[0].count).toBe(1);
    expect(normal[0].message).toContain(pub);
    expect(normal[0].message).toMatch(
      /; issued a serving certificate of the install CA into Secret bob-tls, valid until .*; applied .*ConfigMap\/bob-manifest.*Deployment\/bob/,
    );
  });

  it("is Ready once the runtime's Deployment is", async () => {
    await readyAgent("rosa");
    // No kubelet here: mark the runtime's pod Ready as a kubelet would, and let the real
    // ReplicaSet and Deployment controllers carry it up.
    const pod = await until(
      "the runtime pod",
      () => json(["-n", NS, "get", "pods", "-l", "app.kubernetes.io/instance=rosa"]).items[0],
    );
    const now = new Date().toISOString().replace(/\.\d+Z$/, "Z");
    cp.kubectl([
      "-n",
      NS,
      "patch",
      "pod",
      pod.metadata.name,
      "--subresource=status",
      "--type=merge",
      "-p",
      JSON.stringify({
        status: {
          phase: "Running",
          conditions: [
            { type: "Ready", status: "True", lastTransitionTime: now },
            { type: "ContainersReady", status: "True", lastTransitionTime: now },
          ],
        },
      }),
    ]);
    const agent = await untilReason("agent", "rosa", "RuntimeReady");
    expect(condition(agent, "Ready")).toMatchObject({ status: "True", message: "1/1 runtime replicas ready" });
    expect(condition(agent, "Reconciling")).toMatchObject({ status: "False" });
    expect(agent.status.readyReplicas).toBe(1);
  });

  it("scales through the scale subresource: kubectl scale writes spec.replicas, the Deployment follows, status.selector finds the pods", async () => {
    await readyAgent("scaler");
    const scalePath = `/apis/ifp.dev/v1alpha1/namespaces/${NS}/agents/scaler/scale`;
    const selector = "app.kubernetes.io/instance=scaler,app.kubernetes.io/name=ifp-runtime";
    const first = await until("the scale's selector", () => {
      const s = JSON.parse(cp.kubectl(["get", "--raw", scalePath]));
      return s.status?.selector ? s : undefined;
    });
    expect(first).toMatchObject({ kind: "Scale", spec: { replicas: 1 }, status: { selector } });
    cp.kubectl(["-n", NS, "scale", "agent/scaler", "--replicas=2"]);
    expect(get("agent", "scaler").spec.replicas).toBe(2);
    await until("the Deployment at 2 replicas", () =>
      get("deployment", "scaler")?.spec.replicas === 2 ? true : undefined,
    );
    const scaled = await until("the scale's status at 2 replicas", () => {
      const s = JSON.parse(cp.kubectl(["get", "--raw", scalePath]));
      return s.status?.replicas === 2 ? s : undefined;
    });
    expect(scaled.spec.replicas).toBe(2);
    expect(json(["-n", NS, "get", "pods", "-l", scaled.status.selector]).items).toHaveLength(2);
    // The scale subresource is held to the schema's bounds, and leaves the Agent as it was.
    expect(() => cp.kubectl(["-n", NS, "scale", "agent/scaler", "--replicas=101"])).toThrow(
      /spec.replicas|less than or equal to 100/,
    );
    expect(() => cp.kubectl(["-n", NS, "scale", "ifpagent/scaler", "--replicas=-1"])).toThrow();
    expect(get("agent", "scaler").spec.replicas).toBe(2);
    cp.kubectl(["-n", NS, "scale", "ifpagent/scaler", "--replicas=0"]);
    await until("the Deployment at 0 replicas", () =>
      get("deployment", "scaler")?.spec.replicas === 0 ? true : undefined,
    );
  });

  it("rolls the pods when the spec changes, and keeps the signing key", async () => {
    await readyAgent("roll");
    const before = get("deployment", "roll");
    const key = get("secret", "roll-signing").data["signing.key"];
    cp.kubectl(["apply", "-f", "-"], agentYaml("roll", "", "    - {name: ping, description: Pong}\n"));
    const after = await until("a new config hash", () => {
      const d = get("deployment", "roll");
      return d.spec.template.metadata.annotations["ifp.dev/config-hash"] !==
        before.spec.template.metadata.annotations["ifp.dev/config-hash"]
        ? d
        : undefined;
    });
    expect(after.metadata.generation).toBeGreaterThan(before.metadata.generation);
    expect(get("configmap", "roll-manifest").data["manifest.yaml"]).toMatch(/name: ping/);
    await untilObserved("agent", "roll", 2);
    expect(get("secret", "roll-signing").data["signing.key"]).toBe(key);
  });

  it("recreates a child deleted by hand, and undoes a hand edit of a field it owns", async () => {
    await readyAgent("mend");
    const uid = get("service", "mend").metadata.uid;
    cp.kubectl(["-n", NS, "delete", "service", "mend"]);
    const svc = await until("the Service back", () => {
      const s = get("service", "mend");
      return s && s.metadata.uid !== uid ? s : undefined;
    });
    expect(svc.spec.ports[0]).toMatchObject({ name: "https", port: 443, targetPort: "https" });

    cp.kubectl(["-n", NS, "scale", "deployment", "mend", "--replicas=3"]);
    await until("replicas back to spec.replicas", () => get("deployment", "mend").spec.replicas === 1);
  });

  it("never runs a runtime under a ServiceAccount of its name someone else made in the namespace", {
    timeout: 120_000,
  }, async () => {
    const ns = "ifp-squat";
    cp.kubectl(["create", "namespace", ns]);
    const inNs = (kind: string, name: string) => getOrAbsent(cp, ["-n", ns, "get", kind, name]);
    // Whoever may create ServiceAccounts there makes one of the runtime's name first, not the operator's.
    cp.kubectl(["-n", ns, "create", "serviceaccount", "eve-runtime"]);
    cp.kubectl(["apply", "-f", "-"], agentYaml("eve").replace(`namespace: ${NS}`, `namespace: ${ns}`));
    const reconciling = () => condition(inNs("agent", "eve"), "Ready");
    await until(
      "eve refused with ChildConflict",
      () => reconciling()?.reason === "ChildConflict" || undefined,
      30_000,
      250,
    );
    expect(reconciling().message).toMatch(/ServiceAccount eve-runtime already exists and is not managed by this Agent/);
    expect(inNs("deployment", "eve")).toBeUndefined();
    expect(inNs("serviceaccount", "eve-runtime").metadata.ownerReferences).toBeUndefined();
    // Once it is gone, the operator makes its own and renders the Agent.
    cp.kubectl(["-n", ns, "delete", "serviceaccount", "eve-runtime"]);
    await until(
      "eve's Deployment under the operator's own ServiceAccount",
      () => inNs("deployment", "eve")?.spec.template.spec.serviceAccountName === "eve-runtime" || undefined,
      60_000,
      500,
    );
    expect(inNs("serviceaccount", "eve-runtime").metadata.ownerReferences).toEqual([
      expect.objectContaining({ kind: "Agent", name: "eve" }),
    ]);
    cp.kubectl(["-n", ns, "delete", "agent", "eve", "--wait=false"]);
  });

  it("has invalid specs rejected by the API server with a clear message", () => {
    const apply = (yaml: string) => () => cp.kubectl(["apply", "-f", "-"], yaml);
    expect(apply(agentYaml("bad", "", "    - {name: 'no spaces allowed', description: x}\n"))).toThrow(
      /spec.capabilities\[1\].name/,
    );
    expect(
      apply(`apiVersion: ifp.dev/v1alpha1\nkind: Agent\nmetadata: {name: bad2, namespace: ${NS}}\nspec: {}\n`),
    ).toThrow(/agentId: Required value/);
    expect(apply(agentYaml("bad3", "  baseUrl: http://plain.example\n"))).toThrow(
      /spec.baseUrl: Invalid value.*must be an https:\/\/ URL/,
    );
    expect(apply(agentYaml("bad4", "  tls: {secretName: a, issuerRef: {name: b}}\n"))).toThrow(
      /spec.tls takes secretName or issuerRef, not both/,
    );
    expect(apply(agentYaml("9lives"))).toThrow(/metadata.name must be a DNS-1035 label/);
    expect(apply(agentYaml("bad5", "  replicas: -1\n"))).toThrow(/spec.replicas: Invalid value: -1/);
    cp.kubectl(["apply", "-f", "-"], agentYaml("ident"));
    expect(() =>
      cp.kubectl(["-n", NS, "patch", "agent", "ident", "--type=merge", "-p", '{"spec":{"agentId":"someone-else"}}']),
    ).toThrow(/agentId is the agent's identity and cannot change/);
  });

  it("reports a spec the API server accepts but the runtime would refuse as InvalidSpec, and does not act on it", async () => {
    cp.kubectl(["apply", "-f", "-"], agentYaml("vague", "  baseUrl: 'https://'\n"));
    const agent = await untilReason("agent", "vague", "InvalidSpec");
    expect(condition(agent, "Ready").message).toMatch(/spec.baseUrl/);
    expect(condition(agent, "Stalled")).toMatchObject({ status: "True", reason: "InvalidSpec" });
    // The Event is written after the status, by a separate call.
    await waitFor("the InvalidSpec Warning Event", () =>
      events("vague").some((e) => `${e.type}/${e.reason}` === "Warning/InvalidSpec"),
    );
    // Nothing applied in that pass, nor in the resyncs after it.
    await consistently(
      "no children for an invalid spec",
      () => get("deployment", "vague") === undefined && get("configmap", "vague-manifest") === undefined,
      2 * RESYNC_MS + 500,
      250,
    );
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
    // The other object is not watched: the operator looks again every 10 s.
    await until(
      "carol's own Service",
      () => get("service", "carol")?.metadata.ownerReferences?.[0]?.name === "carol",
      40_000,
      500,
    );
    await untilReason("agent", "carol", "RuntimeNotReady");
  });

  it("mounts the TLS Secret the spec names, and says so while it is missing", async () => {
    cp.kubectl(["apply", "-f", "-"], agentYaml("dave", "  tls: {secretName: dave-own-tls}\n"));
    const agent = await untilReason("agent", "dave", "TLSSecretMissing");
    expect(condition(agent, "Ready").message).toBe(
      `Secret dave-own-tls named in spec.tls.secretName does not exist in namespace ${NS}`,
    );
    expect(condition(agent, "Stalled")).toMatchObject({ status: "True", reason: "TLSSecretMissing" });
    const { cert, key } = await (await import("../src/concerns/tls/certs.ts")).selfSignedServing("dave", ["dave"]);
    cp.kubectl([
      "-n",
      NS,
      "create",
      "secret",
      "tls",
      "dave-own-tls",
      `--cert=${await tmpFile("tls.crt", cert)}`,
      `--key=${await tmpFile("tls.key", key)}`,
    ]);
    poke("agent", "dave"); // a change brings a pass at once
    // Not labelled for dave: refused until its owner labels it.
    const foreign = await untilReason("agent", "dave", "ForeignSecret");
    expect(condition(foreign, "Ready").message).toMatch(
      /^spec.tls.secretName: Secret dave-own-tls .* ifp.dev\/agent=dave/,
    );
    expect(get("deployment", "dave")).toBeUndefined();
    cp.kubectl(["-n", NS, "label", "secret", "dave-own-tls", "ifp.dev/agent=dave"]);
    poke("agent", "dave");
    const ready = await untilReason("agent", "dave", "RuntimeNotReady");
    expect(ready.status.tlsSecretName).toBe("dave-own-tls");
    expect(
      get("deployment", "dave").spec.template.spec.volumes.find((v: any) => v.name === "tls").secret.secretName,
    ).toBe("dave-own-tls");
    expect(get("secret", "dave-tls")).toBeUndefined();
  });

  it("asks cert-manager for the certificate when spec.tls.issuerRef is set, once its API exists", {
    timeout: 150_000,
  }, async () => {
    cp.kubectl(
      ["apply", "-f", "-"],
      agentYaml(
        "erin",
        "  baseUrl: https://erin.example.org\n  tls: {issuerRef: {name: letsencrypt, kind: ClusterIssuer}}\n",
      ),
    );
    const missing = await untilReason("agent", "erin", "CertManagerMissing");
    expect(condition(missing, "Ready").message).toMatch(/install cert-manager or use spec.tls.secretName/);
    expect(condition(missing, "Stalled")).toMatchObject({ status: "True" });
    // cert-manager's API (its CRD only: nothing issues here) appears later.
    cp.kubectl(["apply", "-f", "-"], CERTIFICATE_CRD);
    await until("the Certificate CRD established", () =>
      getOrAbsent(cp, ["get", "crd", "certificates.cert-manager.io"])?.status?.conditions?.some(
        (c: any) => c.type === "Established" && c.status === "True",
      ),
    );
    poke("agent", "erin");
    const waiting = await untilReason("agent", "erin", "CertificateNotReady");
    expect(condition(waiting, "Reconciling")).toMatchObject({ status: "True" });
    const cert = json(["-n", NS, "get", "certificates.cert-manager.io", "erin-tls"]);
    expect(cert.metadata.ownerReferences[0]).toMatchObject({ kind: "Agent", name: "erin", controller: true });
    expect(cert.spec).toMatchObject({
      secretName: "erin-tls",
      issuerRef: { name: "letsencrypt", kind: "ClusterIssuer", group: "cert-manager.io" },
    });
    expect(cert.spec.dnsNames).toEqual([
      "erin",
      `erin.${NS}`,
      `erin.${NS}.svc`,
      `erin.${NS}.svc.cluster.local`,
      "erin.example.org",
    ]);
    expect(
      get("deployment", "erin").spec.template.spec.volumes.find((v: any) => v.name === "tls").secret.secretName,
    ).toBe("erin-tls");
    cp.kubectl([
      "-n",
      NS,
      "patch",
      "certificates.cert-manager.io",
      "erin-tls",
      "--subresource=status",
      "--type=merge",
      "-p",
      JSON.stringify({
        status: { conditions: [{ type: "Ready", status: "True", reason: "Ready", message: "issued" }] },
      }),
    ]);
    // The operator looks at a Certificate being issued every 15 s.
    await untilReason("agent", "erin", "RuntimeNotReady", "Ready", 40_000);
  });

  it("is garbage-collected with its children when deleted, keeping the signing key for a new Agent of the name", {
    timeout: 150_000,
  }, async () => {
    const first = await readyAgent("doomed");
    cp.kubectl(["-n", NS, "delete", "agent", "doomed", "--wait=false"]);
    await until(
      "garbage collection",
      () =>
        !get("deployment", "doomed") &&
        !get("configmap", "doomed-manifest") &&
        !get("service", "doomed") &&
        !get("secret", "doomed-tls"),
      60_000,
      500,
    );
    expect(get("secret", "doomed-signing")).toBeDefined();
    const again = await readyAgent("doomed");
    expect(again.metadata.uid).not.toBe(first.metadata.uid);
    expect(again.status.signingKey.publicKey).toBe(first.status.signingKey.publicKey);
  });

  it("signs with the Secret spec.signing names: used as it is, never written, its public key in status", async () => {
    const key = generateSigningKey();
    cp.kubectl(
      ["apply", "-f", "-"],
      secretYaml("frank-key", { "signing.key": key.privateKeyPem }, { "ifp.dev/agent": "frank" }),
    );
    const own = get("secret", "frank-key");
    const agent = await readyAgent("frank", "  signing: {secretName: frank-key}\n");
    expect(agent.status.signingKey).toEqual({
      keyId: "key-1",
      publicKey: key.publicKey,
      secretName: "frank-key",
      created: own.metadata.creationTimestamp,
    });
    const pod = get("deployment", "frank").spec.template.spec;
    expect(pod.volumes.find((v: any) => v.name === "signing").secret.secretName).toBe("frank-key");
    expect(pod.containers[0].args).toContain("--signing-key=/etc/ifp/signing/signing.key");
    // The user's Secret has no encryption.key: none is added, none mounted, none in status.
    expect(pod.containers[0].args).not.toContain("--encryption-key=/etc/ifp/signing/encryption.key");
    expect(pod.volumes.find((v: any) => v.name === "signing").secret.items).toBeUndefined();
    expect(agent.status.encryptionKey).toBeUndefined();
    expect(get("configmap", "frank-manifest").data["manifest.yaml"]).toContain(
      `ifp.dev/signing-key-created: ${own.metadata.creationTimestamp}`,
    );
    // No key of its own: nothing generated, no Secret under the default name.
    expect(get("secret", "frank-signing")).toBeUndefined();
    expect(events("frank").map((e) => e.reason)).not.toContain("GeneratedSigningKey");
    // A second pass (a spec change) reads the Secret again and still leaves it as it was.
    cp.kubectl(["-n", NS, "patch", "agent", "frank", "--type=merge", "-p", '{"spec":{"replicas":2}}']);
    await untilObserved("agent", "frank", 2);
    await consistently(
      "the user's signing Secret untouched",
      () => {
        const now = get("secret", "frank-key");
        return (
          now.metadata.resourceVersion === own.metadata.resourceVersion &&
          now.data["signing.key"] === own.data["signing.key"] &&
          now.metadata.ownerReferences === undefined &&
          JSON.stringify(now.metadata.labels) === JSON.stringify({ "ifp.dev/agent": "frank" })
        );
      },
      RESYNC_MS + 500,
      250,
    );
    expect(get("agent", "frank").status.signingKey.publicKey).toBe(key.publicKey);
  });

  it("waits for a signing Secret named in spec.signing.secretName that does not exist yet, and never makes it", async () => {
    cp.kubectl(["apply", "-f", "-"], agentYaml("hank", "  signing: {secretName: hank-key}\n"));
    const blocked = await untilReason("agent", "hank", "SigningSecretMissing");
    expect(condition(blocked, "Ready")).toMatchObject({
      status: "False",
      message:
        "Secret hank-key named in spec.signing.secretName does not exist in namespace ifp-test; nothing is rendered until it does",
    });
    expect(blocked.status.signingKey).toBeUndefined();
    expect(get("secret", "hank-key")).toBeUndefined();
    expect(get("deployment", "hank")).toBeUndefined();

    const key = generateSigningKey();
    cp.kubectl(
      ["apply", "-f", "-"],
      secretYaml("hank-key", { "signing.key": key.privateKeyPem }, { "ifp.dev/agent": "hank" }),
    );
    poke("agent", "hank"); // the Secret is not watched (not ours)
    const fixed = await untilReason("agent", "hank", "RuntimeNotReady");
    expect(fixed.status.signingKey.publicKey).toBe(key.publicKey);
    // The Secret stays as the user made it: no key of the operator's own was put in.
    expect(Object.keys(get("secret", "hank-key").data)).toEqual(["signing.key"]);
  });

  it("reports a signing Secret without a usable key as InvalidSigningKey, and applies nothing until it is fixed", async () => {
    cp.kubectl(
      ["apply", "-f", "-"],
      secretYaml("grace-key", { "other.key": "not a key" }, { "ifp.dev/agent": "grace" }),
    );
    const rv = get("secret", "grace-key").metadata.resourceVersion;
    cp.kubectl(["apply", "-f", "-"], agentYaml("grace", "  signing: {secretName: grace-key}\n"));
    const blocked = await untilReason("agent", "grace", "InvalidSigningKey");
    expect(condition(blocked, "Ready")).toMatchObject({
      status: "False",
      message: "Secret grace-key has no signing.key",
    });
    expect(condition(blocked, "Stalled")).toMatchObject({ status: "True", reason: "InvalidSigningKey" });
    expect(blocked.status.signingKey).toBeUndefined();
    expect(get("deployment", "grace")).toBeUndefined();
    // Never overwritten with a key of the operator's own, though it holds none.
    expect(get("secret", "grace-key").metadata.resourceVersion).toBe(rv);
    // The Event follows the status write: wait for it rather than race it.
    await until("the Warning/InvalidSigningKey Event", () =>
      events("grace").some((e) => `${e.type}/${e.reason}` === "Warning/InvalidSigningKey"),
    );

    const key = generateSigningKey();
    cp.kubectl(
      ["apply", "-f", "-"],
      secretYaml("grace-key", { "signing.key": key.privateKeyPem }, { "ifp.dev/agent": "grace" }),
    );
    poke("agent", "grace"); // the Secret is not watched (not ours)
    const fixed = await untilReason("agent", "grace", "RuntimeNotReady");
    expect(fixed.status.signingKey.publicKey).toBe(key.publicKey);
  });

  it("refuses a signing Secret neither made nor labelled for the Agent: Ready False, Stalled, an Event, nothing applied", async () => {
    const key = generateSigningKey();
    cp.kubectl(
      ["apply", "-f", "-"],
      secretYaml("eve-key", { "signing.key": key.privateKeyPem }, { "ifp.dev/agent": "someone-else" }),
    );
    await readyAgent("victim");
    for (const [name, secret] of [
      ["eve", "eve-key"],
      ["mallory", "victim-signing"],
    ] as const) {
      cp.kubectl(["apply", "-f", "-"], agentYaml(name, `  signing: {secretName: ${secret}}\n`));
      const refused = await untilReason("agent", name, "ForeignSecret");
      expect(condition(refused, "Ready")).toMatchObject({ status: "False", reason: "ForeignSecret" });
      expect(condition(refused, "Ready").message).toMatch(
        new RegExp(`spec.signing.secretName: Secret ${secret} .*ifp.dev/agent=${name}`),
      );
      expect(condition(refused, "Stalled")).toMatchObject({ status: "True", reason: "ForeignSecret" });
      expect(refused.status.signingKey).toBeUndefined();
      expect(get("deployment", name)).toBeUndefined();
      await until(`the Warning/ForeignSecret Event of ${name}`, () =>
        events(name).some((e) => `${e.type}/${e.reason}` === "Warning/ForeignSecret"),
      );
    }
    // Labelled for eve by its owner: used.
    cp.kubectl(["-n", NS, "label", "secret", "eve-key", "--overwrite", "ifp.dev/agent=eve"]);
    poke("agent", "eve");
    const ok = await untilReason("agent", "eve", "RuntimeNotReady");
    expect(ok.status.signingKey.publicKey).toBe(key.publicKey);
  });

  it("refuses an introduction-token Secret that is missing, or neither made nor labelled for the Agent, and renders it once labelled", async () => {
    const field = "spec.inbox.introductionTokens.secretName";
    cp.kubectl(["apply", "-f", "-"], agentYaml("ivy", "  inbox: {introductionTokens: {secretName: ivy-tokens}}\n"));
    const missing = await untilReason("agent", "ivy", "IntroductionSecretMissing");
    expect(condition(missing, "Ready")).toMatchObject({
      status: "False",
      message: `${field}: Secret ivy-tokens does not exist in namespace ${NS}`,
    });
    expect(condition(missing, "Stalled")).toMatchObject({ status: "True", reason: "IntroductionSecretMissing" });
    expect(get("deployment", "ivy")).toBeUndefined();
    await until("the Warning/IntroductionSecretMissing Event", () =>
      events("ivy").some((e) => `${e.type}/${e.reason}` === "Warning/IntroductionSecretMissing"),
    );

    // The Secret exists, but nobody made or labelled it for ivy (another team's tokens, say).
    cp.kubectl(
      ["apply", "-f", "-"],
      secretYaml(
        "ivy-tokens",
        { tokens: "a-token-the-humans-handed-out\n" },
        { "app.kubernetes.io/part-of": "other-team" },
      ),
    );
    poke("agent", "ivy"); // the Secret is not watched (not ours)
    const foreign = await untilReason("agent", "ivy", "ForeignSecret");
    expect(condition(foreign, "Ready")).toMatchObject({ status: "False", reason: "ForeignSecret" });
    expect(condition(foreign, "Ready").message).toBe(
      `${field}: Secret ivy-tokens was not created by the operator for Agent ivy and has no label ifp.dev/agent=ivy; label it so if this Agent may use it`,
    );
    expect(condition(foreign, "Stalled")).toMatchObject({ status: "True", reason: "ForeignSecret" });
    const warning = await until("the Warning/ForeignSecret Event", () =>
      events("ivy").find((e) => `${e.type}/${e.reason}` === "Warning/ForeignSecret"),
    );
    expect(warning.message).toContain(`${field}: Secret ivy-tokens`);
    // Nothing mounts it: no Deployment after this pass, nor after a later one (a spec change
    // the status shows observed, still refusing the Secret).
    expect(get("deployment", "ivy")).toBeUndefined();
    cp.kubectl(["-n", NS, "patch", "agent", "ivy", "--type=merge", "-p", '{"spec":{"replicas":2}}']);
    expect(condition(await untilObserved("agent", "ivy", 2), "Ready")).toMatchObject({ reason: "ForeignSecret" });
    expect(get("deployment", "ivy")).toBeUndefined();

    // Labelled for ivy by its owner: mounted, and the runtime told where.
    cp.kubectl(["-n", NS, "label", "secret", "ivy-tokens", "ifp.dev/agent=ivy"]);
    poke("agent", "ivy");
    await untilReason("agent", "ivy", "RuntimeNotReady");
    const pod = get("deployment", "ivy").spec.template.spec;
    expect(pod.volumes.find((v: any) => v.name === "introduction").secret).toMatchObject({
      secretName: "ivy-tokens",
      items: [{ key: "tokens", path: "tokens" }],
    });
    expect(pod.containers[0].args).toContain("--introduction-secret-file=/etc/ifp/introduction/tokens");
  });

  it("rotates the signing key on request: both published during the transition, the old one revoked after it", async () => {
    const first = await readyAgent("rot");
    const oldKey = first.status.signingKey.publicKey;
    const hash = (name: string) => get("deployment", name).spec.template.metadata.annotations;
    const before = JSON.stringify(hash("rot"));
    cp.kubectl([
      "-n",
      NS,
      "patch",
      "agent",
      "rot",
      "--type=merge",
      "-p",
      '{"spec":{"signing":{"rotate":"first","transition":"4s"}}}',
    ]);
    const rotated = await until("two keys in status", () => {
      const a = get("agent", "rot");
      return a.status.signingKeys?.length === 2 ? a : undefined;
    });
    expect(rotated.status.signingKeys.map((k: any) => [k.keyId, k.status, k.publicKey === oldKey])).toEqual([
      ["key-1", "retired", true],
      ["key-1-r2", "active", false],
    ]);
    expect(rotated.status.signingKeys[0].revokeAt).toBeDefined();
    expect(rotated.status.signingKey).toMatchObject({ keyId: "key-1-r2" });
    const secret = get("secret", "rot-signing");
    // The encryption key rotates with it: the old one kept beside the retired signing key.
    expect(Object.keys(secret.data).sort()).toEqual([
      "encryption.key",
      "keys.json",
      "retired-1.key",
      "retired-encryption-1.key",
      "signing.key",
    ]);
    await until(
      "the new encryption key in status",
      () => get("agent", "rot").status.encryptionKey?.keyId !== first.status.encryptionKey.keyId,
    );
    expect(rawPublicKey(privateKeyFromPem(Buffer.from(secret.data["retired-1.key"], "base64").toString()))).toBe(
      oldKey,
    );
    await until("the pods rolled for the new key", () => JSON.stringify(hash("rot")) !== before);
    await until("the RotatedSigningKey Event", () => events("rot").some((e) => e.reason === "RotatedSigningKey"));
    // On schedule, without any change to the Agent: revoked, its private half gone.
    const revoked = await until("key-1 revoked", () => {
      const a = get("agent", "rot");
      return a.status.signingKeys?.[0]?.status === "revoked" ? a : undefined;
    });
    expect(revoked.status.signingKeys[0].revoked).toBeDefined();
    expect(Object.keys(get("secret", "rot-signing").data).sort()).toEqual([
      "encryption.key",
      "keys.json",
      "signing.key",
    ]);
    // Revoking the active key is refused: rotate first.
    cp.kubectl([
      "-n",
      NS,
      "patch",
      "agent",
      "rot",
      "--type=merge",
      "-p",
      '{"spec":{"signing":{"revoke":["key-1-r2"]}}}',
    ]);
    const refused = await untilReason("agent", "rot", "InvalidSigningKey");
    expect(condition(refused, "Ready").message).toMatch(/names the active key key-1-r2/);
  });

  it("revokes a retired signing key at once when spec.signing.revoke names it, long before its transition ends", async () => {
    const first = await readyAgent("hasty");
    const oldKey = first.status.signingKey.publicKey;
    const keysJson = () =>
      JSON.parse(Buffer.from(get("secret", "hasty-signing").data["keys.json"], "base64").toString());
    // A rotation with a week's transition: nothing is due for revocation before then.
    cp.kubectl([
      "-n",
      NS,
      "patch",
      "agent",
      "hasty",
      "--type=merge",
      "-p",
      '{"spec":{"signing":{"rotate":"2026-11","transition":"168h"}}}',
    ]);
    const rotated = await until("two keys in status", () => {
      const a = get("agent", "hasty");
      return a.status.signingKeys?.length === 2 ? a : undefined;
    });
    expect(rotated.status.signingKeys.map((k: any) => [k.keyId, k.status])).toEqual([
      ["key-1", "retired"],
      ["key-1-r2", "active"],
    ]);
    const revokeAt = rotated.status.signingKeys[0].revokeAt;
    expect(Date.parse(revokeAt) - Date.now()).toBeGreaterThan(160 * 3600_000);
    expect(Object.keys(get("secret", "hasty-signing").data)).toContain("retired-1.key");
    expect(keysJson().keys.map((k: any) => [k.keyId, k.status])).toEqual([
      ["key-1", "retired"],
      ["key-1-r2", "active"],
    ]);
    const activeBefore = get("secret", "hasty-signing").data["signing.key"];

    // Known to be compromised: revoked now.
    cp.kubectl([
      "-n",
      NS,
      "patch",
      "agent",
      "hasty",
      "--type=merge",
      "-p",
      '{"spec":{"signing":{"revoke":["key-1"]}}}',
    ]);
    const revoked = await until("key-1 revoked in status", () => {
      const a = get("agent", "hasty");
      return a.status.signingKeys?.[0]?.status === "revoked" ? a : undefined;
    });
    const record = revoked.status.signingKeys[0];
    expect(record).toMatchObject({ keyId: "key-1", publicKey: oldKey, status: "revoked" });
    expect(record.revokeAt).toBeUndefined();
    expect(Date.parse(record.revoked)).toBeLessThan(Date.parse(revokeAt));
    expect(revoked.status.signingKeys[1]).toMatchObject({ keyId: "key-1-r2", status: "active" });
    expect(revoked.status.signingKey).toMatchObject({ keyId: "key-1-r2" });
    // In the Secret: revoked in keys.json, its private half (and the encryption key retired with it) gone, the active key as it was.
    const secret = get("secret", "hasty-signing");
    expect(Object.keys(secret.data).sort()).toEqual(["encryption.key", "keys.json", "signing.key"]);
    expect(secret.data["signing.key"]).toBe(activeBefore);
    expect(keysJson().keys).toEqual([
      expect.objectContaining({ keyId: "key-1", publicKey: oldKey, status: "revoked", revoked: record.revoked }),
      expect.objectContaining({ keyId: "key-1-r2", status: "active" }),
    ]);
    expect(keysJson().keys[0].file).toBeUndefined();
    const event = await until("the RevokedSigningKey Event", () =>
      events("hasty").find(
        (e) => e.reason === "RevokedSigningKey" && /(^|; )revoked signing key key-1(;|$)/.test(e.message),
      ),
    );
    expect(event.type).toBe("Normal");

    // The active key cannot be revoked: an agent always has a key to sign with.
    cp.kubectl([
      "-n",
      NS,
      "patch",
      "agent",
      "hasty",
      "--type=merge",
      "-p",
      '{"spec":{"signing":{"revoke":["key-1","key-1-r2"]}}}',
    ]);
    const refused = await untilReason("agent", "hasty", "InvalidSigningKey");
    expect(condition(refused, "Ready")).toMatchObject({
      status: "False",
      message:
        "Secret hasty-signing spec.signing.revoke names the active key key-1-r2; set spec.signing.rotate to replace it first",
    });
    expect(condition(refused, "Stalled")).toMatchObject({ status: "True", reason: "InvalidSigningKey" });
    await until("the Warning/InvalidSigningKey Event", () =>
      events("hasty").some((e) => `${e.type}/${e.reason}` === "Warning/InvalidSigningKey"),
    );
    expect(get("secret", "hasty-signing").data["signing.key"]).toBe(activeBefore);
    expect(keysJson().keys.map((k: any) => [k.keyId, k.status])).toEqual([
      ["key-1", "revoked"],
      ["key-1-r2", "active"],
    ]);
  });

  it("runs only an image the install allows: another spec.image is refused, no key nor anything else made for it until fixed", async () => {
    cp.kubectl(["apply", "-f", "-"], agentYaml("imgs", "  image: registry.example/ifpx/runtime:1\n"));
    const refused = await untilReason("agent", "imgs", "ImageNotAllowed");
    expect(condition(refused, "Ready").message).toMatch(
      /^spec.image: registry.example\/ifpx\/runtime:1 is not among the images this install allows/,
    );
    expect(condition(refused, "Stalled")).toMatchObject({ status: "True", reason: "ImageNotAllowed" });
    expect(refused.status.signingKey).toBeUndefined();
    await until("the Warning/ImageNotAllowed Event", () =>
      events("imgs").some((e) => `${e.type}/${e.reason}` === "Warning/ImageNotAllowed"),
    );
    // Refused before anything is made: no signing key, no other Secret, no Deployment, no finalizer;
    // not in the pass that refused it nor in the resyncs after it.
    const madeFor = () =>
      json(["-n", NS, "get", "secrets,deployments,services,configmaps", "-o", "json"])
        .items.filter((o: any) => o.metadata.name === "imgs" || o.metadata.name.startsWith("imgs-"))
        .map((o: any) => `${o.kind}/${o.metadata.name}`);
    await consistently("nothing made for the refused Agent", () => madeFor().length === 0, 2 * RESYNC_MS + 500, 250);
    expect(get("agent", "imgs").metadata.finalizers ?? []).toEqual([]);
    expect(events("imgs").filter((e) => e.type === "Normal")).toEqual([]);
    cp.kubectl([
      "-n",
      NS,
      "patch",
      "agent",
      "imgs",
      "--type=merge",
      "-p",
      '{"spec":{"image":"registry.example/ifp/runtime:2"}}',
    ]);
    const allowed = await untilReason("agent", "imgs", "RuntimeNotReady");
    expect(get("deployment", "imgs").spec.template.spec.containers[0].image).toBe("registry.example/ifp/runtime:2");
    // The key is made as for any Agent, and published.
    const key = get("secret", "imgs-signing");
    expect(allowed.status.signingKey.publicKey).toBe(
      rawPublicKey(privateKeyFromPem(Buffer.from(key.data["signing.key"], "base64").toString())),
    );
    // Refused again once running: its pods are held, and the key it publishes stays, untouched.
    cp.kubectl(["-n", NS, "patch", "agent", "imgs", "--type=merge", "-p", '{"spec":{"image":"registry.example/x:1"}}']);
    const again = await untilReason("agent", "imgs", "ImageNotAllowed");
    expect(again.status.signingKey).toEqual(allowed.status.signingKey);
    expect(get("secret", "imgs-signing").metadata.resourceVersion).toBe(key.metadata.resourceVersion);
    expect(get("deployment", "imgs").spec.template.spec.containers[0].image).toBe("registry.example/ifp/runtime:2");
  });

  it("issues no certificate for a name that is not the Agent's own or allowed, nor from an issuer the install does not allow", async () => {
    // The API server's own name, which every runtime would believe from a certificate of the install CA.
    cp.kubectl(["apply", "-f", "-"], agentYaml("mitm", "  tls: {dnsNames: [kubernetes.default.svc]}\n"));
    const refused = await untilReason("agent", "mitm", "DNSNameNotAllowed");
    expect(condition(refused, "Ready").message).toMatch(
      /^spec.tls.dnsNames: kubernetes.default.svc is neither a name of this resource's Services \(mitm, mitm\.[^)]*\) nor allowed for namespace ifp-test \(\*\.agents\.example\.net, erin.example.org, \*\.relays\.example\)/,
    );
    expect(condition(refused, "Stalled")).toMatchObject({ status: "True", reason: "DNSNameNotAllowed" });
    await until("the Warning/DNSNameNotAllowed Event", () =>
      events("mitm").some((e) => `${e.type}/${e.reason}` === "Warning/DNSNameNotAllowed"),
    );
    expect(get("secret", "mitm-tls")).toBeUndefined();
    expect(get("secret", "mitm-signing")).toBeUndefined();
    expect(get("deployment", "mitm")).toBeUndefined();
    // An unlisted ClusterIssuer: refused before any Certificate is asked for.
    cp.kubectl(
      ["apply", "-f", "-"],
      agentYaml("mitm", "  tls: {issuerRef: {name: internal-ca, kind: ClusterIssuer}}\n"),
    );
    const issuer = await untilReason("agent", "mitm", "IssuerNotAllowed");
    expect(condition(issuer, "Ready").message).toMatch(
      /^spec.tls.issuerRef: ClusterIssuer\/internal-ca is not among the issuers this install allows \(an Issuer of the resource's namespace, ClusterIssuer\/letsencrypt\)/,
    );
    // (cert-manager's API may not be served yet in this run: then there is nothing to find either.)
    const cert = kubectlOrError(cp, [
      "-n",
      NS,
      "get",
      "--ignore-not-found",
      "-o",
      "name",
      "certificates.cert-manager.io/mitm-tls",
    ]);
    expect(cert.trim() === "" || /doesn't have a resource type/.test(cert), cert).toBe(true);
    // A name under an allowed domain: issued and rendered.
    cp.kubectl(["apply", "-f", "-"], agentYaml("mitm", "  tls: {dnsNames: [mitm.agents.example.net]}\n"));
    await untilReason("agent", "mitm", "RuntimeNotReady");
    expect(get("secret", "mitm-tls")).toBeDefined();
    expect(get("deployment", "mitm")).toBeDefined();
  });

  it("issues no certificate for the host of spec.baseUrl or an exposure host that is not the Agent's own or allowed", {
    timeout: 120_000,
  }, async () => {
    // The API server's name, another tenant's Service and the installed NATS's, each as a public host.
    const attempts = [
      ["  baseUrl: https://kubernetes.default.svc\n", "spec.baseUrl: kubernetes.default.svc"],
      ["  baseUrl: https://victim.other-team.svc\n", "spec.baseUrl: victim.other-team.svc"],
      ["  expose:\n    ingress: {host: nats.ifp-system.svc}\n", "spec.expose.ingress.host: nats.ifp-system.svc"],
      [
        "  expose:\n    gateway: {parentRefs: [{name: gw}], hostname: kubernetes.default.svc, mode: passthrough}\n",
        "spec.expose.gateway.hostname: kubernetes.default.svc",
      ],
    ] as const;
    for (const [extra, named] of attempts) {
      cp.kubectl(["apply", "-f", "-"], agentYaml("hostile", extra));
      const refused = await until(`hostile refused for ${named}`, () => {
        const a = get("agent", "hostile");
        return condition(a, "Ready")?.reason === "DNSNameNotAllowed" && condition(a, "Ready").message.startsWith(named)
          ? a
          : undefined;
      });
      expect(condition(refused, "Ready").message).toMatch(
        /nor allowed for namespace ifp-test .*--allowed-hosts ifp-test\/.* \(chart value allowedHosts: \{ifp-test: \[.*\]\}\) or --allowed-dns-names/,
      );
      expect(condition(refused, "Stalled")).toMatchObject({ status: "True", reason: "DNSNameNotAllowed" });
      expect(get("secret", "hostile-tls")).toBeUndefined();
      expect(get("deployment", "hostile")).toBeUndefined();
    }
    await until("the Warning/DNSNameNotAllowed Event", () =>
      events("hostile").some((e) => `${e.type}/${e.reason}` === "Warning/DNSNameNotAllowed"),
    );
    // Its own Service's name as the public host, and a host the install allows its namespace: issued for it.
    cp.kubectl(["apply", "-f", "-"], agentYaml("hostile", `  baseUrl: https://hostile.${NS}.svc\n`));
    await untilReason("agent", "hostile", "RuntimeNotReady");
    cp.kubectl(["apply", "-f", "-"], agentYaml("hostile", "  baseUrl: https://erin.example.org\n"));
    const cert = await until("a certificate naming erin.example.org", () => {
      const tls = get("secret", "hostile-tls");
      return tls &&
        new X509Certificate(Buffer.from(tls.data["tls.crt"], "base64")).subjectAltName?.includes("DNS:erin.example.org")
        ? tls
        : undefined;
    });
    expect(cert).toBeDefined();
  });

  it("refuses a second Agent claiming an agentId already in use, and renders it once the first is gone", {
    timeout: 120_000,
  }, async () => {
    // Kept on deletion: its streams are not the point here, and the test's operator has no NATS to delete them with.
    await readyAgent("orig", "  retention: {keepOnDelete: true}\n");
    cp.kubectl(["apply", "-f", "-"], agentYaml("twin").replace("agentId: twin-id", "agentId: orig-id"));
    const refused = await untilReason("agent", "twin", "DuplicateAgentId");
    expect(condition(refused, "Ready").message).toBe(
      `spec.agentId orig-id is already the id of Agent ${NS}/orig in this install; nothing is rendered for this Agent while that one exists`,
    );
    expect(condition(refused, "Stalled")).toMatchObject({ status: "True", reason: "DuplicateAgentId" });
    expect(get("deployment", "twin")).toBeUndefined();
    expect(get("secret", "twin-signing")).toBeUndefined();
    await until("the Warning/DuplicateAgentId Event", () =>
      events("twin").some((e) => `${e.type}/${e.reason}` === "Warning/DuplicateAgentId"),
    );
    // The first keeps its id.
    await untilReason("agent", "orig", "RuntimeNotReady");
    cp.kubectl(["-n", NS, "delete", "agent", "orig", "--wait=true"]);
    await untilReason("agent", "twin", "RuntimeNotReady", "Ready", 60_000);
  });

  it("picks up where it left off after an operator restart", async () => {
    await readyAgent("phoenix");
    await manager.stop();
    try {
      cp.kubectl(["-n", NS, "delete", "configmap", "phoenix-manifest"]);
      cp.kubectl(["-n", NS, "patch", "agent", "phoenix", "--type=merge", "-p", '{"spec":{"replicas":2}}']);
    } finally {
      manager = await start();
    }
    await until("the ConfigMap back", () => get("configmap", "phoenix-manifest"));
    await until("replicas 2", () => get("deployment", "phoenix").spec.replicas === 2);
    await untilObserved("agent", "phoenix", 2);
  });
});

describe("Relay", () => {
  const relayYaml = (name: string, retention: string) => `apiVersion: ifp.dev/v1alpha1
kind: Relay
metadata: {name: ${name}, namespace: ${NS}}
spec:
  url: https://${name}.relays.example
  retention: ${retention}
`;
  /** Apply a Relay and wait until its stream is in sync with the spec (and return the Relay). */
  const syncedRelay = async (name: string, retention: string) => {
    cp.kubectl(["apply", "-f", "-"], relayYaml(name, retention));
    return await untilReason("relay", name, "StreamInSync", "StreamReady");
  };

  it("issues a Relay no certificate for a name that is not its own or allowed, and still keeps its stream", async () => {
    cp.kubectl(
      ["apply", "-f", "-"],
      `${relayYaml("spoof", "{maxAge: 1h}")}  tls: {dnsNames: [relay.other-team.svc]}\n`,
    );
    const refused = await untilReason("relay", "spoof", "DNSNameNotAllowed");
    expect(condition(refused, "Ready").message).toMatch(
      /^spec.tls.dnsNames: relay.other-team.svc is neither a name of this resource's Services \(spoof, [^)]*spoof.ifp-test.svc.cluster.local\) nor allowed/,
    );
    expect(condition(refused, "Stalled")).toMatchObject({ status: "True", reason: "DNSNameNotAllowed" });
    expect(get("secret", "spoof-tls")).toBeUndefined();
    expect(get("deployment", "spoof")).toBeUndefined();
    await until("its stream, all the same", () => stream(streamName("spoof")));
    // The host of spec.url is held to the same list: the installed NATS's name is refused.
    cp.kubectl(
      ["apply", "-f", "-"],
      relayYaml("spoof", "{maxAge: 1h}").replace(
        "url: https://spoof.relays.example",
        "url: https://nats.ifp-system.svc",
      ),
    );
    await until("spoof refused for spec.url", () =>
      condition(get("relay", "spoof"), "Ready")?.message?.startsWith("spec.url: nats.ifp-system.svc is neither"),
    );
    expect(get("secret", "spoof-tls")).toBeUndefined();
    expect(get("deployment", "spoof")).toBeUndefined();
    // A host the install allows the namespace (*.relays.example): issued.
    cp.kubectl(["apply", "-f", "-"], relayYaml("spoof", "{maxAge: 1h}"));
    await untilReason("relay", "spoof", "RuntimeNotReady");
    expect(get("secret", "spoof-tls")).toBeDefined();
  });

  it("creates the relay's JetStream stream from spec.retention, and edits of maxAge reach it", async () => {
    cp.kubectl(["apply", "-f", "-"], relayYaml("hub", "{maxAge: 168h, maxMessages: 100000}"));
    const name = streamName("hub");
    const created = await until("the stream", () => stream(name));
    expect(created.config).toMatchObject({
      max_age: 168 * 3600e9,
      max_msgs: 100000,
      max_bytes: 1024 * 1024 * 1024,
      discard: "new",
      allow_msg_ttl: true,
      storage: "file",
      num_replicas: 1,
      duplicate_window: 48 * 3600e9,
    });
    const relay = await untilReason("relay", "hub", "RuntimeNotReady");
    expect(condition(relay, "StreamReady")).toMatchObject({ status: "True", reason: "StreamInSync" });
    expect(relay.status.stream).toEqual({
      name,
      maxAge: `${168 * 3600}s`,
      maxBytes: 1024 * 1024 * 1024,
      maxMessages: 100000,
      replicas: 1,
      storage: "file",
      duplicateWindow: `${48 * 3600}s`,
    });
    const dep = get("deployment", "hub");
    expect(dep.spec.template.spec.containers[0].args[0]).toBe("relay");
    expect(dep.spec.template.spec.containers[0].args).not.toContainEqual(expect.stringMatching(/^--signing-key/));
    // The Relay's own ServiceAccount, which mounts no token, and no Role: the relay runtime does not call the API server.
    expect(dep.spec.template.spec.serviceAccountName).toBe("hub-runtime");
    expect(get("serviceaccount", "hub-runtime").automountServiceAccountToken).toBe(false);
    expect(get("role", "hub-runtime")).toBeUndefined();

    cp.kubectl(["-n", NS, "patch", "relay", "hub", "--type=merge", "-p", '{"spec":{"retention":{"maxAge":"72h"}}}']);
    await until("max_age to follow", async () => (await stream(name))?.config.max_age === 72 * 3600e9);
    const after = await until("status to follow", () => {
      const r = get("relay", "hub");
      return r.status?.stream?.maxAge === `${72 * 3600}s` && r.status.observedGeneration === 2 ? r : undefined;
    });
    expect(after.status.stream.duplicateWindow).toBe(`${48 * 3600}s`);
    // One Normal Event per pass, listing what it did; the Warning on its own, before the change.
    const normal = events("hub")
      .filter((e) => e.type === "Normal" && e.involvedObject.kind === "Relay")
      .map((e) => e.message);
    expect(normal.filter((m) => m.includes(`created JetStream stream ${name}`))).toHaveLength(1);
    // The pass that issued the certificate, applied the children and then created the stream is named for the stream.
    const creating = events("hub").find((e) => e.type === "Normal" && e.message.includes(`created JetStream stream`));
    expect(creating.message).toMatch(
      /^issued a serving certificate .*; applied .*Deployment\/hub.*; created JetStream stream/,
    );
    expect(creating.reason).toBe("StreamCreated");
    expect(normal.filter((m) => m.includes(`updated JetStream stream ${name}`))).toHaveLength(1);
    expect(
      events("hub")
        .filter((e) => e.reason === "RetentionLowered")
        .map((e) => e.type),
    ).toEqual(["Warning"]);
    expect(events("hub").find((e) => e.reason === "RetentionLowered").message).toMatch(
      /maxAge lowered from 168h to 72h/,
    );
  });

  it("says when NATS is away and catches up when it is back", { timeout: 150_000 }, async () => {
    await syncedRelay("ebb", "{maxAge: 24h, maxMessages: 100000}");
    await withNatsDown(nats, async () => {
      cp.kubectl([
        "-n",
        NS,
        "patch",
        "relay",
        "ebb",
        "--type=merge",
        "-p",
        '{"spec":{"retention":{"maxMessages":50000}}}',
      ]);
      // The pass of the patched spec (generation 2) says it; a resync may have said it of generation 1 first.
      const away = await until(
        "relay/ebb StreamReady NatsUnavailable at generation 2",
        () => {
          const o = get("relay", "ebb");
          return condition(o, "StreamReady")?.reason === "NatsUnavailable" && o.status?.observedGeneration === 2
            ? o
            : undefined;
        },
        30_000,
      );
      expect(condition(away, "Ready")).toMatchObject({ status: "False", reason: "NatsUnavailable" });
      expect(condition(away, "Reconciling")).toMatchObject({ status: "True", reason: "NatsUnavailable" });
      expect(away.status.stream.maxMessages).toBe(100000); // the config last applied
      await nats.restart();
    });
    // The operator reconnects and looks again every 10 s while NATS is away.
    const back = await untilReason("relay", "ebb", "StreamInSync", "StreamReady", 60_000);
    expect(back.status.stream.maxMessages).toBe(50000);
    expect((await stream(streamName("ebb")))?.config.max_msgs).toBe(50000);
  });

  it("deletes the stream with the Relay when deleteOnRemoval asks for it", async () => {
    const name = streamName("tidy");
    await syncedRelay("tidy", "{maxAge: 24h, deleteOnRemoval: true}");
    expect(get("relay", "tidy").metadata.finalizers).toContain("ifp.dev/stream");
    expect(await stream(name)).toBeDefined();
    cp.kubectl(["-n", NS, "delete", "relay", "tidy", "--wait=false"]);
    await until("the Relay gone", () => get("relay", "tidy") === undefined);
    // The finalizer goes only after the stream did.
    expect(await stream(name)).toBeUndefined();
  });

  it("keeps the stream when the Relay is deleted without deleteOnRemoval, and drops the finalizer when the field goes back to false", async () => {
    const name = streamName("keeper");
    // The duplicate window never exceeds maxAge (JetStream would refuse it).
    await syncedRelay("keeper", "{maxAge: 24h, deleteOnRemoval: true}");
    expect((await stream(name))?.config.duplicate_window).toBe(24 * 3600e9);
    expect(get("relay", "keeper").metadata.finalizers).toContain("ifp.dev/stream");
    cp.kubectl([
      "-n",
      NS,
      "patch",
      "relay",
      "keeper",
      "--type=merge",
      "-p",
      '{"spec":{"retention":{"deleteOnRemoval":false}}}',
    ]);
    await until(
      "the finalizer removed",
      () => !(get("relay", "keeper").metadata.finalizers ?? []).includes("ifp.dev/stream"),
    );
    cp.kubectl(["-n", NS, "delete", "relay", "keeper"]);
    // The operator has seen the deletion (its cache lost the Relay); the stream is still there after it.
    await until(
      "the operator to see the Relay go",
      () => get("relay", "keeper") === undefined && manager.caches.get("Relay", NS, "keeper") === undefined,
    );
    await consistently("the stream kept", async () => (await stream(name)) !== undefined, RESYNC_MS + 500, 250);
  });

  it("keeps a Relay whose stream it must delete while NATS is away, and deletes both once NATS is back", {
    timeout: 150_000,
  }, async () => {
    const name = streamName("outage");
    await syncedRelay("outage", "{maxAge: 24h, deleteOnRemoval: true}");
    expect(get("relay", "outage").metadata.finalizers).toContain("ifp.dev/stream");
    await withNatsDown(nats, async () => {
      cp.kubectl(["-n", NS, "delete", "relay", "outage", "--wait=false"]);
      // The positive signal: the operator processed the deletion and held it back for NATS.
      await until("the operator to wait for NATS", () =>
        operatorLog.has(
          /waiting for NATS to delete the relay's stream.*ifp-test\/outage|ifp-test\/outage.*waiting for NATS to delete the relay's stream/,
        ),
      );
      await consistently(
        "the Relay Terminating with its finalizer",
        () => {
          const r = get("relay", "outage");
          return !!r?.metadata.deletionTimestamp && r.metadata.finalizers?.includes("ifp.dev/stream");
        },
        3_000,
        250,
      );
      await nats.restart();
    });
    expect(await stream(name)).toBeDefined(); // the store kept it while the server was down
    // Retried every 10 s: the stream goes first, then the Relay.
    await until("the Relay gone", () => get("relay", "outage") === undefined, 40_000, 250);
    expect(await stream(name)).toBeUndefined();
  });

  it("reports a stream of the relay's name made elsewhere with another storage as StreamConflict, and never replaces it", async () => {
    const name = streamName("clash");
    const nc = await connect({ servers: nats.url });
    try {
      await (await jetstreamManager(nc)).streams.add({
        name,
        subjects: [`ifp.relay.${NS}_2Fclash.>`],
        storage: StorageType.Memory,
        retention: RetentionPolicy.Limits,
        max_age: 3600e9,
      });
    } finally {
      await nc.close();
    }
    const before = await stream(name);
    cp.kubectl(["apply", "-f", "-"], relayYaml("clash", "{maxAge: 24h}"));
    const relay = await untilReason("relay", "clash", "StreamConflict", "StreamReady");
    expect(condition(relay, "StreamReady")).toMatchObject({
      status: "False",
      message: expect.stringMatching(/exists with storage memory.*must be recreated by hand/),
    });
    expect(condition(relay, "Ready")).toMatchObject({ status: "False", reason: "StreamConflict" });
    expect(condition(relay, "Stalled")).toMatchObject({ status: "True", reason: "StreamConflict" });
    expect(condition(relay, "Reconciling")).toMatchObject({ status: "False" });
    expect(relay.status.stream).toBeUndefined();
    await waitFor("the StreamConflict Warning Event", () =>
      events("clash").some((e) => `${e.type}/${e.reason}` === "Warning/StreamConflict"),
    );
    // Neither recreated nor edited: the same stream, its own max_age, after further passes.
    await consistently(
      "the other stream left as it is",
      async () => {
        const s = await stream(name);
        return s?.created === before?.created && s?.config.storage === "memory" && s.config.max_age === 3600e9;
      },
      RESYNC_MS + 500,
      250,
    );

    // Recreated by hand, as the message says: the operator makes its own.
    const nc2 = await connect({ servers: nats.url });
    try {
      await (await jetstreamManager(nc2)).streams.delete(name);
    } finally {
      await nc2.close();
    }
    poke("relay", "clash");
    const synced = await untilReason("relay", "clash", "StreamInSync", "StreamReady");
    expect(condition(synced, "Stalled")).toMatchObject({ status: "False" });
    expect((await stream(name))?.config).toMatchObject({ storage: "file", max_age: 24 * 3600e9 });
  });

  it("applies no more replicas than a single server holds: the stream made with one, ReplicasNotApplied said; in sync once the spec asks for one", async () => {
    const name = streamName("strict");
    // Three replicas on one server that is not part of a cluster: it cannot hold them (and would
    // accept an update to three it could not load after its next start).
    cp.kubectl(["apply", "-f", "-"], relayYaml("strict", "{maxAge: 24h, replicas: 3}"));
    const relay = await untilReason("relay", "strict", "ReplicasNotApplied", "StreamReady");
    expect(condition(relay, "StreamReady")).toMatchObject({
      status: "True",
      message: expect.stringMatching(
        new RegExp(`3 replicas were asked for stream ${name}; the JetStream server is not clustered and holds one`),
      ),
    });
    expect((await stream(name))?.config.num_replicas).toBe(1);
    expect(relay.status.stream).toMatchObject({ name, replicas: 1 });
    await waitFor("the ReplicasNotApplied Warning Event", () =>
      events("strict").some((e) => `${e.type}/${e.reason}` === "Warning/ReplicasNotApplied"),
    );

    cp.kubectl(["-n", NS, "patch", "relay", "strict", "--type=merge", "-p", '{"spec":{"retention":{"replicas":1}}}']);
    const synced = await untilReason("relay", "strict", "StreamInSync", "StreamReady");
    expect(synced.status.stream).toMatchObject({ name, replicas: 1 });
    expect((await stream(name))?.config.num_replicas).toBe(1);
  });

  it("never makes a Relay's stream again empty once it went missing, until the Relay is annotated to start it over", async () => {
    const name = streamName("gone");
    cp.kubectl(["apply", "-f", "-"], relayYaml("gone", "{maxAge: 24h}"));
    await untilReason("relay", "gone", "StreamInSync", "StreamReady");
    // The operator knows the stream was there by the Relay's status in its cache: once the cache
    // has it (a pass on a cache behind its own status write would take the stream for new).
    await waitFor(
      "the operator's cache to show the Relay's stream",
      () =>
        (manager.caches.get("Relay", NS, "gone") as { status?: { stream?: { name?: string } } } | undefined)?.status
          ?.stream?.name === name,
    );
    // What a server that could not load the stream at its start looks like to the operator.
    await deleteStream(name);
    const missing = await untilReason("relay", "gone", "StreamMissing", "StreamReady");
    expect(condition(missing, "Ready")).toMatchObject({ status: "False", reason: "StreamMissing" });
    expect(condition(missing, "Stalled")).toMatchObject({ status: "True", reason: "StreamMissing" });
    expect(condition(missing, "StreamReady")?.message).toMatch(
      /is missing from NATS.*ifp.dev\/recreate-missing-stream=true/,
    );
    expect(await stream(name)).toBeUndefined();
    cp.kubectl(["-n", NS, "annotate", "relay", "gone", "ifp.dev/recreate-missing-stream=true"]);
    await untilReason("relay", "gone", "StreamInSync", "StreamReady");
    expect(await stream(name)).toBeDefined();
  });

  it("refuses to change storage in place", () => {
    cp.kubectl(["apply", "-f", "-"], relayYaml("fixed", "{maxAge: 24h}"));
    expect(() =>
      cp.kubectl([
        "-n",
        NS,
        "patch",
        "relay",
        "fixed",
        "--type=merge",
        "-p",
        '{"spec":{"retention":{"storage":"memory"}}}',
      ]),
    ).toThrow(/retention.storage cannot change in place/);
    expect(() =>
      cp.kubectl(["apply", "-f", "-"], relayYaml("plain", "{maxAge: 24h}").replace("https://plain", "http://plain")),
    ).toThrow(/spec.url: Invalid value.*must be an https:\/\/ URL/);
  });
});
