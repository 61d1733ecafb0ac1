import { X509Certificate } from "node:crypto";
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { firstAddress, KUBERNETES_SERVICE_IP, SERVICE_CIDR, startControlPlane } from "./support/controlplane.ts";
import { teardown } from "./support/global-setup.ts";
import { startNats } from "./support/nats.ts";
import { takeSlot } from "./support/node.ts";
import { freePort } from "./support/ports.ts";
import { LogRing, logsSince, spawnProcess } from "./support/process.ts";
import { waitFor } from "./support/wait.ts";

/** How long `p` took, or a rejection naming `what` when it takes longer than `ms`. */
async function within<T>(what: string, ms: number, p: Promise<T>): Promise<number> {
  const t0 = Date.now();
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([
    p,
    new Promise((_, reject) => (timer = setTimeout(() => reject(new Error(`${what} took longer than ${ms} ms`)), ms))),
  ]).finally(() => clearTimeout(timer));
  return Date.now() - t0;
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

describe("the test support's processes", () => {
  it("stops a nats-server that was killed by a signal at once, and knows it is gone", async () => {
    const nats = await startNats();
    const pid = nats.pid!;
    process.kill(pid, "SIGKILL");
    await waitFor("the server to be reaped", () => nats.pid === undefined, 10_000, 20);
    await within("stop() of a killed nats-server", 2_000, nats.stop());
    await within("close() of a killed nats-server", 2_000, nats.close());
  });

  it("restarts a nats-server on the port it picked itself, with its log kept", async () => {
    const nats = await startNats();
    try {
      expect(nats.log()).toMatch(new RegExp(`Listening for client connections on 127.0.0.1:${nats.port}`));
      await nats.stop();
      expect(nats.pid).toBeUndefined();
      await nats.restart();
      expect(alive(nats.pid!)).toBe(true);
      expect(nats.log()).toMatch(new RegExp(`Listening for client connections on 127.0.0.1:${nats.port}`));
      expect(readFileSync(`${nats.storeDir}/nats-server.log`, "utf8").match(/Server is ready/g)).toHaveLength(2);
    } finally {
      await nats.close();
    }
  });

  it("stops a process that ignores SIGTERM with SIGKILL after the grace period", async () => {
    const p = spawnProcess("stubborn", process.execPath, [
      "-e",
      'process.on("SIGTERM", () => console.log("ignoring SIGTERM")); console.log("up"); setInterval(() => {}, 1000)',
    ]);
    await waitFor("the process to start", () => p.log().includes("up"), 10_000, 20);
    const took = await within("stop() of a process that ignores SIGTERM", 8_000, p.stop({ graceMs: 500 }));
    expect(took).toBeGreaterThanOrEqual(400);
    expect(p.exit).toEqual({ code: null, signal: "SIGKILL" });
    expect(p.log()).toContain("ignoring SIGTERM");
    expect(p.log()).toContain("did not stop within 500 ms of SIGTERM");
    expect(alive(p.pid!)).toBe(false);
  });

  it("keeps the last part of a process's output, bounded, for the failure report", async () => {
    const p = spawnProcess(
      "chatty",
      process.execPath,
      ["-e", 'for (let i = 0; i < 5000; i++) console.log("line " + i + " " + "x".repeat(40))'],
      { logBytes: 4096 },
    );
    await p.exited;
    expect(p.log().length).toBeLessThanOrEqual(4096);
    expect(p.log()).toContain("line 4999");
    expect(p.log()).not.toContain("line 0 ");
    expect(logsSince(Date.now() - 60_000)).toMatch(/──── chatty \(pid \d+\) \(ended\) ────[\s\S]*line 4999/);
    const ring = new LogRing(10);
    ring.push("0123456789abcdef");
    expect(ring.text()).toBe("6789abcdef");
  });

  it("leaves the global teardown what a worker left running, and the teardown kills it", async () => {
    const runDir = mkdtempSync(join(tmpdir(), "ifp-test-run-"));
    const saved = process.env.IFP_TEST_RUN_DIR;
    process.env.IFP_TEST_RUN_DIR = runDir;
    let p: ReturnType<typeof spawnProcess>;
    try {
      p = spawnProcess("left behind", process.execPath, [
        "-e",
        'process.on("SIGTERM", () => {}); setInterval(() => {}, 1000)',
      ]);
    } finally {
      process.env.IFP_TEST_RUN_DIR = saved;
    }
    await waitFor("the process to start", () => alive(p.pid!), 10_000, 20);
    teardown(runDir);
    await within("the teardown's kill", 5_000, p.exited);
    expect(p.exit).toEqual({ code: null, signal: "SIGKILL" });
  });

  it("hands out ports below the kernel's ephemeral range", async () => {
    const [lo] = readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/).map(Number);
    const ports = await Promise.all(Array.from({ length: 20 }, () => freePort()));
    for (const p of ports) expect(p).toBeLessThan(lo!);
  });
});

