// The operator on a clustered NATS on the isolated layout: three nats-servers in operator mode
// with JetStream, Agents in two namespaces (two tenants), each runtime run exactly as the operator
// rendered it. The tenants' streams have three replicas (what "auto" gives on a cluster) and the
// Agents' consumers one (no Raft group per Agent: docs/scale.md). While messages flow to both
// Agents, a server that holds neither Agent's hand-off consumer is killed: both keep accepting and
// handing on. Then the server that holds ann's consumer is killed: ann keeps accepting (her
// messages are stored in the three-replica inbox) and they are handed on once it is back. Every
// message answered 202 is handed on exactly once.
import { describe, expect, it } from "vitest";
import type { NatsCluster } from "../../../e2e/support/nats.ts";
import { SHARED_STREAMS, sharedStreamConfigs } from "../../../runtime/src/contract/shared-layout.ts";
import { everyHandedOnOnce, handedOn } from "../../../runtime/test/support/hand-offs.ts";
import { consumerSettled } from "../../../runtime/test/support/probes.ts";
import { clusteredNats, isolatedInstall, until } from "../support/isolated-install.ts";

const NS_A = "iso-cluster-a";
const NS_B = "iso-cluster-b";
let cluster: NatsCluster;
const install = isolatedInstall({
  namespaces: [NS_A, NS_B],
  nats: clusteredNats((c) => (cluster = c)),
});

describe("the operator on a three-server NATS cluster, isolated layout", () => {
  it("gives the tenants' streams three replicas and keeps delivering while one server of three is down", async () => {
    const ann = await install.agent(NS_A, "ann");
    const ben = await install.agent(NS_B, "ben");
    for (const a of [ann, ben]) {
      for (const s of sharedStreamConfigs())
        expect((await a.view.streams.info(s.name)).config.num_replicas, `${a.ns} ${s.name}`).toBe(3);
      for (const stream of [SHARED_STREAMS.inbox, SHARED_STREAMS.outbox])
        expect((await a.view.consumers.info(stream, a.account)).config.num_replicas, `${a.name}'s ${stream}`).toBe(1);
    }
    /** The node holding an Agent's hand-off consumer (one replica). */
    const consumerNode = async (a: typeof ann) =>
      cluster.indexOf((await a.view.consumers.info(SHARED_STREAMS.inbox, a.account)).cluster?.leader);
    const holding = [await consumerNode(ann), await consumerNode(ben)];
    expect(holding.every((i) => i >= 0)).toBe(true);
    const flows = [ann, ben].map((a) => install.flow(a.runtime.post, a.to));
    await Promise.all(flows.map((f) => f.more(3)));

    // A server holding neither consumer: both Agents accept and hand on while it is away.
    const idle = [0, 1, 2].find((i) => !holding.includes(i))!;
    await cluster.kill(idle);
    await Promise.all(flows.map((f) => f.more(5)));
    for (const [i, a] of [ann, ben].entries()) {
      const now = [...flows[i]!.ids];
      await until(`${a.name}'s messages handed on with a server down`, () =>
        now.every((id) => handedOn(a.handler).includes(id)),
      );
    }
    await cluster.restart(idle);
    await cluster.ready();
    await Promise.all(flows.map((f) => f.more(3)));

    // The server holding ann's consumer: she still accepts; her messages wait for it in the inbox.
    const annNode = holding[0]!;
    await cluster.kill(annNode);
    const downFrom = flows.map((f) => f.ids.length);
    await Promise.all(flows.map((f) => f.more(5)));
    // Ben's consumer elsewhere: his messages are handed on meanwhile.
    if (holding[1] !== annNode) {
      const now = [...flows[1]!.ids];
      await until("ben's messages handed on with ann's consumer's server down", () =>
        now.every((id) => handedOn(ben.handler).includes(id)),
      );
    }
    const annDown = flows[0]!.ids.slice(downFrom[0]);
    const annWhileDown = annDown.filter((id) => handedOn(ann.handler).includes(id)).length;
    await cluster.restart(annNode);
    await cluster.ready();
    await Promise.all(flows.map((f) => f.more(3)));
    const ids = await Promise.all(flows.map((f) => f.stop()));
    for (const [i, a] of [ann, ben].entries())
      await everyHandedOnOnce(
        a.handler,
        ids[i]!,
        install.alice,
        () => consumerSettled(a.view, SHARED_STREAMS.inbox, a.account),
        120_000,
      );
    for (const a of [ann, ben]) await a.runtime.ready();
    console.log(
      JSON.stringify({
        accepted: ids.map((i) => i.length),
        consumerNodes: holding,
        annAcceptedWhileHerConsumersServerDown: annDown.length,
        annHandedOnOfThoseMeanwhile: annWhileDown,
      }),
    );
  }, 600_000);
});
