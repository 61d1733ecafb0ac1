import { execFileSync, spawn, spawnSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { open } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startNats, type NatsServer } from "../../../e2e/support/nats.ts";
import { localhostTls } from "../../../e2e/support/tls.ts";
import { httpsRequest } from "../../../e2e/support/https.ts";
import { waitFor } from "../../../e2e/support/ports.ts";
import { describeExit, spawnProcess } from "../../../e2e/support/process.ts";
import { HttpClient } from "../../src/net/http-client.ts";
import { RelayClient } from "../../src/net/relay-client.ts";
import {
  identity,
  peerOf,
  signed,
  tempDir,
  writeAgentManifest,
  writeKey,
  writeRelayManifest,
} from "../support/fixtures.ts";
import { onFreePorts } from "../support/free-ports.ts";
import { untilReady } from "../support/runtime-process.ts";
import { webhook, type RelayEnv } from "../support/relay-harness.ts";

const BIN = new URL("../../bin/ifp-runtime.ts", import.meta.url).pathname;

let nats: NatsServer;
let tls: Awaited<ReturnType<typeof localhostTls>>;
beforeAll(async () => {
  [nats, tls] = await Promise.all([startNats(), localhostTls()]);
});
afterAll(async () => {
  await nats?.close();
});

/**
 * ifp-runtime MODE with `args`, listening on a free port (chosen again when it was taken before
 * the runtime listened), once ready; its output kept (and printed when a test fails). stop() is
 * SIGTERM, bounded, and a no-op once it ended; stopCleanly() also expects exit code 0.
 */
function spawnRuntime(mode: "agent" | "relay", args: string[], env: NodeJS.ProcessEnv = process.env) {
  return onFreePorts(["https"], (ports) => spawnOn(ports.https, mode, args, env));
}

async function spawnOn(port: number, mode: "agent" | "relay", args: string[], env: NodeJS.ProcessEnv) {
  const child = spawnProcess(
    `ifp-runtime ${mode}`,
    process.execPath,
    [
      BIN,
      mode,
      "--metrics-port",
      "0",
      ...args,
      "--port",
      String(port),
      "--host",
      "127.0.0.1",
      "--tls-cert",
      tls.files.cert,
      "--tls-key",
      tls.files.key,
      "--nats",
      nats.url,
    ],
    { env: { ...env, IFP_LOG_LEVEL: "warn" } },
  );
  const base = `https://localhost:${port}`;
  await untilReady(child, base, tls.ca);
  return {
    base,
    output: () => child.log(),
    stop: () => child.stop(),
    async stopCleanly() {
      expect(describeExit(await child.stop()), child.log()).toBe("exited with code 0");
    },
  };
}

