import { writeFileSync } from "node:fs";
import { createServer, type IncomingMessage, type Server } from "node:http";
import { join } from "node:path";
import { afterAll, beforeAll } from "vitest";
import { startNats, type NatsServer } from "../../../e2e/support/nats.ts";
import { localhostTls } from "../../../e2e/support/tls.ts";
import { httpsRequest, type HttpsResponse } from "../../../e2e/support/https.ts";
import { waitFor } from "../../../e2e/support/ports.ts";
import { startAgent, type RunningAgent } from "../../src/agent/main.ts";
import type { AgentSpecInput } from "../../src/resources/agent.ts";
import type { NatsLayoutName } from "../../src/nats/layout.ts";
import { onFreePorts, startedTogether } from "./free-ports.ts";
import { tempDir, writeAgentManifest, writeKey, type TestIdentity } from "./fixtures.ts";
import { withRuntimeLog, type LogLine } from "./runtime-log.ts";

export type Tls = Awaited<ReturnType<typeof localhostTls>>;

/** One nats-server and test TLS for a whole test file: started before its tests, closed after. */
export function withNatsAndTls(set: (nats: NatsServer, tls: Tls) => void): void {
  let nats: NatsServer | undefined;
  beforeAll(async () => {
    const [n, t] = await Promise.all([startNats(), localhostTls()]);
    nats = n;
    set(n, t);
  });
  afterAll(async () => {
    await nats?.close();
  });
}

function writeFile(dir: string, name: string, content: string): string {
  const path = join(dir, name);
  writeFileSync(path, content, { mode: 0o600 });
  return path;
}

/**
 * Start the agent mode in-process over real TLS on a free loopback port. Its log (debug and up)
 * is kept, printed when a test fails, and read by `logLines()`.
 */
export async function runAgent(opts: {
  self: TestIdentity;
  spec: Omit<AgentSpecInput, "agentId">;
  natsUrl: string;
  /** The runtime's NATS credential (a `.creds` file), as the operator issues it. */
  natsCredsFile?: string;
  tls: Tls;
  dir?: string;
  port?: number;
  introductionSecretFile?: string;
  /** The agent's X25519 encryption key (PKCS#8 PEM), written beside the signing key. */
  encryptionKey?: string;
  /** The signing key's file (default: self's key written into dir), e.g. signing.key of a mounted key set. */
  signingKeyFile?: string;
  /** The hand-off secret, written beside the key: hand-offs are signed with it. */
  handoffSecret?: string;
  /** The Agent resource it runs for, as the operator renders it: its JetStream data is then named from namespace/name. */
  resource?: { name: string; namespace: string };
  /** The Agent resource's metadata.annotations. */
  annotations?: Record<string, string>;
  /** Wait for /readyz to answer 200 before returning (default true). */
  waitReady?: boolean;
  /** `--nats-layout` (default per-agent). */
  natsLayout?: NatsLayoutName;
}): Promise<
  RunningAgent & {
    post(body: unknown, headers?: Record<string, string>): Promise<HttpsResponse>;
    get(path: string, headers?: Record<string, string>): Promise<HttpsResponse>;
    scrape(): Promise<string>;
    logLines(): LogLine[];
  }
> {
  const dir = opts.dir ?? tempDir();
  const manifest = writeAgentManifest(
    dir,
    { agentId: opts.self.agentId, ...opts.spec },
    opts.resource?.name,
    opts.resource?.namespace,
    opts.annotations,
  );
  const running = await withRuntimeLog(`agent ${opts.self.agentId} (in-process)`, (logger) =>
    startAgent({
      manifest,
      port: opts.port ?? 0,
      host: "127.0.0.1",
      tlsCert: opts.tls.files.cert,
      tlsKey: opts.tls.files.key,
      signingKey: opts.signingKeyFile ?? writeKey(dir, opts.self),
      encryptionKey: opts.encryptionKey ? writeFile(dir, "encryption.key", opts.encryptionKey) : undefined,
      nats: { url: opts.natsUrl, ...(opts.natsCredsFile ? { credsFile: opts.natsCredsFile } : {}) },
      localApiPort: 0,
      metricsPort: 0,
      introductionSecretFile: opts.introductionSecretFile,
      handoffSecretFile: opts.handoffSecret ? writeFile(dir, "handoff.key", opts.handoffSecret) : undefined,
      caFile: opts.tls.files.ca,
      ...(opts.natsLayout ? { natsLayout: opts.natsLayout } : {}),
      logger,
    }),
  );
  if (opts.waitReady !== false)
    await waitFor(
      "agent ready",
      async () => (await httpsRequest(`${running.url}/readyz`, { ca: opts.tls.ca })).status === 200,
      30_000,
    ).catch(async (err: unknown) => {
      await running.close().catch(() => {});
      throw err;
    });
  return Object.assign(running, {
    post: (body: unknown, headers: Record<string, string> = {}) =>
      httpsRequest(`${running.url}/.well-known/agent/inbox`, {
        method: "POST",
        headers: { "content-type": "application/json; charset=utf-8", accept: "application/json", ...headers },
        body: typeof body === "string" ? body : JSON.stringify(body),
        ca: opts.tls.ca,
      }),
    get: (path: string, headers: Record<string, string> = {}) =>
      httpsRequest(`${running.url}${path}`, { headers, ca: opts.tls.ca }),
    /** The Prometheus exposition from the plain-HTTP metrics listener. */
    scrape: () => scrapeMetrics(running.metricsUrl),
  });
}

