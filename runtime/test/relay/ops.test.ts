import { jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startNats } from "../../../e2e/support/nats.ts";
import { httpsRequest } from "../../../e2e/support/https.ts";
import { describeExit, spawnProcess } from "../../../e2e/support/process.ts";
import { RelayClient } from "../../src/net/relay-client.ts";
import { relayNames } from "../../src/contract/relay-stream.ts";
import { peerOf, signed, tempDir, writeRelayManifest } from "../support/fixtures.ts";
import { onFreePorts } from "../support/free-ports.ts";
import { untilReady } from "../support/runtime-process.ts";
import { tlsHandshake } from "../support/probes.ts";
import {
  alice,
  bob,
  carol,
  clientOf,
  ids,
  randomName,
  relayEnv,
  runRelay,
  waitFor,
  webhook,
  type RelayEnv,
} from "../support/relay-harness.ts";

let env: RelayEnv;
beforeAll(async () => {
  env = await relayEnv();
});
afterAll(async () => {
  await env?.close();
});

async function streamConfig(name: string) {
  const nc = await connect({ servers: env.nats.url });
  try {
    const jsm = await jetstreamManager(nc);
    return (
      await jsm.streams.info(relayNames({ metadata: { name }, spec: { url: "https://relay.test" } } as never).stream)
    ).config;
  } finally {
    await nc.close();
  }
}

describe("relay: retention on JetStream", () => {
  it("creates its stream from spec.retention: file storage, discard new, per-message TTL, limits", async () => {
    const name = randomName();
    const relay = await runRelay(
      env,
      { retention: { maxAge: "72h", maxMessages: 1000, maxBytes: 10_000_000, duplicateWindow: "24h" } },
      name,
    );
    await relay.close();
    expect(await streamConfig(name)).toMatchObject({
      storage: "file",
      discard: "new",
      allow_msg_ttl: true,
      max_age: 72 * 3600 * 1e9,
      max_msgs: 1000,
      max_bytes: 10_000_000,
      duplicate_window: 24 * 3600 * 1e9,
    });
  });

  it("refuses with 503 relay_full and Retry-After at maxMessages, and takes messages again once some are acknowledged", async () => {
    const relay = await runRelay(env, { retention: { maxMessages: 3 } });
    const c = (who: typeof alice) => clientOf(env, relay, who);
    try {
      for (let i = 0; i < 3; i++) expect((await c(alice).publish(signed(alice, "bob-agent"))).status).toBe(202);
      const refused = signed(alice, "bob-agent");
      const full = await c(alice).publish(refused);
      expect(full.status).toBe(503);
      expect(JSON.parse(full.text)).toMatchObject({ status: "error", code: "relay_full" });
      expect(Number(full.retryAfter)).toBeGreaterThan(0);
      // Nothing unacknowledged was dropped to make room, and the refused one is not stored.
      const waiting = (await c(bob).pull()).messages;
      expect(waiting).toHaveLength(3);
      expect(ids(waiting)).not.toContain(refused.headers.message_id);
      // A message for two recipients that does not fit is refused as a whole (503), and
      // the sender's retry later stores what is missing.
      await c(bob).ack(waiting[0]!.headers.message_id);
      const two = signed(alice, ["bob-agent", carol.agentId]);
      expect((await c(alice).publish(two)).status).toBe(503);
      await c(bob).ack(waiting[1]!.headers.message_id);
      expect(JSON.parse((await c(alice).publish(two)).text)).toMatchObject({ status: "accepted", recipients: 2 });
      expect(ids((await c(carol).pull()).messages)).toEqual([two.headers.message_id]);
    } finally {
      await relay.close();
    }
  });

  it("refuses with 503 relay_full at maxBytes", async () => {
    const relay = await runRelay(env, { retention: { maxBytes: 20_000 } });
    const c = clientOf(env, relay, alice);
    try {
      const statuses: number[] = [];
      for (let i = 0; i < 8; i++)
        statuses.push((await c.publish(signed(alice, "bob-agent", {}, "y".repeat(4000)))).status);
      expect(statuses.slice(0, 3)).toEqual([202, 202, 202]);
      expect(statuses.at(-1)).toBe(503);
      const res = await c.publish(signed(alice, "bob-agent", {}, "y".repeat(4000)));
      expect(JSON.parse(res.text)).toMatchObject({ code: "relay_full" });
    } finally {
      await relay.close();
    }
  });

  it("discards messages nobody acknowledged after maxAge", async () => {
    const relay = await runRelay(env, { retention: { maxAge: "1s" } });
    const c = (who: typeof alice) => clientOf(env, relay, who);
    try {
      const m = signed(alice, "bob-agent");
      await c(alice).publish(m);
      expect(ids((await c(bob).pull()).messages)).toEqual([m.headers.message_id]);
      await waitFor("maxAge to pass", async () => (await c(bob).pull()).messages.length === 0, 5_000, 100);
    } finally {
      await relay.close();
    }
  });
});

