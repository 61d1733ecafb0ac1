// A one-line message for anything thrown, the API server's own message for a Kubernetes client
// error included.
/**
 * A one-line message for anything thrown: an Error's message, the API server's own message
 * for a Kubernetes client error (`409: ...`, read from its response body), the string itself
 * for anything else.
 */
export function errorMessage(err: unknown): string {
  if (isApiError(err)) {
    const body = err.body;
    const msg = typeof body === "string" ? messageOf(body) : body?.message;
    return `${err.code}: ${msg ?? err.message}`;
  }
  if (err instanceof Error) return err.message;
  return String(err);
}

/** The shape of @kubernetes/client-node's ApiException (an HTTP code, the body and headers), without loading the client here. */
function isApiError(err: unknown): err is Error & { code: number; body: { message?: string } | string | undefined } {
  return (
    err instanceof Error && typeof (err as { code?: unknown }).code === "number" && "body" in err && "headers" in err
  );
}

function messageOf(body: string): string {
  try {
    return (JSON.parse(body) as { message?: string }).message ?? body;
  } catch {
    return body;
  }
}
