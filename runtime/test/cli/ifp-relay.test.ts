// `ifp relay publish|pull` as a person runs them: the command in a process of its own against a
// real relay (in this process, on a real nats-server, over TLS), with key files on disk.
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { generateSigningKey } from "../../src/protocol/keys.ts";
import { identity, tempDir, writeKey } from "../support/fixtures.ts";
import { ifpCommand } from "../support/ifp-command.ts";
import { alice, bob, withRelay, type RelayFixture } from "../support/relay-harness.ts";

const ifp = ifpCommand();

let f: RelayFixture;
withRelay([alice, bob], (x) => (f = x));
const dir = tempDir();
/** ifp relay publish to bob on the relay, signed with `key` as `from`, trusting the test CA. */
const publish = (key: string, from: string, text: string, url = f.relayUrl) =>
  ifp(
    "relay",
    "publish",
    url,
    "--key",
    key,
    "--from",
    from,
    "--to",
    bob.agentId,
    "--text",
    text,
    "--ca-file",
    f.tls.files.ca,
  );

describe("ifp relay publish and pull", () => {
  it("publishes a signed message for an agent, who pulls it with its own key and acknowledges it", async () => {
    const [aliceKey, bobKey] = [writeKey(dir, alice), writeKey(dir, bob)];
    const ca = ["--ca-file", f.tls.files.ca];
    const text = `hello over the relay ${Date.now()}`;
    const sent = await ifp(
      "relay",
      "publish",
      f.relayUrl,
      "--key",
      aliceKey,
      "--from",
      alice.agentId,
      "--to",
      bob.agentId,
      "--text",
      text,
      ...ca,
    );
    expect(sent.status, sent.stderr).toBe(0);
    const answer = JSON.parse(sent.stdout);
    expect(answer).toMatchObject({ status: 202, from: alice.agentId, message_id: expect.stringMatching(/^msg:/) });
    expect(sent.stderr).toContain(`published ${answer.message_id}`);
    const read = await ifp("relay", "pull", f.relayUrl, "--key", bobKey, "--from", bob.agentId, "--ack", ...ca);
    expect(read.status, read.stderr).toBe(0);
    const messages = read.stdout
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l));
    const mine = messages.find((m) => m.headers.message_id === answer.message_id);
    expect(mine).toMatchObject({
      headers: { from: { agent: alice.agentId }, to: [{ agent: bob.agentId }] },
      body: { text },
    });
    expect(mine.security.signatures[0].key_id).toBe(`${alice.agentId}#${alice.keyId}`);
    // Acknowledged: gone from the mailbox.
    const again = await ifp("relay", "pull", f.relayUrl, "--key", bobKey, "--from", bob.agentId, ...ca);
    expect(again.stdout).not.toContain(answer.message_id);
  });

  it("sends as the did:key of the key with --from did:key; a did:key the relay serves no mailbox for cannot read, 401 unknown_sender", async () => {
    const key = join(dir, "stranger.pem");
    writeFileSync(key, generateSigningKey().privateKeyPem, { mode: 0o600 });
    const ca = ["--ca-file", f.tls.files.ca];
    const sent = await publish(key, "did:key", "from a stranger");
    expect(sent.status, sent.stderr).toBe(0);
    expect(JSON.parse(sent.stdout)).toMatchObject({ status: 202, from: expect.stringMatching(/^did:key:z6Mk/) });
    const read = await ifp("relay", "pull", f.relayUrl, "--key", key, "--from", "did:key", ...ca);
    expect(read.status).toBe(1);
    expect(read.stderr).toMatch(/the relay answered 401 unknown_sender/);
  });

  it("prints a refusal as JSON with the relay's code and exits 1; refuses bad input with its usage (exit 2)", async () => {
    const key = writeKey(dir, identity("nobody-the-relay-knows"));
    const refused = await publish(key, "nobody-the-relay-knows", "hi");
    expect(refused.status).toBe(1);
    expect(JSON.parse(refused.stdout)).toMatchObject({
      status: 401,
      code: "unknown_sender",
      message: expect.any(String),
    });
    expect(refused.stderr).toMatch(/the relay answered 401 unknown_sender/);
    for (const args of [
      ["relay", "publish", f.relayUrl, "--key", key, "--from", "x", "--text", "no recipient"],
      ["relay", "publish", f.relayUrl, "--key", key, "--from", "x", "--to", bob.agentId],
      ["relay", "publish", "--key", key, "--from", "x", "--to", bob.agentId, "--text", "no url"],
      ["relay", "publish", f.relayUrl, "--from", "x", "--to", bob.agentId, "--text", "no key"],
      ["relay", "send", f.relayUrl, "--key", key, "--from", "x"],
    ]) {
      const r = await ifp(...args);
      expect(r.status, args.join(" ")).toBe(2);
      expect(r.stderr).toMatch(/ifp relay publish RELAY_URL/);
    }
    // Not a key: a clear error, exit 1; not an https URL: refused with the usage, exit 2.
    const notKey = join(dir, "not-a-key.pem");
    writeFileSync(notKey, "garbage");
    const bad = await publish(notKey, "x", "hi");
    expect(bad.status).toBe(1);
    expect(bad.stderr).toMatch(/^ifp: /);
    for (const url of [f.relayUrl.replace("https:", "http:"), "not a url"]) {
      const plain = await publish(writeKey(dir, alice), alice.agentId, "hi", url);
      expect(plain.status, url).toBe(2);
      expect(plain.stderr).toMatch(/must be an https URL/);
    }
  });
});
