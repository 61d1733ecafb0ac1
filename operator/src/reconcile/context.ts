// What a reconcile pass runs in: the pass's own context (the clients, caches, settings, log, the
// finalizers' clock, the notes of the pass), and the shape of an Agent or Relay as the informer
// holds it. Types only, and of the pass alone: a concern declares the rest of what it needs in its
// own folder (concerns/tls/context.ts, concerns/nats/context.ts, concerns/workload/context.ts),
// and each kind's context is the pass's and its concerns' together (kinds/*/context.ts).
import type { KubernetesObject } from "@kubernetes/client-node";
import type { Logger } from "pino";
import type { Nats } from "../../../runtime/src/nats/connection.ts";
import type { Caches } from "../kube/caches.ts";
import type { Kube } from "../kube/client.ts";
import type { Deletions } from "./finalizers.ts";
import type { Owner, OperatorSettings } from "./settings.ts";

/** What every pass runs in, whatever its kind; a part is handed the slice of its kind's context it uses. */
export interface ReconcileContext {
  kube: Kube;
  caches: Caches;
  settings: OperatorSettings;
  log: Logger;
  /** The operator's own NATS connection (the finalizers' cleanup, relay streams); absent without --nats-url. */
  nats?: Nats;
  /** When each resource was first seen being deleted, and how long a finalizer waits for NATS. */
  deletions: Deletions;
  /** The traffic summaries the status carries (concerns/nats/traffic-summary.ts); absent without NATS. */
  summaries?: TrafficSummaries;
  /** What this pass did, recorded as one Normal Event at its end (pipeline.ts withNotes); absent: each at once. */
  notes?: Note[];
}

/** Where the pass reads status.summary from: the summary of a resource as last sampled, if any. */
export interface TrafficSummaries {
  get(kind: Owner["kind"], namespace: string, name: string): object | undefined;
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
