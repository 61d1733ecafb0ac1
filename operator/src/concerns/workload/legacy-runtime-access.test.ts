import { describe, expect, it } from "vitest";
import {
  AGENT_RUNTIME_ACCOUNT,
  isLegacyAccess,
  legacyRuntimeAccess,
  RELAY_RUNTIME_ACCOUNT,
  rolledTo,
  sharedAccountInUse,
} from "./legacy-runtime-access.ts";
import { runtimeAccountName } from "./identity.ts";

describe("legacyRuntimeAccess", () => {
  it("names what an earlier version gave agent runtimes: one ServiceAccount, a Role to record Events and its binding", () => {
    expect(legacyRuntimeAccess("Agent", "team")).toEqual([
      { apiVersion: "v1", kind: "ServiceAccount", namespace: "team", name: "ifp-agent-runtimes" },
      { apiVersion: "rbac.authorization.k8s.io/v1", kind: "Role", namespace: "team", name: "ifp-agent-runtimes" },
      {
        apiVersion: "rbac.authorization.k8s.io/v1",
        kind: "RoleBinding",
        namespace: "team",
        name: "ifp-agent-runtimes",
      },
    ]);
    expect(AGENT_RUNTIME_ACCOUNT).toBe("ifp-agent-runtimes");
  });

  it("names what it gave relay runtimes: a ServiceAccount of their own kind, and no Role", () => {
    expect(legacyRuntimeAccess("Relay", "team").map((o) => `${o.kind}/${o.name}`)).toEqual([
      `ServiceAccount/${RELAY_RUNTIME_ACCOUNT}`,
    ]);
  });

  it("uses names no resource's own ServiceAccount could have", () => {
    for (const name of [AGENT_RUNTIME_ACCOUNT, RELAY_RUNTIME_ACCOUNT])
      expect(name.endsWith(runtimeAccountName(""))).toBe(false);
  });
});

describe("isLegacyAccess", () => {
  const made = (over: object = {}) => ({
    kind: "ServiceAccount",
    metadata: {
      name: AGENT_RUNTIME_ACCOUNT,
      namespace: "team",
      labels: { "app.kubernetes.io/managed-by": "ifp-operator", "app.kubernetes.io/component": "shared" },
      ...over,
    },
  });
  it.each([
    { name: "what an earlier version made: managed, shared, owned by no resource", o: made(), want: true },
    { name: "absent", o: undefined, want: false },
    {
      name: "the user's, of the same name",
      o: made({ labels: { "app.kubernetes.io/component": "shared" } }),
      want: false,
    },
    {
      name: "a runtime's own (component agent)",
      o: made({ labels: { "app.kubernetes.io/managed-by": "ifp-operator", "app.kubernetes.io/component": "agent" } }),
      want: false,
    },
    {
      name: "owned by a resource",
      o: made({ ownerReferences: [{ apiVersion: "ifp.dev/v1alpha1", kind: "Agent", name: "a", uid: "u" }] }),
      want: false,
    },
  ])("$name: $want", ({ o, want }) => expect(isLegacyAccess(o as never)).toBe(want));
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
