// The bearer token of the local API's HTTPS listener for other pods: TokenFile, read from the
// mounted Secret and again when it changes, and requireBearer, which checks it on every request
// and refuses an address that fails too often.
import { createHash, timingSafeEqual } from "node:crypto";
import { readFileSync, statSync } from "node:fs";
import type { FastifyInstance, FastifyRequest } from "fastify";
import type { Logger } from "pino";
import { ProtocolError, rateLimited } from "../protocol/errors.ts";
import { RateLimiter } from "../server/ratelimit.ts";

/** Shortest token accepted from the token file. */
export const MIN_TOKEN_LENGTH = 16;

const digest = (s: string) => createHash("sha256").update(s).digest();

/**
 * The bearer token of the local API's TLS listener, read from a file (the mounted Secret) and
 * read again when the file changes (checked at most every `checkEveryMs`), so that a rotated
 * Secret takes effect without a restart. An unreadable or too short file at start is an error;
 * later the last good token stays in force.
 */
export class TokenFile {
  private readonly path: string;
  private readonly log: Logger;
  private readonly checkEveryMs: number;
  private readonly now: () => number;
  private token: Buffer;
  private stamp: string;
  private checkedAt: number;

  constructor(path: string, log: Logger, opts: { checkEveryMs?: number; now?: () => number } = {}) {
    this.path = path;
    this.log = log;
    this.checkEveryMs = opts.checkEveryMs ?? 1_000;
    this.now = opts.now ?? Date.now;
    this.stamp = this.fileStamp();
    this.token = digest(this.read());
    this.checkedAt = this.now();
  }

  private fileStamp(): string {
    try {
      const s = statSync(this.path);
      return `${s.ino}:${s.size}:${s.mtimeMs}`;
    } catch {
      return "";
    }
  }

  private read(): string {
    let text: string;
    try {
      text = readFileSync(this.path, "utf8").trim();
    } catch (err) {
      throw new Error(`cannot read the local API token file: ${(err as Error).message}`);
    }
    if (text.length < MIN_TOKEN_LENGTH)
      throw new Error(`the local API token in ${this.path} is shorter than ${MIN_TOKEN_LENGTH} characters`);
    return text;
  }

  private refresh(): void {
    const now = this.now();
    if (now - this.checkedAt < this.checkEveryMs) return;
    this.checkedAt = now;
    const stamp = this.fileStamp();
    if (!stamp || stamp === this.stamp) return;
    try {
      this.token = digest(this.read());
      this.stamp = stamp;
      this.log.info("reloaded the local API token");
    } catch (err) {
      this.log.warn(
        { err: (err as Error).message },
        "could not reload the local API token; the previous one stays in force",
      );
    }
  }

  /** Constant-time comparison (of SHA-256 digests, so that lengths leak nothing either). */
  matches(presented: string): boolean {
    this.refresh();
    return timingSafeEqual(digest(presented), this.token);
  }
}

export interface BearerAuthOptions {
  /** Failed attempts allowed per client address per minute; past them every request from it is refused with 429. */
  failuresPerMinute?: number;
  now?: () => number;
}

/**
 * Require `Authorization: Bearer <token>` on every request of `app`: 401 (code unauthorized,
 * with WWW-Authenticate) for a missing or wrong token; an address that has failed too often is
 * refused with 429 before its token is even looked at, so that guessing cannot go on.
 */
export function requireBearer(app: FastifyInstance, token: TokenFile, opts: BearerAuthOptions = {}): void {
  const now = opts.now ?? Date.now;
  const failures = new RateLimiter(opts.failuresPerMinute ?? 20, { now });
  const blocked = new Map<string, number>();
  const unauthorized = (message: string) =>
    new ProtocolError(401, "unauthorized", message, { "www-authenticate": 'Bearer realm="ifp-local-api"' });

  app.addHook("onRequest", async (req: FastifyRequest) => {
    const t = now();
    const until = blocked.get(req.ip);
    if (until !== undefined) {
      if (until > t)
        throw rateLimited(Math.max(1, Math.ceil((until - t) / 1000)), `too many failed attempts from ${req.ip}`);
      blocked.delete(req.ip);
    }
    const header = req.headers.authorization;
    const m = typeof header === "string" ? /^Bearer[ \t]+([^\s]+)[ \t]*$/i.exec(header) : null;
    if (m && token.matches(m[1]!)) return;
    const taken = failures.take(req.ip);
    if (!taken.ok) {
      if (blocked.size >= 100_000) for (const [ip, u] of blocked) if (u <= t) blocked.delete(ip);
      blocked.set(req.ip, t + taken.retryAfterSeconds * 1000);
      throw rateLimited(taken.retryAfterSeconds, `too many failed attempts from ${req.ip}`);
    }
    throw unauthorized(
      m
        ? "the bearer token is not valid"
        : "Authorization: Bearer <token> is required (the token is in the agent's <name>-local-api Secret)",
    );
  });
}
