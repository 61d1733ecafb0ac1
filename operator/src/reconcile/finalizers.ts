// Finalizers that clean JetStream up with their resource and never hold a deletion for ever:
// the Agent's (its streams and KV buckets, unless spec.retention.keepOnDelete) and the Relay's
// (its stream, when spec.retention.deleteOnRemoval). A cleanup that cannot reach NATS is tried
// for a bounded time, then the finalizer goes anyway with a Warning Event naming what was left
// behind; an operator that is uninstalled lets go of every finalizer it set on its way out.
import type { KubernetesObject } from "@kubernetes/client-node";
import type { JetStreamManager } from "@nats-io/jetstream";
import { agentJetStream, agentStoreKey } from "../../../runtime/src/contract/agent-names.ts";
import { relayNames } from "../../../runtime/src/contract/relay-stream.ts";
import { isNotFound } from "../../../runtime/src/contract/nats.ts";
import type { Caches } from "../kube/caches.ts";
import { errorMessage, isStatus, type Kube } from "../kube/client.ts";

/** On a Relay while its stream is to be deleted with it (spec.retention.deleteOnRemoval). */
export const STREAM_FINALIZER = "ifp.dev/stream";

/** On an Agent: the operator deletes the agent's JetStream streams and KV buckets before the Agent goes. */
export const AGENT_FINALIZER = "ifp.dev/jetstream";

/** How long a finalizer waits for NATS by default before it lets its resource go. */
export const DEFAULT_FINALIZER_TIMEOUT_MS = 5 * 60_000;

/**
 * When this process first saw each resource being deleted, by uid, on its own clock (never
 * compared with the API server's deletionTimestamp, as nodes' clocks are skewed). A restart
 * starts the count again: the bound holds per process, and each restart adds at most one bound.
 */
export class Deletions {
  private readonly seen = new Map<string, number>();
  readonly timeoutMs: number;
  private readonly now: () => number;
  constructor(timeoutMs: number, now: () => number = Date.now) {
    this.timeoutMs = timeoutMs;
    this.now = now;
  }

  /** Milliseconds left before the cleanup of this resource is given up (at most timeoutMs). */
  left(obj: KubernetesObject): number {
    const uid = obj.metadata?.uid ?? `${obj.metadata?.namespace}/${obj.metadata?.name}`;
    let first = this.seen.get(uid);
    if (first === undefined) this.seen.set(uid, (first = this.now()));
    return this.timeoutMs - (this.now() - first);
  }

  /** When, on this process's clock (ms since the epoch), the cleanup of this resource is given up. */
  deadline(obj: KubernetesObject): number {
    return this.now() + this.left(obj);
  }

  forget(obj: KubernetesObject): void {
    this.seen.delete(obj.metadata?.uid ?? `${obj.metadata?.namespace}/${obj.metadata?.name}`);
  }
}

export const hasFinalizer = (obj: KubernetesObject, finalizer: string): boolean =>
  (obj.metadata?.finalizers ?? []).includes(finalizer);

/** Add or remove the finalizer on the cached object (optimistic concurrency: a stale cache gets a 409 and a retry). */
export async function setFinalizer(
  kube: Kube,
  obj: KubernetesObject,
  finalizer: string,
  want: boolean,
): Promise<boolean> {
  const finalizers = obj.metadata?.finalizers ?? [];
  if (want === finalizers.includes(finalizer)) return false;
  const next = want ? [...finalizers, finalizer] : finalizers.filter((f) => f !== finalizer);
  await kube.replace({ ...obj, metadata: { ...obj.metadata, finalizers: next } });
  return true;
}

/** Remove the finalizer from the object as the API server has it now (read, filter, replace; once more on a 409). */
export async function dropFinalizerFresh(kube: Kube, obj: KubernetesObject, finalizer: string): Promise<boolean> {
  for (let attempt = 0; ; attempt++) {
    const now = await kube.read<KubernetesObject>(
      obj.apiVersion!,
      obj.kind!,
      obj.metadata!.namespace!,
      obj.metadata!.name!,
    );
    if (!now || !hasFinalizer(now, finalizer)) return false;
    try {
      await kube.replace({
        ...now,
        metadata: { ...now.metadata, finalizers: (now.metadata?.finalizers ?? []).filter((f) => f !== finalizer) },
      });
      return true;
    } catch (err) {
      if (attempt < 2 && isStatus(err, 409)) continue;
      throw err;
    }
  }
}

/** The JetStream streams (KV buckets as their KV_ streams) a deleted Agent leaves behind when nothing cleans up. */
export function agentLeftovers(key: string): string[] {
  const js = agentJetStream(key);
  return [...js.streams, ...js.buckets.map((b) => `KV_${b}`), `its keys in ${js.sharedKeys.stream}`];
}

