import { describe, expect, it } from "vitest";
import { selectorMatches } from "../../../../runtime/src/resources/common.ts";
import { directoryEntry, selectedPeers, withDirectoryPeers } from "./directory.ts";
import type { CustomObject } from "../reconciler.ts";

const KEY = "B".repeat(43);
const agent = (ns: string, name: string, labels: Record<string, string>, status: Record<string, unknown> | null = { endpoint: `https://${name}.${ns}.svc`, signingKey: { keyId: "key-1", publicKey: KEY, secretName: `${name}-signing` } }): CustomObject => ({
  apiVersion: "ifp.dev/v1alpha1",
  kind: "Agent",
  metadata: { name, namespace: ns, uid: `${ns}-${name}`, labels },
  spec: { agentId: `${name}-id` },
  ...(status ? { status } : {}),
});

describe("label selectors", () => {
  it("match as Kubernetes matches them: every pair and every expression", () => {
    const l = { app: "x", tier: "a" };
    expect(selectorMatches({}, l)).toBe(true);
    expect(selectorMatches({}, undefined)).toBe(true);
    expect(selectorMatches({ matchLabels: { app: "x" } }, l)).toBe(true);
    expect(selectorMatches({ matchLabels: { app: "x", tier: "b" } }, l)).toBe(false);
    expect(selectorMatches({ matchExpressions: [{ key: "tier", operator: "In", values: ["a", "b"] }] }, l)).toBe(true);
    expect(selectorMatches({ matchExpressions: [{ key: "tier", operator: "NotIn", values: ["a"] }] }, l)).toBe(false);
    expect(selectorMatches({ matchExpressions: [{ key: "gone", operator: "NotIn", values: ["a"] }] }, l)).toBe(true);
    expect(selectorMatches({ matchExpressions: [{ key: "app", operator: "Exists" }] }, l)).toBe(true);
    expect(selectorMatches({ matchExpressions: [{ key: "app", operator: "DoesNotExist" }] }, l)).toBe(false);
    expect(selectorMatches({ matchExpressions: [{ key: "gone", operator: "In", values: [] }] }, l)).toBe(false);
    // Keys of Object.prototype are not labels.
    expect(selectorMatches({ matchExpressions: [{ key: "constructor", operator: "Exists" }] }, l)).toBe(false);
  });
});

describe("the directory", () => {
  const self = agent("home", "hub", { mesh: "on" });
  const all = [self, agent("home", "one", { mesh: "on" }), agent("home", "two", { mesh: "off" }), agent("away", "far", { mesh: "on" })];

  it("selects by label in the Agent's own namespace, never itself; by namespace labels when asked", () => {
    expect(selectedPeers(self, { agentSelector: { matchLabels: { mesh: "on" } } }, all, () => undefined).map((p) => p.agentId)).toEqual(["one-id"]);
    const labels = (ns: string) => ({ "kubernetes.io/metadata.name": ns, team: "blue" });
    expect(selectedPeers(self, { agentSelector: {}, namespaceSelector: {} }, all, labels).map((p) => p.agentId)).toEqual(["far-id", "one-id", "two-id"]);
    expect(selectedPeers(self, { agentSelector: {}, namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": "away" } } }, all, labels).map((p) => p.agentId)).toEqual(["far-id"]);
  });

  it("leaves out an Agent with nothing published yet, one being deleted, and one refused for its agent id", () => {
    const pending = agent("home", "new", { mesh: "on" }, null);
    const deleting = agent("home", "old", { mesh: "on" });
    deleting.metadata!.deletionTimestamp = new Date("2026-01-01T00:00:00Z");
    const refused = agent("home", "dup", { mesh: "on" }, { endpoint: "https://dup.home.svc", signingKey: { keyId: "k", publicKey: KEY, secretName: "s" }, conditions: [{ type: "Ready", status: "False", reason: "DuplicateAgentId" }] });
    expect(selectedPeers(self, { agentSelector: { matchLabels: { mesh: "on" } } }, [self, pending, deleting, refused], () => undefined)).toEqual([]);
  });

  it("publishes every signing key with its status after a rotation, and the encryption key", () => {
    const rotated = agent("home", "r", {}, {
      endpoint: "https://r.example",
      signingKeys: [
        { keyId: "key-1", publicKey: KEY, status: "retired" },
        { keyId: "key-1-r2", publicKey: "C".repeat(43), status: "active" },
      ],
      encryptionKey: { keyId: "enc-1", publicKey: "D".repeat(43) },
    });
    expect(directoryEntry(rotated)).toEqual({
      agentId: "r-id",
      url: "https://r.example",
      keys: [{ keyId: "key-1", publicKey: KEY, status: "retired" }, { keyId: "key-1-r2", publicKey: "C".repeat(43), status: "active" }],
      encryptionKeys: [{ keyId: "enc-1", publicKey: "D".repeat(43), status: "active" }],
      temperature: "cool",
    });
  });

  it("adds to spec.peers only agent ids it does not name", () => {
    expect(withDirectoryPeers([{ agentId: "a", n: 1 }], [{ agentId: "a", n: 2 }, { agentId: "b", n: 3 }])).toEqual([{ agentId: "a", n: 1 }, { agentId: "b", n: 3 }]);
  });
});
