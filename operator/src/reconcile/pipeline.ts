// The one reconcile pipeline of the Agent and Relay controllers. A kind is a list of parts
// (part.ts), each of one concern — a signing key, the local API, TLS, the trust bundle, the NATS
// credential, the exposure, the workload, the relay's stream — with an ensure() that returns one
// outcome: what it applied, what blocks the resource, what it waits for, when to look again, and
// what it hands on. The pipeline checks a kind's part list once (each slot a part reads is filled
// by a part before it), runs the parts in order, lets the first blocked part's reason win, writes the
// status through the pure conditions module (only when it differs: a pass that changes nothing
// writes nothing), and owns the one finalizer that cleans a resource's JetStream data up and
// gives up after a bound.
import type { ZodType } from "zod";
import { describeIssues } from "../../../runtime/src/contract/issues.ts";
import { ChildConflictError } from "../kube/apply.ts";
import { errorMessage, isStatus } from "../kube/client.ts";
import type { ReconcileResult } from "../kube/controller.ts";
import { isSubset } from "../kube/subset.ts";
import {
  cleanupPendingConditions,
  invalidSpecConditions,
  isoSeconds,
  mergeConditions,
  type Blocker,
  type Condition,
  type ConditionInput,
} from "./conditions.ts";
import { NOTE_REASONS, type CustomObject, type Note, type NoteReason, type ReconcileContext } from "./context.ts";
import { setFinalizer } from "./finalizers.ts";
import type { AnyPart, Part, Pass, PassReport } from "./part.ts";
import type { Owner } from "./settings.ts";

/**
 * The parts as given, once each slot a part needs is provided by a part before it; throws
 * naming the first part that reads a slot no earlier part fills.
 */
export function checkPartOrder<
  L extends readonly { name: string; needs?: readonly string[]; provides?: readonly string[] }[],
>(parts: L): L {
  const filled = new Set<string>();
  for (const part of parts) {
    const missing = (part.needs ?? []).filter((slot) => !filled.has(slot));
    if (missing.length)
      throw new Error(
        `part ${part.name} needs ${missing.join(", ")}, which no part before it provides (parts: ${parts.map((p) => p.name).join(", ")})`,
      );
    for (const slot of part.provides ?? []) filled.add(slot);
  }
  return parts;
}

/** Run the parts in order; the first blocked part's reason wins, held parts are skipped, what each provides is handed on. */
export async function runParts<R, C>(ctx: C, pass: Pass<R>, parts: readonly AnyPart<R, C>[]): Promise<PassReport> {
  const out: PassReport = { applied: [], held: false, unsettled: false, ended: false };
  const requeues: (number | undefined)[] = [];
  for (const part of parts) {
    if (part.needsUnheld && out.held) continue;
    const o = await part.ensure(ctx, pass);
    Object.assign(pass.found, o.provides);
    out.applied.push(...(o.applied ?? []));
    if (o.blocked) {
      out.blocker ??= o.blocked;
      if (o.holds) out.held = true;
    }
    out.waiting ??= o.waiting;
    out.queued ??= o.queued;
    out.unsettled ||= !!o.unsettled;
    requeues.push(o.requeueAfterMs);
    if (o.ends) {
      out.ended = true;
      break;
    }
  }
  out.requeueAfterMs = earliest(...requeues);
  return out;
}

/**
 * What a kind of resource brings to the pipeline besides its parts (each kind's controller.ts);
 * C: the context of its passes, the pass's own and what its concerns declare (kinds/<kind>/context.ts).
 */
export interface Controller<R, F, C extends ReconcileContext = ReconcileContext> {
  kind: Owner["kind"];
  plural: "agents" | "relays";
  schema: ZodType<R>;
  /** The parts in the order they run (checkPartOrder); F: the slots they fill, for the status. */
  parts: readonly AnyPart<R, C>[];
  /** A resource of the kind that is gone: what goes with it beyond its owned children (nothing, by default). */
  gone?(ctx: C, namespace: string): Promise<void>;
  /** While being deleted: the cleanup its finalizer stands for. */
  cleanup: Cleanup<C>;
  /** When any part is blocked, look again after this at the latest (none: each part's own). */
  blockedRetryMs?: number;
  /** Pure: the status from the pass, and any Warnings of its own to record when it is written. */
  status(
    ctx: C,
    pass: Pass<R, Partial<F>>,
    report: PassReport,
  ): { status: Record<string, unknown>; conditions: ConditionInput[]; warnings?: Blocker[] };
}

/** When a pass that wrote children and left the status to the next pass looks again at the latest (watch events usually come first). */
export const STATUS_FOLLOW_UP_MS = 2_000;

/**
 * One reconcile of an Agent or Relay: gone, its kind's `gone` hook; being deleted, its
 * finalizer; otherwise the pass, with its Normal Events collected into one (recordNotes) and
 * Warnings recorded at once.
 */
