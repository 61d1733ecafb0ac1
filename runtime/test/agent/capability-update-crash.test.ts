// A runtime killed (SIGKILL, a real child process) as it records a changed capability document
// loses none of its capabilities.update and sends none twice: killed right after it recorded the
// change, it has queued its peers' updates already; killed between queueing them and recording
// the change, the next start queues the same ones again (one copy each, the same `updated`); and
// killed before a relay took its topic announcement, the next start announces it. Many
// conversation records make the runtime slow while it queues, so the kills land where they say.
import { jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { describe, expect, it } from "vitest";
import type { NatsServer } from "../../../e2e/support/nats.ts";
import { spawnProcess } from "../../../e2e/support/process.ts";
import { secondAfter, waitFor } from "../../../e2e/support/wait.ts";
import { Conversations } from "../../src/agent/conversations.ts";
import { agentNames } from "../../src/agent/names.ts";
import { RelayClient } from "../../src/net/relay-client.ts";
import { HttpClient } from "../../src/net/http-client.ts";
import { startRelay } from "../../src/relay/main.ts";
import type { AgentSpecInput } from "../../src/resources/agent.ts";
import {
  identity,
  peerOf,
  tempDir,
  writeAgentManifest,
  writeKey,
  writeRelayManifest,
  type TestIdentity,
} from "../support/fixtures.ts";
import { agentProcessArgs, runAgent, type Tls, withNatsAndTls } from "../support/agent-harness.ts";
import { heldPort, onFreePorts } from "../support/free-ports.ts";
import { scriptedPeer } from "../support/outbox-harness.ts";
import { withRuntimeLog } from "../support/runtime-log.ts";

let nats: NatsServer;
let tls: Tls;
withNatsAndTls((n, t) => ([nats, tls] = [n, t]));

const BIN = new URL("../../bin/ifp-runtime.ts", import.meta.url).pathname;
const cap = (name: string) => ({ name, description: name });

interface Recorded {
  document_hash: string;
  updated: string;
  announced?: boolean;
  pending?: { document_hash: string; updated: string };
}

/** The agent's recorded capability document (the agents bucket), as the runtime wrote it. */
async function recorder(nc: NatsConnection, self: TestIdentity) {
  const names = agentNames(self.agentId);
  const agents = await new Kvm(nc).open(names.kvBucket);
  return async (): Promise<Recorded | undefined> => {
    const entry = await agents.get(`${names.kvKey}.capabilities`);
    return entry?.value.length ? (entry.json() as Recorded) : undefined;
  };
}

/** A conversation with `peer` that the agent sent to, and 9,999 that name no peer to tell, only to be read. */
async function conversationsWith(nc: NatsConnection, self: TestIdentity, peer: string): Promise<void> {
  const conversations = await new Kvm(nc).open(agentNames(self.agentId).conversationsBucket);
  const record = (who: string, extra: object) =>
    JSON.stringify({ conversation_id: "c", peer: who, participants: [who], phase: "context", ...extra });
  await conversations.put(Conversations.key(peer, "c"), record(peer, { last_sequence_out: 1 }));
  for (let i = 0; i < 9_999; i += 500)
    await Promise.all(
      Array.from({ length: Math.min(500, 9_999 - i) }, (_, j) =>
        conversations.put(Conversations.key(`quiet-${i + j}`, "c"), record(`quiet-${i + j}`, { auth_level: 0 })),
      ),
    );
}

type Queued = { headers: { message_id: string; to: { agent: string }[] }; body: any };

/** The capabilities.update messages in the agent's outbox stream. */
async function queuedUpdates(nc: NatsConnection, self: TestIdentity): Promise<Queued[]> {
  const stream = agentNames(self.agentId).outboxStream;
  const jsm = await jetstreamManager(nc);
  const { state } = await jsm.streams.info(stream);
  const queued: Queued[] = [];
  for (let seq = state.first_seq; seq <= state.last_seq; seq++) {
    const m = await jsm.streams.getMessage(stream, { seq }).catch(() => undefined);
    if (m) queued.push(m.json());
  }
  return queued.filter((m) => m.headers.message_id.startsWith("msg:capabilities-"));
}

/** `ifp-runtime agent` as a child process with this spec, killed with SIGKILL once `until` holds. */
async function killedOnce(
  self: TestIdentity,
  dir: string,
  spec: Omit<AgentSpecInput, "agentId">,
  what: string,
  until: () => Promise<boolean>,
): Promise<void> {
  const child = spawnProcess(
    "ifp-runtime agent (to be killed)",
    process.execPath,
    [
      BIN,
      ...agentProcessArgs({
        manifest: writeAgentManifest(dir, { agentId: self.agentId, ...spec }, "changed"),
        key: writeKey(dir, self),
        port: 0, // nothing reaches it: the system picks the port
        tls,
        natsUrl: nats.url,
      }),
    ],
    { env: { ...process.env, IFP_LOG_LEVEL: "warn" } },
  );
  try {
    await waitFor(what, until, 60_000, 5);
  } finally {
    await child.stop({ signal: "SIGKILL" });
  }
}

/**
 * An agent that had a conversation with bob (and 9,999 others), started once with the capability
 * `ping`; bob's inbox answers 503, so what is queued for him stays in the outbox to be read.
 * `run` gets the spec for another capability, the NATS connection, the recorded document's reader
 * and what it recorded first.
 */
async function withPeerToTell(
  name: string,
  run: (t: {
    self: TestIdentity;
    bob: TestIdentity;
    dir: string;
    spec: (capability: string) => Omit<AgentSpecInput, "agentId">;
    nc: NatsConnection;
    recorded: () => Promise<Recorded | undefined>;
    before: Recorded | undefined;
  }) => Promise<void>,
): Promise<void> {
  const self = identity(name);
  const bob = identity("bob-agent");
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
    await conversationsWith(nc, self, bob.agentId);
    const recorded = await recorder(nc, self);
    await run({ self, bob, dir, spec, nc, recorded, before: await recorded() });
  } finally {
    await nc.close();
    await inbox.close();
  }
}

