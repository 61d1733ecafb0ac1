// The install the tests of agent runtimes on the isolated shared layout run on: one nats-server in
// operator mode with the operator's side of the layout (runtime/bench/scale-isolated.ts), TLS for
// the runtimes' listeners, and each Agent's account, consumers and credentials file.
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { localhostTls } from "../../../e2e/support/tls.ts";
import { IsolatedInstall } from "../../../runtime/bench/scale-isolated.ts";
import type { Tls } from "../../../runtime/test/support/agent-harness.ts";
import { tempDir } from "../../../runtime/test/support/fixtures.ts";

/** The install and TLS, and a directory for the credentials files. */
export async function startIsolatedRuntimes(
  prefix: string,
): Promise<{ install: IsolatedInstall; tls: Tls; dir: string }> {
  const dir = tempDir(prefix);
  const [install, tls] = await Promise.all([
    IsolatedInstall.start({
      http: "",
      // Room for the data account's limit (a reservation, never written): the bench's tenants take 64 GiB.
      jetstream: "jetstream { max_file_store: 1TB }\n",
      graceMs: 2_000,
      startTimeoutMs: 30_000,
    }),
    localhostTls(),
  ]);
  return { install, tls, dir };
}

/** The Agent `tenant/name` made as the operator makes it: its account key, and its runtime's credentials file in `dir`. */
export async function isolatedAgent(
  install: IsolatedInstall,
  dir: string,
  tenant: string,
  name: string,
  agentId: string,
): Promise<{ account: string; credsFile: string }> {
  const account = await install.makeAgent(`${tenant}/${name}`, { name: "" });
  const credsFile = join(dir, `${name}.creds`);
  writeFileSync(credsFile, await install.runtimeCreds(`${tenant}/${name}`, agentId), { mode: 0o600 });
  return { account, credsFile };
}
