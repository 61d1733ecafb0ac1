import { describe, expect, it } from "vitest";
import { parse } from "yaml";
import { Agent } from "../../../../runtime/src/resources/agent.ts";
import { defaultBaseUrl, ExposeSpec } from "../../../../runtime/src/resources/expose.ts";
import { Relay } from "../../../../runtime/src/resources/relay.ts";
import { agentEndpoint, desiredAgentChildren, type AgentResource } from "../../kinds/agent/desired.ts";
import { desiredRelayChildren, type RelayResource } from "../../kinds/relay/desired.ts";
import {
  desiredGatewayChildren,
  desiredIngress,
  EXPOSED_CHILDREN,
  exposedHosts,
  exposedService,
  exposureApiVersion,
  exposureChildren,
  exposureToPrune,
  gatewayKindsFor,
  gatewayMissing,
  wantedExposureKinds,
} from "./expose.ts";
import type { Owner } from "../../reconcile/settings.ts";

const meta = { name: "alice", namespace: "team", uid: "uid-1", generation: 1 };
const owner: Owner = { kind: "Agent", metadata: meta };
const expose = (e: unknown) => ExposeSpec.parse(e);
const gw = (mode: "passthrough" | "terminate") => ({
  parentRefs: [{ name: "public", namespace: "infra", sectionName: "tls" }],
  hostname: "alice.example.com",
  mode,
});

describe("spec.expose schema", () => {
  it.each([
    [
      "a LoadBalancer with class and policy",
      { service: { type: "LoadBalancer", loadBalancerClass: "lb.example/x", externalTrafficPolicy: "Local" } },
    ],
    [
      "an Ingress",
      {
        ingress: {
          host: "alice.example.com",
          className: "nginx",
          annotations: { "nginx.ingress.kubernetes.io/backend-protocol": "HTTPS" },
        },
      },
    ],
    ["both an Ingress and a Gateway route", { ingress: { host: "a.example.com" }, gateway: gw("passthrough") }],
    ["trusted proxies as CIDRs and addresses", { trustedProxies: ["10.0.0.0/8", "192.0.2.7", "2001:db8::/32", "::1"] }],
  ])("accepts %s", (_, e) => {
    expect(ExposeSpec.safeParse(e).success).toBe(true);
  });

  it.each([
    ["a URL as ingress host", { ingress: { host: "https://alice.example.com" } }, "DNS name"],
    ["a host with a port", { ingress: { host: "alice.example.com:443" } }, "DNS name"],
    ["a host with a path", { ingress: { host: "alice.example.com/x" } }, "DNS name"],
    ["a wildcard host", { ingress: { host: "*.example.com" } }, "DNS name"],
    ["an upper-case host", { ingress: { host: "Alice.example.com" } }, "DNS name"],
    ["an empty gateway hostname", { gateway: { ...gw("passthrough"), hostname: "" } }, ""],
    ["an unknown gateway mode", { gateway: { ...gw("passthrough"), mode: "reencrypt" } }, ""],
    ["a gateway without parents", { gateway: { ...gw("passthrough"), parentRefs: [] } }, ""],
    ["an unknown Service type", { service: { type: "ExternalName" } }, ""],
    ["a prefix too long", { trustedProxies: ["10.0.0.0/33"] }, "CIDR"],
    ["a host name as proxy", { trustedProxies: ["proxy.example.com"] }, "CIDR"],
    ["a negative prefix", { trustedProxies: ["10.0.0.0/-1"] }, "CIDR"],
    ["an IPv6 prefix too long", { trustedProxies: ["::/129"] }, "CIDR"],
    ["two slashes", { trustedProxies: ["10.0.0.0/8/8"] }, "CIDR"],
    [
      "the operator's annotations",
      { service: { annotations: { "ifp.dev/applied-hash": "x" } } },
      "belong to the operator",
    ],
  ])("refuses %s", (_, e, message) => {
    const r = ExposeSpec.safeParse(e);
    expect(r.success).toBe(false);
    expect(JSON.stringify(r.error?.issues)).toContain(message);
  });
});

