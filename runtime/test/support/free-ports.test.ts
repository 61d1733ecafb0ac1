// onFreePorts, the shared choice of ports for a runtime the tests start on ports named in its
// flags or manifest: a port another server took before the runtime listened is chosen again.
import { createServer, type Server } from "node:net";
import { afterAll, expect, it } from "vitest";
import type { NatsServer } from "../../../e2e/support/nats.ts";
import type { ManagedProcess } from "../../../e2e/support/process.ts";
import { spawnRuntime } from "./a2a-harness.ts";
import { httpsRequest } from "../../../e2e/support/https.ts";
import { runAgent, type Tls, withNatsAndTls } from "./agent-harness.ts";
import { identity, peerOf, tempDir, writeAgentManifest, writeKey } from "./fixtures.ts";
import { heldPort, onFreePorts, PORT_ATTEMPTS, startedTogether } from "./free-ports.ts";

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

it("stops the runtimes that started when another one started with them found its port taken, and starts them all again", async () => {
  const alice = identity("free-ports-alice");
  const bob = identity("free-ports-bob");
  const attempts: { alice: number; bob: number }[] = [];
  const start = (self: typeof alice, port: number, peer: typeof bob, peerPort: number) =>
    runAgent({
      self,
      port,
      natsUrl: nats.url,
      tls,
      spec: { peers: [{ ...peerOf(peer), url: `https://localhost:${peerPort}` }] },
    });
  const [a, b] = await onFreePorts(["alice", "bob"], async (ports) => {
    attempts.push(ports);
    if (attempts.length === 1) await takePort(ports.bob);
    return startedTogether(
      [start(alice, ports.alice, bob, ports.bob), start(bob, ports.bob, alice, ports.alice)] as const,
      (agent) => agent.close(),
    );
  });
  try {
    expect(attempts.length).toBeGreaterThanOrEqual(2);
    expect(a.url).toBe(`https://127.0.0.1:${attempts.at(-1)!.alice}`);
    expect((await httpsRequest(`${a.url}/readyz`, { ca: tls.ca })).status).toBe(200);
    expect((await httpsRequest(`${b.url}/readyz`, { ca: tls.ca })).status).toBe(200);
    // alice of the first attempt, which started beside a bob who could not, is stopped.
    const first = `https://localhost:${attempts[0]!.alice}/readyz`;
    await expect(httpsRequest(first, { ca: tls.ca, timeoutMs: 2_000 })).rejects.toThrow(/ECONNREFUSED/);
  } finally {
    await Promise.all([a.close(), b.close()]);
  }
}, 60_000);

it("holds a port for a server started later: another server cannot take it, a client is hung up on, and it is free once released", async () => {
  let tries = 0;
  const held = await onFreePorts(["later"], async ({ later }) => {
    if (++tries === 1) await takePort(later);
    return heldPort(later);
  });
  expect(tries).toBeGreaterThanOrEqual(2);
  await expect(takePort(held.port)).rejects.toThrow(/EADDRINUSE/);
  await expect(httpsRequest(`https://localhost:${held.port}/readyz`, { ca: tls.ca, timeoutMs: 2_000 })).rejects.toThrow(
    /socket disconnected before secure TLS connection|socket hang up|ECONNRESET/,
  );
  await held.release();
  await held.release();
  await takePort(held.port);
});

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
