// The `ifp-runtime` command (runtime/bin/ifp-runtime.ts): its flags and environment variables, read
// into the options of the agent or relay mode, which it starts and closes on SIGTERM or SIGINT.
import { parseArgs } from "node:util";
import type { Logger } from "pino";
import { INBOX_WORKER } from "../agent/inbox-worker.ts";
import { startAgent } from "../agent/main.ts";
import { MAX_WORKERS } from "../agent/workers.ts";
import { parseTrustedProxies } from "../server/http.ts";
import { createLogger } from "../telemetry/log-format.ts";
import { startTracing } from "../telemetry/tracing.ts";
import { METRICS_PORT } from "../server/metrics.ts";
import { errorMessage } from "../util/errors.ts";
import { NATS_LAYOUTS, type NatsLayoutName } from "../nats/layout.ts";
import { versionLine } from "../util/version.ts";

const USAGE = `usage:
  ifp-runtime agent --manifest FILE --port N --tls-cert FILE --tls-key FILE --signing-key FILE --nats URL
  ifp-runtime relay --manifest FILE --port N --tls-cert FILE --tls-key FILE --nats URL [--ca-file FILE]
                    [--trusted-proxies CIDRS] [--allow-private-targets CIDRS]
  ifp-runtime --version   the version and the commit it was built from

Every flag may also be given as an environment variable: IFP_MANIFEST, IFP_PORT, IFP_HOST,
IFP_TLS_CERT, IFP_TLS_KEY, IFP_SIGNING_KEY, IFP_NATS_URL, IFP_NATS_CREDS, IFP_NATS_USER,
IFP_NATS_PASSWORD, IFP_NATS_TOKEN, IFP_NATS_LAYOUT, IFP_CA_FILE, IFP_KUBECONFIG, IFP_LOCAL_API_PORT, IFP_TRUSTED_PROXIES, IFP_ALLOW_PRIVATE_TARGETS,
IFP_INTRODUCTION_SECRET_FILE, IFP_LOCAL_API_TLS_PORT, IFP_LOCAL_API_TOKEN_FILE, IFP_METRICS_PORT, IFP_WORKERS, IFP_LOG_LEVEL.
Tracing (OpenTelemetry) is configured by the standard OTEL_* variables only, e.g.
OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_TRACES_EXPORTER, OTEL_SERVICE_NAME, OTEL_TRACES_SAMPLER;
without them it is off (docs/tracing.md).

  --manifest FILE     the Agent or Relay resource (YAML or JSON), as kubectl apply takes it
  --port N            HTTPS port (default 8443)
  --host ADDR         listen address (default 0.0.0.0)
  --metrics-port N    plain-HTTP Prometheus listener serving /metrics (default 9090; 0 disables
                      it); the metrics are never served on the HTTPS port
  --tls-cert FILE     PEM certificate chain; plain HTTP is never served
  --tls-key FILE      PEM private key of the certificate
  --signing-key FILE  the agent's Ed25519 signing key, PKCS#8 PEM (agent mode)
  --encryption-key FILE
                      the agent's X25519 encryption key, PKCS#8 PEM (agent mode; without it
                      the agent cannot receive encrypted messages, docs/encryption.md)
  --nats URL          NATS server URL(s), comma separated
  --nats-creds FILE   NATS credentials file
  --nats-layout NAME  where the agent's JetStream objects are (agent mode): per-agent (default),
                      streams, buckets and consumers of its own account, which it makes; or
                      isolated, its tenant's shared streams through its account's imports, the
                      consumers made by the operator (needs --nats-creds; docs/scale.md)
  --nats-ca FILE      CA certificates (PEM) the NATS server's certificate is verified with,
                      instead of the system roots; re-read at every (re)connect
  --ca-file FILE      extra CA certificates (PEM) trusted for outbound HTTPS besides the system
                      roots, re-read when the file changes: peers, relays, the handler and
                      notify webhooks (agent mode); push webhooks (relay mode)
  --kubeconfig FILE   kubeconfig for Kubernetes Events outside a pod (in a pod: its service account)
  --local-api-port N  overrides spec.localApi.port (agent mode; loopback only)
  --introduction-secret-file FILE
                      introduction tokens accepted at IFP-5 level 0, one per line: the mounted
                      spec.inbox.introductionTokens Secret key (agent mode)
  --a2a-token-file FILE
                      bearer tokens A2A callers may present, one per line: the mounted
                      spec.a2a.authentication.bearerTokenSecret key (agent mode)
  --a2a-grpc-port N   the port of the A2A face's gRPC binding, TLS with the serving certificate
                      (agent mode, with spec.a2a.enabled; 0 picks a free port; none when omitted)
  --a2a-peer-token-file FILE
                      bearer tokens the agent presents to A2A agents it sends to, one a line
                      (card URL or https origin, a space, the token): the mounted
                      spec.a2a.peerTokenSecret key (agent mode)
  --handoff-secret-file FILE
                      the secret each hand-off to spec.handler.url is signed with
                      (Ifp-Handoff-Signature; agent mode)
  --trusted-proxies CIDRS
                      comma separated IPs or CIDR blocks of the proxies in front of the runtime:
                      only from these is X-Forwarded-For believed, for per-address limits
  --allow-private-targets CIDRS
                      comma separated IPs or CIDR blocks of special addresses (loopback, private,
                      link-local, ...) that peers, relays and webhooks may resolve to, besides
                      spec.network.allowPrivateTargets (the operator gives the cluster's networks)
  --local-api-tls-port N
                      also serve the local API over HTTPS on this port (0.0.0.0, the serving
                      certificate) for applications in other pods; needs --local-api-token-file
  --local-api-token-file FILE
                      the bearer token that listener requires; re-read when the file changes
  --workers N|auto    event loops serving the HTTPS port, each with its own NATS connection and
                      the inbox's rate limits shared (agent mode; 1 to 64, or auto: the
                      container's CPU limit, 1 without one); overrides spec.runtime.workers
`;