describe("baseUrl defaulting", () => {
  it.each([
    [undefined, undefined, undefined],
    ["https://given.example", { ingress: { host: "a.example.com" } }, "https://given.example"],
    [undefined, { ingress: { host: "a.example.com" } }, "https://a.example.com"],
    [undefined, { gateway: gw("terminate") }, "https://alice.example.com"],
    [undefined, { ingress: { host: "a.example.com" }, gateway: gw("terminate") }, "https://a.example.com"],
    [undefined, { service: { type: "LoadBalancer" } }, undefined],
  ])("baseUrl %s with expose %j → %s", (given, e, want) => {
    expect(defaultBaseUrl(given as string | undefined, e ? expose(e) : undefined)).toBe(want);
  });

  it("advertises the exposed host in the agent's manifest and status endpoint", () => {
    const a = Agent.parse({
      apiVersion: "ifp.dev/v1alpha1",
      kind: "Agent",
      metadata: meta,
      spec: { agentId: "alice@example", expose: { ingress: { host: "alice.example.com" } } },
    });
    const agent: AgentResource = { ...a, metadata: meta };
    expect(agentEndpoint(agent)).toBe("https://alice.example.com");
    const children = desiredAgentChildren(agent, {
      settings: { runtimeImage: "i", runtimeImagePullPolicy: "IfNotPresent", natsUrl: "nats://n" },
      signing: { secretName: "s", created: "", publicKey: "k" },
      tlsSecret: "t",
    });
    const cm = children.find((c) => c.kind === "ConfigMap") as unknown as { data: Record<string, string> };
    expect(parse(cm.data["manifest.yaml"]!).spec.baseUrl).toBe("https://alice.example.com");
  });

  it("lists every exposed host for the serving certificate", () => {
    expect(exposedHosts(expose({ ingress: { host: "a.example.com" }, gateway: gw("passthrough") }))).toEqual([
      "a.example.com",
      "alice.example.com",
    ]);
    expect(exposedHosts(undefined)).toEqual([]);
  });
});

describe("exposedService", () => {
  it.each([
    ["no spec.expose", undefined, {}, undefined],
    ["ClusterIP", { service: { type: "ClusterIP" } }, {}, undefined],
    [
      "NodePort",
      { service: { type: "NodePort", externalTrafficPolicy: "Local" } },
      { type: "NodePort", externalTrafficPolicy: "Local" },
      undefined,
    ],
    [
      "LoadBalancer with class and annotations",
      {
        service: {
          type: "LoadBalancer",
          loadBalancerClass: "lb.example/x",
          annotations: { "service.beta.kubernetes.io/aws-load-balancer-type": "nlb" },
        },
      },
      { type: "LoadBalancer", loadBalancerClass: "lb.example/x" },
      { "service.beta.kubernetes.io/aws-load-balancer-type": "nlb" },
    ],
  ])("%s", (_, e, specFields, annotations) => {
    const svc = exposedService(owner, e ? expose(e) : undefined, []);
    expect(svc.spec).toEqual({
      selector: { "app.kubernetes.io/name": "ifp-runtime", "app.kubernetes.io/instance": "alice" },
      ports: [{ name: "https", port: 443, targetPort: "https", protocol: "TCP" }],
      ...specFields,
    });
    expect(svc.metadata?.annotations).toEqual(annotations);
  });

  it("records the exposure children it goes with", () => {
    expect(exposedService(owner, undefined, ["Ingress", "TLSRoute"]).metadata?.annotations).toEqual({
      [EXPOSED_CHILDREN]: "Ingress,TLSRoute",
    });
  });
});

