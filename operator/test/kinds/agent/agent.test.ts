import { describe, expect, it } from "vitest";
import { waitFor } from "../../../../e2e/support/wait.ts";
import { privateKeyFromPem, rawPublicKey } from "../../../../runtime/src/protocol/keys.ts";
import { encryptionKeyFromPem } from "../../../../runtime/src/protocol/encryption.ts";
import { resyncs, until } from "../../support/helpers.ts";

import {
  NS,
  agentYaml,
  condition,
  counter,
  events,
  get,
  json,
  manager,
  cp,
  readyAgent,
  settings,
  startOperator,
  stopOperator,
  untilObserved,
  untilReason,
  useOperator,
} from "../../support/operator.ts";

useOperator();

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
    // The liveness probe waits for the startup probe: a slow start is not killed before it serves.
    expect(c.startupProbe).toMatchObject({ httpGet: { path: "/healthz", scheme: "HTTPS" }, periodSeconds: 2 });
    expect(c.startupProbe.periodSeconds * c.startupProbe.failureThreshold).toBe(180);
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

  it("recreates a child deleted by hand, and undoes a hand edit of a field it owns, the manifest's too", async () => {
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

    // The manifest, which the cache holds as its digest: an edit of any length is undone.
    for (const edited of ["edited: by hand\n", `edited: by hand\n${"x: y\n".repeat(60)}`]) {
      cp.kubectl([
        "-n",
        NS,
        "patch",
        "configmap",
        "mend-manifest",
        "--type=merge",
        "-p",
        JSON.stringify({ data: { "manifest.yaml": edited } }),
      ]);
      await until("the manifest back", () =>
        /agentId: mend-id/.test(get("configmap", "mend-manifest").data["manifest.yaml"]),
      );
    }
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
    await resyncs(manager, 2);
    expect(get("deployment", "vague"), "a Deployment for an invalid spec").toBeUndefined();
    expect(get("configmap", "vague-manifest"), "a manifest for an invalid spec").toBeUndefined();
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
    await stopOperator();
    try {
      cp.kubectl(["-n", NS, "delete", "configmap", "phoenix-manifest"]);
      cp.kubectl(["-n", NS, "patch", "agent", "phoenix", "--type=merge", "-p", '{"spec":{"replicas":2}}']);
    } finally {
      await startOperator();
    }
    await until("the ConfigMap back", () => get("configmap", "phoenix-manifest"));
    await until("replicas 2", () => get("deployment", "phoenix").spec.replicas === 2);
    await untilObserved("agent", "phoenix", 2);
  });
});
