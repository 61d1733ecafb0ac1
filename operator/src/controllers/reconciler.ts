// The I/O shell shared by the Agent and Relay controllers: context, status writes, errors.
import type { KubernetesObject } from "@kubernetes/client-node";
import type { CredentialIssuer } from "../nats-credentials.ts";
import type { NatsAccounts } from "../nats-accounts.ts";
import type { Logger } from "pino";
import type { Nats } from "../../../runtime/src/nats/connection.ts";
import type { Deletions } from "./finalizers.ts";
import type { RolloutGate } from "./rollout.ts";
import type { SummaryCollector } from "./summary.ts";
import { ChildConflictError } from "../kube/apply.ts";
import type { Caches } from "../kube/caches.ts";
import { errorMessage, isStatus, type Kube } from "../kube/client.ts";
import type { ReconcileResult } from "../kube/controller.ts";
import { releaseSharedRuntimeAccess } from "./shared.ts";
import { isSubset } from "../kube/subset.ts";
import { mergeConditions, type Condition, type ConditionInput } from "./conditions.ts";
import type { OperatorSettings } from "./runtime.ts";
import type { InstallTrust } from "./trust.ts";
import type { NamespaceLabels } from "./agent/directory.ts";

/** What a reconcile needs around it; the controllers are the pure parts plus this shell. */
export interface ReconcileContext {
  kube: Kube;
  caches: Caches;
  settings: OperatorSettings;
  log: Logger;
  /** The install CA and the CAs every trust bundle holds. */
  trust: InstallTrust;
  /** Issues each runtime's own NATS credential (nats-creds.ts); absent when the operator was given no account. */
  natsIssuer?: CredentialIssuer;
  /** The operator's own NATS connection (relay streams, a deleted Agent's streams); absent without --nats-url. */
  nats?: Nats;
  /**
   * One NATS account per runtime: made, deleted and reached through this (nats-accounts.ts);
   * absent in the one-account model (no operator and system keys, or no --nats-url).
   */
  natsAccounts?: NatsAccounts;
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
  /** The traffic summaries read from NATS (summary.ts); absent without NATS. */
  summaries?: Pick<SummaryCollector, "get">;
  /** What this pass did, recorded as one Normal Event at its end (withNotes); absent: each at once. */
  notes?: Note[];
}

/** One thing a pass did (generated a key, issued a certificate, applied children), for its Event. */
export interface Note {
  reason: string;
  message: string;
}

/** The context of one pass: its Normal Events are collected and recorded by recordNotes. */
export function withNotes(ctx: ReconcileContext): ReconcileContext & { notes: Note[] } {
  return { ...ctx, notes: [] };
}

/** Note what the pass did: kept for the pass's one Event, or recorded at once outside a pass. */
export async function note(ctx: ReconcileContext, obj: CustomObject, reason: string, message: string): Promise<void> {
  if (ctx.notes) ctx.notes.push({ reason, message });
  else await ctx.kube.event(obj, "Normal", reason, message);
}

/**
 * The pass's notes as one Normal Event: the reason of the first (a pass generates keys, then
 * issues certificates, then applies children, so the first is the weightiest), the messages of
 * all joined by "; ". Nothing when the pass did nothing; the notes are cleared.
 */
export async function recordNotes(ctx: ReconcileContext, obj: CustomObject): Promise<void> {
  const notes = ctx.notes?.splice(0) ?? [];
  if (!notes.length) return;
  await ctx.kube.event(obj, "Normal", notes[0]!.reason, notes.map((n) => n.message).join("; "));
}

export type CustomObject = KubernetesObject & { spec?: unknown; status?: Record<string, unknown> };

/** The earliest of several requeue times. */
export function earliest(...ms: (number | undefined)[]): number | undefined {
  const xs = ms.filter((m): m is number => typeof m === "number" && m > 0);
  return xs.length ? Math.min(...xs) : undefined;
}

/**
 * Write status through /status when it differs from what the object holds; conditions keep
 * their transition times unless their status flips. Returns whether it wrote.
 */