const OPTIONS = {
  manifest: { type: "string", env: "IFP_MANIFEST" },
  port: { type: "string", env: "IFP_PORT" },
  host: { type: "string", env: "IFP_HOST" },
  "tls-cert": { type: "string", env: "IFP_TLS_CERT" },
  "tls-key": { type: "string", env: "IFP_TLS_KEY" },
  "signing-key": { type: "string", env: "IFP_SIGNING_KEY" },
  "encryption-key": { type: "string", env: "IFP_ENCRYPTION_KEY" },
  nats: { type: "string", env: "IFP_NATS_URL" },
  "nats-creds": { type: "string", env: "IFP_NATS_CREDS" },
  "nats-user": { type: "string", env: "IFP_NATS_USER" },
  "nats-password": { type: "string", env: "IFP_NATS_PASSWORD" },
  "nats-token": { type: "string", env: "IFP_NATS_TOKEN" },
  "nats-ca": { type: "string", env: "IFP_NATS_CA" },
  "nats-layout": { type: "string", env: "IFP_NATS_LAYOUT" },
  "ca-file": { type: "string", env: "IFP_CA_FILE" },
  kubeconfig: { type: "string", env: "IFP_KUBECONFIG" },
  "local-api-port": { type: "string", env: "IFP_LOCAL_API_PORT" },
  "introduction-secret-file": { type: "string", env: "IFP_INTRODUCTION_SECRET_FILE" },
  "handoff-secret-file": { type: "string", env: "IFP_HANDOFF_SECRET_FILE" },
  "a2a-token-file": { type: "string", env: "IFP_A2A_TOKEN_FILE" },
  "a2a-peer-token-file": { type: "string", env: "IFP_A2A_PEER_TOKEN_FILE" },
  "a2a-grpc-port": { type: "string", env: "IFP_A2A_GRPC_PORT" },
  "trusted-proxies": { type: "string", env: "IFP_TRUSTED_PROXIES" },
  "allow-private-targets": { type: "string", env: "IFP_ALLOW_PRIVATE_TARGETS" },
  "local-api-tls-port": { type: "string", env: "IFP_LOCAL_API_TLS_PORT" },
  "local-api-token-file": { type: "string", env: "IFP_LOCAL_API_TOKEN_FILE" },
  "metrics-port": { type: "string", env: "IFP_METRICS_PORT" },
  workers: { type: "string", env: "IFP_WORKERS" },
  "log-level": { type: "string", env: "IFP_LOG_LEVEL" },
  help: { type: "boolean", short: "h" },
  version: { type: "boolean", short: "V" },
} as const;

type Flags = Partial<Record<keyof typeof OPTIONS, string>>;

class UsageError extends Error {}

