// 202 means stored (docs/architecture.md): the inbox answers 202 only once JetStream has
// acknowledged the message. Here the message reaches its subject, but no stream takes it and so
// no PubAck comes: the answer must be 503, never 202.
import { jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startNats, type NatsServer } from "../../../e2e/support/nats.ts";
import { localhostTls } from "../../../e2e/support/tls.ts";
import { agentNames } from "../../src/agent/names.ts";
import { runAgent, type Tls } from "../support/agent-harness.ts";
import { identity, peerOf, signed } from "../support/fixtures.ts";
import { metricValue } from "../support/probes.ts";

const self = identity("durable-agent");
const pete = identity("pete-agent");
const names = agentNames(self.agentId);

let nats: NatsServer;
let tls: Tls;
let agent: Awaited<ReturnType<typeof runAgent>>;

beforeAll(async () => {
  [nats, tls] = await Promise.all([startNats(), localhostTls()]);
  agent = await runAgent({ self, natsUrl: nats.url, tls, spec: { peers: [peerOf(pete)] } });
});
afterAll(async () => {
  await agent?.close();
  await nats?.close();
});

describe("the inbox's 202 waits for JetStream's acknowledgement", () => {
  it("answers 503 unavailable, not 202, to a message that reached its subject but was never acknowledged", async () => {
    const nc = await connect({ servers: nats.url });
    const jsm = await jetstreamManager(nc);
    const info = await jsm.streams.info(names.inboxStream);
    // No stream takes the inbox's subjects any more; a plain subscriber receives what is
    // published there and never answers, as a JetStream that does not acknowledge.
    await jsm.streams.update(names.inboxStream, { ...info.config, subjects: [`detached.${names.inboxStream}.>`] });
    const seen: string[] = [];
    const sub = nc.subscribe(names.inboxSubjects, { callback: (_err, msg) => void seen.push(msg.subject) });
    await nc.flush();
    try {
      const m = signed(pete, self.agentId);
      const res = await agent.post(m);
      // The message was published: only the acknowledgement is missing.
      expect(seen).toEqual([names.inbox(m.headers.message_id)]);
      expect(res.status).toBe(503);
      expect(JSON.parse(res.text)).toMatchObject({ status: "error", code: "unavailable" });
      expect(metricValue(await agent.scrape(), "ifp_inbox_requests_total", { result: "accepted" })).toBe(0);
    } finally {
      sub.unsubscribe();
      await jsm.streams.update(names.inboxStream, info.config);
    }
    // Once the stream takes its subjects again, a message is stored and acknowledged: 202.
    const again = signed(pete, self.agentId);
    expect((await agent.post(again)).status).toBe(202);
    expect((await jsm.streams.info(names.inboxStream)).state.messages).toBe(info.state.messages + 1);
    await nc.close();
  }, 30_000);
});
