// The check kit's pure parts: reading answers (error bodies, media types), its own messages,
// the catalog of checks, the behaviours of its inbox, and the run-wide checks over what it saw.
import { describe, expect, it } from "vitest";
import { CHECKS } from "./catalog.ts";
import { checkMessage, clip, codeOf, errorBodyProblem, mediaType, parseJson } from "./common.ts";
import type { Answer } from "./probe.ts";
import { accept, type Delivery, failThenAccept, limitThenAccept, messageIdOf, refuse } from "./test-inbox.ts";
import { rateLimitCheck, redirectCheck } from "./tls.ts";
import { AGENT_GROUPS, type CheckContext, LEVELS, type Outcome, RELAY_GROUPS } from "./types.ts";

const answer = (status: number, text: string, headers: Record<string, string> = {}): Answer => ({
  status,
  text,
  headers: new Headers(headers),
});

describe("errorBodyProblem", () => {
  const body = (v: unknown) => answer(400, JSON.stringify(v));

  it("takes spec 2.7's {status: error, code, message}, of the code asked for when one is", () => {
    const ok = body({ status: "error", code: "invalid_format", message: "no" });
    expect(errorBodyProblem(ok)).toBeUndefined();
    expect(errorBodyProblem(ok, "invalid_format")).toBeUndefined();
    expect(errorBodyProblem(ok, ["unauthorized", "invalid_format"])).toBeUndefined();
  });

  it("says what is wrong: no JSON, the wrong shape, another code", () => {
    expect(errorBodyProblem(answer(500, "<html>oops</html>"))).toBe("the 500 has no JSON error body (spec 2.7)");
    expect(errorBodyProblem(answer(400, "null"))).toMatch(/has no JSON error body/);
    expect(errorBodyProblem(body({ status: "error", code: 7, message: "x" }))).toMatch(
      /^the 400's body is not \{status: "error", code, message\} \(spec 2.7\): /,
    );
    expect(errorBodyProblem(body({ status: "failed", code: "x", message: "x" }))).toMatch(/is not \{status/);
    expect(errorBodyProblem(body({ status: "error", code: "x" }))).toMatch(/is not \{status/);
    expect(errorBodyProblem(body({ status: "error", code: "rate_limited", message: "x" }), "invalid_format")).toBe(
      'the 400\'s error code is "rate_limited", expected invalid_format',
    );
    expect(errorBodyProblem(body({ status: "error", code: "x", message: "x" }), ["a", "b"])).toMatch(
      /expected a or b$/,
    );
  });
});

describe("reading answers", () => {
  it("mediaType: the type without parameters, lower case; empty without a header", () => {
    expect(mediaType(answer(200, "", { "content-type": "Application/JSON; charset=utf-8" }))).toBe("application/json");
    expect(mediaType(answer(200, ""))).toBe("");
  });

  it("codeOf: the error code for a reason, or nothing", () => {
    expect(codeOf(answer(400, '{"code":"invalid_format"}'))).toBe(" invalid_format");
    expect(codeOf(answer(400, '{"code":3}'))).toBe("");
    expect(codeOf(answer(400, "not json"))).toBe("");
  });

  it("parseJson: undefined for what is not JSON", () => {
    expect(parseJson('{"a":1}')).toEqual({ a: 1 });
    expect(parseJson("{")).toBeUndefined();
  });

  it("clip: one line, cut with an ellipsis, and says when it is empty", () => {
    expect(clip("a\n  b\tc")).toBe("a b c");
    expect(clip("x".repeat(130))).toBe(`${"x".repeat(120)}…`);
    expect(clip("abcdef", 3)).toBe("abc…");
    expect(clip("   ")).toBe("(empty)");
  });
});

describe("checkMessage", () => {
  it("is an IFP-4 message from and to the agents given, marked as the kit's, new ids each time", () => {
    const a = checkMessage("kit", "target");
    const b = checkMessage("kit", "target", { phase: "greeting", sequence: 3 }, "hi");
    expect(a).toMatchObject({
      ifp: 4,
      headers: { from: { agent: "kit" }, to: [{ agent: "target" }], sequence: 1, phase: "context" },
      body: { text: "ifp check: conformance probe" },
    });
    expect(a.headers.message_id).toMatch(/^msg:ifp-check-[0-9a-f-]{36}$/);
    expect(a.headers.conversation_id).toMatch(/^conv:ifp-check-/);
    expect(a.headers.date).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
    expect(b.headers.message_id).not.toBe(a.headers.message_id);
    expect(b).toMatchObject({ headers: { phase: "greeting", sequence: 3 }, body: { text: "hi" } });
  });
});

describe("the catalog", () => {
  it("gives every check a known level and a section, under a group the kit runs", () => {
    const groups = new Set<string>([...AGENT_GROUPS, ...RELAY_GROUPS]);
    for (const [id, rule] of Object.entries(CHECKS)) {
      expect(LEVELS, id).toContain(rule.level);
      expect(rule.section.trim(), id).not.toBe("");
      expect(groups.has(id.split(".")[0]!), id).toBe(true);
      expect(id, id).toMatch(/^[a-z0-9-]+(\.[a-z0-9-]+)+$/);
    }
  });
});

describe("the kit's inbox behaviours", () => {
  const delivery = (json: unknown): Pick<Delivery, "json"> => ({ json });
  const d = delivery({ headers: { message_id: "msg:1" } }) as Delivery;

  it("accept answers 202 with the message's id; refuse answers 400 invalid_format", () => {
    expect(accept(1, d)).toEqual({ status: 202, body: { status: "accepted", message_id: "msg:1" } });
    expect(refuse(1, d)).toMatchObject({ status: 400, body: { status: "error", code: "invalid_format" } });
  });

  it("failThenAccept fails the first deliveries of a message with 500, then accepts", () => {
    const b = failThenAccept(2);
    expect([1, 2, 3].map((n) => b(n, d).status)).toEqual([500, 500, 202]);
    expect(b(1, d).body).toMatchObject({ status: "error", code: "internal_error" });
  });

  it("limitThenAccept answers the first delivery 429 with Retry-After, then accepts", () => {
    const b = limitThenAccept(3);
    expect(b(1, d)).toMatchObject({ status: 429, headers: { "retry-after": "3" }, body: { code: "rate_limited" } });
    expect(b(2, d).status).toBe(202);
  });

  it("messageIdOf reads headers.message_id, and nothing else", () => {
    expect(messageIdOf(d)).toBe("msg:1");
    expect(messageIdOf(delivery({ headers: { message_id: 5 } }))).toBeUndefined();
    expect(messageIdOf(delivery(undefined))).toBeUndefined();
    expect(messageIdOf(delivery("x"))).toBeUndefined();
  });
});

describe("the run-wide checks over every answer seen", () => {
  /** The part of a run's context these checks use: the answers seen, and the verdicts recorded. */
  const run = (seen: { url: string; status: number; retryAfter: string | null }[]) => {
    const verdicts: { id: string; result: Outcome; reason: string }[] = [];
    const ctx = {
      probe: { seen },
      record: (id: string, result: Outcome, reason: string) => verdicts.push({ id, result, reason }),
    } as unknown as CheckContext;
    return { ctx, verdicts };
  };
  const seen = (status: number, retryAfter: string | null = null, url = "https://t.example/x") => ({
    url,
    status,
    retryAfter,
  });

  it("redirect-free: skipped without answers, failed by any redirect, naming it, else passed", () => {
    for (const [answers, result, reason] of [
      [[], "skip", /no HTTPS answer seen/],
      [[seen(200), seen(404)], "pass", /none of 2 answers was a redirect/],
      [[seen(200), seen(308, null, "https://t.example/moved")], "fail", /^https:\/\/t.example\/moved answered 308/],
      [[seen(301)], "fail", /answered 301/],
    ] as const) {
      const { ctx, verdicts } = run([...answers]);
      redirectCheck(ctx);
      expect(verdicts).toEqual([{ id: "tls.redirect-free", result, reason: expect.stringMatching(reason) }]);
    }
  });

  it("rate-limit headers: skipped without a 429, failed by one without a valid Retry-After, else passed", () => {
    for (const [answers, result] of [
      [[seen(200)], "skip"],
      [[seen(429, "3"), seen(429, "Wed, 21 Oct 2026 07:28:00 GMT")], "pass"],
      [[seen(429, "3"), seen(429, null)], "fail"],
      [[seen(429, "soon")], "fail"],
      [[seen(429, "-1")], "fail"],
    ] as const) {
      const { ctx, verdicts } = run([...answers]);
      rateLimitCheck(ctx, "relay.rate-limit-headers");
      expect(verdicts.map((v) => [v.id, v.result])).toEqual([["relay.rate-limit-headers", result]]);
    }
  });
});
