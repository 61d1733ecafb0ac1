// Per-destination resiliency of outbound deliveries (spec.outbound.resiliency): a circuit breaker
// and an in-flight cap for each inbox or relay URL, used by the outbound worker (outbound.ts).
import type { Circuit } from "../protocol/local-api.ts";
import type { RuntimeMetrics } from "../server/metrics.ts";

/** Per-destination resiliency of outbound deliveries (spec.outbound.resiliency, docs/reliability.md). */
export interface ResiliencyOptions {
  /** Consecutive failures (network errors, timeouts, 5xx) that open a destination's circuit. */
  failureThreshold: number;
  /** How long an open circuit stays open before one probe is let through. */
  coolDownMs: number;
  /** Deliveries in flight to one destination at once. */
  maxInFlight: number;
  /** How long one request to a destination may take. */
  timeoutMs: number;
}

export type CircuitState = "closed" | "open" | "half-open";

/** The value of ifp_outbound_circuit_state for each state. */
const GAUGE: Record<CircuitState, number> = { closed: 0, "half-open": 1, open: 2 };

/** The most circuits `circuits()` lists. */
export const MAX_LISTED_CIRCUITS = 100;

/** The pause before a message held back by a full destination (or a probe under way) is looked at again. */
const BUSY_PAUSE_MS = 250;

/** How an attempt let through ended, for the circuit: a 4xx or a 2xx is an answer, so a success. */
export type AttemptResult = "success" | "failure";

export type Admission =
  | { admitted: true; done(result: AttemptResult): void }
  | { admitted: false; reason: "open" | "half-open" | "busy"; error: string; retryAt: number };

interface Destination {
  state: CircuitState;
  failures: number;
  openUntil: number;
  probing: boolean;
  inFlight: number;
}

/**
 * One circuit breaker and one in-flight cap per destination (an inbox URL, a relay URL): closed,
 * it lets attempts through and counts consecutive failures; at the threshold it opens, and no
 * attempt is made for the cool-down; then half-open, it lets one probe through, closing on its
 * success and opening again on its failure. A destination that is closed, idle and has no
 * failures is forgotten, so the table holds only the destinations that matter now.
 */
export class Breakers {
  private readonly opts: ResiliencyOptions;
  private readonly metrics: RuntimeMetrics | undefined;
  private readonly now: () => number;
  private readonly table = new Map<string, Destination>();

  constructor(opts: ResiliencyOptions, metrics?: RuntimeMetrics, now: () => number = Date.now) {
    this.opts = opts;
    this.metrics = metrics;
    this.now = now;
  }

  get timeoutMs(): number {
    return this.opts.timeoutMs;
  }

  /** The state of a destination's circuit. */
  state(destination: string): CircuitState {
    const d = this.table.get(destination);
    if (d?.state === "open" && this.now() >= d.openUntil) return "half-open";
    return d?.state ?? "closed";
  }

  /**
   * The destinations whose circuit is not closed (open, or half-open: its cool-down over), the
   * most recently failed first, at most MAX_LISTED_CIRCUITS; `total` counts them all.
   */
  circuits(): { circuits: Circuit[]; total: number } {
    const now = this.now();
    const all = [...this.table.entries()]
      .filter(([, d]) => d.state !== "closed")
      .sort(([a, x], [b, y]) => y.openUntil - x.openUntil || a.localeCompare(b));
    return {
      total: all.length,
      circuits: all.slice(0, MAX_LISTED_CIRCUITS).map(([destination, d]) => ({
        destination,
        state: d.state === "open" && now < d.openUntil ? "open" : "half-open",
        failures: d.failures,
        ...(d.state === "open" && now < d.openUntil ? { open_until: new Date(d.openUntil).toISOString() } : {}),
      })),
    };
  }

  /** Whether an attempt to `destination` may be made now; when admitted, `done` must be called once with its result. */
  admit(destination: string): Admission {
    const now = this.now();
    const d = this.table.get(destination) ?? {
      state: "closed",
      failures: 0,
      openUntil: 0,
      probing: false,
      inFlight: 0,
    };
    this.table.set(destination, d);
    if (d.state === "open") {
      if (now < d.openUntil)
        return this.reject(
          destination,
          "open",
          d.openUntil,
          `circuit open until ${new Date(d.openUntil).toISOString()}`,
        );
      this.set(destination, d, "half-open");
    }
    if (d.state === "half-open" && d.probing)
      return this.reject(destination, "half-open", now + BUSY_PAUSE_MS, "circuit half-open, its probe under way");
    if (d.inFlight >= this.opts.maxInFlight)
      return this.reject(
        destination,
        "busy",
        now + BUSY_PAUSE_MS,
        `${d.inFlight} deliveries already in flight (maxInFlight)`,
      );
    const probe = d.state === "half-open";
    if (probe) d.probing = true;
    d.inFlight++;
    let settled = false;
    return {
      admitted: true,
      done: (result) => {
        if (settled) return;
        settled = true;
        d.inFlight--;
        if (probe) d.probing = false;
        if (result === "success") {
          d.failures = 0;
          this.set(destination, d, "closed");
        } else {
          d.failures++;
          if (probe || (d.state === "closed" && d.failures >= this.opts.failureThreshold)) {
            d.openUntil = this.now() + this.opts.coolDownMs;
            this.set(destination, d, "open");
          }
        }
        if (d.state === "closed" && !d.failures && !d.inFlight) this.table.delete(destination);
      },
    };
  }

  private reject(destination: string, reason: "open" | "half-open" | "busy", retryAt: number, why: string): Admission {
    this.metrics?.outboundCircuitRejections.inc({ reason });
    return { admitted: false, reason, retryAt, error: `${destination}: ${why}; no attempt made` };
  }

  private set(destination: string, d: Destination, state: CircuitState): void {
    if (d.state === state) return;
    d.state = state;
    // A series only while a circuit is not closed: the gauge's destinations stay those failing now.
    if (state === "closed") this.metrics?.outboundCircuitState.remove({ destination });
    else this.metrics?.outboundCircuitState.set({ destination }, GAUGE[state]);
  }
}
