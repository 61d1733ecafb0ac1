import { randomUUID } from "node:crypto";
import { describe, expect, it } from "vitest";
import type { NatsServer } from "../../../e2e/support/nats.ts";
import { waitFor } from "../../../e2e/support/ports.ts";
import { secondAfter } from "../../../e2e/support/wait.ts";
import { capabilityUpdateId } from "../../src/agent/relays/relays.ts";
import { LocalApiClient } from "../../src/client/local.ts";
import { signMessage } from "../../src/protocol/signing.ts";
import { identity, message, peerOf } from "../support/fixtures.ts";
import { runAgent, type Tls, withNatsAndTls } from "../support/agent-harness.ts";
import { onFreePorts } from "../support/free-ports.ts";

let nats: NatsServer;
let tls: Tls;
withNatsAndTls((n, t) => ([nats, tls] = [n, t]));

const cap = (name: string) => ({ name, description: name });

/** What an agent's local API says of a peer's capabilities. */
async function view(localApiUrl: string, peer: string): Promise<any> {
  const res = await fetch(`${localApiUrl}/peers/${encodeURIComponent(peer)}/capabilities`);
  return res.status === 200 ? res.json() : undefined;
}
const names = (v: any): string[] => v.document.capabilities.map((c: { name: string }) => c.name).sort();

describe("capability changes reach the peers of recent conversations", () => {
  it("refreshes a stale endpoint document on a newer greeting, and takes a capabilities.update sent straight to its inbox", async () => {
    const alice = identity("alice-agent");
    const bob = identity("bob-agent");
    /** alice, with these capabilities, always at the same address `port` (bob's spec.peers names it). */
    const runAlice = (port: number, bobUrl: string, capabilities: { name: string; description: string }[]) =>
      runAgent({
        self: alice,
        natsUrl: nats.url,
        tls,
        port,
        spec: {
          capabilities,
          peers: [{ ...peerOf(bob), url: bobUrl.replace("127.0.0.1", "localhost") }],
          outbound: { backoff: ["300ms"], retryFor: "30s" },
        },
      });
    // bob names alice's port before she listens on it: both start again on another when it was taken.
    const started = await onFreePorts(["alice"], async ({ alice: port }) => {
      const b = await runAgent({
        self: bob,
        natsUrl: nats.url,
        tls,
        spec: { peers: [{ ...peerOf(alice), url: `https://localhost:${port}` }] },
      });
      try {
        return { b, port, first: await runAlice(port, b.url, [cap("ping")]) };
      } catch (err) {
        await b.close();
        throw err;
      }
    });
    const { b, port } = started;
    try {
      let a = started.first;
      // bob learns alice's document at her endpoint; his discovery cache keeps it for its max-age (300 s).
      const v1 = await view(b.localApiUrl, "alice-agent");
      expect(names(v1)).toEqual(["ping"]);
      // `updated` has a resolution of a second; waited for before alice stops, so that her port is
      // free only a moment before she listens on it again.
      await secondAfter(v1.document.updated);
      await a.close();
      a = await runAlice(port, b.url, [cap("ping"), cap("calendar.availability")]);
      const v2 = (await a.get("/.well-known/agent/capabilities")).json();
      // alice greets bob: her greeting's document is newer than the one bob keeps, so he fetches hers again.
      const local = new LocalApiClient(a.localApiUrl);
      const greeting = await local.send({ to: "bob-agent", phase: "greeting", text: "hello again" });
      await waitFor("greeting delivered", async () => (await local.status(greeting.message_id)).state === "delivered");
      const refreshed = await waitFor("bob's baseline refreshed", async () => {
        const v = await view(b.localApiUrl, "alice-agent");
        return v?.baseline?.source === "endpoint" && v.document.updated === v2.updated ? v : undefined;
      });
      expect(names(refreshed)).toEqual(["calendar.availability", "ping"]);
      await secondAfter(v2.updated);
      await a.close();
      // alice changes again; bob is the peer of a recent conversation and is told through his inbox.
      a = await runAlice(port, b.url, [cap("ping"), cap("translate")]);
      const v3 = (await a.get("/.well-known/agent/capabilities")).json();
      // Queued in alice's outbox and delivered like any message: its record says so.
      const updateId = capabilityUpdateId(v3, "bob-agent");
      await waitFor(
        "the update delivered",
        async () =>
          (await new LocalApiClient(a.localApiUrl).status(updateId).catch(() => undefined))?.state === "delivered",
      );
      // bob took it: what he knows of alice is her new document, long before his cache would have let it go.
      const told = await waitFor("bob told of the change", async () => {
        const v = await view(b.localApiUrl, "alice-agent");
        return v?.document.updated === v3.updated ? v : undefined;
      });
      expect(names(told)).toEqual(["ping", "translate"]);
      expect(
        b
          .logLines()
          .some(
            (l) => l.msg === "learned peer capabilities" && l.source === "announcement" && l.peer === "alice-agent",
          ),
      ).toBe(true);
      await a.close();
    } finally {
      await b.close();
    }
  });
});

