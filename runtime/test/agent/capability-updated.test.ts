import { Kvm } from "@nats-io/kv";
import { connect } from "@nats-io/transport-node";
import { describe, expect, it } from "vitest";
import type { NatsServer } from "../../../e2e/support/nats.ts";
import { secondAfter } from "../../../e2e/support/wait.ts";
import { agentNames } from "../../src/agent/names.ts";
import { capabilitiesHash } from "../../src/contract/capabilities.ts";
import { Agent } from "../../src/resources/agent.ts";
import { identity } from "../support/fixtures.ts";
import { runAgent, type Tls, withNatsAndTls } from "../support/agent-harness.ts";

let nats: NatsServer;
let tls: Tls;
withNatsAndTls((n, t) => ([nats, tls] = [n, t]));

const capabilities = [{ name: "ping", description: "Responds to connectivity tests" }];

/** The capability document an agent with this spec serves, started afresh (the bucket remembers `updated`). */
async function served(
  self: ReturnType<typeof identity>,
  spec: Record<string, unknown>,
  annotations?: Record<string, string>,
): Promise<{ updated: string; etag: string }> {
  const a = await runAgent({ self, natsUrl: nats.url, tls, spec: { capabilities, ...spec }, annotations });
  try {
    const res = await a.get("/.well-known/agent/capabilities");
    return { updated: res.json().updated, etag: String(res.headers.etag) };
  } finally {
    await a.close();
  }
}

describe("the capability document's updated", () => {
  it("moves with any change of what the document says, relays included, and stays put otherwise", async () => {
    const self = identity("updated-agent");
    const first = await served(self, { relay: { urls: ["https://relay-one.example"] } });
    // `updated` has a resolution of a second: a change within the same second could not show.
    await secondAfter(first.updated);
    expect(await served(self, { relay: { urls: ["https://relay-one.example"] } })).toEqual(first);
    const moved = await served(self, { relay: { urls: ["https://relay-two.example"] } });
    expect(Date.parse(moved.updated)).toBeGreaterThan(Date.parse(first.updated));
    await secondAfter(moved.updated);
    const preference = await served(self, { relay: { urls: ["https://relay-two.example"], preference: "spread" } });
    expect(Date.parse(preference.updated)).toBeGreaterThan(Date.parse(moved.updated));
    await secondAfter(preference.updated);
    // The same capability list without relays is another document again.
    const none = await served(self, {});
    expect(Date.parse(none.updated)).toBeGreaterThan(Date.parse(preference.updated));
  });

  it("keeps the updated an earlier release recorded for the same capability list", async () => {
    const self = identity("upgraded-agent");
    const names = agentNames(self.agentId);
    const agent = Agent.parse({
      apiVersion: "ifp.dev/v1alpha1",
      kind: "Agent",
      metadata: { name: "x" },
      spec: { agentId: self.agentId, capabilities },
    });
    const nc = await connect({ servers: nats.url });
    try {
      const kv = await new Kvm(nc).create(names.kvBucket, { history: 1 });
      await kv.put(
        `${names.kvKey}.capabilities`,
        JSON.stringify({ hash: capabilitiesHash(agent), updated: "2024-01-02T03:04:05Z" }),
      );
    } finally {
      await nc.close();
    }
    expect((await served(self, {})).updated).toBe("2024-01-02T03:04:05Z");
  });

  it("takes the ifp.dev/capabilities-updated annotation as a floor, never freezing updated: a later change of the document moves it on", async () => {
    const self = identity("annotated-agent");
    const at = { "ifp.dev/capabilities-updated": "2025-06-01T00:00:00Z" };
    const relayOne = { relay: { urls: ["https://relay-one.example"] } };
    expect((await served(self, relayOne, at)).updated).toBe("2025-06-01T00:00:00Z");
    expect((await served(self, relayOne, at)).updated).toBe("2025-06-01T00:00:00Z");
    const moved = await served(self, { relay: { urls: ["https://relay-two.example"] } }, at);
    expect(Date.parse(moved.updated)).toBeGreaterThan(Date.parse("2025-06-01T00:00:00Z"));
    // An annotation later than the recorded change wins; one earlier leaves it as it is.
    const later = { "ifp.dev/capabilities-updated": "2099-01-01T00:00:00Z" };
    expect((await served(self, { relay: { urls: ["https://relay-two.example"] } }, later)).updated).toBe(
      "2099-01-01T00:00:00Z",
    );
    expect((await served(self, { relay: { urls: ["https://relay-two.example"] } }, at)).updated).toBe(moved.updated);
  });
});