describe("relay: restarts and outages", () => {
  it("keeps messages, topic subscriptions and webhook registrations across a restart, and applies a changed retention", async () => {
    const dir = tempDir();
    const name = randomName("durable");
    const hook = await webhook(env, () => 200);
    const first = await runRelay(env, {}, name, dir);
    const m = signed(alice, "bob-agent");
    await clientOf(env, first, alice).publish(m);
    await clientOf(env, first, carol).subscribe(["gossip.exchange"]);
    await clientOf(env, first, alice).registerWebhook(hook.url);
    await first.close();

    const second = await runRelay(env, { retention: { maxMessages: 500 } }, name, dir);
    try {
      expect(ids((await clientOf(env, second, bob).pull()).messages)).toEqual([m.headers.message_id]);
      expect(await clientOf(env, second, carol).subscriptions()).toMatchObject({ topics: ["gossip.exchange"] });
      const t = signed(bob, "topic:gossip.exchange");
      expect(JSON.parse((await clientOf(env, second, bob).publish(t)).text)).toMatchObject({ recipients: 1 });
      expect(ids((await clientOf(env, second, carol).pull()).messages)).toEqual([t.headers.message_id]);
      // Alice's webhook is still registered: a message for her is pushed.
      const forAlice = signed(bob, "alice-agent");
      await clientOf(env, second, bob).publish(forAlice);
      await waitFor("the push after the restart", () =>
        hook.calls.some((x) => x.body.headers.message_id === forAlice.headers.message_id),
      );
      expect((await streamConfig(name)).max_msgs).toBe(500);
    } finally {
      await second.close();
      await hook.close();
    }
  });

  it("answers 503 with Retry-After while NATS is away, never 202, and recovers when it is back", async () => {
    const nats = await startNats();
    const local = { ...env, nats };
    const relay = await runRelay(local);
    const c = (who: typeof alice) => clientOf(local, relay, who);
    try {
      const before = signed(alice, "bob-agent");
      expect((await c(alice).publish(before)).status).toBe(202);
      await nats.stop();
      await waitFor(
        "readiness to drop",
        async () => (await httpsRequest(`${relay.url}/readyz`, { ca: env.tls.ca })).status === 503,
      );
      const lost = signed(alice, "bob-agent");
      const res = await c(alice).publish(lost);
      expect(res.status).toBe(503);
      expect(JSON.parse(res.text)).toMatchObject({ status: "error", code: "unavailable" });
      expect(Number(res.retryAfter)).toBeGreaterThan(0);
      for (const r of [
        await c(bob).request("GET", "/relay/messages"),
        await c(bob).request("DELETE", `/relay/messages/${before.headers.message_id}`),
        await c(bob).request("POST", "/relay/subscribe", { subscribe: { topics: ["a.b"] } }),
      ]) {
        expect(r.status).toBe(503);
        expect(r.headers.get("retry-after")).toBeTruthy();
      }
      await nats.restart();
      await waitFor(
        "readiness to return",
        async () => (await httpsRequest(`${relay.url}/readyz`, { ca: env.tls.ca })).status === 200,
        20_000,
      );
      expect((await c(alice).publish(lost)).status).toBe(202);
      expect(ids((await c(bob).pull()).messages)).toEqual(ids([before, lost]));
    } finally {
      await relay.close();
      await nats.close();
    }
  });

  it("runs from the documented start contract as a child process", async () => {
    const dir = tempDir();
    const manifest = writeRelayManifest(
      dir,
      { url: "https://localhost", agents: [peerOf(alice), peerOf(bob)] },
      randomName("cli"),
    );
    // Its output is kept and printed should the test fail. On a free port, chosen again when another
    // test's server took it before the relay listened.
    const { child, port } = await onFreePorts(["https"], async ({ https: port }) => {
      const child = spawnProcess(
        "ifp-runtime relay",
        process.execPath,
        [
          new URL("../../bin/ifp-runtime.ts", import.meta.url).pathname,
          "relay",
          ...["--manifest", manifest, "--port", String(port), "--metrics-port", "0", "--host", "127.0.0.1"],
          ...["--tls-cert", env.tls.files.cert, "--tls-key", env.tls.files.key, "--nats", env.nats.url],
        ],
        { env: { ...process.env, IFP_LOG_LEVEL: "warn" } },
      );
      await untilReady(child, `https://localhost:${port}`, env.tls.ca);
      return { child, port };
    });
    try {
      const m = signed(alice, "bob-agent");
      expect((await new RelayClient(`https://localhost:${port}`, alice.signing, env.http).publish(m)).status).toBe(202);
      expect(ids((await new RelayClient(`https://localhost:${port}`, bob.signing, env.http).pull()).messages)).toEqual([
        m.headers.message_id,
      ]);
      // TLS 1.2 or later only: the server refuses a client that offers 1.0/1.1 (protocol_version
      // alert), and the same client allowed 1.2 connects.
      expect(await tlsHandshake(port, env.tls.ca, { minVersion: "TLSv1", maxVersion: "TLSv1.1" })).toMatchObject({
        ok: false,
        code: "ERR_SSL_TLSV1_ALERT_PROTOCOL_VERSION",
      });
      expect(await tlsHandshake(port, env.tls.ca, { minVersion: "TLSv1", maxVersion: "TLSv1.2" })).toEqual({
        ok: true,
        protocol: "TLSv1.2",
      });
      // SIGTERM is a clean stop: exit code 0.
      expect(describeExit(await child.stop()), child.log()).toBe("exited with code 0");
    } finally {
      // Only cleanup here (bounded, and a no-op once it ended), so that a failure above is the one reported.
      await child.stop({ signal: "SIGKILL" });
    }
  });
});
