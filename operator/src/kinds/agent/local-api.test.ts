import { describe, expect, it } from "vitest";
import { Agent } from "../../../../runtime/src/resources/agent.ts";
import { certificateDnsNames } from "../../reconcile/names.ts";
import { desiredAgentChildren, type AgentResource } from "./desired.ts";
import { generatedSecretRefusal, localApiDnsNames, localApiTokenSecret, newLocalApiToken } from "./local-api.ts";

const meta = { name: "alice", namespace: "team", uid: "uid-1", generation: 1 };
const agent = (localApi?: Record<string, unknown>): AgentResource => {
  const a = Agent.parse({
    apiVersion: "ifp.dev/v1alpha1",
    kind: "Agent",
    metadata: meta,
    spec: { agentId: "alice@example", ...(localApi ? { localApi } : {}) },
  });
  return { ...a, metadata: meta };
};
const owner = { kind: "Agent" as const, metadata: meta };
const marks = { key: Buffer.alloc(32, 1), since: Date.parse("2026-01-01T00:00:00Z") };
const inputs = {
  settings: { runtimeImage: "img:1", runtimeImagePullPolicy: "IfNotPresent", natsUrl: "nats://n:4222" },
  signing: { secretName: "alice-signing", created: "2026-01-01T00:00:01Z", publicKey: "k".repeat(43) },
  tlsSecret: "alice-tls",
};
const render = (a: AgentResource) => {
  const children = desiredAgentChildren(a, inputs) as any[];
  const dep = children.find((c) => c.kind === "Deployment");
  return {
    children,
    services: children.filter((c) => c.kind === "Service"),
    pod: dep.spec.template.spec,
    runtime: dep.spec.template.spec.containers[0],
  };
};

describe("spec.localApi.service rendered", () => {
  const cases: { name: string; localApi?: Record<string, unknown>; port?: number }[] = [
    { name: "absent", localApi: undefined },
    { name: "present but disabled", localApi: { service: { enabled: false, port: 9000 } } },
    { name: "enabled, default port", localApi: { service: { enabled: true } }, port: 9443 },
    { name: "enabled, own port", localApi: { port: 8082, service: { enabled: true, port: 10443 } }, port: 10443 },
  ];
  for (const c of cases) {
    it(c.name, () => {
      const r = render(agent(c.localApi));
      const flags = r.runtime.args.filter((a: string) => a.startsWith("--local-api-"));
      if (c.port === undefined) {
        expect(r.services.map((s) => s.metadata.name)).toEqual(["alice"]);
        expect(flags).toEqual([]);
        expect(r.runtime.ports).toEqual([
          { name: "https", containerPort: 8443, protocol: "TCP" },
          { name: "metrics", containerPort: 9090, protocol: "TCP" },
        ]);
        expect(r.pod.volumes.map((v: any) => v.name)).not.toContain("local-api");
        expect(localApiDnsNames(owner, agent(c.localApi))).toEqual([]);
        return;
      }
      const svc = r.services.find((s) => s.metadata.name === "alice-local-api");
      expect(svc.spec).toEqual({
        type: "ClusterIP",
        selector: { "app.kubernetes.io/name": "ifp-runtime", "app.kubernetes.io/instance": "alice" },
        sessionAffinity: "ClientIP",
        ports: [{ name: "local-api", port: c.port, targetPort: "local-api", protocol: "TCP" }],
      });
      expect(svc.metadata.ownerReferences).toEqual([
        {
          apiVersion: "ifp.dev/v1alpha1",
          kind: "Agent",
          name: "alice",
          uid: "uid-1",
          controller: true,
          blockOwnerDeletion: true,
        },
      ]);
      // The Service is applied before the Deployment.
      expect(r.children.at(-1).kind).toBe("Deployment");
      expect(flags).toEqual([`--local-api-tls-port=${c.port}`, "--local-api-token-file=/etc/ifp/local-api/token"]);
      expect(r.runtime.ports).toContainEqual({ name: "local-api", containerPort: c.port, protocol: "TCP" });
      expect(r.runtime.volumeMounts).toContainEqual({
        name: "local-api",
        mountPath: "/etc/ifp/local-api",
        readOnly: true,
      });
      expect(r.pod.volumes).toContainEqual({
        name: "local-api",
        secret: { secretName: "alice-local-api", items: [{ key: "token", path: "token" }] },
      });
      const names = localApiDnsNames(owner, agent(c.localApi));
      expect(names).toEqual([
        "alice-local-api",
        "alice-local-api.team",
        "alice-local-api.team.svc",
        "alice-local-api.team.svc.cluster.local",
      ]);
      // The default certificate keeps the Service's names first (its common name) and adds these.
      const dns = certificateDnsNames(owner, undefined, [...names, "extra.example"]);
      expect(dns.slice(0, 4)).toEqual(["alice", "alice.team", "alice.team.svc", "alice.team.svc.cluster.local"]);
      expect(dns).toEqual(expect.arrayContaining([...names, "extra.example"]));
    });
  }

  it("does not change the rest of the Deployment", () => {
    const off = render(agent()).pod;
    const on = render(agent({ service: { enabled: true } })).pod;
    const strip = (pod: any) => ({
      ...pod,
      volumes: pod.volumes.filter((v: any) => v.name !== "local-api"),
      containers: pod.containers.map((c: any) => ({
        ...c,
        args: c.args.filter((a: string) => !a.startsWith("--local-api-")),
        ports: c.ports.filter((p: any) => p.name !== "local-api"),
        volumeMounts: c.volumeMounts.filter((m: any) => m.name !== "local-api"),
      })),
    });
    expect(strip(on)).toEqual(off);
  });

  it("refuses ports that collide with the runtime's own", () => {
    expect(
      Agent.safeParse({
        apiVersion: "ifp.dev/v1alpha1",
        kind: "Agent",
        metadata: meta,
        spec: { agentId: "a", localApi: { service: { enabled: true, port: 8443 } } },
      }).success,
    ).toBe(false);
    expect(
      Agent.safeParse({
        apiVersion: "ifp.dev/v1alpha1",
        kind: "Agent",
        metadata: meta,
        spec: { agentId: "a", localApi: { port: 9443, service: { enabled: true } } },
      }).success,
    ).toBe(false);
    expect(
      Agent.safeParse({
        apiVersion: "ifp.dev/v1alpha1",
        kind: "Agent",
        metadata: meta,
        spec: { agentId: "a", localApi: { service: { enabled: true, port: 0 } } },
      }).success,
    ).toBe(false);
  });

  it("makes a token of 32 random bytes, base64url, into a Secret the Agent owns", () => {
    const t = newLocalApiToken();
    expect(t).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(newLocalApiToken()).not.toBe(t);
    const s = localApiTokenSecret(owner, t, marks);
    expect(s.metadata).toMatchObject({ name: "alice-local-api", namespace: "team" });
    expect(s.metadata!.ownerReferences).toEqual([
      {
        apiVersion: "ifp.dev/v1alpha1",
        kind: "Agent",
        name: "alice",
        uid: "uid-1",
        controller: true,
        blockOwnerDeletion: true,
      },
    ]);
    expect(generatedSecretRefusal(s, owner, "local API token", marks)).toBeUndefined();
    expect(Buffer.from(s.data!.token!, "base64").toString()).toBe(t);
  });
});

