// The I/O around expose.ts: which Gateway API versions the API server serves, and deleting the
// exposure children spec.expose no longer asks for. The children themselves are applied with
// the others (desired() renders them).
import type { KubernetesObject, V1Service } from "@kubernetes/client-node";
import type { ExposeSpec } from "../../../../runtime/src/resources/expose.ts";
import { controlledBy } from "../../kube/apply.ts";
import type { Caches } from "../../kube/caches.ts";
import { isStatus, type Kube } from "../../kube/client.ts";
import type { Blocker } from "../../reconcile/conditions.ts";
import {
  exposureApiVersion,
  exposureToPrune,
  GATEWAY_GROUP,
  GATEWAY_KINDS,
  gatewayKindsFor,
  gatewayMissing,
  wantedExposureKinds,
  type ExposureKind,
  type GatewayKind,
} from "./expose.ts";
import { childNames } from "../../reconcile/names.ts";
import type { Owner } from "../../reconcile/settings.ts";

export interface ExposurePlan {
  /** The exposure children to render (the Gateway kinds only when they are served). */
  kinds: ExposureKind[];
  /** The served version of each Gateway API kind in use. */
  versions: Partial<Record<GatewayKind, string>>;
  /** The Gateway API is missing: spec.expose.gateway cannot be honoured. */
  blocker?: Blocker;
}

/** The first served version of a Gateway API kind, or undefined. */
async function servedVersion(kube: Kube, kind: GatewayKind, namespace: string): Promise<string | undefined> {
  const { plural, versions } = GATEWAY_KINDS[kind];
  for (const v of versions) if (await kube.serves(GATEWAY_GROUP, v, plural, namespace)) return v;
  return undefined;
}

/**
 * What spec.expose can have now. Gateway API kinds are looked up only when asked for; when one
 * is not served the others of the mode are left out too (a BackendTLSPolicy without its
 * HTTPRoute helps nobody) and the pass reports a blocker instead of failing.
 */
export async function planExposure(
  kube: Kube,
  namespace: string,
  expose: ExposeSpec | undefined,
): Promise<ExposurePlan> {
  const gatewayKinds = gatewayKindsFor(expose);
  const versions: Partial<Record<GatewayKind, string>> = {};
  const missing: GatewayKind[] = [];
  for (const kind of gatewayKinds) {
    const v = await servedVersion(kube, kind, namespace);
    if (v) versions[kind] = v;
    else missing.push(kind);
  }
  const wanted = wantedExposureKinds(expose);
  if (!missing.length) return { kinds: wanted, versions };
  return {
    kinds: wanted.filter((k) => !(gatewayKinds as ExposureKind[]).includes(k)),
    versions,
    blocker: gatewayMissing(missing, expose!.gateway!.mode),
  };
}

/**
 * Delete the exposure children that the Service says were made and that the plan no longer
 * has. Only objects this resource controls are deleted; a kind the API server no longer serves
 * has nothing left to delete. Returns "Kind/name" of what was deleted.
 */
export async function pruneExposure(kube: Kube, caches: Caches, owner: Owner, plan: ExposurePlan): Promise<string[]> {
  const { name, namespace } = owner.metadata;
  const service = caches.get<V1Service>("Service", namespace, childNames(name).service);
  const deleted: string[] = [];
  for (const kind of exposureToPrune(service, plan.kinds)) {
    const apiVersion =
      exposureApiVersion(kind, plan.versions) ?? (await servedApiVersion(kube, kind as GatewayKind, namespace));
    if (!apiVersion) continue;
    let live: KubernetesObject | undefined;
    try {
      live = await kube.read(apiVersion, kind, namespace, name);
    } catch (err) {
      if (!isUnknownKind(err)) throw err;
    }
    if (!live || !controlledBy(live, owner.metadata.uid)) continue;
    await kube.remove(live);
    deleted.push(`${kind}/${name}`);
  }
  return deleted;
}

async function servedApiVersion(kube: Kube, kind: GatewayKind, namespace: string): Promise<string | undefined> {
  const v = await servedVersion(kube, kind, namespace);
  return v ? `${GATEWAY_GROUP}/${v}` : undefined;
}

/** The client's discovery refuses a kind the API server does not serve (its CRD was removed). */
function isUnknownKind(err: unknown): boolean {
  return isStatus(err, 404) || (err instanceof Error && /Unrecognized API version and kind/.test(err.message));
}
