// One NATS account per runtime, against a real nats-server configured by serverConfig() and
// credentials the operator's code issues: what JetStream does not check against a user's
// permissions (a stream's sources, mirror and republish, a stream on another's reply inbox, a push
// consumer's deliver subject) cannot reach another runtime's account. Each attack is also run with
// both runtimes in one shared account (the model this replaced), where it succeeds: the check
// detects it. Then the operator's side: accounts pushed and deleted, its pool of connections
// bounded and closed when idle, a deleted runtime's streams deleted with its account. And a NATS
// that authenticates no client (a NATS of one's own without authentication): the operator, holding
// every key, pushes no account there and still makes relay streams, summaries and deletions work.
import { join } from "node:path";
import { isDeepStrictEqual } from "node:util";
import {
  AckPolicy,
  DeliverPolicy,
  jetstreamManager,
  type JetStreamManager,
  type StreamConfig,
} from "@nats-io/jetstream";
import { connect, credsAuthenticator, headers, type NatsConnection } from "@nats-io/transport-node";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startNats, type NatsServer } from "../../../e2e/support/nats.ts";
import { consistently, waitFor } from "../../../e2e/support/wait.ts";
import { tempDir } from "../../../e2e/support/process.ts";
import { agentNames } from "../../../runtime/src/contract/agent-names.ts";
import {
  agentInboxPrefix,
  agentPermissions,
  relayInboxPrefix,
} from "../../../runtime/src/contract/nats-permissions.ts";
import {
  CredentialIssuer,
  credsClaims,
  generateKeys,
  KEY_FIELDS,
  serverConfig,
  type NatsKeys,
} from "../../src/concerns/nats/credential-issuer.ts";
import { NatsAccounts } from "../../src/concerns/nats/accounts.ts";
import { deleteRuntimeData } from "../../src/concerns/nats/runtime-account.ts";
import type { ControlPlane } from "../../../e2e/support/controlplane.ts";
import { relayNames } from "../../../runtime/src/contract/relay-stream.ts";
import {
  capturedLog,
  getOrAbsent,
  kubectlOrError,
  natsAccountOperator,
  perTest,
  streamOrAbsent,
  until,
} from "../support/helpers.ts";

const silent = pino({ level: "silent" });
let nats: NatsServer;
let issuer: CredentialIssuer;
let accounts: NatsAccounts;
let keys: NatsKeys;
const open: NatsConnection[] = [];

/** A runtime's connection with the credential the operator issues it, in `account`. */
async function runtime(
  agentId: string,
  key: string,
  account: string,
): Promise<{ nc: NatsConnection; jsm: JetStreamManager }> {
  const creds = await issuer.issue(`agent:${key}`, agentPermissions(agentId, key), Date.now(), undefined, account);
  const nc = await connect({
    servers: nats.url,
    authenticator: credsAuthenticator(new TextEncoder().encode(creds)),
    inboxPrefix: agentInboxPrefix(agentId),
    reconnect: false,
  });
  open.push(nc);
  return { nc, jsm: await jetstreamManager(nc, { timeout: 3_000 }) };
}

const attempt = (p: Promise<unknown>) =>
  p.then(
    () => true,
    () => false,
  );
const count = async (jsm: JetStreamManager, stream: string) =>
  (await jsm.streams.info(stream).catch(() => undefined))?.state.messages ?? 0;
const lastOn = (jsm: JetStreamManager, stream: string, subject: string) =>
  jsm.streams.getMessage(stream, { last_by_subj: subject }).catch(() => undefined);

type Outcome = Record<"sources" | "mirror" | "republish" | "replyInbox" | "deliverSubject", boolean>;

/**
 * Alice, with nothing but her own credential, tries each attack on bob's inbox; what reached bob
 * (or what of bob's reached her). `alice` and `bob` are the accounts their credentials are of.
 */
