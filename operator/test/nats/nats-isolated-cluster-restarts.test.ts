// Restarts in every order on a three-server NATS cluster on the isolated layout, as the operator
// makes it (`--nats-layout isolated`, a real API server, three nats-servers in operator mode, each
// runtime run exactly as the operator rendered it): the runtime and then NATS (every server killed
// with kill -9 and started again on its store), NATS and then the runtime (started again while
// every server is away), and a server lost for good — its store gone, a new server started in its
// place and the lost one removed from the JetStream cluster (`$JS.API.SERVER.REMOVE`, what
// `nats server raft peer-remove` sends): the tenant's streams have three current replicas again,
// none on the lost server, and both Agents, one of whose consumers was on it, go on; and a server
// that comes back under its name with an empty store (a StatefulSet's pod given a new volume),
// which needs no removal. Every message answered 202 is handed to its application exactly once
// (by its Idempotency-Key), none is lost.
import { describe, expect, it } from "vitest";
import type { NatsCluster } from "../../../e2e/support/nats.ts";
import { SHARED_STREAMS, sharedStreamConfigs } from "../../../runtime/src/contract/shared-layout.ts";
import { signed } from "../../../runtime/test/support/fixtures.ts";
import { applicationDown } from "../../../runtime/test/support/hand-offs.ts";
import { clusteredNats, isolatedInstall, runtimeThenNats, until } from "../support/isolated-install.ts";

const NS = "iso-cluster-restart";
let cluster: NatsCluster;
const install = isolatedInstall({
  namespaces: [NS],
  nats: clusteredNats((c) => (cluster = c)),
});

const nodes = () => cluster.nodes.map((_, i) => i);

/** kill -9 of every server, each started again on its store and ports; until the cluster is healthy. */
async function killAll(): Promise<void> {
  await Promise.all(nodes().map((i) => cluster.kill(i)));
}
async function startAll(): Promise<void> {
  await Promise.all(nodes().map((i) => cluster.restart(i, 180_000)));
  await cluster.ready(120_000);
}

