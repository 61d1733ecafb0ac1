// The grading of the publishes the kit's relays received (send.relay-signature): each request
// signature judged as of when it came, so a long --send-wait grades the first publishes as well.
import { describe, expect, it } from "vitest";
import { identity } from "../../test/support/fixtures.ts";
import { signRequest } from "../protocol/http-signatures.ts";
import { publicKeyFromRaw } from "../protocol/keys.ts";
import { publishSignatureProblem } from "./send.ts";
import type { Delivery } from "./test-inbox.ts";

const sender = identity("https://sender.example");
const keys = new Map([[`${sender.agentId}#${sender.keyId}`, publicKeyFromRaw(sender.publicKey)]]);
const url = "https://localhost:9443/s/relays/r/one/relay/publish";

/** A publish signed at `signedAt` and received by the kit at `receivedAt`. */
async function publish(signedAt: number, receivedAt: number): Promise<Delivery> {
  const body = Buffer.from('{"ifp":4}');
  const headers = await signRequest(
    { method: "POST", url, headers: { "content-type": "application/json" }, body },
    sender.signing,
    new Date(signedAt),
  );
  return {
    at: receivedAt,
    method: "POST",
    path: "/s/relays/r/one/relay/publish",
    url,
    headers,
    body,
    json: undefined,
    mailbox: "/s/relays/r/one",
    status: 202,
  };
}

describe("publishSignatureProblem", () => {
  it("takes a publish signed as it was sent, however long ago the kit received it", async () => {
    const tenMinutesAgo = Date.now() - 600_000;
    expect(await publishSignatureProblem([await publish(tenMinutesAgo, tenMinutesAgo + 200)], keys)).toBeUndefined();
  });

  it("refuses a publish whose signature was already stale, or from the future, when it came", async () => {
    const now = Date.now();
    expect(await publishSignatureProblem([await publish(now - 600_000, now)], keys)).toMatch(/older than 300 s/);
    expect(await publishSignatureProblem([await publish(now + 600_000, now)], keys)).toMatch(/created in the future/);
  });

  it("refuses a publish signed by a key the target's identity document does not list", async () => {
    const now = Date.now();
    const other = new Map([[`${sender.agentId}#key-2`, publicKeyFromRaw(sender.publicKey)]]);
    expect(await publishSignatureProblem([await publish(now, now)], other)).toMatch(/has no key/);
  });
});
