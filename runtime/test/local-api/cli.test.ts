import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import type { NatsServer } from "../../../e2e/support/nats.ts";
import { httpsRequest } from "../../../e2e/support/https.ts";
import { describeExit, spawnProcess } from "../../../e2e/support/process.ts";
import type { localhostTls } from "../../../e2e/support/tls.ts";
import { identity, tempDir, writeAgentManifest, writeKey } from "../support/fixtures.ts";
import { onFreePorts } from "../support/free-ports.ts";
import { untilReady } from "../support/runtime-process.ts";
import { writeToken } from "../support/local-api-harness.ts";
import { withNatsAndTls } from "../support/agent-harness.ts";

const BIN = new URL("../../bin/ifp-runtime.ts", import.meta.url).pathname;

let nats: NatsServer;
let tls: Awaited<ReturnType<typeof localhostTls>>;
withNatsAndTls((n, t) => {
  nats = n;
  tls = t;
});

describe("ifp-runtime agent --local-api-tls-port --local-api-token-file", () => {
  const self = identity("cli-local-agent");
  const dir = tempDir();
  const manifest = writeAgentManifest(dir, { agentId: self.agentId });
  const key = writeKey(dir, self);
  const base = (port: number) => [
    "agent",
    "--manifest",
    manifest,
    "--signing-key",
    key,
    "--port",
    String(port),
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
    "--local-api-port",
    "0",
  ];

  it("refuses one flag without the other with the usage text (exit 2)", () => {
    for (const extra of [
      ["--local-api-tls-port", "9443"],
      ["--local-api-token-file", "/nowhere"],
    ]) {
      const res = spawnSync(process.execPath, [BIN, ...base(0), ...extra], { encoding: "utf8", timeout: 20_000 });
      expect(res.status, extra.join(" ")).toBe(2);
      expect(res.stderr).toMatch(/--local-api-(tls-port|token-file) needs --local-api-(tls-port|token-file)/);
      expect(res.stderr).toMatch(/usage:/);
    }
  });

  it("serves the local API over HTTPS with the token from the file, as the operator starts it", async () => {
    const tokenFile = join(dir, "token");
    writeToken(tokenFile, "z".repeat(43));
    // On free ports, chosen again when another test's server took one before the runtime listened.
    const { child, apiPort } = await onFreePorts(["https", "localApi"], async ({ https: port, localApi: apiPort }) => {
      const child = spawnProcess(
        "ifp-runtime agent",
        process.execPath,
        [BIN, ...base(port), `--local-api-tls-port=${apiPort}`, `--local-api-token-file=${tokenFile}`],
        { env: { ...process.env, IFP_LOG_LEVEL: "warn" } },
      );
      await untilReady(child, `https://localhost:${port}`, tls.ca);
      return { child, apiPort };
    });
    try {
      const url = `https://localhost:${apiPort}/dead-letters`;
      expect((await httpsRequest(url, { ca: tls.ca })).status).toBe(401);
      const ok = await httpsRequest(url, { ca: tls.ca, headers: { authorization: `Bearer ${"z".repeat(43)}` } });
      expect(ok.status, child.log()).toBe(200);
      expect(ok.json()).toEqual({ dead_letters: [] });
      // SIGTERM is a clean stop.
      expect(describeExit(await child.stop()), child.log()).toBe("exited with code 0");
    } finally {
      // Only cleanup here (bounded, and a no-op once it ended), so that a failure above is the one reported.
      await child.stop();
    }
  });
});
