// The Relay controller's shell: as for agents, plus the JetStream stream from spec.retention
// and the finalizer that deletes the stream with the Relay when (only when) the user asks.
import type { V1Deployment } from "@kubernetes/client-node";
import type { JetStreamManager, StreamInfo } from "@nats-io/jetstream";
import { ensureReplicatedStream, isNotFound, streamDrift } from "../../../../runtime/src/nats/streams.ts";
import { describeIssues } from "../../../../runtime/src/contract/issues.ts";
import { relayStreamConfig } from "../../../../runtime/src/contract/relay-stream.ts";
import { Relay } from "../../../../runtime/src/resources/relay.ts";
import { exposedHosts } from "../expose.ts";
import { planExposure, pruneExposure } from "../expose-reconcile.ts";
import { applyChildren } from "../../kube/apply.ts";
import type { ReconcileResult } from "../../kube/controller.ts";
import { errorMessage } from "../../kube/client.ts";
import type { RelayStatus } from "../../crd/status.ts";
import { invalidSpecConditions } from "../conditions.ts";
import {
  earliest,
  note,
  previousFields,
  reconcileResource,
  recordNotes,
  reportFailure,
  writeStatus,
  type CustomObject,
  type ReconcileContext,
} from "../reconciler.ts";
import { releaseSharedRuntimeAccess, RELAY_RUNTIME_ACCOUNT } from "../shared.ts";
import { applyRuntimeIdentity, serviceAccountRefusal } from "../identity.ts";
import { pruneNetworkPolicy } from "../network-policy.ts";
import { certificateDnsNames, childNames, serviceDnsNames, type Owner } from "../runtime.ts";
import { ensureTls, type TlsOutcome } from "../tls.ts";
import { imageRefusal, requestedHosts, tlsRefusal } from "../references.ts";
import { ensureTrust } from "../trust.ts";
import { podSettingsRefusal, readSecret } from "../pod-policy.ts";
import { relayPermissions } from "../../../../runtime/src/contract/nats-permissions.ts";
import { ensureNatsCreds } from "../nats-creds.ts";
import { deleteRuntimeData, inRuntimeAccount } from "../runtime-account.ts";
import { desiredRelayChildren, relayOwner, retentionLoss, STREAM_FINALIZER, type RelayResource } from "./desired.ts";
import { relayStatus, type StreamObservation } from "./status.ts";

export type RelayContext = ReconcileContext;

export function reconcileRelay(shared: RelayContext, namespace: string, name: string): Promise<ReconcileResult> {
  return reconcileResource("Relay", shared, namespace, name, (ctx, obj) => reconcilePass(ctx, obj, namespace, name));
}

