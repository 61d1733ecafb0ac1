// Signing key rotation end to end: the key sets the operator writes into an Agent's signing
// Secret (planSigningKeys), mounted as files the way the kubelet mounts the Secret, read by real
// runtimes that sign, publish and verify. During the transition no message is refused (the
// runtime signs with the new and the retired key); after it the revoked key is refused with the
// reason. Real nats-server, real runtimes, real HTTPS.
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { freePort } from "../../../../e2e/support/ports.ts";
import type { NatsServer } from "../../../../e2e/support/nats.ts";
import { loadKeyring } from "../../../../runtime/src/agent/keyring.ts";
import { generateSigningKey, privateKeyFromPem } from "../../../../runtime/src/protocol/keys.ts";
import { encryptMessage, generateEncryptionKey } from "../../../../runtime/src/protocol/encryption.ts";
import { signMessage } from "../../../../runtime/src/protocol/signing.ts";
import { AgentSpec } from "../../../../runtime/src/resources/agent.ts";
import { message, peerOf, tempDir, identity } from "../../../../runtime/test/support/fixtures.ts";
import { runAgent, type Tls, withNatsAndTls } from "../../../../runtime/test/support/agent-harness.ts";
import { planSigningKeys } from "../../../src/kinds/agent/signing.ts";

let nats: NatsServer;
let tls: Tls;
withNatsAndTls((n, t) => ([nats, tls] = [n, t]));

type Data = Record<string, string>;
const signingSpec = (s: object = {}) => AgentSpec.parse({ agentId: "x", ...{ signing: s } }).signing;

/** The Secret's data as the kubelet mounts it: one file per key, nothing else. */
function mount(dir: string, data: Data): string {
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  for (const [k, v] of Object.entries(data)) writeFileSync(join(dir, k), Buffer.from(v, "base64"), { mode: 0o600 });
  return join(dir, "signing.key");
}

const body = (r: { text: string }) => JSON.parse(r.text) as { code: string; message: string };

describe("signing key rotation", () => {
  const t0 = new Date();
  let port: number;
  let agentId: string;
  let data: Data;
  let firstPem = "";
  const keyDir = join(tempDir(), "signing");
  let sender: Awaited<ReturnType<typeof runAgent>> | undefined;
  const others: Awaited<ReturnType<typeof runAgent>>[] = [];

  beforeAll(async () => {
    port = await freePort();
    agentId = `https://localhost:${port}`;
    const first = generateSigningKey();
    data = { "signing.key": Buffer.from(first.privateKeyPem).toString("base64"), "encryption.key": "b3RoZXI=" };
    // Without a rotation the Secret is not written.
    expect(planSigningKeys(data, signingSpec(), "2026-01-01T00:00:00Z", t0).data).toBeUndefined();
    firstPem = first.privateKeyPem;
    expect(data["encryption.key"]).toBe("b3RoZXI=");
  });
  afterAll(async () => {
    await Promise.all([sender?.close(), ...others.map((o) => o.close())]);
  });

  async function startSender() {
    await sender?.close();
    sender = await runAgent({
      self: identity(agentId),
      natsUrl: nats.url,
      tls,
      port,
      signingKeyFile: mount(keyDir, data),
      spec: {},
    });
  }
  async function receiver(peers: object[] = []) {
    const self = identity(`receiver-${others.length}`);
    const r = await runAgent({ self, natsUrl: nats.url, tls, spec: { peers: peers as never } });
    others.push(r);
    return Object.assign(r, { agentId: self.agentId });
  }
  /** A message as the sender's runtime signs it, from the files it reads. */
  async function fromSender(to: string) {
    const keys = await loadKeyring(join(keyDir, "signing.key"), agentId, "key-1");
    return signMessage(message(agentId, to), keys.signing);
  }

  it("refuses no message during the transition, and the revoked key after it", async () => {
    await startSender();
    const oldKey = planSigningKeys(data, signingSpec(), "", t0).set.keys[0]!;
    // One receiver was given the old key by its humans; the other looked it up and cached the document.
    const knowsOld = await receiver([{ agentId, keys: [{ keyId: oldKey.keyId, publicKey: oldKey.publicKey }] }]);
    const cached = await receiver();
    for (const r of [knowsOld, cached]) expect((await r.post(await fromSender(r.agentId))).status).toBe(202);

    // Rotation requested: a new active key, the old one retired and still signing.
    const rotated = planSigningKeys(
      data,
      signingSpec({ rotate: "2026-11", transition: "1h" }),
      "",
      new Date(t0.getTime() + 1000),
    );
    data = rotated.data!;
    expect(rotated.set.keys.map((k) => [k.keyId, k.status])).toEqual([
      ["key-1", "retired"],
      ["key-1-r2", "active"],
    ]);
    expect(data["retired-1.key"]).toBeDefined();
    expect(data["encryption.key"]).toBe("b3RoZXI=");
    await startSender();
    const doc = JSON.parse((await sender!.get("/.well-known/agent/identity")).text);
    expect(doc.keys.map((k: any) => [k.key_id, k.status])).toEqual([
      ["key-1", "retired"],
      ["key-1-r2", "active"],
    ]);
    expect(doc.keys[0].retired_date).toBeDefined();
    const during = await fromSender("x");
    expect(during.security!.signatures!.map((s) => s.key_id)).toEqual([`${agentId}#key-1-r2`, `${agentId}#key-1`]);
    const newcomer = await receiver();
    for (const r of [knowsOld, cached, newcomer]) {
      const res = await r.post(await fromSender(r.agentId));
      expect(res.status, res.text).toBe(202);
    }
    // The same request again changes nothing.
    expect(
      planSigningKeys(data, signingSpec({ rotate: "2026-11", transition: "1h" }), "", new Date(t0.getTime() + 2000))
        .data,
    ).toBeUndefined();

    // The transition ends: the old key is revoked, its private half gone.
    const after = planSigningKeys(
      data,
      signingSpec({ rotate: "2026-11", transition: "1h" }),
      "",
      new Date(t0.getTime() + 2 * 3600_000),
    );
    data = after.data!;
    expect(after.set.keys.map((k) => [k.keyId, k.status])).toEqual([
      ["key-1", "revoked"],
      ["key-1-r2", "active"],
    ]);
    expect(data["retired-1.key"]).toBeUndefined();
    await startSender();
    const only = await fromSender("x");
    expect(only.security!.signatures!.map((s) => s.key_id)).toEqual([`${agentId}#key-1-r2`]);
    // Whoever still holds the old key cannot sign with it any more.
    const fresh = await receiver();
    const withOld = (to: string) =>
      signMessage(message(agentId, to), { agentId, keyId: "key-1", privateKey: privateKeyFromPem(firstPem) });
    const refused = await fresh.post(withOld(fresh.agentId));
    expect(refused.status).toBe(401);
    expect(body(refused).message).toMatch(/key-1 has been revoked/);
    // A peer whose directory entry now lists the key as revoked refuses it too, and takes the new one.
    const directory = await receiver([
      { agentId, keys: after.set.keys.map((k) => ({ keyId: k.keyId, publicKey: k.publicKey, status: k.status })) },
    ]);
    const refused2 = await directory.post(withOld(directory.agentId));
    expect(refused2.status).toBe(401);
    expect(body(refused2).message).toMatch(/has been revoked/);
    const ok = await directory.post(await fromSender(directory.agentId));
    expect(ok.status, ok.text).toBe(202);
  });
});

