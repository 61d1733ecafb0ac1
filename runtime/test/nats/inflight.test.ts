// A NATS call under way when the connection goes away is abandoned at once with 503 `unavailable`
// (Nats.whileConnected) on the inbox path — the conversation record, the inbox stream, and on the
// isolated layout the inbox's byte count (spec.inbox.maxBytes) — and on the relay's publish path,
// instead of waiting for its 5 s timeout or for NATS to come back.
// nats-server is frozen (SIGSTOP) so that the call is surely under way, then killed.
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startNats, type NatsServer } from "../../../e2e/support/nats.ts";
import { tempDir } from "../../../e2e/support/process.ts";
import { waitFor } from "../../../e2e/support/wait.ts";
import { IsolatedInstall } from "../../bench/scale-isolated.ts";
import { Conversations } from "../../src/agent/conversations.ts";
import { agentNames } from "../../src/agent/names.ts";
import { InboxStore } from "../../src/agent/inbound/store.ts";
import { agentInboxPrefix } from "../../src/contract/nats-permissions.ts";
import { relayNames } from "../../src/contract/relay-stream.ts";
import { sharedAgentNames } from "../../src/contract/shared-layout.ts";
import { Nats } from "../../src/nats/connection.ts";
import { layoutOf } from "../../src/nats/layout.ts";
import { OperatorStreams } from "../../src/nats/stream-keeper.ts";
import { ProtocolError } from "../../src/protocol/errors.ts";
import { Mailboxes } from "../../src/relay/mailbox.ts";
import type { Relay } from "../../src/resources/relay.ts";
import { identity, signed } from "../support/fixtures.ts";

const alice = identity("alice-agent");
const self = identity("inflight-agent");
const names = agentNames(self.agentId);
const relay = relayNames({ metadata: { name: "inflight-relay" }, spec: { url: "https://relay.test" } } as Pick<
  Relay,
  "metadata" | "spec"
>);

let server: NatsServer;
let nats: Nats;
let inbox: InboxStore;
let conversations: Conversations;
let mailboxes: Mailboxes;

beforeAll(async () => {
  server = await startNats();
  nats = new Nats({ url: server.url, name: "inflight" }, pino({ level: "silent" }));
  await nats.start();
  inbox = new InboxStore(nats, names, 48 * 3600_000);
  await inbox.ensure();
  conversations = new Conversations(nats, names.conversationsBucket);
  await conversations.ensure();
  await nats.jsm.streams.add({
    name: relay.stream,
    subjects: [relay.subjects],
    allow_msg_ttl: true,
    allow_direct: true,
  });
  mailboxes = new Mailboxes(nats, relay);
});
afterAll(async () => {
  await nats?.close();
  await server?.close();
});

/**
 * Start `call` with nats-server frozen, kill the server once the call is under way, and return
 * how it ended and how long after the kill; then bring the server back.
 */
async function killedUnder(
  call: () => Promise<unknown>,
  on: { server: NatsServer; nats: Nats } = { server, nats },
): Promise<{ err: unknown; pendingAtKill: boolean; afterKillMs: number }> {
  const { server, nats } = on;
  const pid = server.pid!;
  process.kill(pid, "SIGSTOP");
  // A signal is delivered when the process is next scheduled: wait until it is stopped for sure.
  await waitFor(
    "nats-server to be stopped",
    () => / T /.test(readFileSync(`/proc/${pid}/stat`, "utf8").replace(/^.*\)/, ")")) || undefined,
    10_000,
    10,
  );
  let settledAt = 0;
  let err: unknown;
  const sent = nats.nc!.stats().outMsgs;
  void call().then(
    () => {
      settledAt = Date.now();
    },
    (e: unknown) => {
      settledAt = Date.now();
      err = e;
    },
  );
  try {
    // Under way: its request is written to the connection, which the frozen server never answers.
    await waitFor("the call's request sent", () => nats.nc!.stats().outMsgs > sent || settledAt !== 0, 10_000, 5);
    const pendingAtKill = settledAt === 0;
    const killedAt = Date.now();
    process.kill(pid, "SIGKILL");
    // Bounded: the call's own timeout is 5 s.
    await waitFor("the call to end", () => settledAt !== 0, 15_000, 5).catch(() => undefined);
    return { err, pendingAtKill, afterKillMs: settledAt ? settledAt - killedAt : Infinity };
  } finally {
    await server.restart();
    await waitFor("the connection to be back", () => nats.isConnected || undefined, 20_000, 50);
  }
}

