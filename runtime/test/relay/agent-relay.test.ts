import { jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { describe, expect, it } from "vitest";
import type { NatsServer } from "../../../e2e/support/nats.ts";
import { waitFor } from "../../../e2e/support/ports.ts";
import { agentNames } from "../../src/agent/names.ts";
import { LocalApiClient } from "../../src/client/local.ts";
import type { HttpClient } from "../../src/net/http-client.ts";
import { RelayClient } from "../../src/net/relay-client.ts";
import type { RunningRelay } from "../../src/relay/main.ts";
import { identity, peerOf, signed, tempDir } from "../support/fixtures.ts";
import { runAgent, startHandler, type Tls } from "../support/agent-harness.ts";
import { baseUrl, randomName, runRelay, withRelay } from "../support/relay-harness.ts";
import { metricValue } from "../support/probes.ts";

const alice = identity("alice-agent");
const bob = identity("bob-agent");
let nats: NatsServer;
let tls: Tls;
let relay: RunningRelay;
let relayUrl: string;
let http: HttpClient;

withRelay([alice, bob], (f) => ({ nats, tls, http, relay, relayUrl } = f));

/** Whether the agent's inbox stream holds a message with this message_id. */
async function storedInInbox(agentId: string, messageId: string): Promise<boolean> {
  const nc = await connect({ servers: nats.url });
  try {
    const names = agentNames(agentId);
    const info = await (await jetstreamManager(nc)).streams.info(names.inboxStream, {
      subjects_filter: names.inbox(messageId),
    });
    return Object.keys(info.state.subjects ?? {}).length > 0;
  } finally {
    await nc.close();
  }
}

/** Bob's runtime reading his mailbox at these relays, handing messages to a handler of the test's. */
async function bobReading(relay: { urls: string[]; receive?: "events" | "poll"; pollInterval: string }) {
  const handler = await startHandler();
  const b = await runAgent({
    self: bob,
    natsUrl: nats.url,
    tls,
    spec: { peers: [peerOf(alice)], relay, handler: { url: handler.url } },
  });
  return { handler, b };
}

describe("agents that talk through a relay", () => {
  it("delivers to a relay-only agent: relay fallback out, pull in, signature checked, trace kept", async () => {
    const { handler, b } = await bobReading({ urls: [relayUrl], pollInterval: "300ms" });
    // The relay is this deployment's own: plaintext through it is fine (encryption-relay.test.ts covers the untrusted case).
    const a = await runAgent({
      self: alice,
      natsUrl: nats.url,
      tls,
      spec: {
        peers: [{ ...peerOf(bob), relay: { urls: [relayUrl] } }],
        outbound: { backoff: ["300ms"], retryFor: "30s" },
        encryption: { relayTrust: [{ url: relayUrl, level: "self-operated" }] },
      },
    });
    try {
      const sent = await new LocalApiClient(a.localApiUrl).send({ to: "bob-agent", text: "through the relay" });
      const record = await waitFor("delivered", async () => {
        const r = await new LocalApiClient(a.localApiUrl).status(sent.message_id);
        return r.state === "delivered" ? r : undefined;
      });
      expect(record.recipients[0]).toMatchObject({ via: `relay:${relayUrl}` });
      const got = await waitFor("bob's handler", () =>
        handler.received.find((r) => r.body.headers.message_id === sent.message_id),
      );
      expect(got.body.trace.received).toEqual([
        expect.objectContaining({ by: "relay:https://localhost", from: "alice-agent" }),
      ]);
      expect(got.headers["ifp-sender"]).toBe("alice-agent");
      // Taken from the relay: once bob's runtime has acknowledged it there, nothing is left waiting
      // (the acknowledgement may follow the hand-off).
      await waitFor(
        "bob's acknowledgement at the relay",
        async () => (await new RelayClient(relayUrl, bob.signing, http).pull()).messages.length === 0,
      );

      // A message whose signature broke on the way is never handed on.
      const tampered = signed(alice, "bob-agent", {}, "original");
      tampered.body.text = "changed";
      expect((await new RelayClient(relayUrl, alice.signing, http).publish(tampered)).status).toBe(202);
      // What bob's runtime decided: refused for its signature, counted, acknowledged at the
      // relay, and never stored in bob's inbox stream (so never handed on).
      const intake = async (result: string) =>
        metricValue(await b.scrape(), "ifp_relay_operations_total", { operation: "intake", result });
      await waitFor("the refusal to be counted", async () => (await intake("invalid_signature")) === 1);
      expect(await intake("accepted")).toBe(1);
      await waitFor(
        "the relay mailbox emptied",
        async () => (await new RelayClient(relayUrl, bob.signing, http).pull()).messages.length === 0,
      );
      expect(await storedInInbox("bob-agent", tampered.headers.message_id)).toBe(false);
      expect(await storedInInbox("bob-agent", sent.message_id)).toBe(true);
      expect(handler.received.some((r) => r.body.headers.message_id === tampered.headers.message_id)).toBe(false);
    } finally {
      await Promise.all([a.close(), b.close()]);
      await handler.close();
    }
  });

  it("takes a message from the relay's event stream as it arrives, without waiting for the next poll", async () => {
    // Polled at start and then only every hour: what arrives within the test comes by the stream.
    const { handler, b } = await bobReading({ urls: [relayUrl], pollInterval: "1h" });
    try {
      const intake = async (result: string) =>
        metricValue(await b.scrape(), "ifp_relay_operations_total", { operation: "intake", result });
      for (const text of ["first pushed", "second pushed"]) {
        const m = signed(alice, "bob-agent", { conversation_id: `conv:push-${text}` }, text);
        expect((await new RelayClient(relayUrl, alice.signing, http).publish(m)).status).toBe(202);
        const got = await waitFor(
          `bob's handler to get "${text}"`,
          () => handler.received.find((r) => r.body.headers.message_id === m.headers.message_id),
          15_000,
          50,
        );
        expect(got.body.body.text).toBe(text);
        expect(got.body.trace.received).toEqual([
          expect.objectContaining({ by: "relay:https://localhost", from: "alice-agent" }),
        ]);
      }
      // Counted once the intake is done, which may follow the hand-off.
      await waitFor("both intakes counted", async () => (await intake("accepted")) === 2);
      // Acknowledged at the relay as each was taken.
      await waitFor(
        "the relay mailbox emptied",
        async () => (await new RelayClient(relayUrl, bob.signing, http).pull()).messages.length === 0,
      );
      // A tampered one pushed on the stream is refused like a polled one.
      const tampered = signed(alice, "bob-agent", { conversation_id: "conv:push-tampered" }, "original");
      tampered.body.text = "changed";
      expect((await new RelayClient(relayUrl, alice.signing, http).publish(tampered)).status).toBe(202);
      await waitFor("the refusal to be counted", async () => (await intake("invalid_signature")) === 1, 15_000);
      expect(handler.received.some((r) => r.body.headers.message_id === tampered.headers.message_id)).toBe(false);
    } finally {
      await b.close();
      await handler.close();
    }
  });

  it("reads a mailbox it could not read at start again within seconds, not at the next pollInterval", async () => {
    // A relay of its own, stopped after a message for bob waits in it, and started again on
    // the same port once bob's first read has failed (as when a relay restarts with its agents).
    const env = { nats, tls, http, close: async () => {} };
    const name = randomName();
    const spec = { agents: [peerOf(alice), peerOf(bob)] };
    let late = await runRelay(env, spec, name);
    const url = baseUrl(late);
    const port = Number(new URL(late.url).port);
    const waiting = signed(alice, "bob-agent", { conversation_id: "conv:relay-restarting" }, "waited at the relay");
    expect((await new RelayClient(url, alice.signing, http).publish(waiting)).status).toBe(202);
    await late.close();
    const { handler, b } = await bobReading({ urls: [url], receive: "poll", pollInterval: "1h" });
    try {
      await waitFor("bob's first read to fail", () =>
        b.logLines().some((l) => l.msg === "could not read the relay mailbox"),
      );
      late = await runRelay(env, spec, name, tempDir(), port);
      const got = await waitFor(
        "bob's handler to get what waited",
        () => handler.received.find((r) => r.body.headers.message_id === waiting.headers.message_id),
        30_000,
        100,
      );
      expect(got.body.body.text).toBe("waited at the relay");
      await waitFor(
        "bob's acknowledgement at the relay",
        async () => (await new RelayClient(url, bob.signing, http).pull()).messages.length === 0,
      );
    } finally {
      await b.close();
      await handler.close();
      await late.close();
    }
  });

  it("announces a changed capability set on the capabilities.update topic", async () => {
    await new RelayClient(relayUrl, alice.signing, http).subscribe(["capabilities.update"]);
    const spec = (caps: string[]) => ({
      capabilities: caps.map((name) => ({ name, description: name })),
      peers: [peerOf(alice)],
      relay: { urls: [relayUrl], pollInterval: "1h" },
    });
    const dir = tempDir();
    const first = await runAgent({ self: bob, dir, natsUrl: nats.url, tls, spec: spec(["ping"]) });
    await first.close();
    const second = await runAgent({
      self: bob,
      dir,
      natsUrl: nats.url,
      tls,
      spec: spec(["ping", "calendar.availability"]),
    });
    try {
      // Every change is announced; the last one carries the current set.
      const note = await waitFor("the announcement", async () =>
        (await new RelayClient(relayUrl, alice.signing, http).pull()).messages.find(
          (m) =>
            m.headers.from.agent === "bob-agent" &&
            (m.body.parts?.[0]?.content as { capabilities?: unknown[] })?.capabilities?.length === 2,
        ),
      );
      expect(note.headers.to).toEqual([{ agent: "topic:capabilities.update" }]);
      expect(note.body.parts![0]).toMatchObject({
        name: "capabilities",
        content: { agent_id: "bob-agent", capabilities: [{ name: "ping" }, { name: "calendar.availability" }] },
      });
      expect(note.security!.signatures![0]!.key_id).toBe("bob-agent#key-1");
    } finally {
      await second.close();
    }
  });
});

describe("ifp relay", () => {
  it("pull prints and acknowledges the caller's waiting messages", async () => {
    const { execFile } = await import("node:child_process");
    const { writeKey } = await import("../support/fixtures.ts");
    const dir = tempDir();
    const m = signed(alice, "bob-agent", {}, "for the command line");
    await new RelayClient(relayUrl, alice.signing, http).publish(m);
    const run = (...args: string[]) =>
      new Promise<{ code: number; stdout: string; stderr: string }>((resolve) =>
        execFile(
          process.execPath,
          [new URL("../../bin/ifp.ts", import.meta.url).pathname, "relay", ...args],
          { encoding: "utf8" },
          (err, stdout, stderr) => resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
        ),
      );
    const r = await run(
      "pull",
      relayUrl,
      "--key",
      writeKey(dir, bob),
      "--from",
      "bob-agent",
      "--ca-file",
      tls.files.ca,
      "--ack",
    );
    expect(r.code).toBe(0);
    expect(
      r.stdout
        .trim()
        .split("\n")
        .map((l) => JSON.parse(l).headers.message_id),
    ).toContain(m.headers.message_id);
    expect(r.stderr).toMatch(/acknowledged/);
    expect((await new RelayClient(relayUrl, bob.signing, http).pull()).messages).toHaveLength(0);
    const bad = await run(
      "pull",
      relayUrl,
      "--key",
      writeKey(dir, identity("stranger")),
      "--from",
      "stranger",
      "--ca-file",
      tls.files.ca,
    );
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/unknown_sender|not known|not an agent this relay serves/);
    expect((await run("pull")).code).toBe(2);
  });
});
