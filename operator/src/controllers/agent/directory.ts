// The operator as a directory (spec.peerSelector): the Agents of the install an Agent selects
// become peers in the manifest its runtime reads, with their current endpoints and public keys,
// so that agents of one install trust each other without copying keys by hand.
import type { Logger } from "pino";
import { selectorMatches, type LabelSelector } from "../../../../runtime/src/resources/common.ts";
import type { Agent } from "../../../../runtime/src/resources/agent.ts";
import type { AgentStatus } from "../../crd/status.ts";
import { isStatus, type Kube } from "../../kube/client.ts";
import type { CustomObject } from "../reconciler.ts";

type PeerInput = Agent["spec"]["peers"][number];
export interface PeerSelector {
  agentSelector: LabelSelector;
  namespaceSelector?: LabelSelector;
}

/** Whether an Agent's Ready condition refuses it as holding another's agent id. */
function refusedAsDuplicate(o: CustomObject): boolean {
  const conditions = (o.status?.conditions as { type: string; reason?: string }[] | undefined) ?? [];
  return conditions.some((c) => c.type === "Ready" && c.reason === "DuplicateAgentId");
}

/**
 * The peer entry the directory makes of one Agent: its agent id, endpoint and public keys as its
 * status publishes them (every signing key with its status, so that a retired key still verifies
 * during a rotation and a revoked one is refused with the reason), or undefined while it has
 * none to publish.
 */
export function directoryEntry(o: CustomObject): PeerInput | undefined {
  const agentId = (o.spec as { agentId?: unknown } | undefined)?.agentId;
  const status = o.status as AgentStatus | undefined;
  if (typeof agentId !== "string" || !status?.endpoint || refusedAsDuplicate(o)) return undefined;
  const keys = status.signingKeys?.length
    ? status.signingKeys.map((k) => ({ keyId: k.keyId, publicKey: k.publicKey, status: k.status }))
    : status.signingKey
      ? [{ keyId: status.signingKey.keyId, publicKey: status.signingKey.publicKey, status: "active" as const }]
      : [];
  if (!keys.length) return undefined;
  const encryptionKeys = status.encryptionKey ? [{ keyId: status.encryptionKey.keyId, publicKey: status.encryptionKey.publicKey, status: "active" as const }] : [];
  return { agentId, url: status.endpoint, keys, encryptionKeys, temperature: "cool" };
}

/**
 * The peers `self` selects among `agents` (the Agents the operator watches): by label, in its own
 * namespace or those whose labels the namespace selector matches; never itself, one being
 * deleted, or one refused for its agent id. Sorted by agent id so that the rendered manifest is
 * stable.
 */
export function selectedPeers(self: CustomObject, selector: PeerSelector, agents: CustomObject[], namespaceLabels: (namespace: string) => Record<string, string> | undefined): PeerInput[] {
  const ownNs = self.metadata?.namespace;
  const inNamespace = (ns: string | undefined): boolean => {
    if (!ns) return false;
    if (!selector.namespaceSelector) return ns === ownNs;
    return selectorMatches(selector.namespaceSelector, namespaceLabels(ns));
  };
  const peers: PeerInput[] = [];
  for (const o of agents) {
    if (o.metadata?.uid === self.metadata?.uid || o.metadata?.deletionTimestamp) continue;
    if (!inNamespace(o.metadata?.namespace) || !selectorMatches(selector.agentSelector, o.metadata?.labels)) continue;
    const entry = directoryEntry(o);
    if (entry) peers.push(entry);
  }
  return peers.sort((a, b) => (a.agentId < b.agentId ? -1 : a.agentId > b.agentId ? 1 : 0));
}

/** spec.peers as the runtime reads it: the Agent's own entries, then the directory's for agent ids they do not name. */
export function withDirectoryPeers<T extends { agentId: string }>(own: T[], directory: T[]): T[] {
  const named = new Set(own.map((p) => p.agentId));
  return [...own, ...directory.filter((p) => !named.has(p.agentId))];
}

/**
 * Namespaces' labels, read when a namespace selector needs them and kept for `ttlMs`; a
 * namespace that cannot be read (gone, or not granted) has only the label every namespace
 * carries, kubernetes.io/metadata.name.
 */
export class NamespaceLabels {
  private readonly known = new Map<string, { labels: Record<string, string>; at: number }>();
  private readonly kube: Kube;
  private readonly log: Logger;
  private readonly ttlMs: number;

  constructor(kube: Kube, log: Logger, ttlMs = 30_000) {
    this.kube = kube;
    this.log = log;
    this.ttlMs = ttlMs;
  }

  /** The labels of each namespace in `namespaces`, reading those not known or too old. */
  async load(namespaces: Iterable<string>, now = Date.now()): Promise<(namespace: string) => Record<string, string>> {
    for (const ns of new Set(namespaces)) {
      const k = this.known.get(ns);
      if (k && now - k.at < this.ttlMs) continue;
      let labels: Record<string, string> = { "kubernetes.io/metadata.name": ns };
      try {
        const obj = await this.kube.read("v1", "Namespace", "", ns);
        if (obj) labels = { ...obj.metadata?.labels, "kubernetes.io/metadata.name": ns };
      } catch (err) {
        if (!isStatus(err, 403)) throw err;
        if (!k) this.log.warn({ namespace: ns }, "may not read the namespace's labels; spec.peerSelector.namespaceSelector sees only kubernetes.io/metadata.name");
      }
      this.known.set(ns, { labels, at: now });
    }
    return (ns) => this.known.get(ns)?.labels ?? { "kubernetes.io/metadata.name": ns };
  }
}
