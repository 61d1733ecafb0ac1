import { describe, expect, it } from "vitest";
import { Relay } from "../resources/relay.ts";
import { relayNames, relayStreamConfig } from "./relay-stream.ts";

const relay = (
  spec: Record<string, unknown> = {},
  metadata: Record<string, unknown> = { name: "edge", namespace: "team-a" },
) =>
  Relay.parse({
    apiVersion: "ifp.dev/v1alpha1",
    kind: "Relay",
    metadata,
    spec: { url: "https://relay.example", ...spec },
  });

describe("JetStream names of a Relay", () => {
  it("derive from namespace/name, with every token safe in subjects", () => {
    const n = relayNames(relay());
    expect(n.stream).toBe("IFP_RELAY_team-a_2Fedge");
    expect(n.subjects).toBe("ifp.relay.team-a_2Fedge.>");
    expect(n.mailbox("bob.agent")).toBe("ifp.relay.team-a_2Fedge.mbox.bob_2Eagent.>");
    expect(n.copy("carol*>", "01J 9.x")).toBe("ifp.relay.team-a_2Fedge.mbox.carol_2A_3E.01J_209_2Ex");
    expect(n.dead("bob", "m1")).toBe("ifp.relay.team-a_2Fedge.dead.bob.m1");
    expect(n.pushConsumer("bob.agent")).toBe("push_bob_2Eagent");
    // Mailboxes of different agents never overlap, whatever their ids.
    expect(n.copy("a.b", "c")).not.toBe(n.copy("a", "b.c"));
    expect(relayNames(relay({}, {})).stream).toBe("IFP_RELAY_relay_2Eexample");
  });
});

describe("the stream a Relay asks for", () => {
  it("defaults: file storage, 7 days, no size limits, discard new, TTLs allowed, 48 h duplicate window", () => {
    expect(relayStreamConfig(relay())).toEqual({
      name: "IFP_RELAY_team-a_2Fedge",
      subjects: ["ifp.relay.team-a_2Fedge.>"],
      retention: "limits",
      storage: "file",
      discard: "new",
      max_age: 168 * 3600 * 1e9,
      max_bytes: 1024 * 1024 * 1024,
      max_msgs: -1,
      num_replicas: 1,
      duplicate_window: 48 * 3600 * 1e9,
      allow_msg_ttl: true,
      allow_direct: true,
    });
  });

  it("takes spec.retention, and keeps the duplicate window within max_age", () => {
    const c = relayStreamConfig(
      relay({ retention: { maxAge: "24h", maxBytes: 1_000_000, maxMessages: 5000, storage: "memory", replicas: 3 } }),
    );
    expect(c).toMatchObject({
      storage: "memory",
      max_age: 24 * 3600 * 1e9,
      max_bytes: 1_000_000,
      max_msgs: 5000,
      num_replicas: 3,
      duplicate_window: 24 * 3600 * 1e9,
    });
  });
});
