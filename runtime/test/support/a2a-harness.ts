// What the A2A tests share: the ifp-runtime command started as a user runs it (its own process,
// real TLS and NATS), and the official A2A JS SDK's clients trusting the test CA.
import { randomUUID } from "node:crypto";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import {
  ClientFactory,
  ClientFactoryOptions,
  DefaultAgentCardResolver,
  JsonRpcTransportFactory,
  RestTransportFactory,
} from "@a2a-js/sdk/client";
import { Agent as Dispatcher, fetch as undiciFetch } from "undici";
import { waitFor } from "../../../e2e/support/ports.ts";
import { spawnProcess, type ManagedProcess } from "../../../e2e/support/process.ts";
import type { Tls } from "./agent-harness.ts";
import { untilReady } from "./runtime-process.ts";

const BIN = new URL("../../bin/ifp-runtime.ts", import.meta.url).pathname;

/**
 * `ifp-runtime agent` with the manifest `dir`/agent.yaml and the signing key `keyFile`, on the
 * given ports of loopback (metrics on one the system picks: nothing reads them), once its /readyz
 * answers 200; a runtime that ends before that fails the start at once, with its log (which says
 * EADDRINUSE when one of the ports was taken: start it under onFreePorts). `args` are added (e.g.
 * `--a2a-grpc-port`).
 */
export async function spawnRuntime(opts: {
  name: string;
  dir: string;
  keyFile: string;
  tls: Tls;
  natsUrl: string;
  port: number;
  localApiPort: number;
  args?: string[];
  /** Bearer tokens A2A clients may present: written to `dir`/a2a-tokens, passed as --a2a-token-file. */
  tokens?: string[];
  logLevel?: string;
}): Promise<ManagedProcess> {
  const { tls } = opts;
  const tokenFile = join(opts.dir, "a2a-tokens");
  if (opts.tokens) writeFileSync(tokenFile, opts.tokens.map((t) => `${t}\n`).join(""));
  const runtime = spawnProcess(
    opts.name,
    process.execPath,
    [
      BIN,
      "agent",
      ...["--manifest", join(opts.dir, "agent.yaml"), "--signing-key", opts.keyFile],
      ...(opts.tokens ? ["--a2a-token-file", tokenFile] : []),
      ...(opts.args ?? []),
      ...["--port", String(opts.port), "--local-api-port", String(opts.localApiPort), "--host", "127.0.0.1"],
      ...["--metrics-port", "0"],
      ...["--tls-cert", tls.files.cert, "--tls-key", tls.files.key, "--ca-file", tls.files.ca, "--nats", opts.natsUrl],
    ],
    { env: { ...process.env, IFP_LOG_LEVEL: opts.logLevel ?? "warn" } },
  );
  await untilReady(runtime, `https://localhost:${opts.port}`, tls.ca);
  return runtime;
}

/** The hand-off of the A2A task `taskId` to the test's application `handler` (agent-harness startHandler), once it got it. */
export async function handedOffTo(
  handler: { received: { body: any; raw: string; headers: Record<string, unknown> }[] },
  taskId: string,
  timeoutMs = 15_000,
) {
  let found: (typeof handler.received)[number] | undefined;
  await waitFor(
    `the hand-off of task ${taskId}`,
    async () => {
      found = handler.received.find((r) => r.body.headers.extensions?.a2a?.task_id === taskId);
      return found !== undefined;
    },
    timeoutMs,
  );
  return found!;
}

/** The test's application on the local API `localApi`: a POST of JSON (a task update, a reply to the outbox). */
export async function localPostTo(localApi: string, path: string, body: unknown) {
  const res = await fetch(`${localApi}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as any };
}

/** fetch trusting the test CA, with the bearer token (or none). */
export function fetchWith(ca: string, token: string | undefined): typeof fetch {
  const dispatcher = new Dispatcher({ connect: { ca } });
  return ((input: string | URL | Request, init?: RequestInit) => {
    const headers = new Headers(init?.headers);
    if (token) headers.set("authorization", `Bearer ${token}`);
    return undiciFetch(input as string, { ...(init as object), headers, dispatcher } as never);
  }) as unknown as typeof fetch;
}

/** The SDK's client factory over both bindings, the preferred one first when named. */
export function clientFactory(ca: string, token: string | undefined, preferred?: "JSONRPC" | "HTTP+JSON") {
  const fetchImpl = fetchWith(ca, token);
  return new ClientFactory(
    ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
      transports: [new JsonRpcTransportFactory({ fetchImpl }), new RestTransportFactory({ fetchImpl })],
      cardResolver: new DefaultAgentCardResolver({ fetchImpl }),
      ...(preferred ? { preferredTransports: [preferred] } : {}),
    }),
  );
}

/** The SDK's SendMessage request: a user's text, answered at once (returnImmediately), with an inline push config. */
export const userMessage = <Push = undefined>(
  text: string,
  extra: { messageId?: string; taskId?: string; push?: Push } = {},
) => ({
  message: {
    messageId: extra.messageId ?? randomUUID(),
    contextId: "",
    taskId: extra.taskId ?? "",
    role: 1 as const,
    parts: [{ content: { $case: "text" as const, value: text }, metadata: undefined, filename: "", mediaType: "" }],
    metadata: undefined,
    extensions: [],
    referenceTaskIds: [],
  },
  configuration: {
    acceptedOutputModes: [],
    historyLength: undefined,
    returnImmediately: true,
    taskPushNotificationConfig: extra.push,
  },
  metadata: undefined,
  tenant: "",
});
