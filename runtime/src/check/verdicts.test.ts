// How a run's verdicts become its results: at the catalog's level and section, once per check
// (a later verdict replacing the first where it stood), reasons clipped to one line.
import { describe, expect, it } from "vitest";
import { CHECKS } from "./catalog.ts";
import { MAX_REASON, Verdicts } from "./verdicts.ts";

describe("Verdicts", () => {
  it("records each check at the level and section the catalog gives it, in the order first recorded", () => {
    const v = new Verdicts();
    v.record("inbox.accepted", "pass", "202");
    v.record("inbox.idempotent", "fail", "a second 202 stored twice");
    v.record("relay.topics", "skip", "not served");
    expect(v.results).toEqual([
      { id: "inbox.accepted", ...CHECKS["inbox.accepted"], result: "pass", reason: "202" },
      { id: "inbox.idempotent", ...CHECKS["inbox.idempotent"], result: "fail", reason: "a second 202 stored twice" },
      { id: "relay.topics", ...CHECKS["relay.topics"], result: "skip", reason: "not served" },
    ]);
    expect(v.results.map((r) => r.level)).toEqual(["MUST", "SHOULD", "MAY"]);
  });

  it("replaces a check's verdict with a later one where the first stood, never listing it twice", () => {
    const v = new Verdicts();
    v.record("tls.version", "skip", "not reached yet");
    v.record("tls.plain-http-refused", "pass", "refused");
    v.record("tls.version", "fail", "TLS 1.1 only");
    expect(v.results.map((r) => [r.id, r.result, r.reason])).toEqual([
      ["tls.version", "fail", "TLS 1.1 only"],
      ["tls.plain-http-refused", "pass", "refused"],
    ]);
  });

  it("throws for a check the catalog does not know (a mistake of the kit), recording nothing", () => {
    const v = new Verdicts();
    expect(() => v.record("inbox.made-up", "pass", "ok")).toThrow("unknown check inbox.made-up");
    expect(v.results).toEqual([]);
    expect(v.has("inbox.made-up")).toBe(false);
  });

  it("says which checks have a verdict", () => {
    const v = new Verdicts();
    expect(v.has("inbox.accepted")).toBe(false);
    v.record("inbox.accepted", "skip", "needs --key");
    expect(v.has("inbox.accepted")).toBe(true);
  });

  it("keeps a reason on one line, clipped to MAX_REASON characters and an ellipsis", () => {
    const v = new Verdicts();
    v.record("inbox.schema", "fail", `answered 400:\n  ${"x".repeat(2 * MAX_REASON)}`);
    const { reason } = v.results[0]!;
    expect(reason).toHaveLength(MAX_REASON + 1);
    expect(reason).toMatch(/^answered 400: x+…$/);
    v.record("inbox.schema", "fail", "");
    expect(v.results[0]!.reason).toBe("(empty)");
  });
});
