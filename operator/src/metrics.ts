import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from "prom-client";

export function createOperatorMetrics() {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  return {
    registry,
    reconciles: new Counter({ name: "ifp_operator_reconciles_total", help: "Reconciles by kind and result", labelNames: ["kind", "result"], registers: [registry] }),
    duration: new Histogram({ name: "ifp_operator_reconcile_seconds", help: "Reconcile duration", labelNames: ["kind"], buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5], registers: [registry] }),
    queueDepth: new Gauge({ name: "ifp_operator_queue_depth", help: "Keys waiting in the work queue", labelNames: ["kind"], registers: [registry] }),
    writes: new Counter({ name: "ifp_operator_api_writes_total", help: "Writes to the API server by verb and kind", labelNames: ["verb", "kind"], registers: [registry] }),
    leader: new Gauge({ name: "ifp_operator_leader", help: "1 while this replica holds the leader lease", registers: [registry] }),
  };
}
export type OperatorMetrics = ReturnType<typeof createOperatorMetrics>;
