import { Counter, collectDefaultMetrics, Histogram, Registry } from "prom-client";

/** The runtime's Prometheus metrics, one registry per process. */
export function createRuntimeMetrics(mode: "agent" | "relay") {
  const registry = new Registry();
  registry.setDefaultLabels({ mode });
  collectDefaultMetrics({ register: registry });
  return {
    registry,
    inbox: new Counter({
      name: "ifp_inbox_requests_total",
      help: "Inbox POSTs by result (accepted, duplicate or an error code)",
      labelNames: ["result"],
      registers: [registry],
    }),
    handler: new Counter({
      name: "ifp_handler_deliveries_total",
      help: "Deliveries of accepted messages to spec.handler.url by result",
      labelNames: ["result"],
      registers: [registry],
    }),
    deadLetters: new Counter({
      name: "ifp_dead_letters_total",
      help: "Messages moved to a dead-letter subject",
      labelNames: ["source"],
      registers: [registry],
    }),
    relay: new Counter({
      name: "ifp_relay_operations_total",
      help: "Relay operations by operation and result",
      labelNames: ["operation", "result"],
      registers: [registry],
    }),
    outbound: new Counter({
      name: "ifp_outbound_deliveries_total",
      help: "Outbound message delivery attempts by result",
      labelNames: ["result"],
      registers: [registry],
    }),
    handlerLatency: new Histogram({
      name: "ifp_handler_delivery_seconds",
      help: "Time for spec.handler.url to answer",
      buckets: [0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10],
      registers: [registry],
    }),
  };
}
export type RuntimeMetrics = ReturnType<typeof createRuntimeMetrics>;
