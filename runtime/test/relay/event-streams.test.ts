import { request as httpsRaw } from "node:https";
import type { ClientRequest, IncomingMessage } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import WebSocket from "ws";
import { signRequest } from "../../src/protocol/http-signatures.ts";
import type { RunningRelay } from "../../src/relay/main.ts";
import type { TestIdentity } from "../support/fixtures.ts";
import {
  alice,
  baseUrl,
  bob,
  carol,
  openWs,
  relayEnv,
  runRelay,
  waitFor,
  type RelayEnv,
} from "../support/relay-harness.ts";

let env: RelayEnv;
beforeAll(async () => {
  env = await relayEnv();
});
afterAll(async () => {
  await env?.close();
});

/** Open GET /relay/events and keep it open: its status, and how to close it. */
async function openSse(
  relay: RunningRelay,
  who: TestIdentity,
): Promise<{ status: number; body: string; retryAfter?: string; close(): void }> {
  const url = `${baseUrl(relay)}/relay/events`;
  const headers = await signRequest({ method: "GET", url }, who.signing);
  return new Promise((resolve, reject) => {
    const req: ClientRequest = httpsRaw(url, { headers, ca: env.tls.ca }, (res: IncomingMessage) => {
      if (res.statusCode === 200) return resolve({ status: 200, body: "", close: () => req.destroy() });
      let body = "";
      res.on("data", (c: Buffer) => (body += c));
      res.on("end", () =>
        resolve({
          status: res.statusCode!,
          body,
          retryAfter: res.headers["retry-after"] as string | undefined,
          close: () => req.destroy(),
        }),
      );
    });
    req.on("error", reject);
    req.end();
  });
}

/** The status of a refused WebSocket upgrade (or 101). */
async function wsStatus(relay: RunningRelay, who: TestIdentity): Promise<number> {
  const url = `${baseUrl(relay).replace("https", "wss")}/relay/ws`;
  const headers = await signRequest({ method: "GET", url: url.replace("wss", "https") }, who.signing);
  const ws = new WebSocket(url, { headers, ca: env.tls.ca });
  return new Promise((resolve) => {
    ws.once("open", () => {
      ws.close();
      resolve(101);
    });
    ws.once("unexpected-response", (_req, res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    ws.once("error", () => resolve(0));
  });
}

describe("relay event streams are capped per agent and overall", () => {
  it("refuses a stream past the agent's cap with 429 and past the total with 503, both with Retry-After, and frees the slot on close", async () => {
    const relay = await runRelay(env, { limits: { maxStreamsPerAgent: 2, maxStreams: 3 } });
    const open: { close(): void }[] = [];
    try {
      const a1 = await openSse(relay, alice);
      const a2 = await openWs(env, relay, alice);
      open.push(a1, { close: () => void a2.close() });
      expect(a1.status).toBe(200);
      const a3 = await openSse(relay, alice);
      expect(a3.status).toBe(429);
      expect(JSON.parse(a3.body)).toMatchObject({
        code: "rate_limited",
        message: expect.stringMatching(/maxStreamsPerAgent/),
      });
      expect(Number(a3.retryAfter)).toBeGreaterThan(0);
      expect(await wsStatus(relay, alice)).toBe(429);
      const b1 = await openSse(relay, bob);
      open.push(b1);
      expect(b1.status).toBe(200);
      const c1 = await openSse(relay, carol);
      expect(c1.status).toBe(503);
      expect(JSON.parse(c1.body)).toMatchObject({ code: "unavailable", message: expect.stringMatching(/maxStreams/) });
      expect(await wsStatus(relay, carol)).toBe(503);
      // Closing a stream gives its slot back.
      a1.close();
      await waitFor("carol's stream to get the freed slot", async () => {
        const again = await openSse(relay, carol);
        open.push(again);
        return again.status === 200;
      });
    } finally {
      for (const s of open) s.close();
      await relay.close();
    }
  });
});
