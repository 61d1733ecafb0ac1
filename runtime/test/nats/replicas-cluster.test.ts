import { jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type NatsCluster, type NatsServer, startNatsCluster } from "../../../e2e/support/nats.ts";
import { waitFor } from "../../../e2e/support/ports.ts";
import { agentNames } from "../../src/agent/names.ts";
import { runAgent, type Tls, withNatsAndTls } from "../support/agent-harness.ts";
import { identity, peerOf, signed } from "../support/fixtures.ts";

let single: NatsServer;
let tls: Tls;
withNatsAndTls((n, t) => ([single, tls] = [n, t]));

async function streamReplicas(url: string, stream: string): Promise<number> {
  const nc = await connect({ servers: url });
  try {
    return (await (await jetstreamManager(nc)).streams.info(stream)).config.num_replicas;
  } finally {
    await nc.close();
  }
}

describe("replicas of the agent's streams", () => {
  it("one replica on a single NATS server when unset", async () => {
    const self = identity("single-node-agent");
    const agent = await runAgent({ self, natsUrl: single.url, tls, spec: {} });
    try {
      expect(await streamReplicas(single.url, agentNames(self.agentId).inboxStream)).toBe(1);
      expect(await streamReplicas(single.url, agentNames(self.agentId).outboxStream)).toBe(1);
    } finally {
      await agent.close();
    }
  });

  describe("on a three-node JetStream cluster", () => {
    let cluster: NatsCluster;
    let nodes: NatsServer[] = [];
    beforeAll(async () => {
      cluster = await startNatsCluster();
      nodes = cluster.nodes;
      // The runtime counts the cluster's peers when it starts: every node in, one meta leader.
      await cluster.ready();
    }, 90_000);
    afterAll(async () => {
      await cluster?.close();
    });

    it("three replicas when unset, and messages accepted with one node down", async () => {
      const self = identity("cluster-agent");
      const peer = identity("cluster-peer");
      const url = cluster.url;
      const agent = await runAgent({ self, natsUrl: url, tls, spec: { peers: [peerOf(peer)] } });
      try {
        const names = agentNames(self.agentId);
        expect(await streamReplicas(nodes[0]!.url, names.inboxStream)).toBe(3);
        expect(await streamReplicas(nodes[0]!.url, names.outboxStream)).toBe(3);
        expect((await agent.post(signed(peer, self.agentId))).status).toBe(202);
        // Its KV buckets too (read on every message: conversation records), so no node holds
        // one alone; the shared bucket of capability documents as well.
        for (const bucket of [names.conversationsBucket, names.outboxStateBucket, names.peersBucket, names.kvBucket]) {
          expect(
            await waitFor(
              `bucket ${bucket}`,
              () => streamReplicas(nodes[0]!.url, `KV_${bucket}`).catch(() => undefined),
              30_000,
              250,
            ),
            bucket,
          ).toBe(3);
        }
        await nodes[2]!.stop();
        // Two of three replicas remain: still a quorum, still accepting.
        await waitFor(
          "a 202 with one node down",
          async () => (await agent.post(signed(peer, self.agentId))).status === 202,
          30_000,
          500,
        );
      } finally {
        await agent.close();
      }
    }, 120_000);
  });
});
