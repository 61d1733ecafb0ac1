import { describe, expect, it } from "vitest";
import { runHardening, table } from "../../bench/hardening.ts";

// The part of `npm run test:hardening` that fits in CI: every case of bad input against the
// real agent and relay runtimes (fewer requests of each), the relay's WebSocket among them, and
// the TLS checks.
describe("hardening: bad input against the real runtimes", () => {
  it("answers every malformed, oversize, nested, mistyped, misencoded, duplicate-key and tampered request, bad WebSocket upgrade and malformed frame with its documented 4xx and error body (or close code), never a 5xx or a crash; refuses TLS 1.0/1.1 and plain HTTP", async () => {
    const r = await runHardening({ requests: Number(process.env.IFP_HARDENING_REQUESTS ?? 1100), concurrency: 8 });
    const report = table(r);
    expect(r.crashes, report).toBe(0);
    expect(r.fiveXx, report).toBe(0);
    expect(r.networkErrors, report).toBe(0);
    expect(r.unexpected, report).toBe(0);
    // Each answer is the documented one: {status: "error", code, message} with the case's code, the
    // error frame on an open WebSocket, or the close code RFC 6455 gives.
    expect(r.wrongBodies, report).toBe(0);
    for (const c of r.cases) expect(c.sent, c.kind).toBeGreaterThan(0);
    expect(r.cases.filter((c) => c.target === "relay ws").length, report).toBeGreaterThanOrEqual(10);
    expect(
      r.tls.every((t) => t.refused),
      report,
    ).toBe(true);
    // Memory bounded: growth over the run stays under 150 MiB per runtime.
    expect(r.rssMiB.agent.end - r.rssMiB.agent.start, report).toBeLessThan(150);
    expect(r.rssMiB.relay.end - r.rssMiB.relay.start, report).toBeLessThan(150);
  }, 240_000);
});
