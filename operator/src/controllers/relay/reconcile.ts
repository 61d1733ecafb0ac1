import type { KubernetesObject } from "@kubernetes/client-node";
import { describeIssues } from "../../../../runtime/src/protocol/message.ts";
import type { Nats } from "../../../../runtime/src/nats/connection.ts";
import { ensureStream, isNotFound, streamDrift } from "../../../../runtime/src/nats/streams.ts";
import { relayStreamConfig } from "../../../../runtime/src/relay/stream.ts";
import { Relay } from "../../../../runtime/src/resources/relay.ts";
import { readyFromDeployment, type ConditionInput } from "../conditions.ts";
import { applyChildren, deploymentOf, describe, ensureTls, TerminalError, writeStatus, type ReconcileContext } from "../reconciler.ts";
import type { Owner } from "../runtime.ts";
import { desiredRelayChildren, retentionLoss, STREAM_FINALIZER } from "./desired.ts";

type RelayObject = KubernetesObject & { spec?: unknown; status?: Record<string, unknown> };

export interface RelayContext extends ReconcileContext {
  nats: Nats | undefined;
}

export async function reconcileRelay(ctx: RelayContext, namespace: string, name: string): Promise<{ requeueAfterMs?: number }> {
  const obj = ctx.caches.get<RelayObject>("Relay", namespace, name);
  if (!obj) return {};
  const owner = { kind: "Relay", metadata: obj.metadata as unknown as Owner["metadata"] } as Owner;
  const finalizers = obj.metadata?.finalizers ?? [];
  if (obj.metadata?.deletionTimestamp) {
    if (!finalizers.includes(STREAM_FINALIZER)) return {};
    const parsed = Relay.safeParse(obj);
    if (parsed.success && parsed.data.spec.retention.deleteOnRemoval) {
      if (!ctx.nats?.isConnected) return { requeueAfterMs: 10_000 };
      const stream = relayStreamConfig({ ...parsed.data, metadata: owner.metadata }).name;
      try {
        await ctx.nats.jsm.streams.delete(stream);
        ctx.log.info({ stream, relay: `${namespace}/${name}` }, "Deleted JetStream stream");
      } catch (err) {
        if (!isNotFound(err)) throw err;
      }
    }
    await ctx.kube.replace("relays", { ...obj, metadata: { ...obj.metadata, finalizers: finalizers.filter((f) => f !== STREAM_FINALIZER) } });
    return {};
  }
  const parsed = Relay.safeParse(obj);
  if (!parsed.success) {
    await writeStatus(ctx, "relays", obj, {}, [{ type: "Ready", status: "False", reason: "InvalidSpec", message: describeIssues(parsed.error) }]);
    return {};
  }
  const relay = { ...parsed.data, metadata: owner.metadata };
  // The stream outlives the Relay unless the user asked otherwise; the finalizer says so.
  const wantFinalizer = relay.spec.retention.deleteOnRemoval;
  if (wantFinalizer !== finalizers.includes(STREAM_FINALIZER)) {
    const next = wantFinalizer ? [...finalizers, STREAM_FINALIZER] : finalizers.filter((f) => f !== STREAM_FINALIZER);
    await ctx.kube.replace("relays", { ...obj, metadata: { ...obj.metadata, finalizers: next } });
    return {}; // the update triggers the next pass
  }
  try {
    const tls = await ensureTls(ctx, owner, relay.spec.tls);
    const changed = await applyChildren(ctx, desiredRelayChildren(relay, { settings: ctx.settings, tlsSecret: tls.secretName }));
    if (changed.length) await ctx.kube.event(obj, "Normal", "Applied", `applied ${changed.join(", ")}`);
    const stream = await reconcileStream(ctx, obj, relay);
    const dep = deploymentOf(ctx, owner);
    const runtime = readyFromDeployment(dep);
    const ready: ConditionInput =
      stream.condition.status !== "True" ? { type: "Ready", status: "False", reason: stream.condition.reason, message: stream.condition.message } : runtime;
    await writeStatus(
      ctx,
      "relays",
      obj,
      { url: relay.spec.url, tlsSecretName: tls.secretName, stream: stream.status, replicas: dep?.status?.replicas ?? 0, readyReplicas: dep?.status?.readyReplicas ?? 0 },
      [ready, stream.condition, ...(changed.length ? [{ type: "Reconciling", status: "True" as const, reason: "ChildrenApplied", message: `applied ${changed.join(", ")}` }] : [])],
    );
    return ready.status === "True" ? {} : { requeueAfterMs: 30_000 };
  } catch (err) {
    if (err instanceof TerminalError) {
      await writeStatus(ctx, "relays", obj, {}, [{ type: "Ready", status: "False", reason: err.reason, message: err.message }]);
      return {};
    }
    throw err;
  }
}

async function reconcileStream(ctx: RelayContext, obj: RelayObject, relay: Parameters<typeof relayStreamConfig>[0]) {
  const want = relayStreamConfig(relay);
  if (!ctx.nats?.isConnected) {
    return { condition: { type: "StreamReady", status: "False" as const, reason: "NatsUnavailable", message: "the operator is not connected to NATS" }, status: undefined };
  }
  let current;
  try {
    current = await ctx.nats.jsm.streams.info(want.name);
  } catch (err) {
    if (!isNotFound(err)) throw err;
  }
  if (current && streamDrift(current.config, want).length) {
    const loss = retentionLoss(current.config, current.state, want);
    if (loss) await ctx.kube.event(obj, "Warning", "RetentionLowered", `stream ${want.name}: ${loss}`);
  }
  try {
    const { info, action } = await ensureStream(ctx.nats.jsm, want);
    if (action !== "unchanged") await ctx.kube.event(obj, "Normal", action === "created" ? "StreamCreated" : "StreamUpdated", `JetStream stream ${want.name} ${action}`);
    const c = info.config;
    return {
      condition: { type: "StreamReady", status: "True" as const, reason: "StreamApplied", message: `stream ${want.name} matches spec.retention` },
      status: {
        name: c.name,
        maxAge: `${Math.round(c.max_age / 1e9)}s`,
        maxBytes: c.max_bytes,
        maxMessages: c.max_msgs,
        replicas: c.num_replicas,
        storage: c.storage,
        duplicateWindow: `${Math.round((c.duplicate_window ?? 0) / 1e9)}s`,
      },
    };
  } catch (err) {
    const message = describe(err);
    await ctx.kube.event(obj, "Warning", "StreamFailed", message);
    return { condition: { type: "StreamReady", status: "False" as const, reason: "StreamFailed", message }, status: undefined };
  }
}