describe("encryption key rotation", () => {
  it("decrypts messages for the retired key during the transition, publishes both, and refuses the revoked key after it", async () => {
    const peer = identity("encrypting-peer");
    const self = identity("rotating-recipient");
    const first = generateEncryptionKey();
    let data: Data = {
      "signing.key": Buffer.from(self.privateKeyPem).toString("base64"),
      "encryption.key": Buffer.from(first.privateKeyPem).toString("base64"),
    };
    const dir = join(tempDir(), "signing");
    let running: Awaited<ReturnType<typeof runAgent>> | undefined;
    /** The recipient's runtime on the Secret as mounted now. */
    const start = async () => {
      await running?.close();
      const keyFile = mount(dir, data);
      running = await runAgent({
        self,
        natsUrl: nats.url,
        tls,
        dir: join(dir, ".."),
        signingKeyFile: keyFile,
        encryptionKey: Buffer.from(data["encryption.key"]!, "base64").toString(),
        spec: { peers: [peerOf(peer)] },
      });
      return running;
    };
    /** A message from the peer, encrypted for one of the recipient's keys and signed over the ciphertext. */
    const encryptedFor = (key: { keyId: string; publicKey: string }) =>
      signMessage(
        encryptMessage(message(peer.agentId, self.agentId, {}, "for your eyes only"), [
          { agent: self.agentId, keyId: key.keyId, publicKey: key.publicKey },
        ]),
        peer.signing,
      );
    const encryptionKeys = async () =>
      JSON.parse((await running!.get("/.well-known/agent/identity")).text)
        .keys.filter((k: { use?: string }) => k.use === "encryption")
        .map((k: { key_id: string; status: string }) => [k.key_id, k.status]);
    try {
      await start();
      expect(await encryptionKeys()).toEqual([[first.keyId, "active"]]);
      // Encrypted before the rotation, delivered after it (a relay held it, say).
      const held = encryptedFor(first);

      const rotated = planSigningKeys(data, signingSpec({ rotate: "enc-1", transition: "1h" }), "", new Date());
      data = rotated.data!;
      const next = rotated.set.encryption!.find((k) => k.status === "active")!;
      await start();
      expect(await encryptionKeys()).toEqual([
        [first.keyId, "retired"],
        [next.keyId, "active"],
      ]);
      const during = await running!.post(held);
      expect(during.status, during.text).toBe(202);
      expect((await running!.post(encryptedFor(next))).status).toBe(202);

      // The transition ends: the old key is revoked, and a message still encrypted for it is refused, saying so.
      data = planSigningKeys(
        data,
        signingSpec({ rotate: "enc-1", transition: "1h" }),
        "",
        new Date(Date.now() + 2 * 3600_000),
      ).data!;
      expect(data["retired-encryption-1.key"]).toBeUndefined();
      await start();
      expect(await encryptionKeys()).toEqual([
        [first.keyId, "revoked"],
        [next.keyId, "active"],
      ]);
      const late = await running!.post(encryptedFor(first));
      expect(late.status).toBe(400);
      expect(body(late)).toMatchObject({
        code: "decryption_failed",
        message: expect.stringMatching(new RegExp(`key ${first.keyId}, which is revoked`)),
      });
      expect((await running!.post(encryptedFor(next))).status).toBe(202);
    } finally {
      await running?.close();
    }
  });
});
