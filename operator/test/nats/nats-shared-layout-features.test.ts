// What the agent runtime serves on the isolated shared layout beyond the basics of
// nats-shared-layout-runtime.test.ts, on a real nats-server in operator mode with the install's
// accounts and consumers (runtime/bench/scale-isolated.ts): spec.inbox.maxBytes bounds one Agent's
// inbox in the tenant's shared one (the runtime's count of its bytes), the watch looks back
// (`?since=`, the runtime's record of what it stored) and a changed capability document reaches
// the peers of recent conversations (an index of the latest record of each peer).
import { capabilityUpdateId } from "../../../runtime/src/agent/relays/relays.ts";
import { randomUUID } from "node:crypto";
import { Kvm } from "@nats-io/kv";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { consistently, freePort, waitFor } from "../../../e2e/support/ports.ts";
import { secondAfter } from "../../../e2e/support/wait.ts";
import type { IsolatedInstall } from "../../../runtime/bench/scale-isolated.ts";
import { LocalApiClient } from "../../../runtime/src/client/local.ts";
import type { AgentSpecInput } from "../../../runtime/src/resources/agent.ts";
import { isolatedAgent, startIsolatedRuntimes } from "../support/isolated-runtimes.ts";
import { watchInbox } from "../../../runtime/test/support/inbox-watch.ts";
import { runAgent, startHandler, type Tls } from "../../../runtime/test/support/agent-harness.ts";
import { identity, peerOf, signed } from "../../../runtime/test/support/fixtures.ts";

const TENANT = "team-2";
const alice = identity("alice-agent");
const bob = identity("bob-agent");
const carol = identity("carol-agent");
const MIB = 1024 * 1024;

type Running = Awaited<ReturnType<typeof runAgent>>;
let install: IsolatedInstall;
let tls: Tls;
const agents: Record<string, Running> = {};
const ports: Record<string, number> = {};
const handlers: Awaited<ReturnType<typeof startHandler>>[] = [];
const accounts: Record<string, string> = {};
const credsFiles: Record<string, string> = {};
const ids = { alice, bob, carol } as const;
type Name = keyof typeof ids;

/** The runtime of one Agent of the tenant, every other its peer at its port, with a handler of its own. */
async function start(name: Name, more: Omit<AgentSpecInput, "agentId"> = {}): Promise<Running> {
  const handler = await startHandler();
  handlers.push(handler);
  const r = await runAgent({
    natsUrl: install.server.url,
    tls,
    natsLayout: "isolated",
    self: ids[name],
    port: ports[name],
    natsCredsFile: credsFiles[name],
    resource: { name, namespace: TENANT },
    spec: {
      peers: (Object.keys(ids) as Name[])
        .filter((n) => n !== name)
        .map((n) => ({ ...peerOf(ids[n]), url: `https://localhost:${ports[n]}` })),
      handler: { url: handler.url },
      outbound: { backoff: ["300ms"], retryFor: "30s" },
      ...more,
    },
  });
  agents[name] = r;
  return r;
}

/** A watch of the agent's inbox (its local API's GET /messages/watch). */
const watch = (agent: Running, query = "") => watchInbox(agent.localApiUrl, query);

beforeAll(async () => {
  let dir: string;
  ({ install, tls, dir } = await startIsolatedRuntimes("ifp-shared-features-"));
  for (const name of Object.keys(ids) as Name[]) {
    ({ account: accounts[name], credsFile: credsFiles[name] } = await isolatedAgent(
      install,
      dir,
      TENANT,
      name,
      ids[name].agentId,
    ));
    ports[name] = await freePort();
  }
  await Promise.all([
    // alice's inbox takes 1 MiB, the least spec.inbox.maxBytes takes; bob's and carol's the default 64 MiB.
    start("alice", { inbox: { maxBytes: MIB } }),
    start("bob"),
    start("carol"),
  ]);
}, 120_000);
afterAll(async () => {
  await Promise.all(Object.values(agents).map((a) => a.close()));
  await Promise.all(handlers.map((h) => h.close()));
  await install?.close();
});

