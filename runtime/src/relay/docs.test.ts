import { createPrivateKey, createPublicKey } from "node:crypto";
import { readFileSync } from "node:fs";
import { parseDictionary, type InnerList } from "structured-headers";
import { describe, expect, it } from "vitest";
import { signatureBase, signRequest, verifyRequest } from "../protocol/http-signatures.ts";

// docs/relay.md's worked example, recomputed: RFC 9421's test-key-ed25519 as alice-agent#key-1.
const doc = readFileSync(new URL("../../../docs/relay.md", import.meta.url), "utf8");
const privateKey = createPrivateKey(
  "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIJ+DYvh6SEqVTm50DFtMDoQikTmiCqirVv9mWG9qfSnF\n-----END PRIVATE KEY-----\n",
);
const created = new Date(1795348800_000);
const url = "https://relay.example/relay/publish";
const nonce = "pZ3x8Qm2Rk7vT1wYb5nC4A";

function block(after: string): string {
  const start = doc.indexOf("```", doc.indexOf(after));
  const open = doc.indexOf("\n", start) + 1;
  return doc.slice(open, doc.indexOf("```", open)).replace(/\n$/, "");
}

describe("docs/relay.md worked example", () => {
  const request = block("She publishes at");
  const body = request.split("\n\n")[1]!;
  const header = (name: string) => new RegExp(`^${name}: (.*)$`, "m").exec(request)?.[1];

  it("shows the headers the code produces for that body, key and time", async () => {
    const h = await signRequest(
      { method: "POST", url, body, headers: { "content-type": "application/json" } },
      { agentId: "alice-agent", keyId: "key-1", privateKey },
      created,
      nonce,
    );
    expect(header("Content-Digest")).toBe(h["content-digest"]);
    expect(header("Signature-Input")).toBe(h["signature-input"]);
    expect(header("Signature")).toBe(h.signature);
  });

  it("shows the signature base the code builds, and the relay accepts the request", async () => {
    const headers = {
      "content-type": "application/json",
      "content-digest": header("Content-Digest")!,
      "signature-input": header("Signature-Input")!,
      signature: header("Signature")!,
    };
    const input = parseDictionary(headers["signature-input"]).get("sig1") as InnerList;
    expect(block("lines joined by")).toBe(signatureBase({ method: "POST", url, headers }, input));
    const publicKey = createPublicKey(privateKey);
    expect(doc).toContain(publicKey.export({ format: "jwk" }).x!);
    const who = await verifyRequest(
      { method: "POST", url, headers, body: Buffer.from(body) },
      () => publicKey,
      created.getTime() + 10_000,
    );
    expect(who).toEqual({ agentId: "alice-agent", keyId: "key-1" });
  });
});
