import { describe, expect, it } from "vitest";
import { message } from "../../../test/support/fixtures.ts";
import { Agent } from "../../resources/agent.ts";
import { inspect } from "./inbound.ts";

const agent = Agent.parse({
  apiVersion: "ifp.dev/v1alpha1",
  kind: "Agent",
  spec: {
    agentId: "alice-agent",
    capabilities: [
      {
        name: "calendar.availability",
        description: "c",
        conditions: { minDisclosure: "professional", minAuthLevel: 2, temperature: "warm" },
      },
      { name: "ping", description: "p" },
    ],
    peers: [{ agentId: "warm-peer", temperature: "warm", keys: [{ keyId: "k", publicKey: "A".repeat(43) }] }],
  },
});
const verified = { sender: "warm-peer", authLevel: 2 };

describe("inspect", () => {
  it("delivers ordinary messages", () => {
    expect(inspect(message("warm-peer", "alice-agent"), verified, agent)).toEqual({ deliver: true });
  });

  it("answers protocol problems instead of delivering (7.2.1)", () => {
    const r = inspect({ ...message("warm-peer", "alice-agent"), ifp: 3 }, verified, agent);
    expect(r).toMatchObject({ deliver: false, error: { code: "unsupported_version" } });
  });

  it("checks each condition of a requested capability (7.2.2)", () => {
    const req = (over: object, meta = verified) =>
      inspect(
        message(meta.sender, "alice-agent", { capabilities: { request: ["calendar.availability"] }, ...over }),
        meta,
        agent,
      );
    expect(req({ disclosure: "personal" })).toEqual({ deliver: true });
    expect(req({ disclosure: "public" })).toMatchObject({
      deliver: false,
      error: { code: "capability_conditions_not_met", details: { mismatches: [{ condition: "min_disclosure" }] } },
    });
    expect(req({})).toMatchObject({
      error: { text: expect.stringMatching(/min_disclosure "professional" but this conversation has null/) },
    });
    const cool = req({ disclosure: "professional" }, { sender: "cool-peer", authLevel: 0 });
    expect(cool.error?.details?.mismatches).toEqual([
      { capability: "calendar.availability", condition: "min_auth_level", required: 2, actual: 0 },
      { capability: "calendar.availability", condition: "temperature", required: "warm", actual: "cool" },
    ]);
    // Capabilities without conditions, or unknown ones, are the application's business.
    expect(
      inspect(message("x", "alice-agent", { capabilities: { request: ["ping", "nope"] } }), verified, agent),
    ).toEqual({ deliver: true });
  });

  it("learns a valid capability document from a greeting and flags an invalid one", () => {
    const greeting = (content: unknown) => ({
      ...message("warm-peer", "alice-agent", { phase: "greeting" }),
      body: { text: "hi", parts: [{ content_type: "application/json", name: "capabilities", content }] },
    });
    const ok = inspect(greeting({ ifp: 7, capabilities: [{ name: "ping", description: "p" }] }), verified, agent);
    expect(ok).toMatchObject({ deliver: true, capabilities: { capabilities: [{ name: "ping", version: "1" }] } });
    const bad = inspect(greeting({ ifp: 7, capabilities: "lots" }), verified, agent);
    expect(bad).toMatchObject({ deliver: true, error: { code: "invalid_capabilities" } });
    expect(bad.capabilities).toBeUndefined();
  });
});
