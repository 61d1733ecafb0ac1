import { request } from "node:https";

export interface HttpsResponse {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
  json<T = any>(): T;
}

/** One HTTPS request trusting `ca`; the body may be a string, a Buffer or a generator of chunks (sent chunked). */
const hostHeader = (headers: Record<string, string> | undefined) =>
  headers && Object.entries(headers).find(([k]) => k.toLowerCase() === "host")?.[1];

export function httpsRequest(
  url: string,
  opts: {
    method?: string;
    headers?: Record<string, string>;
    body?: string | Buffer | (() => AsyncGenerator<Buffer>);
    ca?: string;
    timeoutMs?: number;
  } = {},
): Promise<HttpsResponse> {
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      {
        method: opts.method ?? "GET",
        headers: opts.headers,
        ca: opts.ca,
        timeout: opts.timeoutMs ?? 15_000,
        // A Host header of the caller's choosing is sent as written; TLS still checks the URL's name.
        ...(hostHeader(opts.headers) !== undefined ? { servername: new URL(url).hostname } : {}),
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () => {
          const text = Buffer.concat(chunks).toString("utf8");
          resolve({ status: res.statusCode ?? 0, headers: res.headers, text, json: () => JSON.parse(text) });
        });
        res.on("error", reject);
      },
    );
    req.on("timeout", () => req.destroy(new Error("request timed out")));
    req.on("error", reject);
    const body = opts.body;
    if (typeof body === "function") {
      void (async () => {
        try {
          for await (const chunk of body()) {
            if (req.destroyed) return;
            if (!req.write(chunk)) await new Promise((r) => req.once("drain", r));
          }
          req.end();
        } catch (err) {
          req.destroy(err as Error);
        }
      })();
    } else {
      req.end(body);
    }
  });
}
