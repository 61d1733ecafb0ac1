// The agent's published documents: the capability document and the identity document, built
// from the Agent (routes/documents.ts serves them under /.well-known), and the capability
// document's `updated` time, which every replica and restart agree on.
import { createHash } from "node:crypto";
import canonicalize from "canonicalize";
import type { Logger } from "pino";
import { ANNOTATIONS } from "../contract/annotations.ts";
import { capabilitiesHash, capabilityList } from "../contract/capabilities.ts";
import type { Agent } from "../resources/agent.ts";
import type { Nats } from "../nats/connection.ts";
import { ownBaseUrl } from "../net/own-base.ts";
import { etagOf, type CapabilityDocument, type IdentityDocument } from "../protocol/documents.ts";
import { isoSeconds } from "../util/time.ts";
import type { AgentNames } from "./names.ts";
import type { PublishedEncryptionKey, PublishedKey } from "../contract/signing-keys.ts";

/** IFP parts this runtime implements: formats 3/4, signing 5, HTTPS 6, discovery 7, relay client 8. */
export const IFP_SUPPORT = [3, 4, 5, 6, 7, 8];

export const WELL_KNOWN = "/.well-known/agent";
export const WELL_KNOWN_IFP = "/.well-known/iface";

export interface Served<T> {
  doc: T;
  etag: string;
}

export function buildCapabilityDocument(agent: Agent, updated: string): CapabilityDocument {
  return {
    ifp: 7,
    agent_id: agent.spec.agentId,
    capabilities: capabilityList(agent),
    ifp_support: IFP_SUPPORT,
    updated,
    ...(agent.spec.relay ? { relay: { urls: agent.spec.relay.urls, preference: agent.spec.relay.preference } } : {}),
  };
}

/**
 * Hash of everything a capability document says but its `updated` (SHA-256 of the canonical
 * JSON): the capabilities, the relays and their preference, ifp_support, the agent id. Any
 * change of it moves `updated`.
 */
/** What the agents bucket records of the capability document (syncUpdated()). */
interface RecordedDocument {
  /** capabilitiesHash(): the capability list's, which earlier releases recorded alone. */
  hash: string;
  document_hash?: string;
  updated: string;
  /** false while the recorded document's announcement on the agent's relays is not taken. */
  announced?: boolean;
  /** A change whose announcements are being queued: its document and `updated`. */
  pending?: { document_hash: string; updated: string };
}

export function capabilityDocumentHash(doc: CapabilityDocument): string {
  const { updated: _updated, ...said } = doc;
  return createHash("sha256")
    .update(canonicalize(said) ?? "")
    .digest("hex");
}

/** The agent's one encryption key, as a manifest without a key set gives it (docs/encryption.md). */
export interface OneEncryptionKey {
  keyId: string;
  publicKey: string;
  created: string;
}

export function buildIdentityDocument(
  agent: Agent,
  publicKey: string | readonly PublishedKey[],
  keyCreated: string,
  baseUrl: string | undefined,
  encryptionKey?: OneEncryptionKey | readonly PublishedEncryptionKey[],
): IdentityDocument {
  const base = (agent.spec.baseUrl ?? baseUrl)?.replace(/\/+$/, "");
  return {
    ifp: 5,
    agent_id: agent.spec.agentId,
    ...(agent.spec.displayName ? { display: agent.spec.displayName } : {}),
    keys: [
      ...(typeof publicKey === "string"
        ? [
            {
              key_id: agent.spec.signing.keyId,
              type: "ed25519",
              public_key: publicKey,
              created: keyCreated,
              status: "active" as const,
            },
          ]
        : publicKey.map((k) => ({ ...k }))),
      ...(encryptionKey === undefined
        ? []
        : "keyId" in encryptionKey
          ? [
              {
                key_id: encryptionKey.keyId,
                type: "x25519",
                use: "encryption",
                public_key: encryptionKey.publicKey,
                created: encryptionKey.created,
                status: "active" as const,
              },
            ]
          : encryptionKey.map((k) => ({ ...k }))),
    ],
    ...(base
      ? {
          endpoints: {
            inbox: `${base}${WELL_KNOWN}/inbox`,
            capabilities: `${base}${WELL_KNOWN}/capabilities`,
            identity: `${base}${WELL_KNOWN}/identity`,
          },
        }
      : {}),
    ...(agent.spec.relay ? { relay: { urls: agent.spec.relay.urls, preference: agent.spec.relay.preference } } : {}),
  };
}

/**
 * The agent's published documents. `updated` is the time the capability document last changed
 * (any of what it says, not only its capability list): taken from the manifest's annotation
 * when the operator set it, otherwise remembered in a NATS KV bucket by the document's hash, so
 * every replica and every restart agree on it.
 */
export class Documents {
  private readonly agent: Agent;
  private readonly publicKey: string | readonly PublishedKey[];
  private readonly keyCreated: string;
  private readonly encryptionKey: OneEncryptionKey | readonly PublishedEncryptionKey[] | undefined;
  private capabilities: Served<CapabilityDocument>;
  private readonly identities = new Map<string, Served<IdentityDocument>>();
  /** capabilityDocumentHash() of the document: what moves `updated`. */
  readonly hash: string;
  /** The capability list's hash alone, the record's `hash`: what a record without `document_hash` is matched by. */
  private readonly listHash: string;
  /** When this runtime started: the `updated` of a document it finds changed. */
  private readonly startedAt: string;
  /** The ifp.dev/capabilities-updated annotation: the earliest `updated` the document may carry. */
  private readonly annotated: string | undefined;

