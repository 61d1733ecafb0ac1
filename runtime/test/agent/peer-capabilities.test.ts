import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { announceCapabilities } from "../../src/agent/relays/relays.ts";
import { LocalApiClient } from "../../src/client/local.ts";
import type { CapabilityDocument } from "../../src/protocol/documents.ts";
import { signMessage } from "../../src/protocol/signing.ts";
import { RelayClient } from "../../src/net/relay-client.ts";
import type { RunningRelay } from "../../src/relay/main.ts";
import { identity, peerOf, signed, type TestIdentity } from "../support/fixtures.ts";
import { runAgent } from "../support/agent-harness.ts";
import { baseUrl, relayEnv, runRelay, waitFor, type RelayEnv } from "../support/relay-harness.ts";
import { runtimeLog } from "../support/runtime-log.ts";
import { scriptedPeer } from "../support/outbox-harness.ts";

// Each test has the peers it speaks of to itself, and sets up what alice knows of them: bob and
// carol run (their endpoints serve their documents); dave, erin and frank are known through
// the relay only.
const alice = identity("alice-agent");
const bob = identity("bob-agent");
const carol = identity("carol-agent");
const dave = identity("dave-agent");
const erin = identity("erin-agent");
const frank = identity("frank-agent");

let env: RelayEnv;
let relay: RunningRelay;
let a: Awaited<ReturnType<typeof runAgent>>;
let b: Awaited<ReturnType<typeof runAgent>>;
let carolRuntime: Awaited<ReturnType<typeof runAgent>>;

const cap = (name: string) => ({ name, version: "1", description: name });

