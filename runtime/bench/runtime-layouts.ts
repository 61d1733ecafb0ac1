// The NATS under test:faults and test:cluster, on the layout the run chooses (`--layout`): the
// product's, `isolated` (the chart's default, docs/scale.md "The isolated shared layout"), with
// nats-server in operator mode, the tenant's data account holding its shared streams, the Agent's
// own account, its consumers made as the operator makes them and its runtime started with
// `--nats-layout isolated` and its own credential, the Relay on an account of its own with its
// credential (scale-isolated.ts); or `per-agent`, a nats-server without accounts where each
// runtime makes its own streams. On one server or on a cluster of three.
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { connect, credsAuthenticator, type NatsConnection } from "@nats-io/transport-node";
import { startNats, startNatsCluster, type NatsCluster, type NatsServer } from "../../e2e/support/nats.ts";
import type { RelaySpecInput } from "../src/resources/relay.ts";
import { IsolatedInstall } from "./scale-isolated.ts";

export const RUNTIME_LAYOUTS = ["isolated", "per-agent"] as const;
export type RuntimeLayout = (typeof RUNTIME_LAYOUTS)[number];

/** The layout a run's `--layout NAME` (or `--layout=NAME`) names; the product's without one. */
export function layoutOf(argv: string[]): RuntimeLayout {
  const i = argv.findIndex((a) => a === "--layout" || a.startsWith("--layout="));
  if (i < 0) return "isolated";
  const v = argv[i]!.includes("=") ? argv[i]!.split("=")[1] : argv[i + 1];
  if (!RUNTIME_LAYOUTS.includes(v as RuntimeLayout)) throw new Error(`--layout takes ${RUNTIME_LAYOUTS.join(" or ")}`);
  return v as RuntimeLayout;
}

/** The tenant (namespace) of the runs' Agents on the isolated layout. */
const TENANT = "bench";
/** The servers' file store: room for the tenant's and the Relay's account limits (reservations, nothing written). */
const JETSTREAM = "jetstream { max_file_store: 1TB }\n";

export interface RuntimeNats {
  readonly layout: RuntimeLayout;
  /** Every server's client URL, comma separated (a runtime's `--nats`). */
  readonly url: string;
  /** The one server (or the cluster's first). */
  readonly server: NatsServer;
  /** The cluster, on three servers. */
  readonly cluster?: NatsCluster;
  /** The arguments of the Agent `agentId`'s runtime besides its own (its account and consumers made first on isolated). */
  agentArgs(agentId: string, handlerTimeoutMs: number): Promise<string[]>;
  /** The arguments of the Relay `name`'s runtime besides its own (its account made first on isolated). */
  relayArgs(name: string, spec: RelaySpecInput): Promise<string[]>;
  /**
   * A connection to `servers` that sees the Agent's inbox stream (`inbox`) or the Relay's
   * stream (`relay`): in their accounts on isolated, as a user allowed every subject there.
   */
  observe(what: "inbox" | "relay", servers: string): Promise<NatsConnection>;
  /** The stream holding the Agent's inbox: its own (a prefix of its name) on per-agent, the tenant's on isolated. */
  readonly inboxStream: string;
  close(): Promise<void>;
}

export async function startRuntimeNats(opts: {
  layout: RuntimeLayout;
  dir: string;
  clusterSize?: number;
  startTimeoutMs?: number;
}): Promise<RuntimeNats> {
  const size = opts.clusterSize ?? 1;
  const startTimeoutMs = opts.startTimeoutMs ?? 60_000;
  const reconnecting = { maxReconnectAttempts: -1, reconnectTimeWait: 250, timeout: 5_000 };
  if (opts.layout === "per-agent") {
    const cluster = size > 1 ? await startNatsCluster({ size, startTimeoutMs }) : undefined;
    const server = cluster?.nodes[0] ?? (await startNats({ startTimeoutMs }));
    const url = cluster?.url ?? server.url;
    return {
      layout: opts.layout,
      url,
      server,
      cluster,
      inboxStream: "IFP_INBOX_",
      agentArgs: async () => ["--nats", url],
      relayArgs: async () => ["--nats", url],
      observe: (_, servers) => connect({ servers: servers.split(","), ...reconnecting }),
      close: () => (cluster ? cluster.close() : server.close()),
    };
  }
  const install = await IsolatedInstall.start({
    http: "",
    jetstream: JETSTREAM,
    graceMs: 5_000,
    startTimeoutMs,
    clusterSize: size,
  });
  const accounts: { inbox?: string; relay?: string } = {};
  const file = (name: string, creds: string) => {
    const path = join(opts.dir, `${name}.creds`);
    writeFileSync(path, creds, { mode: 0o600 });
    return path;
  };
  return {
    layout: opts.layout,
    url: install.url,
    server: install.server,
    cluster: install.cluster,
    inboxStream: "IFP_INBOX",
    async agentArgs(agentId, handlerTimeoutMs) {
      const key = `${TENANT}/${agentId}`;
      await install.makeAgent(key, { name: "" }, handlerTimeoutMs);
      accounts.inbox = (await install.tenant(TENANT)).account;
      const creds = file(agentId.replace(/\W/g, "_"), await install.runtimeCreds(key, agentId));
      return ["--nats", install.url, "--nats-layout", "isolated", "--nats-creds", creds];
    },
    async relayArgs(name, spec) {
      const made = await install.makeRelay(name, spec);
      accounts.relay = made.account;
      return ["--nats", install.url, "--nats-creds", file(`relay-${name}`, made.creds)];
    },
    async observe(what, servers) {
      const account = accounts[what];
      if (!account) throw new Error(`no ${what} made yet`);
      return connect({
        servers: servers.split(","),
        authenticator: credsAuthenticator(await install.anyUserCreds(account)),
        ...reconnecting,
      });
    },
    close: () => install.close(),
  };
}
