// Size limits are answered, not reset: a 1.5 MB POST gets its 413 every time, through Node's
// own https client, on every endpoint with a size limit. And inputs that cannot be
// canonicalized are a 400, never a 500.
import { request as httpsRaw } from "node:https";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { signRequest } from "../../src/protocol/http-signatures.ts";
import type { RunningRelay } from "../../src/relay/main.ts";
import { runAgent } from "../support/agent-harness.ts";
import { sign as edSign } from "node:crypto";
import canonicalize from "canonicalize";
import { DEFAULT_SIGNED_HEADERS } from "../../src/protocol/signing.ts";
import { message, peerOf, signed } from "../support/fixtures.ts";
import { alice, baseUrl, bob, relayEnv, runRelay, type RelayEnv } from "../support/relay-harness.ts";

let env: RelayEnv;
let relay: RunningRelay;
let agent: Awaited<ReturnType<typeof runAgent>>;

beforeAll(async () => {
  env = await relayEnv();
  relay = await runRelay(env);
  agent = await runAgent({ self: bob, natsUrl: env.nats.url, tls: env.tls, spec: { peers: [peerOf(alice)] } });
}, 60_000);

afterAll(async () => {
  await agent?.close();
  await relay?.close();
  await env?.close();
});

/**
 * POST with Node's https client, writing the whole body (chunked, without a Content-Length,
 * when asked), and report the status or the error.
 */
function post(
  url: string,
  body: Buffer,
  headers: Record<string, string> = {},
  chunked = false,
): Promise<{ status: number; text: string } | { error: string }> {
  return new Promise((resolve) => {
    const length = chunked ? {} : { "content-length": String(body.length) };
    const req = httpsRaw(
      url,
      {
        method: "POST",
        ca: env.tls.ca,
        agent: false,
        headers: { "content-type": "application/json", ...length, ...headers },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString() }));
        res.on("error", (e) => resolve({ error: e.message }));
      },
    );
    req.on("error", (e) => resolve({ error: (e as NodeJS.ErrnoException).code ?? e.message }));
    req.setTimeout(20_000, () => req.destroy(new Error("timeout")));
    if (!chunked) return void req.end(body);
    // In 64 KiB writes, as a streaming client sends.
    for (let i = 0; i < body.length; i += 65536) req.write(body.subarray(i, i + 65536));
    req.end();
  });
}

const big = () => Buffer.from(JSON.stringify({ ifp: 4, pad: "x".repeat(Number(process.env.HARDEN_BIG ?? 1_500_000)) }));

describe("a refusal for size reaches the sender", () => {
  it("the inbox answers a 1.5 MB POST with 413, twenty times out of twenty", async () => {
    const outcomes = [];
    for (let i = 0; i < 20; i++)
      outcomes.push(
        await post(`${agent.url.replace("127.0.0.1", "localhost")}/.well-known/agent/inbox`, big(), {}, i % 2 === 1),
      );
    expect(outcomes.map((o) => ("status" in o ? o.status : o.error))).toEqual(Array(20).fill(413));
    expect(JSON.parse((outcomes[0] as { text: string }).text)).toMatchObject({
      status: "error",
      code: "payload_too_large",
    });
  });

  it("the relay's publish does the same, signed or not", async () => {
    const url = `${baseUrl(relay)}/relay/publish`;
    const outcomes = [];
    for (let i = 0; i < 20; i++) {
      const body = big();
      const headers =
        i % 2
          ? await signRequest(
              { method: "POST", url, body, headers: { "content-type": "application/json" } },
              alice.signing,
            )
          : {};
      outcomes.push(await post(url, body, headers, i % 4 >= 2));
    }
    expect(outcomes.map((o) => ("status" in o ? o.status : o.error))).toEqual(Array(20).fill(413));
  });
});

describe("a refused body is not read without bound", () => {
  it("answers 413 and ends the connection once a sender keeps writing far past the limit", async () => {
    const url = `${agent.url.replace("127.0.0.1", "localhost")}/.well-known/agent/inbox`;
    const total = 64 * 1024 * 1024;
    const outcome = await new Promise<{ status?: number; written: number; ended: boolean }>((resolve) => {
      let status: number | undefined;
      const req = httpsRaw(
        url,
        { method: "POST", ca: env.tls.ca, agent: false, headers: { "content-type": "application/json" } },
        (res) => {
          status = res.statusCode;
          res.resume();
        },
      );
      const chunk = Buffer.alloc(256 * 1024, 0x20);
      let sent = 0;
      const finish = (ended: boolean) => resolve({ status, written: sent, ended });
      req.on("error", () => finish(true));
      req.on("close", () => finish(sent < total));
      const pump = () => {
        while (sent < total && !req.destroyed) {
          sent += chunk.length;
          if (!req.write(chunk)) return void req.once("drain", pump);
        }
        req.end();
      };
      req.setTimeout(30_000, () => req.destroy(new Error("timeout")));
      pump();
    });
    expect(outcome.status).toBe(413);
    expect(outcome.ended).toBe(true);
    expect(outcome.written).toBeLessThan(total);
  });
});

