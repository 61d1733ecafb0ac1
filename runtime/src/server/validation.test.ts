// The compiled check of a message sent to a route (SentMessage) against zod's Message: it takes
// only what zod takes, and a route's validator answers every document as zod alone would.
import { describe, expect, it } from "vitest";
import { identity, signed } from "../../test/support/fixtures.ts";
import { asSent, acceptsAsSent, SentMessage, validatorCompiler } from "./validation.ts";
import { Message } from "../protocol/message.ts";

type Doc = Record<string, unknown>;
const sender = identity("sender-agent");
const fresh = (): Doc => JSON.parse(JSON.stringify(signed(sender, "recipient-agent", {}, "hello")));

/** A copy of a valid message with the value at `path` set (undefined: deleted). */
function variant(path: string, value: unknown): Doc {
  const doc = fresh();
  const keys = path.split(".");
  let at: Doc = doc;
  for (const k of keys.slice(0, -1)) {
    at[k] ??= {};
    at = at[k] as Doc;
  }
  const last = keys.at(-1)!;
  if (value === undefined) delete at[last];
  else at[last] = value;
  return doc;
}

const astral = "\u{1F600}"; // two UTF-16 code units, one code point
const strings = (max: number) => ["", "x".repeat(max), "x".repeat(max + 1), astral.repeat(Math.ceil((max + 1) / 2))];
const notStrings = [0, true, null, [], {}];
const numbers = [0, -1, 1.5, 4, 2 ** 53, "4", null];

/** Documents around every rule of Message: each field missing, of another type, at and past its bounds. */
const cases: [string, Doc][] = [
  ["valid", fresh()],
  ...(
    [
      ["ifp", [undefined, ...numbers]],
      ["headers", [undefined, ...notStrings]],
      ["headers.message_id", [undefined, ...strings(256), ...notStrings]],
      ["headers.conversation_id", [undefined, ...strings(256)]],
      ["headers.phase", [undefined, ...strings(64)]],
      ["headers.content_type", ["", "text/plain", 1]],
      ["headers.subject", ["s", 1, null]],
      [
        "headers.date",
        [
          undefined,
          "2026-12-03T08:00:00Z",
          "2026-12-03T08:00:00.123+02:00",
          "2026-12-03T08:00:00",
          "2026-02-29T08:00:00Z",
          "2024-02-29T08:00:00Z",
          "2026-13-01T00:00:00Z",
          "2026-12-03T24:00:00Z",
          "2026-12-03 08:00:00Z",
          "2026-12-03T08:00:00+2:00",
          `2026-12-03T08:00:00Z${astral}`,
          1,
        ],
      ],
      ["headers.from", [undefined, "agent", [], { display: "x" }, { agent: "" }, { agent: "x".repeat(513) }]],
      ["headers.from.agent", strings(512)],
      ["headers.from.display", ["d", 1]],
      [
        "headers.to",
        [
          undefined,
          [],
          [{ agent: "recipient-agent" }],
          Array.from({ length: 100 }, () => ({ agent: "recipient-agent" })),
          Array.from({ length: 101 }, () => ({ agent: "recipient-agent" })),
          [{ agent: "" }],
          [{}],
          ["recipient-agent"],
          {},
        ],
      ],
      ["headers.sequence", [undefined, ...numbers]],
      ["headers.ttl_seconds", [0, 1, -1, 1.5, "1"]],
      [
        "headers.thread",
        [{}, { in_reply_to: "m" }, { in_reply_to: 1 }, { references: ["a"] }, { references: [1] }, []],
      ],
      ["headers.capabilities", [{ request: ["a"], offer: ["b"] }, { request: "a" }, { offer: [1] }, null]],
      ["headers.extensions", [{}, { a: { b: 1 } }, [], "x"]],
      ["headers.extra", [1, { any: ["thing"] }]],
      ["body", [undefined, {}, [], "text", null]],
      ["body.text", ["t", 1]],
      [
        "body.parts",
        [
          [],
          [{ content_type: "text/plain", content: "x" }],
          [{ content_type: "text/plain", content: null }],
          [{ content_type: "text/plain" }],
          [{ content_type: "", content: 1 }],
          [{ content_type: "a", name: 1, content: 1 }],
          {},
        ],
      ],
      ["body.ciphertext", ["abc", 1]],
      ["trace", [{}, { received: [] }, { received: [{ by: "a", with: "b", at: "c", from: "d" }] }, { received: [{}] }]],
      ["security", [undefined, {}, [], null]],
      ["security.encryption", [{ scheme: "x" }, { scheme: "" }, { scheme: "x".repeat(129) }, {}]],
      ["security.signatures", [[], Array.from({ length: 17 }, () => ({})), [{ alg: "ed25519" }], {}]],
      ["security.signatures.0", [undefined]],
      ["deep", [JSON.parse(`${"[".repeat(101)}${"]".repeat(101)}`)]],
      ["headers.persona", ["\uD800"]],
    ] as [string, unknown[]][]
  ).flatMap(([path, values]) =>
    values.map((v, i): [string, Doc] => [`${path} = #${i} ${JSON.stringify(v)?.slice(0, 40)}`, variant(path, v)]),
  ),
  ["an encrypted body", { ...variant("security.encryption", { scheme: "x" }), body: { ciphertext: "abc" } }],
  [
    "an encrypted body with more",
    { ...variant("security.encryption", { scheme: "x" }), body: { ciphertext: "a", text: "b" } },
  ],
  ["an encrypted body not a string", { ...variant("security.encryption", { scheme: "x" }), body: { ciphertext: 1 } }],
  ["a key with a lone surrogate", variant("headers.extensions", { "\uDC00": 1 })],
];

describe("the compiled check of a sent message", () => {
  it("takes only documents zod's Message takes, and takes the valid ones", () => {
    let taken = 0;
    let valid = 0;
    for (const [name, doc] of cases) {
      const zod = asSent(Message).safeParse(structuredClone(doc)).success;
      const compiled = acceptsAsSent(SentMessage, structuredClone(doc));
      if (zod) valid++;
      if (compiled) taken++;
      expect({ name, compiled: compiled && !zod }).toEqual({ name, compiled: false });
      // The compiled check leaves out no rule zod has, beyond the ones it leaves to zod.
      if (zod) expect({ name, compiled }).toEqual({ name, compiled: true });
    }
    expect(valid).toBeGreaterThan(20);
    expect(taken).toBeGreaterThan(20);
    expect(cases.length - valid).toBeGreaterThan(80);
  });

  it("answers as zod alone: the same document, or the same issues", () => {
    const withCompiled = validatorCompiler({ schema: SentMessage } as never) as (d: unknown) => {
      value?: unknown;
      error?: unknown;
    };
    const zodOnly = validatorCompiler({ schema: asSent(Message) } as never) as typeof withCompiled;
    for (const [name, doc] of cases) {
      const sent = structuredClone(doc);
      const a = withCompiled(sent);
      const b = zodOnly(structuredClone(doc));
      expect({ name, ok: a.error === undefined }).toEqual({ name, ok: b.error === undefined });
      if (a.error === undefined) expect(a.value).toBe(sent);
      else expect(JSON.stringify(a.error)).toBe(JSON.stringify(b.error));
    }
  });
});