async function attacks(tag: string, aliceAccount: string, bobAccount: string, expected: Outcome): Promise<Outcome> {
  const a = agentNames(`${tag}/alice`);
  const b = agentNames(`${tag}/bob`);
  const alice = await runtime(`alice-${tag}`, `${tag}/alice`, aliceAccount);
  const bob = await runtime(`bob-${tag}`, `${tag}/bob`, bobAccount);
  // Bob's inbox, with a message in it.
  await bob.jsm.streams.add({ name: b.inboxStream, subjects: [b.inboxSubjects] });
  await (await import("@nats-io/jetstream")).jetstream(bob.nc).publish(b.inbox("secret"), "bob's message");
  const js = (await import("@nats-io/jetstream")).jetstream(alice.nc);
  const own = (config: Partial<StreamConfig> & { name: string }) => attempt(alice.jsm.streams.add(config));

  // 1. Her inbox stream sourcing bob's, 2. a bucket's stream of hers mirroring it.
  await own({ name: a.inboxStream, subjects: [a.inboxSubjects], sources: [{ name: b.inboxStream }] });
  await own({ name: `KV_${a.peersBucket}`, mirror: { name: b.inboxStream } });
  // 3. Her outbox republishing onto bob's inbox subjects, with the headers she likes.
  await own({
    name: a.outboxStream,
    subjects: [a.outboxSubjects],
    republish: { src: a.outboxSubjects, dest: `ifp.inbox.${b.kvKey}.msg.republished.>` },
  });
  const forged = headers();
  forged.set("Ifp-Sender", "https://bank.example/agent");
  forged.set("Ifp-Auth-Level", "3");
  await attempt(js.publish(a.outbox, "forged by republish", { headers: forged }));
  // 4. A stream of hers on bob's reply inbox; bob then makes a request whose reply comes there.
  await own({ name: `KV_${a.conversationsBucket}`, subjects: [`${agentInboxPrefix(`bob-${tag}`)}.>`] });
  await bob.jsm.streams.info(b.inboxStream);
  // 5. A push consumer on a stream of hers delivering onto bob's inbox subjects. A push consumer
  // delivers only while someone listens on its deliver subject: the worst case is granted, a
  // listener in alice's account.
  const pushed = `ifp.inbox.${b.kvKey}.msg.pushed`;
  const listener = await connect({
    servers: nats.url,
    authenticator: credsAuthenticator(
      new TextEncoder().encode(
        await issuer.issue("listener", { pub: [], sub: [pushed] }, Date.now(), undefined, aliceAccount),
      ),
    ),
    reconnect: false,
  });
  open.push(listener);
  listener.subscribe(pushed);
  await listener.flush();
  const bucket = `KV_${a.outboxStateBucket}`;
  await own({ name: bucket, subjects: [`$KV.${a.outboxStateBucket}.>`] });
  await attempt(js.publish(`$KV.${a.outboxStateBucket}.x`, "forged by a push consumer", { headers: forged }));
  await attempt(
    alice.jsm.consumers.add(bucket, {
      name: "push",
      deliver_subject: pushed,
      ack_policy: AckPolicy.None,
      deliver_policy: DeliverPolicy.All,
    }),
  );

  const outcome = async (): Promise<Outcome> => ({
    sources: (await count(alice.jsm, a.inboxStream)) > 0,
    mirror: (await count(alice.jsm, `KV_${a.peersBucket}`)) > 0,
    republish:
      (await lastOn(bob.jsm, b.inboxStream, `ifp.inbox.${b.kvKey}.msg.republished.msg`))?.header?.get(
        "Ifp-Auth-Level",
      ) === "3",
    replyInbox: (await count(alice.jsm, `KV_${a.conversationsBucket}`)) > 0,
    // A push delivery keeps the stored message's subject: it would land in bob's stream under alice's.
    deliverSubject:
      (await lastOn(bob.jsm, b.inboxStream, `$KV.${a.outboxStateBucket}.x`))?.header?.get("Ifp-Sender") ===
      "https://bank.example/agent",
  });
  // Each attack's mechanism has run, or was refused: the source and the mirror report their
  // state (an error, or active), the republished message is stored, the push consumer delivered.
  const info = (stream: string) => alice.jsm.streams.info(stream).catch(() => undefined);
  const settled = (s: { error?: unknown; active: number } | undefined) => !s || s.error !== undefined || s.active >= 0;
  await waitFor(
    "each attack to have run or been refused",
    async () => {
      const [inbox, peers, outbox] = await Promise.all([
        info(a.inboxStream),
        info(`KV_${a.peersBucket}`),
        info(a.outboxStream),
      ]);
      const push = await alice.jsm.consumers.info(bucket, "push").catch(() => undefined);
      return (
        (!inbox || settled(inbox.sources?.[0])) &&
        (!peers || settled(peers.mirror)) &&
        (!outbox || outbox.state.messages > 0) &&
        (!push || push.delivered.consumer_seq > 0)
      );
    },
    10_000,
  );
  // What flows does so within a moment on one server; what does not stays so.
  const matches = async () => isDeepStrictEqual(await outcome(), expected);
  await waitFor("the attacks' outcome", matches, 5_000).catch(() => undefined);
  await consistently("the attacks' outcome", matches, 1_000, 100).catch(() => undefined);
  return outcome();
}

