import { connect, credsAuthenticator, type NatsConnection } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { consistently, freePort, waitFor } from "../../../e2e/support/ports.ts";
import type { IsolatedInstall } from "../../../runtime/bench/scale-isolated.ts";
import { encodeToken } from "../../../runtime/src/contract/nats.ts";
import { agentInboxPrefix } from "../../../runtime/src/contract/nats-permissions.ts";
import { SHARED_STREAMS, sharedAgentNames, sharedInboxSubject } from "../../../runtime/src/contract/shared-layout.ts";
import type { AgentSpecInput } from "../../../runtime/src/resources/agent.ts";
import { runAgent, startHandler, type Tls } from "../../../runtime/test/support/agent-harness.ts";
import { identity, peerOf, signed } from "../../../runtime/test/support/fixtures.ts";
import { isolatedAgent, startIsolatedRuntimes } from "../support/isolated-runtimes.ts";
import { watchInbox } from "../../../runtime/test/support/inbox-watch.ts";
import { send, untilState } from "../../../runtime/test/support/outbox-harness.ts";

const TENANT = "team-1";
const alice = identity("alice-agent");
const bob = identity("bob-agent");
/** An Agent without spec.handler: its application pulls from the local API. */
const carol = identity("carol-agent");
/** A peer of bob's at alice's address: alice refuses what is addressed to dave (a 4xx), a dead letter of bob's. */
const dave = identity("dave-agent");

let install: IsolatedInstall;
let tls: Tls;
let a: Awaited<ReturnType<typeof runAgent>>;
let b: Awaited<ReturnType<typeof runAgent>>;
let c: Awaited<ReturnType<typeof runAgent>>;
let aHandler: Awaited<ReturnType<typeof startHandler>>;
let bHandler: Awaited<ReturnType<typeof startHandler>>;
const accounts: Record<string, string> = {};
const credsFiles: Record<string, string> = {};
const open: NatsConnection[] = [];

/** The inbox's duplicates as bob's metrics count them. */
async function duplicates(): Promise<number> {
  const m = /^ifp_inbox_requests_total\{[^}]*result="duplicate"[^}]*\} (\d+)/m.exec(await b.scrape());
  return m ? Number(m[1]) : 0;
}

beforeAll(async () => {
  let dir: string;
  ({ install, tls, dir } = await startIsolatedRuntimes("ifp-shared-runtime-"));
  for (const [name, id] of [
    ["alice", alice],
    ["bob", bob],
    ["carol", carol],
  ] as const) {
    ({ account: accounts[name], credsFile: credsFiles[name] } = await isolatedAgent(
      install,
      dir,
      TENANT,
      name,
      id.agentId,
    ));
  }
  [aHandler, bHandler] = await Promise.all([startHandler(), startHandler()]);
  const [aPort, bPort] = await Promise.all([freePort(), freePort()]);
  /** One Agent's runtime on the layout, its handler the application (or none), its peer the other. */
  const start = (
    self: typeof alice,
    port: number,
    handlerUrl: string | undefined,
    peer: typeof alice,
    peerPort: number,
    more: Omit<AgentSpecInput, "agentId"> = {},
  ) => {
    const name = self.agentId.replace(/-agent$/, "");
    return runAgent({
      natsUrl: install.server.url,
      tls,
      natsLayout: "isolated",
      self,
      port,
      natsCredsFile: credsFiles[name],
      resource: { name, namespace: TENANT },
      spec: {
        peers: [
          { ...peerOf(peer), url: `https://localhost:${peerPort}` },
          { ...peerOf(dave), url: `https://localhost:${peerPort}` },
        ],
        ...(handlerUrl ? { handler: { url: handlerUrl } } : {}),
        outbound: { backoff: ["300ms"], retryFor: "30s" },
        ...more,
      },
    });
  };
  [a, b, c] = await Promise.all([
    start(alice, aPort, aHandler.url, bob, bPort),
    start(bob, bPort, bHandler.url, alice, aPort),
    // With relays of her own (none answers there): spec.relay runs on the layout, her mailboxes read into the same inbox.
    start(carol, await freePort(), undefined, alice, aPort, {
      relay: { urls: [`https://localhost:${await freePort()}`] },
    }),
  ]);
}, 120_000);
afterAll(async () => {
  for (const nc of open) await nc.close().catch(() => {});
  await Promise.all([a?.close(), b?.close(), c?.close()]);
  await Promise.all([aHandler?.close(), bHandler?.close()]);
  await install?.close();
});

