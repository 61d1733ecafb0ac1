// spec.expose against a real control plane: the Service types the API server accepts, the
// Ingress created, updated and removed, the Gateway API routes once its CRDs (the real ones,
// from the tool cache) are installed, and a clear condition while they are not.
import { X509Certificate } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startControlPlane, type ControlPlane } from "../../../e2e/support/controlplane.ts";
import { toolPath } from "../../../e2e/tools/tools.ts";
import { startManager, type RunningManager } from "../../src/commands/manager.ts";
import { capturedLog, getOrAbsent, kubectlOrError, perTest, resyncs, until } from "../support/helpers.ts";

let cp: ControlPlane;
let manager: RunningManager;
const NS = "ifp-expose";
const operatorLog = capturedLog(600);
// The public hosts below are the namespace's, as a user's chart values would allow them (allowedHosts).
const settings = {
  runtimeImage: "ghcr.io/ifp-dev/ifp-runtime:test",
  runtimeImagePullPolicy: "IfNotPresent",
  natsUrl: "nats://nats.test:4222",
  allowedHosts: { [NS]: ["*.example.com"] },
};

const get = (kind: string, name: string) => getOrAbsent(cp, ["-n", NS, "get", kind, name]);
const condition = (obj: any, type: string) => obj?.status?.conditions?.find((c: any) => c.type === type);
const untilReason = (kind: string, name: string, reason: string, timeoutMs = 30_000) =>
  until(
    `${kind}/${name} Ready reason ${reason}`,
    () => {
      const o = get(kind, name);
      return condition(o, "Ready")?.reason === reason ? o : undefined;
    },
    timeoutMs,
  );
const events = (name: string) =>
  cp.json(["-n", NS, "get", "events", "--field-selector", `involvedObject.name=${name}`]).items as any[];
const poke = (kind: string, name: string) =>
  cp.kubectl(["-n", NS, "annotate", "--overwrite", kind, name, `example.com/poke=${Date.now()}`]);
const writes = async () => (await manager.metrics.writes.get()).values.reduce((a, v) => a + v.value, 0);

const agentYaml = (name: string, extra = "") => `apiVersion: ifp.dev/v1alpha1
kind: Agent
metadata: {name: ${name}, namespace: ${NS}}
spec:
  agentId: ${name}-id
${extra}`;
const apply = (name: string, extra = "") => cp.kubectl(["apply", "-f", "-"], agentYaml(name, extra));
/**
 * Applied and every child in place at the spec's generation: only the pods, which nothing runs
 * here, are missing (and so a changed Deployment's rollout never ends).
 */
const settled = async (name: string, extra = "") => {
  apply(name, extra);
  return await until(`agent ${name} settled at its generation`, () => {
    const o = get("agent", name);
    const ready = condition(o, "Ready");
    return ["RuntimeNotReady", "RolloutInProgress"].includes(ready?.reason) &&
      ready.observedGeneration === o.metadata.generation
      ? o
      : undefined;
  });
};

perTest(() => {
  const state = (args: string[]) => kubectlOrError(cp, args);
  return [
    ...operatorLog.lines().slice(-120),
    state(["-n", NS, "get", "agents,relays,services,ingresses", "-o", "wide"]),
    state(["-n", NS, "get", "events", "--sort-by=.lastTimestamp"]).split("\n").slice(-30).join("\n"),
  ].join("\n");
});

beforeAll(async () => {
  cp = await startControlPlane({ crds: ["crds/agents.ifp.dev.yaml", "crds/relays.ifp.dev.yaml"] });
  cp.kubectl(["create", "namespace", NS]);
  manager = await startManager({
    kubeconfig: cp.kubeconfig,
    settings,
    watchNamespaces: [],
    resyncMs: 2_000,
    log: operatorLog.log,
  });
  await manager.started;
}, 300_000);
afterAll(async () => {
  await manager?.stop();
  await cp?.stop();
});

