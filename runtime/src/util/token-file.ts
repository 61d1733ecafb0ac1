// Secret tokens read from a mounted file, one per line, and read again when it changes: the
// introduction tokens and the A2A bearer tokens, those callers present and those sent to peers.
import { readFileSync, statSync } from "node:fs";
import type { Logger } from "pino";

/** Tokens shorter than this are refused: too easy to guess. */
export const MIN_TOKEN_LENGTH = 16;

/**
 * Secret tokens from a file (a mounted Secret key): one per line, blank lines ignored, a token
 * shorter than 16 characters refused. Read again when the file changes (at most every 5 s), so
 * that a rotated Secret takes effect without a restart. `what` names the tokens in log lines.
 */
export function tokenFile(
  path: string,
  what: string,
  log?: Logger,
  now: () => number = Date.now,
): () => readonly string[] {
  let tokens: readonly string[] = [];
  let mtime = -1;
  let checked = -Infinity;
  const load = () => {
    checked = now();
    let stat: ReturnType<typeof statSync>;
    try {
      stat = statSync(path);
    } catch (err) {
      if (mtime !== -2) log?.error({ path, err: (err as Error).message }, `cannot read the ${what}; none is accepted`);
      tokens = [];
      mtime = -2;
      return;
    }
    if (stat.mtimeMs === mtime) return;
    mtime = stat.mtimeMs;
    const lines = readFileSync(path, "utf8")
      .split(/\r?\n/)
      .map((l) => l.trim())
      .filter(Boolean);
    const short = lines.filter((l) => l.length < MIN_TOKEN_LENGTH).length;
    if (short) log?.error({ path, refused: short }, `${what} shorter than ${MIN_TOKEN_LENGTH} characters are refused`);
    tokens = lines.filter((l) => l.length >= MIN_TOKEN_LENGTH);
  };
  load();
  return () => {
    if (now() - checked > 5_000) load();
    return tokens;
  };
}
