// Capacity per runtime, against a real nats-server in operator mode with small store and memory
// limits: each runtime's account JWT, as NatsAccounts pushes it, bounds what one tenant's
// credential can take of the servers' file store and memory. Each attack is run by the attacker
// with nothing but its own runtime credential; the victim's streams keep taking messages. A
// changed spec.inbox.maxBytes pushes the account again. The runtimes' own streams and buckets are
// made under the default limits (an Agent and a Relay started for real in accounts of their own).
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { jetstream, jetstreamManager, StorageType, type JetStreamManager, type StreamConfig } from "@nats-io/jetstream";
import { connect, credsAuthenticator, type NatsConnection } from "@nats-io/transport-node";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startNats, type NatsServer } from "../../../e2e/support/nats.ts";
import { tempDir } from "../../../e2e/support/process.ts";
import { httpsRequest } from "../../../e2e/support/https.ts";
import { waitFor } from "../../../e2e/support/ports.ts";
import { localhostTls } from "../../../e2e/support/tls.ts";
import { agentNames } from "../../../runtime/src/contract/agent-names.ts";
import {
  agentInboxPrefix,
  agentPermissions,
  relayPermissions,
} from "../../../runtime/src/contract/nats-permissions.ts";
import { isFull } from "../../../runtime/src/nats/streams.ts";
import { startRelay } from "../../../runtime/src/relay/main.ts";
import { LocalApiClient } from "../../../runtime/src/client/local.ts";
import { AgentSpec, type AgentSpecInput } from "../../../runtime/src/resources/agent.ts";
import { RelaySpec } from "../../../runtime/src/resources/relay.ts";
import { runAgent, startHandler } from "../../../runtime/test/support/agent-harness.ts";
import { untilState } from "../../../runtime/test/support/outbox-harness.ts";
import { identity, peerOf, throughRelay, writeRelayManifest } from "../../../runtime/test/support/fixtures.ts";
import { DEFAULT_ACCOUNT_LIMITS, type AccountResource } from "../../src/concerns/nats/account-limits.ts";
import { NatsAccounts } from "../../src/concerns/nats/accounts.ts";
import { CredentialIssuer, generateKeys, serverConfig } from "../../src/concerns/nats/credential-issuer.ts";

const MIB = 1024 * 1024;
/** The server's limits: small, so that one tenant could take them in a moment. */
const FILE_STORE = 48 * MIB;
const MEMORY_STORE = 16 * MIB;
/** Each test tenant's room beside its reserved stream. */
const DATA_BYTES = 2 * MIB;
const CHUNK = new Uint8Array(256 * 1024);

const silent = pino({ level: "silent" });
const dir = tempDir("ifp-nats-limits-");
let nats: NatsServer;
let issuer: CredentialIssuer;
let accounts: NatsAccounts;
const open: NatsConnection[] = [];

/** An Agent of `inboxMaxBytes`, as the limits read it. */
const agent = (inboxMaxBytes: number): AccountResource => ({
  kind: "Agent",
  spec: { inbox: { maxBytes: inboxMaxBytes } },
});

/** A tenant: its account pushed as the operator does, and a connection with its runtime's credential. */
async function tenant(
  uid: string,
  resource: AccountResource,
): Promise<{ account: string; nc: NatsConnection; jsm: JetStreamManager; names: ReturnType<typeof agentNames> }> {
  const account = await accounts.ensureAccount(uid, `test:${uid}`, resource);
  const creds = await issuer.issue(uid, agentPermissions(uid), Date.now(), undefined, account);
  const nc = await connect({
    servers: nats.url,
    authenticator: credsAuthenticator(new TextEncoder().encode(creds)),
    inboxPrefix: agentInboxPrefix(uid),
    reconnect: false,
  });
  open.push(nc);
  return { account, nc, jsm: await jetstreamManager(nc, { timeout: 3_000 }), names: agentNames(uid) };
}

/** Publish CHUNKs to `subject` until `bytes` are written or JetStream refuses one; the bytes stored and the refusal. */
async function fill(
  nc: NatsConnection,
  subject: string,
  bytes: number,
): Promise<{ written: number; refused?: unknown }> {
  const js = jetstream(nc);
  let written = 0;
  while (written < bytes) {
    try {
      await js.publish(subject, CHUNK, { timeout: 5_000 });
    } catch (refused) {
      return { written, refused };
    }
    written += CHUNK.length;
  }
  return { written };
}

const inbox = (names: ReturnType<typeof agentNames>, maxBytes: number, storage: StorageType = StorageType.File) =>
  ({
    name: names.inboxStream,
    subjects: [names.inboxSubjects],
    max_bytes: maxBytes,
    storage,
  }) as Partial<StreamConfig> & { name: string };