describe("the test support's control plane", () => {
  it("stops at once after a component was killed, and reads a broken connection as an error, not as absent", {
    timeout: 120_000,
  }, async () => {
    const cp = await startControlPlane({ controllerManager: false, graceMs: 20_000 });
    try {
      expect(cp.tryJson(["get", "deployment", "nothing-here"])).toBeUndefined();
      expect(() => cp.tryJson(["get", "nosuchkind", "x"])).toThrow(/doesn't have a resource type/);
      const apiserver = cp.processes().find((p) => p.name === "kube-apiserver")!;
      process.kill(apiserver.pid!, "SIGKILL");
      await apiserver.exited;
      expect(() => cp.tryJson(["get", "deployment", "nothing-here", "--request-timeout=5s"])).toThrow(
        /was refused|connection refused|Unable to connect/,
      );
    } finally {
      // etcd stops within its grace period; the killed API server must not hold stop() up.
      await within("stop() of a control plane whose API server was killed", 15_000, cp.stop());
    }
  });

  it("serves its Services from the range it is given (a real node's slot has its own), the `kubernetes` Service at its first address", {
    timeout: 120_000,
  }, async () => {
    expect(firstAddress(SERVICE_CIDR)).toBe(KUBERNETES_SERVICE_IP);
    expect(firstAddress("10.0.16.0/20")).toBe("10.0.16.1");
    expect(firstAddress("10.0.17.9/20")).toBe("10.0.16.1");
    const cp = await startControlPlane({ controllerManager: false, serviceCIDR: "10.0.16.0/20" });
    try {
      // The API server makes the Service itself once it serves.
      await waitFor(
        "the kubernetes Service",
        () => cp.tryJson(["-n", "default", "get", "service", "kubernetes"]) !== undefined,
        60_000,
        250,
      );
      const service = cp.json(["-n", "default", "get", "service", "kubernetes"]);
      expect(service.spec.clusterIP).toBe("10.0.16.1");
      cp.kubectl(
        ["apply", "-f", "-"],
        JSON.stringify({
          apiVersion: "v1",
          kind: "Service",
          metadata: { name: "one", namespace: "default" },
          spec: { ports: [{ port: 80 }] },
        }),
      );
      expect(cp.json(["-n", "default", "get", "service", "one"]).spec.clusterIP).toMatch(
        /^10\.0\.(1[6-9]|2\d|3[01])\./,
      );
      // Its certificate names that address, as pods reach it through the Service.
      const cert = new X509Certificate(readFileSync(join(cp.dir, "apiserver.crt")));
      expect(cert.subjectAltName).toContain("IP Address:10.0.16.1");
      expect(cert.subjectAltName).not.toContain(`IP Address:${KUBERNETES_SERVICE_IP}`);
    } finally {
      await cp.stop();
    }
  });
});

describe("the real nodes' slots", () => {
  const slots = () => {
    const dir = mkdtempSync(join(tmpdir(), "ifp-slots-"));
    return [{ lock: join(dir, "first") }, { lock: join(dir, "second") }];
  };
  /** A lock as a node that knows no slots holds it: its pid alone. */
  const heldByOlderNode = (lock: string, pid: number) => {
    mkdirSync(lock);
    writeFileSync(join(lock, "pid"), String(pid));
  };

  it("takes the first free slot, the second beside a holder of the first, and none when both are held", () => {
    const s = slots();
    expect(takeSlot(s)).toBe(s[0]);
    expect(readFileSync(join(s[0]!.lock, "pid"), "utf8")).toBe(String(process.pid));
    expect(readFileSync(join(s[0]!.lock, "slot"), "utf8")).toBe("0");
    expect(takeSlot(s)).toBe(s[1]);
    expect(readFileSync(join(s[1]!.lock, "slot"), "utf8")).toBe("1");
    expect(takeSlot(s)).toBeUndefined();
    rmSync(s[0]!.lock, { recursive: true });
    expect(takeSlot(s)).toBe(s[0]);
  });

  it("takes no second slot beside a node that knows no slots, and frees a dead holder's", async () => {
    const s = slots();
    const other = spawn("sleep", ["30"]);
    try {
      heldByOlderNode(s[0]!.lock, other.pid!);
      expect(takeSlot(s)).toBeUndefined();
      expect(existsSync(s[1]!.lock)).toBe(false);
    } finally {
      other.kill("SIGKILL");
    }
    await waitFor("the holder gone", () => !alive(other.pid!), 10_000, 50);
    // Its lock is removed at the next try, and the first slot is free at the one after.
    expect(takeSlot(s)).toBeUndefined();
    expect(existsSync(s[0]!.lock)).toBe(false);
    expect(takeSlot(s)).toBe(s[0]);
  });
});