/** The mode and flags of a command line (parseArgs, strict: an unknown flag throws). */
export function readFlags(argv: string[]): {
  mode: string | undefined;
  flags: Flags;
  help: boolean;
  version: boolean;
} {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: Object.fromEntries(
      Object.entries(OPTIONS).map(([k, v]) => [k, "short" in v ? { type: v.type, short: v.short } : { type: v.type }]),
    ) as Record<string, { type: "string" | "boolean"; short?: string }>,
  });
  const flags: Flags = {};
  for (const [k, v] of Object.entries(OPTIONS)) {
    if (!("env" in v)) continue;
    const value = (values[k] as string | undefined) ?? process.env[v.env];
    if (value !== undefined && value !== "") flags[k as keyof Flags] = value;
  }
  return { mode: positionals[0], flags, help: Boolean(values.help), version: Boolean(values.version) };
}

function required(flags: Flags, name: keyof Flags): string {
  const v = flags[name];
  if (!v)
    throw new UsageError(
      `--${name} is required (or ${OPTIONS[name] && "env" in OPTIONS[name] ? OPTIONS[name].env : ""})`,
    );
  return v;
}

function port(flags: Flags): number {
  const text = flags.port ?? "8443";
  const n = Number(text);
  if (!Number.isInteger(n) || n < 0 || n > 65535)
    throw new UsageError(`a port must be a number from 0 to 65535, not ${text}`);
  return n;
}

/** --metrics-port: the listener's port, or undefined for 0 (no metrics listener). */
function metricsPort(flags: Flags): number | undefined {
  const n = port({ port: flags["metrics-port"] ?? String(METRICS_PORT) });
  return n === 0 ? undefined : n;
}

function trustedProxies(flags: Flags): string[] {
  try {
    return parseTrustedProxies(flags["trusted-proxies"]);
  } catch (err) {
    throw new UsageError(errorMessage(err));
  }
}

function allowPrivateTargets(flags: Flags): string[] {
  try {
    return parseTrustedProxies(flags["allow-private-targets"]);
  } catch (err) {
    throw new UsageError(errorMessage(err).replace("--trusted-proxies", "--allow-private-targets"));
  }
}

function localApiTls(flags: Flags): { localApiTlsPort?: number; localApiTokenFile?: string } {
  const tlsPort = flags["local-api-tls-port"];
  const tokenFile = flags["local-api-token-file"];
  if (tlsPort === undefined && tokenFile === undefined) return {};
  if (tlsPort === undefined) throw new UsageError("--local-api-token-file needs --local-api-tls-port");
  if (tokenFile === undefined)
    throw new UsageError(
      "--local-api-tls-port needs --local-api-token-file: that listener never serves without a token",
    );
  return { localApiTlsPort: port({ port: tlsPort }), localApiTokenFile: tokenFile };
}

export async function main(argv = process.argv.slice(2)): Promise<void> {
  let parsed: ReturnType<typeof readFlags>;
  try {
    parsed = readFlags(argv);
  } catch (err) {
    process.stderr.write(`ifp-runtime: ${errorMessage(err)}\n\n${USAGE}`);
    process.exitCode = 2;
    return;
  }
  const { mode, flags, help, version } = parsed;
  if (version || mode === "version") {
    process.stdout.write(`${versionLine("ifp-runtime")}\n`);
    return;
  }
  if (help || !mode) {
    process.stdout.write(USAGE);
    process.exitCode = help ? 0 : 2;
    return;
  }
  const logger = createLogger({ level: flags["log-level"] ?? "info", component: `ifp-runtime-${mode}` });
  // Before anything starts: as a container's first process it would otherwise ignore a SIGTERM
  // that came during the start, and run on until the kubelet's SIGKILL.
  const signals = stopOnSignals(logger);
  let tracing: ReturnType<typeof startTracing> | undefined;
  try {
    tracing = mode === "agent" || mode === "relay" ? startTracing({ mode, logger }) : undefined;
    const common = commonOptions(flags, logger);
    signals.started(await startMode(mode, flags, common), tracing);
  } catch (err) {
    if (err instanceof UsageError) {
      process.stderr.write(`ifp-runtime: ${err.message}\n\n${USAGE}`);
      process.exitCode = 2;
    } else {
      logger.fatal({ err: errorMessage(err) }, "could not start");
      process.exitCode = 1;
    }
    await tracing?.shutdown();
    await new Promise((r) => setTimeout(r, 50));
    process.exit(process.exitCode);
  }
}

