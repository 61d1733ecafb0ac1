import { createPrivateKey, createPublicKey, sign as edSign, verify as edVerify } from "node:crypto";
import { httpbis } from "http-message-signatures";
import { parseDictionary, serializeInnerList, type InnerList } from "structured-headers";
import { describe, expect, it } from "vitest";
import { identity } from "../../test/support/fixtures.ts";
import { ProtocolError } from "./errors.ts";
import {
  contentDigest,
  digestMatches,
  SignatureNonces,
  signatureBase,
  signRequest,
  verifyRequest,
} from "./http-signatures.ts";
import { publicKeyFromRaw } from "./keys.ts";

const pete = identity("pete-agent");
const keyFor = (agentId: string, keyId: string) => {
  if (agentId !== "pete-agent") throw new ProtocolError(401, "unknown_sender", `unknown ${agentId}`);
  if (keyId !== "key-1") throw new ProtocolError(401, "invalid_signature", `unknown key ${agentId}#${keyId}`);
  return publicKeyFromRaw(pete.publicKey);
};

async function signed(method: string, url: string, body?: string, created?: Date) {
  const headers = await signRequest(
    { method, url, body, headers: body ? { "content-type": "application/json" } : {} },
    pete.signing,
    created,
  );
  return { method, url, headers, body: body === undefined ? undefined : Buffer.from(body) };
}

async function reason(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (err) {
    return `${(err as ProtocolError).statusCode} ${(err as ProtocolError).code}: ${(err as Error).message}`;
  }
  return "accepted";
}

const inputOf = (field: string, label: string) => parseDictionary(field).get(label) as InnerList;

// RFC 9421 appendix B.1.4 (test-key-ed25519) and B.2 (the test request).
const RFC_ED25519_PRIVATE =
  "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIJ+DYvh6SEqVTm50DFtMDoQikTmiCqirVv9mWG9qfSnF\n-----END PRIVATE KEY-----\n";
const RFC_ED25519_PUBLIC =
  "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAJrQLj5P/89iXES9+vFgrIy29clF9CC/oPPsw3c5D0bs=\n-----END PUBLIC KEY-----\n";
const RFC_REQUEST = {
  method: "POST",
  url: "https://example.com/foo?param=Value&Pet=dog",
  headers: {
    host: "example.com",
    date: "Tue, 20 Apr 2021 02:07:55 GMT",
    "content-type": "application/json",
    "content-digest":
      "sha-512=:WZDPaVn/7XgHaAy8pmojAkGWoRx2UFChF41A2svX+TaPm+AbwAgBWnrIiYllu7BNNyealdVLvRwEmTHWXvJwew==:",
    "content-length": "18",
  },
};

