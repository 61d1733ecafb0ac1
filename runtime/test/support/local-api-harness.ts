import { writeFileSync, renameSync } from "node:fs";
import { join } from "node:path";
import { httpsRequest, type HttpsResponse } from "../../../e2e/support/https.ts";
import { waitFor } from "../../../e2e/support/ports.ts";
import { startAgent, type RunningAgent } from "../../src/agent/main.ts";
import { agentNames } from "../../src/agent/names.ts";
import { LocalApiClient } from "../../src/client/local.ts";
import type { AgentSpecInput } from "../../src/resources/agent.ts";
import type { Tls } from "./agent-harness.ts";
import { tempDir, writeAgentManifest, writeKey, type TestIdentity } from "./fixtures.ts";
import { withRuntimeLog, type LogLine } from "./runtime-log.ts";

/** Write a token file the way a Secret volume changes: a new file renamed over the old one. */
export function writeToken(path: string, token: string): void {
  writeFileSync(`${path}.new`, `${token}\n`);
  renameSync(`${path}.new`, path);
}

export type LocalApiAgent = RunningAgent & {
  dir: string;
  tokenFile: string;
  /** A client of the TLS listener with the current token (or `token`). */
  remote(token?: string): LocalApiClient;
  /** A client of the loopback listener. */
  local(): LocalApiClient;
  /** One raw request to the TLS listener. */
  request(
    path: string,
    opts?: { method?: string; headers?: Record<string, string>; body?: string },
  ): Promise<HttpsResponse>;
  /** Post a message into the agent's inbox, as a peer would. */
  deliver(message: unknown): Promise<HttpsResponse>;
  /** Messages handed out by the application stream and not yet acknowledged, as JetStream counts them. */
  unacked(): Promise<number>;
  /** Rotate the token: write it into the token file; remote() uses it from now on. */
  setToken(token: string): void;
  /** Its log lines (debug and up), as kept in memory; printed when a test fails. */
  logLines(): LogLine[];
};

/** Start the agent mode in-process with the local API's TLS listener, as the operator renders it. */
export async function runLocalApiAgent(opts: {
  self: TestIdentity;
  spec: Omit<AgentSpecInput, "agentId">;
  natsUrl: string;
  tls: Tls;
  token?: string;
  port?: number;
}): Promise<LocalApiAgent> {
  const dir = tempDir();
  const tokenFile = join(dir, "token");
  let token = opts.token ?? "t".repeat(43);
  writeToken(tokenFile, token);
  const running = await withRuntimeLog(`agent ${opts.self.agentId} (in-process)`, (logger) =>
    startAgent({
      manifest: writeAgentManifest(dir, { agentId: opts.self.agentId, ...opts.spec }),
      port: opts.port ?? 0,
      host: "127.0.0.1",
      tlsCert: opts.tls.files.cert,
      tlsKey: opts.tls.files.key,
      signingKey: writeKey(dir, opts.self),
      nats: { url: opts.natsUrl },
      localApiPort: 0,
      localApiTlsPort: 0,
      localApiTokenFile: tokenFile,
      caFile: opts.tls.files.ca,
      logger,
    }),
  );
  await waitFor(
    "agent ready",
    async () => (await httpsRequest(`${running.url}/readyz`, { ca: opts.tls.ca })).status === 200,
    30_000,
  ).catch(async (err: unknown) => {
    await running.close().catch(() => {});
    throw err;
  });
  const names = agentNames(opts.self.agentId);
  return Object.assign(running, {
    dir,
    tokenFile,
    remote: (t?: string) => new LocalApiClient(running.localApiTlsUrl!, { token: t ?? token, ca: opts.tls.ca }),
    local: () => new LocalApiClient(running.localApiUrl),
    request: (path: string, o: { method?: string; headers?: Record<string, string>; body?: string } = {}) =>
      httpsRequest(`${running.localApiTlsUrl}${path}`, {
        method: o.method,
        headers: o.headers,
        body: o.body,
        ca: opts.tls.ca,
      }),
    deliver: (message: unknown) =>
      httpsRequest(`${running.url}/.well-known/agent/inbox`, {
        method: "POST",
        headers: { "content-type": "application/json; charset=utf-8" },
        body: JSON.stringify(message),
        ca: opts.tls.ca,
      }),
    unacked: async () => (await running.nats.jsm.consumers.info(names.inboxStream, names.appConsumer)).num_ack_pending,
    setToken(t: string) {
      token = t;
      writeToken(tokenFile, t);
    },
  });
}
