// A worker thread of the agent runtime (spec.runtime.workers, workers.ts): one more event loop
// serving the agent's HTTPS port — documents, probes and the inbox — with its own NATS connection,
// the pod's shared inbox limits and readiness; drained when the main loop asks, and its metrics
// handed to the main loop's /metrics. Everything else of the agent runs in the main loop.
import { isMainThread, type MessagePort, parentPort, workerData } from "node:worker_threads";
import { OperatorStreams } from "../nats/stream-keeper.ts";
import { Lifecycle, retry } from "../server/lifecycle.ts";
import { createRuntimeMetrics } from "../server/metrics.ts";
import { createLogger } from "../telemetry/log-format.ts";
import { startTracing } from "../telemetry/tracing.ts";
import { errorMessage } from "../util/errors.ts";
import { a2aOf, type AgentOptions, inboxParts, loadSelf, peersAndKeys, publicApp } from "./main.ts";
import {
  countRequests,
  type FromWorker,
  SharedState,
  type ToWorker,
  type WorkerData,
  workerMetrics,
} from "./workers.ts";

/** The module a worker thread runs: this one (AgentOptions.workerEntry). */
export const INBOX_WORKER = import.meta.url;

if (!isMainThread && parentPort && (workerData as WorkerData | undefined)?.kind === "ifp-inbox-worker")
  void serve(workerData as WorkerData, parentPort);

async function serve(data: WorkerData, port: MessagePort): Promise<void> {
  const send = (m: FromWorker) => port.postMessage(m);
  const log = createLogger({ level: data.logLevel, component: "ifp-runtime-agent", base: { worker: data.index } });
  const opts = { ...(data.opts as unknown as AgentOptions), logger: log };
  const tracing = startTracing({ mode: "agent", logger: log });
  const life = new Lifecycle(log);
  try {
    const self = await loadSelf(opts, log);
    const metrics = createRuntimeMetrics("agent");
    const shared = SharedState.attach(data);
    const outside = peersAndKeys(self, opts, life, log, shared);
    const stores = inboxParts(self, opts, outside, life, metrics, log);
    const state = { ready: false };
    life.background("event loop start-up", async (signal) => {
      await stores.nats.start(signal);
      // The main loop makes the streams and buckets; this one opens them once they are there.
      await retry(
        async () => {
          if (!shared.loopReady(0)) throw new Error("the main event loop is not ready yet");
          await stores.inbox.ensure(new OperatorStreams());
          await stores.states.ensure();
          await stores.peerCaps.ensure();
          await stores.conversations.ensure();
          await a2a?.ensure();
        },
        { signal, initialMs: 100, maxMs: 1_000, onError: () => undefined },
      );
      state.ready = true;
    });
    life.defer(
      "readiness",
      shared.report(data.index, () => state.ready && stores.nats.isConnected),
    );
    // The A2A face's routes, its limits and nonces shared; the main loop delivers its push notifications.
    const a2a = a2aOf(
      self,
      opts,
      outside,
      stores,
      log,
      shared.a2a && { ...shared.a2a, pushes: false, grpcPort: data.a2aGrpcPort },
    );
    const app = publicApp(opts, self, { outside, stores, metrics, life, log }, () => shared.podReady(), shared.limits);
    a2a?.register(app);
    countRequests(app, metrics, data.index);
    const host = opts.host ?? "0.0.0.0";
    await life.listen(app, { name: "HTTPS server", scheme: "https", port: data.port, host, reusePort: true });
    port.on("message", (m: ToWorker) => {
      if (m.type === "metrics")
        void metrics.registry
          .getMetricsAsJSON()
          .then((all) => send({ type: "metrics", id: m.id, metrics: workerMetrics(all) }));
      else if (m.type === "close")
        void life
          .close()
          .then(() => tracing.shutdown())
          .finally(() => process.exit(0));
    });
    send({ type: "listening" });
  } catch (err) {
    send({ type: "start-failed", error: errorMessage(err) });
    await life.close();
    process.exit(1);
  }
}
