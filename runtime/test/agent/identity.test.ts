// IFP-5 identity in the agent runtime (docs/identity.md): key lookup through identity documents
// served by real runtimes over verified TLS, did:key, introduction tokens, the levels they give,
// minimum levels, no downgrade within a conversation, and the bounds on what a stranger can make
// the agent fetch. Real nats-server, real runtimes, real HTTPS.
import { writeFileSync } from "node:fs";
import { createServer, type Server } from "node:https";
import { join } from "node:path";
import { describe, expect, it, beforeAll, afterAll } from "vitest";
import { freePort, waitFor } from "../../../e2e/support/ports.ts";
import { didKeyFromPublicKey } from "../../src/protocol/did-key.ts";
import { signIntroduction } from "../../src/protocol/signing.ts";
import { identity, message, signed, tempDir } from "../support/fixtures.ts";
import { onFreePorts } from "../support/free-ports.ts";
import { runAgent, startHandler, type Tls, withNatsAndTls } from "../support/agent-harness.ts";
import type { NatsServer } from "../../../e2e/support/nats.ts";

let nats: NatsServer;
let tls: Tls;
withNatsAndTls((n, t) => ([nats, tls] = [n, t]));

const alice = identity("alice-agent");
/** A fresh did:key identity: anyone can make one, so nobody but its maker vouches for it. */
const didIdentity = () => {
  const id = identity("placeholder");
  const did = didKeyFromPublicKey(id.publicKey);
  return { ...id, agentId: did, signing: { ...id.signing, agentId: did } };
};
const didSender = didIdentity();
const TOKEN = "introduction-token-shared-by-the-humans";

const capabilities = [
  { name: "gossip.exchange", description: "gossip" },
  { name: "calendar.share", description: "for verified senders", conditions: { minAuthLevel: 2 } },
  { name: "secrets.share", description: "sensitive", conditions: { minAuthLevel: 3 } },
];

/** A real runtime whose agent id is its own https URL: it serves its identity document. */
function httpsAgent(name: string) {
  return onFreePorts(["https"], async ({ https: port }) => {
    const id = identity(`https://localhost:${port}`);
    const running = await runAgent({ self: id, natsUrl: nats.url, tls, port, spec: { displayName: name } });
    return { id, running };
  });
}

const body = async (r: { text: string }) => JSON.parse(r.text) as { status: string; code: string; message: string };

