// How `ifp check` grades: which levels' misses fail the run (exit code, --strict, --profile),
// and the report a person reads.
import { describe, expect, it } from "vitest";
import { exitCode, failingLevels, failsRun, formatReport, type Gate, summarize } from "./report.ts";
import { type CheckResult, type Level, LEVELS, type Outcome, type Report } from "./types.ts";

const result = (id: string, level: Level, outcome: Outcome, reason = `${id} ${outcome}`): CheckResult => ({
  id,
  section: "spec 4.1",
  level,
  result: outcome,
  reason,
});

/** A report of these results, its summary tallied as the runner tallies it. */
function reportOf(results: CheckResult[], requests = 7): Report {
  return { target: "https://agent.example", kind: "agent", requests, results, summary: summarize(results) };
}

const OUTCOMES: readonly Outcome[] = ["pass", "fail", "skip"];
const GATES: readonly Gate[] = [{}, { strict: true }, { profile: true }, { strict: true, profile: true }];

describe("summarize", () => {
  it("counts each outcome over every check and per level, every level present", () => {
    const summary = summarize([
      result("a", "MUST", "pass"),
      result("b", "MUST", "fail"),
      result("c", "SHOULD", "skip"),
      result("d", "profile", "fail"),
      result("e", "MUST", "pass"),
    ]);
    expect(summary).toEqual({
      pass: 2,
      fail: 2,
      skip: 1,
      levels: {
        MUST: { pass: 2, fail: 1, skip: 0 },
        SHOULD: { pass: 0, fail: 0, skip: 1 },
        MAY: { pass: 0, fail: 0, skip: 0 },
        profile: { pass: 0, fail: 1, skip: 0 },
      },
    });
  });

  it("is all zeros for no results", () => {
    const zero = { pass: 0, fail: 0, skip: 0 };
    expect(summarize([])).toEqual({ ...zero, levels: Object.fromEntries(LEVELS.map((l) => [l, zero])) });
  });
});

describe("failsRun", () => {
  it("fails the run on a MUST always, a SHOULD only with --strict, a profile check only with --profile, a MAY never", () => {
    const gates = [{}, { strict: true }, { profile: true }, { strict: true, profile: true }];
    const table = Object.fromEntries(LEVELS.map((level) => [level, gates.map((g) => failsRun(level, g))]));
    expect(table).toEqual({
      MUST: [true, true, true, true],
      SHOULD: [false, true, false, true],
      MAY: [false, false, false, false],
      profile: [false, false, true, true],
    });
    expect(failsRun("SHOULD")).toBe(false);
  });
});

describe("failingLevels", () => {
  it("lists the levels failsRun fails the run on, in the catalog's order: what the JSON report's gate says", () => {
    expect(GATES.map((g) => failingLevels(g))).toEqual([
      ["MUST"],
      ["MUST", "SHOULD"],
      ["MUST", "profile"],
      ["MUST", "SHOULD", "profile"],
    ]);
    for (const g of GATES) expect(failingLevels(g)).toEqual(LEVELS.filter((l) => failsRun(l, g)));
  });
});

describe("exitCode", () => {
  it("is 1 exactly for a failed check of a level the gate fails the run on: every level, outcome and gate", () => {
    for (const gate of GATES)
      for (const level of LEVELS)
        for (const outcome of OUTCOMES) {
          const report = reportOf([result("a", "MUST", "pass"), result("b", level, outcome)]);
          const want = outcome === "fail" && failsRun(level, gate) ? 1 : 0;
          expect(exitCode(report, gate), `${level} ${outcome} ${JSON.stringify(gate)}`).toBe(want);
        }
  });

  it("is 0 when everything passed or was skipped, whatever the gate", () => {
    const report = reportOf([result("a", "MUST", "pass"), result("b", "SHOULD", "skip"), result("c", "MUST", "skip")]);
    expect(exitCode(report)).toBe(0);
    expect(exitCode(report, { strict: true, profile: true })).toBe(0);
  });

  it("is 1 for a failed MUST, and a skipped MUST never fails", () => {
    expect(exitCode(reportOf([result("a", "MUST", "fail")]))).toBe(1);
    expect(exitCode(reportOf([result("a", "MUST", "skip"), result("b", "SHOULD", "pass")]))).toBe(0);
  });

  it("fails on a missed SHOULD only with --strict, and on a missed profile check only with --profile", () => {
    const should = reportOf([result("a", "MUST", "pass"), result("b", "SHOULD", "fail")]);
    expect(exitCode(should)).toBe(0);
    expect(exitCode(should, { strict: true })).toBe(1);
    expect(exitCode(should, { profile: true })).toBe(0);
    const profile = reportOf([result("a", "profile", "fail")]);
    expect(exitCode(profile)).toBe(0);
    expect(exitCode(profile, { strict: true })).toBe(0);
    expect(exitCode(profile, { profile: true })).toBe(1);
  });

  it("never fails on a missed MAY (an optional feature)", () => {
    expect(exitCode(reportOf([result("a", "MAY", "fail")]), { strict: true, profile: true })).toBe(0);
  });

  it("is 0 for an empty report", () => {
    expect(exitCode(reportOf([]), { strict: true })).toBe(0);
  });
});

