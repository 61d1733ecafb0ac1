import { describe, expect, it } from "vitest";
import { cursor, messageFrame, parseClientFrame, sseFrame, turnWrites } from "./events.ts";

describe("SSE and WebSocket framing", () => {
  it("writes one SSE event per copy, its id the resume cursor", () => {
    const text = JSON.stringify({ body: { text: "two\nlines" } });
    expect(sseFrame({ seq: 42, text })).toBe('id: 42\nevent: message\ndata: {"body":{"text":"two\\nlines"}}\n\n');
    expect(JSON.parse(messageFrame({ seq: 42, text }))).toEqual({
      type: "message",
      id: 42,
      message: { body: { text: "two\nlines" } },
    });
  });

  it("reads a resume cursor leniently: anything but a sequence starts from the beginning", () => {
    expect(cursor("17")).toBe(17);
    expect(cursor(" 17 ")).toBe(17);
    expect(cursor(["9", "10"])).toBe(9);
    for (const v of [undefined, null, "", "-1", "1e3", "abc", "9".repeat(20)]) expect(cursor(v), String(v)).toBe(0);
  });

  it("understands only ack frames from the client", () => {
    expect(parseClientFrame(Buffer.from('{"type":"ack","message_id":"m1"}'))).toEqual({ ack: "m1" });
    expect(parseClientFrame(Buffer.from("nope"))).toEqual({ error: "frames are JSON objects" });
    for (const f of [
      '{"type":"ack"}',
      '{"type":"ack","message_id":""}',
      '{"type":"nack","message_id":"m"}',
      "null",
      "[]",
    ]) {
      expect(parseClientFrame(Buffer.from(f)), f).toHaveProperty("error");
    }
  });

  it("corks a socket once for the frames of one event-loop turn and uncorks it after the turn", async () => {
    const calls: string[] = [];
    const together = turnWrites({ cork: () => calls.push("cork"), uncork: () => calls.push("uncork") });
    for (let i = 0; i < 5; i++) together();
    expect(calls).toEqual(["cork"]);
    await new Promise((r) => setImmediate(r));
    expect(calls).toEqual(["cork", "uncork"]);
    together();
    await new Promise((r) => setImmediate(r));
    expect(calls).toEqual(["cork", "uncork", "cork", "uncork"]);
  });

  it("reads an ack frame of many ids with the bounds of POST /relay/messages/ack: 1 to 1000 ids of 1 to 256 characters", () => {
    expect(parseClientFrame(Buffer.from('{"type":"ack","message_ids":["m1","m2","m1"]}'))).toEqual({
      ackMany: ["m1", "m2", "m1"],
    });
    const ids = (n: number, id = (i: number) => `m${i}`) =>
      JSON.stringify({ type: "ack", message_ids: Array.from({ length: n }, (_, i) => id(i)) });
    expect(parseClientFrame(Buffer.from(ids(1000)))).toHaveProperty("ackMany");
    expect(parseClientFrame(Buffer.from(ids(1, () => "x".repeat(256))))).toHaveProperty("ackMany");
    for (const f of [
      ids(1001),
      ids(0),
      ids(1, () => "x".repeat(257)),
      ids(1, () => ""),
      '{"type":"ack","message_ids":"m1"}',
      '{"type":"ack","message_ids":[7]}',
      '{"type":"ack","message_ids":null}',
      '{"type":"ack","message_ids":{"0":"m1"}}',
      // message_ids decides: a frame with both is not taken as the single ack.
      '{"type":"ack","message_id":"m1","message_ids":[]}',
    ]) {
      expect(parseClientFrame(Buffer.from(f)), f.slice(0, 80)).toEqual({
        error: expect.stringMatching(/^invalid acknowledgement: message_ids/),
      });
    }
  });

  it("reads a publish frame: one message object, and recipients only as 1 to 100 agent ids", () => {
    expect(parseClientFrame(Buffer.from('{"type":"publish","message":{"ifp":4}}'))).toEqual({ publish: { ifp: 4 } });
    expect(parseClientFrame(Buffer.from('{"type":"publish","message":{"ifp":4},"recipients":["bob"]}'))).toEqual({
      publish: { ifp: 4 },
      recipients: ["bob"],
    });
    const tooMany = JSON.stringify({
      type: "publish",
      message: {},
      recipients: Array.from({ length: 101 }, (_, i) => `a${i}`),
    });
    for (const f of [
      '{"type":"publish"}',
      '{"type":"publish","message":null}',
      '{"type":"publish","message":[1]}',
      '{"type":"publish","message":"m"}',
      '{"type":"publish","message":{},"recipients":[]}',
      '{"type":"publish","message":{},"recipients":"bob"}',
      '{"type":"publish","message":{},"recipients":[""]}',
      '{"type":"publish","message":{},"recipients":[7]}',
      tooMany,
    ]) {
      expect(parseClientFrame(Buffer.from(f)), f).toHaveProperty("error");
    }
    // Prototype poisoning is refused as the HTTP routes refuse it, not parsed into the message.
    expect(parseClientFrame(Buffer.from('{"type":"publish","message":{"__proto__":{"x":1}}}'))).toEqual({
      error: expect.stringMatching(/prototype/),
    });
    expect(
      parseClientFrame(Buffer.from('{"type":"publish","message":{"constructor":{"prototype":{"x":1}}}}')),
    ).toHaveProperty("error");
  });
});