describe("ifp-runtime command line", () => {
  it("runs the agent mode from the documented start contract and stops cleanly on SIGTERM", async () => {
    const dir = tempDir();
    const self = identity("cli-agent");
    const pete = identity("pete-agent");
    const manifest = writeAgentManifest(dir, {
      agentId: "cli-agent",
      capabilities: [{ name: "ping", description: "Responds to connectivity tests" }],
      peers: [peerOf(pete)],
    });
    const runtime = await spawnRuntime("agent", [
      "--manifest",
      manifest,
      "--signing-key",
      writeKey(dir, self),
      "--local-api-port",
      "0",
    ]);
    const base = runtime.base;
    try {
      const caps = await httpsRequest(`${base}/.well-known/agent/capabilities`, { ca: tls.ca });
      expect(caps.json().capabilities).toEqual([
        { name: "ping", version: "1", description: "Responds to connectivity tests" },
      ]);
      const res = await httpsRequest(`${base}/.well-known/agent/inbox`, {
        method: "POST",
        ca: tls.ca,
        headers: { "content-type": "application/json" },
        body: JSON.stringify(signed(pete, "cli-agent")),
      });
      expect(res.status).toBe(202);
      await runtime.stopCleanly();
    } finally {
      await runtime.stop();
    }
    expect(runtime.output()).not.toMatch(/"level":"(error|fatal)"/);
  });

  it("ends cleanly on a SIGTERM that comes while the agent starts, once it has started", async () => {
    // A container's first process ignores a signal it has no handler for: the handler must be
    // there before the start. The signing key is a FIFO, so the start waits, reading it, until
    // the test has sent SIGTERM; without the early handler the process is killed by the signal.
    const dir = tempDir();
    const self = identity("cli-agent");
    const manifest = writeAgentManifest(dir, { agentId: "cli-agent", capabilities: [], peers: [] });
    const key = join(dir, "signing.key");
    execFileSync("mkfifo", [key]);
    const child = spawnProcess(
      "ifp-runtime agent",
      process.execPath,
      [
        BIN,
        "agent",
        "--manifest",
        manifest,
        "--signing-key",
        key,
        "--port",
        "0",
        "--metrics-port",
        "0",
        "--host",
        "127.0.0.1",
        "--tls-cert",
        tls.files.cert,
        "--tls-key",
        tls.files.key,
        "--nats",
        nats.url,
      ],
      { env: { ...process.env, IFP_LOG_LEVEL: "info" } },
    );
    try {
      // Opening a FIFO to write returns once the runtime has opened it to read: it is starting.
      const writer = await open(key, "w");
      child.proc.kill("SIGTERM");
      await waitFor("the runtime to say it is shutting down", () => child.log().includes("shutting down"), 20_000);
      await writer.writeFile(self.privateKeyPem);
      await writer.close();
      const exit = await Promise.race([
        child.exited,
        new Promise<undefined>((r) => setTimeout(() => r(undefined), 20_000).unref()),
      ]);
      expect(describeExit(exit), child.log()).toBe("exited with code 0");
      const said = child
        .log()
        .split("\n")
        .filter((l) => l.includes('"shutting down"'))
        .map((l) => JSON.parse(l));
      expect(said).toEqual([expect.objectContaining({ signal: "SIGTERM", started: false })]);
    } finally {
      await child.stop();
    }
  });

  it("runs the relay mode trusting --ca-file for webhook push", async () => {
    const dir = tempDir();
    const alice = identity("alice-agent");
    const bob = identity("bob-agent");
    const manifest = writeRelayManifest(
      dir,
      {
        url: "https://localhost",
        agents: [peerOf(alice), peerOf(bob)],
        delivery: { retries: 20, backoffDelay: "200ms", timeout: "2s" },
      },
      "cli-relay",
    );
    // The webhook's certificate is signed by the test CA, which only --ca-file names.
    const hook = await webhook({ tls } as RelayEnv, () => 200);
    const http = new HttpClient({ extraCa: tls.ca });
    const env = { ...process.env };
    delete env.IFP_CA_FILE;
    const runtime = await spawnRuntime("relay", ["--manifest", manifest, "--ca-file", tls.files.ca], env);
    const base = runtime.base;
    try {
      await new RelayClient(base, bob.signing, http).registerWebhook(hook.url);
      const m = signed(alice, "bob-agent");
      expect((await new RelayClient(base, alice.signing, http).publish(m)).status).toBe(202);
      await waitFor("the push to the webhook", () => hook.calls.length > 0, 30_000, 100);
      expect(hook.calls[0]!.body.headers.message_id).toBe(m.headers.message_id);
      await runtime.stopCleanly();
    } finally {
      await runtime.stop();
      await hook.close();
      await http.close();
    }
    expect(runtime.output()).not.toMatch(/self-signed|unable to verify|"level":"(error|fatal)"/);
  });

  it("serves /metrics on --metrics-port over plain HTTP only, never on the HTTPS port, and refuses a bad port", async () => {
    const dir = tempDir();
    const manifest = writeRelayManifest(
      dir,
      { url: "https://localhost", agents: [peerOf(identity("alice-agent"))] },
      "cli-metrics-relay",
    );
    // `--metrics-port 0` is no metrics listener: its port is chosen with the HTTPS one.
    const { runtime, metricsPort } = await onFreePorts(["https", "metrics"], async (ports) => ({
      runtime: await spawnOn(
        ports.https,
        "relay",
        ["--manifest", manifest, "--metrics-port", String(ports.metrics)],
        process.env,
      ),
      metricsPort: ports.metrics,
    }));
    try {
      const res = await fetch(`http://127.0.0.1:${metricsPort}/metrics`);
      expect(res.status).toBe(200);
      expect(res.headers.get("content-type")).toMatch(/^text\/plain/);
      expect(await res.text()).toMatch(/^# TYPE ifp_relay_operations_total counter$/m);
      expect((await httpsRequest(`${runtime.base}/metrics`, { ca: tls.ca })).status).toBe(404);
      await runtime.stopCleanly();
    } finally {
      await runtime.stop();
    }
    // The three refusals side by side: each is a process start, the slow part.
    const refused = await Promise.all(
      ["abc", "70000", "-1"].map(
        (bad) =>
          new Promise<{ bad: string; status: number | null; stderr: string }>((resolve) => {
            const p = spawn(
              process.execPath,
              [
                BIN,
                "relay",
                `--metrics-port=${bad}`,
                "--manifest",
                manifest,
                "--tls-cert",
                "x",
                "--tls-key",
                "y",
                "--nats",
                "nats://127.0.0.1:1",
              ],
              { stdio: ["ignore", "ignore", "pipe"], timeout: 20_000 },
            );
            let stderr = "";
            p.stderr.on("data", (c: Buffer) => {
              stderr += c.toString();
            });
            p.on("close", (status) => resolve({ bad, status, stderr }));
          }),
      ),
    );
    for (const r of refused) {
      expect(r.status, r.bad).toBe(2);
      expect(r.stderr).toMatch(/a port must be a number from 0 to 65535/);
    }
  });

  it("exits 2 for an unknown --nats-layout, and 1 for the isolated layout without a credential", () => {
    const dir = tempDir();
    const self = identity("layout-agent");
    const args = (manifest: string, ...more: string[]) => [
      ...[BIN, "agent", "--manifest", manifest, "--port", "0", "--signing-key", writeKey(dir, self)],
      ...["--tls-cert", tls.files.cert, "--tls-key", tls.files.key, "--nats", nats.url, ...more],
    ];
    const plain = writeAgentManifest(dir, { agentId: self.agentId });
    const unknown = spawnSync(process.execPath, args(plain, "--nats-layout", "shared"), { encoding: "utf8" });
    expect(unknown.status).toBe(2);
    expect(unknown.stderr).toMatch(/--nats-layout must be one of per-agent, isolated/);

    const noCreds = spawnSync(process.execPath, args(plain, "--nats-layout", "isolated"), { encoding: "utf8" });
    expect(noCreds.status).toBe(1);
    expect(noCreds.stdout + noCreds.stderr).toMatch(/the isolated NATS layout needs --nats-creds/);
  });

  it("exits 2 with usage for a missing flag, and 1 with a clear message for an invalid manifest", () => {
    const missing = spawnSync(process.execPath, [BIN, "agent", "--port", "0"], { encoding: "utf8" });
    expect(missing.status).toBe(2);
    expect(missing.stderr).toMatch(/--manifest is required/);
    expect(missing.stderr).toMatch(/usage:/);

    const dir = tempDir();
    const bad = join(dir, "bad.yaml");
    writeFileSync(bad, "apiVersion: ifp.dev/v1alpha1\nkind: Agent\nspec:\n  capabilities: nope\n");
    const invalid = spawnSync(
      process.execPath,
      [
        BIN,
        "agent",
        "--manifest",
        bad,
        "--port",
        "0",
        "--tls-cert",
        tls.files.cert,
        "--tls-key",
        tls.files.key,
        "--signing-key",
        bad,
        "--nats",
        nats.url,
      ],
      { encoding: "utf8" },
    );
    expect(invalid.status).toBe(1);
    expect(invalid.stdout + invalid.stderr).toMatch(/spec\.agentId/);
  });
});