beforeAll(async () => {
  const keys = generateKeys();
  issuer = CredentialIssuer.fromKeys(keys);
  nats = await startNats({
    storeDir: join(dir, "store"),
    config: [
      await serverConfig(keys, { resolverDir: join(dir, "jwt") }),
      `jetstream { max_file_store: ${FILE_STORE}, max_memory_store: ${MEMORY_STORE} }`,
      "",
    ].join("\n"),
    connect: { authenticator: credsAuthenticator(await issuer.systemCreds()) },
  });
  accounts = new NatsAccounts({
    url: nats.url,
    issuer,
    log: silent,
    limits: { ...DEFAULT_ACCOUNT_LIMITS, dataBytes: DATA_BYTES },
  });
}, 60_000);
afterAll(async () => {
  for (const nc of open) await nc.close().catch(() => {});
  await accounts?.close();
  await nats?.close();
});

describe("capacity per runtime account", () => {
  it("a stream reserving the whole file store is refused; the next tenant's inbox is made", async () => {
    const mallory = await tenant("reserve-mallory", agent(4 * MIB));
    const bob = await tenant("reserve-bob", agent(4 * MIB));
    // Her own stream, asking for the server's whole store without writing a byte.
    const reserved = await mallory.jsm.streams.add(inbox(mallory.names, FILE_STORE)).then(
      () => undefined,
      (err: unknown) => err,
    );
    // The next tenant's inbox is made and takes messages.
    const made = await bob.jsm.streams.add(inbox(bob.names, 4 * MIB)).then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(String(made)).toBe("undefined");
    expect((await fill(bob.nc, bob.names.inbox("m"), MIB)).refused).toBeUndefined();
    expect(String(reserved)).toMatch(/insufficient storage resources|resource limits exceeded/i);
    // What her account holds she still gets: her inbox of spec.inbox.maxBytes.
    await mallory.jsm.streams.add(inbox(mallory.names, 4 * MIB));
  }, 60_000);

  it("memory streams are the memory Relay's alone: another tenant's 16 MiB does not starve its writes", async () => {
    const mallory = await tenant("memory-mallory", agent(4 * MIB));
    const relay: AccountResource = { kind: "Relay", spec: { retention: { storage: "memory", maxBytes: 4 * MIB } } };
    const bob = await tenant("memory-bob", relay);
    await bob.jsm.streams.add(inbox(bob.names, 4 * MIB, StorageType.Memory));
    // Her own memory stream, no max_bytes, filled with all the server's memory.
    await mallory.jsm.streams.add({ ...inbox(mallory.names, -1, StorageType.Memory) }).catch(() => {});
    const attack = await fill(mallory.nc, mallory.names.inbox("m"), MEMORY_STORE);
    expect((await fill(bob.nc, bob.names.inbox("m"), 2 * MIB)).refused).toBeUndefined();
    expect(attack.written).toBe(0);
  }, 60_000);

  it("an inbox filled as far as it goes stops at its own limit, as a full inbox; the others' inboxes take messages", async () => {
    const bob = await tenant("fill-bob", agent(4 * MIB));
    await bob.jsm.streams.add(inbox(bob.names, 4 * MIB));
    const mallory = await tenant("fill-mallory", agent(4 * MIB));
    // Her own inbox, without the max_bytes the runtime gives it, written until the server refuses.
    await mallory.jsm.streams.add(inbox(mallory.names, -1));
    const attack = await fill(mallory.nc, mallory.names.inbox("m"), FILE_STORE);
    expect((await fill(bob.nc, bob.names.inbox("m"), 2 * MIB)).refused).toBeUndefined();
    // Refused at her account's limit, as the runtime's full inbox is (503 inbox_full).
    expect(attack.refused).toBeDefined();
    expect(isFull(attack.refused)).toBe(true);
    expect(attack.written).toBeLessThanOrEqual(4 * MIB + DATA_BYTES);
    // A third tenant's new inbox too.
    const carol = await tenant("fill-carol", agent(4 * MIB));
    await carol.jsm.streams.add(inbox(carol.names, 4 * MIB));
    expect((await fill(carol.nc, carol.names.inbox("m"), 2 * MIB)).refused).toBeUndefined();
  }, 60_000);
});