describe("a greeting's capabilities are cached at the level they were learned at", () => {
  it("never lets an unsigned greeting replace or refine what a signed one or the endpoint taught", async () => {
    const alice = identity("anna-agent");
    const bob = identity("ben-agent");
    // bob runs: his endpoint serves {ping}. alice takes unsigned messages too.
    const b = await runAgent({
      self: bob,
      natsUrl: nats.url,
      tls,
      spec: { capabilities: [cap("ping")], peers: [peerOf(alice)] },
    });
    const a = await runAgent({
      self: alice,
      natsUrl: nats.url,
      tls,
      spec: {
        peers: [{ ...peerOf(bob), url: b.url.replace("127.0.0.1", "localhost") }],
        inbox: { requireSignature: false },
      },
    });
    const greeting = (capabilities: { name: string; description: string }[], sign: boolean) => {
      // A conversation of its own: the forgery does not try to continue bob's (no downgrade would refuse it).
      const m = message("ben-agent", "anna-agent", { phase: "greeting", conversation_id: `conv:${randomUUID()}` });
      m.body.parts = [{ content_type: "application/json", name: "capabilities", content: { ifp: 7, capabilities } }];
      return sign ? signMessage(m, bob.signing) : m;
    };
    try {
      const real = greeting([cap("ping"), cap("calendar.availability")], true);
      expect((await a.post(real)).status).toBe(202);
      await waitFor(
        "bob's signed greeting cached",
        async () => (await view(a.localApiUrl, "ben-agent"))?.message_id === real.headers.message_id,
      );
      // Anyone can send an unsigned greeting that claims to be bob's: accepted (signatures are optional here), never cached over his.
      const forged = greeting([cap("wire.transfer")], false);
      const res = await a.post(forged);
      expect(res.status, res.text).toBe(202);
      await waitFor("the forged greeting refused for the cache", () =>
        a.logLines().some((l) => l.message_id === forged.headers.message_id && /not cached/.test(String(l.msg))),
      );
      const v = await view(a.localApiUrl, "ben-agent");
      expect(v).toMatchObject({ source: "greeting", message_id: real.headers.message_id, auth_level: 2 });
      expect(names(v)).toEqual(["calendar.availability", "ping"]);
      // A signed greeting at the same level still replaces it.
      const next = greeting([cap("ping"), cap("translate")], true);
      expect((await a.post(next)).status).toBe(202);
      const replaced = await waitFor("the next signed greeting cached", async () => {
        const x = await view(a.localApiUrl, "ben-agent");
        return x?.message_id === next.headers.message_id ? x : undefined;
      });
      expect(names(replaced)).toEqual(["ping", "translate"]);

      // An unsigned greeting about carol, whom nothing else is known of, is cached at level -1,
      // but never refines an endpoint document (level 2): shown for a peer without one only.
      const carol = identity("carol-agent");
      const c = await runAgent({
        self: carol,
        natsUrl: nats.url,
        tls,
        spec: { capabilities: [cap("ping")], peers: [] },
      });
      try {
        const carolUrl = c.url.replace("127.0.0.1", "localhost");
        const a2 = await runAgent({
          self: identity("dora-agent"),
          natsUrl: nats.url,
          tls,
          spec: { peers: [{ ...peerOf(carol), url: carolUrl }], inbox: { requireSignature: false } },
        });
        try {
          const m = message("carol-agent", "dora-agent", {
            phase: "greeting",
            conversation_id: `conv:${randomUUID()}`,
          });
          m.body.parts = [
            {
              content_type: "application/json",
              name: "capabilities",
              content: { ifp: 7, capabilities: [cap("wire.transfer")] },
            },
          ];
          expect((await a2.post(m)).status).toBe(202);
          await waitFor("the unsigned greeting stored", () =>
            a2.logLines().some((l) => l.msg === "learned peer capabilities" && l.peer === "carol-agent"),
          );
          const seen = await view(a2.localApiUrl, "carol-agent");
          expect(seen).toMatchObject({ source: "endpoint" });
          expect(names(seen)).toEqual(["ping"]);
        } finally {
          await a2.close();
        }
      } finally {
        await c.close();
      }
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });
});