describe("the agent runtime on the isolated layout: per-Agent bounds, the watch's look back, capability updates", () => {
  it("bounds alice's inbox by her spec.inbox.maxBytes (503 inbox_full) while bob's in the same tenant's inbox still takes messages", async () => {
    const big = (to: Name, text: string) => signed(ids[to === "alice" ? "bob" : "alice"], `${to}-agent`, {}, text);
    const first = big("alice", `1 ${"x".repeat(400_000)}`);
    expect((await agents.alice!.post(first)).status).toBe(202);
    expect((await agents.alice!.post(big("alice", `2 ${"x".repeat(400_000)}`))).status).toBe(202);
    // 1.2 MB would pass her 1 MiB.
    const third = big("alice", `3 ${"x".repeat(400_000)}`);
    const full = await agents.alice!.post(third);
    expect(full.status).toBe(503);
    expect(full.headers["retry-after"]).toBe("300");
    expect(full.json()).toMatchObject({ status: "error", code: "inbox_full" });
    // A repeat of a stored message is a duplicate still, full or not.
    expect((await agents.alice!.post(first)).status).toBe(202);
    // The tenant's inbox has room: bob, in the same namespace, takes as much and more.
    for (const n of [1, 2, 3, 4])
      expect((await agents.bob!.post(big("bob", `${n} ${"y".repeat(400_000)}`))).status, `bob's ${n}`).toBe(202);
    // What is left of her 1 MiB still takes a small message; the third one, tried again, not.
    expect((await agents.alice!.post(signed(carol, "alice-agent", {}, "small"))).status).toBe(202);
    expect((await agents.alice!.post(third)).status).toBe(503);
  }, 60_000);

  it("looks back on the inbox with ?since=: the messages stored within it, by sequence, then each new one once; none of another Agent's", async () => {
    const earlier = [1, 2].map((n) => signed(alice, "bob-agent", {}, `Before the watch ${n}`));
    for (const m of earlier) expect((await agents.bob!.post(m)).status).toBe(202);
    const forCarol = signed(alice, "carol-agent", {}, "Not bob's");
    expect((await agents.carol!.post(forCarol)).status).toBe(202);

    const w = await watch(agents.bob!, "?since=600");
    expect(w.status).toBe(200);
    try {
      const ids = earlier.map((m) => m.headers.message_id);
      const back = await waitFor("the look back", () => {
        const seen = w.events.filter((e) => ids.includes(e.message_id));
        return seen.length === 2 ? seen : undefined;
      });
      expect(back.map((e) => e.message_id)).toEqual(ids);
      expect(back[0].seq).toBeLessThan(back[1].seq);
      expect(back[0]).toMatchObject({
        sender: "alice-agent",
        handed_on: true,
        message: { body: { text: "Before the watch 1" } },
      });
      const later = signed(alice, "bob-agent", {}, "After the watch began");
      expect((await agents.bob!.post(later)).status).toBe(202);
      await waitFor("the new message", () => w.events.some((e) => e.message_id === later.headers.message_id));
      await consistently(
        "each message once, and none of carol's",
        () =>
          [...ids, later.headers.message_id].every((id) => w.events.filter((e) => e.message_id === id).length === 1) &&
          !w.events.some((e) => e.message_id === forCarol.headers.message_id),
        1_000,
      );
    } finally {
      await w.stop();
    }
    // A watch from now shows none of them; a look back past a week is refused.
    const now = await watch(agents.bob!);
    try {
      // The witness: a message stored once the watch began is watched, and it alone.
      const fresh = signed(alice, "bob-agent", {}, "After the second watch began");
      expect((await agents.bob!.post(fresh)).status).toBe(202);
      await waitFor("the fresh message", () => now.events.some((e) => e.message_id === fresh.headers.message_id));
      await consistently(
        "nothing from before",
        () => now.events.length === 1 && now.events[0]?.message_id === fresh.headers.message_id,
        500,
      );
    } finally {
      await now.stop();
    }
    expect((await watch(agents.bob!, "?since=604801")).status).toBe(400);
  }, 60_000);

  it("tells the peers of recent conversations of a changed capability document, from the latest record of each peer", async () => {
    // alice and carol have written to bob (signed) in several conversations: one index entry each.
    for (const from of [alice, alice, carol])
      expect(
        (await agents.bob!.post(signed(from, "bob-agent", { conversation_id: `conv:${randomUUID()}` }, "Hello")))
          .status,
      ).toBe(202);
    // Read as bob's runtime reads it, with his own credential.
    const kv = await new Kvm((await install.runtimeClient(`${TENANT}/bob`)).js).open("ifp_conv", {
      allow_direct: true,
    });
    const listed = (await kv.get(`${accounts.bob}._i.peers`))!.json<string[]>();
    expect(listed.map((k) => k.split(".")[1]).sort()).toEqual(["alice-agent", "carol-agent"]);

    const before = (await agents.bob!.get("/.well-known/agent/capabilities")).json();
    await agents.bob!.close();
    await secondAfter(before.updated); // `updated` has a resolution of a second
    const b = await start("bob", { capabilities: [{ name: "translate", description: "translate" }] });
    const after = (await b.get("/.well-known/agent/capabilities")).json();
    expect(after.updated).not.toBe(before.updated);
    // Queued in bob's outbox for carol (alice's full inbox refuses hers) and delivered like any message.
    const updateId = capabilityUpdateId(after, "carol-agent");
    await waitFor(
      "the update delivered to carol",
      async () =>
        (await new LocalApiClient(b.localApiUrl).status(updateId).catch(() => undefined))?.state === "delivered",
    );
    await waitFor("carol learned bob's document from it", () =>
      agents
        .carol!.logLines()
        .some((l) => l.msg === "learned peer capabilities" && l.source === "announcement" && l.peer === "bob-agent"),
    );
  }, 90_000);
});
