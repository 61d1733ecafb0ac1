// Writing children: server-side apply with one field manager, only when the live object lacks
// something we own, and never over an object another owner controls.
import type { KubernetesObject } from "@kubernetes/client-node";
import type { Caches, CachedKind } from "./caches.ts";
import type { Kube } from "./client.ts";
import { digestedData } from "./digest.ts";
import { hashOf } from "./metadata.ts";
import { firstDifference, isSubset } from "./subset.ts";

/** The resource whose children are applied: they carry its controller reference. */
export interface ChildOwner {
  kind: string;
  metadata: { uid: string };
}

/** Annotation on every child: a hash of what we last applied, so that dropping a field shows too. */
export const APPLIED_HASH = "ifp.dev/applied-hash";

/** A child's name is taken by an object this resource does not control. */
export class ChildConflictError extends Error {
  readonly reason = "ChildConflict";
}

export function controlledBy(obj: KubernetesObject, uid: string): boolean {
  return (obj.metadata?.ownerReferences ?? []).some((r) => r.controller && r.uid === uid);
}

/** The child with its applied-hash annotation (pure). */
export function withAppliedHash<T extends KubernetesObject>(child: T): T {
  const h = hashOf(child);
  return {
    ...child,
    metadata: { ...child.metadata, annotations: { ...(child.metadata?.annotations ?? {}), [APPLIED_HASH]: h } },
  };
}

/**
 * Apply each child unless the live object (from the cache, else read once) already holds every
 * field we own with the same applied hash. Returns "Kind/name" of what was written.
 */
export async function applyChildren(
  kube: Kube,
  caches: Caches,
  owner: ChildOwner,
  children: KubernetesObject[],
): Promise<string[]> {
  // Everything but the Deployment is independent: apply it concurrently, then the Deployment,
  // whose pods mount the others.
  const last = children.filter((c) => c.kind === "Deployment");
  const first = children.filter((c) => c.kind !== "Deployment");
  const changed = (await Promise.all(first.map((c) => applyChild(kube, caches, owner, c)))).filter(
    (x): x is string => !!x,
  );
  for (const c of last) {
    const done = await applyChild(kube, caches, owner, c);
    if (done) changed.push(done);
  }
  return changed;
}

async function applyChild(
  kube: Kube,
  caches: Caches,
  owner: ChildOwner,
  raw: KubernetesObject,
): Promise<string | undefined> {
  const child = withAppliedHash(raw);
  const { namespace, name } = child.metadata as { namespace: string; name: string };
  const kind = child.kind!;
  // A cache miss is either a new child, a cache that lags our own write, or an object of the
  // same name that is not ours (the informers only see labelled objects): ask the server.
  const live =
    caches.get(kind as CachedKind, namespace, name) ?? (await kube.read(child.apiVersion!, kind, namespace, name));
  if (live && !controlledBy(live, owner.metadata.uid)) {
    const holder = live.metadata?.ownerReferences?.find((r) => r.controller);
    throw new ChildConflictError(
      `${kind} ${name} already exists and is ${holder ? `controlled by ${holder.kind} ${holder.name}` : `not managed by this ${owner.kind}`}; delete or rename it`,
    );
  }
  // Compared as the cache holds a ConfigMap: its long values as their digest (digest.ts).
  const want = digestedData(child);
  const have = live && digestedData(live);
  if (have && isSubset(want, have)) return undefined;
  await kube.apply(child, !!live, have ? firstDifference(want, have) : undefined);
  return `${kind}/${name}`;
}
