// Sending through the local API, and the other side of it: scripted peer inboxes on HTTPS and
// a notification sink, each recording what it gets.
import { createServer as createHttpServer, type Server } from "node:http";
import { createServer as createHttpsServer } from "node:https";
import { waitFor } from "../../../e2e/support/ports.ts";
import { LocalApiClient, LocalApiError, type OutboxRequest } from "../../src/client/local.ts";
import type { Tls } from "./agent-harness.ts";
import { metricValue } from "./probes.ts";

/** Through the typed client the package ships, as an application would. */
export async function send(localApiUrl: string, body: unknown): Promise<{ status: number; body: any }> {
  try {
    return { status: 202, body: await new LocalApiClient(localApiUrl).send(body as OutboxRequest) };
  } catch (err) {
    if (!(err instanceof LocalApiError)) throw err;
    return { status: err.status, body: { code: err.code, message: err.message } };
  }
}

export async function record(localApiUrl: string, id: string): Promise<any> {
  try {
    return await new LocalApiClient(localApiUrl).status(id);
  } catch (err) {
    if (err instanceof LocalApiError && err.status === 404) return undefined;
    throw err;
  }
}

/** Polls the delivery record until it reaches `state`; a timeout names the last record seen. */
export async function untilState(localApiUrl: string, id: string, state: string, timeoutMs = 30_000) {
  let last: unknown;
  try {
    return await waitFor(
      `${id} to be ${state}`,
      async () => {
        const r = await record(localApiUrl, id);
        last = r;
        return r?.state === state ? r : undefined;
      },
      timeoutMs,
      100,
    );
  } catch (err) {
    throw new Error(`${(err as Error).message}; last record: ${JSON.stringify(last) ?? "none"}`);
  }
}

/**
 * A peer's inbox on HTTPS whose answers the test scripts (after `delayMs`, when given); it records
 * every request, its answer, and the most requests it had under way at once.
 */
export async function scriptedPeer(
  tls: Tls,
  answer: (n: number) => { status: number; headers?: Record<string, string>; delayMs?: number },
) {
  const requests: { body: any; headers: Record<string, unknown>; at: number; status?: number }[] = [];
  const load = { inFlight: 0, max: 0 };
  const server = createHttpsServer({ cert: tls.cert, key: tls.key }, (req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      // A peer that publishes no identity or capability document (both optional, spec 4.1).
      if (req.url?.endsWith("/identity") || req.url?.endsWith("/capabilities")) {
        res.writeHead(404).end();
        return;
      }
      const request = {
        body: JSON.parse(Buffer.concat(chunks).toString() || "null"),
        headers: req.headers,
        at: Date.now(),
        status: undefined as number | undefined,
      };
      requests.push(request);
      const a = answer(requests.length);
      load.max = Math.max(load.max, ++load.inFlight);
      setTimeout(() => {
        load.inFlight--;
        if (res.destroyed) return;
        request.status = a.status;
        res.writeHead(a.status, { "content-type": "application/json", ...a.headers });
        res.end(
          JSON.stringify(
            a.status < 300
              ? { status: "accepted" }
              : { status: "error", code: "scripted", message: `answer ${a.status}` },
          ),
        );
      }, a.delayMs ?? 0);
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const addr = server.address();
  const port = typeof addr === "object" && addr ? addr.port : 0;
  return {
    url: `https://localhost:${port}`,
    port,
    requests,
    load,
    server,
    close: () =>
      new Promise<void>((r) => {
        server.close(() => r());
        server.closeAllConnections();
      }),
  };
}

/** Receives spec.notify.url notifications. */
export async function notifySink() {
  const got: any[] = [];
  const server: Server = createHttpServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      got.push(JSON.parse(Buffer.concat(chunks).toString()));
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const addr = server.address();
  return {
    url: `http://127.0.0.1:${typeof addr === "object" && addr ? addr.port : 0}/notify`,
    got,
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}

/** ifp_outbound_deliveries_total of a running agent, by result. */
export async function outboundResults(agent: { scrape(): Promise<string> }): Promise<Record<string, number>> {
  const text = await agent.scrape();
  const out: Record<string, number> = {};
  for (const result of ["delivered", "retry", "failed", "refused", "undeliverable"])
    out[result] = metricValue(text, "ifp_outbound_deliveries_total", { result });
  return out;
}
