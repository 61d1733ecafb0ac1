// Pure: a Relay's status from what a reconcile observed. Tested in desired.test.ts.
import type { StreamConfig } from "@nats-io/jetstream";
import type { RelayStatus } from "../../crd/status.ts";
import { runtimeConditions, type ConditionInput, type RuntimeObservation } from "../../reconcile/conditions.ts";
import { selectorLabels } from "../../reconcile/names.ts";
import { scaleStatus } from "./scale.ts";
import { relayOwner, type RelayResource } from "./desired.ts";

/** What became of the relay's JetStream stream in this pass. */
export type StreamObservation =
  | {
      ok: true;
      config: StreamConfig;
      action: "created" | "updated" | "unchanged" /** Why the replicas asked for are not the stream's. */;
      unmet?: string;
    }
  | { ok: false; reason: "NatsUnavailable" | "StreamFailed" | "StreamConflict" | "StreamMissing"; message: string };

export interface RelayObservation extends RuntimeObservation {
  stream: StreamObservation;
  tlsSecret?: string;
}

const seconds = (ns: number | undefined) => `${Math.round((ns ?? 0) / 1e9)}s`;

export function streamStatus(c: StreamConfig): NonNullable<RelayStatus["stream"]> {
  return {
    name: c.name,
    maxAge: seconds(c.max_age),
    maxBytes: c.max_bytes,
    maxMessages: c.max_msgs,
    replicas: c.num_replicas,
    storage: c.storage,
    duplicateWindow: seconds(c.duplicate_window),
  };
}

/**
 * Ready needs both the runtime (as for agents) and the stream; StreamReady tells the stream's
 * part alone. A stream that exists with a storage type the spec does not ask for (made by hand)
 * is Stalled: it is never deleted and recreated automatically.
 */
export function relayStatus(
  relay: RelayResource,
  o: RelayObservation,
  previous?: RelayStatus,
): { status: Omit<RelayStatus, "conditions" | "observedGeneration">; conditions: ConditionInput[] } {
  const dep = o.deployment;
  const s = o.stream;
  let conditions = runtimeConditions(o);
  if (!s.ok) {
    const stalled = s.reason === "StreamConflict" || s.reason === "StreamMissing";
    const blocked = conditions.find((c) => c.type === "Stalled")?.status === "True";
    if (!blocked) {
      conditions = [
        { type: "Ready", status: "False", reason: s.reason, message: s.message },
        stalled
          ? { type: "Reconciling", status: "False", reason: s.reason, message: s.message }
          : { type: "Reconciling", status: "True", reason: s.reason, message: s.message },
        stalled
          ? { type: "Stalled", status: "True", reason: s.reason, message: s.message }
          : { type: "Stalled", status: "False", reason: "Progressing", message: "" },
      ];
    }
  }
  // A healthy stream has one reason whatever this pass did (created/updated go to Events), so
  // that the next pass, finding it unchanged, writes no status.
  const streamCondition: ConditionInput = s.ok
    ? s.unmet
      ? { type: "StreamReady", status: "True", reason: "ReplicasNotApplied", message: s.unmet }
      : {
          type: "StreamReady",
          status: "True",
          reason: "StreamInSync",
          message: `stream ${s.config.name} matches spec.retention`,
        }
    : { type: "StreamReady", status: "False", reason: s.reason, message: s.message };
  return {
    status: {
      url: relay.spec.url,
      ...(o.tlsSecret ? { tlsSecretName: o.tlsSecret } : {}),
      // While NATS is away, keep showing the config last applied.
      ...(s.ok ? { stream: streamStatus(s.config) } : previous?.stream ? { stream: previous.stream } : {}),
      ...scaleStatus(selectorLabels(relayOwner(relay)), dep),
    },
    conditions: [...conditions, streamCondition],
  };
}
