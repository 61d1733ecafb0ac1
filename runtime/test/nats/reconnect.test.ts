// The runtime after the NATS client gave its connection up: a nats-server restarted with a new
// password refuses the reconnect twice and the client closes the connection for good. Once the
// server takes the runtime's credentials again, the runtime connects anew, without a restart, and
// its stores' KV buckets follow the new connection.
import { Writable } from "node:stream";
import pino from "pino";
import { LOG_FORMAT } from "../../src/telemetry/log-format.ts";
import { afterAll, beforeAll, expect, it } from "vitest";
import { startNats, type NatsServer } from "../../../e2e/support/nats.ts";
import { localhostTls } from "../../../e2e/support/tls.ts";
import { httpsRequest } from "../../../e2e/support/https.ts";
import { waitFor } from "../../../e2e/support/wait.ts";
import { HttpClient } from "../../src/net/http-client.ts";
import { RelayClient } from "../../src/net/relay-client.ts";
import { DeliveryStates, type DeliveryRecord } from "../../src/agent/outbound/delivery-state.ts";
import { Nats } from "../../src/nats/connection.ts";
import { startRelay, type RunningRelay } from "../../src/relay/main.ts";
import { identity, peerOf, signed, tempDir, writeRelayManifest } from "../support/fixtures.ts";

const alice = identity("alice-agent");
const bob = identity("bob-agent");
const auth = (pass: string) => ({
  config: `authorization { user: "ifp", password: "${pass}" }`,
  connect: { user: "ifp", pass },
});

let tls: Awaited<ReturnType<typeof localhostTls>>;
let http: HttpClient;
let server: NatsServer | undefined;
const servers: NatsServer[] = [];
beforeAll(async () => {
  tls = await localhostTls();
  http = new HttpClient({ extraCa: tls.ca });
});
afterAll(async () => {
  await http?.close();
  for (const s of servers.reverse()) await s.close();
});

/** Start (again) the server on a port and store, with the given password. */
async function natsWith(pass: string, again?: NatsServer): Promise<NatsServer> {
  const s = await startNats({ ...auth(pass), ...(again && { port: again.port, storeDir: again.storeDir }) });
  servers.push(s);
  return s;
}

/**
 * The server restarted on its port and store with another password until the client has closed
 * its connection for good (the reconnect refused twice), then with `pass` again.
 */
async function refuseThenAccept(
  running: NatsServer,
  pass: string,
  clientGaveUp: () => boolean | Promise<boolean>,
): Promise<void> {
  await running.stop();
  const refusing = await natsWith("another pass", running);
  await waitFor(
    "the reconnect to be refused twice",
    () => (refusing.log().match(/authentication error|Authorization Violation/gi)?.length ?? 0) >= 2,
    15_000,
    50,
  );
  await waitFor("the client to give the connection up", clientGaveUp, 10_000, 50);
  await refusing.stop();
  await natsWith(pass, running);
}

it("connects anew after the client gave up on refused credentials", async () => {
  server = await natsWith("first pass");
  const lines: { level: string; msg: string }[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const l of chunk.toString().split("\n").filter(Boolean)) lines.push(JSON.parse(l));
      done();
    },
  });
  const manifest = writeRelayManifest(
    tempDir(),
    { url: "https://localhost", agents: [peerOf(alice), peerOf(bob)] },
    "reconnect-relay",
  );
  let relay: RunningRelay | undefined;
  try {
    relay = await startRelay({
      manifest,
      port: 0,
      host: "127.0.0.1",
      tlsCert: tls.files.cert,
      tlsKey: tls.files.key,
      nats: { url: server.url, user: "ifp", pass: "first pass" },
      logger: pino({ ...LOG_FORMAT, level: "info" }, sink),
    });
    const url = relay.url.replace("127.0.0.1", "localhost");
    const readyz = async () => (await httpsRequest(`${url}/readyz`, { ca: tls.ca })).status;
    await waitFor("the relay to be ready", async () => (await readyz()) === 200, 20_000, 100);

    // Same port and store, another password: each reconnect is refused, the client closes. Then
    // the runtime's password is accepted again: it connects without a restart.
    await refuseThenAccept(server, "first pass", async () => (await readyz()) === 503);
    await waitFor("the relay to be ready again", async () => (await readyz()) === 200, 15_000, 100);
    const client = new RelayClient(url, alice.signing, http);
    expect((await client.request("POST", "/relay/publish", signed(alice, "bob-agent"))).status).toBe(202);
    expect(lines.some((l) => l.level === "error" && /NATS connection was closed/.test(l.msg))).toBe(true);
  } finally {
    await relay?.close();
  }
}, 60_000);

it("keeps a store's bucket working on the connection made anew, without opening it again", async () => {
  const running = await natsWith("store pass");
  const nats = new Nats({ url: running.url, name: "reconnect-store", user: "ifp", pass: "store pass" }, silent);
  try {
    await nats.start();
    const states = new DeliveryStates(nats, "ifp_outbox_state_reconnect-store");
    await states.ensure();
    await states.put(queued("msg:before"));
    const first = nats.nc!;

    await refuseThenAccept(running, "store pass", () => first.isClosed());
    await waitFor("the connection made anew", () => nats.isConnected && nats.nc !== first, 15_000, 50);

    // The store was opened once, on the connection that is closed now.
    expect((await states.get("msg:before"))?.state).toBe("queued");
    await states.put(queued("msg:after"));
    expect((await states.get("msg:after"))?.state).toBe("queued");
  } finally {
    await nats.close();
  }
}, 60_000);

const silent = pino({ level: "silent" });
const queued = (id: string): DeliveryRecord => ({
  message_id: id,
  state: "queued",
  queued_at: "2026-01-01T00:00:00.000Z",
  updated_at: "2026-01-01T00:00:00.000Z",
  recipients: [{ agent: "peer", state: "queued", attempts: 0 }],
});
