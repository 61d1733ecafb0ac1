import { describe, expect, it } from "vitest";
import { sseEvents, SseEventTooLarge, type SseEvent } from "./sse.ts";

async function read(chunks: (string | Uint8Array)[], max?: number): Promise<SseEvent[]> {
  const out: SseEvent[] = [];
  async function* body() {
    for (const c of chunks) yield c;
  }
  for await (const e of sseEvents(body(), max)) out.push(e);
  return out;
}

const expected: SseEvent[] = [
  { id: "1", event: "message", data: '{"a":1}' },
  { id: "2", event: "message", data: "two\nlines" },
  { event: "ping", data: "" },
];

describe("sseEvents", () => {
  for (const [name, eol] of [
    ["LF", "\n"],
    ["CRLF", "\r\n"],
    ["CR", "\r"],
  ] as const) {
    it(`reads a stream framed with ${name}`, async () => {
      const text = [
        ": keep-alive",
        "",
        "id: 1",
        "event: message",
        'data: {"a":1}',
        "",
        "id: 2",
        "data: two",
        "data: lines",
        "",
        "event: ping",
        "data",
        "",
        "",
      ].join(eol);
      expect(await read([text])).toEqual(expected);
      // Split anywhere, a CRLF between two chunks included: the same events.
      const bytes = new TextEncoder().encode(text);
      expect(await read(Array.from(bytes, (b) => new Uint8Array([b])))).toEqual(expected);
    });
  }

  it("keeps a character split between chunks whole, and skips events without data", async () => {
    const bytes = new TextEncoder().encode("id: 7\r\n\r\ndata: é\r\n\r\n");
    expect(await read([bytes.slice(0, 17), bytes.slice(17)])).toEqual([{ event: "message", data: "é" }]);
  });

  it("stops at an event larger than the bound", async () => {
    await expect(read([`data: ${"x".repeat(100)}`], 50)).rejects.toBeInstanceOf(SseEventTooLarge);
  });
});
