import { createPrivateKey, createPublicKey, diffieHellman } from "node:crypto";
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import {
  decryptMessage,
  EncryptionError,
  encryptMessage,
  encryptionKeyFromPem,
  encryptionKeyId,
  generateEncryptionKey,
  SCHEME,
  type EncryptionKey,
} from "./encryption.ts";
import { Message } from "./message.ts";

const vectors = JSON.parse(readFileSync(new URL("../../vectors/encryption.json", import.meta.url), "utf8"));
const bytes = (s: string) => new Uint8Array(Buffer.from(s, "base64url"));
const keyOf = (agent: string): EncryptionKey => {
  const k = vectors.keys[agent];
  return { keyId: k.key_id, privateKey: bytes(k.private_key), publicKey: k.public_key };
};
const encrypted = (v: any) => ({
  headers: structuredClone(v.input.message.headers),
  body: structuredClone(v.output.body),
  security: structuredClone(v.output.security),
});
const flip = (s: string, at: number) => {
  const i = at < 0 ? s.length + at : at;
  return s.slice(0, i) + (s[i] === "A" ? "B" : "A") + s.slice(i + 1);
};

describe("the encryption scheme's vectors (runtime/vectors/encryption.json)", () => {
  it("names this scheme", () => expect(vectors.scheme).toBe(SCHEME));

  for (const v of vectors.vectors) {
    it(`encrypts exactly: ${v.name}`, () => {
      const out = encryptMessage(
        v.input.message,
        v.input.recipients.map((r: any) => ({ agent: r.agent, keyId: r.key_id, publicKey: r.public_key })),
        {
          contentKey: bytes(v.input.content_key),
          nonce: bytes(v.input.nonce),
          ephemeral: v.input.recipients.map((r: any) => bytes(r.ephemeral_private_key)),
        },
      );
      expect(out.body).toEqual(v.output.body);
      expect(out.security).toEqual(v.output.security);
      expect(out.headers).toEqual(v.input.message.headers);
    });

    it(`decrypts for every recipient: ${v.name}`, () => {
      for (const r of v.input.recipients) {
        expect(decryptMessage(encrypted(v), r.agent, [keyOf(r.agent)]).body).toEqual(v.input.message.body);
      }
    });

    it(`the shared secrets agree with Node's own X25519: ${v.name}`, () => {
      for (const [i, r] of v.intermediate.recipients.entries()) {
        const recipient = vectors.keys[r.agent];
        const priv = createPrivateKey({
          key: { kty: "OKP", crv: "X25519", d: recipient.private_key, x: recipient.public_key },
          format: "jwk",
        });
        const epk = v.output.security.encryption.recipients[i].epk;
        const pub = createPublicKey({ key: { kty: "OKP", crv: "X25519", x: epk }, format: "jwk" });
        expect(diffieHellman({ privateKey: priv, publicKey: pub }).toString("base64url")).toBe(r.shared_secret);
      }
    });
  }

  const invalid: Record<string, (m: any) => void> = {
    "ciphertext altered (last byte)": (m) => (m.body.ciphertext = flip(m.body.ciphertext, -2)),
    "wrapped key altered": (m) =>
      (m.security.encryption.recipients[0].wrapped_key = flip(m.security.encryption.recipients[0].wrapped_key, 0)),
    "another recipient's wrapped key altered": (m) =>
      (m.security.encryption.recipients[1].wrapped_key = flip(m.security.encryption.recipients[1].wrapped_key, 0)),
    "message_id changed": (m) => (m.headers.message_id = "msg:vector-x"),
    "sender changed": (m) => (m.headers.from.agent = "mallory-agent"),
    "a recipient removed": (m) =>
      (m.security.encryption.recipients = m.security.encryption.recipients.filter((r: any) => r.agent !== "bob-agent")),
  };
  for (const c of vectors.invalid) {
    it(`refuses: ${c.name}`, () => {
      const m = encrypted(vectors.vectors[c.vector]);
      const agent = c.recipient ?? vectors.vectors[c.vector].input.recipients[0].agent;
      expect(decryptMessage(m, agent, [keyOf(agent)]).body).toBeDefined(); // untouched, it decrypts
      invalid[c.name]!(m);
      expect(() => decryptMessage(m, agent, [keyOf(agent)])).toThrow(EncryptionError);
    });
  }
});

