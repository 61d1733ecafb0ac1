import { describe, expect, it } from "vitest";
import { selectorMatches } from "../../../../runtime/src/resources/fields.ts";
import { agentIdClaim, directoryEntry, selectedPeers, withDirectoryPeers } from "./directory.ts";
import { didKeyFromPublicKey } from "../../../../runtime/src/protocol/did-key.ts";
import { generateSigningKey } from "../../../../runtime/src/protocol/keys.ts";
import type { CustomObject } from "../../reconcile/context.ts";

const KEY = "B".repeat(43);
const agent = (
  ns: string,
  name: string,
  labels: Record<string, string>,
  status: Record<string, unknown> | null = {
    endpoint: `https://${name}.${ns}.svc`,
    signingKey: { keyId: "key-1", publicKey: KEY, secretName: `${name}-signing` },
  },
): CustomObject => ({
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
  const all = [
    self,
    agent("home", "one", { mesh: "on" }),
    agent("home", "two", { mesh: "off" }),
    agent("away", "far", { mesh: "on" }),
  ];

  it("selects by label in the Agent's own namespace, never itself; by namespace labels when asked", () => {
    expect(
      selectedPeers(self, { agentSelector: { matchLabels: { mesh: "on" } } }, all, () => undefined).map(
        (p) => p.agentId,
      ),
    ).toEqual(["one-id"]);
    const labels = (ns: string) => ({ "kubernetes.io/metadata.name": ns, team: "blue" });
    expect(
      selectedPeers(self, { agentSelector: {}, namespaceSelector: {} }, all, labels).map((p) => p.agentId),
    ).toEqual(["far-id", "one-id", "two-id"]);
    expect(
      selectedPeers(
        self,
        { agentSelector: {}, namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": "away" } } },
        all,
        labels,
      ).map((p) => p.agentId),
    ).toEqual(["far-id"]);
  });

  it("leaves out an Agent with nothing published yet, one being deleted, and one refused for its agent id", () => {
    const pending = agent("home", "new", { mesh: "on" }, null);
    const deleting = agent("home", "old", { mesh: "on" });
    deleting.metadata!.deletionTimestamp = new Date("2026-01-01T00:00:00Z");
    const refused = agent(
      "home",
      "dup",
      { mesh: "on" },
      {
        endpoint: "https://dup.home.svc",
        signingKey: { keyId: "k", publicKey: KEY, secretName: "s" },
        conditions: [{ type: "Ready", status: "False", reason: "DuplicateAgentId" }],
      },
    );
    expect(
      selectedPeers(
        self,
        { agentSelector: { matchLabels: { mesh: "on" } } },
        [self, pending, deleting, refused],
        () => undefined,
      ),
    ).toEqual([]);
  });

  it("publishes every signing key with its status after a rotation, and the encryption key", () => {
    const rotated = agent(
      "home",
      "r",
      {},
      {
        endpoint: "https://r.example",
        signingKeys: [
          { keyId: "key-1", publicKey: KEY, status: "retired" },
          { keyId: "key-1-r2", publicKey: "C".repeat(43), status: "active" },
        ],
        encryptionKey: { keyId: "enc-1", publicKey: "D".repeat(43) },
      },
    );
    expect(directoryEntry(rotated)).toEqual({
      agentId: "r-id",
      url: "https://r.example",
      keys: [
        { keyId: "key-1", publicKey: KEY, status: "retired" },
        { keyId: "key-1-r2", publicKey: "C".repeat(43), status: "active" },
      ],
      encryptionKeys: [{ keyId: "enc-1", publicKey: "D".repeat(43), status: "active" }],
      temperature: "cool",
    });
  });

  it("adds to spec.peers only agent ids it does not name", () => {
    expect(
      withDirectoryPeers(
        [{ agentId: "a", n: 1 }],
        [
          { agentId: "a", n: 2 },
          { agentId: "b", n: 3 },
        ],
      ),
    ).toEqual([
      { agentId: "a", n: 1 },
      { agentId: "b", n: 3 },
    ]);
  });
});

describe("the agent ids the directory vouches for", () => {
  const at = { namespace: "team", name: "shop" };
  const own = generateSigningKey().publicKey;
  const other = generateSigningKey().publicKey;

  it("an https id only for one of the Agent's own Service names or a host the install allows its namespace", () => {
    expect(agentIdClaim("https://shop.team.svc", at, own, {}).vouched).toBe(true);
    expect(agentIdClaim("https://SHOP.team.svc.cluster.local:8443/x", at, own, {}).vouched).toBe(true);
    const refused = agentIdClaim("https://partner.example.com", at, own, {});
    expect(refused).toEqual({
      vouched: false,
      message:
        "spec.agentId https://partner.example.com names the host partner.example.com, which is neither a name of this Agent's Service (shop, shop.team, shop.team.svc, shop.team.svc.cluster.local) nor allowed for namespace team: the directory lists this Agent for no other Agent (spec.peerSelector); it runs for itself; the operator's --allowed-hosts team/partner.example.com (chart value allowedHosts: {team: [partner.example.com]}) or --allowed-dns-names (chart value allowedDnsNames) allows it",
    });
    // Another Agent's Service, and the host of a baseUrl the Agent chose, are not its own.
    expect(agentIdClaim("https://bob.team.svc", at, own, {}).vouched).toBe(false);
    expect(agentIdClaim("HTTPS://partner.example.com", at, own, {}).vouched).toBe(false);
    expect(
      agentIdClaim("https://partner.example.com", at, own, { allowedHosts: { team: ["partner.example.com"] } }).vouched,
    ).toBe(true);
    expect(
      agentIdClaim("https://a.partner.example.com", at, own, { allowedHosts: { team: ["*.partner.example.com"] } })
        .vouched,
    ).toBe(true);
    expect(
      agentIdClaim("https://partner.example.com", at, own, { allowedHosts: { elsewhere: ["partner.example.com"] } })
        .vouched,
    ).toBe(false);
    expect(agentIdClaim("https://partner.example.com", at, own, { allowedDnsNames: ["*.example.com"] }).vouched).toBe(
      true,
    );
  });

  it("a did:key only when it is the Agent's active signing key", () => {
    expect(agentIdClaim(didKeyFromPublicKey(own), at, own, {}).vouched).toBe(true);
    const foreign = agentIdClaim(didKeyFromPublicKey(other), at, own, {});
    expect(foreign.vouched).toBe(false);
    expect(foreign.message).toMatch(
      new RegExp(
        `is the Ed25519 key ${other}, not this Agent's active signing key ${own}: the directory lists this Agent for no other Agent`,
      ),
    );
    expect(agentIdClaim(didKeyFromPublicKey(own), at, undefined, {}).message).toMatch(/signing key is not known yet/);
    expect(agentIdClaim("did:key:zNotBase58!", at, own, {}).vouched).toBe(false);
    // Allow-lists say nothing about a did:key.
    expect(agentIdClaim(didKeyFromPublicKey(other), at, own, { allowedDnsNames: ["*"] }).vouched).toBe(false);
  });

  it("any other id: a name of the install, which one Agent holds", () => {
    expect(agentIdClaim("shop-agent", at, own, {}).vouched).toBe(true);
    expect(agentIdClaim("http://partner.example.com", at, own, {}).vouched).toBe(true);
  });

  it("leaves out of every directory an Agent whose id it does not vouch for, whatever its own status says", () => {
    const self = agent("home", "hub", { mesh: "on" });
    const claimant = (agentId: string, publicKey = KEY, ns = "home", name = "tenant") => {
      const a = agent(
        ns,
        name,
        { mesh: "on" },
        {
          endpoint: `https://${name}.${ns}.svc`,
          signingKey: { keyId: "k", publicKey, secretName: "s" },
          conditions: [{ type: "DirectoryListed", status: "True", reason: "AgentIdVouched" }],
        },
      );
      a.spec = { agentId };
      return a;
    };
    const sel = { agentSelector: { matchLabels: { mesh: "on" } } };
    const ids = (agents: CustomObject[], lists = {}) =>
      selectedPeers(self, sel, [self, ...agents], () => undefined, lists).map((p) => p.agentId);
    expect(ids([claimant("https://partner.example.com")])).toEqual([]);
    expect(ids([claimant("https://partner.example.com")], { allowedHosts: { home: ["partner.example.com"] } })).toEqual(
      ["https://partner.example.com"],
    );
    expect(ids([claimant("https://tenant.home.svc")])).toEqual(["https://tenant.home.svc"]);
    expect(ids([claimant(didKeyFromPublicKey(other), own)])).toEqual([]);
    expect(ids([claimant(didKeyFromPublicKey(own), own)])).toEqual([didKeyFromPublicKey(own)]);
    // During a rotation the id must be the active key, not a retired one the status lists beside it.
    const rotated = claimant(didKeyFromPublicKey(own), own);
    rotated.status = {
      ...rotated.status,
      signingKeys: [
        { keyId: "k", publicKey: own, status: "retired" },
        { keyId: "k2", publicKey: other, status: "active" },
      ],
    };
    expect(ids([rotated])).toEqual([]);
  });
});
