// The operator as a directory (spec.peerSelector): the Agents of the install an Agent selects
// become peers in the manifest its runtime reads, with their current endpoints and public keys,
// so that agents of one install trust each other without copying keys by hand.
import { selectorMatches, type LabelSelector } from "../../../../runtime/src/resources/fields.ts";
import type { Agent } from "../../../../runtime/src/resources/agent.ts";
import type { AgentStatus } from "../../crd/status.ts";
import type { CustomObject } from "../../reconcile/context.ts";
import { didKeyPublicKey, isDidKey } from "../../../../runtime/src/protocol/did-key.ts";
import { canonicalHost } from "../../../../runtime/src/net/host-name.ts";
import { allowedHostsFor, dnsNameAllowed, hostAllowHint, type HostAllowLists } from "../../reconcile/references.ts";
import { serviceDnsNames } from "../../reconcile/names.ts";

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

/** Whether the install vouches for an Agent's claim to its agent id, and why (or why not). */
export type AgentIdClaim = { vouched: true; message: string } | { vouched: false; message: string };

/** The host of an https agent id, as the runtime reads one (identity.ts), else undefined. */
function httpsHost(agentId: string): string | undefined {
  try {
    const u = new URL(agentId);
    return u.protocol === "https:" ? u.hostname : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Whether the install vouches for the agent id an Agent (namespace/name) claims, given the key it
 * signs with (`activeKey`, raw base64url, as the operator generated or read it). An agent id that
 * carries authority outside the install must be backed by it: an https id only for a host the
 * install allows the namespace (one of the Agent's own Service names, --allowed-dns-names, the
 * namespace's --allowed-hosts), a did:key only when it is the Agent's signing key. Any other id
 * (a simple name) means something only inside the install, where one Agent holds it.
 */
export function agentIdClaim(
  agentId: string,
  agent: { namespace: string; name: string },
  activeKey: string | undefined,
  lists: HostAllowLists,
): AgentIdClaim {
  const unlisted = "the directory lists this Agent for no other Agent (spec.peerSelector); it runs for itself";
  const host = httpsHost(agentId);
  if (host !== undefined) {
    const own = serviceDnsNames({ kind: "Agent", metadata: { ...agent, uid: "" } });
    if (own.includes(canonicalHost(host)))
      return { vouched: true, message: `spec.agentId ${agentId} names this Agent's own Service` };
    const allowed = allowedHostsFor(agent.namespace, lists);
    if (dnsNameAllowed(host, allowed))
      return {
        vouched: true,
        message: `spec.agentId ${agentId} names a host the install allows namespace ${agent.namespace}`,
      };
    return {
      vouched: false,
      message: `spec.agentId ${agentId} names the host ${host}, which is neither a name of this Agent's Service (${own.join(", ")}) nor allowed for namespace ${agent.namespace}${allowed.length ? ` (${allowed.join(", ")})` : ""}: ${unlisted}; ${hostAllowHint(agent.namespace, host)}`,
    };
  }
  if (isDidKey(agentId)) {
    let key: string;
    try {
      key = didKeyPublicKey(agentId);
    } catch (err) {
      return {
        vouched: false,
        message: `spec.agentId ${agentId} is not an Ed25519 did:key (${(err as Error).message}): ${unlisted}`,
      };
    }
    if (activeKey === undefined)
      return {
        vouched: false,
        message: `spec.agentId ${agentId} is a did:key and this Agent's signing key is not known yet: ${unlisted}`,
      };
    if (key === activeKey)
      return { vouched: true, message: `spec.agentId ${agentId} is this Agent's active signing key` };
    return {
      vouched: false,
      message: `spec.agentId ${agentId} is the Ed25519 key ${key}, not this Agent's active signing key ${activeKey}: ${unlisted}; only an Agent whose signing Secret (spec.signing.secretName) holds that key's private key as signing.key may claim it`,
    };
  }
  return { vouched: true, message: `spec.agentId ${agentId} is a name of this install, held by one Agent` };
}

/** The active signing key an Agent's status publishes. */
export function activeSigningKey(status: AgentStatus | undefined): string | undefined {
  return status?.signingKeys?.find((k) => k.status === "active")?.publicKey ?? status?.signingKey?.publicKey;
}

/**
 * The peer entry the directory makes of one Agent: its agent id, endpoint and public keys as its
 * status publishes them (every signing key with its status, so that a retired key still verifies
 * during a rotation and a revoked one is refused with the reason), or undefined while it has
 * none to publish.
 */
export function directoryEntry(o: CustomObject, lists: HostAllowLists = {}): PeerInput | undefined {
  const agentId = (o.spec as { agentId?: unknown } | undefined)?.agentId;
  const status = o.status as AgentStatus | undefined;
  if (typeof agentId !== "string" || !status?.endpoint || refusedAsDuplicate(o)) return undefined;
  // Never an agent id the install does not vouch for: checked here, from the spec and the key
  // the operator published, whatever the claimant's own condition says.
  const { namespace, name } = o.metadata ?? {};
  if (!namespace || !name || !agentIdClaim(agentId, { namespace, name }, activeSigningKey(status), lists).vouched)
    return undefined;
  const keys = status.signingKeys?.length
    ? status.signingKeys.map((k) => ({ keyId: k.keyId, publicKey: k.publicKey, status: k.status }))
    : status.signingKey
      ? [{ keyId: status.signingKey.keyId, publicKey: status.signingKey.publicKey, status: "active" as const }]
      : [];
  if (!keys.length) return undefined;
  const encryptionKeys = status.encryptionKey
    ? [{ keyId: status.encryptionKey.keyId, publicKey: status.encryptionKey.publicKey, status: "active" as const }]
    : [];
  return { agentId, url: status.endpoint, keys, encryptionKeys, temperature: "cool" };
}

/**
 * The peers `self` selects among `agents` (the Agents the operator watches): by label, in its own
 * namespace or those whose labels the namespace selector matches; never itself, one being
 * deleted, one refused for its agent id, or one whose agent id the install does not vouch for
 * (agentIdClaim, with the install's allow-lists `lists`). Sorted by agent id so that the rendered
 * manifest is stable.
 */
export function selectedPeers(
  self: CustomObject,
  selector: PeerSelector,
  agents: CustomObject[],
  namespaceLabels: (namespace: string) => Record<string, string> | undefined,
  lists: HostAllowLists = {},
): PeerInput[] {
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
    const entry = directoryEntry(o, lists);
    if (entry) peers.push(entry);
  }
  return peers.sort((a, b) => (a.agentId < b.agentId ? -1 : a.agentId > b.agentId ? 1 : 0));
}

/** spec.peers as the runtime reads it: the Agent's own entries, then the directory's for agent ids they do not name. */
export function withDirectoryPeers<T extends { agentId: string }>(own: T[], directory: T[]): T[] {
  const named = new Set(own.map((p) => p.agentId));
  return [...own, ...directory.filter((p) => !named.has(p.agentId))];
}
