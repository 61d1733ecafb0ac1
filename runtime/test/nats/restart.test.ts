// Restarts of the runtime and of nats-server, on a single server (as the chart installs NATS by
// default, nats.replicas 1) and on a three-server cluster: the replicas of every stream and
// bucket the agent makes are those the deployment can hold, at the first start, the second and
// after a change of durability.replicas; after a runtime restart followed by a kill -9 of NATS
// (and the other order) every message answered 202 is handed on exactly once and the agent
// accepts again within seconds; a stream that goes missing is said, never made again empty.
import { jetstreamManager, type JetStreamManager } from "@nats-io/jetstream";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { startNats, startNatsCluster, type NatsCluster, type NatsServer } from "../../../e2e/support/nats.ts";
import { localhostTls } from "../../../e2e/support/tls.ts";
import { consistently, waitFor } from "../../../e2e/support/wait.ts";
import { agentNames } from "../../src/agent/names.ts";
import { ensureReplicatedStream, placementOf } from "../../src/nats/streams.ts";
import { runAgent, startHandler, type Tls } from "../support/agent-harness.ts";
import { identity, peerOf, tempDir } from "../support/fixtures.ts";
import * as handOffs from "../support/hand-offs.ts";
import { applicationDown, handedOnSoFar } from "../support/hand-offs.ts";
import { consumerSettled } from "../support/probes.ts";

type Agent = Awaited<ReturnType<typeof runAgent>>;
type Handler = Awaited<ReturnType<typeof startHandler>>;

let tls: Tls;
beforeAll(async () => {
  tls = await localhostTls();
});

const open: { close(): Promise<unknown> }[] = [];
afterEach(async () => {
  await Promise.all(open.splice(0).map((o) => o.close().catch(() => {})));
});

async function admin(url: string): Promise<{ nc: NatsConnection; jsm: JetStreamManager }> {
  const nc = await connect({ servers: url.split(","), maxReconnectAttempts: -1, reconnectTimeWait: 200 });
  open.push({ close: () => nc.close() });
  return { nc, jsm: await jetstreamManager(nc) };
}

/** kill -9 of a standalone server, then a start on the same store and port. */
async function killAndRestart(nats: NatsServer): Promise<void> {
  process.kill(nats.pid!, "SIGKILL");
  await waitFor("nats-server to be gone after SIGKILL", () => nats.pid === undefined, 10_000, 20);
  await nats.restart();
}

const pete = identity("pete-agent");

/** Post `n` signed messages from pete; each must be answered 202. Returns their ids. */
const accepted = (agent: Agent, n: number) =>
  handOffs.accepted((m) => agent.post(m), pete, agent.agent.spec.agentId, n);

/** Milliseconds until the agent answers 202 again, at most `withinMs` (handOffs.acceptsAgainWithin). */
const acceptsAgainWithin = (agent: Agent, withinMs: number) =>
  handOffs.acceptsAgainWithin((m) => agent.post(m), pete, agent.agent.spec.agentId, withinMs);

/** Every accepted message handed on once, none lost (handOffs.everyHandedOnOnce). */
function everyHandedOnOnce(handler: Handler, ids: string[], jsm: JetStreamManager, agentId: string) {
  const n = agentNames(agentId);
  return handOffs.everyHandedOnOnce(handler, ids, pete, () => consumerSettled(jsm, n.inboxStream, n.handlerConsumer));
}

async function replicasOf(jsm: JetStreamManager, stream: string): Promise<number> {
  return (await jsm.streams.info(stream)).config.num_replicas;
}

/** Every stream and KV bucket an agent makes, by the names the operator deletes with it. */
function agentObjects(agentId: string): string[] {
  const n = agentNames(agentId);
  return [
    n.inboxStream,
    n.outboxStream,
    `KV_${n.outboxStateBucket}`,
    `KV_${n.peersBucket}`,
    `KV_${n.conversationsBucket}`,
    `KV_${n.kvBucket}`,
  ];
}

async function startAgent(
  nats: string,
  self: ReturnType<typeof identity>,
  handler: Handler,
  extra: Record<string, unknown> = {},
  waitReady = true,
): Promise<Agent> {
  const a = await runAgent({
    self,
    dir: tempDir(),
    natsUrl: nats,
    tls,
    spec: { peers: [peerOf(pete)], handler: { url: handler.url, timeout: "2s" }, ...extra },
    waitReady,
  });
  open.push(a);
  return a;
}

