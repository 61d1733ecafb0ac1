// A runtime's start reads each of its streams' STREAM.INFO once: StreamKeeper.ensure reads it
// and hands it to ensureReplicatedStream and ensureStream, which do not read it again. Counted
// on the wire: a second connection sees every $JS.API.STREAM.INFO request the runtime sends.
import { connect, type NatsConnection } from "@nats-io/transport-node";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startNats, type NatsServer } from "../../../e2e/support/nats.ts";
import { Nats } from "../../src/nats/connection.ts";
import { StreamKeeper, StreamMissingError } from "../../src/nats/stream-keeper.ts";

let server: NatsServer;
let nats: Nats;
let watcher: NatsConnection;
const infos: string[] = [];

beforeAll(async () => {
  server = await startNats();
  nats = new Nats({ url: server.url, name: "stream-info test" }, pino({ level: "silent" }));
  await nats.start();
  watcher = await connect({ servers: server.url });
  watcher.subscribe("$JS.API.STREAM.INFO.>", { callback: (_err, m) => void infos.push(m.subject) });
  await watcher.flush();
});

afterAll(async () => {
  await watcher?.close();
  await nats?.close();
  await server?.close();
});

/** STREAM.INFO requests for `stream` while `body` runs (the watcher has seen them all once it flushed). */
async function infoReads(stream: string, body: () => Promise<unknown>): Promise<number> {
  infos.length = 0;
  await body();
  await nats.nc?.flush();
  await watcher.flush();
  return infos.filter((s) => s === `$JS.API.STREAM.INFO.${stream}`).length;
}

describe("StreamKeeper.ensure", () => {
  const keeper = () =>
    new StreamKeeper(nats, pino({ level: "silent" }), { ledger: { bucket: "IFP_INFO_TEST", key: "streams" } });
  const want = (name: string) => ({ name, subjects: [`info.${name}.>`], max_age: 0 });

  it("reads STREAM.INFO once when it makes a stream, once when it finds it unchanged", async () => {
    const k = keeper();
    expect(await infoReads("ONCE", () => k.ensure(want("ONCE"), "auto"))).toBe(1);
    expect(await infoReads("ONCE", () => k.ensure(want("ONCE"), "auto"))).toBe(1);
    // An update is ours plus the one the client's streams.update() makes itself to merge the config.
    expect(await infoReads("ONCE", () => k.ensure({ ...want("ONCE"), max_msgs: 10 }, "auto"))).toBe(2);
    expect((await nats.jsm.streams.info("ONCE")).config.max_msgs).toBe(10);
  });

  it("reads it once when the stream it made has gone missing, and says so", async () => {
    const k = keeper();
    await k.ensure(want("GONE"), "auto");
    await nats.jsm.streams.delete("GONE");
    let err: unknown;
    expect(await infoReads("GONE", () => k.ensure(want("GONE"), "auto").catch((e: unknown) => void (err = e)))).toBe(1);
    expect(err).toBeInstanceOf(StreamMissingError);
    expect(k.missing()).toEqual(["GONE"]);
  });
});
