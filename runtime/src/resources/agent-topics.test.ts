import { describe, expect, it } from "vitest";
import { Agent } from "./agent.ts";

const withTopics = (topics: unknown) =>
  Agent.safeParse({
    apiVersion: "ifp.dev/v1alpha1",
    kind: "Agent",
    spec: { agentId: "alice-agent", relay: { urls: ["https://relay.example"], topics } },
  });

describe("spec.relay.topics", () => {
  it("takes dot-notation topic names and defaults to none", () => {
    expect(withTopics(["capabilities.update", "gossip.exchange"]).data?.spec.relay?.topics).toEqual([
      "capabilities.update",
      "gossip.exchange",
    ]);
    expect(withTopics(undefined).data?.spec.relay?.topics).toEqual([]);
  });

  it("refuses names a relay would refuse, and too many", () => {
    for (const bad of ["", "topic:capabilities.update", "a..b", ".a", "a b", "caps.*", "x".repeat(129), 42])
      expect(withTopics([bad]).success, JSON.stringify(bad)).toBe(false);
    expect(withTopics(Array.from({ length: 33 }, (_, i) => `t${i}`)).success).toBe(false);
    expect(withTopics("capabilities.update").success).toBe(false);
  });
});
