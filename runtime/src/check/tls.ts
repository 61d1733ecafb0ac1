// The TLS group of `ifp check` (TLS 1.2 or later, no plain HTTP), and the run-wide checks that
// no answer was a redirect and that every 429 carried Retry-After.
import { NoAnswer } from "./probe.ts";
import type { CheckContext } from "./types.ts";

/** Redirects (RFC 9110 15.4); 304 Not Modified is not one. */
const REDIRECTS = new Set([301, 302, 303, 307, 308]);

/** TLS 1.2 or later, and no plain HTTP (spec 5.2, 8). */
export async function tlsChecks(ctx: CheckContext, path: string): Promise<void> {
  try {
    await tlsChecksOf(ctx, `${ctx.base}${path}`);
  } catch (err) {
    if (!(err instanceof NoAnswer)) throw err;
    for (const id of ["tls.version", "tls.old-versions-refused", "tls.plain-http-refused"])
      if (!ctx.has(id)) ctx.record(id, "skip", err.message);
  }
}

async function tlsChecksOf(ctx: CheckContext, url: string): Promise<void> {
  const ok = await ctx.probe.handshake(url);
  if ("error" in ok) ctx.record("tls.version", "fail", `TLS handshake failed: ${ok.error}`);
  else {
    const good = ok.protocol === "TLSv1.2" || ok.protocol === "TLSv1.3";
    ctx.record(
      "tls.version",
      good ? "pass" : "fail",
      `negotiated ${ok.protocol ?? "nothing"}${good ? "" : "; TLS 1.2 or later is required"}`,
    );
  }
  const old = await ctx.probe.handshake(url, { old: true });
  if ("error" in old && /no protocols available|unsupported protocol/i.test(old.error) && !/alert/i.test(old.error)) {
    ctx.record(
      "tls.old-versions-refused",
      "skip",
      "this Node.js/OpenSSL cannot offer TLS 1.0/1.1, so their refusal cannot be observed",
    );
  } else if ("error" in old)
    ctx.record("tls.old-versions-refused", "pass", `a TLS 1.0/1.1 handshake is refused (${old.code ?? old.error})`);
  else ctx.record("tls.old-versions-refused", "fail", `the target completed a ${old.protocol} handshake`);

  const plain = await ctx.probe.plainGet(url);
  if ("error" in plain) ctx.record("tls.plain-http-refused", "pass", `plain HTTP gets no answer (${plain.error})`);
  else if (plain.status >= 200 && plain.status < 300)
    ctx.record("tls.plain-http-refused", "fail", `plain HTTP on the same port answered ${plain.status}`);
  else if (REDIRECTS.has(plain.status))
    ctx.record(
      "tls.plain-http-refused",
      "fail",
      `plain HTTP is redirected (${plain.status} to ${plain.location ?? "?"}) instead of refused: a message would already have crossed in clear`,
    );
  else ctx.record("tls.plain-http-refused", "pass", `plain HTTP is refused with ${plain.status}`);
}

/** Run-wide: no https answer of the target was a redirect (redirects are not followed, spec 7.2.3). */
export function redirectCheck(ctx: CheckContext): void {
  const redirects = ctx.probe.seen.filter((s) => REDIRECTS.has(s.status));
  if (!ctx.probe.seen.length) ctx.record("tls.redirect-free", "skip", "no HTTPS answer seen");
  else if (redirects.length)
    ctx.record(
      "tls.redirect-free",
      "fail",
      `${redirects[0]!.url} answered ${redirects[0]!.status}: this project's senders do not follow redirects`,
    );
  else ctx.record("tls.redirect-free", "pass", `none of ${ctx.probe.seen.length} answers was a redirect`);
}

/** Run-wide: every 429 seen carried Retry-After (spec 7.1, 8); the kit never provokes one. */
export function rateLimitCheck(ctx: CheckContext, id: string): void {
  const limited = ctx.probe.seen.filter((s) => s.status === 429);
  if (!limited.length) ctx.record(id, "skip", "no 429 seen (the kit does not flood a target to provoke one)");
  else {
    const without = limited.filter((s) => !s.retryAfter || !/^\s*(\d+|[A-Za-z]{3}, .+GMT)\s*$/.test(s.retryAfter));
    ctx.record(
      id,
      without.length ? "fail" : "pass",
      without.length
        ? `a 429 from ${without[0]!.url} has no valid Retry-After`
        : `${limited.length} 429 answer(s), each with Retry-After`,
    );
  }
}
