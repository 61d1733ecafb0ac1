// The /healthz and /readyz probes of the agent's and the relay's HTTPS servers.
import type { FastifyInstance } from "fastify";
import { unavailable } from "../protocol/errors.ts";

/** /healthz (the process serves) and /readyz (NATS reached, streams in place); /metrics has its own listener. */
export function registerProbes(app: FastifyInstance, ready: () => boolean): void {
  app.get("/healthz", async () => ({ status: "ok" }));
  app.get("/readyz", async () => {
    if (!ready()) throw unavailable("not ready: NATS JetStream is not reachable yet");
    return { status: "ok" };
  });
}
