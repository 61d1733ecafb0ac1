// A runtime killed (SIGKILL, a real child process) right after it recorded a changed capability
// document has left its peers' capabilities.update in the outbox: it is queued before the new
// document's hash is recorded. Many conversation records make the runtime slow between the
// two steps, so the kill lands there whatever their order.
import { jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { connect } from "@nats-io/transport-node";
import { describe, expect, it } from "vitest";
import type { NatsServer } from "../../../e2e/support/nats.ts";
import { freePort } from "../../../e2e/support/ports.ts";
import { spawnProcess } from "../../../e2e/support/process.ts";
import { waitFor } from "../../../e2e/support/wait.ts";
import { Conversations } from "../../src/agent/conversations.ts";
import { agentNames } from "../../src/agent/names.ts";
import { identity, peerOf, tempDir, writeAgentManifest, writeKey } from "../support/fixtures.ts";
import { agentProcessArgs, runAgent, type Tls, withNatsAndTls } from "../support/agent-harness.ts";
import { scriptedPeer } from "../support/outbox-harness.ts";

let nats: NatsServer;
let tls: Tls;
withNatsAndTls((n, t) => ([nats, tls] = [n, t]));

const BIN = new URL("../../bin/ifp-runtime.ts", import.meta.url).pathname;
const cap = (name: string) => ({ name, description: name });

describe("capabilities.update across a crash", () => {
  it("has queued the update for the peers of a changed document when the runtime is killed as the change is recorded", async () => {
    const self = identity("crashing-agent");
    const bob = identity("bob-agent");
    const names = agentNames(self.agentId);
    // bob's inbox is not up: what was queued stays in the outbox to be read.
    const inbox = await scriptedPeer(tls, () => ({ status: 503 }));
    const dir = tempDir();
    const spec = (capability: string) => ({
      capabilities: [cap(capability)],
      peers: [{ ...peerOf(bob), url: inbox.url }],
      outbound: { backoff: ["200ms"], retryFor: "1m" },
    });
    const nc = await connect({ servers: nats.url });
    try {
      // The first start records the document (and announces nothing).
      await (await runAgent({ self, dir, natsUrl: nats.url, tls, spec: spec("ping") })).close();
      const conversations = await new Kvm(nc).open(names.conversationsBucket);
      const record = (peer: string, extra: object) =>
        JSON.stringify({ conversation_id: "c", peer, participants: [peer], phase: "context", ...extra });
      await conversations.put(Conversations.key(bob.agentId, "c"), record(bob.agentId, { last_sequence_out: 1 }));
      // Conversations that name no peer to tell, only to be read.
      for (let i = 0; i < 9_999; i += 500)
        await Promise.all(
          Array.from({ length: Math.min(500, 9_999 - i) }, (_, j) =>
            conversations.put(Conversations.key(`quiet-${i + j}`, "c"), record(`quiet-${i + j}`, { auth_level: 0 })),
          ),
        );
      const agents = await new Kvm(nc).open(names.kvBucket);
      const key = `${names.kvKey}.capabilities`;
      const recorded = async () => {
        const entry = await agents.get(key);
        return entry ? (entry.json() as { document_hash: string }).document_hash : undefined;
      };
      const before = await recorded();

      const child = spawnProcess(
        "ifp-runtime agent (to be killed)",
        process.execPath,
        [
          BIN,
          ...agentProcessArgs({
            manifest: writeAgentManifest(dir, { agentId: self.agentId, ...spec("pong") }, "changed"),
            key: writeKey(dir, self),
            port: await freePort(),
            tls,
            natsUrl: nats.url,
          }),
        ],
        { env: { ...process.env, IFP_LOG_LEVEL: "warn" } },
      );
      try {
        await waitFor("the changed document recorded", async () => (await recorded()) !== before, 60_000, 5);
      } finally {
        await child.stop({ signal: "SIGKILL" });
      }

      // What the killed runtime left durably: the update for bob in its outbox stream, delivered
      // by the next start as any queued message (runtime/test/outbound/sending.test.ts).
      const jsm = await jetstreamManager(nc);
      const { state } = await jsm.streams.info(names.outboxStream);
      const queued: { headers: { message_id: string; to: { agent: string }[] }; body: any }[] = [];
      for (let seq = state.first_seq; seq <= state.last_seq; seq++) {
        const m = await jsm.streams.getMessage(names.outboxStream, { seq }).catch(() => undefined);
        if (m) queued.push(m.json());
      }
      const told = queued.filter((m) => m.headers.message_id.startsWith("msg:capabilities-"));
      expect(told.map((m) => m.headers.to)).toEqual([[{ agent: bob.agentId }]]);
      expect(told[0]!.body.parts[0].content.capabilities.map((c: { name: string }) => c.name)).toEqual(["pong"]);
    } finally {
      await nc.close();
      await inbox.close();
    }
  });
});