describe("an account's limits follow its spec", () => {
  it("a larger spec.inbox.maxBytes pushes the account again: the larger inbox is made", async () => {
    const dave = await tenant("grow-dave", agent(4 * MIB));
    const larger = inbox(dave.names, 8 * MIB);
    expect(String(await dave.jsm.streams.add(larger).catch((err: unknown) => err))).toMatch(
      /insufficient storage resources/,
    );
    expect(await accounts.ensureAccount("grow-dave", "test:grow-dave", agent(8 * MIB))).toBe(dave.account);
    await waitFor(
      "the larger inbox",
      () =>
        dave.jsm.streams.add(larger).then(
          () => true,
          () => false,
        ),
      10_000,
    );
    expect((await dave.jsm.streams.info(larger.name)).config.max_bytes).toBe(8 * MIB);
  }, 60_000);
});

describe("a runtime's own streams under the default limits", () => {
  it("an Agent and a Relay, each in an account of the default limits, make their streams and run a real exchange", async () => {
    const store = tempDir("ifp-nats-limits-defaults-");
    const keys = generateKeys();
    const own = CredentialIssuer.fromKeys(keys);
    const server = await startNats({
      storeDir: join(store, "store"),
      config: await serverConfig(keys, { resolverDir: join(store, "jwt") }),
      connect: { authenticator: credsAuthenticator(await own.systemCreds()) },
    });
    const defaults = new NatsAccounts({ url: server.url, issuer: own, log: silent });
    const tls = await localhostTls();
    const handler = await startHandler();
    const credsFile = async (uid: string, resource: AccountResource, perms: ReturnType<typeof agentPermissions>) => {
      const account = await defaults.ensureAccount(uid, `test:${uid}`, resource);
      const file = join(store, `${uid}.creds`);
      writeFileSync(file, await own.issue(uid, perms, Date.now(), undefined, account), { mode: 0o600 });
      return { account, file };
    };
    const alice = identity("alice-agent");
    const bob = identity("bob-agent");
    const hub = { metadata: { name: "hub" }, spec: { url: "https://localhost" } } as Parameters<
      typeof relayPermissions
    >[0];
    const relaySpec = { url: "https://localhost", agents: [peerOf(alice), peerOf(bob)] };
    const relayCreds = await credsFile(
      "uid-hub",
      { kind: "Relay", spec: RelaySpec.parse(relaySpec) },
      relayPermissions(hub),
    );
    const relay = await startRelay({
      manifest: writeRelayManifest(tempDir("ifp-relay-"), relaySpec, "hub"),
      port: 0,
      host: "127.0.0.1",
      tlsCert: tls.files.cert,
      tlsKey: tls.files.key,
      nats: { url: server.url, credsFile: relayCreds.file },
      logger: silent,
    });
    const relayUrl = relay.url.replace("127.0.0.1", "localhost");
    const started: { close(): Promise<void> }[] = [relay];
    const agentAccounts: string[] = [];
    const agent = async (self: typeof alice, spec: Omit<AgentSpecInput, "agentId">) => {
      const creds = await credsFile(
        `uid-${self.agentId}`,
        { kind: "Agent", spec: AgentSpec.parse({ agentId: self.agentId, ...spec }) },
        agentPermissions(self.agentId),
      );
      agentAccounts.push(creds.account);
      const running = await runAgent({ self, spec, natsUrl: server.url, natsCredsFile: creds.file, tls });
      started.push(running);
      return running;
    };
    try {
      await waitFor(
        "relay ready",
        async () => (await httpsRequest(`${relayUrl}/readyz`, { ca: tls.ca })).status === 200,
        30_000,
      );
      const specs = throughRelay(alice, bob, relayUrl, handler.url);
      await agent(bob, specs.to);
      const a = await agent(alice, specs.from);
      const sent = await new LocalApiClient(a.localApiUrl).send({ to: "bob-agent", text: "within its limits" });
      expect((await untilState(a.localApiUrl, sent.message_id, "delivered")).recipients[0]).toMatchObject({
        via: `relay:${relayUrl}`,
      });
      await waitFor("bob's handler", () => handler.received.find((r) => r.body.headers.message_id === sent.message_id));
      // Every stream and bucket each runtime made, within its account's stream limit.
      for (const account of [...agentAccounts, relayCreds.account]) {
        const names = await defaults.withAccount(account, async (jsm) => {
          const all: string[] = [];
          for await (const n of jsm.streams.names()) all.push(n);
          return all;
        });
        expect(names.length).toBeGreaterThan(1);
        expect(names.length).toBeLessThanOrEqual(DEFAULT_ACCOUNT_LIMITS.streams);
      }
      expect(server.log()).not.toMatch(/resource limits exceeded|insufficient/i);
    } finally {
      for (const r of started.reverse()) await r.close().catch(() => {});
      await handler.close();
      await defaults.close();
      await server.close();
    }
  }, 120_000);
});
