import { describe, expect, it } from "vitest";
import {
  backoffDelay,
  expiredRecipientState,
  heldBackRecipientState,
  isDue,
  nextRecipientState,
  overallState,
  type Outcome,
  type RecipientState,
} from "./delivery-state.ts";

describe("backoffDelay", () => {
  const schedule = [60_000, 300_000, 1_800_000, 3_600_000];
  it("follows IFP-6's 1m, 5m, 30m, then hourly", () => {
    const mid = () => 0.5;
    expect([1, 2, 3, 4, 5, 20].map((n) => backoffDelay(schedule, n, mid))).toEqual([
      60_000, 300_000, 1_800_000, 3_600_000, 3_600_000, 3_600_000,
    ]);
  });
  it("jitters by at most 10%", () => {
    expect(backoffDelay(schedule, 1, () => 0)).toBe(54_000);
    expect(backoffDelay(schedule, 1, () => 0.999999)).toBeLessThanOrEqual(66_000);
  });
});

describe("nextRecipientState", () => {
  const now = Date.parse("2026-03-04T12:00:00Z");
  const at = (ms: number) => new Date(now + ms).toISOString();
  const window = { at: now + 3_600_000, reason: "still failing after the 86400 s retry window" };
  const backoff = { schedule: [60_000, 300_000], random: () => 0.5 };
  const queued: RecipientState = { agent: "bob", state: "queued", attempts: 0 };
  const retrying: RecipientState = {
    agent: "bob",
    state: "retrying",
    attempts: 2,
    via: "https://bob/inbox",
    last_status: 503,
    last_error: "503",
    decision: "retry in 300 s (attempt 2 failed)",
    next_attempt_at: at(0),
  };
  const retry = (more: Partial<Extract<Outcome, { kind: "retry" }>> = {}): Outcome => ({
    kind: "retry",
    via: "https://bob/inbox",
    status: 503,
    error: "503",
    ...more,
  });

  it.each<[string, RecipientState, Outcome, { at: number; reason: string }, RecipientState]>([
    [
      "a 2xx delivers",
      retrying,
      { kind: "delivered", via: "https://bob/inbox", status: 202 },
      window,
      {
        ...retrying,
        state: "delivered",
        attempts: 3,
        last_status: 202,
        last_error: undefined,
        next_attempt_at: undefined,
        delivered_at: at(0),
      },
    ],
    [
      "a final answer fails at once, whatever the deadline",
      queued,
      { kind: "failed", via: "https://bob/inbox", status: 404, error: "404; a 4xx is never retried" },
      window,
      {
        agent: "bob",
        state: "failed",
        attempts: 1,
        via: "https://bob/inbox",
        last_status: 404,
        last_error: "404; a 4xx is never retried",
        decision: "not retried",
        next_attempt_at: undefined,
      },
    ],
    [
      "a failure waits for the schedule's next step",
      queued,
      retry(),
      window,
      {
        agent: "bob",
        state: "retrying",
        attempts: 1,
        via: "https://bob/inbox",
        last_status: 503,
        last_error: "503",
        decision: "retry in 60 s (attempt 1 failed)",
        next_attempt_at: at(60_000),
      },
    ],
    [
      "the schedule's last step repeats",
      retrying,
      retry(),
      window,
      { ...retrying, attempts: 3, decision: "retry in 300 s (attempt 3 failed)", next_attempt_at: at(300_000) },
    ],
    [
      "Retry-After on 408/425/429 replaces the schedule, and the decision says so",
      queued,
      retry({ status: 429, error: "429", afterMs: 7_000, decision: "429 is not final: retry after Retry-After 7 s" }),
      window,
      {
        agent: "bob",
        state: "retrying",
        attempts: 1,
        via: "https://bob/inbox",
        last_status: 429,
        last_error: "429",
        decision: "429 is not final: retry after Retry-After 7 s",
        next_attempt_at: at(7_000),
      },
    ],
    [
      "Retry-After on a 5xx only delays the schedule",
      queued,
      retry({ notBeforeMs: 120_000 }),
      window,
      {
        agent: "bob",
        state: "retrying",
        attempts: 1,
        via: "https://bob/inbox",
        last_status: 503,
        last_error: "503",
        decision: "retry in 120 s (attempt 1 failed)",
        next_attempt_at: at(120_000),
      },
    ],
    [
      "Retry-After on a 5xx shorter than the schedule changes nothing",
      queued,
      retry({ notBeforeMs: 5_000 }),
      window,
      {
        agent: "bob",
        state: "retrying",
        attempts: 1,
        via: "https://bob/inbox",
        last_status: 503,
        last_error: "503",
        decision: "retry in 60 s (attempt 1 failed)",
        next_attempt_at: at(60_000),
      },
    ],
    [
      "the last attempt falls on the deadline, not after it",
      retrying,
      retry(),
      { at: now + 10_000, reason: "window" },
      { ...retrying, attempts: 3, decision: "retry in 10 s (attempt 3 failed)", next_attempt_at: at(10_000) },
    ],
    [
      "a failure at the deadline is undeliverable, with the deadline's reason",
      retrying,
      retry({ error: "network error: ECONNREFUSED", status: undefined, via: undefined }),
      { at: now, reason: "the message's ttl_seconds passed" },
      {
        ...retrying,
        state: "undeliverable",
        attempts: 3,
        last_status: undefined,
        last_error: "network error: ECONNREFUSED; the message's ttl_seconds passed",
        decision: "the message's ttl_seconds passed",
        next_attempt_at: undefined,
      },
    ],
    [
      "a Retry-After beyond the deadline is cut to it",
      queued,
      retry({
        status: 429,
        error: "429",
        afterMs: 7_200_000,
        decision: "429 is not final: retry after Retry-After 7200 s",
      }),
      window,
      {
        agent: "bob",
        state: "retrying",
        attempts: 1,
        via: "https://bob/inbox",
        last_status: 429,
        last_error: "429",
        decision: "429 is not final: retry after Retry-After 7200 s",
        next_attempt_at: at(3_600_000),
      },
    ],
  ])("%s", (_, record, outcome, deadline, want) => {
    expect(nextRecipientState(record, outcome, now, deadline, backoff)).toEqual(want);
  });

  it("leaves the given record unchanged", () => {
    const before = structuredClone(retrying);
    nextRecipientState(retrying, retry(), now, window, backoff);
    expect(retrying).toEqual(before);
  });
});

