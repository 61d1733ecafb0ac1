import pino from "pino";
import { describe, expect, it } from "vitest";
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
    ["too large", { body: JSON.stringify({ a: "x".repeat(100) }), headers: { "content-type": "application/json" } }, 413, "payload_too_large"],
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
    expect(res.json()).toEqual({ status: "error", code: "internal_error", message: expect.not.stringContaining("secret") });
  });

  it("protocol errors keep their status, code and headers", async () => {
    const res = await app.inject({ method: "GET", url: "/limited" });
    expect(res.statusCode).toBe(429);
    expect(res.headers["retry-after"]).toBe("7");
    expect(toProtocolError(new ProtocolError(401, "invalid_signature", "x")).statusCode).toBe(401);
  });
});
