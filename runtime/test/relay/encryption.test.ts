// End-to-end encryption through a real relay on a real nats-server: the relay's stored copy
// holds no plaintext, the recipients' handlers get the plaintext, what was altered on the way is
// refused and answered; under auto a recipient that offers no key gets the message in the clear,
// marked, and under required a missing encryption key is a clear error at send time; plaintext
// through an untrusted relay is refused when the recipient requires encryption, mode always
// encrypts on a direct route too, and a clear message falls back to an untrusted relay only
// under auto for a recipient that offers no key.
import { jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { describe, expect, it } from "vitest";
import type { NatsServer } from "../../../e2e/support/nats.ts";
import { consistently, waitFor } from "../../../e2e/support/wait.ts";
import { AgentEncryption } from "../../src/agent/encryption.ts";
import { LocalApiClient } from "../../src/client/local.ts";
import { DiscoveryClient } from "../../src/discovery/client.ts";
import type { HttpClient } from "../../src/net/http-client.ts";
import { encryptMessage, generateEncryptionKey, SCHEME } from "../../src/protocol/encryption.ts";
import type { Message } from "../../src/protocol/message.ts";
import { signMessage } from "../../src/protocol/signing.ts";
import { RelayClient } from "../../src/net/relay-client.ts";
import type { RunningRelay } from "../../src/relay/main.ts";
import { AgentSpec } from "../../src/resources/agent.ts";
import { identity, message, peerOf, signed } from "../support/fixtures.ts";
import { runAgent, startHandler, type Tls } from "../support/agent-harness.ts";
import { withRelay } from "../support/relay-harness.ts";

const alice = identity("alice-agent");
const bob = identity("bob-agent");
const carol = identity("carol-agent");
const dave = identity("dave-agent");
const bobKey = generateEncryptionKey();
const carolKey = generateEncryptionKey();
let nats: NatsServer;
let tls: Tls;
let relay: RunningRelay;
let relayUrl: string;
let http: HttpClient;

/** Changes one base64url character, always to another one. */
const flip = (s: string, i: number) => s.slice(0, i) + (s[i] === "A" ? "B" : "A") + s.slice(i + 1);
const encryptionPeer = (id: typeof bob, key: typeof bobKey) => ({
  ...peerOf(id),
  relay: { urls: [relayUrl] },
  encryptionKeys: [{ keyId: key.keyId, publicKey: key.publicKey }],
});

withRelay([alice, bob, carol, dave], (f) => ({ nats, tls, http, relay, relayUrl } = f));

/** Every message the relay's JetStream stream holds, as stored (data and headers). */
/** The delivery record of a message once it is delivered. */
const untilDelivered = (local: LocalApiClient, messageId: string, what: string) =>
  waitFor(what, async () => {
    const r = await local.status(messageId);
    return r.state === "delivered" ? r : undefined;
  });

async function relayStoredCopies(): Promise<string[]> {
  const nc = await connect({ servers: nats.url });
  try {
    const jsm = await jetstreamManager(nc);
    const out: string[] = [];
    for await (const s of jsm.streams.list()) {
      if (!s.config.name.startsWith("IFP_RELAY_")) continue;
      for (let seq = s.state.first_seq; seq <= s.state.last_seq && seq > 0; seq++) {
        const m = await jsm.streams.getMessage(s.config.name, { seq }).catch(() => undefined);
        if (m)
          out.push(
            `${m.header ? [...m.header.keys()].map((k) => `${k}: ${m.header!.get(k)}`).join("\n") : ""}\n${m.string()}`,
          );
      }
    }
    return out;
  } finally {
    await nc.close();
  }
}

async function postOutbox(localApiUrl: string, body: unknown): Promise<{ status: number; json: any }> {
  const res = await fetch(`${localApiUrl}/outbox`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  return { status: res.status, json: await res.json() };
}

const errorAnswerTo = (id: string, messageId: string) =>
  waitFor(`the error-phase answer to ${messageId}`, async () =>
    (await new RelayClient(relayUrl, id === "alice-agent" ? alice.signing : dave.signing, http).pull()).messages.find(
      (x) => x.headers.thread?.in_reply_to === messageId,
    ),
  );

describe("end-to-end encryption through an untrusted relay", () => {
  it("the relay stores only ciphertext; both recipients' handlers get the plaintext", async () => {
    const a = await runAgent({
      self: alice,
      natsUrl: nats.url,
      tls,
      spec: {
        peers: [encryptionPeer(bob, bobKey), encryptionPeer(carol, carolKey)],
        outbound: { backoff: ["300ms"], retryFor: "30s" },
      },
    });
    try {
      const secret = "the launch code is 0000 — confidential";
      const sent = await new LocalApiClient(a.localApiUrl).send({ to: ["bob-agent", "carol-agent"], text: secret });
      await waitFor(
        "delivered to the relay for both",
        async () => (await new LocalApiClient(a.localApiUrl).status(sent.message_id)).state === "delivered",
      );
      // Read straight from the relay's JetStream stream, before any recipient takes it.
      const copies = await relayStoredCopies();
      const ours = copies.filter((c) => c.includes(sent.message_id));
      expect(ours.length).toBe(2);
      for (const c of ours) {
        expect(c).not.toContain("launch code");
        expect(c).toContain(SCHEME);
        expect(c).toContain('"ciphertext"');
      }
    } finally {
      await a.close();
    }

    const handlers = [await startHandler(), await startHandler()];
    const b = await runAgent({
      self: bob,
      natsUrl: nats.url,
      tls,
      encryptionKey: bobKey.privateKeyPem,
      spec: {
        peers: [peerOf(alice)],
        relay: { urls: [relayUrl], pollInterval: "300ms" },
        handler: { url: handlers[0]!.url },
      },
    });
    const c = await runAgent({
      self: carol,
      natsUrl: nats.url,
      tls,
      encryptionKey: carolKey.privateKeyPem,
      spec: {
        peers: [peerOf(alice)],
        relay: { urls: [relayUrl], pollInterval: "300ms" },
        handler: { url: handlers[1]!.url },
      },
    });
    try {
      for (const h of handlers) {
        const got = await waitFor("the handler", () =>
          h.received.find((r) => r.body.headers.from.agent === "alice-agent"),
        );
        expect(got.body.body).toEqual({ text: "the launch code is 0000 — confidential" });
        expect(got.headers["ifp-encrypted"]).toBe(SCHEME);
        expect(got.headers["ifp-sender"]).toBe("alice-agent");
        expect(got.body.security.encryption.recipients.map((r: { agent: string }) => r.agent)).toEqual([
          "bob-agent",
          "carol-agent",
        ]);
      }
    } finally {
      await Promise.all([b.close(), c.close()]);
      await Promise.all(handlers.map((h) => h.close()));
    }
  });

  it("refuses a ciphertext or a wrapped key altered on the way, and answers with an error-phase message", async () => {
    const handler = await startHandler();
    const b = await runAgent({
      self: bob,
      natsUrl: nats.url,
      tls,
      encryptionKey: bobKey.privateKeyPem,
      spec: {
        peers: [peerOf(alice)],
        relay: { urls: [relayUrl], pollInterval: "300ms" },
        handler: { url: handler.url },
      },
    });
    try {
      const recipients = [{ agent: "bob-agent", keyId: bobKey.keyId, publicKey: bobKey.publicKey }];
      const enc = (text: string) => encryptMessage(message("alice-agent", "bob-agent", {}, text), recipients);

      // The wrapped key is outside the signature, so an altered one passes the signature check: decryption catches it.
      const wrapped = signMessage(enc("wrapped key altered"), alice.signing) as Message & { security: any };
      const entry = wrapped.security.encryption.recipients[0];
      entry.wrapped_key = flip(entry.wrapped_key, 3);
      // A ciphertext altered and signed again (a sender's mistake, or a relay with the key): the AEAD catches it.
      const body = enc("ciphertext altered") as Message & { body: { ciphertext: string } };
      body.body.ciphertext = flip(body.body.ciphertext, 40);
      const reSigned = signMessage(body, alice.signing);
      // The ciphertext altered after signing: the signature catches it.
      const afterSigning = signMessage(enc("altered after signing"), alice.signing) as Message & {
        body: { ciphertext: string };
      };
      afterSigning.body.ciphertext = flip(afterSigning.body.ciphertext, 40);
      // And one that is intact, to see the others were not refused for something else.
      const intact = signMessage(enc("intact"), alice.signing);

      for (const m of [wrapped, reSigned, afterSigning, intact])
        expect((await new RelayClient(relayUrl, alice.signing, http).publish(m)).status).toBe(202);
      const w = await errorAnswerTo("alice-agent", wrapped.headers.message_id);
      expect(w.body.parts?.[0]?.content).toMatchObject({ code: "decryption_failed" });
      expect(w.body.text).toMatch(/wrapped key for bob-agent does not authenticate/);
      const r = await errorAnswerTo("alice-agent", reSigned.headers.message_id);
      expect(r.body.text).toMatch(/ciphertext does not authenticate/);
      const s = await errorAnswerTo("alice-agent", afterSigning.headers.message_id);
      expect(s.body.parts?.[0]?.content).toMatchObject({ code: "invalid_signature" });
      const ok = await waitFor("the intact one handed on", () =>
        handler.received.find((x) => x.body.headers.message_id === intact.headers.message_id),
      );
      expect(ok.body.body).toEqual({ text: "intact" });
      await waitFor(
        "bob's mailbox emptied",
        async () => (await new RelayClient(relayUrl, bob.signing, http).pull()).messages.length === 0,
      );
      expect(handler.received.map((x) => x.body.body.text)).toEqual(["intact"]);
    } finally {
      await b.close();
      await handler.close();
    }
  });

  it("refuses plaintext through an untrusted relay when the recipient requires encryption, and takes it through a trusted one", async () => {
    const handler = await startHandler();
    const spec = (trusted: boolean) => ({
      peers: [peerOf(alice)],
      relay: { urls: [relayUrl], pollInterval: "300ms" },
      handler: { url: handler.url },
      encryption: {
        requireThroughRelays: true,
        relayTrust: trusted ? [{ url: relayUrl, level: "trusted" as const }] : [],
      },
    });
    let b = await runAgent({
      self: bob,
      natsUrl: nats.url,
      tls,
      encryptionKey: bobKey.privateKeyPem,
      spec: spec(false),
    });
    try {
      const plain = signed(alice, "bob-agent", {}, "in the clear");
      expect((await new RelayClient(relayUrl, alice.signing, http).publish(plain)).status).toBe(202);
      const answer = await errorAnswerTo("alice-agent", plain.headers.message_id);
      expect(answer.headers).toMatchObject({ phase: "error", from: { agent: "bob-agent" } });
      expect(answer.body.parts?.[0]?.content).toMatchObject({ code: "encryption_required" });
      expect(answer.body.text).toMatch(/accepts only end-to-end encrypted messages through the relay/);
      expect(answer.security?.signatures?.[0]?.key_id).toBe("bob-agent#key-1");
      // An encrypted one through the same relay is taken.
      const enc = signMessage(
        encryptMessage(message("alice-agent", "bob-agent", {}, "sealed"), [
          { agent: "bob-agent", keyId: bobKey.keyId, publicKey: bobKey.publicKey },
        ]),
        alice.signing,
      );
      expect((await new RelayClient(relayUrl, alice.signing, http).publish(enc)).status).toBe(202);
      await waitFor("the encrypted one handed on", () =>
        handler.received.find((x) => x.body.headers.message_id === enc.headers.message_id),
      );
      expect(handler.received.some((x) => x.body.headers.message_id === plain.headers.message_id)).toBe(false);
    } finally {
      await b.close();
    }
    b = await runAgent({ self: bob, natsUrl: nats.url, tls, encryptionKey: bobKey.privateKeyPem, spec: spec(true) });
    try {
      const plain = signed(alice, "bob-agent", {}, "in the clear, trusted relay");
      expect((await new RelayClient(relayUrl, alice.signing, http).publish(plain)).status).toBe(202);
      await waitFor("the plaintext through a trusted relay handed on", () =>
        handler.received.find((x) => x.body.headers.message_id === plain.headers.message_id),
      );
    } finally {
      await b.close();
      await handler.close();
    }
  });

  it("auto: a relay-only recipient that offers no encryption key gets the message in the clear through the untrusted relay, named in the delivery record and counted; one with a key gets it encrypted", async () => {
    const a = await runAgent({
      self: alice,
      natsUrl: nats.url,
      tls,
      spec: {
        peers: [encryptionPeer(bob, bobKey), { ...peerOf(dave), relay: { urls: [relayUrl] } }],
        outbound: { backoff: ["300ms"], retryFor: "30s" },
      },
    });
    try {
      const local = new LocalApiClient(a.localApiUrl);
      const clear = await postOutbox(a.localApiUrl, { to: "dave-agent", text: "dave offers no key" });
      expect([clear.status, clear.json.encrypted]).toEqual([202, false]);
      const record = await untilDelivered(local, clear.json.message_id, "delivered through the relay");
      expect(record.recipients[0]).toMatchObject({ via: `relay:${relayUrl}`, plaintext_relay: relayUrl });
      expect((await relayStoredCopies()).some((c) => c.includes("dave offers no key"))).toBe(true);
      expect(await a.scrape()).toMatch(/^ifp_outbound_plaintext_relay_total{mode="agent"} 1$/m);
      const sealed = await postOutbox(a.localApiUrl, { to: "bob-agent", text: "bob offers a key" });
      expect([sealed.status, sealed.json.encrypted]).toEqual([202, true]);
      const bobs = await untilDelivered(local, sealed.json.message_id, "delivered through the relay");
      expect(bobs.recipients[0]!.plaintext_relay).toBeUndefined();
      expect((await relayStoredCopies()).some((c) => c.includes("bob offers a key"))).toBe(false);
      expect(await a.scrape()).toMatch(/^ifp_outbound_plaintext_relay_total{mode="agent"} 1$/m);
    } finally {
      await a.close();
    }
  });

  it("required: answers the local API with a clear error when a recipient has no encryption key, and sends nothing", async () => {
    const a = await runAgent({
      self: alice,
      natsUrl: nats.url,
      tls,
      spec: {
        peers: [encryptionPeer(bob, bobKey), { ...peerOf(dave), relay: { urls: [relayUrl] } }],
        outbound: { backoff: ["300ms"], retryFor: "30s" },
        encryption: { mode: "required" },
      },
    });
    try {
      // required: dave is reached through an untrusted relay and has no key.
      const r = await postOutbox(a.localApiUrl, { to: ["bob-agent", "dave-agent"], text: "must not leak" });
      expect(r.status).toBe(422);
      expect(r.json).toMatchObject({ status: "error", code: "encryption_key_unavailable" });
      expect(r.json.message).toMatch(/dave-agent/);
      expect(r.json.message).toMatch(/relay .* not marked trusted/);
      // A topic cannot be encrypted for.
      const t = await postOutbox(a.localApiUrl, { to: ["bob-agent", "topic:news"], text: "x" });
      expect(t.status).toBe(422);
      expect(t.json.message).toMatch(/topic/);
      // Bob has a key: encrypted, and the answer says so.
      const ok = await postOutbox(a.localApiUrl, { to: "bob-agent", text: "fine" });
      expect(ok.status).toBe(202);
      expect(ok.json.encrypted).toBe(true);
      expect(ok.json.message.body).toEqual({ ciphertext: expect.any(String) });
      expect((await relayStoredCopies()).some((c) => c.includes("must not leak"))).toBe(false);
    } finally {
      await a.close();
    }
    // mode never: sent in the clear even through an untrusted relay.
    const n = await runAgent({
      self: alice,
      natsUrl: nats.url,
      tls,
      spec: { peers: [{ ...peerOf(dave), relay: { urls: [relayUrl] } }], encryption: { mode: "never" } },
    });
    try {
      const r = await postOutbox(n.localApiUrl, { to: "dave-agent", text: "clear on purpose" });
      expect(r.status).toBe(202);
      expect(r.json.encrypted).toBe(false);
    } finally {
      await n.close();
    }
  });

  it("mode always encrypts on a direct https route too, with the key from the recipient's identity document, and refuses a recipient without one", async () => {
    const handler = await startHandler();
    const b = await runAgent({
      self: bob,
      natsUrl: nats.url,
      tls,
      encryptionKey: bobKey.privateKeyPem,
      spec: { peers: [peerOf(alice)], handler: { url: handler.url } },
    });
    const d = await runAgent({ self: dave, natsUrl: nats.url, tls, spec: { peers: [peerOf(alice)] } });
    const base = (r: { url: string }) => r.url.replace("127.0.0.1", "localhost");
    // No relay anywhere: under auto both would go in the clear.
    const a = await runAgent({
      self: alice,
      natsUrl: nats.url,
      tls,
      spec: {
        peers: [
          { ...peerOf(bob), url: base(b) },
          { ...peerOf(dave), url: base(d) },
        ],
        outbound: { backoff: ["300ms"], retryFor: "30s" },
        encryption: { mode: "always" },
      },
    });
    try {
      const sent = await postOutbox(a.localApiUrl, { to: "bob-agent", text: "sealed even on a direct route" });
      expect(sent.status).toBe(202);
      expect(sent.json.encrypted).toBe(true);
      expect(sent.json.message.body).toEqual({ ciphertext: expect.any(String) });
      expect(sent.json.message.security.encryption.recipients).toEqual([
        expect.objectContaining({ agent: "bob-agent", key_id: bobKey.keyId }),
      ]);
      const record = await waitFor("delivered", async () => {
        const r = await new LocalApiClient(a.localApiUrl).status(sent.json.message_id);
        return r.state === "delivered" ? r : undefined;
      });
      // Straight to bob's inbox, no relay on the way.
      expect(record.recipients[0]!.via).toBe(`${base(b)}/.well-known/agent/inbox`);
      const got = await waitFor("bob's handler", () =>
        handler.received.find((x) => x.body.headers.message_id === sent.json.message_id),
      );
      expect(got.headers["ifp-encrypted"]).toBe(SCHEME);
      expect(got.body.body).toEqual({ text: "sealed even on a direct route" });
      // Dave publishes no encryption key: nothing is sent, in the clear or otherwise.
      const r = await postOutbox(a.localApiUrl, { to: "dave-agent", text: "must not go in the clear" });
      expect(r.status).toBe(422);
      expect(r.json).toMatchObject({
        code: "encryption_key_unavailable",
        message: expect.stringMatching(
          /spec\.encryption\.mode is always.*dave-agent publishes no active encryption key/,
        ),
      });
    } finally {
      await Promise.all([a.close(), b.close(), d.close()]);
      await handler.close();
    }
  });

  it("required never lets a clear message fall back to an untrusted relay when the direct route fails, nor auto for a recipient that offers a key; a trusted relay takes it", async () => {
    // Bob has an https route (nothing listens there) and a relay; a message to him goes in the clear.
    const bobUnreachable = { ...peerOf(bob), url: "https://localhost:1", relay: { urls: [relayUrl] } };
    const a = await runAgent({
      self: alice,
      natsUrl: nats.url,
      tls,
      spec: {
        peers: [bobUnreachable],
        outbound: { backoff: ["300ms"], retryFor: "30s" },
        encryption: { mode: "required" },
      },
    });
    try {
      const local = new LocalApiClient(a.localApiUrl);
      const sent = await postOutbox(a.localApiUrl, { to: "bob-agent", text: "clear, for the direct route only" });
      expect([sent.status, sent.json.encrypted]).toEqual([202, false]);
      const id: string = sent.json.message_id;
      // Each attempt fails on the direct route and looks at the relay: three of them.
      const after3 = await waitFor("three attempts, or a delivery", async () => {
        const r = (await local.status(id)).recipients[0]!;
        return r.attempts >= 3 || r.state === "delivered" ? r : undefined;
      });
      expect(after3).toMatchObject({
        state: "retrying",
        via: "https://localhost:1/.well-known/agent/inbox",
        last_error: expect.stringMatching(/^network error/),
      });
      await consistently(
        "the clear message kept off the untrusted relay",
        async () => {
          const r = (await local.status(id)).recipients[0]!;
          return (
            r.state === "retrying" &&
            !r.via?.startsWith("relay:") &&
            !(await relayStoredCopies()).some((c) => c.includes(id))
          );
        },
        1_500,
        250,
      );
    } finally {
      await a.close();
    }
    // The same route with the relay marked trusted: the fallback takes it (another sender, so alice's queued message stays out of it).
    const c = await runAgent({
      self: carol,
      natsUrl: nats.url,
      tls,
      spec: {
        peers: [bobUnreachable],
        outbound: { backoff: ["300ms"], retryFor: "30s" },
        encryption: { relayTrust: [{ url: relayUrl, level: "trusted" }] },
      },
    });
    try {
      const sent = await postOutbox(c.localApiUrl, { to: "bob-agent", text: "clear, trusted relay" });
      expect([sent.status, sent.json.encrypted]).toEqual([202, false]);
      const record = await waitFor("delivered through the relay", async () => {
        const r = await new LocalApiClient(c.localApiUrl).status(sent.json.message_id);
        return r.state === "delivered" ? r : undefined;
      });
      expect(record.recipients[0]!.via).toBe(`relay:${relayUrl}`);
      expect(record.recipients[0]!.plaintext_relay).toBeUndefined();
      expect((await relayStoredCopies()).some((x) => x.includes("clear, trusted relay"))).toBe(true);
    } finally {
      await c.close();
    }
    // auto, another sender: carol offers no key, so her clear message falls back to the untrusted
    // relay, marked; bob offers one (spec.peers), so his is kept off it and waits for his inbox.
    const d = await runAgent({
      self: dave,
      natsUrl: nats.url,
      tls,
      spec: {
        peers: [
          { ...bobUnreachable, encryptionKeys: [{ keyId: bobKey.keyId, publicKey: bobKey.publicKey }] },
          { ...peerOf(carol), url: "https://localhost:1", relay: { urls: [relayUrl] } },
        ],
        outbound: { backoff: ["300ms"], retryFor: "30s" },
      },
    });
    try {
      const local = new LocalApiClient(d.localApiUrl);
      const toCarol = await postOutbox(d.localApiUrl, { to: "carol-agent", text: "clear to carol, who offers no key" });
      const toBob = await postOutbox(d.localApiUrl, { to: "bob-agent", text: "clear to bob, who offers a key" });
      expect([toCarol.json.encrypted, toBob.json.encrypted]).toEqual([false, false]);
      const carols = await untilDelivered(local, toCarol.json.message_id, "carol's delivered through the relay");
      expect(carols.recipients[0]).toMatchObject({ via: `relay:${relayUrl}`, plaintext_relay: relayUrl });
      await waitFor(
        "three attempts at bob",
        async () => (await local.status(toBob.json.message_id)).recipients[0]!.attempts >= 3,
      );
      const bobs = (await local.status(toBob.json.message_id)).recipients[0]!;
      expect(bobs).toMatchObject({ state: "retrying", via: "https://localhost:1/.well-known/agent/inbox" });
      expect((await relayStoredCopies()).some((x) => x.includes(toBob.json.message_id))).toBe(false);
    } finally {
      await d.close();
    }
  });

  it("decrypts at the inbox too, and answers what it cannot decrypt or parse with the documented errors", async () => {
    const handler = await startHandler();
    const b = await runAgent({
      self: bob,
      natsUrl: nats.url,
      tls,
      encryptionKey: bobKey.privateKeyPem,
      spec: { peers: [peerOf(alice)], handler: { url: handler.url } },
    });
    const d = await runAgent({ self: dave, natsUrl: nats.url, tls, spec: { peers: [peerOf(alice)] } });
    try {
      const forBob = (text: string, to = "bob-agent") =>
        encryptMessage(message("alice-agent", to, {}, text), [
          { agent: "bob-agent", keyId: bobKey.keyId, publicKey: bobKey.publicKey },
        ]);
      const ok = signMessage(forBob("directly, sealed"), alice.signing);
      expect((await b.post(ok)).status).toBe(202);
      const got = await waitFor("the handler", () =>
        handler.received.find((x) => x.body.headers.message_id === ok.headers.message_id),
      );
      expect(got.body.body).toEqual({ text: "directly, sealed" });
      expect(got.headers["ifp-encrypted"]).toBe(SCHEME);

      const bad = forBob("wrapped key altered") as Message & { security: any };
      bad.security.encryption.recipients[0].wrapped_key = flip(bad.security.encryption.recipients[0].wrapped_key, 0);
      const r1 = await b.post(signMessage(bad, alice.signing));
      expect(r1.status).toBe(400);
      expect(JSON.parse(r1.text)).toMatchObject({
        status: "error",
        code: "decryption_failed",
        message: expect.stringMatching(/does not authenticate/),
      });

      // Another scheme (IFP-5's sealed_box), garbage recipients, a ciphertext without security.encryption, a clear body beside it.
      const sealed = forBob("x") as Message & { security: any };
      sealed.security.encryption = { scheme: "sealed_box", recipients: ["bob-agent"] };
      const r2 = await b.post(signMessage(sealed, alice.signing));
      expect([r2.status, JSON.parse(r2.text).code]).toEqual([400, "decryption_failed"]);
      expect(JSON.parse(r2.text).message).toMatch(/not supported/);
      const junk = forBob("x") as Message & { security: any };
      junk.security.encryption.recipients = Array.from({ length: 150 }, () => ({
        agent: "bob-agent",
        key_id: bobKey.keyId,
        epk: "x",
        wrapped_key: {},
      }));
      const r3 = await b.post(signMessage(junk, alice.signing));
      expect([r3.status, JSON.parse(r3.text).code]).toEqual([400, "decryption_failed"]);
      const naked = signMessage(
        { ...message("alice-agent", "bob-agent"), body: { ciphertext: "abc" } } as Message,
        alice.signing,
      );
      const r4 = await b.post(naked);
      expect([r4.status, JSON.parse(r4.text).code]).toEqual([400, "invalid_format"]);
      expect(JSON.parse(r4.text).message).toMatch(/security.encryption/);
      const mixed = forBob("x") as Message & { body: any };
      mixed.body.text = "and in the clear";
      const r5 = await b.post(signMessage(mixed, alice.signing));
      expect([r5.status, JSON.parse(r5.text).code]).toEqual([400, "invalid_format"]);

      // An agent without an encryption key says so.
      const r6 = await d.post(
        signMessage(
          encryptMessage(message("alice-agent", "dave-agent", {}, "x"), [
            { agent: "dave-agent", keyId: bobKey.keyId, publicKey: bobKey.publicKey },
          ]),
          alice.signing,
        ),
      );
      expect([r6.status, JSON.parse(r6.text).code]).toEqual([400, "decryption_failed"]);
      expect(JSON.parse(r6.text).message).toMatch(/dave-agent has no encryption key/);
      expect(handler.received).toHaveLength(1);
    } finally {
      await Promise.all([b.close(), d.close()]);
      await handler.close();
    }
  });

  it("publishes the encryption key in the identity document, where senders look it up", async () => {
    const b = await runAgent({
      self: bob,
      natsUrl: nats.url,
      tls,
      encryptionKey: bobKey.privateKeyPem,
      spec: { peers: [peerOf(alice)] },
    });
    const d = await runAgent({ self: dave, natsUrl: nats.url, tls, spec: {} });
    try {
      const doc = JSON.parse((await b.get("/.well-known/agent/identity")).text);
      expect(doc.keys).toEqual([
        expect.objectContaining({ key_id: "key-1", type: "ed25519" }),
        expect.objectContaining({
          key_id: bobKey.keyId,
          type: "x25519",
          use: "encryption",
          public_key: bobKey.publicKey,
          status: "active",
        }),
      ]);
      // Without an encryption key the document lists the signing key alone.
      expect(JSON.parse((await d.get("/.well-known/agent/identity")).text).keys).toHaveLength(1);
      const base = (r: { url: string }) => r.url.replace("127.0.0.1", "localhost");
      const spec = AgentSpec.parse({
        agentId: "alice-agent",
        peers: [
          { ...peerOf(bob), url: base(b) },
          { ...peerOf(dave), url: base(d) },
        ],
        encryption: { mode: "always" },
      });
      const enc = new AgentEncryption({ spec, discovery: new DiscoveryClient(http), keys: [] });
      expect(await enc.recipientKeys("bob-agent")).toEqual([
        { agent: "bob-agent", keyId: bobKey.keyId, publicKey: bobKey.publicKey },
      ]);
      await expect(enc.recipientKeys("dave-agent")).rejects.toMatchObject({
        code: "encryption_key_unavailable",
        message: expect.stringMatching(/publishes no active encryption key/),
      });
      await expect(enc.recipientKeys("nobody-agent")).rejects.toMatchObject({ code: "encryption_key_unavailable" });
    } finally {
      await Promise.all([b.close(), d.close()]);
    }
  });
});
