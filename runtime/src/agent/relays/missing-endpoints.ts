// Relays found without an optional endpoint of theirs (the batch publish, the batch
// acknowledgement): remembered for an hour, since a relay may be upgraded meanwhile, and for at
// most MAX_REMEMBERED relays, the oldest forgotten first.
const MAX_REMEMBERED = 1_000;
const REMEMBERED_FOR_MS = 3_600_000;

/** Whether a relay's answer says it has no such endpoint (an older relay, or another implementation). */
export const lacksEndpoint = (status: number): boolean => status === 404 || status === 405;

/** The relays found without one endpoint, each with when that was found; oldest first. */
export class MissingEndpoints {
  private readonly since = new Map<string, number>();
  private readonly now: () => number;

  constructor(now: () => number = Date.now) {
    this.now = now;
  }

  /** Whether the relay may have the endpoint: not found without it within the last hour. */
  has(relayUrl: string): boolean {
    const since = this.since.get(relayUrl);
    if (since === undefined) return true;
    if (this.now() - since < REMEMBERED_FOR_MS) return false;
    this.since.delete(relayUrl);
    return true;
  }

  /** The relay answered that it has no such endpoint. */
  remember(relayUrl: string): void {
    this.since.delete(relayUrl);
    this.since.set(relayUrl, this.now());
    while (this.since.size > MAX_REMEMBERED) this.since.delete(this.since.keys().next().value!);
  }
}