async function reconcilePass(
  ctx: RelayContext,
  obj: CustomObject,
  namespace: string,
  name: string,
): Promise<ReconcileResult> {
  const finalizers = obj.metadata?.finalizers ?? [];
  if (obj.metadata?.deletionTimestamp) return finalize(ctx, obj, finalizers);
  const parsed = Relay.safeParse(obj);
  if (!parsed.success) {
    const message = describeIssues(parsed.error);
    if (await writeStatus(ctx, "relays", obj, previousFields(obj), invalidSpecConditions(message)))
      await ctx.kube.event(obj, "Warning", "InvalidSpec", message);
    return {};
  }
  const relay: RelayResource = { ...parsed.data, metadata: obj.metadata as unknown as Owner["metadata"] };
  const owner = relayOwner(relay);
  try {
    // The stream outlives the Relay unless the user asked otherwise; the finalizer says so.
    const wantFinalizer = relay.spec.retention.deleteOnRemoval;
    if (wantFinalizer !== finalizers.includes(STREAM_FINALIZER)) {
      const next = wantFinalizer ? [...finalizers, STREAM_FINALIZER] : finalizers.filter((f) => f !== STREAM_FINALIZER);
      await ctx.kube.replace({ ...obj, metadata: { ...obj.metadata, finalizers: next } });
      return {}; // the update brings the next pass
    }
    const expose = relay.spec.expose;
    // A refused spec.tls gets no certificate and holds the Deployment; the stream is still kept.
    const tlsRefused = tlsRefusal(
      relay.spec.tls,
      { namespace, own: serviceDnsNames(owner), requested: requestedHosts("spec.url", relay.spec.url, expose) },
      ctx.settings,
    );
    const tls: TlsOutcome = tlsRefused
      ? { secretName: childNames(name).tlsSecret, blocker: tlsRefused, applied: [], events: [] }
      : await ensureTls(
          ctx.kube,
          ctx.caches,
          ctx.trust,
          owner,
          relay.spec.tls,
          certificateDnsNames(owner, relay.spec.url, [...(relay.spec.tls?.dnsNames ?? []), ...exposedHosts(expose)]),
        );
    for (const e of tls.events)
      await (e.type === "Normal"
        ? note(ctx, obj, e.reason, e.message)
        : ctx.kube.event(obj, e.type, e.reason, e.message));
    const trust = await ensureTrust(ctx.kube, ctx.caches, ctx.trust, owner, relay.spec.tls?.trust);
    const natsCreds = ctx.natsIssuer
      ? await ensureNatsCreds(ctx, owner, ctx.natsIssuer, relayPermissions(relay))
      : undefined;
    const exposure = await planExposure(ctx.kube, namespace, expose);
    const pruned = await pruneExposure(ctx.kube, ctx.caches, owner, exposure);
    if (pruned.length) await note(ctx, obj, "Deleted", `deleted ${pruned.join(", ")}, no longer in spec.expose`);
    const unpoliced = await pruneNetworkPolicy(ctx, owner);
    if (unpoliced.length)
      await note(
        ctx,
        obj,
        "Deleted",
        `deleted ${unpoliced.join(", ")}, the install renders no runtime NetworkPolicies`,
      );
    pruned.push(...unpoliced);
    // A Secret the relay may not use (or that does not exist yet) is never mounted.
    const imageBlocker =
      imageRefusal(relay.spec.image, ctx.settings) ??
      (await podSettingsRefusal(readSecret(ctx), owner, relay.spec.deployment, ctx.settings)) ??
      (await serviceAccountRefusal(ctx, owner, relay.spec.deployment));
    const tlsHeld =
      imageBlocker ||
      tlsRefused ||
      (tls.blocker && ["TLSSecretMissing", "InvalidTLSSecret", "ForeignSecret"].includes(tls.blocker.reason));
    // The runtime's ServiceAccount first: the pods run under it.
    const written = tlsHeld
      ? []
      : [
          ...(await applyRuntimeIdentity(ctx, owner, relay.spec.deployment)),
          ...(await applyChildren(
            ctx.kube,
            ctx.caches,
            owner,
            desiredRelayChildren(relay, { settings: ctx.settings, tlsSecret: tls.secretName, exposure }),
          )),
        ];
    if (written.length) await note(ctx, obj, "Applied", `applied ${written.join(", ")}`);
    const legacy = tlsHeld ? [] : await releaseSharedRuntimeAccess(ctx, "Relay", namespace);
    if (legacy.length)
      await note(
        ctx,
        obj,
        "Deleted",
        `deleted ${legacy.join(", ")}, the namespace's ${RELAY_RUNTIME_ACCOUNT} no runtime runs under any more`,
      );
    const changed = [...pruned, ...written, ...legacy];
    const blocker = imageBlocker ?? tls.blocker ?? trust.blocker ?? exposure.blocker;
    const stream = await reconcileStream(ctx, obj, relay, natsCreds?.account);
    const deployment = ctx.caches.get<V1Deployment>("Deployment", namespace, childNames(name).deployment);
    const { status, conditions } = relayStatus(
      relay,
      {
        applied: [...tls.applied, ...trust.applied, ...(natsCreds?.applied ?? []), ...changed],
        deployment,
        blocker,
        waiting: tls.waiting,
        stream,
        tlsSecret: tls.secretName,
      },
      obj.status as RelayStatus | undefined,
    );
    const requeueAfterMs = earliest(
      tls.requeueAfterMs,
      tls.blocker || trust.blocker ? 30_000 : undefined,
      exposure.blocker ? 60_000 : undefined,
      stream.ok ? undefined : stream.reason === "NatsUnavailable" ? 10_000 : 30_000,
      natsCreds?.requeueAfterMs,
    );
    // As for agents: a pass that wrote children leaves the status to the pass their watch events bring.
    const passWrites = [...tls.applied, ...trust.applied, ...(natsCreds?.applied ?? []), ...changed];
    if (passWrites.length && !blocker && stream.ok)
      return { requeueAfterMs: earliest(requeueAfterMs, STATUS_FOLLOW_UP_MS) };
    await recordNotes(ctx, obj);
    const wrote = await writeStatus(ctx, "relays", obj, status, conditions);
    // Warnings once per change of status, not once per retry.
    if (wrote && blocker) await ctx.kube.event(obj, "Warning", blocker.reason, blocker.message);
    if (wrote && !stream.ok) await ctx.kube.event(obj, "Warning", stream.reason, stream.message);
    if (wrote && stream.ok && stream.unmet) await ctx.kube.event(obj, "Warning", "ReplicasNotApplied", stream.unmet);
    return { requeueAfterMs };
  } catch (err) {
    return await reportFailure(ctx, "relays", obj, err);
  }
}