describe("spec.expose.service", () => {
  it("renders LoadBalancer and NodePort Services the API server accepts, and goes back to ClusterIP", async () => {
    await settled(
      "lb",
      `  expose:
    service:
      type: LoadBalancer
      loadBalancerClass: example.com/lb
      externalTrafficPolicy: Local
      annotations: {service.beta.kubernetes.io/aws-load-balancer-type: nlb}
`,
    );
    let svc = get("service", "lb");
    expect(svc.spec).toMatchObject({
      type: "LoadBalancer",
      loadBalancerClass: "example.com/lb",
      externalTrafficPolicy: "Local",
    });
    expect(svc.spec.ports[0]).toMatchObject({ name: "https", port: 443, targetPort: "https" });
    expect(svc.spec.ports[0].nodePort).toBeGreaterThan(0);
    expect(svc.metadata.annotations["service.beta.kubernetes.io/aws-load-balancer-type"]).toBe("nlb");

    // loadBalancerClass cannot change in place; a NodePort Service without it can be had by a new name.
    await settled("np", "  expose:\n    service: {type: NodePort}\n");
    expect(get("service", "np").spec.type).toBe("NodePort");
    expect(get("service", "np").spec.externalTrafficPolicy).toBe("Cluster");

    // Back to no spec.expose: the API server's own defaults, no node port, no annotation left.
    await settled("np", "");
    svc = await until("the NodePort Service back to ClusterIP", () => {
      const s = get("service", "np");
      return s?.spec.type === "ClusterIP" ? s : undefined;
    });
    expect(svc.spec.ports[0].nodePort).toBeUndefined();
    cp.kubectl([
      "-n",
      NS,
      "patch",
      "agent",
      "lb",
      "--type=json",
      "-p",
      JSON.stringify([{ op: "remove", path: "/spec/expose/service/annotations" }]),
    ]);
    await until(
      "the annotation removed from the Service",
      () =>
        get("service", "lb")?.metadata.annotations?.["service.beta.kubernetes.io/aws-load-balancer-type"] === undefined,
    );
  });

  it("has bad input refused by the API server with the schema's message", () => {
    const refused = (extra: string) => {
      try {
        apply("bad", extra);
      } catch (err) {
        return (err as Error).message;
      }
      throw new Error(`the API server accepted ${extra}`);
    };
    expect(refused("  expose:\n    ingress: {host: 'https://bad.example.com'}\n")).toMatch(/must be a DNS name/);
    expect(refused("  expose:\n    ingress: {host: 'bad.example.com:8443'}\n")).toMatch(/must be a DNS name/);
    expect(refused("  expose:\n    trustedProxies: ['10.0.0.0/33']\n")).toMatch(/IP address or a CIDR block/);
    expect(refused("  expose:\n    trustedProxies: [proxy.example.com]\n")).toMatch(/IP address or a CIDR block/);
    expect(refused("  expose:\n    service: {loadBalancerClass: example.com/lb}\n")).toMatch(
      /loadBalancerClass needs type LoadBalancer/,
    );
    expect(refused("  expose:\n    service: {externalTrafficPolicy: Local}\n")).toMatch(
      /externalTrafficPolicy needs type NodePort or LoadBalancer/,
    );
    expect(refused("  expose:\n    service: {type: ExternalName}\n")).toMatch(/Unsupported value: "ExternalName"/);
    expect(refused("  expose:\n    ingress: {host: a.example.com, annotations: {ifp.dev/applied-hash: x}}\n")).toMatch(
      /belong to the operator/,
    );
    expect(
      refused("  expose:\n    gateway: {parentRefs: [{name: gw}], hostname: a.example.com, mode: reencrypt}\n"),
    ).toMatch(/Unsupported value: "reencrypt"/);
    expect(get("agent", "bad")).toBeUndefined();
  });

  it("passes spec.expose.trustedProxies to the runtime as --trusted-proxies", async () => {
    await settled("proxied", "  expose:\n    trustedProxies: [10.0.0.0/8, 'fd00::/8', 192.0.2.7]\n");
    expect(get("deployment", "proxied").spec.template.spec.containers[0].args).toContain(
      "--trusted-proxies=10.0.0.0/8,fd00::/8,192.0.2.7",
    );
  });
});