describe("a generated Secret someone else made", () => {
  it("is refused unless it has both the owner reference to this Agent and the operator's labels, naming the Secret", () => {
    const made = localApiTokenSecret(owner, newLocalApiToken(), marks);
    const { ownerReferences: _o, ...noOwner } = made.metadata!;
    const planted = { ...made, metadata: noOwner };
    expect(generatedSecretRefusal(planted, owner, "local API token", marks)).toEqual({
      reason: "ForeignSecret",
      message:
        "Secret alice-local-api, where the operator keeps this Agent's local API token, was not made by the operator for Agent alice (it lacks the owner reference to it or the operator's labels); it is neither used nor overwritten: delete Secret alice-local-api and the operator makes a new one",
    });
    const unlabelled = { ...made, metadata: { ...made.metadata!, labels: { "ifp.dev/agent": "alice" } } };
    expect(generatedSecretRefusal(unlabelled, owner, "local API token", marks)?.reason).toBe("ForeignSecret");
    const otherOwner = {
      ...made,
      metadata: {
        ...made.metadata!,
        ownerReferences: [{ ...made.metadata!.ownerReferences![0]!, uid: "uid-of-bob", name: "bob" }],
      },
    };
    expect(generatedSecretRefusal(otherOwner, owner, "local API token", marks)?.message).toMatch(
      /was not made by the operator for Agent alice/,
    );
    const earlier = {
      ...made,
      metadata: { ...made.metadata!, ownerReferences: [{ ...made.metadata!.ownerReferences![0]!, uid: "uid-0" }] },
    };
    expect(generatedSecretRefusal(earlier, owner, "local API token", marks)?.message).toMatch(
      /belongs to an earlier Agent alice \(uid uid-0\)/,
    );
  });

  it("is refused with the owner reference and the operator's labels but without the operator's mark, unless it is older than the marks key", () => {
    const made = localApiTokenSecret(owner, newLocalApiToken(), marks);
    const { annotations: _a, ...unmarkedMeta } = made.metadata!;
    const copied = { ...made, metadata: { ...unmarkedMeta, creationTimestamp: new Date("2026-02-01T00:00:00Z") } };
    expect(generatedSecretRefusal(copied, owner, "local API token", marks)).toEqual({
      reason: "ForeignSecret",
      message:
        "Secret alice-local-api, where the operator keeps this Agent's local API token, was not made by the operator for Agent alice (it carries no mark of the operator's); it is neither used nor overwritten: delete Secret alice-local-api and the operator makes a new one",
    });
    // A mark made with another key, or for another owner, is no mark.
    const forged = localApiTokenSecret(owner, newLocalApiToken(), { ...marks, key: Buffer.alloc(32, 2) });
    expect(generatedSecretRefusal(forged, owner, "local API token", marks)?.reason).toBe("ForeignSecret");
    const bobs = localApiTokenSecret({ ...owner, metadata: { ...meta, uid: "uid-2" } }, "t".repeat(43), marks);
    const moved = {
      ...bobs,
      metadata: { ...bobs.metadata!, ownerReferences: made.metadata!.ownerReferences },
    };
    expect(generatedSecretRefusal(moved, owner, "local API token", marks)?.reason).toBe("ForeignSecret");
    // Made by an earlier version, before the operator had its marks key.
    const older = { ...copied, metadata: { ...copied.metadata, creationTimestamp: new Date("2025-12-01T00:00:00Z") } };
    expect(generatedSecretRefusal(older, owner, "local API token", marks)).toBeUndefined();
  });
});
