// What a part of a reconcile pass is, what it returns and what it hands on: types only, the leaf
// every concern and kind builds its parts on. A part names the slots of the pass it reads
// (`needs`, filled by parts before it) and those it fills (`provides`); the pass checks that order
// once, when a kind's part list is built (pipeline.ts checkPartOrder), so no part reads a slot
// that only a later part fills.
import type { KubernetesObject } from "@kubernetes/client-node";
import type { Blocker } from "./conditions.ts";
import type { CustomObject, ReconcileContext } from "./context.ts";
import type { Owner } from "./settings.ts";

/** What one part did in a pass. Every field is optional: an empty outcome is "in place, nothing to do". */
export interface Outcome<P = object> {
  /** What it created, changed or deleted ("Kind/name"), for the status and the pass's Event. */
  applied?: string[];
  /** Why the resource cannot be Ready until the user acts; the first blocked part's reason wins. */
  blocked?: Blocker;
  /** While blocked, nothing that mounts what this part makes is rendered (the workload waits). */
  holds?: boolean;
  /** The pass ends at this part: it refused the resource (with `blocked`), or it wrote the resource itself and the update brings the next pass. */
  ends?: boolean;
  /** Something still settling that is not the Deployment (a certificate being issued). */
  waiting?: Blocker;
  /** A change of the Deployment held back until other rollouts are over (workload/rollout.ts). */
  queued?: Blocker;
  /** The part has not reached what it wants (the relay's stream): the status is written at once. */
  unsettled?: boolean;
  /** When to look again. */
  requeueAfterMs?: number;
  /** What it fills of the pass's slots (its `provides`), for the parts after it and the status. */
  provides?: P;
}

/** One reconcile pass of one resource: the object, its parsed form, and the slots the parts filled so far. */
export interface Pass<R, F = object> {
  obj: CustomObject;
  resource: R & { metadata: Owner["metadata"] };
  owner: Owner;
  found: F;
}

/**
 * One concern of a controller, over resources of shape R: it reads the slots N that parts before
 * it fill, fills the slots P, and is handed the part C of the context it uses.
 */
export interface Part<R, N = object, P = object, C = ReconcileContext> {
  readonly name: string;
  /** The slots of N it reads: a part before it must provide each. */
  readonly needs?: readonly (keyof N & string)[];
  /** The slots of P it fills. */
  readonly provides?: readonly (keyof P & string)[];
  /** Skipped while an earlier part holds the workload (it would render or mount what is not there). */
  readonly needsUnheld?: boolean;
  /** Pure: the objects this part renders for the pass as found so far, where it renders any. */
  desired?(ctx: C, pass: Pass<R, N>): KubernetesObject[];
  ensure(ctx: C, pass: Pass<R, N>): Promise<Outcome<P>>;
}

/** A part of any slots, as a kind's part list holds it: handed the kind's context C, of which it uses its slice. */
export interface AnyPart<R, C = ReconcileContext> {
  readonly name: string;
  readonly needs?: readonly string[];
  readonly provides?: readonly string[];
  readonly needsUnheld?: boolean;
  desired?(ctx: C, pass: Pass<R>): KubernetesObject[];
  ensure(ctx: C, pass: Pass<R>): Promise<Outcome>;
}

/** The parts' outcomes folded: what the status is computed from. */
export interface PassReport {
  applied: string[];
  blocker?: Blocker;
  held: boolean;
  waiting?: Blocker;
  queued?: Blocker;
  unsettled: boolean;
  ended: boolean;
  requeueAfterMs?: number;
}
