import { describe, expect, it } from "vitest";
import { identity } from "../../test/fixtures.ts";
import { ProtocolError } from "./errors.ts";
import { contentDigest, signRequest, verifyRequest } from "./http-signatures.ts";
import { publicKeyFromRaw } from "./keys.ts";

const pete = identity("pete-agent");
const keyFor = (agentId: string, keyId: string) => {
  if (agentId !== "pete-agent" || keyId !== "key-1") throw new ProtocolError(401, "unknown_sender", `unknown ${agentId}#${keyId}`);
  return publicKeyFromRaw(pete.publicKey);
};

async function signed(method: string, url: string, body?: string, created?: Date) {
  const headers = await signRequest({ method, url, body, headers: body ? { "content-type": "application/json" } : {} }, pete.signing, created);
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

describe("RFC 9421 request signatures", () => {
  it("RFC 9530 content digest of the RFC's example body", () => {
    expect(contentDigest('{"hello": "world"}\n')).toBe("sha-256=:RK/0qy18MlBSVnWgjwz6lZEWjP/lF5HF9bvEF8FabDg=:");
  });

  it("signs with label sig1 over method, path, query and content-digest", async () => {
    const r = await signed("POST", "https://relay.example/relay/publish", "{}");
    expect(r.headers["signature-input"]).toMatch(/^sig1=\("@method" "@path" "@query" "content-digest"\);created=\d+;keyid="pete-agent#key-1";alg="ed25519"$/);
    expect(r.headers.signature).toMatch(/^sig1=:[A-Za-z0-9+/]+=*:$/);
    expect(await verifyRequest(r, keyFor)).toEqual({ agentId: "pete-agent", keyId: "key-1" });
  });

  it("covers the query", async () => {
    const r = await signed("GET", "https://relay.example/relay/messages?limit=5");
    expect(await reason(verifyRequest({ ...r, url: "https://relay.example/relay/messages?limit=500" }, keyFor))).toMatch(/^401 invalid_signature/);
    expect(await verifyRequest(r, keyFor)).toMatchObject({ agentId: "pete-agent" });
  });

  it("refuses a changed body, method or path", async () => {
    const r = await signed("POST", "https://relay.example/relay/publish", '{"a":1}');
    expect(await reason(verifyRequest({ ...r, body: Buffer.from('{"a":2}') }, keyFor))).toMatch(/Content-Digest does not match/);
    expect(await reason(verifyRequest({ ...r, method: "PUT" }, keyFor))).toMatch(/^401/);
    expect(await reason(verifyRequest({ ...r, url: "https://relay.example/relay/subscribe" }, keyFor))).toMatch(/^401/);
  });

  it("refuses old signatures, unknown keys and missing headers", async () => {
    const old = await signed("GET", "https://relay.example/relay/messages", undefined, new Date(Date.now() - 301_000));
    expect(await reason(verifyRequest(old, keyFor))).toMatch(/older than 300 s/);
    const stranger = identity("stranger");
    const h = await signRequest({ method: "GET", url: "https://relay.example/relay/messages" }, stranger.signing);
    expect(await reason(verifyRequest({ method: "GET", url: "https://relay.example/relay/messages", headers: h }, keyFor))).toMatch(/^401 unknown_sender/);
    expect(await reason(verifyRequest({ method: "GET", url: "https://relay.example/x", headers: {} }, keyFor))).toMatch(/not signed/);
    const noDigest = await signed("POST", "https://relay.example/relay/publish", "{}");
    delete (noDigest.headers as Record<string, string>)["content-digest"];
    expect(await reason(verifyRequest(noDigest, keyFor))).toMatch(/needs a Content-Digest/);
  });

  it("refuses a signature made by another key for the claimed keyid", async () => {
    const mallory = identity("pete-agent");
    const h = await signRequest({ method: "GET", url: "https://relay.example/relay/messages" }, mallory.signing);
    expect(await reason(verifyRequest({ method: "GET", url: "https://relay.example/relay/messages", headers: h }, keyFor))).toMatch(/does not verify/);
  });
});