describe("isDue and overallState", () => {
  const now = Date.parse("2026-03-04T12:00:00Z");
  it("is due when never tried, or its time (within a second) has come; never when settled", () => {
    expect(isDue({ agent: "a", state: "queued", attempts: 0 }, now)).toBe(true);
    expect(
      isDue({ agent: "a", state: "retrying", attempts: 1, next_attempt_at: new Date(now + 900).toISOString() }, now),
    ).toBe(true);
    expect(
      isDue({ agent: "a", state: "retrying", attempts: 1, next_attempt_at: new Date(now + 5_000).toISOString() }, now),
    ).toBe(false);
    expect(isDue({ agent: "a", state: "delivered", attempts: 1 }, now)).toBe(false);
  });
  it("sums the recipients up", () => {
    const r = (state: RecipientState["state"], attempts = 1): RecipientState => ({ agent: "a", state, attempts });
    expect(overallState([r("delivered"), r("delivered")])).toBe("delivered");
    expect(overallState([r("delivered"), r("queued", 0)])).toBe("retrying");
    expect(overallState([r("queued", 0)])).toBe("queued");
    expect(overallState([r("delivered"), r("undeliverable")])).toBe("undeliverable");
    expect(overallState([r("failed"), r("delivered")])).toBe("failed");
  });
});

describe("expiredRecipientState", () => {
  const deadline = { at: 1_000, reason: "the message's ttl_seconds passed", expires: true };
  it.each([
    [
      {
        agent: "bob",
        state: "retrying",
        attempts: 2,
        last_error: "503 busy",
        next_attempt_at: "1970-01-01T00:00:01.000Z",
      },
      "503 busy; the message's ttl_seconds passed",
      2,
    ],
    [{ agent: "bob", state: "queued", attempts: 0 }, "the message's ttl_seconds passed", 0],
  ] as [RecipientState, string, number][])("gives %o up without counting an attempt", (r, lastError, attempts) => {
    expect(expiredRecipientState(r, deadline)).toEqual({
      agent: "bob",
      state: "undeliverable",
      attempts,
      last_error: lastError,
      next_attempt_at: undefined,
      decision: "the message's ttl_seconds passed",
    });
  });
});

describe("heldBackRecipientState", () => {
  const now = Date.parse("2026-03-04T12:00:00Z");
  const window = { at: now + 60_000, reason: "still failing after the 86400 s retry window" };
  const r: RecipientState = { agent: "bob", state: "retrying", attempts: 3, last_status: 503, last_error: "503 down" };
  const held = {
    kind: "retry" as const,
    error: "https://bob/inbox: circuit open; no attempt made",
    deferredUntil: now + 30_000,
  };

  it("counts no attempt, keeps the last attempt's error, and waits until the circuit may be tried", () => {
    expect(heldBackRecipientState(r, held, now, window)).toEqual({
      ...r,
      decision: "held back, no attempt made: https://bob/inbox: circuit open; no attempt made",
      next_attempt_at: new Date(now + 30_000).toISOString(),
    });
  });

  it("never waits past the deadline, and gives up at it as after an attempt", () => {
    const late = { ...held, deferredUntil: now + 120_000 };
    expect(heldBackRecipientState(r, late, now, window).next_attempt_at).toBe(new Date(window.at).toISOString());
    expect(heldBackRecipientState(r, late, window.at, window)).toMatchObject({
      state: "undeliverable",
      attempts: 3,
      last_error: "503 down; still failing after the 86400 s retry window",
      decision: window.reason,
    });
  });
});