export async function reconcile<R, F, C extends ReconcileContext>(
  c: Controller<R, F, C>,
  shared: C,
  namespace: string,
  name: string,
): Promise<ReconcileResult> {
  const obj = shared.caches.get<CustomObject>(c.kind, namespace, name);
  if (!obj) {
    await c.gone?.(shared, namespace);
    return {};
  }
  const ctx = withNotes(shared);
  try {
    if (obj.metadata?.deletionTimestamp) return await finalize(ctx, c.plural, obj, c.cleanup);
    return await runPass(ctx, c, obj);
  } finally {
    await recordNotes(ctx, obj);
  }
}

async function runPass<R, F, C extends ReconcileContext>(
  ctx: C,
  c: Controller<R, F, C>,
  obj: CustomObject,
): Promise<ReconcileResult> {
  const parsed = c.schema.safeParse(obj);
  if (!parsed.success) {
    const message = describeIssues(parsed.error);
    if (await writeStatus(ctx, c.plural, obj, previousFields(obj), invalidSpecConditions(message)))
      await ctx.kube.event(obj, "Warning", "InvalidSpec", message);
    return {};
  }
  const metadata = obj.metadata as unknown as Owner["metadata"];
  const pass: Pass<R, Partial<F>> = {
    obj,
    resource: { ...parsed.data, metadata },
    owner: { kind: c.kind, metadata },
    found: {},
  };
  try {
    const report = await runParts(ctx, pass, c.parts);
    if (report.ended && !report.blocker) return {};
    const requeueAfterMs = earliest(report.requeueAfterMs, report.blocker ? c.blockedRetryMs : undefined);
    // A pass that wrote children leaves the status to the pass their watch events bring, which
    // sees them in the cache: written now it would say only that they were applied, and be
    // replaced at once. Blocked, held or unsettled passes write theirs now; a later pass is due regardless.
    if (report.applied.length && !report.blocker && !report.queued && !report.unsettled)
      return { requeueAfterMs: earliest(requeueAfterMs, STATUS_FOLLOW_UP_MS) };
    const { status, conditions, warnings } = c.status(ctx, pass, report);
    await recordNotes(ctx, obj);
    const wrote = await writeStatus(ctx, c.plural, obj, status, conditions);
    // Warnings once per change of status, not once per retry.
    if (wrote)
      for (const w of [...(report.blocker ? [report.blocker] : []), ...(warnings ?? [])])
        await ctx.kube.event(obj, "Warning", w.reason, w.message);
    return { requeueAfterMs };
  } catch (err) {
    return await reportFailure(ctx, c.plural, obj, err);
  }
}

/** What a finalizer stands for: a cleanup of the resource's JetStream data through the operator's NATS connection. */
export interface Cleanup<C = ReconcileContext> {
  finalizer: string;
  /** Whether the resource's spec asks for its data to go with it (spec.retention). */
  wanted(obj: CustomObject): boolean;
  /** What it deletes, in words ("the agent's streams and buckets"). */
  what: string;
  /** Delete the data; returns what was deleted. */
  run(ctx: C, obj: CustomObject): Promise<string[]>;
  /** What stays when nothing cleans up, for the Warning. */
  leftovers(obj: CustomObject): string[];
  /** Forget what the process kept about the resource once it is let go. */
  forget?(ctx: C, obj: CustomObject): void;
}

/**
 * Whether this operator cleans the resource's data up: its spec asks for it, and the operator
 * has a NATS connection to do it with (without --nats-url it manages no streams, so a finalizer
 * would only hold the deletion for nothing).
 */
export function cleansUp(
  ctx: Pick<ReconcileContext, "nats">,
  cleanup: Pick<Cleanup, "wanted">,
  obj: CustomObject,
): boolean {
  return !!ctx.nats && cleanup.wanted(obj);
}

/** The part that puts the finalizer on while this operator cleans up and takes it off otherwise. */
export function finalizerPart<R>(
  cleanup: Pick<Cleanup, "finalizer" | "wanted">,
): Part<R, object, object, Pick<ReconcileContext, "kube" | "nats">> {
  return {
    name: "finalizer",
    async ensure(ctx, { obj }) {
      // The update brings the next pass.
      return (await setFinalizer(ctx.kube, obj, cleanup.finalizer, cleansUp(ctx, cleanup, obj))) ? { ends: true } : {};
    },
  };
}

/**
 * A resource being deleted: its data is deleted when it asks for that and this operator can,
 * then the finalizer goes. While NATS cannot be reached the resource waits, its status saying
 * what for and until when, at most the finalizer timeout of this process's clock; then the
 * finalizer goes anyway, with a Warning Event naming what was left behind. An operator without
 * NATS lets it go at once.
 */