describe("desiredIngress", () => {
  it("routes the host to the Service's https port, with the user's class, annotations and TLS Secret", () => {
    const ing = desiredIngress(owner, {
      host: "alice.example.com",
      className: "nginx",
      annotations: { "nginx.ingress.kubernetes.io/backend-protocol": "HTTPS" },
      tlsSecretName: "alice-public",
    });
    expect(ing.metadata?.annotations).toEqual({ "nginx.ingress.kubernetes.io/backend-protocol": "HTTPS" });
    expect(ing.metadata?.ownerReferences?.[0]).toMatchObject({
      kind: "Agent",
      name: "alice",
      uid: "uid-1",
      controller: true,
    });
    expect(ing.spec).toEqual({
      ingressClassName: "nginx",
      tls: [{ hosts: ["alice.example.com"], secretName: "alice-public" }],
      rules: [
        {
          host: "alice.example.com",
          http: {
            paths: [
              { path: "/", pathType: "Prefix", backend: { service: { name: "alice", port: { name: "https" } } } },
            ],
          },
        },
      ],
    });
  });

  it("leaves out what was not asked for", () => {
    const ing = desiredIngress(owner, { host: "alice.example.com" });
    expect(ing.metadata?.annotations).toBeUndefined();
    expect(ing.spec?.ingressClassName).toBeUndefined();
    expect(ing.spec?.tls).toBeUndefined();
  });
});

describe("desiredGatewayChildren", () => {
  it("passthrough: a TLSRoute to port 443 of the Service, in the served version", () => {
    const [route, ...rest] = desiredGatewayChildren(owner, gw("passthrough"), { TLSRoute: "v1alpha2" }) as any[];
    expect(rest).toEqual([]);
    expect(route.apiVersion).toBe("gateway.networking.k8s.io/v1alpha2");
    expect(route.kind).toBe("TLSRoute");
    expect(route.spec).toEqual({
      parentRefs: [
        { group: "gateway.networking.k8s.io", kind: "Gateway", name: "public", namespace: "infra", sectionName: "tls" },
      ],
      hostnames: ["alice.example.com"],
      rules: [{ backendRefs: [{ group: "", kind: "Service", name: "alice", port: 443 }] }],
    });
  });

  it("terminate: an HTTPRoute and a BackendTLSPolicy checking the runtime's certificate against <name>-trust", () => {
    const [route, policy] = desiredGatewayChildren(
      owner,
      { ...gw("terminate"), parentRefs: [{ name: "public" }] },
      {},
    ) as any[];
    expect(route.apiVersion).toBe("gateway.networking.k8s.io/v1");
    expect(route.kind).toBe("HTTPRoute");
    expect(route.spec.parentRefs).toEqual([{ group: "gateway.networking.k8s.io", kind: "Gateway", name: "public" }]);
    expect(route.spec.rules).toEqual([
      {
        matches: [{ path: { type: "PathPrefix", value: "/" } }],
        backendRefs: [{ group: "", kind: "Service", name: "alice", port: 443 }],
      },
    ]);
    expect(policy.kind).toBe("BackendTLSPolicy");
    expect(policy.spec).toEqual({
      targetRefs: [{ group: "", kind: "Service", name: "alice", sectionName: "https" }],
      validation: {
        caCertificateRefs: [{ group: "", kind: "ConfigMap", name: "alice-trust" }],
        hostname: "alice.team.svc",
      },
    });
  });
});

