import { describe, expect, it } from "vitest";
import type { NatsServer } from "../../../e2e/support/nats.ts";
import { runAgent, type Tls, withNatsAndTls } from "../support/agent-harness.ts";
import { identity, peerOf, signed } from "../support/fixtures.ts";

let nats: NatsServer;
let tls: Tls;
withNatsAndTls((n, t) => ([nats, tls] = [n, t]));

describe("identity documents and shared caches", () => {
  it("serves an identity document built from the Host header as private (Vary: Host), one from spec.baseUrl as public", async () => {
    const fromHost = await runAgent({ self: identity("host-doc"), natsUrl: nats.url, tls, spec: {} });
    const fixed = await runAgent({
      self: identity("base-doc"),
      natsUrl: nats.url,
      tls,
      spec: { baseUrl: "https://agent.example.com" },
    });
    try {
      const a = await fromHost.get("/.well-known/agent/identity", { host: "localhost" });
      expect(a.status).toBe(200);
      expect(a.headers["cache-control"]).toMatch(/^private\b/);
      expect(a.headers.vary).toMatch(/host/i);
      expect(JSON.parse(a.text).endpoints.inbox).toBe("https://localhost/.well-known/agent/inbox");
      const b = await fixed.get("/.well-known/agent/identity", { host: "localhost" });
      expect(b.headers["cache-control"]).toMatch(/^public\b/);
      expect(JSON.parse(b.text).endpoints.inbox).toBe("https://agent.example.com/.well-known/agent/inbox");
      // The capability document never depends on the host.
      expect((await fromHost.get("/.well-known/agent/capabilities")).headers["cache-control"]).toMatch(/^public\b/);
    } finally {
      await Promise.all([fromHost.close(), fixed.close()]);
    }
  });
});

describe("requireSignature: false", () => {
  it("accepts a stranger's signed message like an unsigned one, and still refuses a known peer's bad signature", async () => {
    const self = identity("open-inbox");
    const friend = identity("friend-of-open");
    const agent = await runAgent({
      self,
      natsUrl: nats.url,
      tls,
      spec: { peers: [peerOf(friend)], inbox: { requireSignature: false } },
    });
    try {
      const stranger = identity("stranger-to-open");
      expect((await agent.post(signed(stranger, self.agentId))).status).toBe(202);
      const forged = signed(identity(friend.agentId), self.agentId);
      const res = await agent.post(forged);
      expect(res.status).toBe(401);
      expect(JSON.parse(res.text)).toMatchObject({ code: "invalid_signature" });
    } finally {
      await agent.close();
    }
  });
});
