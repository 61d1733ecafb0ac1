import { describe, expect, it } from "vitest";
import type { ProtocolError } from "../protocol/errors.ts";
import { isTopicName } from "../protocol/relay-api.ts";
import { remainingTtlSeconds, resolveRecipients, traceEntry, withTraceEntry } from "./publish.ts";

const served = new Set(["bob", "carol", "alice"]);
const topics: Record<string, string[]> = { "capabilities.update": ["bob", "alice"], "gossip.exchange": ["carol"] };
const resolve = (to: string[], sender = "alice") =>
  resolveRecipients(
    to.map((agent) => ({ agent })),
    sender,
    (a) => served.has(a),
    (t) => topics[t] ?? [],
  );
const failure = (f: () => unknown) => {
  try {
    f();
  } catch (err) {
    return `${(err as ProtocolError).statusCode} ${(err as ProtocolError).code}`;
  }
  return "ok";
};

describe("recipients", () => {
  it("resolves direct recipients and topic subscribers, once each, never the sender of a topic copy", () => {
    expect(resolve(["bob"]).agents).toEqual(["bob"]);
    expect(resolve(["topic:capabilities.update"])).toEqual({ agents: ["bob"], topics: ["capabilities.update"] });
    expect(resolve(["topic:capabilities.update", "bob", "topic:gossip.exchange"]).agents.sort()).toEqual([
      "bob",
      "carol",
    ]);
    // Addressed directly, the sender does get its copy.
    expect(resolve(["alice"]).agents).toEqual(["alice"]);
    expect(resolve(["topic:nobody.listens"]).agents).toEqual([]);
  });

  it("refuses unknown agents (404) and malformed topic names (400)", () => {
    expect(failure(() => resolve(["bob", "dave"]))).toBe("404 not_found");
    for (const bad of [
      "topic:",
      "topic:a..b",
      "topic:.a",
      "topic:a b",
      "topic:a.*",
      "topic:a.>",
      `topic:${"a".repeat(129)}`,
    ]) {
      expect(
        failure(() => resolve([bad])),
        bad,
      ).toBe("400 invalid_format");
    }
  });

  it("takes dot-notation topic names", () => {
    for (const ok of ["gossip.exchange", "capabilities.update", "a", "a-b_c.d-1"])
      expect(isTopicName(ok), ok).toBe(true);
    for (const bad of ["", "a.", "a..b", "ä", "a/b"]) expect(isTopicName(bad), bad).toBe(false);
  });
});

describe("ttl_seconds", () => {
  const now = Date.parse("2026-03-04T12:00:00Z");
  it("counts from headers.date and never beyond ttl_seconds", () => {
    expect(remainingTtlSeconds({ date: "2026-03-04T12:00:00Z" }, now)).toBeUndefined();
    expect(remainingTtlSeconds({ date: "2026-03-04T12:00:00Z", ttl_seconds: 60 }, now)).toBe(60);
    expect(remainingTtlSeconds({ date: "2026-03-04T11:59:30Z", ttl_seconds: 60 }, now)).toBe(30);
    expect(remainingTtlSeconds({ date: "2026-03-04T11:59:30.500Z", ttl_seconds: 60 }, now)).toBe(31);
    // A date ahead of the relay's clock does not extend the TTL.
    expect(remainingTtlSeconds({ date: "2026-03-04T13:00:00Z", ttl_seconds: 60 }, now)).toBe(60);
  });

  it("refuses a message whose TTL has passed", () => {
    expect(failure(() => remainingTtlSeconds({ date: "2026-03-04T11:59:00Z", ttl_seconds: 60 }, now))).toBe(
      "400 invalid_format",
    );
    expect(failure(() => remainingTtlSeconds({ date: "2026-03-04T11:00:00Z", ttl_seconds: 60 }, now))).toBe(
      "400 invalid_format",
    );
  });
});

describe("trace entry", () => {
  it("has the spec 2.9 shape and is appended without touching the rest", () => {
    const entry = traceEntry("https://relay1.example/", "pete-agent", new Date("2026-03-04T23:58:13.456Z"));
    expect(entry).toEqual({
      by: "relay:https://relay1.example",
      with: "https+ifp-4",
      at: "2026-03-04T23:58:13Z",
      from: "pete-agent",
    });
    const m = { ifp: 4, headers: { a: 1 }, trace: { received: [{ by: "x" }], other: true }, security: { s: 1 } };
    expect(withTraceEntry(m, entry)).toEqual({ ...m, trace: { received: [{ by: "x" }, entry], other: true } });
    expect(m.trace.received).toHaveLength(1);
    expect(withTraceEntry({ ifp: 4 } as { ifp: number; trace?: unknown }, entry)).toEqual({
      ifp: 4,
      trace: { received: [entry] },
    });
  });
});
