// The Relay controller: as for agents, plus the JetStream stream from spec.retention, whose
// finalizer deletes the stream with the Relay when (only when) the user asks.
import type { V1Deployment } from "@kubernetes/client-node";
import { relayPermissions } from "../../../../runtime/src/contract/nats-permissions.ts";
import { relayStreamConfig } from "../../../../runtime/src/contract/relay-stream.ts";
import { Relay } from "../../../../runtime/src/resources/relay.ts";
import type { RelayStatus } from "../../crd/status.ts";
import type { ReconcileResult } from "../../kube/controller.ts";
import type { CustomObject } from "../../reconcile/context.ts";
import type { RelayContext } from "./context.ts";
import { ensureDisruptionBudget } from "../../concerns/workload/disruption.ts";
import { exposedHosts } from "../../concerns/exposure/expose.ts";
import { deleteRelayStream, STREAM_FINALIZER } from "../../reconcile/finalizers.ts";
import { certificateDnsNames, childNames, serviceDnsNames } from "../../reconcile/names.ts";
import {
  checkPartOrder,
  filled,
  finalizerPart,
  reconcile,
  type Cleanup,
  type Controller,
} from "../../reconcile/pipeline.ts";
import type { Pass } from "../../reconcile/part.ts";
import { requestedHosts } from "../../reconcile/references.ts";
import { desiredRelayChildren, type RelayResource } from "./desired.ts";
import { relayStatus } from "./status.ts";
import { deleteRuntimeData } from "../../concerns/nats/runtime-account.ts";
import { exposurePart, exposurePrunePart, type ExposureSlots } from "../../concerns/exposure/part.ts";
import { legacyAccessPart, releaseLegacyAccess } from "../../concerns/workload/legacy-access-part.ts";
import { natsCredentialPart, type NatsAccountSlots } from "../../concerns/nats/credential-part.ts";
import { networkPolicyPrunePart } from "../../concerns/network-policy/part.ts";
import { policyPart } from "../../concerns/pod-policy/part.ts";
import { relayStreamPart, type StreamSlots } from "./stream.ts";
import { tlsPart, type TlsNames, type TlsSlots } from "../../concerns/tls/part.ts";
import { trustPart } from "../../concerns/tls/trust-part.ts";
import { workloadPart } from "../../concerns/workload/part.ts";

type RelayPass = Pass<RelayResource>;

/** What a Relay's parts fill, for the parts after them and its status. */
type RelaySlots = TlsSlots & ExposureSlots & NatsAccountSlots & StreamSlots;

const tlsNames: TlsNames<RelayPass> = {
  own: ({ owner }) => serviceDnsNames(owner),
  requested: ({ resource }) => requestedHosts("spec.url", resource.spec.url, resource.spec.expose),
  dnsNames: ({ owner, resource: { spec } }) =>
    certificateDnsNames(owner, spec.url, [...(spec.tls?.dnsNames ?? []), ...exposedHosts(spec.expose)]),
};

/** The stream of a Relay as its spec names it, when it asks for the stream to go with it. */
function streamToDelete(obj: CustomObject): string | undefined {
  const parsed = Relay.safeParse(obj);
  if (!parsed.success || !parsed.data.spec.retention.deleteOnRemoval) return undefined;
  return relayStreamConfig({ ...parsed.data, metadata: obj.metadata as RelayResource["metadata"] }).name;
}

/** The stream outlives the Relay unless spec.retention.deleteOnRemoval. */
const cleanup: Cleanup<RelayContext> = {
  finalizer: STREAM_FINALIZER,
  wanted: (obj) => streamToDelete(obj) !== undefined,
  what: "the relay's stream",
  // In the relay's own account: that stream, every other, and the account itself.
  run: (ctx, obj) => deleteRuntimeData(ctx, obj, (jsm) => deleteRelayStream(jsm, streamToDelete(obj)!)),
  leftovers: (obj) => [streamToDelete(obj)!],
};

export const relayController: Controller<Relay, RelaySlots, RelayContext> = {
  kind: "Relay",
  plural: "relays",
  schema: Relay,
  cleanup,
  gone: releaseLegacyAccess("Relay"),
  parts: checkPartOrder([
    finalizerPart(cleanup),
    // A Secret the relay may not use (or that does not exist yet) is never mounted.
    policyPart(),
    // A refused spec.tls gets no certificate and holds the Deployment; the stream is still kept.
    tlsPart(tlsNames),
    trustPart(),
    natsCredentialPart(({ resource }) => relayPermissions(resource)),
    exposurePart(),
    exposurePrunePart({ needsUnheld: false }),
    networkPolicyPrunePart({ needsUnheld: false }),
    workloadPart<RelayResource, TlsSlots & ExposureSlots, RelayContext>({
      needs: ["tlsSecret", "exposure"],
      children: (ctx, { resource, found }) =>
        desiredRelayChildren(resource, {
          settings: ctx.settings,
          tlsSecret: found.tlsSecret,
          exposure: found.exposure,
        }),
      extras: [(ctx, { owner, resource }) => ensureDisruptionBudget(ctx, owner, resource.spec)],
    }),
    legacyAccessPart(),
    relayStreamPart,
  ]),
  status(ctx, { obj, owner, resource, found }, report) {
    const { namespace, name } = owner.metadata;
    const deployment = ctx.caches.get<V1Deployment>("Deployment", namespace, childNames(name).deployment);
    const stream = filled(found, "stream");
    const { status, conditions } = relayStatus(
      resource,
      {
        applied: report.applied,
        deployment,
        blocker: report.blocker,
        waiting: found.tlsWaiting,
        stream,
        tlsSecret: found.tlsSecret,
      },
      obj.status as RelayStatus | undefined,
    );
    const warnings = !stream.ok
      ? [{ reason: stream.reason, message: stream.message }]
      : stream.unmet
        ? [{ reason: "ReplicasNotApplied", message: stream.unmet }]
        : [];
    return { status, conditions, warnings };
  },
};

export function reconcileRelay(ctx: RelayContext, namespace: string, name: string): Promise<ReconcileResult> {
  return reconcile(relayController, ctx, namespace, name);
}
