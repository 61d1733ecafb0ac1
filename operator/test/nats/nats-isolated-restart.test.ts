// Restarts in every order on the isolated NATS layout as the operator makes it (`--nats-layout
// isolated`, a real API server, one nats-server in operator mode, each runtime run exactly as the
// operator rendered it): the runtime and then NATS (kill -9), NATS and then the runtime (started
// again while NATS is away), and NATS started again with an empty store. Every message answered
// 202 is handed to the application exactly once (by its Idempotency-Key), none is lost, and the
// runtime is Ready again. What an empty store loses of what the operator made — the Agents'
// accounts, the tenant's data account, its streams and the Agents' consumers — the operator makes
// again once its connection is back, without waiting for a resync (an hour here).
import { rmSync } from "node:fs";
import { join } from "node:path";
import { credsAuthenticator } from "@nats-io/transport-node";
import { describe, expect, it } from "vitest";
import { startNats, type NatsServer } from "../../../e2e/support/nats.ts";
import { waitFor } from "../../../e2e/support/wait.ts";
import { sharedStreamConfigs } from "../../../runtime/src/contract/shared-layout.ts";
import { signed } from "../../../runtime/test/support/fixtures.ts";
import { applicationDown, handedOnSoFar } from "../../../runtime/test/support/hand-offs.ts";
import { CredentialIssuer, serverConfig } from "../../src/concerns/nats/credential-issuer.ts";
import { dataAccountOf } from "../../src/concerns/nats/shared-accounts.ts";
import { isolatedInstall, runtimeThenNats, until } from "../support/isolated-install.ts";

const NS = "iso-restart";
let nats: NatsServer;
let storeDir: string;
let resolverDir: string;
const install = isolatedInstall({
  namespaces: [NS],
  nats: (keys, dir) => {
    storeDir = join(dir, "store");
    resolverDir = join(dir, "jwt");
    return {
      async start() {
        nats = await startNats({
          storeDir,
          config: await serverConfig(keys, { resolverDir }),
          connect: { authenticator: credsAuthenticator(await CredentialIssuer.fromKeys(keys).systemCreds()) },
        });
      },
      stop: async () => nats?.close(),
      url: () => nats.url,
    };
  },
  // Only what the operator does when its connection comes back makes again what NATS lost.
  manager: { resyncMs: 3_600_000 },
});

/** kill -9 of the server, then a start on the same store and port. */
async function killAndRestart(): Promise<void> {
  process.kill(nats.pid!, "SIGKILL");
  await waitFor("nats-server to be gone after SIGKILL", () => nats.pid === undefined, 10_000, 20);
  await nats.restart();
}

/** An Agent of the tenant with an application of its own, its runtime running as rendered and Ready. */
const agent = (name: string) => install.counted(NS, name);

describe("restarts on the operator's isolated NATS layout", () => {
  it("loses nothing when the runtime is started again and NATS is then killed", async () => {
    await runtimeThenNats(await agent("bob"), killAndRestart);
  }, 300_000);

  it("loses nothing in the other order: NATS killed, the runtime started again while it is away, then NATS", async () => {
    const carol = await agent("carol");
    await applicationDown(carol.handler, []);
    const ids = await carol.accepted(5);
    await killAndRestart();
    ids.push(await carol.acceptsAgain());
    // NATS away while the runtime starts: it listens, is not ready, and becomes so once NATS is back.
    process.kill(nats.pid!, "SIGKILL");
    await waitFor("nats-server to be gone after SIGKILL", () => nats.pid === undefined, 10_000, 20);
    await carol.runtime.start();
    // A message it cannot store is refused "send it again", never taken.
    expect((await carol.runtime.post(signed(install.alice, "carol-agent"))).status).toBe(503);
    expect(await carol.runtime.readyz()).toBe(503);
    await nats.restart();
    await carol.runtime.ready();
    ids.push(...(await carol.accepted(3)));
    await carol.handler.up();
    await carol.everyHandedOnOnce(ids);
  }, 300_000);

  it("makes again what a NATS started with an empty store lost: accounts, the data account, streams and consumers", async () => {
    const dave = await agent("dave");
    const before = await dave.accepted(2);
    await handedOnSoFar(dave.handler, before);
    const data = dataAccountOf(install.keys.signing, NS);
    await nats.stop();
    rmSync(join(storeDir, "jetstream"), { recursive: true, force: true });
    rmSync(resolverDir, { recursive: true, force: true });
    await nats.restart();
    // The operator pushes the accounts again and makes the tenant's streams and every Agent's consumers.
    await until(
      "the data account and dave's account on the resolver again",
      async () => (await install.onResolver(data)) && (await install.onResolver(dave.account)),
    );
    for (const name of ["bob", "carol", "dave"].filter((n) => install.get(NS, "agent", n)))
      await install.consumersMade(NS, name);
    const view = await install.tenantView(NS);
    const streams: string[] = [];
    for await (const s of view.streams.names()) streams.push(s);
    expect(streams.sort()).toEqual(
      sharedStreamConfigs()
        .map((s) => s.name)
        .sort(),
    );
    expect(install.log.has(/made again on its Agents. next pass, empty/)).toBe(true);
    // The runtime reconnects with its credential, is Ready, and what it accepts now is handed on once.
    await dave.runtime.ready();
    const after = [await dave.acceptsAgain(), ...(await dave.accepted(3))];
    await dave.everyHandedOnOnce([...before, ...after]);
  }, 300_000);
});