describe("which children, and which to delete", () => {
  it.each([
    [undefined, []],
    [{ service: { type: "LoadBalancer" } }, []],
    [{ ingress: { host: "a.example.com" } }, ["Ingress"]],
    [{ gateway: gw("passthrough") }, ["TLSRoute"]],
    [{ gateway: gw("terminate") }, ["HTTPRoute", "BackendTLSPolicy"]],
    [{ ingress: { host: "a.example.com" }, gateway: gw("terminate") }, ["Ingress", "HTTPRoute", "BackendTLSPolicy"]],
  ])("%j wants %j", (e, kinds) => {
    const x = e ? expose(e) : undefined;
    expect(wantedExposureKinds(x)).toEqual(kinds);
    expect(exposureChildren(owner, x).map((c) => c.kind)).toEqual(["Service", ...kinds]);
  });

  it.each([
    [undefined, [], []],
    ["Ingress", [], ["Ingress"]],
    ["Ingress", ["Ingress"], []],
    ["TLSRoute", ["HTTPRoute", "BackendTLSPolicy"], ["TLSRoute"]],
    ["HTTPRoute,BackendTLSPolicy", ["Ingress"], ["HTTPRoute", "BackendTLSPolicy"]],
    ["Ingress,Secret,,Deployment", [], ["Ingress"]],
  ] as const)("made %s, wanted %j → delete %j", (made, wanted, prune) => {
    const svc = made === undefined ? { metadata: {} } : { metadata: { annotations: { [EXPOSED_CHILDREN]: made } } };
    expect(exposureToPrune(svc, [...wanted])).toEqual(prune);
  });

  it("renders only the planned kinds (a Gateway API that is not served is left out)", () => {
    const x = expose({ ingress: { host: "a.example.com" }, gateway: gw("passthrough") });
    const children = exposureChildren(owner, x, { kinds: ["Ingress"], versions: {} });
    expect(children.map((c) => c.kind)).toEqual(["Service", "Ingress"]);
    expect(children[0]!.metadata?.annotations).toEqual({ [EXPOSED_CHILDREN]: "Ingress" });
  });

  it("names the API versions to delete with", () => {
    expect(exposureApiVersion("Ingress", {})).toBe("networking.k8s.io/v1");
    expect(exposureApiVersion("TLSRoute", { TLSRoute: "v1alpha2" })).toBe("gateway.networking.k8s.io/v1alpha2");
    expect(exposureApiVersion("HTTPRoute", {})).toBeUndefined();
  });

  it("says what is missing when the Gateway API is not installed", () => {
    expect(gatewayKindsFor(expose({ gateway: gw("terminate") }))).toEqual(["HTTPRoute", "BackendTLSPolicy"]);
    const m = gatewayMissing(["TLSRoute"], "passthrough");
    expect(m.reason).toBe("GatewayAPIMissing");
    expect(m.message).toContain("spec.expose.gateway");
    expect(m.message).toContain("TLSRoute (v1 or v1alpha3 or v1alpha2)");
  });
});

describe("the runtime Deployment and the relay", () => {
  it("passes spec.expose.trustedProxies as --trusted-proxies", () => {
    const r = Relay.parse({
      apiVersion: "ifp.dev/v1alpha1",
      kind: "Relay",
      metadata: meta,
      spec: {
        url: "https://relay.example.com",
        expose: { trustedProxies: ["10.0.0.0/8", "192.0.2.1"], service: { type: "NodePort" } },
      },
    });
    const relay: RelayResource = { ...r, metadata: meta };
    const children = desiredRelayChildren(relay, {
      settings: { runtimeImage: "i", runtimeImagePullPolicy: "IfNotPresent", natsUrl: "nats://n" },
      tlsSecret: "t",
    }) as any[];
    const dep = children.find((c) => c.kind === "Deployment");
    expect(dep.spec.template.spec.containers[0].args).toContain("--trusted-proxies=10.0.0.0/8,192.0.2.1");
    expect(children.find((c) => c.kind === "Service").spec.type).toBe("NodePort");
    const plain = desiredRelayChildren(
      { ...relay, spec: { ...relay.spec, expose: undefined } },
      { settings: { runtimeImage: "i", runtimeImagePullPolicy: "IfNotPresent", natsUrl: "nats://n" }, tlsSecret: "t" },
    ) as any[];
    expect(plain.find((c) => c.kind === "Deployment").spec.template.spec.containers[0].args.join(" ")).not.toContain(
      "--trusted-proxies",
    );
  });

  it("passes the operator's cluster networks as --allow-private-targets", () => {
    const relay: RelayResource = {
      ...Relay.parse({
        apiVersion: "ifp.dev/v1alpha1",
        kind: "Relay",
        metadata: meta,
        spec: { url: "https://relay.example.com" },
      }),
      metadata: meta,
    };
    const settings = { runtimeImage: "i", runtimeImagePullPolicy: "IfNotPresent", natsUrl: "nats://n" };
    const argsOf = (clusterNetworks?: string[]) =>
      (desiredRelayChildren(relay, { settings: { ...settings, clusterNetworks }, tlsSecret: "t" }) as any[]).find(
        (c) => c.kind === "Deployment",
      ).spec.template.spec.containers[0].args as string[];
    expect(argsOf(["10.96.0.0/12", "10.244.0.0/16"])).toContain("--allow-private-targets=10.96.0.0/12,10.244.0.0/16");
    expect(argsOf([]).join(" ")).not.toContain("--allow-private-targets");
    expect(argsOf().join(" ")).not.toContain("--allow-private-targets");
  });
});
