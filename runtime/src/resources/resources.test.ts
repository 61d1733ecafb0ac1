import { describe, expect, it } from "vitest";
import { Agent } from "./agent.ts";
import { parseDuration } from "./fields.ts";
import { Relay } from "./relay.ts";

describe("parseDuration", () => {
  it("reads Go-style durations", () => {
    expect(parseDuration("168h")).toBe(7 * 24 * 3600_000);
    expect(parseDuration("1m30s")).toBe(90_000);
    expect(parseDuration("250ms")).toBe(250);
    expect(parseDuration("1.5h")).toBe(5_400_000);
  });
  it("refuses anything else", () => {
    for (const bad of ["", "7d", "10", "h", "-1s", "1 h"]) expect(() => parseDuration(bad)).toThrow(/invalid duration/);
  });
});

describe("resource schemas", () => {
  it("fill the documented defaults of an Agent", () => {
    const a = Agent.parse({
      apiVersion: "ifp.dev/v1alpha1",
      kind: "Agent",
      spec: { agentId: "a", capabilities: [{ name: "ping", description: "p" }] },
    });
    expect(a.spec.inbox).toEqual({
      maxMessageBytes: 1048576,
      maxBytes: 64 * 1024 * 1024,
      rateLimit: { perSenderPerMinute: 60, perSenderBytesPerHour: 64 * 1024 * 1024, perAddressPerMinute: 1200 },
      requireSignature: true,
      replayWindow: "48h",
      sequenceCheck: "record",
    });
    expect(a.spec.capabilities[0]!.version).toBe("1");
    expect(a.spec.signing.keyId).toBe("key-1");
  });

  it("fill the documented defaults of a Relay", () => {
    const r = Relay.parse({ apiVersion: "ifp.dev/v1alpha1", kind: "Relay", spec: { url: "https://relay.example" } });
    expect(r.spec.retention).toMatchObject({
      maxAge: "168h",
      storage: "file",
      replicas: 1,
      maxBytes: 1024 * 1024 * 1024,
      maxMessages: -1,
    });
    expect(r.spec.delivery).toMatchObject({ retries: 10, backoff: "exponential", backoffDelay: "1s", timeout: "10s" });
  });

  it("refuse bad fields with their path", () => {
    const r = Agent.safeParse({
      apiVersion: "ifp.dev/v1alpha1",
      kind: "Agent",
      spec: {
        agentId: "a",
        capabilities: [{ name: "bad name", description: "x", conditions: { temperature: "tepid" } }],
        peers: [{ agentId: "p", keys: [{ keyId: "k", publicKey: "short" }] }],
      },
    });
    expect(r.success).toBe(false);
    const paths = r.error!.issues.map((i) => i.path.join("."));
    expect(paths).toEqual(
      expect.arrayContaining([
        "spec.capabilities.0.name",
        "spec.capabilities.0.conditions.temperature",
        "spec.peers.0.keys.0.publicKey",
      ]),
    );
    expect(
      Relay.safeParse({ apiVersion: "ifp.dev/v1alpha1", kind: "Relay", spec: { url: "http://plain.example" } }).success,
    ).toBe(false);
  });
});