describe("encryptMessage / decryptMessage", () => {
  const msg: { headers: any; body: any; security?: any } = {
    headers: {
      message_id: "msg:1",
      date: "2026-03-04T23:58:12Z",
      from: { agent: "pete-agent" },
      to: [{ agent: "alice-agent" }],
      conversation_id: "c",
      sequence: 1,
      phase: "context",
    },
    body: { text: "secret" },
  };

  it("reads a PKCS#8 key to the public half the vectors give, its id derived from it", () => {
    for (const k of Object.values(vectors.keys) as { private_key: string; public_key: string; key_id: string }[]) {
      const der = Buffer.concat([
        Buffer.from("302e020100300506032b656e04220420", "hex"),
        Buffer.from(k.private_key, "base64url"),
      ]);
      const read = encryptionKeyFromPem(
        `-----BEGIN PRIVATE KEY-----\n${der.toString("base64")}\n-----END PRIVATE KEY-----\n`,
      );
      expect(read.publicKey).toBe(k.public_key);
      expect(read.keyId).toBe(encryptionKeyId(k.public_key));
      expect(Buffer.from(read.privateKey).toString("base64url")).toBe(k.private_key);
    }
  });

  it("round-trips with generated keys, and the output is a valid message", () => {
    const k = encryptionKeyFromPem(generateEncryptionKey().privateKeyPem);
    const out = encryptMessage(msg, [{ agent: "alice-agent", keyId: k.keyId, publicKey: k.publicKey }]);
    expect(JSON.stringify(out)).not.toContain("secret");
    expect(Message.safeParse({ ifp: 4, ...out }).success).toBe(true);
    expect(decryptMessage(out, "alice-agent", [k]).body).toEqual({ text: "secret" });
  });

  it("says why it cannot decrypt: not a recipient, a key it does not hold, another scheme", () => {
    const k = encryptionKeyFromPem(generateEncryptionKey().privateKeyPem);
    const other = encryptionKeyFromPem(generateEncryptionKey().privateKeyPem);
    const out = encryptMessage(msg, [{ agent: "alice-agent", keyId: k.keyId, publicKey: k.publicKey }]);
    expect(() => decryptMessage(out, "bob-agent", [k])).toThrow(/not encrypted for bob-agent/);
    expect(() => decryptMessage(out, "alice-agent", [other])).toThrow(/does not hold/);
    // The right key id but another key: the wrap does not authenticate.
    expect(() => decryptMessage(out, "alice-agent", [{ ...other, keyId: k.keyId }])).toThrow(/does not authenticate/);
    const sealed = { ...out, security: { encryption: { ...out.security!.encryption!, scheme: "sealed_box" } } };
    expect(() => decryptMessage(sealed, "alice-agent", [k])).toThrow(/not supported/);
    const junk = {
      ...out,
      security: {
        encryption: {
          scheme: SCHEME,
          recipients: [{ agent: "alice-agent", key_id: k.keyId, epk: "x", wrapped_key: 5 }],
        },
      },
    };
    expect(() => decryptMessage(junk as never, "alice-agent", [k])).toThrow(/not valid/);
  });

  it("refuses a low-order recipient key (all-zero shared secret)", () => {
    expect(() =>
      encryptMessage(msg, [{ agent: "alice-agent", keyId: "k", publicKey: Buffer.alloc(32).toString("base64url") }]),
    ).toThrow();
  });

  it("refuses an encryption key of another type", () => {
    expect(() =>
      encryptionKeyFromPem(
        "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIJ1hsZ3v/VpguoRK9JLsLMREScVpezJpGXA7rAMcrn9g\n-----END PRIVATE KEY-----\n",
      ),
    ).toThrow(/X25519/);
  });
});

describe("the message schema and the ciphertext body", () => {
  const headers = {
    message_id: "m",
    date: "2026-03-04T23:58:12Z",
    from: { agent: "a" },
    to: [{ agent: "b" }],
    conversation_id: "c",
    sequence: 1,
    phase: "context",
  };
  it("accepts {ciphertext} only together with security.encryption", () => {
    expect(Message.safeParse({ ifp: 4, headers, body: { ciphertext: "abc" } }).success).toBe(false);
    expect(
      Message.safeParse({
        ifp: 4,
        headers,
        body: { ciphertext: "abc" },
        security: { encryption: { scheme: SCHEME, recipients: [] } },
      }).success,
    ).toBe(true);
  });
  it("refuses a clear body, or a ciphertext with anything beside it, next to security.encryption", () => {
    const security = { encryption: { scheme: SCHEME } };
    expect(Message.safeParse({ ifp: 4, headers, body: { text: "hi" }, security }).success).toBe(false);
    expect(Message.safeParse({ ifp: 4, headers, body: { ciphertext: "abc", text: "hi" }, security }).success).toBe(
      false,
    );
    expect(Message.safeParse({ ifp: 4, headers, body: { ciphertext: 5 }, security }).success).toBe(false);
    expect(Message.safeParse({ ifp: 4, headers, body: { text: "hi" } }).success).toBe(true);
  });
});
