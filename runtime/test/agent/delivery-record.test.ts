// The delivery record of an outbound message, on a real nats-server: the local API's first
// "queued" record never overwrites an outcome the sender wrote first (the sender can take the
// message from the outbox before the local API has answered).
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startNats, type NatsServer } from "../../../e2e/support/nats.ts";
import { DeliveryStates, type DeliveryRecord } from "../../src/agent/outbound/delivery-state.ts";
import { Nats } from "../../src/nats/connection.ts";

let server: NatsServer;
let nats: Nats;
let states: DeliveryStates;

beforeAll(async () => {
  server = await startNats();
  nats = new Nats({ url: server.url, name: "delivery-record-test" }, pino({ level: "silent" }));
  await nats.start();
  states = new DeliveryStates(nats, "ifp_outbox_state_record-test");
  await states.ensure();
});
afterAll(async () => {
  await nats?.close();
  await server?.close();
});

const record = (id: string, state: "queued" | "failed"): DeliveryRecord => ({
  message_id: id,
  state,
  queued_at: "2026-01-01T00:00:00.000Z",
  updated_at: "2026-01-01T00:00:00.000Z",
  recipients: [
    {
      agent: "peer",
      state,
      attempts: state === "queued" ? 0 : 1,
      ...(state === "failed" ? { last_error: "refused" } : {}),
    },
  ],
});

describe("DeliveryStates.begin", () => {
  it("writes the first record of a message", async () => {
    await states.begin(record("msg:first", "queued"));
    expect((await states.get("msg:first"))?.state).toBe("queued");
  });

  it("leaves the sender's outcome when the sender wrote first", async () => {
    await states.put(record("msg:raced", "failed"));
    await states.begin(record("msg:raced", "queued"));
    const r = await states.get("msg:raced");
    expect(r?.state).toBe("failed");
    expect(r?.recipients[0]).toMatchObject({ state: "failed", attempts: 1 });
  });

  it("is overwritten by the sender's outcome when it came first", async () => {
    await states.begin(record("msg:ordered", "queued"));
    await states.put(record("msg:ordered", "failed"));
    expect((await states.get("msg:ordered"))?.state).toBe("failed");
  });
});
