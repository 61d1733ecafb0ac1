// The last error a runtime records for its status summary, on a real nats-server: a stranger's
// message_id or a peer's answer in it is written printable, so the summary that
// `kubectl ifp status` shows carries no escape sequence or control character from outside.
import { Kvm } from "@nats-io/kv";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startNats, type NatsServer } from "../../../e2e/support/nats.ts";
import { waitFor } from "../../../e2e/support/wait.ts";
import { agentLastError } from "../../src/contract/summary.ts";
import { LastError } from "../../src/nats/last-error.ts";
import { Nats } from "../../src/nats/connection.ts";

let server: NatsServer;
let nats: Nats;

beforeAll(async () => {
  server = await startNats();
  nats = new Nats({ url: server.url, name: "last-error-test" }, pino({ level: "silent" }));
  await nats.start();
});
afterAll(async () => {
  await nats?.close();
  await server?.close();
});

describe("the last error a runtime records", () => {
  it("is written without a stranger's escape sequences and control characters: OSC 52, CSI, C1, line breaks", async () => {
    const where = agentLastError("ns/last-error");
    const last = new LastError(nats, where, pino({ level: "silent" }));
    const id = "m\x1b]52;c;cm0gLXJmIH4K\x07-1\x1b[2K\x1b[1A\r\nHandlerDeadLetter fake\x9b31m\u202e";
    last.record(`webhook of relay-1 answered 500 for message ${id}`, new Date("2026-01-01T00:00:00Z"));
    const entry = await waitFor("the last error written", async () => {
      const kv = await new Kvm(nats.nc!).open(where.bucket).catch(() => undefined);
      return (await kv?.get(where.key))?.json<{ at: string; reason: string }>();
    });
    expect(entry).toEqual({
      at: "2026-01-01T00:00:00.000Z",
      reason: "webhook of relay-1 answered 500 for message m-1 HandlerDeadLetter fake",
    });
  });
});
