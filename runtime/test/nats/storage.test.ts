// What an Agent's inbox costs JetStream's store, on a real nats-server: every stream's max_bytes
// is reserved against the server's store limit (max_file_store) whether or not it is used, so the
// default inbox size decides how many Agents the chart's default NATS holds; a stream JetStream
// has no room for is said clearly; and a lowered limit never drops messages already answered 202.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import pino from "pino";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { parse as parseYaml } from "yaml";
import { startNats, type NatsServer } from "../../../e2e/support/nats.ts";
import { localhostTls } from "../../../e2e/support/tls.ts";
import { waitFor } from "../../../e2e/support/wait.ts";
import { agentNames } from "../../src/agent/names.ts";
import { InboxStore } from "../../src/agent/inbound/store.ts";
import { agentStoreKey } from "../../src/contract/agent-names.ts";
import { agentLastError } from "../../src/contract/summary.ts";
import { Nats } from "../../src/nats/connection.ts";
import { StreamKeeper } from "../../src/nats/stream-keeper.ts";
import { Agent } from "../../src/resources/agent.ts";
import { runAgent, startHandler } from "../support/agent-harness.ts";
import { identity, tempDir } from "../support/fixtures.ts";

const root = join(import.meta.dirname, "../../..");
const chartValues = parseYaml(readFileSync(join(root, "charts/ifp-operator/values.yaml"), "utf8"));
const DAY_MS = 24 * 3600_000;
const defaultInbox = () =>
  Agent.parse({
    apiVersion: "ifp.dev/v1alpha1",
    kind: "Agent",
    spec: { agentId: "a", capabilities: [{ name: "ping", description: "p" }] },
  }).spec.inbox;

const open: { close(): Promise<unknown> }[] = [];
afterEach(async () => {
  for (const o of open.splice(0).reverse()) await o.close().catch(() => {});
});

describe("the chart's default NATS store", () => {
  let server: NatsServer;
  let nc: NatsConnection;
  beforeAll(async () => {
    // The jetstream block the chart renders: max_file_store is nats.storage.size, as written there.
    server = await startNats({ config: `jetstream { max_file_store: ${chartValues.nats.storage.size} }` });
    nc = await connect({ servers: server.url });
  });
  afterAll(async () => {
    await nc?.close();
    await server?.close();
  });

  it("holds the inbox streams of 100 Agents with the default spec.inbox.maxBytes", async () => {
    const jsm = await jetstreamManager(nc);
    const { maxBytes } = defaultInbox();
    for (let i = 0; i < 100; i++) {
      const store = new InboxStore(undefined as never, agentNames(`store-${i}`), 2 * DAY_MS, maxBytes);
      await jsm.streams.add(store.streamConfig());
    }
    expect((await jsm.streams.info(agentNames("store-99").inboxStream)).config.max_bytes).toBe(maxBytes);
  });
});

describe("a store the reservations have filled", () => {
  let server: NatsServer;
  beforeAll(async () => {
    server = await startNats({ config: "jetstream { max_file_store: 32MB }" });
  });
  afterAll(async () => {
    await server?.close();
  });

  it("keeps the Agent not ready and says why, where its human looks, until its inbox fits", async () => {
    const self = identity(`nostore-${Date.now().toString(36)}`);
    const handler = await startHandler();
    open.push(handler);
    const tls = await localhostTls(tempDir());
    const spec = { handler: { url: handler.url, timeout: "2s" } };
    // The requests to make the inbox stream, as the server gets them: each start-up retry asks again.
    const watcher = await connect({ servers: server.url });
    open.push({ close: () => watcher.close() });
    let asked = 0;
    const inboxStream = agentNames(self.agentId).inboxStream;
    watcher.subscribe(`$JS.API.STREAM.CREATE.${inboxStream}`, { callback: () => void asked++ });
    await watcher.flush();
    const first = await runAgent({ self, dir: tempDir(), natsUrl: server.url, tls, spec, waitReady: false });
    open.push(first);
    await waitFor(
      "the refusal to be said",
      () => first.logLines().some((l) => /JetStream cannot reserve 67108864 bytes for stream/.test(String(l.msg))),
      20_000,
      100,
    );
    const said = first.logLines().filter((l) => /JetStream cannot reserve/.test(String(l.msg)));
    expect(said[0]!.level).toBe("error");
    expect(String(said[0]!.msg)).toMatch(/nats\.storage\.size.*spec\.inbox\.maxBytes/);
    expect((await first.get("/readyz")).status).toBe(503);
    // The status summary the operator copies into the Agent's status.
    const nc = await connect({ servers: server.url });
    open.push({ close: () => nc.close() });
    const where = agentLastError(agentStoreKey(first.agent));
    await waitFor(
      "the status summary to name InsufficientStorage",
      async () => {
        const kv = await new Kvm(nc).open(where.bucket);
        const e = await kv.get(where.key).catch(() => null);
        return /InsufficientStorage: JetStream cannot reserve/.test(e?.string() ?? "");
      },
      20_000,
      200,
    );
    // Said once, not at every retry: two more requests to make the stream (the retries run one after
    // the other, so the first of them was refused before the second was asked).
    const askedBefore = asked;
    await waitFor("two more tries to make the inbox stream", () => asked >= askedBefore + 2, 30_000, 50);
    expect(first.logLines().filter((l) => /JetStream cannot reserve/.test(String(l.msg)))).toHaveLength(1);
    await first.close();
    // A smaller inbox fits: the same Agent becomes ready.
    const second = await runAgent({
      self,
      dir: tempDir(),
      natsUrl: server.url,
      tls,
      spec: { ...spec, inbox: { maxBytes: 8 * 1024 * 1024 } },
    });
    open.push(second);
    expect((await second.get("/readyz")).status).toBe(200);
  });
});

describe("a lowered spec.inbox.maxBytes", () => {
  let server: NatsServer;
  let nats: Nats;
  beforeAll(async () => {
    server = await startNats();
    nats = new Nats({ url: server.url, name: "storage-test" }, pino({ level: "silent" }));
    await nats.start();
  });
  afterAll(async () => {
    await nats?.close();
    await server?.close();
  });

  it("never drops stored messages to meet it: the old limit stays while they are there", async () => {
    const names = agentNames(`lowered-${Date.now().toString(36)}`);
    const keeper = new StreamKeeper(nats, pino({ level: "silent" }), {
      ledger: { bucket: names.kvBucket, key: `${names.kvKey}.jetstream` },
    });
    const big = new InboxStore(nats, names, 2 * DAY_MS, 4 * 1024 * 1024, 1);
    await big.ensure(keeper);
    const body = "x".repeat(600 * 1024);
    for (let i = 0; i < 3; i++) await nats.js.publish(names.inbox(`m-${i}`), body);
    const small = new InboxStore(nats, names, 2 * DAY_MS, 1024 * 1024, 1);
    await small.ensure(keeper);
    const info = await nats.jsm.streams.info(names.inboxStream);
    expect(info.state.messages).toBe(3);
    expect(info.config.max_bytes).toBe(4 * 1024 * 1024);
    // Once the stream holds no more than asked, the lower limit is applied.
    await nats.jsm.streams.purge(names.inboxStream);
    await small.ensure(keeper);
    expect((await nats.jsm.streams.info(names.inboxStream)).config.max_bytes).toBe(1024 * 1024);
  });
});
