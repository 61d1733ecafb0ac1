import { mkdtempSync, rmSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { tokenFile } from "./token-file.ts";

describe("tokenFile", () => {
  it("reads one token a line, refuses short ones, and reads the file again when it changed, at most every 5 s", () => {
    const dir = mkdtempSync(join(tmpdir(), "ifp-tokens-"));
    const file = join(dir, "tokens");
    const long = "a".repeat(16);
    writeFileSync(file, `\n ${long} \nshort\r\n`);
    let t = 0;
    const errors: unknown[] = [];
    const log = { error: (o: unknown) => errors.push(o) } as never;
    const tokens = tokenFile(file, "test tokens", log, () => t);
    expect(tokens()).toEqual([long]);
    expect(errors).toEqual([{ path: file, refused: 1 }]);
    writeFileSync(file, `${"b".repeat(20)}\n`);
    utimesSync(file, new Date(), new Date(Date.now() + 10_000));
    t = 4_000;
    expect(tokens()).toEqual([long]);
    t = 6_000;
    expect(tokens()).toEqual(["b".repeat(20)]);
    rmSync(dir, { recursive: true });
    t = 12_000;
    expect(tokens()).toEqual([]);
    expect(errors).toHaveLength(2);
  });
});