function expectAbandoned(r: Awaited<ReturnType<typeof killedUnder>>): void {
  expect(r.pendingAtKill).toBe(true);
  expect(r.err).toBeInstanceOf(ProtocolError);
  expect((r.err as ProtocolError).statusCode).toBe(503);
  expect((r.err as ProtocolError).code).toBe("unavailable");
  // At the disconnect, not at the 5 s timeout (the margin is for a loaded machine).
  expect(r.afterKillMs).toBeLessThan(2_500);
}

describe("a NATS call under way when nats-server dies", () => {
  it("inbox: the conversation record's read is abandoned with 503 at once", async () => {
    const m = signed(alice, self.agentId);
    expectAbandoned(await killedUnder(() => conversations.admit(alice.agentId, m, 2)));
  }, 60_000);

  it("inbox: the store's publish is abandoned with 503 at once", async () => {
    const m = signed(alice, self.agentId);
    expectAbandoned(
      await killedUnder(() =>
        inbox.accept(m, m.headers.message_id, { signer: alice.agentId, authLevel: 2, handoff: true }, alice.agentId),
      ),
    );
  }, 60_000);

  it("relay: the mailbox's publish is abandoned with 503 at once", async () => {
    const m = signed(alice, self.agentId);
    expectAbandoned(
      await killedUnder(() =>
        mailboxes.store(JSON.stringify(m), m.headers.message_id, [self.agentId], undefined, alice.agentId),
      ),
    );
  }, 60_000);

  it("after the reconnection, the same calls work again", async () => {
    const m = signed(alice, self.agentId);
    await conversations.admit(alice.agentId, m, 2);
    expect(
      await inbox.accept(
        m,
        m.headers.message_id,
        { signer: alice.agentId, authLevel: 2, handoff: true },
        alice.agentId,
      ),
    ).toEqual({ duplicate: false });
    expect(
      await mailboxes.store(JSON.stringify(m), m.headers.message_id, [self.agentId], undefined, alice.agentId),
    ).toEqual({ stored: 1, duplicates: 0 });
  }, 60_000);
});

describe("a NATS call under way when nats-server dies, on the isolated layout", () => {
  let install: IsolatedInstall;
  let iso: Nats;
  let isoInbox: InboxStore;
  beforeAll(async () => {
    install = await IsolatedInstall.start({
      http: "",
      jetstream: "jetstream { max_file_store: 1TB }\n",
      graceMs: 2_000,
      startTimeoutMs: 30_000,
    });
    const key = `inflight/${self.agentId}`;
    const account = await install.makeAgent(key, { name: "" });
    const creds = join(tempDir("ifp-inflight-"), "agent.creds");
    writeFileSync(creds, await install.runtimeCreds(key, self.agentId), { mode: 0o600 });
    iso = new Nats(
      {
        url: install.url,
        name: "inflight isolated",
        credsFile: creds,
        layout: layoutOf("isolated", creds),
        inboxPrefix: agentInboxPrefix(self.agentId),
      },
      pino({ level: "silent" }),
    );
    await iso.start();
    // spec.inbox.maxBytes: counted by the runtime in the tenant's bucket, read before each message is stored.
    isoInbox = new InboxStore(iso, sharedAgentNames(account), 48 * 3600_000, 64 * 1024 * 1024);
    await isoInbox.ensure(new OperatorStreams());
  }, 120_000);
  afterAll(async () => {
    await iso?.close();
    await install?.close();
  });

  it("inbox: the byte count's read is abandoned with 503 at once", async () => {
    const accept = () => {
      const m = signed(alice, self.agentId);
      return isoInbox.accept(
        m,
        m.headers.message_id,
        { signer: alice.agentId, authLevel: 2, handoff: true },
        alice.agentId,
      );
    };
    expect(await accept()).toEqual({ duplicate: false });
    expectAbandoned(await killedUnder(accept, { server: install.server, nats: iso }));
    expect(await accept()).toEqual({ duplicate: false });
  }, 60_000);
});