describe("spec.expose.ingress", () => {
  it("creates the Ingress, updates it with the spec, defaults baseUrl to its host and deletes it when removed", async () => {
    const ingress = (host: string, annotation: string) => `  expose:
    ingress:
      className: nginx
      host: ${host}
      tlsSecretName: public-tls
      annotations: {nginx.ingress.kubernetes.io/backend-protocol: ${annotation}}
`;
    const agent = await settled("ing", ingress("ing.example.com", "HTTPS"));
    expect(agent.status.endpoint).toBe("https://ing.example.com");
    let ing = get("ingress", "ing");
    expect(ing.metadata.ownerReferences[0]).toMatchObject({ kind: "Agent", name: "ing", controller: true });
    expect(ing.metadata.annotations["nginx.ingress.kubernetes.io/backend-protocol"]).toBe("HTTPS");
    expect(ing.spec).toMatchObject({
      ingressClassName: "nginx",
      tls: [{ hosts: ["ing.example.com"], secretName: "public-tls" }],
      rules: [
        {
          host: "ing.example.com",
          http: {
            paths: [{ path: "/", pathType: "Prefix", backend: { service: { name: "ing", port: { name: "https" } } } }],
          },
        },
      ],
    });
    // The runtime advertises the host, and its certificate covers it.
    const manifest = get("configmap", "ing-manifest").data["manifest.yaml"] as string;
    expect(manifest).toContain("baseUrl: https://ing.example.com");
    const cert = new X509Certificate(Buffer.from(get("secret", "ing-tls").data["tls.crt"], "base64"));
    expect(cert.subjectAltName).toContain("DNS:ing.example.com");

    await settled("ing", ingress("www.example.com", "GRPCS"));
    ing = get("ingress", "ing");
    expect(ing.spec.rules[0].host).toBe("www.example.com");
    expect(ing.metadata.annotations["nginx.ingress.kubernetes.io/backend-protocol"]).toBe("GRPCS");
    expect(get("agent", "ing").status.endpoint).toBe("https://www.example.com");
    await until("the certificate re-issued for the new host", () =>
      new X509Certificate(Buffer.from(get("secret", "ing-tls").data["tls.crt"], "base64")).subjectAltName?.includes(
        "DNS:www.example.com",
      ),
    );

    // The Ingress is watched (in the operator's cache), and a hand edit of a field it owns is undone.
    await until(
      "the Ingress in the operator's cache",
      () =>
        manager.caches.get("Ingress", NS, "ing")?.metadata?.resourceVersion ===
        get("ingress", "ing").metadata.resourceVersion,
    );
    cp.kubectl([
      "-n",
      NS,
      "patch",
      "ingress",
      "ing",
      "--type=merge",
      "-p",
      JSON.stringify({ spec: { rules: [{ host: "evil.example.com", http: ing.spec.rules[0].http }] } }),
    ]);
    await until("the hand edit undone", () => get("ingress", "ing")?.spec.rules[0].host === "www.example.com", 10_000);

    await settled("ing", "");
    await until("the Ingress deleted", () => get("ingress", "ing") === undefined);
    // One Normal Event per pass: the deletion is one of the things that pass says it did.
    expect(events("ing").some((e) => e.type === "Normal" && /(^|; )deleted [^;]*Ingress\/ing/.test(e.message))).toBe(
      true,
    );
    expect(get("agent", "ing").status.endpoint).toBe(`https://ing.${NS}.svc`);
    expect(get("service", "ing").metadata.annotations?.["ifp.dev/exposed"]).toBeUndefined();
  });

  it("leaves an Ingress of the name that is not its own alone", async () => {
    cp.kubectl(
      ["apply", "-f", "-"],
      JSON.stringify({
        apiVersion: "networking.k8s.io/v1",
        kind: "Ingress",
        metadata: { name: "taken", namespace: NS },
        spec: {
          rules: [
            {
              host: "other.example.com",
              http: {
                paths: [
                  { path: "/", pathType: "Prefix", backend: { service: { name: "other", port: { number: 80 } } } },
                ],
              },
            },
          ],
        },
      }),
    );
    apply("taken", "  expose:\n    ingress: {host: taken.example.com}\n");
    const o = await untilReason("agent", "taken", "ChildConflict");
    expect(condition(o, "Ready").message).toMatch(/Ingress taken already exists/);
    expect(get("ingress", "taken").spec.rules[0].host).toBe("other.example.com");
  });

  it("exposes a Relay the same way", async () => {
    cp.kubectl(
      ["apply", "-f", "-"],
      `apiVersion: ifp.dev/v1alpha1
kind: Relay
metadata: {name: rel, namespace: ${NS}}
spec:
  url: https://relay.example.com
  expose:
    service: {type: LoadBalancer}
    ingress: {host: relay.example.com}
`,
    );
    const ing = await until("the relay's Ingress", () => get("ingress", "rel"));
    expect(ing.metadata.ownerReferences[0]).toMatchObject({ kind: "Relay", name: "rel" });
    expect(ing.spec.rules[0].backend ?? ing.spec.rules[0].http.paths[0].backend).toEqual({
      service: { name: "rel", port: { name: "https" } },
    });
    await until("the relay's LoadBalancer Service", () => get("service", "rel")?.spec.type === "LoadBalancer");
  });
});

