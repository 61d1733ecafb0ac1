// Requests answered on one reply subscription (nats/replies.ts), on a real nats-server: each answer
// reaches its own request, out of order too, on one subscription and without the client's own
// request machinery; JetStream publishes, compare-and-set conflicts and direct gets answered as the
// library answers them; a request without responders, one that is never answered, one the server
// refuses for permissions and one under way when the connection closes each fail as the library's.
import { jetstream } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import {
  connect,
  NoRespondersError,
  PermissionViolationError,
  RequestError,
  TimeoutError,
  type NatsConnection,
} from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startNats, type NatsServer } from "../../../e2e/support/nats.ts";
import { isCasConflict } from "../../src/nats/layout.ts";
import { sharingReplies } from "../../src/nats/replies.ts";

let server: NatsServer;
let nc: NatsConnection;
const AUTH = { user: "bench", pass: "secret-0123456789" };

beforeAll(async () => {
  server = await startNats({
    config: `authorization { users: [ { user: ${AUTH.user}, password: ${AUTH.pass}, permissions: { publish: { deny: ["denied.>"] } } } ] }\n`,
    connect: AUTH,
  });
  nc = await connect({ servers: server.url, ...AUTH });
});
afterAll(async () => {
  await nc?.close();
  await server?.close();
});

/** The client's own request mux (made at its first request()), and its subscriptions. */
const internals = (c: NatsConnection) =>
  (c as unknown as { protocol: { subscriptions: { getMux(): unknown; size(): number } } }).protocol.subscriptions;

describe("requests on one reply subscription", () => {
  it("gives each request its own answer, out of order too, on one subscription and not the client's mux", async () => {
    const responder = await connect({ servers: server.url, ...AUTH });
    try {
      // Answers the requests of a burst in the reverse order they came in.
      const held: { reply: string; n: string }[] = [];
      responder.subscribe("echo", {
        callback: (_err, m) => {
          held.push({ reply: m.reply!, n: m.string() });
          if (held.length === 50) for (const h of held.reverse()) responder.publish(h.reply, `re ${h.n}`);
        },
      });
      await responder.flush();
      const c = await connect({ servers: server.url, ...AUTH });
      try {
        const r = sharingReplies(c);
        const before = internals(c).size();
        const answers = await Promise.all(
          Array.from({ length: 50 }, (_, i) => r.request("echo", String(i), { timeout: 5_000 })),
        );
        expect(answers.map((m) => m.string())).toEqual(Array.from({ length: 50 }, (_, i) => `re ${i}`));
        expect(internals(c).getMux()).toBeFalsy();
        expect(internals(c).size()).toBe(before + 1);
      } finally {
        await c.close();
      }
    } finally {
      await responder.close();
    }
  });

  it("answers JetStream publishes, compare-and-set conflicts and direct gets as the library does", async () => {
    const r = sharingReplies(nc);
    const kv = await new Kvm(jetstream(r)).create("replies_test", { history: 1, allow_direct: true });
    const rev = await kv.create("a", "1");
    expect(await kv.update("a", "2", rev)).toBeGreaterThan(rev);
    const conflict = await kv.update("a", "3", rev).catch((e: unknown) => e);
    expect(isCasConflict(conflict)).toBe(true);
    expect((await kv.get("a"))?.string()).toBe("2");
    expect(await kv.get("missing")).toBeNull();
    expect(internals(nc).getMux()).toBeFalsy();
  });

  it("fails a request without responders as the library does", async () => {
    const err = await sharingReplies(nc)
      .request("nobody.listens", "x", { timeout: 5_000 })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RequestError);
    expect((err as RequestError).isNoResponders()).toBe(true);
    expect((err as RequestError).cause).toBeInstanceOf(NoRespondersError);
  });

  it("times out a request nobody answers, within its timeout and the sweep", async () => {
    const sub = nc.subscribe("silent", { callback: () => {} });
    await nc.flush();
    try {
      const start = Date.now();
      const err = await sharingReplies(nc)
        .request("silent", "x", { timeout: 300 })
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(TimeoutError);
      expect(Date.now() - start).toBeGreaterThanOrEqual(290);
      expect(Date.now() - start).toBeLessThan(2_000);
    } finally {
      sub.unsubscribe();
    }
  });

  it("fails a request the server refuses for permissions at once, not at its timeout", async () => {
    const start = Date.now();
    const err = await sharingReplies(nc)
      .request("denied.subject", "x", { timeout: 20_000 })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(PermissionViolationError);
    expect(Date.now() - start).toBeLessThan(10_000);
  });

  it("fails the requests under way when the connection closes", async () => {
    const c = await connect({ servers: server.url, ...AUTH });
    const sub = nc.subscribe("never", { callback: () => {} });
    await nc.flush();
    try {
      const pending = sharingReplies(c)
        .request("never", "x", { timeout: 20_000 })
        .catch((e: unknown) => e);
      await c.flush();
      const start = Date.now();
      await c.close();
      const err = await pending;
      expect(err).toBeInstanceOf(Error);
      expect(err).not.toBeInstanceOf(TimeoutError);
      expect(Date.now() - start).toBeLessThan(10_000);
    } finally {
      sub.unsubscribe();
    }
  });
});
