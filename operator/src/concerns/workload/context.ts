// What the workload concern needs of a pass's context beyond the pass's own (reconcile/context.ts):
// the gate that keeps the operator from changing many Agents' pods at once.
import type { RolloutGate } from "./rollout.ts";

export interface WorkloadContext {
  /** How many Agents may have their Deployment changed by the operator at once (rollout.ts). */
  rollouts?: RolloutGate;
}
