// The worker behind e2e/support/api-get.ts: one HTTPS GET to the API server with the admin client
// certificate, run on its own thread so that the test's thread can wait for it synchronously.
import { request } from "node:https";
import { runAsWorker } from "synckit";

export interface GetCall {
  url: string;
  ca: string;
  cert: string;
  key: string;
  timeoutMs: number;
}

export interface GetAnswer {
  status: number;
  body: string;
}

function get(call: GetCall): Promise<GetAnswer> {
  return new Promise((resolve, reject) => {
    const req = request(
      call.url,
      { ca: call.ca, cert: call.cert, key: call.key, headers: { accept: "application/json" }, timeout: call.timeoutMs },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString("utf8") }));
        res.on("error", reject);
      },
    );
    req.on("timeout", () => req.destroy(new Error(`no answer from ${call.url} within ${call.timeoutMs} ms`)));
    req.on("error", reject);
    req.end();
  });
}

runAsWorker(get);
