// Per-destination resiliency of the sending side against a real HTTPS peer inbox on loopback and
// a real nats-server: the circuit breaker (opens after N consecutive failures, one probe after the
// cool-down, closes on its success and delivers everything once) and the circuits it lists
// (GET /circuits, `ifp circuits`), the in-flight cap, the timeout of an inbox and of a relay.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LocalApiClient } from "../../src/client/local.ts";
import { ifpCommand } from "../support/ifp-command.ts";
import { consistently, waitFor } from "../../../e2e/support/wait.ts";
import { identity, peerOf } from "../support/fixtures.ts";
import { runAgent } from "../support/agent-harness.ts";
import { metricValue, outboxSettled } from "../support/probes.ts";
import { record, scriptedPeer, send, untilState } from "../support/outbox-harness.ts";
import { relayEnv, type RelayEnv } from "../support/relay-harness.ts";

let env: RelayEnv;
beforeAll(async () => {
  env = await relayEnv();
});
afterAll(async () => {
  await env?.close();
});

type Peer = Awaited<ReturnType<typeof scriptedPeer>>;
type Resiliency = { failureThreshold?: number; coolDown?: string; maxInFlight?: number; timeout?: string };

const ifp = ifpCommand();
const circuits = (localApiUrl: string) => new LocalApiClient(localApiUrl).circuits();

/** An agent sending to far-peer at the peer's inbox, or (`viaRelay`) only through the peer as its relay. */
async function sender(name: string, peer: Peer, resiliency: Resiliency, opts: { viaRelay?: boolean } = {}) {
  const self = identity(`${name}-${Math.random().toString(36).slice(2, 6)}`);
  const agent = await runAgent({
    self,
    natsUrl: env.nats.url,
    tls: env.tls,
    spec: {
      peers: [
        opts.viaRelay
          ? { ...peerOf(identity("far-peer")), relay: { urls: [peer.url] } }
          : { ...peerOf(identity("far-peer")), url: peer.url },
      ],
      outbound: { backoff: ["200ms"], retryFor: "2m", resiliency },
    },
  });
  return Object.assign(agent, { settled: () => outboxSettled(env.nats.url, self.agentId) });
}

async function sendMany(localApiUrl: string, n: number): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < n; i++) {
    const sent = await send(localApiUrl, { to: "far-peer", text: `message ${i}` });
    expect(sent.status).toBe(202);
    ids.push(sent.body.message_id);
  }
  return ids;
}

const metric = async (agent: { scrape(): Promise<string> }, name: string, labels?: Record<string, string>) =>
  metricValue(await agent.scrape(), name, labels);

