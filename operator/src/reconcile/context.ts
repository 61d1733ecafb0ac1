// What a reconcile pass runs in: the context the manager hands every controller, and the shape
// of an Agent or Relay as the informer holds it. Types only: it depends on no controller module
// that could depend on it.
import type { KubernetesObject } from "@kubernetes/client-node";
import type { Logger } from "pino";
import type { Nats } from "../../../runtime/src/nats/connection.ts";
import type { Caches } from "../kube/caches.ts";
import type { Kube } from "../kube/client.ts";
import type { NatsAccounts } from "../concerns/nats/accounts.ts";
import type { DataAccounts } from "../concerns/nats/data-accounts.ts";
import type { CredentialIssuer } from "../concerns/nats/credential-issuer.ts";
import type { Deletions } from "./finalizers.ts";
import type { NamespaceLabels } from "../kube/namespace-labels.ts";
import type { RolloutGate } from "../concerns/workload/rollout.ts";
import type { OperatorSettings } from "./settings.ts";
import type { SummaryCollector } from "../concerns/nats/traffic-summary.ts";
import type { InstallTrust } from "../concerns/tls/trust.ts";

/** What a reconcile needs around it; the controllers are the pure parts plus this shell. */
export interface ReconcileContext {
  kube: Kube;
  caches: Caches;
  settings: OperatorSettings;
  log: Logger;
  /** The install CA and the CAs every trust bundle holds. */
  trust: InstallTrust;
  /** Issues each runtime's own NATS credential (concerns/nats/credential-part.ts); absent when the operator was given no account. */
  natsIssuer?: CredentialIssuer;
  /** The operator's own NATS connection (relay streams, a deleted Agent's streams); absent without --nats-url. */
  nats?: Nats;
  /**
   * One NATS account per runtime: made, deleted and reached through this (concerns/nats/accounts.ts);
   * absent in the one-account model (no operator and system keys, or no --nats-url).
   */
  natsAccounts?: NatsAccounts;
  /**
   * The tenants' data accounts and the Agents' consumers there (concerns/nats/data-accounts.ts): present
   * only on an install of the isolated layout (--nats-layout isolated).
   */
  dataAccounts?: DataAccounts;
  /** When each resource was first seen being deleted, and how long a finalizer waits for NATS. */
  deletions: Deletions;
  /** How many Agents may have their Deployment changed by the operator at once. */
  rollouts?: RolloutGate;
  /**
   * The Agent (uid) this process last rendered under each agent id: its claim holds from that
   * moment, before its status (which a restarted operator goes by) reaches the cache.
   */
  agentIds?: Map<string, string>;
  /** Namespaces' labels, for spec.peerSelector.namespaceSelector. */
  namespaceLabels?: NamespaceLabels;
  /** The traffic summaries read from NATS (concerns/nats/traffic-summary.ts); absent without NATS. */
  summaries?: Pick<SummaryCollector, "get">;
  /** What this pass did, recorded as one Normal Event at its end (pipeline.ts withNotes); absent: each at once. */
  notes?: Note[];
}

/**
 * What a pass may do, most significant first: the pass's one Normal Event takes the first of
 * these among what it did (pipeline.ts recordNotes), whatever order its parts ran in. A change
 * of the agent's identity, then its other secrets and the relay's stream, then certificates,
 * then children deleted, then children applied.
 */
export const NOTE_REASONS = [
  "RevokedSigningKey",
  "RotatedSigningKey",
  "GeneratedSigningKey",
  "MarkedSigningKey",
  "GeneratedEncryptionKey",
  "StreamCreated",
  "StreamUpdated",
  "GeneratedLocalApiToken",
  "GeneratedHandoffSecret",
  "IssuedCertificate",
  "RenewedCertificate",
  "Deleted",
  "Applied",
] as const;
export type NoteReason = (typeof NOTE_REASONS)[number];

/** One thing a pass did (generated a key, issued a certificate, applied children), for its Event. */
export interface Note {
  reason: NoteReason;
  message: string;
}

/** An Agent or Relay as the informer holds it (custom objects stay plain JSON). */
export type CustomObject = KubernetesObject & { spec?: unknown; status?: Record<string, unknown> };