/** When a pass that wrote children and left the status to the next pass looks again. */
const STATUS_FOLLOW_UP_MS = 2_000;

/**
 * A Relay being deleted: delete its stream if asked to, then let it go. While NATS cannot be
 * reached the Relay waits, at most the finalizer timeout of this process's clock; then the
 * finalizer goes anyway with a Warning Event naming the stream left behind.
 */
async function finalize(ctx: RelayContext, obj: CustomObject, finalizers: string[]): Promise<ReconcileResult> {
  if (!finalizers.includes(STREAM_FINALIZER)) return {};
  const parsed = Relay.safeParse(obj);
  const relay = `${obj.metadata?.namespace}/${obj.metadata?.name}`;
  if (parsed.success && parsed.data.spec.retention.deleteOnRemoval) {
    const stream = relayStreamConfig({ ...parsed.data, metadata: obj.metadata as unknown as Owner["metadata"] }).name;
    let failure: string | undefined;
    if (!ctx.nats?.isConnected) failure = "the operator is not connected to NATS";
    else {
      try {
        // In the relay's own account: that stream, every other, and the account itself.
        const deleted = await deleteRuntimeData(ctx, obj, async (jsm) => {
          try {
            await jsm.streams.delete(stream);
            return [stream];
          } catch (err) {
            if (isNotFound(err)) return [];
            throw err;
          }
        });
        if (deleted.length) ctx.log.info({ stream, relay, deleted }, "Deleted JetStream stream");
      } catch (err) {
        failure = errorMessage(err);
      }
    }
    if (failure) {
      const left = ctx.deletions.left(obj);
      if (left > 0) {
        ctx.log.warn({ relay, err: failure, giveUpInMs: left }, "waiting for NATS to delete the relay's stream");
        return { requeueAfterMs: Math.min(10_000, left) };
      }
      await ctx.kube.event(
        obj,
        "Warning",
        "CleanupAbandoned",
        `could not delete JetStream stream ${stream} for ${Math.round(ctx.deletions.timeoutMs / 1000)}s (${failure}); the Relay goes and the stream stays: delete it by hand`,
      );
      ctx.log.warn({ relay, stream, err: failure }, "gave up deleting the relay's stream; letting the Relay go");
    }
  }
  await ctx.kube.replace({
    ...obj,
    metadata: { ...obj.metadata, finalizers: finalizers.filter((f) => f !== STREAM_FINALIZER) },
  });
  ctx.deletions.forget(obj);
  return {};
}

/**
 * Create or update the stream from spec.retention through the operator's NATS connection. A
 * Warning Event precedes a change that will drop or refuse data; the stream is never deleted
 * and recreated (a storage change is refused by the CRD and reported here as a conflict).
 */
