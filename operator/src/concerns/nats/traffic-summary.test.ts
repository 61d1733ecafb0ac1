import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { describe, expect, it } from "vitest";
import { parseLastError } from "../../../../runtime/src/contract/summary.ts";
import { summarize, SUMMARY_WINDOW_MS } from "./traffic-summary.ts";

const MIN = 60_000;
setFlagsFromString("--expose-gc");

describe("summarize", () => {
  it("writes the runtime's last error into the status printable: a stranger's message id carries no escape", () => {
    const reason = "PushGivenUp: message x\x1b]52;c;Y3VybCBldmlsIHwgc2g=\x07\x1b[2A\x1b[2Kfake to bob-agent: 500";
    const { summary } = summarize([], { lastSeq: 1, backlog: 0, lastError: { at: "2026-01-02T03:04:05Z", reason } }, 0);
    expect(summary.lastError).toBe("PushGivenUp: message xfake to bob-agent: 500");
  });

  it("counts from the first sample, then over a sliding hour", () => {
    let samples: readonly number[] = [];
    const at = (minute: number, seq: number, backlog = 0) => {
      const r = summarize(samples, { lastSeq: seq, backlog }, minute * MIN);
      samples = r.samples;
      return r.summary;
    };
    expect(at(0, 100)).toEqual({ acceptedLastHour: 0, backlog: 0 });
    expect(at(1, 110, 4)).toEqual({ acceptedLastHour: 10, backlog: 4 });
    for (let m = 2; m <= 60; m++) at(m, 110 + (m - 1));
    // At minute 60 the base is still the sample of minute 0.
    expect(at(60, 170).acceptedLastHour).toBe(70);
    // At minute 62 the samples of minutes 0 and 1 are out of the window; the base is minute 2's.
    expect(at(62, 175).acceptedLastHour).toBe(175 - 111);
    // Two numbers a sample: its time and the sequence.
    expect(samples.length / 2).toBeLessThanOrEqual(SUMMARY_WINDOW_MS / MIN + 2);
  });

  it("holds an hour of samples in about 1 KB a resource (with an object per sample, 4.4 KB)", () => {
    const gc = runInNewContext("gc") as () => void;
    const hour = (n: number) => {
      let samples: readonly number[] = [];
      for (let m = 0; m <= 61; m++)
        samples = summarize(samples, { lastSeq: 1_000 + n + m, backlog: 0 }, 1.8e12 + m * MIN).samples;
      return samples;
    };
    const used = () => {
      gc();
      return process.memoryUsage().heapUsed;
    };
    const before = used();
    const kept = Array.from({ length: 2_000 }, (_, i) => hour(i));
    const perResource = (used() - before) / kept.length;
    expect(kept[0]!.length).toBe(2 * 61);
    expect(perResource).toBeLessThan(1_300);
  });

  it("starts again when the stream went back (deleted and made again)", () => {
    const first = summarize([], { lastSeq: 500, backlog: 0 }, 0);
    const again = summarize(first.samples, { lastSeq: 3, backlog: 1 }, MIN);
    expect(again.summary.acceptedLastHour).toBe(0);
    expect(summarize(again.samples, { lastSeq: 8, backlog: 0 }, 2 * MIN).summary.acceptedLastHour).toBe(5);
  });

  it("carries the last error with its time", () => {
    expect(
      summarize(
        [],
        { lastSeq: 1, backlog: 0, lastError: { at: "2026-01-02T03:04:05Z", reason: "Undeliverable: x" } },
        0,
      ).summary,
    ).toEqual({
      acceptedLastHour: 0,
      backlog: 0,
      lastError: "Undeliverable: x",
      lastErrorTime: "2026-01-02T03:04:05Z",
    });
  });
});

describe("parseLastError", () => {
  const enc = (v: unknown) => new TextEncoder().encode(typeof v === "string" ? v : JSON.stringify(v));
  it("reads what the runtime stores, cutting long reasons", () => {
    expect(parseLastError(enc({ at: "2026-01-02T03:04:05.678Z", reason: "x".repeat(1000) }))).toEqual({
      at: "2026-01-02T03:04:05Z",
      reason: "x".repeat(256),
    });
  });
  it("takes anything else for nothing", () => {
    for (const bad of [
      "",
      "not json",
      "[]",
      "null",
      { at: "yesterday", reason: "x" },
      { at: "2026-01-02T03:04:05Z" },
      { at: 5, reason: "x" },
    ])
      expect(parseLastError(enc(bad))).toBeUndefined();
    expect(parseLastError(undefined)).toBeUndefined();
  });
});
