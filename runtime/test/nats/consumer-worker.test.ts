// The one consumer loop (nats/worker.ts) against a real nats-server: a consumer deleted under
// a running worker is recreated with the same config and messages keep flowing; stop() returns
// whenever it is called.
import { AckPolicy, DeliverPolicy, RetentionPolicy, StorageType, type JsMsg } from "@nats-io/jetstream";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startNats, type NatsServer } from "../../../e2e/support/nats.ts";
import { consistently, waitFor } from "../../../e2e/support/wait.ts";
import { Nats } from "../../src/nats/connection.ts";
import { isNotFound } from "../../src/contract/nats.ts";
import { nanos } from "../../src/contract/nats.ts";
import { ConsumerWorker, type WorkerOptions } from "../../src/nats/worker.ts";

let server: NatsServer;
let nats: Nats;
const logLines: string[] = [];
const log = pino({ level: "warn" }, { write: (line: string) => void logLines.push(line) });

beforeAll(async () => {
  server = await startNats();
  nats = new Nats({ url: server.url, name: "worker-test" }, log);
  await nats.start();
});
afterAll(async () => {
  await nats?.close();
  await server?.close();
});

let n = 0;
async function stream(retention: RetentionPolicy): Promise<{ name: string; subject: string }> {
  const name = `WORKER_${++n}`;
  await nats.jsm.streams.add({ name, subjects: [`worker.${n}.>`], retention, storage: StorageType.File });
  return { name, subject: `worker.${n}.msg` };
}

function worker(s: { name: string; subject: string }, extra: Partial<WorkerOptions> = {}) {
  const handled: string[] = [];
  const w = new ConsumerWorker(
    nats,
    {
      stream: s.name,
      consumer: {
        durable_name: "work",
        filter_subject: s.subject,
        ack_policy: AckPolicy.Explicit,
        deliver_policy: DeliverPolicy.All,
        ack_wait: nanos(42_000),
        max_deliver: -1,
        max_ack_pending: 77,
      },
      concurrency: 2,
      handle: async (m: JsMsg) => {
        handled.push(m.string());
        m.ack();
      },
      label: "test worker",
      ...extra,
    },
    log,
  );
  return { w, handled };
}

const consumerInfo = async (stream: string) => {
  try {
    return await nats.jsm.consumers.info(stream, "work");
  } catch (err) {
    if (isNotFound(err)) return undefined;
    throw err;
  }
};

describe("ConsumerWorker", () => {
  it("recreates its consumer with the same config when it is deleted, and keeps delivering", async () => {
    const s = await stream(RetentionPolicy.Workqueue);
    const { w, handled } = worker(s);
    w.start();
    try {
      await nats.js.publish(s.subject, "one");
      await waitFor("the first message", () => handled.length === 1, 20_000);
      const before = (await consumerInfo(s.name))!;

      await nats.jsm.consumers.delete(s.name, "work");
      const after = await waitFor(
        "the consumer to be recreated",
        async () => {
          const info = await consumerInfo(s.name);
          return info && info.created !== before.created ? info : undefined;
        },
        30_000,
        100,
      );
      for (const k of [
        "filter_subject",
        "ack_policy",
        "deliver_policy",
        "ack_wait",
        "max_deliver",
        "max_ack_pending",
      ] as const) {
        expect(after.config[k], k).toEqual(before.config[k]);
      }

      await nats.js.publish(s.subject, "two");
      await waitFor("the message after the deletion", () => handled.length === 2, 30_000);
      expect(handled).toEqual(["one", "two"]);
    } finally {
      await w.stop();
    }
  });

  it("resumes a recreated consumer after the last acknowledgement floor on a stream that keeps handled messages", async () => {
    const s = await stream(RetentionPolicy.Limits);
    const { w, handled } = worker(s, { recreateFrom: "ack-floor", ackFloorRefreshMs: 100 });
    w.start();
    try {
      await nats.js.publish(s.subject, "one");
      const second = await nats.js.publish(s.subject, "two");
      await waitFor("both messages", () => handled.length === 2, 20_000);
      await waitFor("the worker to see the acknowledgement floor", () => (w.ackFloor ?? 0) >= second.seq, 20_000);

      await nats.jsm.consumers.delete(s.name, "work");
      await waitFor("the consumer to be recreated", () => consumerInfo(s.name), 30_000);
      await nats.js.publish(s.subject, "three");
      await waitFor("the message after the deletion", () => handled.includes("three"), 30_000);
      await consistently("no handled message is handed out again", () => handled.length === 3, 1_500);
      expect(handled).toEqual(["one", "two", "three"]);
    } finally {
      await w.stop();
    }
  });

  it("stops at once when stopped while it is still setting its consumer up", async () => {
    const s = await stream(RetentionPolicy.Workqueue);
    const { w, handled } = worker(s);
    w.start();
    await w.stop();
    // And it consumed nothing after stop(): a message published now waits in its consumer,
    // which has no pull to give it to, and stays in the stream.
    await nats.js.publish(s.subject, "left");
    const waiting = async () => {
      const info = await nats.jsm.consumers.info(s.name, "work");
      return info.num_pending === 1 && info.num_waiting === 0 && info.num_ack_pending === 0;
    };
    await waitFor("the message waiting in the consumer, with no pull waiting", waiting, 10_000);
    await consistently(
      "the message to stay unhandled",
      async () =>
        handled.length === 0 && (await waiting()) && (await nats.jsm.streams.info(s.name)).state.messages === 1,
      1_000,
    );
    // A worker that runs takes it from the same consumer.
    const next = worker(s);
    next.w.start();
    try {
      await waitFor("a running worker to take it", () => next.handled.includes("left"), 30_000);
    } finally {
      await next.w.stop();
    }
  });

  it("stops without sitting out its backoff pause", async () => {
    const { w } = worker({ name: "NO_SUCH_STREAM", subject: "nowhere.msg" });
    const failures = () =>
      logLines.filter((l) => l.includes("test worker interrupted") && l.includes('"retryInMs":4000')).length;
    w.start();
    // Failed at 0, 0.5, 1.5 and 3.5 s: now pausing 4 s before the next try.
    await waitFor("the fourth failure", () => failures() >= 1, 30_000, 50);
    const t0 = Date.now();
    await w.stop();
    expect(Date.now() - t0).toBeLessThan(2_000);
  });
});