async function reconcileStream(
  ctx: RelayContext,
  obj: CustomObject,
  relay: RelayResource,
  account: string | undefined,
): Promise<StreamObservation> {
  if (!ctx.nats?.isConnected)
    return { ok: false, reason: "NatsUnavailable", message: "the operator is not connected to NATS; retrying" };
  try {
    // The relay's stream lives in the relay's own NATS account (or the shared one).
    return await inRuntimeAccount(ctx, obj, (jsm) => reconcileStreamIn(ctx, jsm, obj, relay), account);
  } catch (err) {
    return {
      ok: false,
      reason: "NatsUnavailable",
      message: `the operator cannot reach the relay's NATS account: ${errorMessage(err)}; retrying`,
    };
  }
}

async function reconcileStreamIn(
  ctx: RelayContext,
  jsm: JetStreamManager,
  obj: CustomObject,
  relay: RelayResource,
): Promise<StreamObservation> {
  const want = relayStreamConfig(relay);
  const previous = (obj.status as RelayStatus | undefined)?.stream;
  let current: StreamInfo | undefined;
  try {
    current = await jsm.streams.info(want.name);
  } catch (err) {
    if (!isNotFound(err))
      return { ok: false, reason: "StreamFailed", message: `reading stream ${want.name}: ${errorMessage(err)}` };
  }
  // A stream this Relay's status shows was there is not made again empty: NATS may not have
  // loaded it at its last start, and its messages may still be on the server's disk.
  if (!current && previous?.name === want.name && !recreateMissing(obj)) {
    return {
      ok: false,
      reason: "StreamMissing",
      message: `stream ${want.name}, which this Relay had, is missing from NATS: the server did not load it at its last start (its data may still be in the store directory) or it was deleted; it is not made again empty (docs/reliability.md#a-stream-nats-did-not-load; annotate the Relay ${RECREATE_ANNOTATION}=true to start it over empty)`,
    };
  }
  if (current) {
    const drift = streamDrift(current.config, want);
    if (drift.includes("storage") || drift.includes("retention")) {
      return {
        ok: false,
        reason: "StreamConflict",
        message: `stream ${want.name} exists with storage ${current.config.storage} and retention ${current.config.retention}; it must be recreated by hand to change that (the operator never deletes a stream on its own)`,
      };
    }
    if (drift.length) {
      const loss = retentionLoss(current.config, current.state, want);
      if (loss) await ctx.kube.event(obj, "Warning", "RetentionLowered", `stream ${want.name}: ${loss}`);
    }
  }
  try {
    const { info, action, unmet } = await ensureReplicatedStream(
      jsm,
      want,
      relay.spec.retention.replicas,
      ctx.nats!.placement,
    );
    if (action !== "unchanged") {
      const verb = action === "created" ? "Created" : "Updated";
      ctx.log.info(
        { stream: want.name, relay: `${relay.metadata.namespace}/${relay.metadata.name}` },
        `${verb} JetStream stream`,
      );
      await note(
        ctx,
        obj,
        `Stream${verb}`,
        `${verb.toLowerCase()} JetStream stream ${want.name} (maxAge ${relay.spec.retention.maxAge}, maxBytes ${relay.spec.retention.maxBytes}, maxMessages ${relay.spec.retention.maxMessages}, replicas ${relay.spec.retention.replicas})`,
      );
    }
    return { ok: true, config: info.config, action, ...(unmet ? { unmet: unmet.reason } : {}) };
  } catch (err) {
    return { ok: false, reason: "StreamFailed", message: `stream ${want.name}: ${errorMessage(err)}` };
  }
}

/** The annotation with which a user asks for a Relay's missing stream to be made again, empty. */
export const RECREATE_ANNOTATION = "ifp.dev/recreate-missing-stream";

function recreateMissing(obj: CustomObject): boolean {
  return obj.metadata?.annotations?.[RECREATE_ANNOTATION] === "true";
}
