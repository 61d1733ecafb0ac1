// A request signed for one relay cannot be replayed to another, and lives at most 60 s:
// two real relays on one NATS server, signed requests captured from one and sent to the other.
import { request as httpsRaw } from "node:https";
import WebSocket from "ws";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { signRequest } from "../../src/protocol/http-signatures.ts";
import type { RunningRelay } from "../../src/relay/main.ts";
import { baseUrl, bob, clientOf, raw, relayEnv, runRelay, type RelayEnv } from "../support/relay-harness.ts";

let env: RelayEnv;
let a: RunningRelay;
let b: RunningRelay;

beforeAll(async () => {
  env = await relayEnv();
  [a, b] = await Promise.all([runRelay(env), runRelay(env)]);
}, 60_000);

afterAll(async () => {
  await Promise.all([a?.close(), b?.close()]);
  await env?.close();
});

/** The status of a signed GET, without reading a stream that may never end. */
function statusOf(url: string, headers: Record<string, string>): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = httpsRaw(url, { headers, ca: env.tls.ca }, (res) => {
      resolve(res.statusCode ?? 0);
      req.destroy();
    });
    req.on("error", reject);
    req.setTimeout(10_000, () => req.destroy(new Error("no answer")));
    req.end();
  });
}

/** The status a WebSocket upgrade is answered with (101 when it opens). */
function upgradeStatus(url: string, headers: Record<string, string>): Promise<number> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { headers, ca: env.tls.ca });
    ws.once("open", () => {
      ws.close();
      resolve(101);
    });
    ws.once("unexpected-response", (_req, res) => {
      resolve(res.statusCode ?? 0);
      res.resume();
    });
    ws.once("error", (e) => reject(e));
  });
}

describe("relay request signatures are bound to one relay and live briefly", () => {
  it("a read signed for relay A is refused by relay B, whatever Host it carries", async () => {
    const path = "/relay/messages?limit=100";
    const headers = await signRequest({ method: "GET", url: `${baseUrl(a)}${path}` }, bob.signing);
    expect((await raw(env, a, { method: "GET", path, headers })).status).toBe(200);
    const replayed = await raw(env, b, { method: "GET", path, headers });
    expect(replayed).toMatchObject({ status: 401, body: { status: "error", code: "invalid_signature" } });
    const forgedHost = await raw(env, b, {
      method: "GET",
      path,
      headers: { ...headers, host: new URL(baseUrl(a)).host },
    });
    expect(forgedHost).toMatchObject({ status: 401, body: { code: "invalid_signature" } });
    // Each relay still serves its own callers.
    expect(await clientOf(env, b, bob).pull()).toMatchObject({ messages: [] });
  });

  it("the event stream and the WebSocket upgrade are bound the same way", async () => {
    const events = await signRequest({ method: "GET", url: `${baseUrl(a)}/relay/events` }, bob.signing);
    expect(await statusOf(`${baseUrl(b)}/relay/events`, events)).toBe(401);
    expect(await statusOf(`${baseUrl(a)}/relay/events`, events)).toBe(200);
    const ws = await signRequest({ method: "GET", url: `${baseUrl(a)}/relay/ws` }, bob.signing);
    expect(await upgradeStatus(`${baseUrl(b).replace("https", "wss")}/relay/ws`, ws)).toBe(401);
    expect(await upgradeStatus(`${baseUrl(a).replace("https", "wss")}/relay/ws`, ws)).toBe(101);
  });

  it("refuses a signature that leaves out @authority or expires, or outlives its 60 s and the 5 minutes of clock skew", async () => {
    const path = "/relay/messages";
    const url = `${baseUrl(a)}${path}`;
    const h = await signRequest({ method: "GET", url }, bob.signing);
    const noAuthority = { ...h, "signature-input": h["signature-input"]!.replace(' "@authority"', "") };
    expect(await raw(env, a, { method: "GET", path, headers: noAuthority })).toMatchObject({
      status: 401,
      body: { message: expect.stringMatching(/missing @authority/) },
    });
    const noExpires = { ...h, "signature-input": h["signature-input"]!.replace(/;expires=\d+/, "") };
    expect(await raw(env, a, { method: "GET", path, headers: noExpires })).toMatchObject({
      status: 401,
      body: { message: expect.stringMatching(/expires parameter/) },
    });
    const old = await signRequest({ method: "GET", url }, bob.signing, new Date(Date.now() - 362_000));
    expect(await raw(env, a, { method: "GET", path, headers: old })).toMatchObject({
      status: 401,
      body: { message: expect.stringMatching(/expired|older than/) },
    });
  });
});
