/** One Server-Sent Event: its id, its event type ("message" when unnamed) and its data lines joined. */
export interface SseEvent {
  id?: string;
  event: string;
  data: string;
}

/** An event larger than the stream's bound: the stream is not read further. */
export class SseEventTooLarge extends Error {}

/**
 * The Server-Sent Events of a response body; comments are skipped. Bytes are decoded as one
 * UTF-8 stream (a character split between chunks stays whole), and an event may not grow past
 * `maxEventBytes` (a stream that never ends its event would otherwise hold ever more memory).
 */
export async function* sseEvents(body: AsyncIterable<Uint8Array | string>, maxEventBytes = 32 * 1024 * 1024): AsyncGenerator<SseEvent> {
  const decoder = new TextDecoder();
  let buf = "";
  for await (const chunk of body) {
    buf += typeof chunk === "string" ? chunk : decoder.decode(chunk, { stream: true });
    let i: number;
    while ((i = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, i);
      buf = buf.slice(i + 2);
      let id: string | undefined;
      let event = "message";
      const data: string[] = [];
      for (const line of block.split("\n")) {
        if (line.startsWith(":")) continue;
        const c = line.indexOf(":");
        const field = c < 0 ? line : line.slice(0, c);
        const value = c < 0 ? "" : line.slice(c + 1).replace(/^ /, "");
        if (field === "id") id = value;
        else if (field === "event") event = value;
        else if (field === "data") data.push(value);
      }
      if (data.length) yield { id, event, data: data.join("\n") };
    }
    if (buf.length > maxEventBytes) throw new SseEventTooLarge(`an event of the stream is larger than ${maxEventBytes} bytes`);
  }
}
