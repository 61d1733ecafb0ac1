import { spawn, spawnSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startNats, type NatsServer } from "../../e2e/support/nats.ts";
import { localhostTls } from "../../e2e/support/tls.ts";
import { httpsRequest } from "../../e2e/support/https.ts";
import { freePort, waitFor } from "../../e2e/support/ports.ts";
import { identity, peerOf, signed, tempDir, writeAgentManifest, writeKey } from "./fixtures.ts";

const BIN = new URL("../bin/ifp-runtime.ts", import.meta.url).pathname;

let nats: NatsServer;
let tls: Awaited<ReturnType<typeof localhostTls>>;
beforeAll(async () => {
  [nats, tls] = await Promise.all([startNats(), localhostTls()]);
});
afterAll(async () => {
  await nats?.close();
});

describe("ifp-runtime command line", () => {
  it("runs the agent mode from the documented start contract and stops cleanly on SIGTERM", async () => {
    const dir = tempDir();
    const self = identity("cli-agent");
    const pete = identity("pete-agent");
    const manifest = writeAgentManifest(dir, { agentId: "cli-agent", capabilities: [{ name: "ping", description: "Responds to connectivity tests" }], peers: [peerOf(pete)] });
    const port = await freePort();
    const child = spawn(
      process.execPath,
      [BIN, "agent", "--manifest", manifest, "--port", String(port), "--host", "127.0.0.1", "--tls-cert", tls.files.cert, "--tls-key", tls.files.key, "--signing-key", writeKey(dir, self), "--nats", nats.url, "--local-api-port", "0"],
      { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, IFP_LOG_LEVEL: "warn" } },
    );
    let output = "";
    child.stdout.on("data", (d) => (output += d));
    child.stderr.on("data", (d) => (output += d));
    const base = `https://localhost:${port}`;
    try {
      await waitFor("the runtime to be ready", async () => (await httpsRequest(`${base}/readyz`, { ca: tls.ca })).status === 200, 30_000, 200);
      const caps = await httpsRequest(`${base}/.well-known/agent/capabilities`, { ca: tls.ca });
      expect(caps.json().capabilities).toEqual([{ name: "ping", version: "1", description: "Responds to connectivity tests" }]);
      const res = await httpsRequest(`${base}/.well-known/agent/inbox`, {
        method: "POST",
        ca: tls.ca,
        headers: { "content-type": "application/json" },
        body: JSON.stringify(signed(pete, "cli-agent")),
      });
      expect(res.status).toBe(202);
    } finally {
      const exited = new Promise<number | null>((r) => child.once("exit", (code) => r(code)));
      child.kill("SIGTERM");
      expect(await exited).toBe(0);
    }
    expect(output).not.toMatch(/"level":(50|60)/);
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
      [BIN, "agent", "--manifest", bad, "--port", "0", "--tls-cert", tls.files.cert, "--tls-key", tls.files.key, "--signing-key", bad, "--nats", nats.url],
      { encoding: "utf8" },
    );
    expect(invalid.status).toBe(1);
    expect(invalid.stdout + invalid.stderr).toMatch(/spec\.agentId/);
  });
});