/** What the agent and the relay modes both take from the flags. */
function commonOptions(flags: Flags, logger: Logger) {
  return {
    manifest: required(flags, "manifest"),
    port: port(flags),
    host: flags.host,
    tlsCert: required(flags, "tls-cert"),
    tlsKey: required(flags, "tls-key"),
    nats: {
      url: required(flags, "nats"),
      credsFile: flags["nats-creds"],
      user: flags["nats-user"],
      pass: flags["nats-password"],
      token: flags["nats-token"],
      ...(flags["nats-ca"] ? { tls: { caFile: flags["nats-ca"] } } : {}),
    },
    trustedProxies: trustedProxies(flags),
    allowPrivateTargets: allowPrivateTargets(flags),
    metricsPort: metricsPort(flags),
    logger,
  };
}

/** --workers: a whole number from 1 to 64, or auto. */
function workers(flags: Flags): number | "auto" | undefined {
  const v = flags.workers;
  if (v === undefined || v === "auto") return v;
  const n = Number(v);
  if (!/^\d+$/.test(v) || n < 1 || n > MAX_WORKERS)
    throw new UsageError(`--workers must be a whole number from 1 to ${MAX_WORKERS} or auto, not ${v}`);
  return n;
}

function natsLayout(flags: Flags): NatsLayoutName | undefined {
  const v = flags["nats-layout"];
  if (v === undefined) return undefined;
  if (!(NATS_LAYOUTS as readonly string[]).includes(v))
    throw new UsageError(`--nats-layout must be one of ${NATS_LAYOUTS.join(", ")}`);
  return v as NatsLayoutName;
}

/** The runtime of `mode`, started. */
async function startMode(
  mode: string,
  flags: Flags,
  common: ReturnType<typeof commonOptions>,
): Promise<{ close(): Promise<void>; failed?: Promise<Error> }> {
  if (mode === "agent") {
    return startAgent({
      ...common,
      signingKey: required(flags, "signing-key"),
      encryptionKey: flags["encryption-key"],
      caFile: flags["ca-file"],
      kubeconfig: flags.kubeconfig,
      introductionSecretFile: flags["introduction-secret-file"],
      handoffSecretFile: flags["handoff-secret-file"],
      a2aTokenFile: flags["a2a-token-file"],
      a2aPeerTokenFile: flags["a2a-peer-token-file"],
      a2aGrpcPort: flags["a2a-grpc-port"] === undefined ? undefined : port({ port: flags["a2a-grpc-port"] }),
      localApiPort: flags["local-api-port"] === undefined ? undefined : port({ port: flags["local-api-port"] }),
      natsLayout: natsLayout(flags),
      workers: workers(flags),
      workerEntry: INBOX_WORKER,
      ...localApiTls(flags),
    });
  } else if (mode === "relay") {
    if (flags.workers !== undefined)
      throw new UsageError("--workers is of the agent mode; a relay runs one event loop");
    const { startRelay } = await import("../relay/main.ts");
    return startRelay({ ...common, caFile: flags["ca-file"] });
  } else {
    throw new UsageError(`unknown mode ${JSON.stringify(mode)}; use agent or relay`);
  }
}

/**
 * SIGTERM and SIGINT close the runtime (within 25 s) and the tracing, then end the process (0);
 * an event loop of the agent that ended on its own does the same, ending it with 1. A signal that
 * comes while the runtime starts is kept: the runtime is closed as soon as it has started.
 */
function stopOnSignals(logger: Logger): {
  started(
    running: { close(): Promise<void>; failed?: Promise<Error> },
    tracing?: ReturnType<typeof startTracing>,
  ): void;
} {
  let stopping: { code: number } | undefined;
  let started: { running: { close(): Promise<void> }; tracing?: ReturnType<typeof startTracing> } | undefined;
  let closing = false;
  const close = () => {
    if (!stopping || !started || closing) return;
    closing = true;
    const { code } = stopping;
    started.running
      .close()
      .then(() => started!.tracing?.shutdown())
      .then(
        () => process.exit(code),
        (err) => {
          logger.error({ err }, "shutdown failed");
          process.exit(1);
        },
      );
  };
  const stop = (why: { signal: string } | { failed: string }, code: number) => {
    if (stopping) return;
    stopping = { code };
    if ("signal" in why) logger.info({ ...why, started: started !== undefined }, "shutting down");
    else logger.fatal({ err: why.failed }, "an event loop failed; shutting down");
    const force = setTimeout(() => process.exit(1), 25_000);
    force.unref();
    close();
  };
  process.once("SIGTERM", () => stop({ signal: "SIGTERM" }, 0));
  process.once("SIGINT", () => stop({ signal: "SIGINT" }, 0));
  return {
    started(running, tracing) {
      started = { running, tracing };
      void running.failed?.then((err) => stop({ failed: err.message }, 1));
      close();
    },
  };
}