describe("the circuit breaker of a destination", () => {
  it("opens after N consecutive failures, makes no attempt while open, probes once after the cool-down, and closes on success delivering each message once", async () => {
    let up = false;
    const peer = await scriptedPeer(env.tls, () => ({ status: up ? 202 : 503 }));
    // One in flight: the attempts before the circuit opens are exactly the threshold.
    const agent = await sender("breaker", peer, { failureThreshold: 3, coolDown: "5s", maxInFlight: 1 });
    try {
      const ids = await sendMany(agent.localApiUrl, 5);
      await waitFor("the circuit to open", async () => (await metric(agent, "ifp_outbound_circuit_state")) === 2);
      expect(peer.requests.length).toBe(3);
      // The witness: a message came up for its attempt while open, and the circuit held it back.
      await waitFor(
        "an attempt held back by the open circuit",
        async () => (await metric(agent, "ifp_outbound_circuit_rejections_total", { reason: "open" })) > 0,
      );
      await consistently("no attempt while the circuit is open", () => peer.requests.length === 3, 1_200);
      // Listed by the local API and by `ifp circuits`, with when its probe is let through.
      const open = await circuits(agent.localApiUrl);
      expect(open).toEqual({
        total: 1,
        circuits: [
          {
            destination: `${peer.url}/.well-known/agent/inbox`,
            state: "open",
            failures: 3,
            open_until: expect.any(String),
          },
        ],
      });
      const listed = await ifp("circuits", "--local-api", agent.localApiUrl);
      expect(listed.status, listed.stderr).toBe(0);
      // The command's own start may outlast the cool-down on a loaded machine: then it lists the circuit half-open.
      expect(JSON.parse(listed.stdout.replace(/^200 /, ""))).toMatchObject({
        total: 1,
        circuits: [
          { destination: `${peer.url}/.well-known/agent/inbox`, state: expect.stringMatching(/^(open|half-open)$/) },
        ],
      });

      // After the cool-down one probe, which fails: open again, and again no attempt.
      await waitFor("the probe", () => peer.requests.length >= 4, 10_000);
      expect(peer.requests[3]!.at - peer.requests[2]!.at).toBeGreaterThanOrEqual(4_900);
      // The witness: the probe's failure was taken, and the circuit is open again.
      await waitFor("the circuit open again", async () => (await metric(agent, "ifp_outbound_circuit_state")) === 2);
      await consistently("one probe, then open again", () => peer.requests.length === 4, 1_000);
      // Held back, never given up: every message is still pending.
      for (const id of ids) expect((await record(agent.localApiUrl, id)).state).toMatch(/^(queued|retrying)$/);

      up = true;
      for (const id of ids) await untilState(agent.localApiUrl, id, "delivered", 30_000);
      await waitFor("the outbox settled", () => agent.settled(), 15_000);
      // Four refused attempts (three, then the probe), then each message once.
      await consistently("nothing more reaches the peer", () => peer.requests.length === 9, 1_000);
      const accepted = peer.requests.filter((r) => r.status === 202).map((r) => r.headers["idempotency-key"]);
      expect(accepted.sort()).toEqual([...ids].sort());
      // Attempts held back by the circuit are not counted against a message.
      let attempts = 0;
      for (const id of ids) attempts += (await record(agent.localApiUrl, id)).recipients[0].attempts;
      expect(attempts).toBe(9);
      // Closed: its series is gone, and it is no longer listed.
      expect(await circuits(agent.localApiUrl)).toEqual({ total: 0, circuits: [] });
      expect(await metric(agent, "ifp_outbound_circuit_state")).toBe(0);
      expect(await agent.scrape()).not.toMatch(/^ifp_outbound_circuit_state\{/m);
    } finally {
      await agent.close();
      await peer.close();
    }
  });

  it("lets a single probe through when half-open, however many messages wait", async () => {
    // Slow answers: the messages that wake with the cool-down's end arrive while the probe is under way.
    const peer = await scriptedPeer(env.tls, () => ({ status: 503, delayMs: 300 }));
    const agent = await sender("probe", peer, { failureThreshold: 2, coolDown: "1500ms", maxInFlight: 4 });
    try {
      await sendMany(agent.localApiUrl, 6);
      await waitFor("the circuit to open", async () => (await metric(agent, "ifp_outbound_circuit_state")) === 2);
      await waitFor("the attempts under way to end", () => peer.load.inFlight === 0);
      const before = peer.requests.length;
      // Before it opened: the threshold, and at most the cap's other slots already under way (2 - 1 + 4).
      expect(before).toBeGreaterThanOrEqual(2);
      expect(before).toBeLessThanOrEqual(5);
      await waitFor("the probe", () => peer.requests.length > before, 10_000);
      // The witness: the messages that woke with the cool-down's end were held back while the probe ran.
      await waitFor(
        "an attempt held back while half-open",
        async () => (await metric(agent, "ifp_outbound_circuit_rejections_total", { reason: "half-open" })) > 0,
        10_000,
      );
      await consistently("one probe, then open again", () => peer.requests.length === before + 1, 1_000);
    } finally {
      await agent.close();
      await peer.close();
    }
  });

  it("never counts a 4xx as a failure: the circuit stays closed", async () => {
    const peer = await scriptedPeer(env.tls, () => ({ status: 400 }));
    const agent = await sender("breaker-4xx", peer, { failureThreshold: 2, coolDown: "1m", maxInFlight: 1 });
    try {
      const ids = await sendMany(agent.localApiUrl, 4);
      for (const id of ids) await untilState(agent.localApiUrl, id, "failed");
      expect(peer.requests.length).toBe(4);
      expect(await metric(agent, "ifp_outbound_circuit_state")).toBe(0);
      // Never held back by the circuit (a message waiting for the one slot in flight is "busy").
      for (const reason of ["open", "half-open"])
        expect(await metric(agent, "ifp_outbound_circuit_rejections_total", { reason })).toBe(0);
    } finally {
      await agent.close();
      await peer.close();
    }
  });
});

describe("the in-flight cap of a destination", () => {
  it("keeps at most maxInFlight requests under way at the peer, and delivers every message once", async () => {
    const peer = await scriptedPeer(env.tls, () => ({ status: 202, delayMs: 300 }));
    const agent = await sender("cap", peer, { maxInFlight: 2 });
    try {
      const ids = await sendMany(agent.localApiUrl, 8);
      for (const id of ids) await untilState(agent.localApiUrl, id, "delivered");
      expect(peer.load.max).toBe(2);
      expect(peer.requests.map((r) => r.headers["idempotency-key"]).sort()).toEqual([...ids].sort());
      expect(await metric(agent, "ifp_outbound_circuit_rejections_total", { reason: "busy" })).toBeGreaterThan(0);
    } finally {
      await agent.close();
      await peer.close();
    }
  });
});

describe("the timeout of a destination", () => {
  it("ends a request the peer does not answer within the timeout as a failed attempt, and retries", async () => {
    const peer = await scriptedPeer(env.tls, (n) => ({ status: 202, delayMs: n === 1 ? 5_000 : 0 }));
    const agent = await sender("timeout", peer, { timeout: "500ms" });
    try {
      const started = Date.now();
      const [id] = await sendMany(agent.localApiUrl, 1);
      const done = await untilState(agent.localApiUrl, id!, "delivered");
      expect(done.recipients[0]).toMatchObject({ attempts: 2, last_status: 202 });
      expect(Date.now() - started).toBeLessThan(4_000);
      expect(peer.requests.length).toBe(2);
    } finally {
      await agent.close();
      await peer.close();
    }
  });
});

describe("the timeout and the circuit of a relay", () => {
  it("ends a publish the relay does not answer within the timeout as a failed attempt, opens the relay's circuit, and closes it when the probe is taken", async () => {
    // The peer's only relay hangs twice (10 s each, past the 500 ms timeout), then takes the message.
    const relay = await scriptedPeer(env.tls, (n) => ({ status: 202, delayMs: n <= 2 ? 10_000 : 0 }));
    const agent = await sender(
      "relay-timeout",
      relay,
      { failureThreshold: 2, coolDown: "1s", maxInFlight: 1, timeout: "500ms" },
      { viaRelay: true },
    );
    try {
      const started = Date.now();
      const [id] = await sendMany(agent.localApiUrl, 1);
      const open = await waitFor(
        "the relay's circuit to open",
        async () => (await circuits(agent.localApiUrl)).circuits[0],
      );
      expect(open).toMatchObject({ destination: relay.url, state: "open", failures: 2 });
      expect(relay.requests.length).toBe(2);
      const done = await untilState(agent.localApiUrl, id!, "delivered");
      // Two attempts ended by the timeout, then the probe: well before one hanging publish would have ended.
      expect(Date.now() - started).toBeLessThan(6_000);
      expect(done.recipients[0]).toMatchObject({ attempts: 3 });
      expect(relay.requests.length).toBe(3);
      expect(await circuits(agent.localApiUrl)).toEqual({ total: 0, circuits: [] });
    } finally {
      await agent.close();
      await relay.close();
    }
  });
});