describe("a single nats-server (the chart's default)", () => {
  let nats: NatsServer;
  beforeAll(async () => {
    nats = await startNats();
  });
  afterAll(async () => {
    await nats?.close();
  });

  it("keeps every object at one replica across a second start, and loses nothing when NATS is killed after it", async () => {
    const self = identity(`restart-${Date.now().toString(36)}`);
    const handler = await startHandler();
    open.push(handler);
    const first = await startAgent(nats.url, self, handler);
    const ids = await accepted(first, 5);
    await handedOnSoFar(handler, ids);
    await first.close();
    // The second start: with "auto" it used to ask for three replicas again, and a standalone
    // server accepts that as an update it cannot load after its next start.
    const second = await startAgent(nats.url, self, handler);
    ids.push(...(await accepted(second, 5)));
    const { jsm } = await admin(nats.url);
    for (const object of agentObjects(self.agentId)) expect(await replicasOf(jsm, object), object).toBe(1);
    // Messages wait in the inbox while the application is down, across the restart.
    await applicationDown(handler, ids);
    ids.push(...(await accepted(second, 5)));
    await killAndRestart(nats);
    const again = await acceptsAgainWithin(second, 10_000);
    ids.push(again.id);
    expect(nats.log()).not.toMatch(/Error recreating stream/);
    await handler.up();
    await everyHandedOnOnce(handler, ids, jsm, self.agentId);
    for (const object of agentObjects(self.agentId))
      expect(await replicasOf(jsm, object), `${object} after the restart`).toBe(1);
  });

  it("loses nothing in the other order: NATS killed first, then the runtime started again", async () => {
    const self = identity(`restart-other-${Date.now().toString(36)}`);
    const handler = await startHandler();
    open.push(handler);
    const { jsm } = await admin(nats.url);
    const first = await startAgent(nats.url, self, handler);
    await applicationDown(handler, []);
    const ids = await accepted(first, 5);
    await killAndRestart(nats);
    ids.push((await acceptsAgainWithin(first, 10_000)).id);
    await first.close();
    const second = await startAgent(nats.url, self, handler);
    ids.push(...(await accepted(second, 3)));
    await killAndRestart(nats);
    ids.push((await acceptsAgainWithin(second, 10_000)).id);
    await handler.up();
    await everyHandedOnOnce(handler, ids, jsm, self.agentId);
  });

  it("does not apply durability.replicas a single server cannot hold, and says so (metric, log)", async () => {
    const self = identity(`replicas-asked-${Date.now().toString(36)}`);
    const handler = await startHandler();
    open.push(handler);
    const first = await startAgent(nats.url, self, handler);
    await first.close();
    const second = await startAgent(nats.url, self, handler, { durability: { replicas: 3 } });
    const { jsm } = await admin(nats.url);
    const names = agentNames(self.agentId);
    expect(await replicasOf(jsm, names.inboxStream)).toBe(1);
    expect(await replicasOf(jsm, names.outboxStream)).toBe(1);
    const metrics = await second.scrape();
    expect(metrics).toMatch(
      new RegExp(`ifp_jetstream_replicas_unmet\\{stream="${names.inboxStream}",asked="3"[^}]*\\} 1`),
    );
    expect(second.logLines().some((l) => /3 replicas were asked for stream .*not clustered/.test(String(l.msg)))).toBe(
      true,
    );
    const ids = await accepted(second, 3);
    await killAndRestart(nats);
    ids.push((await acceptsAgainWithin(second, 10_000)).id);
    await everyHandedOnOnce(handler, ids, jsm, self.agentId);
  });

  it("sets a stream that was given more replicas than the server holds back to one while the server still has it", async () => {
    const { jsm } = await admin(nats.url);
    const placement = placementOf({ info: {} });
    const name = `HIT_${Date.now().toString(36)}`;
    await jsm.streams.add({ name, subjects: [`hit.${name}.>`], num_replicas: 1 });
    // What the earlier resolution did on a second start, and the server accepted.
    await jsm.streams.update(name, { ...(await jsm.streams.info(name)).config, num_replicas: 3 });
    expect(await replicasOf(jsm, name)).toBe(3);
    const r = await ensureReplicatedStream(jsm, { name, subjects: [`hit.${name}.>`] }, "auto", placement);
    expect(r.action).toBe("updated");
    expect(await replicasOf(jsm, name)).toBe(1);
  });

  it("never makes a stream it made before again empty: not ready, the metric and an error, until it is back", async () => {
    const self = identity(`missing-${Date.now().toString(36)}`);
    const handler = await startHandler();
    open.push(handler);
    const first = await startAgent(nats.url, self, handler);
    await accepted(first, 2);
    const names = agentNames(self.agentId);
    const { jsm } = await admin(nats.url);
    const config = (await jsm.streams.info(names.inboxStream)).config;
    // What a server that could not load the stream at its start looks like to its clients.
    await jsm.streams.delete(names.inboxStream);
    await waitFor(
      "the agent to stop being ready",
      async () => (await first.get("/readyz")).status === 503,
      20_000,
      200,
    );
    expect(await first.scrape()).toMatch(
      new RegExp(`ifp_jetstream_stream_missing\\{stream="${names.inboxStream}"[^}]*\\} 1`),
    );
    expect(
      first
        .logLines()
        .some((l) => (l.level === "error" || l.level === "fatal") && /is missing from NATS/.test(String(l.msg))),
    ).toBe(true);
    await first.close();
    // A start finds it missing too, and does not make it.
    const second = await startAgent(nats.url, self, handler, {}, false);
    // The witness: its start has looked for the stream and found it missing, where it would have made it.
    await waitFor(
      "the second start to find the stream missing",
      () => second.logLines().some((l) => /is missing from NATS/.test(String(l.msg))),
      20_000,
      100,
    );
    await consistently(
      "the stream is not made again",
      async () => !(await jsm.streams.names().next()).includes(names.inboxStream),
      3_000,
    );
    expect((await second.get("/readyz")).status).toBe(503);
    // Restored (here: made again by hand, as a repaired store brings it back), the agent goes on.
    await jsm.streams.add(config);
    await waitFor("the agent to be ready again", async () => (await second.get("/readyz")).status === 200, 30_000, 200);
    await accepted(second, 1);
  });
});

