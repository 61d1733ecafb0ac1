// The NATS of the isolated layout for the operator's benchmarks: a nats-server 2.12 in operator
// mode with new install keys (the full resolver), and the install's account Secret made in
// `ifp-system` beforehand, as for a NATS the chart started with them.
import { join } from "node:path";
import { credsAuthenticator } from "@nats-io/transport-node";
import type { ControlPlane } from "../../e2e/support/controlplane.ts";
import { startNats } from "../../e2e/support/nats.ts";
import { releaseDir, tempDir } from "../../e2e/support/process.ts";
import {
  CredentialIssuer,
  generateKeys,
  KEY_FIELDS,
  type NatsKeys,
  serverConfig,
} from "../src/concerns/nats/credential-issuer.ts";

/** The operator's namespace and its NATS account Secret, as the chart names them. */
export const OPS = "ifp-system";
export const ACCOUNT_SECRET = "ifp-nats-account";

export interface IsolatedNats {
  url: string;
  /** The operator's flags for it. */
  args: string[];
  /** The manager's options for it (an operator started in the benchmark's own process). */
  manager: { natsAccount: { namespace: string; name: string }; natsLayout: "isolated"; nats: { url: string } };
  pid: () => number | undefined;
  stop: () => Promise<void>;
}

export async function startIsolatedNats(cp: ControlPlane): Promise<IsolatedNats> {
  const keys = generateKeys();
  const issuer = CredentialIssuer.fromKeys(keys);
  const dir = tempDir("ifp-bench-operator-nats-");
  const nats = await startNats({
    storeDir: join(dir, "store"),
    // Twenty tenants' reservations (1 GiB each by default) fit; nothing is written beyond the streams' records.
    config: `${await serverConfig(keys, { resolverDir: join(dir, "jwt") })}jetstream { max_file_store: 1P }\n`,
    connect: { authenticator: credsAuthenticator(await issuer.systemCreds()) },
  });
  cp.kubectl(["create", "namespace", OPS]);
  cp.kubectl([
    "-n",
    OPS,
    "create",
    "secret",
    "generic",
    ACCOUNT_SECRET,
    `--from-literal=account.pub=${issuer.accountKey}`,
    ...Object.entries(KEY_FIELDS).map(([k, f]) => `--from-literal=${f}=${keys[k as keyof NatsKeys]}`),
  ]);
  return {
    url: nats.url,
    args: [
      `--nats-url=${nats.url}`,
      `--nats-account-secret=${ACCOUNT_SECRET}`,
      `--nats-account-secret-namespace=${OPS}`,
      "--nats-layout=isolated",
    ],
    manager: { natsAccount: { namespace: OPS, name: ACCOUNT_SECRET }, natsLayout: "isolated", nats: { url: nats.url } },
    pid: () => nats.pid,
    stop: async () => {
      await nats.close();
      releaseDir(dir);
    },
  };
}