describe("RFC 9421 and RFC 9530 example vectors", () => {
  it("B.2.6: the ed25519 signature base and signature of the test request", () => {
    const input = inputOf(
      'sig-b26=("date" "@method" "@path" "@authority" "content-type" "content-length");created=1618884473;keyid="test-key-ed25519"',
      "sig-b26",
    );
    const base = signatureBase(RFC_REQUEST, input);
    expect(base).toBe(
      [
        '"date": Tue, 20 Apr 2021 02:07:55 GMT',
        '"@method": POST',
        '"@path": /foo',
        '"@authority": example.com',
        '"content-type": application/json',
        '"content-length": 18',
        '"@signature-params": ("date" "@method" "@path" "@authority" "content-type" "content-length");created=1618884473;keyid="test-key-ed25519"',
      ].join("\n"),
    );
    const rfcSignature = "wqcAqbmYJ2ji2glfAMaRy4gruYYnx2nEFN2HN6jrnDnQCK1u02Gb04v9EDgwUPiu4A0w6vuQv5lIp5WPpBKRCw==";
    // Ed25519 is deterministic: the test key reproduces the RFC's signature byte for byte.
    expect(edSign(null, Buffer.from(base), createPrivateKey(RFC_ED25519_PRIVATE)).toString("base64")).toBe(
      rfcSignature,
    );
    expect(
      edVerify(null, Buffer.from(base), createPublicKey(RFC_ED25519_PUBLIC), Buffer.from(rfcSignature, "base64")),
    ).toBe(true);
  });

  it("2.2.6 and 2.2.7: @path and @query, with a lone ? for an absent query", () => {
    const input = inputOf('sig1=("@method" "@path" "@query");created=1618884473', "sig1");
    expect(
      signatureBase(
        { method: "post", url: "https://www.example.com/path?param=value&foo=bar&baz=batman", headers: {} },
        input,
      )
        .split("\n")
        .slice(0, 3),
    ).toEqual(['"@method": POST', '"@path": /path', '"@query": ?param=value&foo=bar&baz=batman']);
    expect(
      signatureBase({ method: "GET", url: "https://www.example.com/path", headers: {} }, input).split("\n")[2],
    ).toBe('"@query": ?');
  });

  it("builds the base of this profile's components exactly as the library does", () => {
    const library = (req: { method: string; url: string; headers: Record<string, string | string[]> }, i: InnerList) =>
      [
        httpbis.formatSignatureBase(
          httpbis.createSignatureBase(
            { fields: i[0].map(([name]) => `"${name as string}"`) },
            { ...req, method: req.method.toUpperCase() },
          ),
        ),
        `"@signature-params": ${serializeInnerList(i)}`,
      ].join("\n");
    const components = '("@method" "@authority" "@path" "@query" "content-digest" "x-multi")';
    const input = inputOf(`sig1=${components};created=1;expires=61;keyid="a#k";alg="ed25519"`, "sig1");
    const headers = { "content-digest": "  sha-256=:AAAA:  ", "x-multi": ["one", " two\n  lines "] };
    for (const [method, url] of [
      ["post", "https://Relay.Example:8443/relay/publish?recipient=a%20b&x=%C3%A9"],
      ["DELETE", "https://relay.example:443/relay/messages/m%2F1"],
      ["GET", "http://relay.example:80/"],
      ["GET", "http://relay.example:8080"],
      ["GET", "wss://relay.example:9443/relay/ws?push=off"],
      ["GET", "https://[::1]:8443/relay/messages?"],
      ["GET", "https://relay.example/a/../b/./c?q=1#fragment"],
    ] as const) {
      const req = { method, url, headers };
      expect(signatureBase(req, input), url).toBe(library(req, input));
    }
    // A component the profile does not derive itself is left to the library, which refuses a missing field.
    const other = inputOf('sig1=("@target-uri" "@scheme");created=1', "sig1");
    const req = { method: "GET", url: "https://relay.example/x?y", headers: {} };
    expect(signatureBase(req, other)).toBe(library(req, other));
    expect(() => signatureBase(req, inputOf('sig1=("absent-field");created=1', "sig1"))).toThrow(/No header/);
  });

  it('RFC 9530 section 2: sha-256 Content-Digest of {"hello": "world"}', () => {
    expect(contentDigest('{"hello": "world"}')).toBe("sha-256=:X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=:");
    // A field with several algorithms is accepted when its sha-256 member matches.
    expect(
      digestMatches(
        `${RFC_REQUEST.headers["content-digest"]}, ${contentDigest('{"hello": "world"}')}`,
        Buffer.from('{"hello": "world"}'),
      ),
    ).toBe(true);
    expect(digestMatches(RFC_REQUEST.headers["content-digest"], Buffer.from('{"hello": "world"}'))).toBe(false);
    expect(digestMatches("sha-256=not-a-byte-sequence", Buffer.from("x"))).toBe(false);
  });
});

