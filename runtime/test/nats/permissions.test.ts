// Least privilege on NATS, against a real nats-server in operator mode with the configuration and
// credentials the operator issues: each runtime's credential reaches its own streams, consumers
// and KV buckets and nothing of another agent or relay; an expired credential is refused; a
// renewed credentials file is picked up on reconnect without a restart.
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { connect, credsAuthenticator, type NatsConnection } from "@nats-io/transport-node";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startNats, type NatsServer } from "../../../e2e/support/nats.ts";
import { localhostTls } from "../../../e2e/support/tls.ts";
import { httpsRequest } from "../../../e2e/support/https.ts";
import { waitFor } from "../../../e2e/support/ports.ts";
import { CredentialIssuer, generateKeys, serverConfig } from "../../../operator/src/concerns/nats/credential-issuer.ts";
import { agentNames } from "../../src/agent/names.ts";
import { startAgent } from "../../src/agent/main.ts";
import { LocalApiClient } from "../../src/client/local.ts";
import {
  agentInboxPrefix,
  agentPermissions,
  operatorPermissions,
  relayPermissions,
  type NatsPermissions,
} from "../../src/contract/nats-permissions.ts";
import { relayNames } from "../../src/contract/relay-stream.ts";
import { Nats } from "../../src/nats/connection.ts";
import { startRelay, type RunningRelay } from "../../src/relay/main.ts";
import {
  identity,
  peerOf,
  throughRelay,
  tempDir,
  writeAgentManifest,
  writeKey,
  writeRelayManifest,
} from "../support/fixtures.ts";
import { startHandler, type Tls } from "../support/agent-harness.ts";

const alice = identity("alice-agent");
const bob = identity("bob-agent");
const hub = { metadata: { name: "hub" }, spec: { url: "https://relay.test" } } as Parameters<
  typeof relayPermissions
>[0];
const silent = pino({ level: process.env.IFP_TEST_LOG ?? "silent" });

let nats: NatsServer;
let tls: Tls;
let issuer: CredentialIssuer;
const dir = tempDir("ifp-nats-perm-");

async function credsFile(name: string, perms: NatsPermissions, now = Date.now(), lifetimeMs?: number): Promise<string> {
  const file = join(dir, `${name}.creds`);
  writeFileSync(file, await issuer.issue(name, perms, now, lifetimeMs), { mode: 0o600 });
  return file;
}

async function client(perms: NatsPermissions, inboxPrefix?: string): Promise<NatsConnection> {
  return connect({
    servers: nats.url,
    authenticator: credsAuthenticator(new TextEncoder().encode(await issuer.issue("probe", perms))),
    inboxPrefix,
    reconnect: false,
  });
}

/**
 * The server's own refusal ("Permissions Violation for Publish to …"), which nats.js hands to the
 * request it refused: a request that only timed out proves nothing about permissions.
 */
const VIOLATION = /^PermissionViolationError: Permissions Violation for (Publish|Subscription) to "[^"]+"/;

/** The error a promise rejects with, as "<name>: <message>" (fails the test when it resolves). */
async function refusal(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (err) {
    // The violation itself, or the JetStream error that wraps it.
    const e = err as Error & { cause?: Error };
    const violation = e.name === "PermissionViolationError" ? e : e.cause;
    return violation ? `${violation.name}: ${violation.message}` : `${e.name}: ${e.message}`;
  }
  throw new Error("expected a refusal");
}

beforeAll(async () => {
  const keys = generateKeys();
  issuer = CredentialIssuer.fromKeys(keys);
  const operatorCreds = new TextEncoder().encode(await issuer.issue("ifp-operator", operatorPermissions()));
  [nats, tls] = await Promise.all([
    startNats({
      config: await serverConfig(keys, { resolverDir: join(dir, "jwt") }),
      connect: { authenticator: credsAuthenticator(operatorCreds), inboxPrefix: "_INBOX_OPERATOR" },
    }),
    localhostTls(),
  ]);
});
afterAll(async () => {
  await nats?.close();
});

