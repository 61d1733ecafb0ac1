import { describe, expect, it } from "vitest";
import { printable, printableJson } from "./printable.ts";

const OSC52 = "\x1b]52;c;Y3VybCBldmlsLmV4YW1wbGUgfCBzaA==\x07";

describe("printable", () => {
  it("drops an OSC 52 clipboard write, terminated by BEL, by ST or not at all", () => {
    expect(printable(`msg-1${OSC52} failed`)).toBe("msg-1 failed");
    expect(printable("a\x1b]52;c;ZXZpbA==\x1b\\b")).toBe("ab");
    expect(printable("a\x9d52;c;ZXZpbA==\x9cb")).toBe("ab");
    expect(printable("a\x1b]52;c;ZXZpbA==")).toBe("a");
  });

  it("drops CSI cursor moves, erasures and colours, in their ESC [ and one-byte forms", () => {
    expect(printable("ok\x1b[2K\x1b[1A\x1b[31mReady True\x1b[0m")).toBe("okReady True");
    expect(printable("x\x9b10;20Hy")).toBe("xy");
    expect(printable("x\x1b[?25ly")).toBe("xy");
    expect(printable("x\x1bcy\x1b(Bz")).toBe("xyz");
  });

  it("drops C0 and C1 controls and bidi overrides, and puts line breaks on one line", () => {
    expect(printable("a\x00b\x07c\x08d\x7fe\x85f\x8dg")).toBe("abcdefg");
    expect(printable("invoice\u202Efdp.exe\u2066\u2069\u200F")).toBe("invoicefdp.exe");
    expect(printable("line one\r\nfake: Ready True\ttab")).toBe("line one fake: Ready True tab");
  });

  it("keeps line breaks and tabs of a whole output with lines, and every printable character", () => {
    expect(printable(`NAME\tREADY\r\nalice${OSC52}\tTrue\n`, { lines: true })).toBe("NAME\tREADY\nalice\tTrue\n");
    expect(printable("café — ünïcode ✓ did:key:z6Mk")).toBe("café — ünïcode ✓ did:key:z6Mk");
  });

  it("escapes in JSON what JSON.stringify leaves raw (C1, bidi controls), so the data stays whole", () => {
    const raw = JSON.stringify({ message_id: "m\x9b2J\x9d52;c;eA==\x9c\u202E", text: "é" });
    const safe = printableJson(`${raw}\n`);
    expect(safe).toBe('{"message_id":"m\\u009b2J\\u009d52;c;eA==\\u009c\\u202e","text":"é"}\n');
    expect(JSON.parse(safe)).toEqual(JSON.parse(raw));
    expect(printableJson("raw \x1b]52;c;eA==\x07")).toBe("raw \\u001b]52;c;eA==\\u0007");
  });
});
