import { describe, expect, it } from "vitest";
import { recordNotes, withNotes, note, type ReconcileContext } from "./reconciler.ts";
import {
  AGENT_RUNTIME_ACCOUNT,
  RELAY_RUNTIME_ACCOUNT,
  rolledTo,
  sharedAccountInUse,
  sharedRuntimeAccess,
} from "./shared.ts";
import { runtimeAccountName } from "./identity.ts";

describe("sharedRuntimeAccess", () => {
  it("names what an earlier version gave agent runtimes: one ServiceAccount, a Role to record Events and its binding, owned by no resource", () => {
    const objs = sharedRuntimeAccess("Agent", "team") as any[];
    expect(objs.map((o) => `${o.kind}/${o.metadata.name}`)).toEqual([
      "ServiceAccount/ifp-agent-runtimes",
      "Role/ifp-agent-runtimes",
      "RoleBinding/ifp-agent-runtimes",
    ]);
    for (const o of objs) {
      expect(o.metadata.namespace).toBe("team");
      expect(o.metadata.ownerReferences).toBeUndefined();
      expect(o.metadata.labels).toMatchObject({
        "app.kubernetes.io/managed-by": "ifp-operator",
        "app.kubernetes.io/component": "shared",
      });
      // Not mapped to any one Agent by the manager's label lookup.
      expect(o.metadata.labels["app.kubernetes.io/instance"]).toBeUndefined();
    }
    expect(objs[0].automountServiceAccountToken).toBe(true);
    expect(objs[1].rules).toEqual([{ apiGroups: [""], resources: ["events"], verbs: ["create", "patch"] }]);
    expect(objs[2].roleRef).toEqual({
      apiGroup: "rbac.authorization.k8s.io",
      kind: "Role",
      name: AGENT_RUNTIME_ACCOUNT,
    });
    expect(objs[2].subjects).toEqual([{ kind: "ServiceAccount", name: AGENT_RUNTIME_ACCOUNT, namespace: "team" }]);
  });

  it("names what it gave relay runtimes: a ServiceAccount of their own kind that mounts no token, and no Role", () => {
    const objs = sharedRuntimeAccess("Relay", "team") as any[];
    expect(objs.map((o) => `${o.kind}/${o.metadata.name}`)).toEqual([`ServiceAccount/${RELAY_RUNTIME_ACCOUNT}`]);
    expect(objs[0].automountServiceAccountToken).toBe(false);
  });

  it("uses names no resource's own ServiceAccount could have", () => {
    for (const name of [AGENT_RUNTIME_ACCOUNT, RELAY_RUNTIME_ACCOUNT])
      expect(name.endsWith(runtimeAccountName(""))).toBe(false);
  });
});

describe("sharedAccountInUse", () => {
  const labels = (component: string) => ({
    "app.kubernetes.io/managed-by": "ifp-operator",
    "app.kubernetes.io/component": component,
  });
  const dep = (
    account: string,
    status: object,
    over: { namespace?: string; component?: string; labels?: object } = {},
  ) =>
    ({
      metadata: {
        namespace: over.namespace ?? "team",
        generation: 2,
        labels: over.labels ?? labels(over.component ?? "agent"),
      },
      spec: { template: { spec: { serviceAccountName: account } } },
      status,
    }) as never;
  const rolled = { observedGeneration: 2, replicas: 1, updatedReplicas: 1 };
  it.each([
    {
      name: "every Deployment rolled to its own account",
      ds: [dep("a-runtime", rolled), dep("b-runtime", rolled)],
      want: false,
    },
    {
      name: "one still under the shared account",
      ds: [dep("a-runtime", rolled), dep(AGENT_RUNTIME_ACCOUNT, rolled)],
      want: true,
    },
    { name: "one with an old pod left", ds: [dep("a-runtime", { ...rolled, replicas: 2 })], want: true },
    { name: "its change not yet observed", ds: [dep("a-runtime", { ...rolled, observedGeneration: 1 })], want: true },
    {
      name: "under it, but in another namespace",
      ds: [dep(AGENT_RUNTIME_ACCOUNT, rolled, { namespace: "other" })],
      want: false,
    },
    {
      name: "a relay's Deployment mid-rollout",
      ds: [dep("r-runtime", { ...rolled, replicas: 2 }, { component: "relay" })],
      want: false,
    },
    {
      name: "not the operator's",
      ds: [dep(AGENT_RUNTIME_ACCOUNT, rolled, { labels: { "app.kubernetes.io/component": "agent" } })],
      want: false,
    },
    { name: "no Deployment", ds: [], want: false },
  ])("$name: $want", ({ ds, want }) => expect(sharedAccountInUse(ds, "Agent", "team")).toBe(want));
});

describe("rolledTo", () => {
  const dep = (account: string, generation: number, status: object) =>
    ({ metadata: { generation }, spec: { template: { spec: { serviceAccountName: account } } }, status }) as never;
  it.each([
    {
      name: "every pod at the shared account's spec",
      d: dep(AGENT_RUNTIME_ACCOUNT, 2, { observedGeneration: 2, replicas: 1, updatedReplicas: 1 }),
      want: true,
    },
    { name: "scaled to zero", d: dep(AGENT_RUNTIME_ACCOUNT, 2, { observedGeneration: 2 }), want: true },
    {
      name: "an old pod still running",
      d: dep(AGENT_RUNTIME_ACCOUNT, 2, { observedGeneration: 2, replicas: 2, updatedReplicas: 1 }),
      want: false,
    },
    {
      name: "the change not yet observed",
      d: dep(AGENT_RUNTIME_ACCOUNT, 2, { observedGeneration: 1, replicas: 1, updatedReplicas: 1 }),
      want: false,
    },
    {
      name: "still the old account",
      d: dep("a-runtime", 1, { observedGeneration: 1, replicas: 1, updatedReplicas: 1 }),
      want: false,
    },
    { name: "no Deployment", d: undefined, want: false },
  ])("$name: $want", ({ d, want }) => expect(rolledTo(d, AGENT_RUNTIME_ACCOUNT)).toBe(want));
});

describe("recordNotes", () => {
  const recorder = () => {
    const events: string[] = [];
    const kube = {
      event: async (_o: unknown, type: string, reason: string, message: string) =>
        void events.push(`${type} ${reason}: ${message}`),
    };
    return { events, ctx: { kube } as unknown as ReconcileContext };
  };
  const obj = { kind: "Agent", metadata: { name: "a", namespace: "n" } };

  it("records what one pass did as one Normal Event, under the reason of the first", async () => {
    const { events, ctx } = recorder();
    const pass = withNotes(ctx);
    await note(pass, obj, "GeneratedSigningKey", "generated a key");
    await note(pass, obj, "IssuedCertificate", "issued a certificate");
    await note(pass, obj, "Applied", "applied Deployment/a");
    expect(events).toEqual([]);
    await recordNotes(pass, obj);
    expect(events).toEqual(["Normal GeneratedSigningKey: generated a key; issued a certificate; applied Deployment/a"]);
    await recordNotes(pass, obj);
    expect(events).toHaveLength(1);
  });

  it("records at once outside a pass, and nothing for a pass that did nothing", async () => {
    const { events, ctx } = recorder();
    await recordNotes(withNotes(ctx), obj);
    expect(events).toEqual([]);
    await note(ctx, obj, "Applied", "applied Service/a");
    expect(events).toEqual(["Normal Applied: applied Service/a"]);
  });
});
