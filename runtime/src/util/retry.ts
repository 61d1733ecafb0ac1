import { setTimeout as sleep } from "node:timers/promises";

export interface RetryOptions {
  /** Stops the retries: retry() then rejects with an AbortError, also in the middle of a wait. */
  signal?: AbortSignal;
  /** Gives up after this many attempts, rejecting with the last failure (default: never). */
  attempts?: number;
  /** The wait after the first failure (default 500 ms); it doubles after each further one… */
  initialMs?: number;
  /** …up to this (default 10 s). */
  maxMs?: number;
  /** Told of each failure and of the wait before the next attempt. */
  onError?: (err: Error, retryInMs: number) => void;
}

/** Call `attempt` until it resolves, backing off exponentially between failures. */
export async function retry<T>(attempt: () => Promise<T>, opts: RetryOptions): Promise<T> {
  const { signal, maxMs = 10_000, attempts = Infinity } = opts;
  for (let n = 1, delay = opts.initialMs ?? 500; ; n++, delay = Math.min(delay * 2, maxMs)) {
    signal?.throwIfAborted();
    try {
      return await attempt();
    } catch (err) {
      signal?.throwIfAborted();
      if (n >= attempts) throw err;
      opts.onError?.(err as Error, delay);
      await sleep(delay, undefined, { signal });
    }
  }
}
