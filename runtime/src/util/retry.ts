// retry: an async call repeated until it resolves, with exponential backoff between failures, a
// bound on attempts and an AbortSignal that stops it.
import { setTimeout as sleep } from "node:timers/promises";
import { Backoff, type BackoffOptions } from "./backoff.ts";

/** `initialMs` and `maxMs`: the wait after the first failure (default 500 ms), doubling up to 10 s. */
export interface RetryOptions extends Pick<BackoffOptions, "initialMs" | "maxMs"> {
  /** Stops the retries: retry() then rejects with an AbortError, also in the middle of a wait. */
  signal?: AbortSignal;
  /** Gives up after this many attempts, rejecting with the last failure (default: never). */
  attempts?: number;
  /** Told of each failure and of the wait before the next attempt. */
  onError?: (err: Error, retryInMs: number) => void;
}

/** Call `attempt` until it resolves, backing off exponentially between failures. */
export async function retry<T>(attempt: () => Promise<T>, opts: RetryOptions): Promise<T> {
  const { signal, attempts = Infinity } = opts;
  const backoff = new Backoff({ initialMs: opts.initialMs, maxMs: opts.maxMs });
  for (let n = 1; ; n++) {
    signal?.throwIfAborted();
    try {
      return await attempt();
    } catch (err) {
      signal?.throwIfAborted();
      if (n >= attempts) throw err;
      const delay = backoff.next();
      opts.onError?.(err as Error, delay);
      await sleep(delay, undefined, { signal });
    }
  }
}
