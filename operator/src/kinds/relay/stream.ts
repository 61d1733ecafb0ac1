// A Relay's JetStream stream from spec.retention, through the operator's NATS connection, in the
// relay's own account (or the shared one). A Warning Event precedes a change that will drop or
// refuse data; the stream is never deleted and recreated (a storage change is refused by the CRD
// and reported here as a conflict), nor made again empty once it went missing unless asked.
import type { JetStreamManager, StreamInfo } from "@nats-io/jetstream";
import { relayStreamConfig } from "../../../../runtime/src/contract/relay-stream.ts";
import { isNotFound } from "../../../../runtime/src/contract/nats.ts";
import { ensureReplicatedStream, streamDrift } from "../../../../runtime/src/nats/streams.ts";
import type { RelayStatus } from "../../crd/status.ts";
import { errorMessage } from "../../kube/client.ts";
import type { CustomObject, ReconcileContext } from "../../reconcile/context.ts";
import type { Part } from "../../reconcile/part.ts";
import { note } from "../../reconcile/pipeline.ts";
import { retentionLoss, type RelayResource } from "./desired.ts";
import type { StreamObservation } from "./status.ts";
import { inRuntimeAccount } from "../../concerns/nats/runtime-account.ts";
import type { NatsAccountSlots } from "../../concerns/nats/credential-part.ts";
import type { NatsContext } from "../../concerns/nats/context.ts";

/** What the stream part fills: the stream as this pass left it, for the status. */
export interface StreamSlots {
  stream: StreamObservation;
}

/** The part of the context the stream part uses: the operator's NATS connection and the relay's account. */
type StreamContext = Pick<ReconcileContext, "kube" | "caches" | "log" | "notes" | "nats"> &
  Pick<NatsContext, "natsIssuer" | "natsAccounts" | "dataAccounts">;

/** The stream; not in place, the status is written at once and the Relay looked at again (sooner while NATS is away). */
export const relayStreamPart: Part<RelayResource, NatsAccountSlots, StreamSlots, StreamContext> = {
  name: "relay-stream",
  needs: ["natsAccount"],
  provides: ["stream"],
  async ensure(ctx, { obj, resource, found }) {
    const stream = await reconcileStream(ctx, obj, resource, found.natsAccount);
    if (stream.ok) return { provides: { stream } };
    return {
      unsettled: true,
      requeueAfterMs: stream.reason === "NatsUnavailable" ? 10_000 : 30_000,
      provides: { stream },
    };
  },
};

async function reconcileStream(
  ctx: StreamContext,
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
  ctx: StreamContext,
  jsm: JetStreamManager,
  obj: CustomObject,
  relay: RelayResource,
): Promise<StreamObservation> {
  const want = relayStreamConfig(relay);
  let current: StreamInfo | undefined;
  try {
    current = await jsm.streams.info(want.name);
  } catch (err) {
    if (!isNotFound(err))
      return { ok: false, reason: "StreamFailed", message: `reading stream ${want.name}: ${errorMessage(err)}` };
  }
  const refused = streamRefusal(obj, want, current);
  if (refused) return refused;
  if (current && streamDrift(current.config, want).length) {
    const loss = retentionLoss(current.config, current.state, want);
    if (loss) await ctx.kube.event(obj, "Warning", "RetentionLowered", `stream ${want.name}: ${loss}`);
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

/**
 * Pure: why the stream is not made or changed. A stream this Relay's status shows was there is
 * not made again empty: NATS may not have loaded it at its last start, and its messages may still
 * be on the server's disk. Its storage and retention are never changed in place.
 */
function streamRefusal(
  obj: CustomObject,
  want: ReturnType<typeof relayStreamConfig>,
  current: StreamInfo | undefined,
): StreamObservation | undefined {
  const previous = (obj.status as RelayStatus | undefined)?.stream;
  if (!current && previous?.name === want.name && !recreateMissing(obj)) {
    return {
      ok: false,
      reason: "StreamMissing",
      message: `stream ${want.name}, which this Relay had, is missing from NATS: the server did not load it at its last start (its data may still be in the store directory) or it was deleted; it is not made again empty (docs/reliability.md#a-stream-nats-did-not-load; annotate the Relay ${RECREATE_ANNOTATION}=true to start it over empty)`,
    };
  }
  const drift = current ? streamDrift(current.config, want) : [];
  if (current && (drift.includes("storage") || drift.includes("retention"))) {
    return {
      ok: false,
      reason: "StreamConflict",
      message: `stream ${want.name} exists with storage ${current.config.storage} and retention ${current.config.retention}; it must be recreated by hand to change that (the operator never deletes a stream on its own)`,
    };
  }
  return undefined;
}

/** The annotation with which a user asks for a Relay's missing stream to be made again, empty. */
export const RECREATE_ANNOTATION = "ifp.dev/recreate-missing-stream";

function recreateMissing(obj: CustomObject): boolean {
  return obj.metadata?.annotations?.[RECREATE_ANNOTATION] === "true";
}
