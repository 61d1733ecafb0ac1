// repair-nats-store against a real nats-server's store: a stream that a standalone server took an
// update to three replicas for (and then could not load at its next start) is set back to one
// and loads with its messages and consumers; anything it cannot vouch for is left as it is.
import { spawnSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startNats, type NatsServer } from "../../../e2e/support/nats.ts";
import { metaChecksum, parseRepairFlags, repairStore } from "./repair-nats-store.ts";

const BIN = fileURLToPath(new URL("../../bin/ifp-operator.ts", import.meta.url));

describe("repair-nats-store", () => {
  let nats: NatsServer;
  beforeAll(async () => {
    nats = await startNats();
  });
  afterAll(async () => {
    await nats?.close();
  });

  /** A stream with `n` messages and a durable consumer, then updated to three replicas (accepted by a standalone server). */
  async function streamUpdatedToThree(name: string, n: number): Promise<void> {
    const nc = await connect({ servers: nats.url });
    try {
      const jsm = await jetstreamManager(nc);
      await jsm.streams.add({ name, subjects: [`${name.toLowerCase()}.>`], num_replicas: 1 });
      await jsm.consumers.add(name, { durable_name: "handler", ack_policy: "explicit" });
      const js = jetstream(nc);
      for (let i = 0; i < n; i++) await js.publish(`${name.toLowerCase()}.m`, `message ${i}`);
      await jsm.streams.update(name, { ...(await jsm.streams.info(name)).config, num_replicas: 3 });
    } finally {
      await nc.close();
    }
  }

  async function loaded(name: string): Promise<{ messages: number; replicas: number; consumers: number } | string> {
    const nc = await connect({ servers: nats.url });
    try {
      const jsm = await jetstreamManager(nc);
      const info = await jsm.streams.info(name);
      return {
        messages: info.state.messages,
        replicas: info.config.num_replicas,
        consumers: info.state.consumer_count,
      };
    } catch (err) {
      return (err as Error).message;
    } finally {
      await nc.close();
    }
  }

  it("without it the stream is gone after the restart (what the repair is for)", async () => {
    await streamUpdatedToThree("LOST", 3);
    await nats.restart();
    expect(await loaded("LOST")).toBe("stream not found");
    expect(nats.log()).toMatch(/Error recreating stream "LOST": replicas > 1 not supported/);
  });

  it("sets the stream back to one replica in the stopped server's store, and it loads with its messages and consumer", async () => {
    await streamUpdatedToThree("KEPT", 5);
    await nats.stop();
    const outcome = await repairStore(nats.storeDir);
    // LOST from the test before is repaired too: its data was still on disk.
    expect(outcome.repaired.sort()).toEqual(["$G/KEPT", "$G/LOST"]);
    expect(outcome.skipped).toEqual([]);
    await nats.restart();
    expect(await loaded("KEPT")).toEqual({ messages: 5, replicas: 1, consumers: 1 });
    expect(await loaded("LOST")).toEqual({ messages: 3, replicas: 1, consumers: 1 });
    expect(nats.log()).not.toMatch(/Error recreating stream/);
    // Run again: nothing left to do.
    await nats.stop();
    expect(await repairStore(nats.storeDir)).toEqual({ repaired: [], skipped: [] });
    await nats.restart();
  });

  it("leaves a stream whose meta.sum does not match its meta.inf as it is, and says so", async () => {
    await streamUpdatedToThree("DAMAGED", 1);
    await nats.stop();
    const dir = join(nats.storeDir, "jetstream", "$G", "streams", "DAMAGED");
    writeFileSync(join(dir, "meta.sum"), "0000000000000000");
    const before = readFileSync(join(dir, "meta.inf"));
    const outcome = await repairStore(join(nats.storeDir, "jetstream"));
    expect(outcome.repaired).toEqual([]);
    expect(outcome.skipped).toEqual(["$G/DAMAGED: its meta.sum does not match its meta.inf"]);
    expect(readFileSync(join(dir, "meta.inf"))).toEqual(before);
    await nats.restart();
  });

  it("computes the checksum nats-server writes", async () => {
    const dir = join(nats.storeDir, "jetstream", "$G", "streams", "KEPT");
    expect(await metaChecksum("KEPT", readFileSync(join(dir, "meta.inf")))).toBe(
      readFileSync(join(dir, "meta.sum"), "utf8"),
    );
  });

  it("runs as the chart's init container runs it, and refuses to run without a store", () => {
    const ok = spawnSync(process.execPath, [BIN, "repair-nats-store", `--store-dir=${join(nats.storeDir, "none")}`], {
      encoding: "utf8",
    });
    expect(ok.status, ok.stderr).toBe(0);
    expect(ok.stdout).toMatch(/NATS store checked/);
    const bad = spawnSync(process.execPath, [BIN, "repair-nats-store"], { encoding: "utf8" });
    expect(bad.status).toBe(2);
    expect(bad.stderr).toMatch(/needs --store-dir/);
    expect(() => parseRepairFlags(["--store-dir", "/data/jetstream"])).not.toThrow();
  });
});
