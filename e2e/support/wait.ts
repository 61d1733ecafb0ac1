/**
 * Waiting in tests: `waitFor` polls until a probe yields a value; `consistently` polls for a
 * while and fails as soon as the probe says the condition no longer holds. Use `consistently`
 * for "nothing happened" assertions, after a positive signal that the event was processed.
 */
export async function waitFor<T>(
  what: string,
  probe: () => Promise<T | undefined | false> | T | undefined | false,
  timeoutMs = 30_000,
  intervalMs = 100,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    try {
      const v = await probe();
      if (v !== undefined && v !== false) return v;
    } catch (err) {
      lastError = err;
    }
    if (Date.now() > deadline) {
      throw new Error(
        `timed out after ${timeoutMs} ms waiting for ${what}${lastError ? `: ${(lastError as Error).message}` : ""}`,
      );
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

/**
 * Holds `check` true for `forMs`, polling every `intervalMs`; throws at the first poll where it
 * is false (or throws), naming `what`. Resolves with the number of polls made (at least two).
 */
export async function consistently(
  what: string,
  check: () => Promise<boolean> | boolean,
  forMs = 1_000,
  intervalMs = 100,
): Promise<number> {
  const deadline = Date.now() + forMs;
  let polls = 0;
  for (;;) {
    let ok: boolean;
    try {
      ok = await check();
    } catch (err) {
      throw new Error(
        `expected ${what} to hold for ${forMs} ms, but the check failed after ${polls} polls: ${(err as Error).message}`,
      );
    }
    polls++;
    if (!ok) throw new Error(`expected ${what} to hold for ${forMs} ms, but it stopped holding after ${polls} polls`);
    if (Date.now() >= deadline && polls >= 2) return polls;
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

/**
 * Waits until the wall clock has passed `atMs`: for a clock the protocol or the product defines
 * (a TTL that must run out, the second an `updated` timestamp is given in), never to let work finish.
 */
export async function clockPast(what: string, atMs: number): Promise<void> {
  await waitFor(what, () => Date.now() > atMs, Math.max(0, atMs - Date.now()) + 5_000, 10);
}

/** Waits until the wall clock is in a later second than the timestamp `iso` (timestamps of one-second resolution). */
export const secondAfter = (iso: string): Promise<void> =>
  clockPast(`a second later than ${iso}`, Math.floor(Date.parse(iso) / 1000) * 1000 + 999);
