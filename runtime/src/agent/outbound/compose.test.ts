import { describe, expect, it } from "vitest";
import { message } from "../../../test/support/fixtures.ts";
import { composeMessage } from "./compose.ts";

const ctx = { agentId: "alice-agent", displayName: "Alice", now: new Date("2026-11-22T10:00:00Z") };

describe("composeMessage", () => {
  it("fills headers for the short form", () => {
    const m = composeMessage({ to: "bob-agent", text: "hi" }, ctx);
    expect(m).toMatchObject({
      ifp: 4,
      headers: {
        message_id: expect.stringMatching(/^msg:[0-9A-HJKMNP-TV-Z]{26}$/),
        date: "2026-11-22T10:00:00Z",
        from: { agent: "alice-agent", display: "Alice" },
        to: [{ agent: "bob-agent" }],
        conversation_id: expect.stringMatching(/^conv:/),
        sequence: 1,
        phase: "context",
        content_type: "text/markdown; charset=utf-8",
      },
      body: { text: "hi" },
    });
  });

  it("threads a reply to the received message", () => {
    const original = message("bob-agent", "alice-agent", {
      sequence: 4,
      conversation_id: "conv:x",
      thread: { references: ["msg:1"] },
    });
    const m = composeMessage({ in_reply_to: original.headers.message_id, text: "yes" }, { ...ctx, original });
    expect(m.headers).toMatchObject({
      to: [{ agent: "bob-agent" }],
      conversation_id: "conv:x",
      sequence: 5,
      thread: { in_reply_to: original.headers.message_id, references: ["msg:1", original.headers.message_id] },
    });
  });

  it("completes a whole message without overriding what the application set, but always signs as itself", () => {
    const given = {
      headers: {
        to: [{ agent: "bob-agent" }],
        phase: "close",
        message_id: "msg:mine",
        from: { agent: "someone-else" },
      },
      body: { text: "bye" },
    };
    const m = composeMessage(given, ctx);
    expect(m.headers).toMatchObject({
      message_id: "msg:mine",
      phase: "close",
      from: { agent: "alice-agent" },
      sequence: 1,
    });
  });

  it("adds the capability document to a greeting once", () => {
    const doc = {
      ifp: 7 as const,
      agent_id: "alice-agent",
      capabilities: [{ name: "ping", version: "1", description: "p" }],
    };
    const g = composeMessage({ to: "bob-agent", phase: "greeting", text: "hello" }, { ...ctx, capabilities: doc });
    expect(g.body.parts).toEqual([{ content_type: "application/json", name: "capabilities", content: doc }]);
    const own = composeMessage(
      {
        to: "bob-agent",
        phase: "greeting",
        body: { parts: [{ content_type: "application/json", name: "capabilities", content: {} }] },
      },
      { ...ctx, capabilities: doc },
    );
    expect(own.body.parts).toHaveLength(1);
    expect(composeMessage({ to: "bob-agent", text: "x" }, { ...ctx, capabilities: doc }).body.parts).toBeUndefined();
  });

  it("refuses requests it cannot turn into a message", () => {
    expect(() => composeMessage({ text: "to nobody" }, ctx)).toThrow(/`to` is required/);
    expect(() => composeMessage({ to: "b", in_reply_to: "msg:x" }, ctx)).toThrow(/no received message/);
    expect(() => composeMessage({ to: [], text: "x" }, ctx)).toThrow(/invalid outbox request/);
    expect(() => composeMessage({ headers: { to: "b" } }, ctx)).toThrow(/not valid IFP-4/);
  });
});