describe("formatReport", () => {
  const report = reportOf([
    result("discovery.capabilities.status", "MAY", "pass", "200"),
    result("inbox.accepted", "MUST", "fail", "answered 500"),
    result("discovery.identity.keys", "SHOULD", "fail", "no active key"),
    result("relay.error-body", "profile", "fail", "no error body"),
    result("tls.version", "MUST", "skip", "not reached"),
  ]);

  it("prints one line per check with its mark, level, id, reason and section, in the order checked", () => {
    const lines = formatReport(report).split("\n");
    expect(lines[0]).toBe("ifp check agent https://agent.example");
    expect(lines[1]).toBe("");
    const width = "discovery.capabilities.status".length;
    expect(lines.slice(2, 7)).toEqual([
      `pass  MAY      ${"discovery.capabilities.status".padEnd(width)}  200  [spec 4.1]`,
      `FAIL  MUST     ${"inbox.accepted".padEnd(width)}  answered 500  [spec 4.1]`,
      `FAIL  SHOULD   ${"discovery.identity.keys".padEnd(width)}  no active key  [spec 4.1]`,
      `FAIL  profile  ${"relay.error-body".padEnd(width)}  no error body  [spec 4.1]`,
      `skip  MUST     ${"tls.version".padEnd(width)}  not reached  [spec 4.1]`,
    ]);
  });

  it("totals per level (only the levels with checks) and overall, with the requests made", () => {
    const text = formatReport(report);
    expect(text).toContain("\nMUST     0 passed, 1 failed, 1 skipped\n");
    expect(text).toContain("\nSHOULD   0 passed, 1 failed, 0 skipped\n");
    expect(text).toContain("\nMAY      1 passed, 0 failed, 0 skipped\n");
    expect(text).toContain("\nprofile  0 passed, 1 failed, 0 skipped\n");
    expect(text).toContain("\ntotal    1 passed, 3 failed, 1 skipped; 7 requests\n");
    const only = formatReport(reportOf([result("tls.version", "MUST", "pass")]));
    expect(only).not.toMatch(/^(SHOULD|MAY|profile) /m);
  });

  it("prints what the target answered without its escape sequences or control characters: OSC 52, CSI, C1, line breaks", () => {
    const hostile = "answered 400: \x1b]52;c;cm0gLXJmIH4K\x07 ok\x1b[2K\x1b[1A\rpass  MUST  faked\x9b31m\u202e";
    const text = formatReport(reportOf([result("inbox.accepted", "MUST", "fail", hostile)]));
    // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what must be gone
    expect(text).not.toMatch(/[\x00-\x09\x0b-\x1f\x7f-\x9f\u202e]/);
    expect(text.split("\n")[2]).toMatch(
      /^FAIL {2}MUST {5}inbox\.accepted\s+answered 400: {2}ok pass {2}MUST {2}faked {2}\[spec 4\.1\]$/,
    );
  });

  it("names what fails the run apart from what was missed without failing it, by the gate", () => {
    const plain = formatReport(report);
    expect(plain).toContain("\nfailing: inbox.accepted\n");
    expect(plain).toContain(
      "\nmissed, not failing the run: discovery.identity.keys (SHOULD), relay.error-body (profile)\n",
    );
    const strict = formatReport(report, { strict: true, profile: true });
    expect(strict).toContain("\nfailing: inbox.accepted, discovery.identity.keys, relay.error-body\n");
    expect(strict).not.toContain("missed, not failing the run");
  });

  it("has neither line when nothing failed, and ends with a newline", () => {
    const text = formatReport(reportOf([result("tls.version", "MUST", "pass")]));
    expect(text).not.toMatch(/failing|missed/);
    expect(text.endsWith("\n")).toBe(true);
  });

  it("keeps ids of at least ten characters' width apart from their reasons", () => {
    const text = formatReport(reportOf([result("a", "MUST", "pass", "ok")]));
    expect(text).toContain(`pass  MUST     ${"a".padEnd(10)}  ok  [spec 4.1]`);
  });
});
