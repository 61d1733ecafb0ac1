// --trusted-proxies: the per-address limit (checked before any signature) keys on the real
// client behind a trusted proxy, and on the peer's own address for everyone else. The runtime
// runs as users run it: the ifp-runtime command with the flag.
import { spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { request as rawHttpsRequest } from "node:https";
import { describe, expect, it } from "vitest";
import type { NatsServer } from "../../../e2e/support/nats.ts";
import type { localhostTls } from "../../../e2e/support/tls.ts";
import { httpsRequest } from "../../../e2e/support/https.ts";
import { describeExit, spawnProcess } from "../../../e2e/support/process.ts";
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
import { withNatsAndTls } from "../support/agent-harness.ts";

const BIN = new URL("../../bin/ifp-runtime.ts", import.meta.url).pathname;

let nats: NatsServer;
let tls: Awaited<ReturnType<typeof localhostTls>>;
withNatsAndTls((n, t) => {
  nats = n;
  tls = t;
});

const sender = identity("proxied-sender");
const self = identity("proxied-agent");

/**
 * ifp-runtime MODE with `extra` flags on a free loopback port (chosen again when it was taken
 * before the runtime listened), its output kept (and printed when a test fails). stop() is
 * SIGTERM, bounded, and a no-op once it ended; stopCleanly() also expects exit code 0.
 */
function spawnRuntime(mode: "agent" | "relay", extra: string[]) {
  return onFreePorts(["https"], (ports) => spawnOn(ports.https, mode, extra));
}

async function spawnOn(port: number, mode: "agent" | "relay", extra: string[]) {
  const dir = tempDir();
  const modeArgs =
    mode === "agent"
      ? [
          "--manifest",
          writeAgentManifest(dir, {
            agentId: self.agentId,
            peers: [peerOf(sender)],
            inbox: { rateLimit: { perAddressPerMinute: 2, perSenderPerMinute: 1000 } },
          }),
          "--signing-key",
          writeKey(dir, self),
          "--local-api-port",
          "0",
        ]
      : [
          "--manifest",
          writeRelayManifest(dir, {
            url: "https://relay.test",
            agents: [peerOf(sender)],
            limits: { perAddressPerMinute: 2 },
          }),
        ];
  const child = spawnProcess(
    `ifp-runtime ${mode}`,
    process.execPath,
    [
      BIN,
      mode,
      ...modeArgs,
      ...extra,
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
    ],
    { env: { ...process.env, IFP_LOG_LEVEL: "warn" } },
  );
  const base = `https://localhost:${port}`;
  await untilReady(child, base, tls.ca);
  return {
    /** One request that the per-address limit counts, with the given X-Forwarded-For. */
    async hit(xff?: string | string[]) {
      const headers: Record<string, string> = {};
      if (xff !== undefined) headers["x-forwarded-for"] = Array.isArray(xff) ? xff.join(", ") : xff;
      const res =
        mode === "agent"
          ? await httpsRequest(`${base}/.well-known/agent/inbox`, {
              method: "POST",
              headers: { ...headers, "content-type": "application/json" },
              body: JSON.stringify(signed(sender, self.agentId)),
              ca: tls.ca,
            })
          : await httpsRequest(`${base}/relay/messages`, { headers, ca: tls.ca });
      return {
        status: res.status,
        body: res.text ? (JSON.parse(res.text) as { code: string; message: string }) : undefined,
      };
    },
    /**
     * One WebSocket upgrade to the relay's /relay/ws, unsigned (401 unless limited first), with
     * the given X-Forwarded-For: the status and error body it is refused with.
     */
    upgrade(xff?: string | string[]) {
      const headers: Record<string, string> = {
        connection: "Upgrade",
        upgrade: "websocket",
        "sec-websocket-key": randomBytes(16).toString("base64"),
        "sec-websocket-version": "13",
      };
      if (xff !== undefined) headers["x-forwarded-for"] = Array.isArray(xff) ? xff.join(", ") : xff;
      return new Promise<{ status: number; retryAfter?: string; body?: { code: string; message: string } }>(
        (resolve, reject) => {
          const req = rawHttpsRequest(`${base}/relay/ws`, { headers, ca: tls.ca, timeout: 15_000 });
          req.on("response", (res) => {
            const chunks: Buffer[] = [];
            res.on("data", (c: Buffer) => chunks.push(c));
            res.on("end", () => {
              const text = Buffer.concat(chunks).toString("utf8");
              resolve({
                status: res.statusCode ?? 0,
                retryAfter: res.headers["retry-after"] as string | undefined,
                body: text ? JSON.parse(text) : undefined,
              });
            });
          });
          req.on("upgrade", (res, socket) => {
            socket.destroy();
            resolve({ status: res.statusCode ?? 101 });
          });
          req.on("timeout", () => req.destroy(new Error("upgrade timed out")));
          req.on("error", reject);
          req.end();
        },
      );
    },
    output: () => child.log(),
    stop: () => child.stop(),
    async stopCleanly() {
      expect(describeExit(await child.stop()), child.log()).toBe("exited with code 0");
    },
  };
}

/** The status the request that is not limited gets: 202 for the agent's inbox, 401 for an unsigned relay request. */
const passes = { agent: 202, relay: 401 } as const;

describe.each(["agent", "relay"] as const)("--trusted-proxies (%s mode)", (mode) => {
  it("behind a trusted proxy, each real client has its own bucket", async () => {
    const rt = await spawnRuntime(mode, ["--trusted-proxies=10.0.0.0/8,127.0.0.1/32"]);
    try {
      for (let i = 0; i < 2; i++) expect((await rt.hit("203.0.113.1")).status).toBe(passes[mode]);
      const limited = await rt.hit("203.0.113.1");
      expect(limited.status).toBe(429);
      expect(limited.body).toMatchObject({ code: "rate_limited", message: "too many requests from 203.0.113.1" });
      // The same client written as IPv4-mapped IPv6 is the same bucket.
      expect((await rt.hit("::ffff:203.0.113.1")).status).toBe(429);
      // Other clients through the same proxy are not affected.
      expect((await rt.hit("203.0.113.2")).status).toBe(passes[mode]);
      // A chain: the nearest address that is not a trusted proxy is the client; what it claims beyond is not believed.
      expect((await rt.hit(["203.0.113.1", "198.51.100.7", "10.1.2.3"])).status).toBe(passes[mode]);
      expect((await rt.hit(["203.0.113.3", "198.51.100.7", "10.1.2.3"])).status).toBe(passes[mode]);
      const chained = await rt.hit(["203.0.113.4", "198.51.100.7"]);
      expect(chained.status).toBe(429);
      expect(chained.body?.message).toBe("too many requests from 198.51.100.7");
      await rt.stopCleanly();
    } finally {
      await rt.stop();
    }
  });

  it("the client is the first untrusted address from the right: entries to its left never pick the bucket, however broad the trusted block", async () => {
    // A broad block (all of loopback, as a pod network would be): the peer and 127.0.0.2 are proxies.
    const rt = await spawnRuntime(mode, ["--trusted-proxies=127.0.0.0/8"]);
    try {
      // The entries a client writes itself stand left of the address its proxy saw: changing them changes nothing.
      expect((await rt.hit(["203.0.113.10", "198.51.100.9", "127.0.0.2"])).status).toBe(passes[mode]);
      expect((await rt.hit(["203.0.113.11", "198.51.100.9", "127.0.0.2"])).status).toBe(passes[mode]);
      const spoofed = await rt.hit(["203.0.113.12", "10.9.9.9", "198.51.100.9", "127.0.0.2"]);
      expect(spoofed.status).toBe(429);
      expect(spoofed.body?.message).toBe("too many requests from 198.51.100.9");
      // Another client behind the same proxies keeps its own bucket.
      expect((await rt.hit(["198.51.100.10", "127.0.0.2"])).status).toBe(passes[mode]);
      await rt.stopCleanly();
    } finally {
      await rt.stop();
    }
  });

  it("from a peer that is not a trusted proxy, X-Forwarded-For is ignored: one bucket", async () => {
    const rt = await spawnRuntime(mode, ["--trusted-proxies=10.0.0.0/8"]);
    try {
      expect((await rt.hit("203.0.113.1")).status).toBe(passes[mode]);
      expect((await rt.hit("203.0.113.2")).status).toBe(passes[mode]);
      const limited = await rt.hit("203.0.113.3");
      expect(limited.status).toBe(429);
      expect(limited.body?.message).toBe("too many requests from 127.0.0.1");
      await rt.stopCleanly();
    } finally {
      await rt.stop();
    }
  });

  it("without the flag, X-Forwarded-For is ignored", async () => {
    const rt = await spawnRuntime(mode, []);
    try {
      expect((await rt.hit("203.0.113.1")).status).toBe(passes[mode]);
      expect((await rt.hit("203.0.113.2")).status).toBe(passes[mode]);
      expect((await rt.hit()).status).toBe(429);
      await rt.stopCleanly();
    } finally {
      await rt.stop();
    }
  });

  it("malformed X-Forwarded-For from a trusted proxy opens no new buckets: the proxy's own address is used", async () => {
    const rt = await spawnRuntime(mode, ["--trusted-proxies=127.0.0.1"]);
    try {
      const junk = [
        "not-an-ip",
        "203.0.113.1:5555",
        "",
        " , ,",
        "x".repeat(4000),
        "203.0.113.1, <script>",
        "999.1.1.1",
      ];
      const answers = [];
      for (const xff of junk) answers.push(await rt.hit(xff));
      // Two taken from the proxy's bucket (127.0.0.1), then limited, never a 5xx; the empty ones count as the proxy too.
      expect(answers.map((a) => a.status)).toEqual([passes[mode], passes[mode], 429, 429, 429, 429, 429]);
      expect(answers[2]!.body?.message).toBe("too many requests from 127.0.0.1");
      // A well-formed client address still has its own bucket.
      expect((await rt.hit("203.0.113.50")).status).toBe(passes[mode]);
      await rt.stopCleanly();
    } finally {
      await rt.stop();
    }
  });
});

describe("--trusted-proxies and the relay's WebSocket upgrade", () => {
  it("behind a trusted proxy, bad upgrades limit their own client only, the bucket its HTTP requests share", async () => {
    const rt = await spawnRuntime("relay", ["--trusted-proxies=127.0.0.1"]);
    try {
      for (let i = 0; i < 2; i++) expect((await rt.upgrade("203.0.113.1")).status).toBe(401);
      const limited = await rt.upgrade("203.0.113.1");
      expect(limited.status).toBe(429);
      expect(limited.body).toMatchObject({ code: "rate_limited", message: "too many requests from 203.0.113.1" });
      expect(Number(limited.retryAfter)).toBeGreaterThan(0);
      // The other clients behind the same proxy are not locked out, by upgrades or by requests.
      expect((await rt.upgrade("203.0.113.2")).status).toBe(401);
      expect((await rt.upgrade(["203.0.113.66", "203.0.113.3"])).status).toBe(401);
      expect((await rt.hit("203.0.113.4")).status).toBe(401);
      // One client, one bucket: its HTTP requests are limited by its upgrades.
      expect((await rt.hit("203.0.113.1")).status).toBe(429);
      await rt.stopCleanly();
    } finally {
      await rt.stop();
    }
  });

  it("from a peer that is not a trusted proxy, the upgrade's X-Forwarded-For is ignored: one bucket", async () => {
    const rt = await spawnRuntime("relay", ["--trusted-proxies=10.0.0.0/8"]);
    try {
      expect((await rt.upgrade("203.0.113.1")).status).toBe(401);
      expect((await rt.upgrade("203.0.113.2")).status).toBe(401);
      const limited = await rt.upgrade("203.0.113.3");
      expect(limited.status).toBe(429);
      expect(limited.body?.message).toBe("too many requests from 127.0.0.1");
      await rt.stopCleanly();
    } finally {
      await rt.stop();
    }
  });
});

describe("--trusted-proxies refuses what is not an address", () => {
  it.each(["10.0.0.0/33", "example.com", "10.0.0.0/8,nope", "::1/129", "10.0.0.0/-1"])("exits 2 on %s", (value) => {
    const res = spawnSync(
      process.execPath,
      [
        BIN,
        "agent",
        `--trusted-proxies=${value}`,
        "--manifest",
        "/nonexistent",
        "--tls-cert",
        "x",
        "--tls-key",
        "y",
        "--signing-key",
        "z",
        "--nats",
        "nats://127.0.0.1:1",
      ],
      {
        encoding: "utf8",
        timeout: 20_000,
      },
    );
    expect(res.status).toBe(2);
    expect(res.stderr).toMatch(/--trusted-proxies takes IP addresses or CIDR blocks/);
  });
});
