// onFreePorts, the shared choice of ports for a runtime the tests start on ports named in its
// flags or manifest: a port another server took before the runtime listened is chosen again.
import { createServer, type Server } from "node:net";
import { afterAll, expect, it } from "vitest";
import type { NatsServer } from "../../../e2e/support/nats.ts";
import type { ManagedProcess } from "../../../e2e/support/process.ts";
import { spawnRuntime } from "./a2a-harness.ts";
import { type Tls, withNatsAndTls } from "./agent-harness.ts";
import { identity, tempDir, writeAgentManifest, writeKey } from "./fixtures.ts";
import { onFreePorts, PORT_ATTEMPTS } from "./free-ports.ts";

let nats: NatsServer;
let tls: Tls;
withNatsAndTls((n, t) => {
  nats = n;
  tls = t;
});

const servers: Server[] = [];
afterAll(async () => {
  for (const s of servers) await new Promise((r) => s.close(r));
});

/** A server of another test on `port` of loopback, which answers nothing and hangs up. */
async function takePort(port: number): Promise<void> {
  const server = createServer((socket) => socket.destroy());
  servers.push(server);
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, "127.0.0.1", resolve);
  });
}

it("starts the runtime on ports chosen again when another server took one before it listened", async () => {
  const self = identity("free-ports-agent");
  const dir = tempDir("ifp-free-ports-");
  const keyFile = writeKey(dir, self);
  const tried: number[] = [];
  let runtime: ManagedProcess | undefined;
  try {
    runtime = await onFreePorts(["https", "localApi"], async ({ https: port, localApi }) => {
      tried.push(port);
      if (tried.length === 1) await takePort(port);
      writeAgentManifest(dir, { agentId: self.agentId, baseUrl: `https://localhost:${port}` });
      const spawn = { name: "ifp-runtime agent (free ports)", dir, keyFile, tls, port, localApiPort: localApi };
      return spawnRuntime({ ...spawn, natsUrl: nats.url });
    });
    // Chosen again at least once (another test's server may take a second choice too).
    expect(tried.length).toBeGreaterThanOrEqual(2);
    expect(tried[1]).not.toBe(tried[0]);
  } finally {
    await runtime?.stop();
  }
}, 60_000);

it("gives up after PORT_ATTEMPTS starts that each found a port taken", async () => {
  let starts = 0;
  const failure = await onFreePorts(["https"], async ({ https }) => {
    starts++;
    await takePort(https);
    await takePort(https);
  }).catch((err: unknown) => err);
  expect(String(failure)).toMatch(/EADDRINUSE/);
  expect(starts).toBe(PORT_ATTEMPTS);
});

it("fails at once on any other failure", async () => {
  let starts = 0;
  const failure = await onFreePorts(["https"], async () => {
    starts++;
    throw new Error("the manifest is refused");
  }).catch((err: unknown) => err);
  expect(String(failure)).toMatch(/the manifest is refused/);
  expect(starts).toBe(1);
});