describe("runtimes with their own NATS credential", () => {
  it("an agent and a relay run a real exchange; each reaches nothing of the others", async () => {
    const handler = await startHandler();
    const relayManifest = writeRelayManifest(
      tempDir(),
      { url: "https://localhost", agents: [peerOf(alice), peerOf(bob)] },
      "hub",
    );
    const relay: RunningRelay = await startRelay({
      manifest: relayManifest,
      port: 0,
      host: "127.0.0.1",
      tlsCert: tls.files.cert,
      tlsKey: tls.files.key,
      nats: { url: nats.url, credsFile: await credsFile("hub", relayPermissions(hub)) },
      logger: silent,
    });
    const relayUrl = relay.url.replace("127.0.0.1", "localhost");
    const agent = async (self: typeof alice, spec: object) => {
      const d = tempDir();
      const running = await startAgent({
        manifest: writeAgentManifest(d, { agentId: self.agentId, ...spec }),
        port: 0,
        host: "127.0.0.1",
        tlsCert: tls.files.cert,
        tlsKey: tls.files.key,
        signingKey: writeKey(d, self),
        nats: { url: nats.url, credsFile: await credsFile(self.agentId, agentPermissions(self.agentId)) },
        localApiPort: 0,
        caFile: tls.files.ca,
        logger: silent,
      });
      await waitFor(
        `${self.agentId} ready`,
        async () => (await httpsRequest(`${running.url}/readyz`, { ca: tls.ca })).status === 200,
        30_000,
      );
      return running;
    };
    try {
      await waitFor(
        "relay ready",
        async () => (await httpsRequest(`${relayUrl}/readyz`, { ca: tls.ca })).status === 200,
        30_000,
      );
      const specs = throughRelay(alice, bob, relayUrl, handler.url);
      const b = await agent(bob, specs.to);
      const a = await agent(alice, specs.from);
      try {
        const sent = await new LocalApiClient(a.localApiUrl).send({ to: "bob-agent", text: "with least privilege" });
        const record = await waitFor(
          "delivered",
          async () => {
            const r = await new LocalApiClient(a.localApiUrl).status(sent.message_id);
            return r.state === "delivered" ? r : undefined;
          },
          30_000,
        );
        expect(record.recipients[0]).toMatchObject({ via: `relay:${relayUrl}` });
        await waitFor(
          "bob's handler",
          () => handler.received.find((r) => r.body.headers.message_id === sent.message_id),
          30_000,
        );
      } finally {
        await Promise.all([a.close(), b.close()]);
      }
    } finally {
      await relay.close();
      await handler.close();
    }

    // Everything the three runtimes did was within their grants: the server refused nothing.
    expect(nats.log()).not.toMatch(/Violation|authentication error|maximum control line/);

    // Alice's credential against what bob's runtime and the relay keep.
    const nc = await client(agentPermissions("alice-agent"), agentInboxPrefix("alice-agent"));
    try {
      const jsm = await jetstreamManager(nc, { timeout: 3_000 });
      const js = jetstream(nc, { timeout: 3_000 });
      const bobs = agentNames("bob-agent");
      const mine = agentNames("alice-agent");
      // Its own: readable.
      expect((await jsm.streams.info(mine.inboxStream)).config.name).toBe(mine.inboxStream);
      expect(
        await (await new Kvm(js).open(mine.kvBucket, { allow_direct: true })).get(`${mine.kvKey}.capabilities`),
      ).toBeTruthy();
      // Bob's streams, consumers and KV, and the relay's stream: refused.
      expect(await refusal(jsm.streams.info(bobs.inboxStream))).toMatch(VIOLATION);
      expect(await refusal(jsm.streams.getMessage(bobs.inboxStream, { seq: 1 }))).toMatch(VIOLATION);
      expect(await refusal(jsm.streams.info(relayNames(hub).stream))).toMatch(VIOLATION);
      expect(await refusal(jsm.consumers.info(bobs.inboxStream, bobs.handlerConsumer))).toMatch(VIOLATION);
      expect(
        await refusal(js.consumers.get(bobs.inboxStream, bobs.handlerConsumer).then((c) => c.next({ expires: 1_000 }))),
      ).toMatch(VIOLATION);
      expect(
        await refusal(
          jsm.consumers.add(bobs.inboxStream, { name: mine.inboxStream, filter_subject: bobs.inboxMessages }),
        ),
      ).toMatch(VIOLATION);
      const peers = await refusal(new Kvm(js).open(bobs.peersBucket).then((kv) => kv.get("x")));
      expect(peers).toMatch(VIOLATION);
      // The shared agents bucket: only alice's own key.
      expect(
        await refusal(
          new Kvm(js).open(bobs.kvBucket, { allow_direct: true }).then((kv) => kv.get(`${bobs.kvKey}.capabilities`)),
        ),
      ).toMatch(VIOLATION);
      expect(
        await refusal(
          new Kvm(js)
            .open(bobs.kvBucket, { allow_direct: true })
            .then((kv) => kv.put(`${bobs.kvKey}.capabilities`, "forged")),
        ),
      ).toMatch(VIOLATION);
      // Publishing into bob's inbox subjects, or listening on another runtime's inbox: refused.
      expect(await refusal(js.publish(bobs.inbox("forged"), "{}"))).toMatch(VIOLATION);
      const errors: string[] = [];
      void (async () => {
        for await (const s of nc.status()) if (s.type === "error") errors.push(String(s.error));
      })();
      nc.subscribe(`${agentInboxPrefix("bob-agent")}.>`);
      nc.subscribe("_INBOX.>");
      await nc.flush();
      await waitFor(
        "the subscription refusals",
        () => (errors.filter((e) => /permissions violation for subscription/i.test(e)).length >= 2 ? true : undefined),
        5_000,
      );
    } finally {
      await nc.close().catch(() => {});
    }
  });

  it("the operator's credential manages streams but reads no message, consumer or KV beyond the status summary's", async () => {
    const nc = await client(operatorPermissions(), "_INBOX_OPERATOR");
    try {
      const jsm = await jetstreamManager(nc, { timeout: 3_000 });
      await jsm.streams.add({ name: "IFP_RELAY_other", subjects: ["ifp.relay.other.>"] });
      expect((await jsm.streams.info("IFP_RELAY_other")).config.name).toBe("IFP_RELAY_other");
      expect(await jsm.streams.delete("IFP_RELAY_other")).toBe(true);
      // A deleted Agent's data: its bucket streams deleted, its keys purged from the shared bucket; no other purge.
      await jsm.streams.add({ name: "KV_ifp_outbox_gone", subjects: ["$KV.ifp_outbox_gone.>"] });
      expect(await jsm.streams.delete("KV_ifp_outbox_gone")).toBe(true);
      await jsm.streams.add({ name: "KV_ifp_agents", subjects: ["$KV.ifp_agents.>"] }).catch(() => {});
      expect((await jsm.streams.purge("KV_ifp_agents", { filter: "$KV.ifp_agents.gone.>" })).success).toBe(true);
      await jsm.streams.add({ name: "IFP_RELAY_kept", subjects: ["ifp.relay.kept.>"] });
      expect(await refusal(jsm.streams.purge("IFP_RELAY_kept"))).toMatch(VIOLATION);
      await jsm.streams.delete("IFP_RELAY_kept");
      const bobs = agentNames("bob-agent");
      expect(await refusal(jsm.streams.getMessage(bobs.inboxStream, { seq: 1 }))).toMatch(VIOLATION);
      // The status summary: the handler's backlog and the last_error key; no other consumer or key.
      await jsm.streams.add({ name: bobs.inboxStream, subjects: [bobs.inboxSubjects] }).catch(() => {});
      // (Read, or absent when bob's runtime has not made it: either way not refused.)
      expect(
        await jsm.consumers.info(bobs.inboxStream, bobs.handlerConsumer).then(
          () => "read",
          (err: Error) => err.message,
        ),
      ).toMatch(/^read$|consumer not found/i);
      expect(await refusal(jsm.consumers.info(bobs.inboxStream, "sender"))).toMatch(VIOLATION);
      expect(
        await jsm.direct.getMessage("KV_ifp_agents", { last_by_subj: `$KV.ifp_agents.${bobs.kvKey}.last_error` }).then(
          () => "read",
          (err: Error) => err.message,
        ),
      ).toBe("read");
      expect(
        await refusal(
          jsm.direct.getMessage("KV_ifp_agents", { last_by_subj: `$KV.ifp_agents.${bobs.kvKey}.capabilities` }),
        ),
      ).toMatch(VIOLATION);
      expect(await refusal(jsm.consumers.add(bobs.inboxStream, { name: "spy" }))).toMatch(VIOLATION);
      expect(await refusal(jetstream(nc, { timeout: 3_000 }).publish(bobs.inbox("forged"), "{}"))).toMatch(VIOLATION);
    } finally {
      await nc.close().catch(() => {});
    }
  });

  it("an expired credential is refused", async () => {
    const file = await credsFile("expired", agentPermissions("alice-agent"), Date.now() - 3_600_000, 60_000);
    const { readFileSync } = await import("node:fs");
    const err = await refusal(
      connect({ servers: nats.url, authenticator: credsAuthenticator(readFileSync(file)), reconnect: false }),
    );
    expect(err).toMatch(/expired|authorization/i);
  });

  it("a renewed credentials file is used on reconnect, without a restart", async () => {
    // A credential that expires in 3 s: the server then closes the connection; the runtime
    // reconnects with the file's new content.
    const perms = agentPermissions("alice-agent");
    const file = await credsFile("rotating", perms, Date.now(), 3_000);
    const conn = new Nats(
      { url: nats.url, name: "rotation", credsFile: file, inboxPrefix: agentInboxPrefix("alice-agent") },
      silent,
    );
    try {
      await conn.start();
      expect(conn.isConnected).toBe(true);
      const events: string[] = [];
      void (async () => {
        for await (const s of conn.nc!.status()) events.push(s.type);
      })();
      writeFileSync(file, await issuer.issue("rotating", perms));
      await waitFor(
        "the expiry to disconnect and the reconnect",
        () => (events.includes("disconnect") && events.includes("reconnect") ? true : undefined),
        20_000,
        50,
      );
      await waitFor("connected", () => (conn.isConnected ? true : undefined), 10_000, 50);
      expect((await conn.jsm.streams.info(agentNames("alice-agent").inboxStream)).config.name).toBe(
        agentNames("alice-agent").inboxStream,
      );
    } finally {
      await conn.close();
    }
  });
});
