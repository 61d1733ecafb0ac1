// /healthz, /readyz and /metrics over plain HTTP (cluster-internal probes and scraping).
import Fastify, { type FastifyInstance } from "fastify";
import type { Registry } from "prom-client";

export interface HealthServer {
  /** http://127.0.0.1:<port> of the health endpoints, when served. */
  url: string | undefined;
  metricsUrl: string | undefined;
  close(): Promise<void>;
}

/**
 * Serve health and metrics, on one port when both ports are equal. `ready` says why not, or
 * undefined when ready.
 */
export async function serveHealth(
  opts: { healthPort?: number; metricsPort?: number; host?: string },
  notReady: () => string | undefined,
  registry: Registry,
): Promise<HealthServer> {
  const servers: FastifyInstance[] = [];
  const host = opts.host ?? "0.0.0.0";
  const listen = async (app: FastifyInstance, port: number) => {
    await app.listen({ port, host });
    servers.push(app);
    const a = app.server.address();
    return `http://127.0.0.1:${typeof a === "object" && a ? a.port : port}`;
  };
  const metrics = (app: FastifyInstance) =>
    app.get("/metrics", async (_req, reply) => reply.type(registry.contentType).send(await registry.metrics()));
  let url: string | undefined;
  let metricsUrl: string | undefined;
  const shared =
    opts.healthPort !== undefined && (opts.metricsPort === undefined || opts.metricsPort === opts.healthPort);
  if (opts.healthPort !== undefined) {
    const app = Fastify({ logger: false });
    app.get("/healthz", async () => ({ status: "ok" }));
    app.get("/readyz", async (_req, reply) => {
      const why = notReady();
      return why ? reply.code(503).send({ status: "error", code: "unavailable", message: why }) : { status: "ok" };
    });
    if (shared) metrics(app);
    url = await listen(app, opts.healthPort);
    if (shared) metricsUrl = url;
  }
  if (opts.metricsPort !== undefined && !shared) {
    const app = Fastify({ logger: false });
    metrics(app);
    metricsUrl = await listen(app, opts.metricsPort);
  }
  return { url, metricsUrl, close: () => Promise.all(servers.map((s) => s.close())).then(() => {}) };
}