describe("identity: lookup and levels", () => {
  let receiver: Awaited<ReturnType<typeof runAgent>>;
  let handler: Awaited<ReturnType<typeof startHandler>>;
  let stranger: Awaited<ReturnType<typeof httpsAgent>>;
  let carol: ReturnType<typeof identity>;
  let carolRuntime: Awaited<ReturnType<typeof runAgent>>;

  beforeAll(async () => {
    handler = await startHandler();
    stranger = await httpsAgent("stranger");
    // carol has a simple name; the humans gave alice her url and an old key only.
    carol = identity("carol-agent");
    carolRuntime = await runAgent({ self: carol, natsUrl: nats.url, tls, spec: {} });
    const dir = tempDir();
    const tokens = join(dir, "tokens");
    writeFileSync(tokens, `short\n${TOKEN}\n`);
    receiver = await runAgent({
      self: alice,
      natsUrl: nats.url,
      tls,
      dir,
      introductionSecretFile: tokens,
      spec: {
        capabilities,
        peers: [
          {
            agentId: "carol-agent",
            url: carolRuntime.url.replace("127.0.0.1", "localhost"),
            keys: [{ keyId: "old", publicKey: identity("x").publicKey }],
          },
        ],
        inbox: { introductionTokens: { secretName: "intro", key: "tokens" } },
        handler: { url: handler.url },
      },
    });
  });
  afterAll(async () => {
    await Promise.all([receiver?.close(), stranger?.running.close(), carolRuntime?.close()]);
    await handler?.close();
  });

  const handed = (id: string) =>
    waitFor(`hand-off of ${id}`, () => handler.received.find((r) => r.body.headers.message_id === id));

  it("accepts a stranger's first contact through the identity document at its https agent id (level 2)", async () => {
    const m = signed(stranger.id, "alice-agent");
    const r = await receiver.post(m);
    expect(r.status, r.text).toBe(202);
    const got = await handed(m.headers.message_id);
    expect(got.headers["ifp-auth-level"]).toBe("2");
    expect(got.headers["ifp-auth-source"]).toBe("identity-document");
    expect(got.headers["ifp-sender"]).toBe(stranger.id.agentId);
  });

  it("looks a rotated key up at the url the humans gave for a simple name (level 1)", async () => {
    const m = signed(carol, "alice-agent");
    const r = await receiver.post(m);
    expect(r.status, r.text).toBe(202);
    const got = await handed(m.headers.message_id);
    expect(got.headers["ifp-auth-level"]).toBe("1");
  });

  it("resolves a stranger's did:key locally at level 1 (signed, self-asserted)", async () => {
    const m = signed(didSender, "alice-agent");
    const r = await receiver.post(m);
    expect(r.status, r.text).toBe(202);
    const got = await handed(m.headers.message_id);
    expect(got.headers["ifp-auth-level"]).toBe("1");
    expect(got.headers["ifp-auth-source"]).toBe("did:key");
  });

  it("does not hand on a stranger's did:key request for a capability that needs level 2", async () => {
    const m = signed(didSender, "alice-agent", { capabilities: { request: ["calendar.share"] } } as never);
    expect((await receiver.post(m)).status).toBe(202);
    const next = signed(didSender, "alice-agent");
    expect((await receiver.post(next)).status).toBe(202);
    await handed(next.headers.message_id);
    expect(handler.received.some((x) => x.body.headers.message_id === m.headers.message_id)).toBe(false);
  });

  it("does not hand on a level-2 request for a capability that needs level 3", async () => {
    const m = signed(stranger.id, "alice-agent", { capabilities: { request: ["secrets.share"] } } as never);
    expect((await receiver.post(m)).status).toBe(202);
    // The one after it is handed on; the conditional request never is.
    const next = signed(stranger.id, "alice-agent");
    expect((await receiver.post(next)).status).toBe(202);
    await handed(next.headers.message_id);
    expect(handler.received.some((x) => x.body.headers.message_id === m.headers.message_id)).toBe(false);
  });

  it("accepts an introduction token at level 0, and refuses a wrong or short one", async () => {
    const m = signIntroduction(
      message("newcomer", "alice-agent", { conversation_id: "conv:intro" }),
      TOKEN,
      "newcomer#intro",
    );
    const r = await receiver.post(m);
    expect(r.status, r.text).toBe(202);
    const got = await handed(m.headers.message_id);
    expect(got.headers["ifp-auth-level"]).toBe("0");
    expect(got.headers["ifp-auth-source"]).toBe("introduction");
    for (const token of ["not-the-token-but-long-enough", "short"]) {
      const bad = await receiver.post(signIntroduction(message("newcomer", "alice-agent"), token, "newcomer#intro"));
      expect(bad.status).toBe(401);
      expect((await body(bad)).code).toBe("invalid_signature");
    }
  });

  it("refuses a downgrade within a conversation, and allows the lower level in a new one", async () => {
    const conv = { conversation_id: "conv:no-downgrade" };
    const first = signed(didSender, "alice-agent", conv);
    expect((await receiver.post(first)).status).toBe(202);
    const lower = signIntroduction(
      message(didSender.agentId, "alice-agent", { ...conv, sequence: 2 }),
      TOKEN,
      `${didSender.agentId}#intro`,
    );
    const r = await receiver.post(lower);
    expect(r.status).toBe(401);
    expect(await body(r)).toMatchObject({
      code: "insufficient_auth_level",
      message: expect.stringMatching(/level 1.*level 0/),
    });
    const elsewhere = signIntroduction(
      message(didSender.agentId, "alice-agent", { conversation_id: "conv:other" }),
      TOKEN,
      `${didSender.agentId}#intro`,
    );
    expect((await receiver.post(elsewhere)).status).toBe(202);
    // Raised to 1 there too: a retry of the level-0 message already taken is a repeat (202), a new one is refused.
    expect(
      (await receiver.post(signed(didSender, "alice-agent", { conversation_id: "conv:other", sequence: 2 }))).status,
    ).toBe(202);
    expect((await receiver.post(elsewhere)).status).toBe(202);
    const newLow = signIntroduction(
      message(didSender.agentId, "alice-agent", { conversation_id: "conv:other", sequence: 3 }),
      TOKEN,
      `${didSender.agentId}#intro`,
    );
    expect((await receiver.post(newLow)).status).toBe(401);
    // The same level again, and a higher one, are fine.
    const last = signed(didSender, "alice-agent", { ...conv, sequence: 3 });
    expect((await receiver.post(last)).status).toBe(202);
    // A refused message was refused before it was stored: never handed on, while the one after it is.
    await handed(last.headers.message_id);
    for (const refused of [lower, newLow])
      expect(handler.received.some((x) => x.body.headers.message_id === refused.headers.message_id)).toBe(false);
  });

  it("answers a failed lookup with 401 unknown_sender that says why", async () => {
    const nobody = await receiver.post(signed(identity("nobody-agent"), "alice-agent"));
    expect(nobody.status).toBe(401);
    expect(await body(nobody)).toMatchObject({
      code: "unknown_sender",
      message: expect.stringMatching(/not among this agent's peers/),
    });
    const closed = await freePort();
    const gone = await receiver.post(signed(identity(`https://localhost:${closed}`), "alice-agent"));
    expect(gone.status).toBe(401);
    expect(await body(gone)).toMatchObject({
      code: "unknown_sender",
      message: expect.stringMatching(/could not be obtained/),
    });
  });

  it("refuses a signature by a key the identity document does not hold, or that does not verify", async () => {
    const impostor = identity(stranger.id.agentId);
    const r = await receiver.post(signed(impostor, "alice-agent"));
    expect(r.status).toBe(401);
    expect((await body(r)).code).toBe("invalid_signature");
    const otherKey = identity(stranger.id.agentId, "key-9");
    const r2 = await receiver.post(signed(otherKey, "alice-agent"));
    expect(r2.status).toBe(401);
    expect(await body(r2)).toMatchObject({
      code: "unknown_sender",
      message: expect.stringMatching(/lists no key key-9/),
    });
  });
});

describe("identity: spec.inbox.minAuthLevel", () => {
  it("at 2, refuses a stranger's did:key and accepts a did:key the humans listed, peers and https ids", async () => {
    const stranger = await httpsAgent("stranger-2");
    const listed = didIdentity();
    const revoked = didIdentity();
    const bob = identity("bob-agent");
    const handler = await startHandler();
    const strict = await runAgent({
      self: identity("strict-agent"),
      natsUrl: nats.url,
      tls,
      spec: {
        inbox: { minAuthLevel: 2 },
        handler: { url: handler.url },
        peers: [
          // The key id the humans wrote need not be the one the signature names: the did:key is its key.
          { agentId: listed.agentId, keys: [{ keyId: "as-exchanged", publicKey: listed.publicKey }] },
          { agentId: revoked.agentId, keys: [{ keyId: "old", publicKey: revoked.publicKey, status: "revoked" }] },
          { agentId: bob.agentId, keys: [{ keyId: bob.keyId, publicKey: bob.publicKey }] },
        ],
      },
    });
    const handed = (id: string) =>
      waitFor(`hand-off of ${id}`, () => handler.received.find((r) => r.body.headers.message_id === id));
    try {
      const r = await strict.post(signed(didIdentity(), "strict-agent"));
      expect(r.status).toBe(401);
      expect(await body(r)).toMatchObject({
        code: "insufficient_auth_level",
        message: expect.stringMatching(
          /level 2 or above; yours is at level 1 \(did:key\)\. .*add your key to its peers/,
        ),
      });

      const fromListed = signed(listed, "strict-agent");
      const ok = await strict.post(fromListed);
      expect(ok.status, ok.text).toBe(202);
      const got = await handed(fromListed.headers.message_id);
      expect(got.headers["ifp-auth-level"]).toBe("2");
      expect(got.headers["ifp-auth-source"]).toBe("peers");

      const gone = await strict.post(signed(revoked, "strict-agent"));
      expect(gone.status).toBe(401);
      expect(await body(gone)).toMatchObject({
        code: "invalid_signature",
        message: expect.stringMatching(/has been revoked/),
      });

      expect((await strict.post(signed(bob, "strict-agent"))).status).toBe(202);
      expect((await strict.post(signed(stranger.id, "strict-agent"))).status).toBe(202);
    } finally {
      await Promise.all([strict.close(), stranger.running.close()]);
      await handler.close();
    }
  });

  it("at 3, refuses every sender, since no key source gives level 3", async () => {
    const stranger = await httpsAgent("stranger-3");
    const bob = identity("bob-agent");
    const strict = await runAgent({
      self: identity("strict-agent"),
      natsUrl: nats.url,
      tls,
      spec: {
        inbox: { minAuthLevel: 3 },
        peers: [{ agentId: bob.agentId, keys: [{ keyId: bob.keyId, publicKey: bob.publicKey }] }],
      },
    });
    try {
      for (const [who, level] of [
        [stranger.id, "2 \\(identity-document\\)"],
        [bob, "2 \\(peers\\)"],
        [didIdentity(), "1 \\(did:key\\)"],
      ] as const) {
        const r = await strict.post(signed(who, "strict-agent"));
        expect(r.status).toBe(401);
        expect(await body(r)).toMatchObject({
          code: "insufficient_auth_level",
          message: expect.stringMatching(new RegExp(`level 3 or above; yours is at level ${level}`)),
        });
      }
    } finally {
      await Promise.all([strict.close(), stranger.running.close()]);
    }
  });
});

describe("identity: abuse", () => {
  let server: Server;
  let base: string;
  const fetches: string[] = [];
  /** Paths whose answer the runtime stopped reading before it ended (it closed the connection). */
  const abandoned: string[] = [];
  let mode: "missing" | "huge" | "slow" | "wrong-key" = "missing";
  const wrongKey = identity("x").publicKey;
  /** The key the oversized document holds: the sender's own, so only the size bound refuses it. */
  let hugeKey = wrongKey;

  beforeAll(async () => {
    server = createServer({ cert: tls.cert, key: tls.key }, (req, res) => {
      fetches.push(req.url ?? "");
      const agentId = `${base}${(req.url ?? "").replace(/\/\.well-known\/agent\/identity$/, "")}`;
      if (mode === "missing") return res.writeHead(404).end();
      if (mode === "huge") {
        res.writeHead(200, { "content-type": "application/json" });
        const keys = [{ key_id: "key-1", type: "ed25519", public_key: hugeKey, status: "active" }];
        return res.end(JSON.stringify({ ifp: 5, agent_id: agentId, keys, padding: "x".repeat(2_000_000) }));
      }
      if (mode === "slow") {
        res.on("close", () => {
          if (!res.writableFinished) abandoned.push(req.url ?? "");
        });
        res.writeHead(200, { "content-type": "application/json" });
        res.write('{"ifp": 5,');
        return; // never finished
      }
      res.writeHead(200, { "content-type": "application/json" });
      res.end(
        JSON.stringify({
          ifp: 5,
          agent_id: agentId,
          keys: [{ key_id: "key-1", type: "ed25519", public_key: wrongKey, status: "active" }],
        }),
      );
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const addr = server.address();
    base = `https://localhost:${typeof addr === "object" && addr ? addr.port : 0}`;
  });
  afterAll(async () => {
    server?.closeAllConnections();
    await new Promise<void>((r) => (server ? server.close(() => r()) : r()));
  });

  it("bounds the lookups a flood of unknown senders causes, and remembers failures", async () => {
    const target = await runAgent({ self: identity("flooded-agent"), natsUrl: nats.url, tls, spec: {} });
    try {
      mode = "missing";
      fetches.length = 0;
      const statuses: number[] = [];
      const started = Date.now();
      for (let i = 0; i < 45; i++)
        statuses.push((await target.post(signed(identity(`${base}/u${i}`), "flooded-agent"))).status);
      // 30 new senders a minute per address are looked up (the 30 at once, then one more each 2 s
      // the flood took); the rest are told to wait.
      const looked = fetches.length;
      expect(looked).toBeGreaterThanOrEqual(30);
      expect(looked).toBeLessThanOrEqual(30 + Math.floor((Date.now() - started) / 2_000));
      expect(statuses.slice(0, 30).every((s) => s === 401)).toBe(true);
      expect(statuses.filter((s) => s === 429)).toHaveLength(45 - looked);
      expect(statuses.every((s) => s === 401 || s === 429)).toBe(true);
      // A sender whose lookup failed is answered from memory, without fetching again.
      const again = await target.post(signed(identity(`${base}/u0`), "flooded-agent"));
      expect(again.status).toBe(401);
      expect((await body(again)).message).toMatch(/not looked up again/);
      expect(fetches).toHaveLength(looked);
    } finally {
      await target.close();
    }
  });

  it("shares one fetch among concurrent messages of one sender, and holds two lookups at a time per address", async () => {
    const target = await runAgent({ self: identity("busy-agent"), natsUrl: nats.url, tls, spec: {} });
    try {
      mode = "slow";
      fetches.length = 0;
      const same = identity(`${base}/same`);
      const together = await Promise.all([1, 2, 3].map(() => target.post(signed(same, "busy-agent"))));
      expect(together.map((r) => r.status)).toEqual([401, 401, 401]);
      expect(fetches).toEqual(["/same/.well-known/agent/identity"]);

      fetches.length = 0;
      const many = await Promise.all(
        [1, 2, 3].map((i) => target.post(signed(identity(`${base}/busy${i}`), "busy-agent"))),
      );
      expect(many.map((r) => r.status).sort()).toEqual([401, 401, 429]);
      const throttled = many.find((r) => r.status === 429)!;
      expect(throttled.headers["retry-after"]).toBe("1");
      expect((await body(throttled)).message).toMatch(/in progress/);
      expect(fetches).toHaveLength(2);
    } finally {
      await target.close();
    }
  }, 30_000);

  it("refuses an oversized or endless identity document within the bounds, and a key that does not verify", async () => {
    const target = await runAgent({ self: identity("probed-agent"), natsUrl: nats.url, tls, spec: {} });
    try {
      mode = "huge";
      const big = identity(`${base}/huge`);
      hugeKey = big.publicKey;
      let r = await target.post(signed(big, "probed-agent"));
      expect(r.status).toBe(401);
      expect(await body(r)).toMatchObject({
        code: "unknown_sender",
        message: expect.stringMatching(/could not be obtained/),
      });

      // A document that never ends: the runtime gives up on it (its 5 s discovery timeout) and
      // closes the connection; the bound on the time is only a generous one for a loaded machine.
      mode = "slow";
      const started = Date.now();
      r = await target.post(signed(identity(`${base}/slow`), "probed-agent"));
      expect(r.status).toBe(401);
      expect((await body(r)).code).toBe("unknown_sender");
      expect(Date.now() - started).toBeLessThan(20_000);
      await waitFor(
        "the endless document's connection closed by the runtime",
        () => abandoned.includes("/slow/.well-known/agent/identity"),
        10_000,
      );

      mode = "wrong-key";
      r = await target.post(signed(identity(`${base}/liar`), "probed-agent"));
      expect(r.status).toBe(401);
      expect(await body(r)).toMatchObject({
        code: "invalid_signature",
        message: expect.stringMatching(/verification failed/),
      });
    } finally {
      await target.close();
    }
  }, 30_000);
});