describe("restarts on a three-server NATS cluster, isolated layout", () => {
  it("loses nothing when the runtime is started again and every server is then killed", async () => {
    // Messages wait in the tenant's inbox (three replicas) while the application is down, across the kills.
    await runtimeThenNats(
      await install.counted(NS, "bob"),
      async () => {
        await killAll();
        await startAll();
      },
      120_000,
    );
  }, 600_000);

  it("loses nothing in the other order: every server killed, the runtime started again while they are away, then NATS", async () => {
    const carol = await install.counted(NS, "carol");
    await applicationDown(carol.handler, []);
    const ids = await carol.accepted(5);
    await killAll();
    await carol.runtime.start();
    // A message it cannot store is refused "send it again", never taken; it is not ready.
    expect((await carol.runtime.post(signed(install.alice, carol.to))).status).toBe(503);
    expect(await carol.runtime.readyz()).toBe(503);
    await startAll();
    await carol.runtime.ready();
    ids.push(await carol.acceptsAgain(), ...(await carol.accepted(3)));
    await carol.handler.up();
    await carol.everyHandedOnOnce(ids, 120_000);
  }, 600_000);

  it("keeps serving the tenant's streams when a server is lost for good, replaced and removed from the cluster", async () => {
    const ann = await install.counted(NS, "ann");
    const ben = await install.counted(NS, "ben");
    const view = ann.view;
    const consumerNode = async (a: typeof ann) =>
      cluster.indexOf((await view.consumers.info(SHARED_STREAMS.inbox, a.account)).cluster?.leader);
    // The server to lose: the one holding ann's hand-off consumer (one replica), the worst case.
    const lostIndex = await consumerNode(ann);
    expect(lostIndex).toBeGreaterThanOrEqual(0);
    const consumersBefore = [cluster.names[lostIndex], cluster.names[await consumerNode(ben)]];
    const flows = [ann, ben].map((a) => install.flow(a.runtime.post, a.to));
    await Promise.all(flows.map((f) => f.more(3)));

    const lost = await cluster.replace(lostIndex);
    // While it is gone, both Agents accept: their messages are on the two servers left.
    await Promise.all(flows.map((f) => f.more(5)));
    // What an operator of the install does for a server that will not come back.
    const system = await install.connection(await install.issuer.systemCreds());
    const removed = JSON.parse(
      (
        await until(`the JetStream cluster to remove ${lost}`, async () => {
          const r = await system
            .request("$JS.API.SERVER.REMOVE", JSON.stringify({ peer: lost }), { timeout: 10_000 })
            .catch(() => undefined);
          return r && JSON.parse(r.string()).success ? r : undefined;
        })
      ).string(),
    );
    expect(removed.success).toBe(true);
    await cluster.ready(180_000);
    // Every stream of the tenant on three current replicas, none of them the lost server.
    for (const s of sharedStreamConfigs())
      await until(`${s.name} on three current replicas without ${lost}`, async () => {
        const c = (await view.streams.info(s.name).catch(() => undefined))?.cluster;
        const peers = [c?.leader, ...(c?.replicas ?? []).map((r) => r.name)];
        return (
          c?.leader &&
          peers.length === 3 &&
          !peers.includes(lost) &&
          (c.replicas ?? []).every((r) => r.current && !r.offline)
        );
      });
    // Each Agent's consumers are on a server of the cluster.
    for (const a of [ann, ben])
      for (const stream of [SHARED_STREAMS.inbox, SHARED_STREAMS.outbox])
        await until(`${a.name}'s ${stream} consumer on a server of the cluster`, async () => {
          const leader = (await view.consumers.info(stream, a.account).catch(() => undefined))?.cluster?.leader;
          return leader && cluster.indexOf(leader) >= 0;
        });
    await Promise.all(flows.map((f) => f.more(5)));
    const ids = await Promise.all(flows.map((f) => f.stop()));
    const redelivered = [
      (await ann.everyHandedOnOnce(ids[0]!, 180_000)).redelivered,
      (await ben.everyHandedOnOnce(ids[1]!, 180_000)).redelivered,
    ];
    for (const a of [ann, ben]) await a.runtime.ready();
    const consumersAfter = [cluster.names[await consumerNode(ann)], cluster.names[await consumerNode(ben)]];
    console.log(
      JSON.stringify({ lost, consumersBefore, consumersAfter, accepted: ids.map((i) => i.length), redelivered }),
    );
  }, 600_000);

  it("keeps serving the tenant's streams when a server comes back under its name with an empty store", async () => {
    const dan = await install.counted(NS, "dan");
    const view = dan.view;
    const lostIndex = cluster.indexOf((await view.consumers.info(SHARED_STREAMS.inbox, dan.account)).cluster?.leader);
    expect(lostIndex).toBeGreaterThanOrEqual(0);
    const flow = install.flow(dan.runtime.post, dan.to);
    await flow.more(3);
    // A StatefulSet's pod whose volume was lost: the same server_name, an empty store, no removal.
    const name = await cluster.replace(lostIndex, true);
    await flow.more(5);
    await cluster.ready(180_000);
    for (const s of sharedStreamConfigs())
      await until(`${s.name} on three current replicas`, async () => {
        const c = (await view.streams.info(s.name).catch(() => undefined))?.cluster;
        return c?.leader && (c.replicas ?? []).length === 2 && (c.replicas ?? []).every((r) => r.current && !r.offline);
      });
    await flow.more(5);
    const ids = await flow.stop();
    const { redelivered } = await dan.everyHandedOnOnce(ids, 180_000);
    await dan.runtime.ready();
    console.log(JSON.stringify({ sameName: name, accepted: ids.length, redelivered }));
  }, 600_000);
});