/** A plain HTTP stand-in for the user's application behind spec.handler.url; it records what it gets. */
export async function startHandler(status: () => number = () => 200) {
  const received: { body: any; raw: string; headers: IncomingMessage["headers"] }[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const code = status();
      const raw = Buffer.concat(chunks).toString();
      if (code < 300) received.push({ body: JSON.parse(raw), raw, headers: req.headers });
      res.writeHead(code).end();
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const addr = server.address();
  const port = typeof addr === "object" && addr ? addr.port : 0;
  return {
    url: `http://127.0.0.1:${port}/messages`,
    port,
    received,
    close: () => new Promise<void>((r) => server.close(() => r())),
    /** Stop listening (connections refused) and start again on the same port. */
    async down() {
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    },
    async up() {
      await new Promise<void>((r) => server.listen(port, "127.0.0.1", r));
    },
  };
}

/** GET /metrics from a runtime's plain-HTTP metrics listener; fails when it answers anything but 200. */
export async function scrapeMetrics(metricsUrl: string | undefined): Promise<string> {
  if (!metricsUrl) throw new Error("the runtime has no metrics listener");
  const res = await fetch(`${metricsUrl}/metrics`);
  const text = await res.text();
  if (res.status !== 200) throw new Error(`/metrics answered ${res.status}: ${text}`);
  return text;
}

/** The flags of `ifp-runtime agent` run as a child process on loopback: its manifest and key, TLS, NATS, any local API port. */
export function agentProcessArgs(opts: {
  manifest: string;
  key: string;
  port: number;
  tls: Tls;
  natsUrl: string;
}): string[] {
  return [
    "agent",
    ...["--manifest", opts.manifest, "--signing-key", opts.key, "--local-api-port", "0"],
    ...["--port", String(opts.port), "--metrics-port", "0", "--host", "127.0.0.1"],
    ...["--tls-cert", opts.tls.files.cert, "--tls-key", opts.tls.files.key, "--ca-file", opts.tls.files.ca],
    ...["--nats", opts.natsUrl],
  ];
}

type TestAgent = Awaited<ReturnType<typeof runAgent>>;
type TestAgentOptions = Omit<Parameters<typeof runAgent>[0], "natsUrl" | "tls" | "port">;

/**
 * Two agents that name each other's URL (each one's options made from the other's), and any
 * `others`, started together on ports chosen together, and again when one was taken meanwhile.
 */
export function runPeers<const O extends readonly TestAgentOptions[]>(
  env: { natsUrl: string; tls: Tls },
  first: (secondUrl: string) => TestAgentOptions,
  second: (firstUrl: string) => TestAgentOptions,
  ...others: O
): Promise<[TestAgent, TestAgent, ...{ [K in keyof O]: TestAgent }]> {
  const url = (port: number) => `https://localhost:${port}`;
  return onFreePorts(["first", "second"], async (ports) => {
    const [a, b, ...rest] = await startedTogether(
      [
        runAgent({ ...env, ...first(url(ports.second)), port: ports.first }),
        runAgent({ ...env, ...second(url(ports.first)), port: ports.second }),
        ...others.map((o) => runAgent({ ...env, ...o })),
      ],
      (agent) => agent.close(),
    );
    return [a!, b!, ...rest] as never;
  });
}
