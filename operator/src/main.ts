import { parseArgs } from "node:util";
import pino from "pino";
import { startManager } from "./manager.ts";

const USAGE = `usage: ifp-operator [flags]

  --kubeconfig FILE              kubeconfig (default: in-cluster, then $KUBECONFIG or ~/.kube/config)
  --nats-url URL                 NATS server the runtimes and relay streams use (IFP_NATS_URL)
  --nats-creds FILE              NATS credentials file for the operator (IFP_NATS_CREDS)
  --nats-creds-secret NAME       Secret (in each resource's namespace) with credentials for the runtimes
  --runtime-image IMAGE          image of the runtime pods (IFP_RUNTIME_IMAGE)
  --runtime-image-pull-policy P  IfNotPresent (default), Always or Never
  --watch-namespaces A,B         watch only these namespaces (default: all)
  --leader-elect                 hold a Lease so one replica acts at a time
  --leader-election-namespace NS namespace of the Lease (default: POD_NAMESPACE or default)
  --health-port N                /healthz and /readyz (default 8081)
  --metrics-port N               /metrics (default 8080)
  --log-level LEVEL              info (default), debug, warn, error
`;

export async function main(argv = process.argv.slice(2)): Promise<void> {
  let values: Record<string, string | boolean | undefined>;
  try {
    values = parseArgs({
      args: argv,
      options: {
        kubeconfig: { type: "string" },
        "nats-url": { type: "string" },
        "nats-creds": { type: "string" },
        "nats-creds-secret": { type: "string" },
        "runtime-image": { type: "string" },
        "runtime-image-pull-policy": { type: "string" },
        "watch-namespaces": { type: "string" },
        "leader-elect": { type: "string" },
        "leader-election-namespace": { type: "string" },
        "health-port": { type: "string" },
        "metrics-port": { type: "string" },
        "log-level": { type: "string" },
        help: { type: "boolean", short: "h" },
      },
    }).values;
  } catch (err) {
    process.stderr.write(`ifp-operator: ${(err as Error).message}\n\n${USAGE}`);
    process.exitCode = 2;
    return;
  }
  if (values.help) {
    process.stdout.write(USAGE);
    return;
  }
  const str = (k: string) => (typeof values[k] === "string" ? (values[k] as string) : undefined);
  const log = pino({ level: str("log-level") ?? process.env.IFP_LOG_LEVEL ?? "info", base: { component: "ifp-operator" } });
  const natsUrl = str("nats-url") ?? process.env.IFP_NATS_URL;
  const credsSecret = str("nats-creds-secret");
  const manager = await startManager({
    kubeconfig: str("kubeconfig"),
    settings: {
      runtimeImage: str("runtime-image") ?? process.env.IFP_RUNTIME_IMAGE ?? "ghcr.io/ifp-dev/ifp-runtime:0.1.0",
      runtimeImagePullPolicy: str("runtime-image-pull-policy") ?? "IfNotPresent",
      natsUrl: natsUrl ?? "nats://nats:4222",
      natsCredsSecret: credsSecret ? { name: credsSecret, key: "nats.creds" } : undefined,
    },
    nats: natsUrl ? { url: natsUrl, credsFile: str("nats-creds") ?? process.env.IFP_NATS_CREDS } : undefined,
    watchNamespaces: (str("watch-namespaces") ?? "").split(",").map((s) => s.trim()).filter(Boolean),
    leaderElection: ["true", "1", ""].includes(str("leader-elect") ?? "false") ? { namespace: str("leader-election-namespace") ?? process.env.POD_NAMESPACE ?? "default" } : undefined,
    healthPort: Number(str("health-port") ?? 8081),
    metricsPort: Number(str("metrics-port") ?? 8080),
    log,
  });
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info({ signal }, "shutting down");
    setTimeout(() => process.exit(1), 20_000).unref();
    manager.stop().then(() => process.exit(0), () => process.exit(1));
  };
  process.once("SIGTERM", () => stop("SIGTERM"));
  process.once("SIGINT", () => stop("SIGINT"));
}
