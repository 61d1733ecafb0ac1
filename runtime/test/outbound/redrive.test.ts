import pino from "pino";
import { jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { connect } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { NatsServer } from "../../../e2e/support/nats.ts";
import { consistently, waitFor } from "../../../e2e/support/ports.ts";
import { outboxSettled } from "../support/probes.ts";
import { identity, peerOf } from "../support/fixtures.ts";
import { runAgent, type Tls, withNatsAndTls } from "../support/agent-harness.ts";
import { LocalApiClient, LocalApiError } from "../../src/client/local.ts";
import { scriptedPeer, send, untilState } from "../support/outbox-harness.ts";
import { ifpCommand } from "../support/ifp-command.ts";
import { agentNames } from "../../src/agent/names.ts";
import { DeliveryStates } from "../../src/agent/outbound/delivery-state.ts";
import { Nats } from "../../src/nats/connection.ts";
import { encodeToken } from "../../src/contract/nats.ts";

let nats: NatsServer;
let tls: Tls;
withNatsAndTls((n, t) => ([nats, tls] = [n, t]));

/** How many messages were ever put in the agent's outbox (its stream's last sequence). */
async function queuedSoFar(agentId: string): Promise<number> {
  const nc = await connect({ servers: nats.url });
  try {
    return (await (await jetstreamManager(nc)).streams.info(agentNames(agentId).outboxStream)).state.last_seq;
  } finally {
    await nc.close();
  }
}

/** The witness that nothing more is sent: every message the sender took is acknowledged, none waits. */
const redriverSettled = () => waitFor("the outbox settled", () => outboxSettled(nats.url, "redriver"), 15_000);

/** The answer of a LocalApiClient call that fails: its status and error body. */
async function refusal(call: Promise<unknown>): Promise<{ status: number; code: string; message: string }> {
  try {
    await call;
  } catch (err) {
    if (err instanceof LocalApiError) return { status: err.status, code: err.code, message: err.message };
    throw err;
  }
  throw new Error("the call succeeded");
}

describe("redriving dead letters", () => {
  // A peer that is down (503) until `up`: then it takes every message, slowly enough for
  // deliveries of copies to overlap, and the test counts what it took by message_id.
  let up = false;
  let peer: Awaited<ReturnType<typeof scriptedPeer>>;
  let sender: Awaited<ReturnType<typeof runAgent>>;
  let api: LocalApiClient;
  const accepted = (id: string) =>
    peer.requests.filter((r) => r.headers["idempotency-key"] === id && (r as { ok?: boolean }).ok).length;

  beforeAll(async () => {
    peer = await scriptedPeer(tls, (n) => {
      (peer.requests[n - 1] as { ok?: boolean }).ok = up;
      return up ? { status: 202, delayMs: 300 } : { status: 503 };
    });
    sender = await runAgent({
      self: identity("redriver"),
      natsUrl: nats.url,
      tls,
      spec: {
        peers: [{ ...peerOf(identity("sometimes")), url: peer.url }],
        // The peer is down, then back: a circuit opened while it was down probes again after 200 ms.
        outbound: { backoff: ["200ms"], retryFor: "1s", resiliency: { coolDown: "200ms" } },
      },
    });
    api = new LocalApiClient(sender.localApiUrl);
  });
  afterAll(async () => {
    await sender?.close();
    await peer?.close();
  });

  /** Messages sent while the peer is down, each until it is a dead letter. */
  async function deadLetters(n: number): Promise<string[]> {
    up = false;
    const ids: string[] = [];
    for (let i = 0; i < n; i++)
      ids.push((await send(sender.localApiUrl, { to: "sometimes", text: `m${i}` })).body.message_id);
    for (const id of ids) await untilState(sender.localApiUrl, id, "undeliverable");
    const listed = (await api.deadLetters()).map((d) => d.message_id);
    for (const id of ids) expect(listed).toContain(id);
    return ids;
  }

  it("redrives one dead letter once the peer is back: delivered once, no longer a dead letter", async () => {
    const [id] = await deadLetters(1);
    const before = peer.requests.length;
    expect(before).toBeGreaterThan(1);
    up = true;
    const redriven = await api.redrive(id!);
    expect(redriven).toMatchObject({ status: "queued", message_id: id, record: { state: "queued" } });
    expect(redriven.record.recipients).toEqual([{ agent: "sometimes", state: "queued", attempts: 0 }]);
    const done = await untilState(sender.localApiUrl, id!, "delivered");
    expect(done.recipients[0]).toMatchObject({ state: "delivered", attempts: 1 });
    expect(done.redrive).toMatchObject({ count: 1 });
    expect(accepted(id!)).toBe(1);
    expect((await api.deadLetters()).map((d) => d.message_id)).not.toContain(id);
    // Sent again: not a dead letter any more, and nothing is sent.
    expect(await refusal(api.redrive(id!))).toMatchObject({ status: 409, code: "not_redrivable" });
    await redriverSettled();
    await consistently("no second copy", () => accepted(id!) === 1, 1500);
  });

  it("queues one copy of a dead letter redriven several times at once", async () => {
    const [id] = await deadLetters(1);
    up = true;
    const before = await queuedSoFar("redriver");
    const answers = await Promise.allSettled(Array.from({ length: 8 }, () => api.redrive(id!)));
    expect(await queuedSoFar("redriver")).toBe(before + 1);
    expect(answers.some((a) => a.status === "fulfilled")).toBe(true);
    for (const a of answers)
      if (a.status === "rejected") expect(a.reason).toMatchObject({ status: 409, code: "not_redrivable" });
    await untilState(sender.localApiUrl, id!, "delivered");
    await redriverSettled();
    await consistently("one copy at the peer", () => accepted(id!) === 1, 2000);
    expect(peer.requests.filter((r) => r.headers["idempotency-key"] === id && (r as { ok?: boolean }).ok)).toHaveLength(
      1,
    );
  });

  it("redrives all dead letters, and a second redrive of all sends nothing more", async () => {
    const ids = await deadLetters(3);
    up = true;
    const all = await api.redriveAll();
    for (const id of ids) expect(all.redriven).toContain(id);
    for (const id of ids) await untilState(sender.localApiUrl, id, "delivered");
    const again = await api.redriveAll();
    for (const id of ids) expect(again.redriven).not.toContain(id);
    await redriverSettled();
    await consistently("each delivered once", () => ids.every((id) => accepted(id) === 1), 1500);
    expect(await api.deadLetters()).toEqual([]);
  });

  it("does not send a dead letter that was delivered meanwhile, and removes it from the dead letters", async () => {
    const [id] = await deadLetters(1);
    up = true;
    const before = peer.requests.length;
    // Its record says delivered (as another replica's delivery would write it), the dead letter is still listed.
    const nc = await connect({ servers: nats.url });
    try {
      const kv = await new Kvm(nc).open(agentNames("redriver").outboxStateBucket);
      const rec = (await kv.get(`msg.${encodeToken(id!)}`))!.json<{ recipients: object[] }>();
      const delivered = {
        ...rec,
        state: "delivered",
        recipients: [{ agent: "sometimes", state: "delivered", attempts: 1 }],
      };
      await kv.put(`msg.${encodeToken(id!)}`, JSON.stringify(delivered));
    } finally {
      await nc.close();
    }
    expect((await api.deadLetters()).map((d) => d.message_id)).toContain(id);
    expect(await refusal(api.redrive(id!))).toEqual({
      status: 409,
      code: "not_redrivable",
      message: `message ${id} was delivered meanwhile`,
    });
    expect((await api.deadLetters()).map((d) => d.message_id)).not.toContain(id);
    await consistently("nothing sent", () => peer.requests.length === before, 1500);
  });

  it("completes a redrive cut short between the reset and the outbox under the same id: one copy", async () => {
    const [id] = await deadLetters(1);
    up = true;
    // Another replica's redrive that stops after resetting the record, before the message is queued.
    const conn = new Nats({ url: nats.url, name: "redrive test" }, pino({ level: "silent" }));
    await conn.start();
    try {
      const states = new DeliveryStates(conn, agentNames("redriver").outboxStateBucket);
      await states.ensure();
      const cut = await states
        .redrive(id!, async () => {
          throw new Error("stopped");
        })
        .catch((err: Error) => err.message);
      expect(cut).toBe("stopped");
    } finally {
      await conn.close();
    }
    const reset = await api.status(id!);
    expect(reset).toMatchObject({ state: "queued", redrive: { count: 1 } });
    expect((await api.deadLetters()).map((d) => d.message_id)).toContain(id);
    const before = await queuedSoFar("redriver");
    const redriven = await api.redrive(id!);
    expect(redriven.record.redrive).toEqual(reset.redrive);
    expect(await queuedSoFar("redriver")).toBe(before + 1);
    await untilState(sender.localApiUrl, id!, "delivered");
    expect(accepted(id!)).toBe(1);
    expect((await api.deadLetters()).map((d) => d.message_id)).not.toContain(id);
  });

  it("answers 404 with the error body for an id that is no dead letter nor sent", async () => {
    expect(await refusal(api.redrive("msg:no-such-message"))).toEqual({
      status: 404,
      code: "not_found",
      message: "no dead letter msg:no-such-message",
    });
  });

  describe("ifp redrive", () => {
    const ifp = ifpCommand();
    /** The status and the JSON of `ifp redrive`'s one line. */
    const answer = (stdout: string) => {
      const [, status, json] = /^(\d{3}) (.*)\n$/.exec(stdout)!;
      return { status: Number(status), body: JSON.parse(json!) };
    };

    it("redrives one dead letter (202, exit 0), refuses it again (409, exit 1) and an unknown id (404, exit 1)", async () => {
      const [id] = await deadLetters(1);
      up = true;
      const one = await ifp("redrive", id!, "--local-api", sender.localApiUrl);
      expect(one.status, one.stderr).toBe(0);
      expect(answer(one.stdout)).toMatchObject({ status: 202, body: { status: "queued", message_id: id } });
      await untilState(sender.localApiUrl, id!, "delivered");
      expect(accepted(id!)).toBe(1);
      const again = await ifp("redrive", id!, "--local-api", sender.localApiUrl);
      expect(again.status).toBe(1);
      expect(answer(again.stdout)).toMatchObject({ status: 409, body: { status: "error", code: "not_redrivable" } });
      const unknown = await ifp("redrive", "msg:nobody", "--local-api", sender.localApiUrl);
      expect(unknown.status).toBe(1);
      expect(answer(unknown.stdout)).toEqual({
        status: 404,
        body: { status: "error", code: "not_found", message: "no dead letter msg:nobody" },
      });
    });

    it("redrives all with --all (200, what was redriven), each delivered once", async () => {
      const ids = await deadLetters(2);
      up = true;
      const all = await ifp("redrive", "--all", "--limit", "1000", "--local-api", sender.localApiUrl);
      expect(all.status, all.stderr).toBe(0);
      const { status, body } = answer(all.stdout);
      expect(status).toBe(200);
      for (const id of ids) expect(body.redriven).toContain(id);
      for (const id of ids) await untilState(sender.localApiUrl, id, "delivered");
      await redriverSettled();
      await consistently("each delivered once", () => ids.every((id) => accepted(id) === 1), 1000);
    });

    it.each([
      [["redrive"], /redrive takes one MESSAGE_ID, or --all/],
      [["redrive", "msg:1", "--all"], /redrive takes one MESSAGE_ID, or --all/],
      [["redrive", "msg:1", "--limit", "5"], /--limit goes with --all/],
      [["redrive", "--all", "--limit", "0"], /--limit goes with --all and takes 1 to 1000/],
      [["redrive", "--all", "--text", "x"], /Unknown option '--text'/],
    ])("refuses %j with the usage (exit 2)", async (args, message) => {
      const r = await ifp(...args);
      expect(r.status).toBe(2);
      expect(r.stderr).toMatch(message);
      expect(r.stderr).toMatch(/usage:/);
    });
  });
});
