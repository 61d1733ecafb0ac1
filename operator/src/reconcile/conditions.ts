// Status conditions in the Kubernetes API conventions, and the pure rules that derive them from
// what a reconcile observed. kstatus (which Helm 4 and Flux use to wait) reads Ready, Reconciling
// and Stalled.
import { isoSeconds } from "../../../runtime/src/util/time.ts";
import { printable } from "../../../runtime/src/util/printable.ts";

/** A status condition in the Kubernetes API conventions. */
export interface Condition {
  type: string;
  status: "True" | "False" | "Unknown";
  reason: string;
  message: string;
  observedGeneration: number;
  lastTransitionTime: string;
}

export type ConditionInput = Omit<Condition, "lastTransitionTime" | "observedGeneration">;

export { isoSeconds };

/**
 * The new conditions, keeping each one's lastTransitionTime unless its status flipped; types
 * not given again are dropped. Messages carry names and errors from outside (a Secret's name, a
 * peer's answer, the API server's error): written printable (util/printable.ts).
 */
export function mergeConditions(
  previous: Condition[] | undefined,
  next: ConditionInput[],
  generation: number,
  now: Date,
): Condition[] {
  return next.map((c) => {
    const old = previous?.find((p) => p.type === c.type);
    return {
      ...c,
      message: printable(c.message),
      observedGeneration: generation,
      lastTransitionTime: old && old.status === c.status ? old.lastTransitionTime : isoSeconds(now),
    };
  });
}

/** The part of a Deployment the conditions read. */
export interface DeploymentLike {
  metadata?: { generation?: number };
  spec?: { replicas?: number };
  status?: {
    observedGeneration?: number;
    replicas?: number;
    updatedReplicas?: number;
    readyReplicas?: number;
    availableReplicas?: number;
    conditions?: { type: string; status: string; reason?: string; message?: string }[];
  };
}

/** Something that keeps the runtime from being set up; the user has to act. */
export interface Blocker {
  reason: string;
  message: string;
}

/** What one reconcile pass observed about a runtime's children. */
export interface RuntimeObservation {
  /** Children written in this pass ("Deployment/alice"). */
  applied: string[];
  /** The runtime Deployment as the informer last saw it. */
  deployment: DeploymentLike | undefined;
  /** A condition that stops the children from working (missing TLS Secret, no cert-manager …). */
  blocker?: Blocker;
  /** Something still settling that is not the Deployment (a certificate being issued …). */
  waiting?: Blocker;
  /** A change of the Deployment held back until other Agents' rollouts are over (concerns/workload/rollout.ts). */
  queued?: Blocker;
}

const cond = (type: string, status: Condition["status"], reason: string, message: string): ConditionInput => ({
  type,
  status,
  reason,
  message,
});

/** The stage a runtime has reached, from the observation; the conditions are a view of it. */
export type RuntimeStage =
  | { stage: "blocked"; reason: string; message: string }
  | { stage: "applying"; reason: string; message: string }
  | { stage: "waiting"; reason: string; message: string }
  | { stage: "stalled"; reason: string; message: string }
  | { stage: "ready"; reason: string; message: string };

