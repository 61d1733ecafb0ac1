import { ApiException } from "@kubernetes/client-node";
import pino from "pino";
import { Counter, Gauge, Histogram, Registry } from "prom-client";
import { describe, expect, it } from "vitest";
import { waitFor } from "../../../e2e/support/wait.ts";
import { classifyFailure, Controller, type ControllerMetrics, type Reconcile } from "./controller.ts";
import { WorkQueue } from "./workqueue.ts";

function newMetrics(): ControllerMetrics & { registry: Registry } {
  const registry = new Registry();
  const registers = [registry];
  return {
    registry,
    reconciles: new Counter({ name: "reconciles", help: "h", labelNames: ["kind", "result"], registers }),
    errors: new Counter({ name: "errors", help: "h", labelNames: ["kind"], registers }),
    duration: new Histogram({ name: "duration", help: "h", labelNames: ["kind"], registers }),
    queueDepth: new Gauge({ name: "depth", help: "h", labelNames: ["kind"], registers }),
  };
}

const conflict = () => new ApiException(409, "Conflict", { message: "the object has been modified" }, {});
const log = pino({ level: "silent" });

/** A controller over a real queue whose reconcile does what `outcomes` says, in turn. */
function controllerOf(outcomes: (() => Promise<{ requeueAfterMs?: number }>)[], exists = () => true) {
  const metrics = newMetrics();
  const queue = new WorkQueue({ baseDelayMs: 1000, maxDelayMs: 60_000 });
  const calls: string[] = [];
  const reconcile: Reconcile = async (ns, name) => {
    calls.push(`${ns}/${name}`);
    return outcomes[Math.min(calls.length - 1, outcomes.length - 1)]!();
  };
  const c = new Controller({ kind: "Agent", reconcile, exists, metrics, log, queue });
  const count = async (result: string) =>
    (await metrics.reconciles.get()).values.find((v) => v.labels.result === result)?.value ?? 0;
  const errors = async () => (await metrics.errors.get()).values[0]?.value ?? 0;
  return { c, queue, calls, metrics, count, errors };
}

describe("classifyFailure", () => {
  it("sorts a failed pass by what is left of the resource and the error's status", () => {
    expect(classifyFailure(new Error("boom"), false)).toBe("gone");
    expect(classifyFailure(conflict(), false)).toBe("gone");
    expect(classifyFailure(conflict(), true)).toBe("conflict");
    expect(classifyFailure(new ApiException(500, "Internal", {}, {}), true)).toBe("error");
    expect(classifyFailure(new ApiException(404, "NotFound", {}, {}), true)).toBe("error");
    expect(classifyFailure(new Error("boom"), true)).toBe("error");
  });
});

describe("Controller.process", () => {
  it("counts a success and schedules the requeue it asked for, and nothing when it asked none", async () => {
    const { c, queue, count } = controllerOf([async () => ({ requeueAfterMs: 60_000 }), async () => ({})]);
    expect(await c.process("ns/a")).toEqual({ result: "ok", requeueAfterMs: 60_000 });
    expect(queue.scheduled).toBe(1);
    expect(await c.process("ns/b")).toEqual({ result: "ok", requeueAfterMs: undefined });
    expect(queue.scheduled).toBe(1);
    expect(await count("ok")).toBe(2);
    queue.shutDown();
  });

  it("backs an error off per key, doubling, and forgets the backoff after a success", async () => {
    const fail = async () => {
      throw new Error("apply failed");
    };
    const { c, queue, count, errors } = controllerOf([fail, fail, async () => ({}), fail]);
    const first = await c.process("ns/a");
    expect(first.result).toBe("error");
    expect(first.requeueAfterMs).toBeGreaterThanOrEqual(800);
    expect(first.requeueAfterMs).toBeLessThanOrEqual(1200);
    const second = await c.process("ns/a");
    expect(second.requeueAfterMs).toBeGreaterThanOrEqual(1600);
    expect(queue.scheduled).toBe(1); // one timer per key
    expect((await c.process("ns/a")).result).toBe("ok");
    expect((await c.process("ns/a")).requeueAfterMs).toBeLessThanOrEqual(1200);
    expect(await count("error")).toBe(3);
    expect(await errors()).toBe(3);
    queue.shutDown();
  });

  it("requeues a conflict with backoff but does not count it as an error", async () => {
    const { c, queue, count, errors } = controllerOf([
      async () => {
        throw conflict();
      },
    ]);
    const r = await c.process("ns/a");
    expect(r.result).toBe("conflict");
    expect(r.requeueAfterMs).toBeGreaterThan(0);
    expect(queue.scheduled).toBe(1);
    expect(await count("conflict")).toBe(1);
    expect(await errors()).toBe(0);
    queue.shutDown();
  });

  it("drops the key of a resource deleted while it was reconciled", async () => {
    const { c, queue, count, errors } = controllerOf(
      [
        async () => {
          throw new Error('deployments.apps "a" not found');
        },
      ],
      () => false,
    );
    expect(await c.process("ns/a")).toEqual({ result: "gone" });
    expect(queue.scheduled).toBe(0);
    expect(queue.depth).toBe(0);
    expect(await count("ok")).toBe(1);
    expect(await errors()).toBe(0);
    queue.shutDown();
  });
});

describe("Controller.run", () => {
  it("reconciles enqueued keys by namespace and name until shut down, and reports the queue depth", async () => {
    const { c, calls, metrics } = controllerOf([async () => ({})]);
    c.enqueue("team", "alice");
    c.enqueue("team", "bob");
    c.enqueue("team", "alice");
    c.recordQueueDepth();
    expect((await metrics.queueDepth.get()).values[0]).toMatchObject({ labels: { kind: "Agent" }, value: 2 });
    const running = c.run(2);
    await waitFor("both keys reconciled", () => calls.length >= 2, 10_000, 10);
    c.shutDown();
    await running;
    expect(calls.sort()).toEqual(["team/alice", "team/bob"]);
  });
});