describe("the relay's request-signature profile", () => {
  it("signs with label sig1 over method, authority, path, query and content-digest", async () => {
    const r = await signed("POST", "https://relay.example/relay/publish", "{}");
    expect(r.headers["signature-input"]).toMatch(
      /^sig1=\("@method" "@authority" "@path" "@query" "content-digest"\);created=(\d+);expires=\d+;nonce="[A-Za-z0-9_-]{22}";keyid="pete-agent#key-1";alg="ed25519"$/,
    );
    const [, created, expires] = /created=(\d+);expires=(\d+)/.exec(r.headers["signature-input"]!)!;
    expect(Number(expires) - Number(created)).toBe(60);
    expect(r.headers.signature).toMatch(/^sig1=:[A-Za-z0-9+/]+=*:$/);
    expect(r.headers["content-digest"]).toBe(contentDigest("{}"));
    expect(await verifyRequest(r, keyFor)).toEqual({ agentId: "pete-agent", keyId: "key-1" });
  });

  it("writes exactly what the http-message-signatures library writes, and the library verifies it", async () => {
    const created = new Date(1_700_000_000_500);
    for (const [method, url, body] of [
      ["POST", "https://relay.example:8443/relay/publish?recipient=a%20b", '{"x":"é"}'],
      ["DELETE", "https://relay.example/relay/messages/m-1", undefined],
      ["GET", "https://relay.example/relay/messages?limit=5&after=7", undefined],
    ] as const) {
      const extra = { Accept: "application/json", ...(body ? { "Content-Type": "application/json" } : {}) };
      const ours = await signRequest({ method, url, body, headers: extra }, pete.signing, created, "n0nce-of-the-test");
      const lower = Object.fromEntries(Object.entries(extra).map(([k, v]) => [k.toLowerCase(), v]));
      const fields = ["@method", "@authority", "@path", "@query", ...(body ? ["content-digest"] : [])];
      const theirs = await httpbis.signMessage(
        {
          key: {
            id: "pete-agent#key-1",
            alg: "ed25519",
            sign: async (data: Buffer) => edSign(null, data, pete.signing.privateKey),
          },
          name: "sig1",
          fields,
          params: ["created", "expires", "nonce", "keyid", "alg"],
          paramValues: { created, expires: new Date(created.getTime() + 60_000), nonce: "n0nce-of-the-test" },
        },
        { method, url, headers: { ...lower, ...(body ? { "content-digest": contentDigest(body) } : {}) } },
      );
      expect(ours).toEqual(Object.fromEntries(Object.entries(theirs.headers).map(([k, v]) => [k.toLowerCase(), v])));
      const verified = await httpbis.verifyMessage(
        {
          keyLookup: async () => ({
            id: "pete-agent#key-1",
            algs: ["ed25519"],
            verify: async (data: Buffer, sig: Buffer) => edVerify(null, data, publicKeyFromRaw(pete.publicKey), sig),
          }),
        },
        { method, url, headers: await signRequest({ method, url, body, headers: extra }, pete.signing) },
      );
      expect(verified).toBe(true);
    }
  });
  it("covers the query", async () => {
    const r = await signed("GET", "https://relay.example/relay/messages?limit=5");
    expect(
      await reason(verifyRequest({ ...r, url: "https://relay.example/relay/messages?limit=500" }, keyFor)),
    ).toMatch(/^401 invalid_signature: the request signature does not verify/);
    expect(await reason(verifyRequest({ ...r, url: "https://relay.example/relay/messages" }, keyFor))).toMatch(
      /does not verify/,
    );
    expect(await verifyRequest(r, keyFor)).toMatchObject({ agentId: "pete-agent" });
  });

  it("refuses a changed body, method or path", async () => {
    const r = await signed("POST", "https://relay.example/relay/publish", '{"a":1}');
    expect(await reason(verifyRequest({ ...r, body: Buffer.from('{"a":2}') }, keyFor))).toMatch(
      /Content-Digest does not match/,
    );
    const redigested = {
      ...r,
      body: Buffer.from('{"a":2}'),
      headers: { ...r.headers, "content-digest": contentDigest('{"a":2}') },
    };
    expect(await reason(verifyRequest(redigested, keyFor))).toMatch(/does not verify/);
    expect(await reason(verifyRequest({ ...r, method: "PUT" }, keyFor))).toMatch(/does not verify/);
    expect(await reason(verifyRequest({ ...r, url: "https://relay.example/relay/subscribe" }, keyFor))).toMatch(
      /does not verify/,
    );
  });

  it("binds the request to the authority it was signed for", async () => {
    const r = await signed("GET", "https://relay-a.example/relay/messages?limit=100");
    expect(await verifyRequest(r, keyFor)).toMatchObject({ agentId: "pete-agent" });
    expect(
      await reason(verifyRequest({ ...r, url: "https://relay-b.example/relay/messages?limit=100" }, keyFor)),
    ).toMatch(/does not verify/);
    expect(
      await reason(verifyRequest({ ...r, url: "https://relay-a.example:8443/relay/messages?limit=100" }, keyFor)),
    ).toMatch(/does not verify/);
  });

  it("accepts a signature for its 60 s of life and 5 minutes of clock skew either way (as the inbox does), and nothing beyond", async () => {
    const now = Date.now();
    const at = (offsetS: number) =>
      signed("GET", "https://relay.example/relay/messages", undefined, new Date(now + offsetS * 1000));
    expect(await reason(verifyRequest(await at(-59), keyFor, now))).toBe("accepted");
    // A signer whose clock is 4 minutes behind: its signature expired by its own clock's minute, within the skew.
    expect(await reason(verifyRequest(await at(-240), keyFor, now))).toBe("accepted");
    expect(await reason(verifyRequest(await at(-362), keyFor, now))).toMatch(
      /^401 invalid_signature: the request signature (has expired|is older than)/,
    );
    expect(await reason(verifyRequest(await at(4), keyFor, now))).toBe("accepted");
    expect(await reason(verifyRequest(await at(240), keyFor, now))).toBe("accepted");
    expect(await reason(verifyRequest(await at(330), keyFor, now))).toMatch(/created in the future/);
  });

  it("refuses unknown agents and keys with 401", async () => {
    const stranger = identity("stranger");
    const h = await signRequest({ method: "GET", url: "https://relay.example/relay/messages" }, stranger.signing);
    expect(
      await reason(verifyRequest({ method: "GET", url: "https://relay.example/relay/messages", headers: h }, keyFor)),
    ).toMatch(/^401 unknown_sender/);
    const otherKey = identity("pete-agent", "key-2");
    const h2 = await signRequest({ method: "GET", url: "https://relay.example/relay/messages" }, otherKey.signing);
    expect(
      await reason(verifyRequest({ method: "GET", url: "https://relay.example/relay/messages", headers: h2 }, keyFor)),
    ).toMatch(/^401 invalid_signature: unknown key/);
  });

  it("refuses a signature made by another key for the claimed keyid", async () => {
    const mallory = identity("pete-agent");
    const h = await signRequest({ method: "GET", url: "https://relay.example/relay/messages" }, mallory.signing);
    expect(
      await reason(verifyRequest({ method: "GET", url: "https://relay.example/relay/messages", headers: h }, keyFor)),
    ).toMatch(/does not verify/);
  });

  it("refuses missing headers, a missing digest and incomplete coverage", async () => {
    expect(await reason(verifyRequest({ method: "GET", url: "https://relay.example/x", headers: {} }, keyFor))).toMatch(
      /not signed/,
    );
    const noDigest = await signed("POST", "https://relay.example/relay/publish", "{}");
    delete (noDigest.headers as Record<string, string>)["content-digest"];
    expect(await reason(verifyRequest(noDigest, keyFor))).toMatch(/needs a Content-Digest/);
    // Signed without a body, sent with one: content-digest is not covered.
    const bare = await signed("POST", "https://relay.example/relay/publish");
    expect(
      await reason(
        verifyRequest(
          { ...bare, body: Buffer.from("{}"), headers: { ...bare.headers, "content-digest": contentDigest("{}") } },
          keyFor,
        ),
      ),
    ).toMatch(/must cover .*missing content-digest/);
    const r = await signed("GET", "https://relay.example/relay/messages");
    const input = r.headers["signature-input"]!;
    const variants: [string, RegExp][] = [
      [input.replace(' "@query"', ""), /missing @query/],
      [input.replace(' "@authority"', ""), /missing @authority/],
      [input.replace(/;expires=\d+/, ""), /expires parameter/],
      [input.replace(/;expires=\d+/, (e) => `;expires=${Number(e.slice(9)) + 240}`), /at most 60 s later/],
      [input.replace(';alg="ed25519"', ""), /alg="ed25519"/],
      [input.replace('alg="ed25519"', 'alg="rsa-pss-sha512"'), /alg="ed25519"/],
      [input.replace(/;created=\d+/, ""), /created parameter/],
      [input.replace('keyid="pete-agent#key-1"', 'keyid="pete-agent"'), /keyid="<agent_id>#<keyId>"/],
      [input.replace('"@path"', '"@path";req'), /must not carry parameters/],
      [input.replace('"@query"', '"@query" "@method"'), /appears twice/],
      [input.replace(/;expires=\d+/, (e) => `;expires=${Number(e.slice(9)) - 60}`), /must be after created/],
      ["sig1=(", /not a structured-field dictionary/],
    ];
    for (const [bad, why] of variants) {
      expect(
        await reason(verifyRequest({ ...r, headers: { ...r.headers, "signature-input": bad } }, keyFor)),
        bad,
      ).toMatch(why);
    }
  });

  it("checks the signature labelled sig1 and no other", async () => {
    const r = await signed("GET", "https://relay.example/relay/messages");
    const relabel = (v: string) => v.replace(/^sig1=/, "other=");
    expect(
      await reason(
        verifyRequest(
          {
            ...r,
            headers: {
              ...r.headers,
              "signature-input": relabel(r.headers["signature-input"]!),
              signature: relabel(r.headers.signature!),
            },
          },
          keyFor,
        ),
      ),
    ).toMatch(/labelled sig1/);
    // A valid signature under another label does not rescue a bad sig1 …
    const bogus = `sig1=:${Buffer.alloc(64).toString("base64")}:`;
    const withBadSig1 = {
      ...r.headers,
      "signature-input": `${r.headers["signature-input"]}, ${relabel(r.headers["signature-input"]!)}`,
      signature: `${bogus}, ${relabel(r.headers.signature!)}`,
    };
    expect(await reason(verifyRequest({ ...r, headers: withBadSig1 }, keyFor))).toMatch(/does not verify/);
    // … and an unrelated extra signature does not spoil a good one.
    const extra = {
      ...r.headers,
      "signature-input": `${r.headers["signature-input"]}, other=("@method");created=1`,
      signature: `${r.headers.signature}, other=:AAAA:`,
    };
    expect(await verifyRequest({ ...r, headers: extra }, keyFor)).toMatchObject({ agentId: "pete-agent" });
  });
});

describe("SignatureNonces", () => {
  it("takes a nonce once, forgets it when its signature is too old, and stays bounded without letting a replay through", () => {
    const nonces = new SignatureNonces(2);
    const now = 1_700_000_000_000;
    const s = now / 1000;
    nonces.use("a#k", "nonce-one", s, now);
    expect(() => nonces.use("a#k", "nonce-one", s, now)).toThrow(/taken before/);
    // Another key's nonce is its own.
    nonces.use("b#k", "nonce-one", s, now);
    // Full: the oldest is forgotten, and a signature created no later than it is refused (503), not taken again.
    nonces.use("a#k", "nonce-two", s + 1, now + 1000);
    expect(nonces.size).toBe(2);
    expect(() => nonces.use("a#k", "nonce-one", s, now + 1000)).toThrow(expect.objectContaining({ statusCode: 503 }));
    // Once every kept signature is past its age, memory is given back.
    nonces.use("c#k", "nonce-three", s + 400, now + 400_000);
    expect(nonces.size).toBe(1);
  });
});
