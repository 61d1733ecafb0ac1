// What a Relay's pass runs in: the pass's own context and what its concerns declare (TLS, the
// NATS identity, the workload).
import type { TlsContext } from "../../concerns/tls/context.ts";
import type { NatsContext } from "../../concerns/nats/context.ts";
import type { WorkloadContext } from "../../concerns/workload/context.ts";
import type { ReconcileContext } from "../../reconcile/context.ts";

export type RelayContext = ReconcileContext & TlsContext & NatsContext & WorkloadContext;
