import { describe, expect, it } from "vitest";
import { minAuthLevel } from "./identity.ts";
import { AgentSpec } from "../../resources/agent.ts";

describe("spec.inbox identity fields", () => {
  it("default minAuthLevel to 1, or 0 with introduction tokens", () => {
    const plain = AgentSpec.parse({ agentId: "a" });
    expect(plain.inbox.minAuthLevel).toBeUndefined();
    expect(minAuthLevel(plain)).toBe(1);
    const intro = AgentSpec.parse({ agentId: "a", inbox: { introductionTokens: { secretName: "intro" } } });
    expect(intro.inbox.introductionTokens).toEqual({ secretName: "intro", key: "tokens" });
    expect(minAuthLevel(intro)).toBe(0);
    expect(
      minAuthLevel(
        AgentSpec.parse({ agentId: "a", inbox: { minAuthLevel: 3, introductionTokens: { secretName: "s" } } }),
      ),
    ).toBe(3);
  });

  it("refuse levels outside 0–3 and incomplete token references", () => {
    for (const inbox of [
      { minAuthLevel: 4 },
      { minAuthLevel: -1 },
      { minAuthLevel: 1.5 },
      { minAuthLevel: "2" },
      { introductionTokens: {} },
      { introductionTokens: { secretName: "" } },
    ]) {
      expect(AgentSpec.safeParse({ agentId: "a", inbox }).success, JSON.stringify(inbox)).toBe(false);
    }
  });
});