export async function writeStatus(
  ctx: ReconcileContext,
  plural: string,
  obj: CustomObject,
  fields: Record<string, unknown>,
  conditions: ConditionInput[],
): Promise<boolean> {
  const generation = obj.metadata?.generation ?? 0;
  const previous = (obj.status?.conditions as Condition[] | undefined) ?? [];
  // The traffic summary as last sampled; until a first sample, what status already holds.
  const kind = plural === "agents" ? "Agent" : "Relay";
  const summary =
    ctx.summaries?.get(kind, obj.metadata?.namespace ?? "", obj.metadata?.name ?? "") ?? obj.status?.summary;
  const next = JSON.parse(
    JSON.stringify({
      ...fields,
      ...(summary ? { summary } : {}),
      observedGeneration: generation,
      conditions: mergeConditions(previous, conditions, generation, new Date()),
    }),
  ) as Record<string, unknown>;
  if (obj.status && isSubset(next, obj.status) && isSubset(obj.status, next)) return false;
  await ctx.kube.replaceStatus(plural, { ...obj, status: next });
  return true;
}

/** The status fields other than conditions, to keep when only the conditions change. */
export function previousFields(obj: CustomObject): Record<string, unknown> {
  const { conditions: _c, observedGeneration: _g, ...rest } = obj.status ?? {};
  return rest;
}

/**
 * Errors by kind: a child name taken by someone else is reported and looked at again later;
 * a conflict (stale cache) is retried quietly by the queue; anything else is reported as
 * Ready=False ReconcileFailed (never hidden behind an old Ready=True) and backed off.
 */
export async function reportFailure(
  ctx: ReconcileContext,
  plural: string,
  obj: CustomObject,
  err: unknown,
): Promise<ReconcileResult> {
  if (isStatus(err, 409)) throw err;
  if (err instanceof ChildConflictError) {
    const changed = await writeStatus(ctx, plural, obj, previousFields(obj), [
      { type: "Ready", status: "False", reason: err.reason, message: err.message },
      { type: "Reconciling", status: "False", reason: err.reason, message: err.message },
      { type: "Stalled", status: "True", reason: err.reason, message: err.message },
    ]);
    if (changed) await ctx.kube.event(obj, "Warning", err.reason, err.message);
    // The other object is not watched (not ours): look again soon.
    return { requeueAfterMs: 10_000 };
  }
  const message = errorMessage(err);
  try {
    const changed = await writeStatus(ctx, plural, obj, previousFields(obj), [
      { type: "Ready", status: "False", reason: "ReconcileFailed", message },
      { type: "Reconciling", status: "True", reason: "ReconcileFailed", message: `retrying: ${message}` },
      { type: "Stalled", status: "False", reason: "Retrying", message: "" },
    ]);
    if (changed) await ctx.kube.event(obj, "Warning", "ReconcileFailed", message);
  } catch (statusErr) {
    ctx.log.debug({ err: errorMessage(statusErr) }, "could not report the failure in status");
  }
  throw err;
}

/**
 * One reconcile of an Agent or Relay: gone, the namespace's shared runtime access of an earlier
 * version goes once no runtime runs under it (shared.ts); there, `pass` runs with its Normal Events collected into one
 * (recordNotes), Warnings recorded at once.
 */
export async function reconcileResource(
  kind: "Agent" | "Relay",
  shared: ReconcileContext,
  namespace: string,
  name: string,
  pass: (ctx: ReconcileContext, obj: CustomObject) => Promise<ReconcileResult>,
): Promise<ReconcileResult> {
  const obj = shared.caches.get<CustomObject>(kind, namespace, name);
  if (!obj) {
    const released = await releaseSharedRuntimeAccess(shared, kind, namespace);
    if (released.length)
      shared.log.info(
        { namespace, deleted: released },
        `Deleted the namespace's shared ${kind.toLowerCase()} runtime access of an earlier version (${released.join(", ")}): no runtime runs under it any more`,
      );
    return {};
  }
  const ctx = withNotes(shared);
  try {
    return await pass(ctx, obj);
  } finally {
    await recordNotes(ctx, obj);
  }
}
