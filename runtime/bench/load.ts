import { readFileSync } from "node:fs";
import { Agent, request } from "node:https";

export interface LoadResult {
  concurrency: number;
  requests: number;
  ok: number;
  errors: number;
  /** The statuses of the errors and how many of each (0: no answer; negative: a refused body with that status). */
  errorStatuses?: Record<string, number>;
  seconds: number;
  perSecond: number;
  p50ms: number;
  p99ms: number;
}

export function percentile(sorted: number[], p: number): number {
  if (!sorted.length) return 0;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

/**
 * POST `bodies` to `url` with `concurrency` requests in flight over keep-alive TLS
 * connections; counts answers with `okStatus` and measures latency per request. With `okBody`,
 * an answer counts only when its body passes too (a JSON-RPC error comes with 200).
 */
export async function postLoad(
  url: string,
  bodies: Buffer[],
  concurrency: number,
  ca: string,
  okStatus = 202,
  extraHeaders: Record<string, string> = {},
  okBody?: (body: string) => boolean,
): Promise<LoadResult> {
  const agent = new Agent({ keepAlive: true, maxSockets: concurrency, ca });
  const u = new URL(url);
  const one = (body: Buffer) =>
    new Promise<number>((resolve) => {
      const req = request(
        {
          host: u.hostname,
          port: u.port,
          path: u.pathname,
          method: "POST",
          agent,
          headers: { ...extraHeaders, "content-type": "application/json", "content-length": body.length },
        },
        (res) => {
          if (!okBody) {
            res.resume();
            res.on("end", () => resolve(res.statusCode ?? 0));
            return;
          }
          const chunks: Buffer[] = [];
          res.on("data", (c: Buffer) => chunks.push(c));
          res.on("end", () =>
            resolve(okBody(Buffer.concat(chunks).toString("utf8")) ? (res.statusCode ?? 0) : -(res.statusCode ?? 0)),
          );
        },
      );
      req.on("error", () => resolve(0));
      req.end(body);
    });
  try {
    return await drive(bodies, concurrency, one, okStatus);
  } finally {
    agent.destroy();
  }
}

/**
 * `requests` sent by `concurrency` callers at once, each waiting for its answer before the next,
 * through `one`, which resolves to the answer's status (`okStatus` counted as accepted).
 */
export async function drive<T>(
  requests: T[],
  concurrency: number,
  one: (request: T) => Promise<number>,
  okStatus: number,
): Promise<LoadResult> {
  const latencies: number[] = [];
  let next = 0;
  let ok = 0;
  let errors = 0;
  const errorStatuses: Record<string, number> = {};
  const started = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < requests.length) {
        const item = requests[next++]!;
        const t0 = performance.now();
        const status = await one(item);
        latencies.push(performance.now() - t0);
        if (status === okStatus) ok++;
        else {
          errors++;
          errorStatuses[status] = (errorStatuses[status] ?? 0) + 1;
        }
      }
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  latencies.sort((a, b) => a - b);
  return {
    concurrency,
    requests: requests.length,
    ok,
    errors,
    ...(errors ? { errorStatuses } : {}),
    seconds: round(seconds),
    perSecond: round(ok / seconds),
    p50ms: round(percentile(latencies, 50)),
    p99ms: round(percentile(latencies, 99)),
  };
}

export const round = (n: number, digits = 2) => Math.round(n * 10 ** digits) / 10 ** digits;

/** User + system CPU seconds a process has used so far, from /proc (undefined elsewhere). */
export function cpuSeconds(pid: number): number | undefined {
  try {
    // The fields after the command name, which is in parentheses and may hold spaces.
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    // utime and stime (fields 14 and 15 of proc(5)), in clock ticks of 1/100 s on Linux.
    return (Number(fields[11]) + Number(fields[12])) / 100;
  } catch {
    return undefined;
  }
}

/** Peak resident set (VmHWM) of a process, in MiB, from /proc. */
export function peakRssMiB(pid: number): number | undefined {
  try {
    const status = readFileSync(`/proc/${pid}/status`, "utf8");
    const m = /VmHWM:\s+(\d+) kB/.exec(status);
    return m ? round(Number(m[1]) / 1024, 1) : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Messages the NATS clients whose connection name starts with `namePrefix` have sent to the
 * server (publishes and requests, each one a round trip when it waits for an answer), from
 * the server's monitoring endpoint (`http_port` in its configuration).
 */
export async function natsMessagesIn(monitorPort: number, namePrefix: string): Promise<number> {
  const res = await fetch(`http://127.0.0.1:${monitorPort}/connz?limit=1024`);
  const body = (await res.json()) as { connections?: { name?: string; in_msgs: number }[] };
  return (body.connections ?? []).filter((c) => c.name?.startsWith(namePrefix)).reduce((n, c) => n + c.in_msgs, 0);
}