  /** `publicKey`: the one active key, or every key of a rotated key set. */
  constructor(
    agent: Agent,
    publicKey: string | readonly PublishedKey[],
    keyCreated: string,
    started = new Date(),
    encryptionKey?: OneEncryptionKey | readonly PublishedEncryptionKey[],
  ) {
    this.agent = agent;
    this.encryptionKey = encryptionKey;
    this.publicKey = publicKey;
    this.keyCreated = keyCreated;
    this.listHash = capabilitiesHash(agent);
    this.startedAt = isoSeconds(started);
    this.annotated = agent.metadata.annotations?.[ANNOTATIONS.capabilitiesUpdated];
    this.capabilities = this.serve(buildCapabilityDocument(agent, this.annotated ?? this.startedAt));
    this.hash = capabilityDocumentHash(this.capabilities.doc);
  }

  get capabilityDocument(): Served<CapabilityDocument> {
    return this.capabilities;
  }

  /** Whether the identity document depends on the request's Host (no spec.baseUrl). */
  get identityFromHost(): boolean {
    return !this.agent.spec.baseUrl;
  }

  /**
   * The identity document for a request with Host `host`; its endpoints name ownBaseUrl():
   * spec.baseUrl, else the Host when it is one of the agent's own names, else its Service URL.
   */
  identity(host: string | undefined): Served<IdentityDocument> {
    const base = ownBaseUrl(this.agent, host);
    let served = this.identities.get(base);
    if (!served) {
      // Any port of an own name is one: the cache stays bounded.
      if (this.identities.size > 64) this.identities.clear();
      served = this.serve(buildIdentityDocument(this.agent, this.publicKey, this.keyCreated, base, this.encryptionKey));
      this.identities.set(base, served);
    }
    return served;
  }

  /**
   * Agree with the other replicas on `updated` through the KV bucket. True when the document
   * is to be announced on the agent's relays: this runtime found it changed, or found it
   * recorded with its announcement not yet taken (a runtime stopped before a relay took it).
   *
   * A change is made in three writes, so that a crash at any point loses nothing and sends
   * nothing twice: the new `updated` is first written beside the old document as `pending`;
   * `beforeRecord` then runs (it queues the peers' announcements, whose ids derive from that
   * `updated`); last the document's hash is recorded, with `announced: false` when the agent
   * has relays to announce it on (markAnnounced() clears it). A start that finds a `pending` for
   * its own document takes its `updated`, so what it queues again is what was queued before.
   * The ifp.dev/capabilities-updated annotation is a floor: `updated` is never earlier than it,
   * and moves on with a later change of the document.
   */
  async syncUpdated(
    nats: Nats,
    names: AgentNames,
    log: Logger,
    beforeRecord: () => Promise<void> = async () => {},
  ): Promise<boolean> {
    const kv = await nats.bucket(names.kvBucket, { history: 1 });
    const key = `${names.kvKey}.capabilities`;
    for (let attempt = 0; attempt < 5; attempt++) {
      const entry = await kv.get(key);
      const stored = entry?.value.length ? (entry.json() as RecordedDocument) : undefined;
      if (stored?.document_hash === this.hash) {
        this.setUpdated(this.notBeforeAnnotation(stored.updated));
        return stored.announced === false;
      }
      // Written by a release that hashed the capability list alone: the same list keeps its
      // `updated` (nothing is known of the rest of what that document said), and the document's
      // hash is recorded from now on.
      const adopt = stored !== undefined && stored.document_hash === undefined && stored.hash === this.listHash;
      const changed = entry !== null && entry !== undefined && !adopt;
      const resumed = changed && stored?.pending?.document_hash === this.hash ? stored.pending.updated : undefined;
      const updated = adopt
        ? this.notBeforeAnnotation(stored.updated)
        : changed
          ? (resumed ?? this.notBeforeAnnotation(this.startedAt))
          : (this.annotated ?? this.startedAt);
      const announce = changed && !!this.agent.spec.relay?.urls.length;
      const value: RecordedDocument = {
        hash: this.listHash,
        document_hash: this.hash,
        updated,
        ...(announce ? { announced: false } : {}),
      };
      this.setUpdated(updated);
      let revision = entry?.revision ?? 0;
      if (changed && !resumed) {
        try {
          const pending = { ...stored, pending: { document_hash: this.hash, updated } };
          revision = await kv.update(key, JSON.stringify(pending), entry!.revision);
        } catch {
          continue; // Another replica wrote first; read its value.
        }
      }
      if (changed) await beforeRecord();
      try {
        if (entry) await kv.update(key, JSON.stringify(value), revision);
        else await kv.create(key, JSON.stringify(value));
        if (changed) log.info({ updated }, "capability document changed");
        return announce;
      } catch {
        // Another replica wrote first; read its value.
      }
    }
    return false;
  }

  /** The recorded document's announcement was taken by its relays (or refused for good). */
  async markAnnounced(nats: Nats, names: AgentNames): Promise<void> {
    const kv = await nats.bucket(names.kvBucket, { history: 1 });
    const key = `${names.kvKey}.capabilities`;
    const entry = await kv.get(key);
    const stored = entry?.value.length ? (entry.json() as RecordedDocument) : undefined;
    if (!entry || stored?.document_hash !== this.hash || stored.announced !== false) return;
    const { announced: _announced, ...rest } = stored;
    // A replica that wrote meanwhile recorded another change, or the same mark.
    await kv.update(key, JSON.stringify(rest), entry.revision).catch(() => {});
  }

  private notBeforeAnnotation(updated: string): string {
    return this.annotated && Date.parse(this.annotated) > Date.parse(updated) ? this.annotated : updated;
  }

  private setUpdated(updated: string): void {
    if (updated === this.capabilities.doc.updated) return;
    this.capabilities = this.serve({ ...this.capabilities.doc, updated });
  }

  private serve<T>(doc: T): Served<T> {
    return { doc, etag: etagOf(doc) };
  }
}
