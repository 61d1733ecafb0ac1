import { describe, expect, it } from "vitest";
import { table } from "./output.ts";

describe("table", () => {
  it("prints cells printable: an OSC 52 clipboard write or a cursor move from a status is dropped, a line break cannot fake a row", () => {
    const lastError = "PushGivenUp: message m\x1b]52;c;Y3VybCBldmlsIHwgc2g=\x07\x1b[1A\x1b[2K\x9b1A: 500\nbob   True";
    expect(table(["NAME", "LAST ERROR"], [["alice", lastError]])).toBe(
      "NAME    LAST ERROR\nalice   PushGivenUp: message m: 500 bob   True",
    );
  });
});
