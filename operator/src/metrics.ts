import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from "prom-client";

/** The operator's Prometheus metrics (and the process's own). */
export function createOperatorMetrics() {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: "ifp_operator_" });
  return {
    registry,
    reconciles: new Counter({ name: "ifp_operator_reconciles_total", help: "Reconciles by kind and result (ok, conflict, error)", labelNames: ["kind", "result"], registers: [registry] }),
    errors: new Counter({ name: "ifp_operator_reconcile_errors_total", help: "Reconciles that failed and were backed off, by kind", labelNames: ["kind"], registers: [registry] }),
    duration: new Histogram({ name: "ifp_operator_reconcile_duration_seconds", help: "Reconcile duration by kind", labelNames: ["kind"], buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5], registers: [registry] }),
    queueDepth: new Gauge({ name: "ifp_operator_queue_depth", help: "Keys waiting in the work queue, by kind", labelNames: ["kind"], registers: [registry] }),
    writes: new Counter({ name: "ifp_operator_api_writes_total", help: "Writes to the API server by verb and kind (a steady state makes none)", labelNames: ["verb", "kind"], registers: [registry] }),
    leader: new Gauge({ name: "ifp_operator_leader", help: "1 while this replica holds the leader lease", registers: [registry] }),
    informerRestarts: new Gauge({ name: "ifp_operator_informer_restarts", help: "Informer restarts after list or watch failures", registers: [registry] }),
  };
}
