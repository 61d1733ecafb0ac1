// The Server-Sent Events of a response body, parsed as the HTML standard says, each event
// bounded in size; for the clients of relays' and the local API's streams.
import { createParser, type EventSourceMessage } from "eventsource-parser";

/** One Server-Sent Event: its id, its event type ("message" when unnamed) and its data lines joined. */
export interface SseEvent {
  id?: string;
  event: string;
  data: string;
}

/** An event larger than the stream's bound: the stream is not read further. */
export class SseEventTooLarge extends Error {}

/**
 * The Server-Sent Events of a response body, parsed by eventsource-parser as the HTML standard
 * says: lines end in LF, CRLF or CR, comments are skipped, an event without data is not
 * dispatched. Bytes are decoded as one UTF-8 stream (a character split between chunks stays
 * whole), and an event may not grow past `maxEventBytes` characters (a stream that never ends
 * its event would otherwise hold ever more memory).
 */
export async function* sseEvents(
  body: AsyncIterable<Uint8Array | string>,
  maxEventBytes = 32 * 1024 * 1024,
): AsyncGenerator<SseEvent> {
  const decoder = new TextDecoder();
  const ready: SseEvent[] = [];
  let tooLarge: SseEventTooLarge | undefined;
  const parser = createParser({
    maxBufferSize: maxEventBytes,
    onEvent: (e: EventSourceMessage) => {
      ready.push({ ...(e.id !== undefined ? { id: e.id } : {}), event: e.event || "message", data: e.data });
    },
    onError: (err) => {
      if (err.type === "max-buffer-size-exceeded")
        tooLarge = new SseEventTooLarge(`an event of the stream is larger than ${maxEventBytes} bytes`);
    },
  });
  for await (const chunk of body) {
    parser.feed(typeof chunk === "string" ? chunk : decoder.decode(chunk, { stream: true }));
    while (ready.length) yield ready.shift()!;
    if (tooLarge) throw tooLarge;
  }
}
