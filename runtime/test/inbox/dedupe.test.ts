// The inbox's deduplication, scoped to the verified sender, and its window on headers.date, on a
// real nats-server over TLS.
import { jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startNats, type NatsServer } from "../../../e2e/support/nats.ts";
import { localhostTls } from "../../../e2e/support/tls.ts";
import { agentNames } from "../../src/agent/names.ts";
import { identity, peerOf, signed } from "../support/fixtures.ts";
import { runAgent, type Tls } from "../support/agent-harness.ts";
import { metricValue } from "../support/probes.ts";

const self = identity("dedupe-agent");
const pete = identity("pete-agent");
const mallory = identity("mallory-agent");

let nats: NatsServer;
let tls: Tls;
let agent: Awaited<ReturnType<typeof runAgent>>;

beforeAll(async () => {
  [nats, tls] = await Promise.all([startNats(), localhostTls()]);
  agent = await runAgent({ self, natsUrl: nats.url, tls, spec: { peers: [peerOf(pete), peerOf(mallory)] } });
});
afterAll(async () => {
  await agent?.close();
  await nats?.close();
});

/** The stored copies of one message_id in the agent's inbox stream, with the sender each was stored for. */
async function storedCopies(messageId: string): Promise<{ sender: string; from: string }[]> {
  const nc = await connect({ servers: nats.url });
  try {
    const jsm = await jetstreamManager(nc);
    const names = agentNames(self.agentId);
    const subject = names.inbox(messageId);
    const info = await jsm.streams.info(names.inboxStream, { subjects_filter: subject });
    const count = info.state.subjects?.[subject] ?? 0;
    const copies: { sender: string; from: string }[] = [];
    let seq = info.state.first_seq;
    while (copies.length < count) {
      const m = await jsm.streams.getMessage(names.inboxStream, { seq, next_by_subj: subject } as never);
      if (!m) break;
      copies.push({
        sender: m.header?.get("Ifp-Sender") ?? "",
        from: m.json<{ headers: { from: { agent: string } } }>().headers.from.agent,
      });
      seq = m.seq + 1;
    }
    return copies;
  } finally {
    await nc.close();
  }
}

const inboxResults = async () => {
  const text = await agent.scrape();
  return {
    accepted: metricValue(text, "ifp_inbox_requests_total", { result: "accepted" }),
    duplicate: metricValue(text, "ifp_inbox_requests_total", { result: "duplicate" }),
  };
};

describe("inbox deduplication is scoped to the verified sender", () => {
  it("stores the same message_id from two verified senders twice, and once for one sender sending twice", async () => {
    const before = await inboxResults();
    const fromPete = signed(pete, self.agentId, {}, "from pete");
    const fromMallory = signed(
      mallory,
      self.agentId,
      { message_id: fromPete.headers.message_id },
      "from mallory, same id",
    );

    for (const m of [fromPete, fromMallory, fromPete]) {
      const res = await agent.post(m, { "idempotency-key": m.headers.message_id });
      expect(res.status).toBe(202);
      expect(res.json()).toEqual({ status: "accepted", message_id: fromPete.headers.message_id });
    }
    // Mallory's copy did not suppress pete's, and pete's repeat stored nothing.
    const copies = await storedCopies(fromPete.headers.message_id);
    expect(copies.sort((a, b) => a.sender.localeCompare(b.sender))).toEqual([
      { sender: "mallory-agent", from: "mallory-agent" },
      { sender: "pete-agent", from: "pete-agent" },
    ]);
    expect(await inboxResults()).toEqual({ accepted: before.accepted + 2, duplicate: before.duplicate + 1 });

    // Mallory's repeat is absorbed as well.
    expect((await agent.post(fromMallory)).status).toBe(202);
    expect(await storedCopies(fromPete.headers.message_id)).toHaveLength(2);
    expect(await inboxResults()).toEqual({ accepted: before.accepted + 2, duplicate: before.duplicate + 2 });
  });
});

describe("inbox date window: at most 5 minutes ahead", () => {
  it("refuses a date too far in the future with 400 invalid_format and stores nothing", async () => {
    const ahead = signed(pete, self.agentId, { date: new Date(Date.now() + 10 * 60_000).toISOString() });
    const res = await agent.post(ahead);
    expect(res.status).toBe(400);
    expect(res.json()).toEqual({
      status: "error",
      code: "invalid_format",
      message: expect.stringMatching(/^headers\.date \S+ is outside the accepted window \(48h back, 5m ahead\)$/),
    });
    expect(await storedCopies(ahead.headers.message_id)).toEqual([]);
  });

  it("accepts a date ahead of the clock inside the window", async () => {
    const ahead = signed(pete, self.agentId, { date: new Date(Date.now() + 3 * 60_000).toISOString() });
    const res = await agent.post(ahead);
    expect(res.status).toBe(202);
    expect(await storedCopies(ahead.headers.message_id)).toEqual([{ sender: "pete-agent", from: "pete-agent" }]);
  });
});

describe("inbox duplicate window: the replay window, held by the inbox stream", () => {
  const streamConfig = async (agentId: string) => {
    const nc = await connect({ servers: nats.url });
    try {
      return (await (await jetstreamManager(nc)).streams.info(agentNames(agentId).inboxStream)).config;
    } finally {
      await nc.close();
    }
  };

  it("deduplicates for 48 hours by default, and for spec.inbox.replayWindow when it is set", async () => {
    // A window any shorter lets a sender's retry (24 h of them) be stored twice.
    expect((await streamConfig(self.agentId)).duplicate_window).toBe(48 * 3600e9);
    const longer = identity("long-window-agent");
    const other = await runAgent({
      self: longer,
      natsUrl: nats.url,
      tls,
      spec: { peers: [peerOf(pete)], inbox: { replayWindow: "72h" } },
    });
    try {
      const config = await streamConfig(longer.agentId);
      expect(config.duplicate_window).toBe(72 * 3600e9);
      // Kept at least as long as the window, so that the window outlives no message.
      expect(config.max_age).toBeGreaterThanOrEqual(72 * 3600e9);
    } finally {
      await other.close();
    }
  });
});