export async function finalize<C extends ReconcileContext>(
  ctx: C,
  plural: string,
  obj: CustomObject,
  cleanup: Cleanup<C>,
): Promise<ReconcileResult> {
  if (!(obj.metadata?.finalizers ?? []).includes(cleanup.finalizer)) return {};
  const ref = `${obj.metadata?.namespace}/${obj.metadata?.name}`;
  if (cleanup.wanted(obj) && !ctx.nats) {
    const left = cleanup.leftovers(obj).join(", ");
    await ctx.kube.event(
      obj,
      "Warning",
      "CleanupSkipped",
      `the operator has no NATS connection (--nats-url), so it deletes nothing in JetStream; the ${obj.kind} goes and these stay, if they exist: ${left}`,
    );
    ctx.log.warn(
      { resource: ref, left },
      `no NATS connection: letting the ${obj.kind} go without deleting ${cleanup.what}`,
    );
  } else if (cleanup.wanted(obj)) {
    const failure = await tryCleanup(ctx, obj, cleanup);
    if (failure) {
      const left = ctx.deletions.left(obj);
      if (left > 0) {
        ctx.log.warn({ resource: ref, err: failure, giveUpInMs: left }, `waiting for NATS to delete ${cleanup.what}`);
        const until = isoSeconds(new Date(ctx.deletions.deadline(obj)));
        await writeStatus(
          ctx,
          plural,
          obj,
          previousFields(obj),
          cleanupPendingConditions(cleanup.what, failure, until),
        );
        return { requeueAfterMs: Math.min(10_000, left) };
      }
      const leftovers = cleanup.leftovers(obj).join(", ");
      await ctx.kube.event(
        obj,
        "Warning",
        "CleanupAbandoned",
        `could not delete ${cleanup.what} for ${Math.round(ctx.deletions.timeoutMs / 1000)}s (${failure}); the ${obj.kind} goes and these stay: ${leftovers}; delete them by hand`,
      );
      ctx.log.warn(
        { resource: ref, left: leftovers, err: failure },
        `gave up deleting ${cleanup.what}; letting the ${obj.kind} go`,
      );
    }
  }
  await setFinalizer(ctx.kube, obj, cleanup.finalizer, false);
  ctx.deletions.forget(obj);
  cleanup.forget?.(ctx, obj);
  return {};
}

/** The cleanup once; what kept it from succeeding, if anything. */
async function tryCleanup<C extends ReconcileContext>(
  ctx: C,
  obj: CustomObject,
  cleanup: Cleanup<C>,
): Promise<string | undefined> {
  if (!ctx.nats?.isConnected) return "the operator is not connected to NATS";
  try {
    const deleted = await cleanup.run(ctx, obj);
    if (deleted.length)
      ctx.log.info(
        { resource: `${obj.metadata?.namespace}/${obj.metadata?.name}`, deleted },
        `Deleted ${cleanup.what}`,
      );
    return undefined;
  } catch (err) {
    return errorMessage(err);
  }
}

/** The context of one pass: its Normal Events are collected and recorded by recordNotes. */
export function withNotes<C extends ReconcileContext>(ctx: C): C & { notes: Note[] } {
  return { ...ctx, notes: [] };
}

/** The part of the context that notes what a pass did (note). */
export type Noting = Pick<ReconcileContext, "kube" | "notes">;

/** Note what the pass did: kept for the pass's one Event, or recorded at once outside a pass. */
export async function note(ctx: Noting, obj: CustomObject, reason: NoteReason, message: string): Promise<void> {
  if (ctx.notes) ctx.notes.push({ reason, message });
  else await ctx.kube.event(obj, "Normal", reason, message);
}

/**
 * The pass's notes as one Normal Event: the reason of its most significant note (the first of
 * NOTE_REASONS among them, not the first the parts made), the messages of all in the order they
 * happened, joined by "; ". Nothing when the pass did nothing; the notes are cleared.
 */
export async function recordNotes(ctx: Noting, obj: CustomObject): Promise<void> {
  const notes = ctx.notes?.splice(0) ?? [];
  if (!notes.length) return;
  await ctx.kube.event(obj, "Normal", passReason(notes), notes.map((n) => n.message).join("; "));
}

/** The reason of a pass's one Normal Event: its most significant note's. */
export function passReason(notes: Note[]): NoteReason {
  const rank = (r: NoteReason) => NOTE_REASONS.indexOf(r);
  return notes.reduce((best, n) => (rank(n.reason) < rank(best) ? n.reason : best), notes[0]!.reason);
}

/** A slot the status reads that a part of every pass that reaches the status fills; throws, naming it, where none did. */
export function filled<F, K extends keyof F>(found: Partial<F>, slot: K): NonNullable<F[K]> {
  const value = found[slot];
  if (value === undefined || value === null) throw new Error(`no part of the pass filled ${String(slot)}`);
  return value as NonNullable<F[K]>;
}

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
