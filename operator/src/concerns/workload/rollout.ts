// Gradual rollouts: when the operator itself changes the runtime pods of many Agents at once (a
// new runtime image after a chart upgrade, a changed flag), at most `max` Agents have their
// Deployment changed and not yet available at a time; the others wait their turn. An Agent
// whose own spec changed is never held back (its user asked for that change), but it counts.
import type { DeploymentLike } from "../../reconcile/conditions.ts";

/** --max-rolling-agents: a number of Agents, or a percentage of all Agents (rounded up, at least one). */
export type RolloutLimit = { count: number } | { percent: number };

export const DEFAULT_ROLLOUT_LIMIT = "25%";

export function parseRolloutLimit(text: string): RolloutLimit {
  const m = /^(\d{1,6})(%?)$/.exec(text.trim());
  const n = m ? Number(m[1]) : NaN;
  if (!m || n < 1 || (m[2] && n > 100))
    throw new Error(
      `takes a number of Agents (at least 1) or a percentage from 1% to 100%, not ${JSON.stringify(text)}`,
    );
  return m[2] ? { percent: n } : { count: n };
}

export function resolveRolloutLimit(limit: RolloutLimit, agents: number): number {
  return "count" in limit ? limit.count : Math.max(1, Math.ceil((agents * limit.percent) / 100));
}

/**
 * A Deployment whose rollout is over: the Deployment controller observed its generation, every
 * wanted replica runs the current template and is available, and no old pod is left.
 */
export function rolloutSettled(dep: DeploymentLike | undefined): boolean {
  if (!dep) return true;
  const want = dep.spec?.replicas ?? 1;
  const s = dep.status ?? {};
  return (
    (s.observedGeneration ?? 0) >= (dep.metadata?.generation ?? 0) &&
    (s.updatedReplicas ?? 0) >= want &&
    (s.availableReplicas ?? 0) >= want &&
    (s.replicas ?? 0) <= want
  );
}

export type Admission = { ok: true } | { ok: false; rolling: number; max: number };

/**
 * Which Agents may change their Deployment now. Kept in memory: after an operator restart the
 * first `max` Agents to ask are admitted, and Agents already rolling settle on their own.
 */
export class RolloutGate {
  private readonly limit: RolloutLimit;
  /** Rolling Agents, with their Deployment's generation before the change. */
  private readonly rolling = new Map<string, number>();

  constructor(limit: RolloutLimit) {
    this.limit = limit;
  }

  /**
   * Forget the Agents whose Deployment is gone, or settled at a generation past the one it had
   * before the change (a cache that has not yet seen the change does not free the place).
   */
  private prune(deploymentOf: (key: string) => DeploymentLike | undefined): void {
    for (const [key, before] of this.rolling) {
      const dep = deploymentOf(key);
      if (!dep || ((dep.metadata?.generation ?? 0) > before && rolloutSettled(dep))) this.rolling.delete(key);
    }
  }

  /**
   * May `key` change its Deployment (now at `current`) now? `forced`: the change comes from the
   * Agent's own spec, and goes ahead whatever the count (but takes a place until it settles).
   */
  admit(
    key: string,
    current: DeploymentLike,
    opts: { agents: number; forced: boolean; deploymentOf: (key: string) => DeploymentLike | undefined },
  ): Admission {
    this.prune(opts.deploymentOf);
    const max = resolveRolloutLimit(this.limit, opts.agents);
    if (this.rolling.has(key) || opts.forced || this.rolling.size < max) {
      if (!this.rolling.has(key)) this.rolling.set(key, current.metadata?.generation ?? 0);
      return { ok: true };
    }
    return { ok: false, rolling: this.rolling.size, max };
  }

  forget(key: string): void {
    this.rolling.delete(key);
  }

  get size(): number {
    return this.rolling.size;
  }
}
