// Why a request never got an answer, in words: the code Node or undici puts on the error or its
// causes (fetch wraps them as "fetch failed"), read as which failure it was — a certificate the
// caller does not trust, nothing listening, a name DNS does not know, a timeout.

const UNTRUSTED = new Set([
  "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
  "SELF_SIGNED_CERT_IN_CHAIN",
  "DEPTH_ZERO_SELF_SIGNED_CERT",
  "UNABLE_TO_GET_ISSUER_CERT",
  "UNABLE_TO_GET_ISSUER_CERT_LOCALLY",
  "CERT_UNTRUSTED",
  "CERT_SIGNATURE_FAILURE",
]);

const TIMEOUTS = new Set(["UND_ERR_CONNECT_TIMEOUT", "UND_ERR_HEADERS_TIMEOUT", "UND_ERR_BODY_TIMEOUT", "ETIMEDOUT"]);

/** The error and its causes, outermost first (bounded: a cause chain may loop). */
function chain(err: unknown): { code?: string; name?: string; message?: string; hostname?: string }[] {
  const out: { code?: string; name?: string; message?: string; hostname?: string }[] = [];
  for (let e = err, i = 0; e && typeof e === "object" && i < 8; e = (e as { cause?: unknown }).cause, i++) {
    out.push(e as { code?: string; name?: string; message?: string });
    for (const inner of (e as { errors?: unknown[] }).errors ?? [])
      if (inner && typeof inner === "object") out.push(inner);
  }
  return out;
}

/**
 * One phrase for why a connection to `url` failed, with what to do where there is something:
 * undefined when the error says none of these (the caller keeps its own message).
 */
export function connectFailure(err: unknown, url: string): string | undefined {
  let host = url;
  try {
    const u = new URL(url);
    host = u.port ? `${u.hostname}:${u.port}` : u.hostname;
  } catch {
    // Not a URL: name it as given.
  }
  for (const e of chain(err)) {
    const code = e.code ?? "";
    if (UNTRUSTED.has(code))
      return `the certificate of ${host} is not signed by a CA this command trusts (${code}): --ca-file FILE adds the CA that signed it`;
    if (code === "CERT_HAS_EXPIRED") return `the certificate of ${host} has expired (${code})`;
    if (code === "CERT_NOT_YET_VALID") return `the certificate of ${host} is not valid yet (${code})`;
    if (code === "ERR_TLS_CERT_ALTNAME_INVALID")
      return `the certificate of ${host} is for other names (${code}): ${e.message ?? ""}`.trim();
    if (code === "ECONNREFUSED") return `connection refused: nothing listens at ${host} (${code})`;
    if (code === "ENOTFOUND" || code === "EAI_NONAME")
      return `DNS does not know the name ${e.hostname ?? host} (${code})`;
    if (code === "EAI_AGAIN") return `DNS did not answer for ${e.hostname ?? host} (${code}); try again`;
    if (TIMEOUTS.has(code) || e.name === "TimeoutError") return `timed out waiting for ${host}`;
    if (code === "EHOSTUNREACH" || code === "ENETUNREACH") return `no route to ${host} (${code})`;
    if (code === "ECONNRESET" || code === "UND_ERR_SOCKET")
      return `${host} closed the connection (${code}): is it a TLS server?`;
    if (code === "ERR_SSL_WRONG_VERSION_NUMBER" || code === "EPROTO")
      return `${host} did not speak TLS (${code}): is it an https port?`;
  }
  return undefined;
}
