import type { FastifyInstance } from "fastify";
import { unavailable } from "../protocol/errors.ts";
import type { RuntimeMetrics } from "./metrics.ts";

/** /healthz (the process serves), /readyz (NATS reached, streams in place) and /metrics. */
export function registerProbes(app: FastifyInstance, ready: () => boolean, metrics: RuntimeMetrics): void {
  app.get("/healthz", async () => ({ status: "ok" }));
  app.get("/readyz", async () => {
    if (!ready()) throw unavailable("not ready: NATS JetStream is not reachable yet");
    return { status: "ok" };
  });
  app.get("/metrics", async (_req, reply) => {
    reply.type(metrics.registry.contentType);
    return metrics.registry.metrics();
  });
}
