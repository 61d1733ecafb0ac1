// The relay's own JetStream requests on a real nats-server: stored copies acknowledged (and
// deduplicated) as the client library would, purges counted, JetStream's refusals as the
// library's errors, and every request that gets no answer failed instead of left waiting —
// no stream on the subject, a responder that never answers, an answer that is not JSON, the
// connection closed under it or replaced.
import { DiscardPolicy, JetStreamApiError } from "@nats-io/jetstream";
import { connect, headers, type NatsConnection } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startNats, type NatsServer } from "../../../e2e/support/nats.ts";
import { isNotFound } from "../contract/nats.ts";
import { isFull } from "../nats/streams.ts";
import { jetstreamManager } from "@nats-io/jetstream";
import { JetStreamRequests, RequestFailed } from "./jetstream-requests.ts";

let server: NatsServer;
let nc: NatsConnection;

beforeAll(async () => {
  server = await startNats();
  nc = await connect({ servers: server.url });
  const jsm = await jetstreamManager(nc);
  await jsm.streams.add({ name: "REQ", subjects: ["req.>"], allow_msg_ttl: true, duplicate_window: 60e9 });
  await jsm.streams.add({ name: "TINY", subjects: ["tiny.>"], max_msgs: 1, discard: DiscardPolicy.New });
});
afterAll(async () => {
  await nc?.close();
  await server?.close();
});

const withId = (id: string) => {
  const h = headers();
  h.set("Nats-Msg-Id", id);
  return h;
};

describe("JetStreamRequests", () => {
  it("stores a message once per Nats-Msg-Id, and purges by subject", async () => {
    const requests = new JetStreamRequests({ nc });
    const [a, b] = await Promise.all([
      requests.publish("req.a", "one", withId("a")),
      requests.publish("req.b", "two", withId("b")),
    ]);
    expect(a).toMatchObject({ stream: "REQ", duplicate: false });
    expect(b.seq).toBe(a.seq + 1);
    expect(await requests.publish("req.a", "one", withId("a"))).toMatchObject({ seq: a.seq, duplicate: true });
    expect(await requests.purge("REQ", "req.a")).toBe(1);
    expect(await requests.purge("REQ", "req.a")).toBe(0);
    expect(requests.inFlight).toBe(0);
  });

  it("rejects with JetStream's own errors: a full stream, a stream that does not exist", async () => {
    const requests = new JetStreamRequests({ nc });
    await requests.publish("tiny.a", "one", withId("t1"));
    const full = await requests.publish("tiny.b", "two", withId("t2")).catch((e: unknown) => e);
    expect(full).toBeInstanceOf(JetStreamApiError);
    expect(isFull(full)).toBe(true);
    const missing = await requests.purge("NO_SUCH_STREAM", "x").catch((e: unknown) => e);
    expect(isNotFound(missing)).toBe(true);
  });

  it("fails a publish to a subject no stream takes (no responders) at once", async () => {
    const requests = new JetStreamRequests({ nc }, { timeoutMs: 60_000 });
    const t = performance.now();
    const err = await requests.publish("nowhere.a", "x", withId("n")).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RequestFailed);
    expect((err as Error).message).toMatch(/no responders/);
    expect(performance.now() - t).toBeLessThan(10_000);
    expect(requests.inFlight).toBe(0);
  });

  it("fails a request that is never answered after its timeout, and one answered with what is not JSON", async () => {
    const silent = nc.subscribe("silent.>");
    const garbled = nc.subscribe("garbled.>", {
      callback: (_e, m) => {
        m.respond("<html>");
      },
    });
    try {
      const requests = new JetStreamRequests({ nc }, { timeoutMs: 300 });
      const err = await requests.publish("silent.a", "x", withId("s")).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(RequestFailed);
      expect((err as Error).message).toMatch(/did not answer within 300 ms/);
      expect(requests.inFlight).toBe(0);
      const bad = await requests.publish("garbled.a", "x", withId("g")).catch((e: unknown) => e);
      expect((bad as Error).message).toMatch(/not JSON/);
    } finally {
      silent.unsubscribe();
      garbled.unsubscribe();
    }
  });

  it("subscribes anew on a connection that replaced the previous one, failing what the old one awaited", async () => {
    const first = await connect({ servers: server.url });
    const second = await connect({ servers: server.url });
    const silent = nc.subscribe("silent.>");
    try {
      const holder: { nc: NatsConnection | undefined } = { nc: first };
      const requests = new JetStreamRequests(holder, { timeoutMs: 60_000 });
      expect(await requests.publish("req.c", "x", withId("c1"))).toMatchObject({ stream: "REQ" });
      const stranded = requests.publish("silent.b", "x", withId("c2")).catch((e: unknown) => e);
      // Wait until the request is sent and awaited before replacing the connection.
      await new Promise((r) => setImmediate(r));
      expect(requests.inFlight).toBe(1);
      await first.close();
      holder.nc = second;
      expect(await requests.publish("req.d", "x", withId("c3"))).toMatchObject({ stream: "REQ" });
      expect(((await stranded) as Error).message).toMatch(/closed before the answer came/);
      await second.close();
      const closed = await requests.publish("req.e", "x", withId("c4")).catch((e: unknown) => e);
      expect((closed as Error).message).toMatch(/closed/);
      expect(requests.inFlight).toBe(0);
    } finally {
      silent.unsubscribe();
      await first.close().catch(() => {});
      await second.close().catch(() => {});
    }
  });
});