describe("spec.expose.gateway", () => {
  it("says why while the Gateway API is missing, then routes once its CRDs are installed", {
    timeout: 180_000,
  }, async () => {
    apply(
      "gw",
      "  expose:\n    gateway:\n      parentRefs: [{name: public, namespace: infra, sectionName: tls}]\n      hostname: gw.example.com\n      mode: passthrough\n",
    );
    const missing = await untilReason("agent", "gw", "GatewayAPIMissing");
    expect(condition(missing, "Ready")).toMatchObject({ status: "False" });
    expect(condition(missing, "Ready").message).toMatch(
      /spec\.expose\.gateway \(mode passthrough\) needs the Gateway API.*TLSRoute/,
    );
    expect(condition(missing, "Stalled")).toMatchObject({ status: "True" });
    // Everything else is in place, and the host is advertised all the same.
    expect(get("service", "gw")).toBeDefined();
    expect(missing.status.endpoint).toBe("https://gw.example.com");
    await until("a Warning Event naming the cause", () =>
      events("gw").some((e) => e.type === "Warning" && e.reason === "GatewayAPIMissing"),
    );
    // No hot loop: once the status says so, resyncs every 2 s write nothing, not even Events.
    const warnings = () =>
      events("gw")
        .filter((e) => e.reason === "GatewayAPIMissing")
        .reduce((n, e) => n + (e.count ?? 1), 0);
    // Settled: a whole resync of every resource the operator holds wrote nothing, and the Events'
    // counts the API server shows stayed as they were over it (a repeat's count is written up to a
    // second after the recorder counted it: the write metric moves at once, the Event later); then two more.
    let warned = 0;
    const before = await until("a resync that writes nothing", async () => {
      const w = await writes();
      const seen = warnings();
      await resyncs(manager, 1, 20_000);
      warned = warnings();
      return (await writes()) === w && warned === seen ? w : undefined;
    });
    await resyncs(manager, 2, 20_000);
    expect(await writes(), "writes while the Gateway API is missing").toBe(before);
    expect(warnings()).toBe(warned);

    // The real Gateway API CRDs (standard channel) arrive.
    cp.kubectl(["apply", "--server-side", "-f", toolPath("gateway-api", "standard-install.yaml")]);
    for (const crd of ["tlsroutes", "httproutes", "backendtlspolicies"]) {
      await until(`the ${crd} CRD established`, () =>
        getOrAbsent(cp, ["get", "crd", `${crd}.gateway.networking.k8s.io`])?.status?.conditions?.some(
          (c: any) => c.type === "Established" && c.status === "True",
        ),
      );
    }
    poke("agent", "gw");
    await until("the agent no longer blocked", () =>
      ["RuntimeNotReady", "RolloutInProgress"].includes(condition(get("agent", "gw"), "Ready")?.reason),
    );
    const route = get("tlsroutes.gateway.networking.k8s.io", "gw");
    expect(route.apiVersion).toBe("gateway.networking.k8s.io/v1");
    expect(route.metadata.ownerReferences[0]).toMatchObject({ kind: "Agent", name: "gw", controller: true });
    expect(route.spec).toMatchObject({
      parentRefs: [{ name: "public", namespace: "infra", sectionName: "tls" }],
      hostnames: ["gw.example.com"],
      rules: [{ backendRefs: [{ kind: "Service", name: "gw", port: 443 }] }],
    });

    // terminate: the Gateway re-encrypts; the passthrough route goes.
    await settled(
      "gw",
      "  expose:\n    gateway:\n      parentRefs: [{name: public, namespace: infra}]\n      hostname: gw.example.com\n      mode: terminate\n",
    );
    const http = await until("the HTTPRoute", () => get("httproutes.gateway.networking.k8s.io", "gw"));
    expect(http.spec.rules[0].backendRefs[0]).toMatchObject({ kind: "Service", name: "gw", port: 443 });
    const policy = get("backendtlspolicies.gateway.networking.k8s.io", "gw");
    expect(policy.spec).toMatchObject({
      targetRefs: [{ group: "", kind: "Service", name: "gw", sectionName: "https" }],
      validation: { caCertificateRefs: [{ group: "", kind: "ConfigMap", name: "gw-trust" }], hostname: `gw.${NS}.svc` },
    });
    await until("the TLSRoute deleted", () => get("tlsroutes.gateway.networking.k8s.io", "gw") === undefined);

    // Removed from the spec: the routes go too.
    await settled("gw", "");
    await until("the HTTPRoute deleted", () => get("httproutes.gateway.networking.k8s.io", "gw") === undefined);
    await until(
      "the BackendTLSPolicy deleted",
      () => get("backendtlspolicies.gateway.networking.k8s.io", "gw") === undefined,
    );
  });
});
