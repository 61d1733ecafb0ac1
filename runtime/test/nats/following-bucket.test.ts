// The KV bucket handle Nats.bucket() gives, on a real nats-server and real connections: opened
// again on the connection in use when it is another than the one it was opened on, once for the
// calls that come together, and again at the next call when that opening failed.
import { jetstream, type JetStreamClient } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { afterAll, beforeAll, expect, it } from "vitest";
import { startNats, type NatsServer } from "../../../e2e/support/nats.ts";
import { FollowingBucket } from "../../src/nats/following-bucket.ts";

let server: NatsServer;
const connections: NatsConnection[] = [];

beforeAll(async () => {
  server = await startNats();
});
afterAll(async () => {
  for (const nc of connections) if (!nc.isClosed()) await nc.close();
  await server?.close();
});

async function client(): Promise<JetStreamClient> {
  const nc = await connect({ servers: server.url });
  connections.push(nc);
  return jetstream(nc);
}

it("follows the connection in use, opening the bucket again once per connection, and again after a failed opening", async () => {
  const opened: JetStreamClient[] = [];
  let refuseNext = false;
  const open = async (js: JetStreamClient) => {
    opened.push(js);
    if (refuseNext) {
      refuseNext = false;
      throw new Error("the bucket cannot be opened now");
    }
    return new Kvm(js).create("following", { history: 1 });
  };
  const first = await client();
  let current = first;
  const kv = new FollowingBucket(() => current, open, first, await open(first));
  await kv.put("k", "on the first connection");
  expect(opened).toHaveLength(1);

  // The first connection is closed and another is in use: the next calls go there.
  await connections[0]!.close();
  const second = await client();
  current = second;
  refuseNext = true;
  await expect(kv.get("k")).rejects.toThrow("the bucket cannot be opened now");
  expect((await kv.get("k"))?.string()).toBe("on the first connection");
  await kv.put("k", "on the second connection");
  expect(opened.slice(1)).toEqual([second, second]);

  // Calls that come together after a change share one opening.
  const third = await client();
  current = third;
  const values = await Promise.all([kv.get("k"), kv.get("k"), kv.keys()]);
  expect(values[0]?.string()).toBe("on the second connection");
  expect(opened).toHaveLength(4);
  expect(opened[3]).toBe(third);
});
