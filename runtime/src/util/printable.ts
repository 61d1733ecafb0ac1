// Text that came from outside (a stranger's message id, a peer's error, a webhook's answer) made
// safe for an admin's terminal before it is printed by `kubectl ifp` or `ifp`, or written into a
// status, an Event or the last_error a status shows. A terminal obeys what it is sent: an OSC 52
// sequence writes the clipboard, CSI sequences move the cursor to hide or fake lines, C1 controls
// do the same in one byte, and bidi overrides show text in another order than it is. Every
// escape sequence is dropped whole, then every control character and bidi control left.

// ESC then: CSI (parameters, intermediates, a final byte); OSC, DCS, SOS, PM or APC up to their
// terminator (BEL or ST) or the end of the text; any other escape (intermediates and a final
// byte). The one-byte C1 forms of CSI, OSC, DCS, SOS, PM and APC the same way.
const ESCAPE_SEQUENCE =
  // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what it removes
  /(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?|(?:\x1b[\]PX^_]|[\x9d\x90\x98\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?|\x1b[ -/]*[0-~]?/g;
// C0 controls, DEL, C1 controls; the Arabic letter mark, LRM, RLM, the bidi embeddings,
// overrides and isolates.
// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what it removes
const CONTROL = /[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;

/**
 * `text` without escape sequences and control characters. One line by default (tabs and line
 * breaks become spaces, so a value cannot fake a line of its own); with `lines`, line breaks and
 * tabs are kept (a command's whole output).
 */
export function printable(text: string, opts: { lines?: boolean } = {}): string {
  const bare = text.replace(ESCAPE_SEQUENCE, "");
  return opts.lines
    ? bare.replace(/\r\n?/g, "\n").replace(CONTROL, (c) => (c === "\n" || c === "\t" ? c : ""))
    : bare.replace(/[\t\n\r]+/g, " ").replace(CONTROL, "");
}

// What printableJson escapes: every control character and bidi control but the line break.
// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what it removes
const JSON_UNSAFE = /[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;

/**
 * JSON text (or text that ought to be) for a terminal: every control character and bidi control
 * but the line break written as its `\uXXXX` escape, so the data survives whole (valid JSON has
 * them only inside strings, where the escape means the same) and the terminal sees none of them.
 */
export function printableJson(json: string): string {
  return json.replace(JSON_UNSAFE, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
}
