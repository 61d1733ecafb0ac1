// How a refused document is described: one line per problem with its path. The runtime's
// error bodies and log lines and the operator's `InvalidSpec` condition read the same.
import type { z } from "zod";

/** One line per problem, with its path, for error bodies and status messages. */
export function describeIssues(error: z.ZodError, limit = 5): string {
  const lines = error.issues.slice(0, limit).map((i) => `${i.path.length ? i.path.join(".") : "(root)"}: ${i.message}`);
  if (error.issues.length > limit) lines.push(`… and ${error.issues.length - limit} more`);
  return lines.join("; ");
}
