import { describe, expect, it } from "vitest";
import { retry } from "./retry.ts";

describe("retry with a bounded number of attempts", () => {
  it("makes exactly that many attempts and rejects with the last failure", async () => {
    let calls = 0;
    const waits: number[] = [];
    const out = retry(
      async () => {
        calls++;
        throw new Error(`failure ${calls}`);
      },
      { attempts: 3, initialMs: 5, onError: (_err, ms) => waits.push(ms) },
    );
    await expect(out).rejects.toThrow("failure 3");
    expect(calls).toBe(3);
    expect(waits).toEqual([5, 10]);
  });

  it("returns the first success", async () => {
    let calls = 0;
    const out = await retry(async () => (++calls < 2 ? Promise.reject(new Error("not yet")) : "ok"), {
      attempts: 3,
      initialMs: 1,
    });
    expect([out, calls]).toEqual(["ok", 2]);
  });
});