describe("capabilities.update across a crash", () => {
  it("has queued the update for the peers of a changed document when the runtime is killed as the change is recorded", () =>
    withPeerToTell("crashing-agent", async ({ self, bob, dir, spec, nc, recorded, before }) => {
      await killedOnce(
        self,
        dir,
        spec("pong"),
        "the changed document recorded",
        async () => (await recorded())?.document_hash !== before?.document_hash,
      );
      // What the killed runtime left durably: the update for bob in its outbox stream, delivered
      // by the next start as any queued message (runtime/test/outbound/sending.test.ts).
      const told = await queuedUpdates(nc, self);
      expect(told.map((m) => m.headers.to)).toEqual([[{ agent: bob.agentId }]]);
      expect(told[0]!.body.parts[0].content.capabilities.map((c: { name: string }) => c.name)).toEqual(["pong"]);
    }));

  it("queues the same update once when the runtime is killed between queueing it and recording the change", () =>
    withPeerToTell("halfway-agent", async ({ self, bob, dir, spec, nc, recorded, before }) => {
      // Killed once the change is under way (its `updated` written as pending) and not recorded.
      await killedOnce(self, dir, spec("pong"), "the change under way", async () => !!(await recorded())?.pending);
      const halfway = await recorded();
      expect(halfway?.document_hash, "killed before the change was recorded").toBe(before?.document_hash);

      // The next start, in a later second than the pending `updated`, finds the change under
      // way and takes that `updated`: what it queues is what the killed runtime may have queued,
      // one copy.
      await secondAfter(halfway!.pending!.updated);
      const a = await runAgent({ self, dir, natsUrl: nats.url, tls, spec: spec("pong") });
      try {
        const served = (await a.get("/.well-known/agent/capabilities")).json();
        expect(served.updated).toBe(halfway!.pending!.updated);
        expect((await recorded())?.document_hash).toBe(halfway!.pending!.document_hash);
        const told = await queuedUpdates(nc, self);
        expect(told.map((m) => m.headers.to)).toEqual([[{ agent: bob.agentId }]]);
        expect(told[0]!.body.parts[0].content.updated).toBe(served.updated);
      } finally {
        await a.close();
      }
    }));

  it("announces on its relay at the next start a change recorded before a relay took its announcement", async () => {
    const self = identity("announcing-agent");
    const bob = identity("bob-agent");
    const dir = tempDir();
    // The relay is down while the first runtime with the change runs (its port held till then),
    // and up for the next.
    const held = await onFreePorts(["relay"], ({ relay }) => heldPort(relay));
    const relayUrl = `https://localhost:${held.port}`;
    const spec = (capability: string) => ({
      capabilities: [cap(capability)],
      relay: { urls: [relayUrl], pollInterval: "300ms" },
    });
    const nc = await connect({ servers: nats.url });
    const http = new HttpClient({ extraCa: tls.ca });
    try {
      await (await runAgent({ self, dir, natsUrl: nats.url, tls, spec: spec("ping") })).close();
      const recorded = await recorder(nc, self);
      expect((await recorded())?.announced).toBeUndefined();
      const before = (await recorded())?.document_hash;

      await killedOnce(
        self,
        dir,
        spec("pong"),
        "the change recorded, its announcement not taken",
        async () => (await recorded())?.document_hash !== before,
      );
      const changed = await recorded();
      expect(changed?.announced).toBe(false);

      await held.release();
      const relay = await withRuntimeLog("relay (in-process)", (logger) =>
        startRelay({
          manifest: writeRelayManifest(dir, { url: relayUrl, agents: [peerOf(self), peerOf(bob)] }, "relay"),
          port: held.port,
          host: "127.0.0.1",
          tlsCert: tls.files.cert,
          tlsKey: tls.files.key,
          nats: { url: nats.url },
          caFile: tls.files.ca,
          metricsPort: 0,
          logger,
        }),
      );
      try {
        const atBob = new RelayClient(relayUrl, bob.signing, http);
        await waitFor("bob subscribed to capabilities.update", async () => {
          await atBob.subscribe(["capabilities.update"]);
          return true;
        });
        const a = await runAgent({ self, dir, natsUrl: nats.url, tls, spec: spec("pong") });
        try {
          const copy = await waitFor("the announcement in bob's mailbox", async () => {
            const { messages } = await atBob.pull();
            return messages.find((m) => m.headers.from.agent === self.agentId);
          });
          const document = (copy.body.parts![0] as { content: { capabilities: { name: string }[]; updated: string } })
            .content;
          expect(document.capabilities.map((c) => c.name)).toEqual(["pong"]);
          expect(document.updated).toBe(changed!.updated);
          // Taken: recorded as announced, and not announced again by a later start.
          await waitFor("recorded as announced", async () => (await recorded())?.announced === undefined);
        } finally {
          await a.close();
        }
      } finally {
        await relay.close();
      }
    } finally {
      await held.release();
      await http.close();
      await nc.close();
    }
  });
});