/** Delete an agent's streams and buckets and purge its shared keys; what is already gone is fine. Returns what was deleted. */
export async function deleteAgentJetStream(jsm: JetStreamManager, key: string): Promise<string[]> {
  const js = agentJetStream(key);
  const deleted: string[] = [];
  for (const stream of [...js.streams, ...js.buckets.map((b) => `KV_${b}`)]) {
    try {
      await jsm.streams.delete(stream);
      deleted.push(stream);
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
  }
  try {
    const purged = await jsm.streams.purge(js.sharedKeys.stream, { filter: js.sharedKeys.subject });
    if (purged.purged) deleted.push(`${purged.purged} key entries of ${js.sharedKeys.stream}`);
  } catch (err) {
    if (!isNotFound(err)) throw err;
  }
  return deleted;
}

/** What an Agent's JetStream data is named from: its namespace/name (agentStoreKey), whatever its spec says. */
export function agentKeyOf(obj: { metadata?: { name?: string; namespace?: string } }): string {
  return agentStoreKey({ metadata: obj.metadata ?? {}, spec: { agentId: "" } });
}

export interface FinalizerRelease {
  kind: "Agent" | "Relay";
  namespace: string;
  name: string;
  /** What stays in JetStream. */
  left: string[];
}

/**
 * The operator is being uninstalled (its Deployment is gone or being deleted): remove every
 * finalizer it set, so that no Agent or Relay, and no namespace or CRD deletion, waits for an
 * operator that will not come back. A resource already being deleted gets one try at its
 * cleanup first (NATS permitting); the others keep their streams, and a Warning Event on each
 * says that deleting it now leaves them behind.
 */
export async function releaseAllFinalizers(opts: ReleaseOptions): Promise<FinalizerRelease[]> {
  const released: FinalizerRelease[] = [];
  for (const kind of ["Agent", "Relay"] as const) {
    const finalizer = kind === "Agent" ? AGENT_FINALIZER : STREAM_FINALIZER;
    for (const obj of opts.caches.list<KubernetesObject & { spec?: unknown }>(kind)) {
      if (!hasFinalizer(obj, finalizer)) continue;
      const release = await releaseOne(opts, kind, finalizer, obj);
      if (release) released.push(release);
    }
  }
  return released;
}

interface ReleaseOptions {
  kube: Kube;
  /** Where the Agents and Relays come from: the operator's caches, or lists read just now. */
  caches: Pick<Caches, "list">;
  jsm: JetStreamManager | undefined;
  /**
   * With one NATS account per runtime: deletes a resource's data in its account (and the
   * account), `named` being what to delete under its names in the shared account.
   */
  deleteData?: (obj: KubernetesObject, named: (jsm: JetStreamManager) => Promise<string[]>) => Promise<string[]>;
  log: import("pino").Logger;
}

/** One resource's finalizer released (after a last cleanup when it is being deleted), with its Warning; undefined when it was gone. */
async function releaseOne(
  opts: ReleaseOptions,
  kind: "Agent" | "Relay",
  finalizer: string,
  obj: KubernetesObject,
): Promise<FinalizerRelease | undefined> {
  const { kube, log } = opts;
  const ns = obj.metadata!.namespace!;
  const name = obj.metadata!.name!;
  try {
    const left = obj.metadata?.deletionTimestamp ? await lastCleanup(opts, kind, obj) : leftovers(kind, obj);
    if (!(await dropFinalizerFresh(kube, obj, finalizer))) return undefined;
    const what = left.length ? left.join(", ") : "nothing";
    await kube.event(
      obj,
      "Warning",
      "FinalizerReleased",
      obj.metadata?.deletionTimestamp
        ? `the operator is being uninstalled: finalizer ${finalizer} removed; left in JetStream: ${what}`
        : `the operator is being uninstalled: finalizer ${finalizer} removed, so deleting this ${kind} now leaves ${what} in JetStream`,
    );
    log.warn({ kind, namespace: ns, name, finalizer, left }, "Released finalizer");
    return { kind, namespace: ns, name, left };
  } catch (err) {
    log.error({ kind, namespace: ns, name, err: errorMessage(err) }, "could not release a finalizer");
    return undefined;
  }
}

const leftovers = (kind: "Agent" | "Relay", obj: KubernetesObject): string[] =>
  kind === "Agent" ? agentLeftovers(agentKeyOf(obj)) : [relayNames(obj as never).stream];

/** One try at a deleted resource's cleanup (NATS permitting); what stays. */
async function lastCleanup(opts: ReleaseOptions, kind: "Agent" | "Relay", obj: KubernetesObject): Promise<string[]> {
  const left = leftovers(kind, obj);
  if (!opts.jsm && !opts.deleteData) return left;
  const named = (j: JetStreamManager): Promise<string[]> =>
    kind === "Agent" ? deleteAgentJetStream(j, agentKeyOf(obj)) : deleteRelayStream(j, left[0]!);
  try {
    await (opts.deleteData ? opts.deleteData(obj, named) : named(opts.jsm!));
    return [];
  } catch (err) {
    opts.log.warn(
      { kind, namespace: obj.metadata?.namespace, name: obj.metadata?.name, err: errorMessage(err) },
      "could not clean JetStream up on the way out",
    );
    return left;
  }
}

/** Delete a relay's stream; one already gone is fine. Returns what was deleted. */
export async function deleteRelayStream(jsm: JetStreamManager, stream: string): Promise<string[]> {
  try {
    await jsm.streams.delete(stream);
    return [stream];
  } catch (err) {
    if (isNotFound(err)) return [];
    throw err;
  }
}