export function runtimeStage(o: RuntimeObservation): RuntimeStage {
  if (o.blocker) return { stage: "blocked", ...o.blocker };
  if (o.applied.length)
    return { stage: "applying", reason: "ChildrenApplied", message: `applied ${o.applied.join(", ")}` };
  const dep = o.deployment;
  if (!dep)
    return {
      stage: "applying",
      reason: "DeploymentPending",
      message: "the runtime Deployment is not in the cache yet",
    };
  const generation = dep.metadata?.generation ?? 0;
  const observed = dep.status?.observedGeneration ?? 0;
  if (observed < generation) {
    return {
      stage: "applying",
      reason: "RolloutPending",
      message: `the Deployment controller has not yet observed generation ${generation} of the runtime Deployment`,
    };
  }
  const progressing = dep.status?.conditions?.find((c) => c.type === "Progressing");
  if (progressing?.status === "False" && progressing.reason === "ProgressDeadlineExceeded") {
    return {
      stage: "stalled",
      reason: "RolloutStalled",
      message: progressing.message ?? "the runtime Deployment exceeded its progress deadline",
    };
  }
  if (o.waiting) return { stage: "waiting", ...o.waiting };
  const want = dep.spec?.replicas ?? 1;
  const ready = dep.status?.readyReplicas ?? 0;
  const updated = dep.status?.updatedReplicas ?? 0;
  const total = dep.status?.replicas ?? 0;
  if (want === 0) {
    return total === 0
      ? { stage: "ready", reason: "ScaledToZero", message: "spec.replicas is 0" }
      : { stage: "waiting", reason: "ScalingDown", message: `${total} runtime replicas still running, 0 wanted` };
  }
  if (updated < want || total > want) {
    return {
      stage: "applying",
      reason: "RolloutInProgress",
      message: `${updated}/${want} runtime replicas at the current spec, ${total} in all`,
    };
  }
  if (ready < want)
    return { stage: "waiting", reason: "RuntimeNotReady", message: `${ready}/${want} runtime replicas ready` };
  return { stage: "ready", reason: "RuntimeReady", message: `${ready}/${want} runtime replicas ready` };
}

/**
 * Ready, Reconciling and Stalled of a runtime (Agent or Relay), in that order.
 *
 * - Ready=True: every child is applied and observed, and the Deployment has all wanted
 *   replicas updated and ready (or is scaled to zero and has none left).
 * - Reconciling=True: the operator or the Deployment controller is still moving toward the
 *   spec; its reason says what is awaited (`WaitingForRuntime` means the children are in
 *   place, observed by the Deployment controller, and the pods of the current spec exist:
 *   only their readiness is missing).
 * - Stalled=True: it cannot progress without a change by the user (missing Secret, no
 *   cert-manager, a rollout past its deadline).
 */
export function runtimeConditions(o: RuntimeObservation): ConditionInput[] {
  const s = runtimeStage(o);
  // A queued rollout: the runtime keeps running (and stays Ready) at its current spec meanwhile.
  if (o.queued && (s.stage === "ready" || s.stage === "waiting")) {
    return [
      s.stage === "ready" ? cond("Ready", "True", s.reason, s.message) : cond("Ready", "False", s.reason, s.message),
      cond("Reconciling", "True", o.queued.reason, o.queued.message),
      cond("Stalled", "False", "Progressing", ""),
    ];
  }
  switch (s.stage) {
    case "blocked":
    case "stalled":
      return [
        cond("Ready", "False", s.reason, s.message),
        cond("Reconciling", "False", s.reason, s.message),
        cond("Stalled", "True", s.reason, s.message),
      ];
    case "applying":
      return [
        cond("Ready", "False", s.reason, s.message),
        cond("Reconciling", "True", s.reason, s.message),
        cond("Stalled", "False", "Progressing", ""),
      ];
    case "waiting":
      return [
        cond("Ready", "False", s.reason, s.message),
        cond("Reconciling", "True", "WaitingForRuntime", `children applied and observed; ${s.message}`),
        cond("Stalled", "False", "Progressing", ""),
      ];
    case "ready":
      return [
        cond("Ready", "True", s.reason, s.message),
        cond("Reconciling", "False", "Reconciled", "children match the spec"),
        cond("Stalled", "False", "Reconciled", ""),
      ];
  }
}

/** The conditions of a spec that can never succeed as written: not retried until it changes. */
export function invalidSpecConditions(message: string): ConditionInput[] {
  return [
    cond("Ready", "False", "InvalidSpec", message),
    cond("Reconciling", "False", "InvalidSpec", message),
    cond("Stalled", "True", "InvalidSpec", message),
  ];
}

/**
 * The conditions of a resource being deleted while its finalizer waits for a cleanup this
 * operator does (its JetStream data): not Ready, reconciling, with what it waits for and when
 * the wait ends whatever happens.
 */
export function cleanupPendingConditions(what: string, failure: string, until: string): ConditionInput[] {
  const message = `deleting: waiting to delete ${what} (${failure}); the finalizer goes at ${until} at the latest`;
  return [
    cond("Ready", "False", "CleanupPending", message),
    cond("Reconciling", "True", "CleanupPending", message),
    cond("Stalled", "False", "CleanupPending", ""),
  ];
}
