// The operator's Prometheus metrics: the controller-runtime and client-go names that dashboards
// for Kubernetes operators expect, the operator's own ifp_operator_* series, and the process's.
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from "prom-client";
import { buildInfo } from "../../../runtime/src/util/version.ts";

/** The NATS account pool as its metrics read it: connections open now, and opened so far. */
export interface PoolReading {
  open: number;
  opened: number;
}

/** The operator's Prometheus metrics (and the process's own). */
export function createOperatorMetrics() {
  const registry = new Registry();
  let pool: (() => PoolReading) | undefined;
  collectDefaultMetrics({ register: registry, prefix: "ifp_operator_" });
  const registers = [registry];
  const durations = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 60];
  new Gauge({
    name: "ifp_operator_build_info",
    help: "Always 1; the operator's version and the commit it was built from, as labels",
    labelNames: ["version", "commit"],
    registers,
  }).set(buildInfo(), 1);
  return {
    registry,
    // The names controller-runtime and client-go export, so that dashboards and alerts made for
    // Kubernetes operators work as they are. `controller` is the kind (agent, relay, ...).
    shared: {
      reconcileTotal: new Counter({
        name: "controller_runtime_reconcile_total",
        help: "Total number of reconciliations per controller",
        labelNames: ["controller", "result"],
        registers,
      }),
      reconcileErrors: new Counter({
        name: "controller_runtime_reconcile_errors_total",
        help: "Total number of reconciliation errors per controller",
        labelNames: ["controller"],
        registers,
      }),
      reconcileTime: new Histogram({
        name: "controller_runtime_reconcile_time_seconds",
        help: "Length of time per reconciliation per controller",
        labelNames: ["controller"],
        buckets: durations,
        registers,
      }),
      queueDepth: new Gauge({
        name: "workqueue_depth",
        help: "Current depth of workqueue",
        labelNames: ["name"],
        registers,
      }),
      queueAdds: new Counter({
        name: "workqueue_adds_total",
        help: "Total number of adds handled by workqueue",
        labelNames: ["name"],
        registers,
      }),
      queueDuration: new Histogram({
        name: "workqueue_queue_duration_seconds",
        help: "How long in seconds an item stays in workqueue before being requested",
        labelNames: ["name"],
        buckets: durations,
        registers,
      }),
      workDuration: new Histogram({
        name: "workqueue_work_duration_seconds",
        help: "How long in seconds processing an item from workqueue takes",
        labelNames: ["name"],
        buckets: durations,
        registers,
      }),
      activeWorkers: new Gauge({
        name: "controller_runtime_active_workers",
        help: "Number of currently used workers per controller",
        labelNames: ["controller"],
        registers,
      }),
      queueRetries: new Counter({
        name: "workqueue_retries_total",
        help: "Total number of retries handled by workqueue",
        labelNames: ["name"],
        registers,
      }),
      restRequests: new Counter({
        name: "rest_client_requests_total",
        help: "Number of HTTP requests, partitioned by status code, method, and host.",
        labelNames: ["code", "method", "host"],
        registers,
      }),
      leader: new Gauge({
        name: "leader_election_master_status",
        help: "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master",
        labelNames: ["name"],
        registers,
      }),
    },
    reconciles: new Counter({
      name: "ifp_operator_reconciles_total",
      help: "Reconciles by kind and result (ok, conflict, error)",
      labelNames: ["kind", "result"],
      registers: [registry],
    }),
    errors: new Counter({
      name: "ifp_operator_reconcile_errors_total",
      help: "Reconciles that failed and were backed off, by kind",
      labelNames: ["kind"],
      registers: [registry],
    }),
    duration: new Histogram({
      name: "ifp_operator_reconcile_duration_seconds",
      help: "Reconcile duration by kind",
      labelNames: ["kind"],
      buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
      registers: [registry],
    }),
    queueDepth: new Gauge({
      name: "ifp_operator_queue_depth",
      help: "Keys waiting in the work queue, by kind",
      labelNames: ["kind"],
      registers: [registry],
    }),
    natsAccountConnections: new Gauge({
      name: "ifp_operator_nats_account_connections",
      help: "Connections open now in the pool into the runtimes' and tenants' NATS accounts",
      registers: [registry],
      collect() {
        if (pool) this.set(pool().open);
      },
    }),
    natsAccountConnects: new Counter({
      name: "ifp_operator_nats_account_connects_total",
      help: "Connections the operator opened into the runtimes' and tenants' NATS accounts",
      registers: [registry],
      collect() {
        if (!pool) return;
        this.reset();
        this.inc(pool().opened);
      },
    }),
    /** Where the two pool metrics above are read from (the manager's NATS account pool). */
    readPoolFrom(read: () => PoolReading): void {
      pool = read;
    },
    resyncs: new Counter({
      name: "ifp_operator_resyncs_total",
      help: "Periodic resyncs: each queues every Agent and Relay the caches hold (--resync)",
      registers: [registry],
    }),
    writes: new Counter({
      name: "ifp_operator_api_writes_total",
      help: "Writes to the API server by verb and kind (a steady state makes none)",
      labelNames: ["verb", "kind"],
      registers: [registry],
    }),
    leader: new Gauge({
      name: "ifp_operator_leader",
      help: "1 while this replica holds the leader lease",
      registers: [registry],
    }),
    informerRestarts: new Gauge({
      name: "ifp_operator_informer_restarts",
      help: "Informer restarts after list or watch failures",
      registers: [registry],
    }),
  };
}
