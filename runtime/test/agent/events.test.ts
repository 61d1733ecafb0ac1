// The shared Event recorder against a real kube-apiserver: repeats become one Event with a count,
// similar messages are combined, and each object's writes are rate-limited.
import { KubeConfig } from "@kubernetes/client-node";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startControlPlane, type ControlPlane } from "../../../e2e/support/controlplane.ts";
import { waitFor } from "../../../e2e/support/wait.ts";
import { COMBINED_PREFIX, EventRecorder, type EventLimits } from "../../src/kube/events.ts";

let cp: ControlPlane;
let kc: KubeConfig;
const NS = "events";
beforeAll(async () => {
  cp = await startControlPlane({ crds: [], controllerManager: false });
  cp.kubectl(["create", "namespace", NS]);
  kc = new KubeConfig();
  kc.loadFromFile(cp.kubeconfig);
}, 300_000);
afterAll(async () => {
  await cp?.stop();
});

/** A ConfigMap to attach Events to (any object will do), as the API server has it. */
const object = (name: string) => {
  cp.kubectl(["-n", NS, "create", "configmap", name]);
  return cp.json(["-n", NS, "get", "configmap", name]);
};
const eventsOf = (name: string) =>
  cp.json(["-n", NS, "get", "events", "--field-selector", `involvedObject.name=${name}`]).items as any[];
const recorder = (limits: Partial<EventLimits> = {}) =>
  new EventRecorder(kc, "ifp-runtime", pino({ level: "silent" }), limits);

describe("the Event recorder", () => {
  it("records 100 identical warnings as one Event with count 100", { timeout: 60_000 }, async () => {
    const obj = object("repeated");
    const r = recorder();
    for (let i = 0; i < 100; i++) await r.record(obj, "Warning", "Undeliverable", "delivery to bob failed: 503");
    await r.flush();
    const events = eventsOf("repeated");
    expect(events).toHaveLength(1);
    expect(events[0]).toMatchObject({
      type: "Warning",
      reason: "Undeliverable",
      count: 100,
      message: "delivery to bob failed: 503",
      involvedObject: { kind: "ConfigMap", name: "repeated", uid: obj.metadata.uid },
    });
    expect(new Date(events[0].lastTimestamp).getTime()).toBeGreaterThanOrEqual(
      new Date(events[0].firstTimestamp).getTime(),
    );
    expect(r.dropped).toBe(0);
    expect(r.writes).toBeLessThanOrEqual(3); // the Event, and its count
  });

  it("keeps counting as repeats come in over time, in few writes", { timeout: 60_000 }, async () => {
    const obj = object("trickle");
    const r = recorder({ flushMs: 200 });
    // Three rounds of ten repeats, each round once the one before is on the server.
    for (let round = 1; round <= 3; round++) {
      for (let i = 0; i < 10; i++) await r.record(obj, "Warning", "NatsUnavailable", "NATS away");
      await waitFor(
        `the count to reach ${round * 10}`,
        () => eventsOf("trickle")[0]?.count === round * 10 || undefined,
        10_000,
        50,
      );
    }
    expect(eventsOf("trickle")).toHaveLength(1);
    // The Event and one count update per round at most (one per 200 ms), not one per repeat.
    expect(r.writes).toBeLessThanOrEqual(4);
  });

  it("combines more than ten different messages of one reason into one Event, as client-go does", {
    timeout: 60_000,
  }, async () => {
    const obj = object("many-messages");
    const r = recorder();
    for (let i = 0; i < 40; i++) await r.record(obj, "Warning", "Undeliverable", `message m${i} to bob: 503`);
    await r.flush();
    const events = eventsOf("many-messages");
    expect(events).toHaveLength(11);
    const combined = events.filter((e) => e.message.startsWith(COMBINED_PREFIX));
    expect(combined).toHaveLength(1);
    expect(combined[0]).toMatchObject({ count: 30, message: `${COMBINED_PREFIX}message m39 to bob: 503` });
    expect(events.filter((e) => !e.message.startsWith(COMBINED_PREFIX)).map((e) => e.count)).toEqual(Array(10).fill(1));
  });

  it("limits each object's writes with a token bucket, and other objects keep theirs", {
    timeout: 60_000,
  }, async () => {
    const noisy = object("noisy");
    const quiet = object("quiet");
    const r = recorder();
    for (let i = 0; i < 40; i++) await r.record(noisy, "Warning", `Reason${i}`, "something");
    await r.record(quiet, "Normal", "Applied", "applied");
    await r.flush();
    expect(eventsOf("noisy")).toHaveLength(25);
    expect(r.dropped).toBe(15);
    expect(eventsOf("quiet")).toHaveLength(1);
  });

  it("holds a count the rate limit delays, and writes it once a token is back", { timeout: 60_000 }, async () => {
    const obj = object("held");
    const r = recorder({ burst: 2, refillMs: 1_500, flushMs: 100 });
    await r.record(obj, "Warning", "A", "a");
    await r.record(obj, "Warning", "B", "b");
    for (let i = 0; i < 5; i++) await r.record(obj, "Warning", "A", "a");
    // A flush tries to write the count now; no token is left for it.
    await r.flush();
    expect(r.writes).toBe(2);
    // No token left: still 1 on the server ...
    expect(eventsOf("held").find((e) => e.reason === "A")?.count).toBe(1);
    // ... and the 6 once the bucket refilled.
    await waitFor(
      "the held count",
      () => eventsOf("held").find((e) => e.reason === "A")?.count === 6 || undefined,
      10_000,
      100,
    );
    expect(eventsOf("held")).toHaveLength(2);
  });

  it("makes the Event again with its count when the API server no longer has it", { timeout: 60_000 }, async () => {
    const obj = object("expired");
    const r = recorder({ flushMs: 100 });
    await r.record(obj, "Warning", "Gone", "x");
    cp.kubectl(["-n", NS, "delete", "events", "--field-selector", "involvedObject.name=expired"]);
    for (let i = 0; i < 3; i++) await r.record(obj, "Warning", "Gone", "x");
    await r.flush();
    const events = eventsOf("expired");
    expect(events).toHaveLength(1);
    expect(events[0].count).toBe(4);
  });
});
