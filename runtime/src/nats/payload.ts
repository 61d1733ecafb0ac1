// The 413 for a message larger than NATS can carry (the server's max_payload, less room for
// headers), for the agent's inbox and the relay's mailbox.
import { ProtocolError } from "../protocol/errors.ts";
import type { Nats } from "./connection.ts";

/** Room kept under NATS max_payload for the headers of a stored message. */
export const MAX_PAYLOAD_HEADROOM = 8 * 1024;

/**
 * A message NATS cannot carry (the server's max_payload, lower than maxMessageBytes) is a 413
 * like one over maxMessageBytes: final, not a 503 that the sender would retry for ever.
 */
export function refuseOverMaxPayload(nats: Nats, data: string | Uint8Array): void {
  const max = nats.nc?.info?.max_payload;
  if (!max) return;
  const size = Buffer.byteLength(data);
  if (size + MAX_PAYLOAD_HEADROOM > max) {
    throw new ProtocolError(
      413,
      "payload_too_large",
      `the message (${size} bytes as stored) exceeds what the message store accepts (NATS max_payload ${max} bytes, less ${MAX_PAYLOAD_HEADROOM} for headers)`,
    );
  }
}
