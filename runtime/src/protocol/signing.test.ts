import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { privateKeyFromPem, publicKeyFromRaw, rawPublicKey } from "./keys.ts";
import { Message } from "./message.ts";
import { headersToSign, signingInput, signMessage, verifySignature } from "./signing.ts";
import { checkProfile } from "./verify.ts";

const file = JSON.parse(readFileSync(new URL("../../vectors/signing.json", import.meta.url), "utf8"));
const privateKey = privateKeyFromPem(file.key.private_key_pkcs8_pem);
const publicKey = publicKeyFromRaw(file.key.public_key);

describe("signing profile test vectors", () => {
  it("the vector key is RFC 8032's test key 1", () => {
    expect(rawPublicKey(privateKey)).toBe(file.key.public_key);
    expect(Buffer.from(file.key.public_key, "base64url").toString("hex")).toBe(
      "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
    );
  });

  for (const v of file.vectors) {
    it(`${v.name}: ${v.valid ? "verifies" : "is refused"}`, () => {
      const msg = Message.parse(v.message);
      const sig = msg.security!.signatures![0]!;
      expect(verifySignature(msg, sig, publicKey)).toBe(v.valid);
      // Accepted by an inbox: valid, and covering every header the message carries.
      let profileOk = true;
      try {
        checkProfile(sig, "ed25519", msg.headers);
      } catch {
        profileOk = false;
      }
      expect(v.valid && profileOk).toBe(v.accepted);
      if (v.signing_input) {
        expect(signingInput(msg, sig.signed_headers, sig.signed_body).toString("utf8")).toBe(v.signing_input);
        // Ed25519 is deterministic: signing the same input again gives the published signature.
        const { security: _s, ...unsigned } = v.message;
        const again = signMessage(
          unsigned,
          { agentId: "pete-agent", keyId: "key-1", privateKey },
          {
            signedHeaders: sig.signed_headers,
            created: new Date(sig.created!),
          },
        );
        expect(again.security!.signatures![0]!.sig).toBe(sig.sig);
      }
    });
  }
});

describe("signingInput", () => {
  const msg = Message.parse(file.vectors[0].message);

  it("is JCS: sorted keys, no white space, ES number forms", () => {
    const input = signingInput(
      { headers: { ...msg.headers, sequence: 1.0 }, body: { text: "x", n: 1e21, f: 0.1 } as never },
      ["sequence"],
      true,
    ).toString();
    expect(input).toBe('{"body":{"f":0.1,"n":1e+21,"text":"x"},"headers":{"sequence":1}}');
  });

  it("puts null for a listed header the message lacks and for an unsigned body", () => {
    expect(signingInput(msg, ["nope"], false).toString()).toBe('{"body":null,"headers":{"nope":null}}');
  });

  it("a signature over a different header set does not verify", () => {
    const sig = { ...msg.security!.signatures![0]!, signed_headers: ["message_id", "date", "from", "to"] };
    expect(verifySignature(msg, sig, publicKey)).toBe(false);
  });

  it("refuses signatures of the wrong length or algorithm", () => {
    const sig = msg.security!.signatures![0]!;
    expect(verifySignature(msg, { ...sig, sig: sig.sig.slice(4) }, publicKey)).toBe(false);
    expect(verifySignature(msg, { ...sig, alg: "hmac-sha256" }, publicKey)).toBe(false);
  });
});

describe("keys", () => {
  it("refuses a public key that is not 32 bytes of base64url", () => {
    expect(() => publicKeyFromRaw("abc")).toThrow(/32 bytes/);
    expect(() => publicKeyFromRaw(`${file.key.public_key}=`)).toThrow(/32 bytes/);
  });

  it("makes a public key once per encoding, and still refuses a bad one after a good one", () => {
    const a = publicKeyFromRaw(file.key.public_key);
    expect(publicKeyFromRaw(file.key.public_key)).toBe(a);
    expect(rawPublicKey(a)).toBe(file.key.public_key);
    expect(() => publicKeyFromRaw(`${file.key.public_key}=`)).toThrow(/32 bytes/);
  });

  it("refuses a private key that is not Ed25519 PKCS#8 PEM", () => {
    expect(() => privateKeyFromPem("not a key")).toThrow(/PKCS#8 PEM/);
  });
});

describe("every header present is signed", () => {
  const msg = Message.parse(file.vectors[0].message);
  const { security: _s, ...rest } = msg;
  const base: Message = rest;

  it("signMessage covers each header the message carries, unknown ones included", () => {
    const m = {
      ...base,
      headers: {
        ...base.headers,
        disclosure: "personal",
        thread: { in_reply_to: "msg:x" },
        ttl_seconds: 60,
        capabilities: { request: ["a.b"] },
        subject: "s",
        x_future: 1,
      },
    };
    const sig = signMessage(m, { agentId: "pete-agent", keyId: "key-1", privateKey }).security!.signatures![0]!;
    expect([...sig.signed_headers].sort()).toEqual(Object.keys(m.headers).sort());
    expect(headersToSign(m.headers).slice(0, 4)).toEqual(["message_id", "date", "from", "to"]);
    expect(() => checkProfile(sig, "ed25519", m.headers)).not.toThrow();
  });

  it("a header added after signing is refused by the profile, though the signature still verifies", () => {
    const signed = signMessage(base, { agentId: "pete-agent", keyId: "key-1", privateKey });
    const tampered = { ...signed, headers: { ...signed.headers, disclosure: "intimate" } };
    const sig = tampered.security!.signatures![0]!;
    expect(verifySignature(tampered, sig, publicKey)).toBe(true);
    expect(() => checkProfile(sig, "ed25519", tampered.headers)).toThrow(/not signed: disclosure/);
  });
});