describe("the per-address limit is taken before the body is parsed", () => {
  it("inbox and relay answer 429, not 400, once an address has spent its budget on bad bodies", async () => {
    const limited = await runRelay(env, { limits: { perAddressPerMinute: 3 } });
    const b = await runAgent({
      self: bob,
      natsUrl: env.nats.url,
      tls: env.tls,
      spec: { peers: [peerOf(alice)], inbox: { rateLimit: { perAddressPerMinute: 3 } } },
    });
    try {
      for (const url of [
        `${b.url.replace("127.0.0.1", "localhost")}/.well-known/agent/inbox`,
        `${baseUrl(limited)}/relay/publish`,
      ]) {
        const statuses = [];
        for (let i = 0; i < 4; i++) {
          const res = await post(url, Buffer.from("{not json"));
          statuses.push("status" in res ? res.status : res.error);
        }
        expect(statuses, url).toEqual([400, 400, 400, 429]);
      }
    } finally {
      await b.close();
      await limited.close();
    }
  });
});

describe("inputs that cannot be canonicalized are refused with 400", () => {
  const loneSurrogate = (m: object) => JSON.stringify(m).replace('"hello"', '"\\ud800"');

  it("a lone surrogate in a message: inbox and relay publish", async () => {
    const m = signed(alice, "bob-agent", {}, "hello");
    const res = await post(
      `${agent.url.replace("127.0.0.1", "localhost")}/.well-known/agent/inbox`,
      Buffer.from(loneSurrogate(m)),
    );
    expect(res).toMatchObject({ status: 400 });
    const url = `${baseUrl(relay)}/relay/publish`;
    const body = Buffer.from(loneSurrogate(signed(alice, "bob-agent", {}, "hello")));
    const headers = await signRequest(
      { method: "POST", url, body, headers: { "content-type": "application/json" } },
      alice.signing,
    );
    expect(await post(url, body, headers)).toMatchObject({ status: 400 });
  });

  it("deep nesting in a message: inbox and relay publish", async () => {
    const depth = 100_000;
    const deep = JSON.parse(`${"[".repeat(depth)}${"]".repeat(depth)}`) as unknown;
    // Signed as signMessage would, by hand: the runtime now refuses to sign such a document.
    const unsigned = {
      ...message("alice-agent", "bob-agent", {}, "deep"),
      body: { text: "deep", parts: [{ content_type: "application/json", name: "deep", content: deep }] },
    };
    const signedHeaders = DEFAULT_SIGNED_HEADERS.filter((h) => h in unsigned.headers);
    const input = canonicalize({
      headers: Object.fromEntries(signedHeaders.map((h) => [h, (unsigned.headers as Record<string, unknown>)[h]])),
      body: unsigned.body,
    })!;
    const sig = edSign(null, Buffer.from(input), alice.signing.privateKey).toString("base64url");
    const m = {
      ...unsigned,
      security: {
        signatures: [
          {
            alg: "ed25519",
            key_id: "alice-agent#key-1",
            created: unsigned.headers.date,
            signed_headers: signedHeaders,
            signed_body: true,
            sig,
          },
        ],
      },
    };
    // Written by hand: JSON.stringify itself gives up on such depth.
    const text = JSON.stringify({
      ...(m as object),
      body: { text: "deep", parts: [{ content_type: "application/json", name: "deep", content: "__DEEP__" }] },
    }).replace('"__DEEP__"', `${"[".repeat(depth)}${"]".repeat(depth)}`);
    const res = await post(`${agent.url.replace("127.0.0.1", "localhost")}/.well-known/agent/inbox`, Buffer.from(text));
    expect(res).toMatchObject({ status: 400 });
    const url = `${baseUrl(relay)}/relay/publish`;
    const headers = await signRequest(
      { method: "POST", url, body: text, headers: { "content-type": "application/json" } },
      alice.signing,
    );
    expect(await post(url, Buffer.from(text), headers)).toMatchObject({ status: 400 });
  });

  it("deep nesting in any other body the relay takes: 400 naming the depth, never a 5xx", async () => {
    const deep = `${"[".repeat(20_000)}${"]".repeat(20_000)}`;
    for (const [path, text] of [
      ["/relay/publish/batch", `{"messages": [${deep}]}`],
      ["/relay/subscribe", `{"topics": ["t"], "webhook": ${deep}}`],
      ["/relay/messages/ack", `{"ids": ${deep}}`],
    ] as const) {
      const url = `${baseUrl(relay)}${path}`;
      const headers = await signRequest(
        { method: "POST", url, body: text, headers: { "content-type": "application/json" } },
        alice.signing,
      );
      const res = await post(url, Buffer.from(text), headers);
      expect(res, path).toMatchObject({ status: 400 });
      expect(JSON.parse((res as { text: string }).text), path).toEqual({
        status: "error",
        code: "invalid_format",
        message: expect.stringMatching(/nested deeper than 100 levels/),
      });
    }
  });
});