describe("the agent runtime on the isolated layout", () => {
  const greeting = signed(alice, "bob-agent", {}, "Hello Bob, over the isolated layout");
  const id = greeting.headers.message_id;
  /** Where bob's copy of the greeting is kept in the tenant's inbox stream. */
  const stored = () => sharedInboxSubject(sharedAgentNames(accounts.bob!), id, encodeToken(`signed:alice-agent ${id}`));

  it("stores a message before its 202, hands it to the application once, and catches its repeat by its subject", async () => {
    const res = await b.post(greeting);
    expect(res.status).toBe(202);
    expect(res.json()).toEqual({ status: "accepted", message_id: id });
    // Stored in the tenant's shared inbox on bob's own subject, as the operator's user there sees it.
    const jsm = await install.operatorOf(TENANT);
    expect((await jsm.streams.info(SHARED_STREAMS.inbox, { subjects_filter: stored() })).state.subjects).toEqual({
      [stored()]: 1,
    });
    await waitFor("bob's application", () => bHandler.received.some((r) => r.body.headers.message_id === id));

    const before = await duplicates();
    const again = await b.post(greeting);
    expect(again.status).toBe(202);
    expect(again.json()).toEqual({ status: "accepted", message_id: id });
    expect(await duplicates()).toBe(before + 1);
    await consistently(
      "the application has the message once",
      () => bHandler.received.filter((r) => r.body.headers.message_id === id).length === 1,
      1_500,
    );
  }, 60_000);

  it("sends the application's reply back through the outbox, its state in the KV records", async () => {
    const sent = await send(b.localApiUrl, { to: "alice-agent", in_reply_to: id, text: "Got it, Alice" });
    expect(sent.status).toBe(202);
    const replyId = sent.body.message_id as string;
    const done = await untilState(b.localApiUrl, replyId, "delivered");
    expect(done.recipients).toEqual([expect.objectContaining({ agent: "alice-agent", state: "delivered" })]);
    const got = await waitFor("alice's application", () =>
      aHandler.received.find((r) => r.body.headers.message_id === replyId),
    );
    // The reply found what it answers by direct get of bob's inbox subject: the same conversation.
    expect(got.body.headers).toMatchObject({
      thread: { in_reply_to: id },
      conversation_id: greeting.headers.conversation_id,
      sequence: greeting.headers.sequence + 1,
      from: { agent: "bob-agent" },
    });
  }, 60_000);

  it("hands a message to an application without a handler through the local API's pull, until it is acknowledged", async () => {
    const m = signed(alice, "carol-agent", {}, "Hello Carol");
    expect((await c.post(m)).status).toBe(202);
    const pull = async (limit: number, wait: number) =>
      ((await (await fetch(`${c.localApiUrl}/messages?limit=${limit}&wait=${wait}`)).json()) as { messages: any[] })
        .messages;
    const got = await pull(1, 10);
    expect(got).toEqual([
      expect.objectContaining({ message_id: m.headers.message_id, sender: "alice-agent", delivery_attempt: 1 }),
    ]);
    expect(got[0].message.body).toEqual({ text: "Hello Carol" });
    const ack = await fetch(`${c.localApiUrl}/messages/${encodeURIComponent(m.headers.message_id)}/ack`, {
      method: "POST",
    });
    expect(ack.status).toBe(204);
    expect(await pull(5, 1)).toEqual([]);
    // The operator's consumer of carol's, named by her account key, took the acknowledgement.
    const jsm = await install.operatorOf(TENANT);
    const info = await jsm.consumers.info(SHARED_STREAMS.inbox, accounts.carol!);
    expect([info.num_pending, info.num_ack_pending]).toEqual([0, 0]);
  }, 60_000);

  it("watches the inbox from now: each message as it is stored, with its sequence, taking none", async () => {
    const { status, events, stop } = await watchInbox(b.localApiUrl);
    expect(status).toBe(200);
    const m = signed(alice, "bob-agent", {}, "Watched, Bob");
    expect((await b.post(m)).status).toBe(202);
    const seen = await waitFor("the watch's event", () => events.find((e) => e.message_id === m.headers.message_id));
    expect(seen).toMatchObject({ sender: "alice-agent", handed_on: true, message: { body: { text: "Watched, Bob" } } });
    expect(seen.seq).toBeGreaterThan(0);
    expect(Date.parse(seen.stored)).toBeGreaterThan(Date.now() - 60_000);
    // Its repeat is not stored again, so not watched again; the application gets it still.
    expect((await b.post(m)).status).toBe(202);
    await waitFor("bob's application", () =>
      bHandler.received.some((r) => r.body.headers.message_id === m.headers.message_id),
    );
    // Nothing another Agent accepts reaches bob's watch.
    const forCarol = signed(alice, "carol-agent", {}, "Not bob's");
    expect((await c.post(forCarol)).status).toBe(202);
    // The witness: bob's next message, stored after both, is watched.
    const next = signed(alice, "bob-agent", {}, "After carol's");
    expect((await b.post(next)).status).toBe(202);
    await waitFor("the watch's event of the next message", () =>
      events.some((e) => e.message_id === next.headers.message_id),
    );
    await consistently(
      "watched once, and carol's message not watched by bob",
      () =>
        events.filter((e) => e.message_id === m.headers.message_id).length === 1 &&
        !events.some((e) => e.message_id === forCarol.headers.message_id),
      1_000,
    );
    await stop();
    // A look back is served too (nats-shared-layout-features.test.ts).
    const back = await fetch(`${b.localApiUrl}/messages/watch?since=60`);
    expect(back.status).toBe(200);
    await back.body?.cancel();
  }, 60_000);

  it("answers a short-form reply without `to` to the first sender of that message_id, whoever reused it later", async () => {
    const first = signed(alice, "bob-agent", {}, "First with this id");
    const reused = signed(dave, "bob-agent", { message_id: first.headers.message_id }, "Same id, later");
    expect((await b.post(first)).status).toBe(202);
    expect((await b.post(reused)).status).toBe(202);
    const sent = await send(b.localApiUrl, { in_reply_to: first.headers.message_id, text: "to whom?" });
    expect(sent.status, JSON.stringify(sent.body)).toBe(202);
    const got = await waitFor("alice's application", () =>
      aHandler.received.find((r) => r.body.headers.message_id === sent.body.message_id),
    );
    expect(got.body.headers).toMatchObject({
      to: [{ agent: "alice-agent" }],
      thread: { in_reply_to: first.headers.message_id },
      conversation_id: first.headers.conversation_id,
    });
  }, 60_000);

  it("lists a conversation's records, and dead letters, which it redrives", async () => {
    const conv = await fetch(`${b.localApiUrl}/conversations/${encodeURIComponent(greeting.headers.conversation_id)}`);
    expect(conv.status).toBe(200);
    expect(await conv.json()).toMatchObject({
      peers: expect.arrayContaining([expect.objectContaining({ peer: "alice-agent" })]),
    });
    const unknown = await fetch(`${b.localApiUrl}/conversations/conv-never-seen`);
    expect(unknown.status).toBe(404);

    // Alice refuses what is addressed to dave: bob's delivery fails, a dead letter.
    const sent = await send(b.localApiUrl, { to: "dave-agent", text: "Hello Dave" });
    expect(sent.status).toBe(202);
    await untilState(b.localApiUrl, sent.body.message_id, "failed");
    const list = async () =>
      ((await (await fetch(`${b.localApiUrl}/dead-letters`)).json()) as { dead_letters: { message_id: string }[] })
        .dead_letters;
    // The dead letter's listing key is written after the message is marked failed.
    await waitFor(
      "the dead letter listed",
      async () => (await list()).some((d) => d.message_id === sent.body.message_id),
      30_000,
      100,
    );
    const redrive = await fetch(`${b.localApiUrl}/dead-letters/redrive`, { method: "POST" });
    expect(redrive.status).toBe(200);
    expect(JSON.stringify(await redrive.json())).toContain(sent.body.message_id);
    // Redriven, it is no dead letter until it fails again.
    await waitFor("the redriven letter off the list, or failed again", async () => {
      const r: any = await (await fetch(`${b.localApiUrl}/outbox/${encodeURIComponent(sent.body.message_id)}`)).json();
      return r.redrive !== undefined;
    });
  }, 90_000);

  it("gives alice's credential nothing of bob's: no direct get of his stored message, no pull from his consumer", async () => {
    const nc = await connect({
      servers: install.server.url,
      authenticator: credsAuthenticator(
        new TextEncoder().encode(await install.runtimeCreds(`${TENANT}/alice`, alice.agentId)),
      ),
      inboxPrefix: agentInboxPrefix(alice.agentId),
      reconnect: false,
    });
    open.push(nc);
    const ask = (subject: string, body = "") =>
      nc.request(subject, body, { timeout: 1_500 }).then(
        (m) => m.string(),
        () => undefined,
      );
    // Her own subject of the same shape answers (nothing stored there): the request itself is fine.
    const own = sharedInboxSubject(sharedAgentNames(accounts.alice!), id, encodeToken(`signed:alice-agent ${id}`));
    expect(await ask(`$JS.API.DIRECT.GET.${SHARED_STREAMS.inbox}.${own}`)).toBeDefined();
    expect(await ask(`$JS.API.DIRECT.GET.${SHARED_STREAMS.inbox}.${stored()}`)).toBeUndefined();
    expect(
      await ask(
        `$JS.API.CONSUMER.MSG.NEXT.${SHARED_STREAMS.inbox}.${accounts.bob}`,
        JSON.stringify({ batch: 1, expires: 1_000_000_000 }),
      ),
    ).toBeUndefined();
  }, 30_000);
});