/** The local API of alice, as the application calls it. */
async function local(method: string, path: string, body?: unknown): Promise<{ status: number; json: any }> {
  const res = await fetch(`${a.localApiUrl}${path}`, {
    method,
    headers: body === undefined ? {} : { "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, json: await res.json().catch(() => undefined) };
}
const capabilitiesOf = (agent: string, query = "") =>
  local("GET", `/peers/${encodeURIComponent(agent)}/capabilities${query}`);
const names = (view: { json: { document: { capabilities: { name: string }[] } } }) =>
  view.json.document.capabilities.map((c) => c.name).sort();

const announcements = runtimeLog("capability announcements (test)");
/** `who` announces `document` on capabilities.update through the relay. */
const announce = (who: TestIdentity, document: CapabilityDocument) =>
  announceCapabilities({
    urls: [baseUrl(relay)],
    signing: who.signing,
    http: env.http,
    document,
    log: announcements.logger,
  });

/** `who`'s announcement of `document` in force at alice. */
async function announced(who: TestIdentity, document: CapabilityDocument) {
  await announce(who, document);
  return waitFor(`${who.agentId}'s announcement applied`, async () => {
    const v = await capabilitiesOf(who.agentId);
    return v.json?.source === "announcement" &&
      JSON.stringify(names(v)) === JSON.stringify(document.capabilities.map((x) => x.name).sort())
      ? v
      : undefined;
  });
}

/** A greeting from `who` to alice with a capability part, posted to alice's inbox; resolves once alice has merged it. */
async function greeted(who: TestIdentity, capabilities: { name: string; version?: string; description: string }[]) {
  const greeting = signed(who, "alice-agent", { phase: "greeting" });
  greeting.body.parts = [{ content_type: "application/json", name: "capabilities", content: { ifp: 7, capabilities } }];
  delete (greeting as { security?: unknown }).security;
  const message = signMessage(greeting, who.signing);
  expect((await a.post(message)).status).toBe(202);
  const view = await waitFor(`${who.agentId}'s greeting merged`, async () => {
    const v = await capabilitiesOf(who.agentId);
    return v.json?.source === "greeting" && v.json.message_id === message.headers.message_id ? v : undefined;
  });
  return { message, view };
}

beforeAll(async () => {
  env = await relayEnv();
  relay = await runRelay(env, { agents: [alice, bob, carol, dave, erin, frank].map((x) => peerOf(x)) });
  [b, carolRuntime] = await Promise.all([
    runAgent({
      self: bob,
      natsUrl: env.nats.url,
      tls: env.tls,
      spec: { capabilities: [cap("ping"), cap("calendar.availability")], peers: [peerOf(alice)] },
    }),
    runAgent({
      self: carol,
      natsUrl: env.nats.url,
      tls: env.tls,
      spec: { capabilities: [cap("ping")], peers: [peerOf(alice)] },
    }),
  ]);
  a = await runAgent({
    self: alice,
    natsUrl: env.nats.url,
    tls: env.tls,
    spec: {
      peers: [
        { ...peerOf(bob), url: b.url.replace("127.0.0.1", "localhost") },
        { ...peerOf(carol), url: carolRuntime.url.replace("127.0.0.1", "localhost") },
        ...[dave, erin, frank].map((x) => ({ ...peerOf(x), relay: { urls: [baseUrl(relay)] } })),
      ],
      relay: { urls: [baseUrl(relay)], pollInterval: "300ms", topics: ["capabilities.update"] },
      // The relay is this deployment's own: clear messages may go through it.
      encryption: { relayTrust: [{ url: baseUrl(relay), level: "self-operated" }] },
      outbound: { backoff: ["300ms"], retryFor: "30s" },
    },
  });
  // The runtime follows its topics on its relays.
  await waitFor("alice subscribed", async () =>
    (await new RelayClient(baseUrl(relay), alice.signing, env.http).subscriptions()).topics?.includes(
      "capabilities.update",
    ),
  );
});
afterAll(async () => {
  await Promise.all([a?.close(), b?.close(), carolRuntime?.close()]);
  await relay?.close();
  await env?.close();
  announcements.end();
});

describe("peer capabilities feed the outbox", () => {
  it("discovers a peer's capability document at its endpoint before any conversation", async () => {
    const view = await capabilitiesOf("bob-agent");
    expect(view.status).toBe(200);
    expect(view.json).toMatchObject({
      agent_id: "bob-agent",
      source: "endpoint",
      document: { ifp: 7, agent_id: "bob-agent", ifp_support: expect.arrayContaining([4]) },
    });
    expect(names(view)).toEqual(["calendar.availability", "ping"]);
    expect((await capabilitiesOf("bob-agent", "?refresh=true")).json).toMatchObject({ source: "endpoint" });
  });

  it("refuses at the outbox a message asking a capability the peer does not offer, and queues one it offers", async () => {
    const refused = await local("POST", "/outbox", {
      to: "bob-agent",
      text: "teleport me",
      capabilities: { request: ["ping", "teleport"] },
    });
    expect(refused.status).toBe(422);
    expect(refused.json).toMatchObject({
      status: "error",
      code: "capability_not_offered",
      message: expect.stringContaining('"teleport"'),
    });
    const ok = await local("POST", "/outbox", { to: "bob-agent", text: "ping?", capabilities: { request: ["ping"] } });
    expect(ok.status).toBe(202);
    // Offers are not checked, nor messages without a request.
    expect(
      (await local("POST", "/outbox", { to: "bob-agent", text: "hi", capabilities: { offer: ["teleport"] } })).status,
    ).toBe(202);
  });

  it("applies a capabilities.update announcement received on a followed topic", async () => {
    // carol's endpoint serves her document of start-up ({ping}); her announcement is newer.
    expect(names(await capabilitiesOf("carol-agent", "?refresh=true"))).toEqual(["ping"]);
    const document = {
      ifp: 7 as const,
      agent_id: "carol-agent",
      capabilities: [cap("ping"), cap("teleport")],
      ifp_support: [3, 4, 5, 6, 7, 8],
      updated: new Date().toISOString(),
    };
    const view = await announced(carol, document);
    expect(names(view)).toEqual(["ping", "teleport"]);
    // The endpoint still serves the older document; the newer announcement stays in force.
    expect((await capabilitiesOf("carol-agent", "?refresh=true")).json.source).toBe("announcement");
    expect(
      (await local("POST", "/outbox", { to: "carol-agent", text: "now", capabilities: { request: ["teleport"] } }))
        .status,
    ).toBe(202);
  });

  it("refuses a message in an IFP format the peer's ifp_support lacks", async () => {
    await announced(dave, {
      ifp: 7 as const,
      agent_id: "dave-agent",
      capabilities: [cap("ping")],
      ifp_support: [3, 5, 7, 8],
    });
    const refused = await local("POST", "/outbox", { to: ["dave-agent"], text: "hello" });
    expect(refused.status).toBe(422);
    expect(refused.json).toMatchObject({
      code: "unsupported_version",
      message: expect.stringContaining("ifp_support"),
    });
  });

  it("ignores an announcement whose document names another agent than its signer", async () => {
    // erin announcing a document that names bob changes nothing, neither for bob nor for erin.
    await announced(erin, { ifp: 7 as const, agent_id: "erin-agent", capabilities: [cap("ping")] });
    const before = names(await capabilitiesOf("bob-agent"));
    await announce(erin, { ifp: 7 as const, agent_id: "bob-agent", capabilities: [cap("forged")] });
    // What alice's runtime decided about it.
    await waitFor("the forged announcement refused", () =>
      a
        .logLines()
        .some(
          (l) =>
            l.msg === "ignored a capabilities.update about another agent" &&
            l.peer === "erin-agent" &&
            l.claimed === "bob-agent",
        ),
    );
    expect(names(await capabilitiesOf("bob-agent"))).toEqual(before);
    expect(names(await capabilitiesOf("erin-agent"))).toEqual(["ping"]);
  });

  it("merges a greeting's capability part over the baseline", async () => {
    await announced(frank, { ifp: 7 as const, agent_id: "frank-agent", capabilities: [cap("ping"), cap("teleport")] });
    const { message, view } = await greeted(frank, [
      { name: "gossip.exchange", description: "from the greeting" },
      { name: "ping", version: "2", description: "ping, refined" },
    ]);
    expect(view.json).toMatchObject({
      source: "greeting",
      message_id: message.headers.message_id,
      baseline: { source: "announcement" },
    });
    expect(names(view)).toEqual(["gossip.exchange", "ping", "teleport"]);
    expect(view.json.document.capabilities.find((x: { name: string }) => x.name === "ping")).toMatchObject({
      version: "2",
    });
  });

  it("keeps the endpoint document for its max-age, and asks again with ?refresh=true", async () => {
    // What alice knows of bob: his endpoint's document (served with max-age=300), fetched now,
    // refined by his greeting.
    expect(names(await capabilitiesOf("bob-agent", "?refresh=true"))).toEqual(["calendar.availability", "ping"]);
    const { view } = await greeted(bob, [{ name: "gossip.exchange", description: "from the greeting" }]);
    expect(view.json).toMatchObject({ baseline: { source: "endpoint" } });
    // Bob restarts on the same address with another capability set. Its `updated` has whole
    // seconds: the new set is stamped in a second after the greeting was learned.
    const port = Number(new URL(b.url).port);
    await b.close();
    const learned = Date.parse(view.json.learned_at as string);
    await waitFor(
      "a second after the greeting",
      () => Date.now() >= (Math.floor(learned / 1000) + 1) * 1000,
      5_000,
      20,
    );
    b = await runAgent({
      self: bob,
      port,
      natsUrl: env.nats.url,
      tls: env.tls,
      spec: { capabilities: [cap("ping"), cap("weather")], peers: [peerOf(alice)] },
    });
    expect(names(await capabilitiesOf("bob-agent"))).not.toContain("weather");
    const fresh = await capabilitiesOf("bob-agent", "?refresh=true");
    // A set that changed after the greeting supersedes the greeting's refinement.
    expect(fresh.json).toMatchObject({ source: "endpoint" });
    expect(fresh.json.baseline).toBeUndefined();
    expect(names(fresh)).toEqual(["ping", "weather"]);
    expect(await new LocalApiClient(a.localApiUrl).peerCapabilities("bob-agent", { refresh: true })).toMatchObject({
      source: "endpoint",
      agent_id: "bob-agent",
    });
    // The refreshed document is what the outbox checks from now on.
    expect(
      (
        await local("POST", "/outbox", {
          to: "bob-agent",
          text: "teleport?",
          capabilities: { request: ["calendar.availability"] },
        })
      ).status,
    ).toBe(422);
    expect(
      (await local("POST", "/outbox", { to: "bob-agent", text: "weather?", capabilities: { request: ["weather"] } }))
        .status,
    ).toBe(202);
  });

  it("answers bad input with the documented errors", async () => {
    expect(await capabilitiesOf("nobody-agent")).toMatchObject({ status: 404, json: { code: "not_found" } });
    expect(await capabilitiesOf("bob-agent", "?refresh=maybe")).toMatchObject({
      status: 400,
      json: { code: "invalid_format" },
    });
    // Agent ids are at most 512 characters; a long one still reaches the route.
    expect(await capabilitiesOf("x".repeat(600))).toMatchObject({ status: 400, json: { code: "invalid_format" } });
    expect(await capabilitiesOf(`did:key:z${"a".repeat(200)}`)).toMatchObject({
      status: 404,
      json: { code: "not_found" },
    });
    expect((await capabilitiesOf("x".repeat(5_000))).status).toBe(414);
    // A peer with no reachable endpoint and nothing learned is simply unchecked.
    expect(
      (
        await local("POST", "/outbox", {
          to: "https://localhost:1/agent",
          text: "hi",
          capabilities: { request: ["anything"] },
        })
      ).status,
    ).toBe(202);
  });
});

describe("announcing on capabilities.update", () => {
  it("asks a relay that answers 503 or cannot be reached again until it takes the announcement, and one that refuses it only once", async () => {
    const busy = await scriptedPeer(env.tls, (n) => ({ status: n < 3 ? 503 : 202 }));
    const refusing = await scriptedPeer(env.tls, () => ({ status: 400 }));
    try {
      await announceCapabilities({
        urls: [busy.url, refusing.url],
        signing: alice.signing,
        http: env.http,
        document: { capabilities: [cap("ping")] } as CapabilityDocument,
        log: announcements.logger,
        initialMs: 50,
      });
      expect(busy.requests.map((r) => r.body.headers.to)).toEqual(
        Array(3).fill([{ agent: "topic:capabilities.update" }]),
      );
      expect(refusing.requests.length).toBe(1);
    } finally {
      await busy.close();
      await refusing.close();
    }
  });
});