describe("a three-server JetStream cluster", () => {
  let cluster: NatsCluster;
  beforeAll(async () => {
    cluster = await startNatsCluster();
  });
  afterAll(async () => {
    await cluster?.close();
  });

  it("gives the agent's objects three replicas, keeps them across starts and loses nothing when a server is killed", async () => {
    const url = cluster.url;
    const self = identity(`cluster-${Date.now().toString(36)}`);
    const handler = await startHandler();
    open.push(handler);
    const first = await startAgent(url, self, handler);
    const ids = await accepted(first, 5);
    await handedOnSoFar(handler, ids);
    await first.close();
    const second = await startAgent(url, self, handler);
    ids.push(...(await accepted(second, 5)));
    const { jsm } = await admin(url);
    for (const object of agentObjects(self.agentId)) expect(await replicasOf(jsm, object), object).toBe(3);
    await applicationDown(handler, ids);
    ids.push(...(await accepted(second, 5)));
    await cluster.kill(0);
    ids.push((await acceptsAgainWithin(second, 10_000)).id);
    await cluster.restart(0);
    ids.push((await acceptsAgainWithin(second, 10_000)).id);
    await handler.up();
    await everyHandedOnOnce(handler, ids, jsm, self.agentId);
  });

  it("applies a changed durability.replicas where the cluster holds it, and never changes replicas under auto", async () => {
    // The test before killed and restarted a node: every node healthy and agreeing on a meta leader first.
    await cluster.ready();
    const url = cluster.url;
    const { nc, jsm } = await admin(url);
    const placement = placementOf(nc);
    expect(placement.clustered).toBe(true);
    const name = `CHANGE_${Date.now().toString(36)}`;
    const want = { name, subjects: [`change.${name}.>`] };
    expect((await ensureReplicatedStream(jsm, want, 1, placement)).info.config.num_replicas).toBe(1);
    // "auto" leaves an existing stream's replicas as they are.
    expect((await ensureReplicatedStream(jsm, want, "auto", placement)).action).toBe("unchanged");
    expect(await replicasOf(jsm, name)).toBe(1);
    expect((await ensureReplicatedStream(jsm, want, 3, placement)).info.config.num_replicas).toBe(3);
    // More than the cluster has servers: refused by the cluster, reported, the stream keeps three.
    const five = await ensureReplicatedStream(jsm, want, 5, placement);
    expect(five.unmet).toMatchObject({ asked: 5, actual: 3 });
    expect(await replicasOf(jsm, name)).toBe(3);
  });
});
