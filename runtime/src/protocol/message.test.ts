import { describe, expect, it } from "vitest";
import { message } from "../../test/support/fixtures.ts";
import { Message, protocolProblem } from "./message.ts";

describe("Message schema (IFP-4)", () => {
  it("accepts a complete message and keeps unknown fields", () => {
    const m = { ...message("a", "b"), extra: { kept: true } };
    (m.headers as Record<string, unknown>)["x-custom"] = 1;
    const parsed = Message.parse(m);
    expect(parsed).toMatchObject({ extra: { kept: true }, headers: { "x-custom": 1 } });
  });

  it.each([
    ["headers.message_id", (m: any) => delete m.headers.message_id],
    ["headers.date", (m: any) => (m.headers.date = "yesterday")],
    ["headers.to", (m: any) => (m.headers.to = [])],
    ["headers.from.agent", (m: any) => (m.headers.from = {})],
    ["headers.sequence", (m: any) => (m.headers.sequence = 1.5)],
    ["body", (m: any) => delete m.body],
    ["ifp", (m: any) => (m.ifp = "4")],
  ])("names the failing field %s", (path, mutate) => {
    const m = message("a", "b");
    mutate(m);
    const r = Message.safeParse(m);
    expect(r.success).toBe(false);
    expect(r.error!.issues.map((i) => i.path.join("."))).toContain(path);
  });

  it("flags protocol-level problems instead of refusing them", () => {
    expect(protocolProblem(Message.parse(message("a", "b")))).toBeUndefined();
    expect(protocolProblem(Message.parse({ ...message("a", "b"), ifp: 9 }))).toMatch(/ifp 9 is not supported/);
    expect(protocolProblem(Message.parse(message("a", "b", { phase: "haggle" })))).toMatch(/unknown phase "haggle"/);
  });
});
