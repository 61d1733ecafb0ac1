// spec.encryption.relayTrust compares a relay's URL in one form: however a peer's document or the
// spec writes the host (case, a trailing dot, Unicode or its IDNA A-label), the same relay has
// the same trust.
import { describe, expect, it } from "vitest";
import { Agent } from "../resources/agent.ts";
import { AgentEncryption } from "./encryption.ts";

describe("spec.encryption.relayTrust", () => {
  const agent = Agent.parse({
    apiVersion: "ifp.dev/v1alpha1",
    kind: "Agent",
    spec: {
      agentId: "alice-agent",
      encryption: {
        relayTrust: [
          { url: "https://relay.example/", level: "trusted" },
          { url: "https://RÉLAIS.example.", level: "self-operated" },
        ],
      },
    },
  });
  const encryption = new AgentEncryption({ spec: agent.spec, discovery: undefined as never, keys: [] });

  it("gives a relay its level however its host is written", () => {
    for (const url of ["https://relay.example", "https://RELAY.example./", "https://relay.example.//"])
      expect(encryption.relayTrust(url), url).toBe("trusted");
    for (const url of ["https://xn--rlais-bsa.example", "https://rélais.example/"])
      expect(encryption.relayTrust(url), url).toBe("self-operated");
    expect(encryption.relayTrust("https://relay.example.attacker.example")).toBe("untrusted");
    expect(encryption.relayTrust("https://relay.example/other")).toBe("untrusted");
  });
});
