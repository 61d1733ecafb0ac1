import pino from "pino";
import { describe, expect, it } from "vitest";
import { waitFor } from "../../../e2e/support/wait.ts";
import { ProtocolError } from "../protocol/errors.ts";
import { createServer, toProtocolError } from "./http.ts";

describe("error mapping", () => {
  const app = createServer({ logger: pino({ level: "silent" }), bodyLimit: 64 });
  app.post("/echo", async (req) => req.body);
  app.get("/boom", async () => {
    throw new Error("secret detail");
  });
  app.get("/limited", async () => {
    throw new ProtocolError(429, "rate_limited", "slow down", { "retry-after": "7" });
  });

  it.each([
    ["invalid JSON", { body: "{nope", headers: { "content-type": "application/json" } }, 400, "invalid_format"],
    ["empty JSON body", { body: "", headers: { "content-type": "application/json" } }, 400, "invalid_format"],
    ["wrong media type", { body: "x", headers: { "content-type": "text/plain" } }, 415, "unsupported_media_type"],
    [
      "too large",
      { body: JSON.stringify({ a: "x".repeat(100) }), headers: { "content-type": "application/json" } },
      413,
      "payload_too_large",
    ],
  ])("%s → $2 $3", async (_name, req, status, code) => {
    const res = await app.inject({ method: "POST", url: "/echo", ...req });
    expect(res.statusCode).toBe(status);
    expect(res.json()).toEqual({ status: "error", code, message: expect.any(String) });
  });

  it("unknown paths answer 404 with the error body", async () => {
    const res = await app.inject({ method: "GET", url: "/nowhere?x=1" });
    expect(res.statusCode).toBe(404);
    expect(res.json()).toEqual({ status: "error", code: "not_found", message: "no endpoint GET /nowhere" });
  });

  it("unexpected failures are 500 internal_error without leaking details", async () => {
    const res = await app.inject({ method: "GET", url: "/boom" });
    expect(res.statusCode).toBe(500);
    expect(res.json()).toEqual({
      status: "error",
      code: "internal_error",
      message: expect.not.stringContaining("secret"),
    });
  });

  it("protocol errors keep their status, code and headers", async () => {
    const res = await app.inject({ method: "GET", url: "/limited" });
    expect(res.statusCode).toBe(429);
    expect(res.headers["retry-after"]).toBe("7");
    expect(toProtocolError(new ProtocolError(401, "invalid_signature", "x")).statusCode).toBe(401);
  });
});

describe("an unfinished body", () => {
  it("loses its connection once the deadline passed, while a finished request and a bodiless one on long-lived connections do not", async () => {
    const { default: Fastify } = await import("fastify");
    const { connect } = await import("node:net");
    const { cutOffUnfinishedBodies } = await import("./http.ts");
    const app = Fastify();
    cutOffUnfinishedBodies(app, 300);
    app.post("/in", async (req) => ({ got: req.body }));
    app.get("/slow", async () => new Promise((r) => setTimeout(() => r({ ok: true }), 800)));
    await app.listen({ port: 0, host: "127.0.0.1" });
    const port = (app.server.address() as { port: number }).port;
    try {
      const open = (request: string) => {
        const socket = connect(port, "127.0.0.1", () => socket.write(request));
        let data = "";
        socket.on("data", (d) => (data += d.toString()));
        const closed = new Promise<number>((r) => socket.on("close", () => r(Date.now())));
        return { socket, closed, data: () => data };
      };
      const t0 = Date.now();
      // Headers and the start of a 1000-byte body, then nothing.
      const stalled = open(
        "POST /in HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{",
      );
      // A GET whose answer takes longer than the deadline: its request was complete.
      const slow = open("GET /slow HTTP/1.1\r\nHost: a\r\n\r\n");
      expect((await stalled.closed) - t0).toBeLessThan(3_000);
      // Its answer comes after the route's own 800 ms, past the deadline, on the connection kept open.
      await waitFor("the slow route's answer", () => /"ok":true/.test(slow.data()), 5_000, 20);
      expect(slow.data()).toMatch(/^HTTP\/1.1 200[\s\S]*"ok":true/);
      slow.socket.destroy();
      // A complete POST is answered.
      const done = open(
        'POST /in HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\nContent-Length: 7\r\nConnection: close\r\n\r\n{"a":1}',
      );
      await done.closed;
      expect(done.data()).toMatch(/^HTTP\/1.1 200[\s\S]*"got":\{"a":1\}/);
    } finally {
      await app.close();
    }
  });
});