beforeAll(async () => {
  keys = generateKeys();
  issuer = CredentialIssuer.fromKeys(keys);
  const dir = tempDir("ifp-nats-accounts-");
  nats = await startNats({
    storeDir: join(dir, "store"),
    config: await serverConfig(keys, { resolverDir: join(dir, "jwt") }),
    connect: { authenticator: credsAuthenticator(await issuer.systemCreds()) },
  });
  accounts = new NatsAccounts({ url: nats.url, issuer, log: silent, maxConnections: 3, idleMs: 1_000 });
}, 60_000);
afterAll(async () => {
  for (const nc of open) await nc.close().catch(() => {});
  await accounts?.close();
  await nats?.close();
});

describe("one account per runtime", () => {
  it("stops every attack JetStream does not check permissions for; in one shared account each succeeds", async () => {
    const alice = await accounts.ensureAccount("uid-alice", "agent:iso/alice");
    const bob = await accounts.ensureAccount("uid-bob", "agent:iso/bob");
    expect(alice).not.toBe(bob);
    expect(alice).not.toBe(issuer.accountKey);
    const none: Outcome = { sources: false, mirror: false, republish: false, replyInbox: false, deliverSubject: false };
    expect(await attacks("iso", alice, bob, none)).toEqual(none);
    // The model this replaced: the same credentials, both runtimes in the one shared account.
    const all: Outcome = { sources: true, mirror: true, republish: true, replyInbox: true, deliverSubject: true };
    expect(await attacks("shared", issuer.accountKey, issuer.accountKey, all)).toEqual(all);
  }, 60_000);

  it("derives one stable account per resource uid; a runtime's credential is refused before its account is pushed and after it is deleted", async () => {
    expect(issuer.accountOf("uid-carol")).toBe(issuer.accountOf("uid-carol"));
    expect(issuer.accountOf("uid-carol")).not.toBe(issuer.accountOf("uid-carol2"));
    const carol = issuer.accountOf("uid-carol");
    await expect(runtime("carol", "ns/carol", carol)).rejects.toThrow();
    expect(await accounts.ensureAccount("uid-carol", "agent:ns/carol")).toBe(carol);
    const { jsm } = await runtime("carol", "ns/carol", carol);
    await jsm.streams.add({
      name: agentNames("ns/carol").inboxStream,
      subjects: [agentNames("ns/carol").inboxSubjects],
    });
    // The operator's user in carol's account sees her stream; deleting the account disconnects her.
    expect(
      await accounts.withAccount(
        carol,
        async (j) => (await j.streams.info(agentNames("ns/carol").inboxStream)).config.name,
      ),
    ).toBe(agentNames("ns/carol").inboxStream);
    const carolConnection = open.at(-1)!;
    await accounts.deleteAccount(carol, "agent:ns/carol");
    await until("carol's connection closed", () => carolConnection.isClosed(), 10_000, 50);
    await expect(runtime("carol", "ns/carol", carol)).rejects.toThrow();
    // Deleted, it is never pushed again: its resource's uid is gone for good.
    await expect(accounts.ensureAccount("uid-carol", "agent:ns/carol")).rejects.toThrow(/never made again/);
    await expect(runtime("carol", "ns/carol", carol)).rejects.toThrow();
    // Neither the shared account nor a key that is not an account is deleted.
    await expect(accounts.deleteAccount(issuer.accountKey, "x")).rejects.toThrow(/not a runtime's account/);
    await expect(accounts.deleteAccount("nonsense", "x")).rejects.toThrow(/not a runtime's account/);
  }, 60_000);

  it("cleans a deleted resource's account up once: run again on a cache that has not seen the resource go, or by a new operator process, it makes no account its credential could connect to", async () => {
    const dave = { kind: "Agent", metadata: { namespace: "ns", name: "dave", uid: "uid-dave" } };
    const account = issuer.accountOf("uid-dave");
    // No `<name>-nats` Secret in the cache: the account of the resource's own uid.
    const ctx = { caches: { get: () => undefined }, natsIssuer: issuer, natsAccounts: accounts } as never;
    await accounts.ensureAccount("uid-dave", "agent:ns/dave");
    const { jsm } = await runtime("dave", "ns/dave", account);
    const inbox = agentNames("ns/dave").inboxStream;
    await jsm.streams.add({ name: inbox, subjects: [agentNames("ns/dave").inboxSubjects] });
    const named: string[][] = [];
    const shared = async () => {
      named.push([]);
      return [];
    };
    expect(await deleteRuntimeData(ctx, dave, shared)).toEqual([inbox, `the NATS account ${account}`]);
    await expect(runtime("dave", "ns/dave", account)).rejects.toThrow();
    // The second cleanup finds the account deleted by this process: only the shared account's
    // leftovers are looked for again, and the credential stays refused.
    expect(await deleteRuntimeData(ctx, dave, shared)).toEqual([]);
    expect(named).toHaveLength(2);
    await expect(runtime("dave", "ns/dave", account)).rejects.toThrow();
    // A new operator process (a restart, another leader) knows nothing of the deletion: it asks
    // the resolver, which no longer holds the account, and pushes nothing either. The same for a
    // resource deleted before any process pushed its account.
    const next = new NatsAccounts({ url: nats.url, issuer, log: silent, timeoutMs: 5_000 });
    try {
      const fresh = { caches: { get: () => undefined }, natsIssuer: issuer, natsAccounts: next } as never;
      expect(await next.onResolver(account)).toBe(false);
      expect(await deleteRuntimeData(fresh, dave, shared)).toEqual([]);
      expect(named).toHaveLength(3);
      await expect(runtime("dave", "ns/dave", account)).rejects.toThrow();
      const never = { kind: "Agent", metadata: { namespace: "ns", name: "erin", uid: "uid-erin" } };
      expect(await deleteRuntimeData(fresh, never, shared)).toEqual([]);
      expect(await next.onResolver(issuer.accountOf("uid-erin"))).toBe(false);
      // An account on the resolver is found there.
      expect(await next.onResolver(await accounts.ensureAccount("uid-frank", "agent:ns/frank"))).toBe(true);
    } finally {
      await next.close();
    }
  }, 60_000);

  it("keeps its connections into the accounts bounded and closes them when idle", async () => {
    const keys = await Promise.all(
      ["p1", "p2", "p3", "p4", "p5"].map((u) => accounts.ensureAccount(u, `agent:pool/${u}`)),
    );
    for (const k of keys) await accounts.withAccount(k, (jsm) => jsm.getAccountInfo());
    expect(accounts.size).toBeLessThanOrEqual(3);
    // Idle for a second, swept every second.
    await until("idle connections closed", () => accounts.size === 0, 10_000, 100);
  }, 30_000);
});

describe("the operator with one account per runtime, on a real API server", () => {
  const NS = "natsaccounts";
  // The keys of the server started above, as the operator keeps them.
  const operator = natsAccountOperator({
    namespace: NS,
    keys: () => ({
      accountKey: issuer.accountKey,
      fields: Object.fromEntries(Object.entries(KEY_FIELDS).map(([k, f]) => [f, keys[k as keyof NatsKeys]])),
    }),
    natsUrl: () => nats.url,
    manager: { summaryIntervalMs: 300 },
  });
  const { get, credsOf } = operator;
  const operatorLog = operator.log;
  let cp: ControlPlane;
  beforeAll(() => {
    cp = operator.cp();
  });
  perTest(() => [`operator log (last 100 lines):`, ...operatorLog.lines().slice(-100)].join("\n"));

  it("makes a Relay's stream in the relay's own account and reads its summary there; deletes an Agent's account with its data", async () => {
    const relay = {
      apiVersion: "ifp.dev/v1alpha1",
      kind: "Relay",
      metadata: { name: "hub", namespace: NS },
      spec: { url: "https://relay.example" },
    };
    cp.kubectl(["apply", "-f", "-"], JSON.stringify(relay));
    const hubCreds = await until("hub-nats", () => credsOf("hub"));
    const uid = get("relay", "hub").metadata.uid;
    expect(credsClaims(hubCreds)!.issuerAccount).toBe(issuer.accountOf(uid));
    const stream = relayNames(relay as never).stream;
    await until("the relay's stream", () => get("relay", "hub")?.status?.stream?.name === stream);
    expect(
      await accounts.withAccount(issuer.accountOf(uid), async (jsm) => (await jsm.streams.info(stream)).config.name),
    ).toBe(stream);
    // Not in the shared account.
    await expect(accounts.withAccount(issuer.accountKey, (jsm) => jsm.streams.info(stream))).rejects.toThrow(
      /not found/,
    );
    // The summary is read in the relay's account: a copy its runtime stores shows. It counts what
    // came after the operator's first reading, so the copy is stored once that reading is in.
    await until("the relay's first summary", () => get("relay", "hub")?.status?.summary !== undefined);
    const hub = await connect({
      servers: nats.url,
      authenticator: credsAuthenticator(new TextEncoder().encode(hubCreds)),
      inboxPrefix: relayInboxPrefix(relay as never),
      reconnect: false,
    });
    open.push(hub);
    await (await import("@nats-io/jetstream"))
      .jetstream(hub)
      .publish(`${relayNames(relay as never).subjects.slice(0, -1)}mbox.alice.m1`, "copy");
    await until("the relay's summary", () => (get("relay", "hub")?.status?.summary?.acceptedLastHour ?? 0) >= 1);

    cp.kubectl(
      ["apply", "-f", "-"],
      JSON.stringify({
        apiVersion: "ifp.dev/v1alpha1",
        kind: "Agent",
        metadata: { name: "alice", namespace: NS },
        spec: { agentId: "alice-id" },
      }),
    );
    const aliceCreds = await until("alice-nats", () => credsOf("alice"));
    const aliceAccount = issuer.accountOf(get("agent", "alice").metadata.uid);
    expect(credsClaims(aliceCreds)!.issuerAccount).toBe(aliceAccount);
    const alice = await connect({
      servers: nats.url,
      authenticator: credsAuthenticator(new TextEncoder().encode(aliceCreds)),
      inboxPrefix: agentInboxPrefix("alice-id"),
      reconnect: false,
    });
    const n = agentNames(`${NS}/alice`);
    await (await jetstreamManager(alice)).streams.add({ name: n.inboxStream, subjects: [n.inboxSubjects] });
    cp.kubectl(["-n", NS, "delete", "agent", "alice", "--wait=false"]);
    await until("alice gone", () => !get("agent", "alice"));
    await until("alice's connection closed", () => alice.isClosed(), 10_000, 50);
    await expect(
      connect({
        servers: nats.url,
        authenticator: credsAuthenticator(new TextEncoder().encode(aliceCreds)),
        reconnect: false,
      }),
    ).rejects.toThrow();
  }, 120_000);
});

describe("the operator with a NATS that authenticates no client, on a real API server", () => {
  let open: NatsServer;
  const NS = "natsopen";
  const OPS = "ifp-open";
  // As the chart with nats.install=false and nats.url of a server without authentication: the
  // account Secret is absent, so the operator makes it with every key (one account per runtime).
  const operator = natsAccountOperator({
    namespace: NS,
    ops: OPS,
    alongside: {
      start: async () => {
        open = await startNats();
      },
      stop: async () => open?.close(),
    },
    natsUrl: () => open.url,
    settings: { allowedHosts: { [NS]: ["relay.example"] } },
    manager: { trust: { namespace: OPS }, summaryIntervalMs: 300 },
  });
  const { get } = operator;
  const operatorLog = operator.log;
  let cp: ControlPlane;
  beforeAll(() => {
    cp = operator.cp();
  });
  const ready = (name: string) => get("agent", name)?.status?.conditions?.find((c: any) => c.type === "Ready")?.status;
  const warnings = () =>
    operatorLog.lines().filter((l) => l.includes("the NATS server authenticates no client")).length;
  perTest(() =>
    [
      "operator log (last 100 lines):",
      ...operatorLog.lines().slice(-100),
      "agents and relays:",
      kubectlOrError(cp, ["-n", NS, "get", "agents,relays", "-o", "wide"]),
      "events:",
      kubectlOrError(cp, ["-n", NS, "get", "events"]),
    ].join("\n"),
  );

  it("asks the server whether it authenticates clients, and warns once per process however often it asks", async () => {
    const told = capturedLog();
    const ask = (url: string, log = silent) =>
      new NatsAccounts({ url, issuer: CredentialIssuer.fromKeys(generateKeys()), log, timeoutMs: 2_000 });
    const unauthenticated = ask(open.url, told.log);
    const authenticating = ask(nats.url);
    const unreachable = ask("nats://127.0.0.1:1");
    try {
      expect(await unauthenticated.isolating()).toBe(false);
      // Asked again once the answer is a minute old: still one warning.
      expect(await unauthenticated.isolating(Date.now() + 120_000)).toBe(false);
      expect(told.lines().filter((l) => l.includes("the NATS server authenticates no client")).length).toBe(1);
      // The operator-mode server of this file requires authentication (its system user gets in).
      expect(await authenticating.isolating()).toBe(true);
      // A server that cannot be asked moves nothing out of its account.
      expect(await unreachable.isolating()).toBe(true);
    } finally {
      await Promise.all([unauthenticated.close(), authenticating.close(), unreachable.close()]);
    }
  }, 60_000);

  it("keeps the one-account model, says so once, and an Agent becomes Ready, a Relay's stream and summary work and both deletions complete", async () => {
    const keys = getOrAbsent(cp, ["-n", OPS, "get", "secret", "ifp-nats-account"]);
    expect(Object.keys(keys.data)).toEqual(expect.arrayContaining(["operator.seed", "system.seed"]));

    cp.kubectl(
      ["apply", "-f", "-"],
      JSON.stringify({
        apiVersion: "ifp.dev/v1alpha1",
        kind: "Agent",
        metadata: { name: "alice", namespace: NS },
        spec: { agentId: "alice-id" },
      }),
    );
    const dep = await until("alice's Deployment", () => get("deployment", "alice"), 60_000);
    // What the Deployment controller and the kubelet would report once its pod runs.
    cp.kubectl([
      "-n",
      NS,
      "patch",
      "deployment",
      "alice",
      "--subresource=status",
      "--type=merge",
      "-p",
      JSON.stringify({
        status: {
          observedGeneration: dep.metadata.generation,
          replicas: 1,
          updatedReplicas: 1,
          readyReplicas: 1,
          availableReplicas: 1,
        },
      }),
    ]);
    await until("alice Ready", () => ready("alice") === "True", 60_000);
    // A credential is still issued (the server ignores it), and the Agent is told its NATS keeps nothing apart.
    expect(get("secret", "alice-nats")?.data?.["nats.creds"]).toBeTruthy();
    await until(
      "the NatsNotIsolated Event",
      () =>
        cp.json<any>(["-n", NS, "get", "events", "--field-selector=involvedObject.name=alice,reason=NatsNotIsolated"])
          .items.length === 1,
    );

    const relay = {
      apiVersion: "ifp.dev/v1alpha1",
      kind: "Relay",
      metadata: { name: "hub", namespace: NS },
      spec: { url: "https://relay.example", retention: { deleteOnRemoval: true } },
    };
    cp.kubectl(["apply", "-f", "-"], JSON.stringify(relay));
    const stream = relayNames(relay as never).stream;
    await until("the relay's stream", () => get("relay", "hub")?.status?.stream?.name === stream, 60_000);
    // In the server's one global account, where every client is.
    expect(await streamOrAbsent(open.url, stream)).toBeDefined();
    await until("a first summary of the relay", () => get("relay", "hub")?.status?.summary);
    const nc = await connect({ servers: open.url, reconnect: false });
    try {
      await (await import("@nats-io/jetstream"))
        .jetstream(nc)
        .publish(`${relayNames(relay as never).subjects.slice(0, -1)}mbox.alice.m1`, "copy");
    } finally {
      await nc.close();
    }
    await until("the relay's summary", () => (get("relay", "hub")?.status?.summary?.acceptedLastHour ?? 0) >= 1);
    expect(warnings()).toBe(1);
    expect(operatorLog.has(/pushing the NATS account/)).toBe(false);

    // Deletions finish: the agent's streams and the relay's stream go with them.
    const inbox = agentNames(`${NS}/alice`).inboxStream;
    const admin = await connect({ servers: open.url, reconnect: false });
    try {
      await (await jetstreamManager(admin)).streams.add({
        name: inbox,
        subjects: [agentNames(`${NS}/alice`).inboxSubjects],
      });
    } finally {
      await admin.close();
    }
    cp.kubectl(["-n", NS, "delete", "agent", "alice", "--wait=false"]);
    cp.kubectl(["-n", NS, "delete", "relay", "hub", "--wait=false"]);
    await until("alice and hub gone", () => !get("agent", "alice") && !get("relay", "hub"), 30_000);
    expect(await streamOrAbsent(open.url, inbox)).toBeUndefined();
    expect(await streamOrAbsent(open.url, stream)).toBeUndefined();
    expect(warnings()).toBe(1);
  }, 240_000);
});
