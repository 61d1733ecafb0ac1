import { describe, expect, it } from "vitest";
import { RelayClient } from "../../src/net/relay-client.ts";
import type { RunningRelay } from "../../src/relay/main.ts";
import type { NatsServer } from "../../../e2e/support/nats.ts";
import type { HttpClient } from "../../src/net/http-client.ts";
import { identity, peerOf, signed } from "../support/fixtures.ts";
import { runAgent, startHandler, type Tls } from "../support/agent-harness.ts";
import { baseUrl, runRelay, waitFor, withRelay, type RelayFixture } from "../support/relay-harness.ts";
import { metricValue } from "../support/probes.ts";
import { clockPast } from "../../../e2e/support/wait.ts";

const alice = identity("alice-agent");
const bob = identity("bob-agent");
let f: RelayFixture;
withRelay([alice, bob], (fixture) => (f = fixture));

const HOUR = 3600_000;

describe("relayed messages and the replay window", () => {
  it("takes a message by when the relay accepted it, once, even read again after the duplicate window", async () => {
    const { nats, tls, http }: { nats: NatsServer; tls: Tls; http: HttpClient } = f;
    // A second relay that serves bob too: the same message reaches him a second way.
    const other: RunningRelay = await runRelay(f, { agents: [peerOf(alice), peerOf(bob)] });
    const relays = [f.relayUrl, baseUrl(other)];
    const handler = await startHandler();
    // The duplicate window (the replay window) is 3 s here, so a second copy read later is past it.
    const b = await runAgent({
      self: bob,
      natsUrl: nats.url,
      tls,
      spec: {
        peers: [peerOf(alice)],
        relay: { urls: relays, receive: "poll", pollInterval: "300ms" },
        inbox: { replayWindow: "3s" },
        handler: { url: handler.url },
      },
    });
    const intake = async (result: string) =>
      metricValue(await b.scrape(), "ifp_relay_operations_total", { operation: "intake", result });
    try {
      // Written 72 hours ago (its sender queued it that long), accepted by the relay now.
      const old = signed(
        alice,
        "bob-agent",
        { date: new Date(Date.now() - 72 * HOUR).toISOString() },
        "written three days ago",
      );
      expect((await new RelayClient(f.relayUrl, alice.signing, http).publish(old)).status).toBe(202);
      const got = await waitFor("the old message handed on", () =>
        handler.received.find((r) => r.body.headers.message_id === old.headers.message_id),
      );
      const handedOnAt = Date.now();
      expect(got.body.trace.received).toEqual([
        expect.objectContaining({ by: "relay:https://localhost", from: "alice-agent" }),
      ]);
      // JetStream's clock: the duplicate window (3 s here) runs out for the first copy, stored before
      // it was handed on (half a second more for the server's purge of the ids it remembers).
      await clockPast("the duplicate window past the first copy", handedOnAt + 3_500);
      // The same message again, through the other relay, after JetStream's duplicate window: recognised in the stream.
      expect((await new RelayClient(baseUrl(other), alice.signing, http).publish(old)).status).toBe(202);
      await waitFor("the second copy read and counted as a duplicate", async () => (await intake("duplicate")) >= 1);
      await waitFor("both mailboxes emptied", async () => {
        for (const url of relays)
          if ((await new RelayClient(url, bob.signing, http).pull()).messages.length) return false;
        return true;
      });
      expect(handler.received.filter((r) => r.body.headers.message_id === old.headers.message_id)).toHaveLength(1);

      // Dated before anything the inbox still keeps (its retention, a week): refused, however recently the relay took it.
      const ancient = signed(
        alice,
        "bob-agent",
        { date: new Date(Date.now() - 8 * 24 * HOUR).toISOString() },
        "eight days old",
      );
      expect((await new RelayClient(f.relayUrl, alice.signing, http).publish(ancient)).status).toBe(202);
      await waitFor("the ancient message refused", async () => (await intake("invalid_format")) >= 1);
      expect(
        b
          .logLines()
          .some(
            (l) =>
              l.message_id === ancient.headers.message_id &&
              /outside the accepted window for relayed messages/.test(String(l.err)),
          ),
      ).toBe(true);
      expect(handler.received.some((r) => r.body.headers.message_id === ancient.headers.message_id)).toBe(false);
    } finally {
      await b.close();
      await handler.close();
      await other.close();
    }
  });
});
