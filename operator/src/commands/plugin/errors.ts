// The plugin's failures, in a reader's words: a command-line mistake (exit code 2) or one the user
// can act on (exit code 1), and an API server's answer as one line. Apart from the API clients
// (kube.ts), so that what needs no cluster (the usage, completion, version) loads none.

/** A failure the user can act on: printed as one line, exit code 1. */
export class PluginError extends Error {}

/** A mistake in the command line: printed with the usage, exit code 2. */
export class UsageError extends Error {}

/** What the API server said (a Status's message), else the error's own message and cause. */
export function apiMessage(err: unknown): string {
  const body = (err as { body?: unknown })?.body;
  if (typeof body === "string") {
    try {
      const parsed = JSON.parse(body) as { message?: string };
      if (parsed.message) return parsed.message;
    } catch {
      // not a Status
    }
  }
  if (body && typeof body === "object" && "message" in body) return String((body as { message: unknown }).message);
  const cause = (err as { cause?: { message?: string } })?.cause?.message;
  return cause ? `${(err as Error).message}: ${cause}` : ((err as Error)?.message ?? String(err));
}
