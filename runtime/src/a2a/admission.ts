// What every A2A request passes before its method runs, whichever binding carries it (the
// HTTP bindings in routes.ts, gRPC in grpc.ts): the per-address limit, the A2A-Version, and the
// caller's limits of the inbox (requests per minute, bytes per hour). One instance per agent, so
// that a caller has one budget across the bindings.
import type { Agent } from "../resources/agent.ts";
import { RateLimiter } from "../server/ratelimit.ts";
import type { Limiter } from "../server/shared-ratelimit.ts";
import type { Caller } from "./callers.ts";
import { A2aError } from "./wire.ts";

/** How many more task reads (GetTask, ListTasks) than other requests a caller may make per minute. */
export const A2A_READ_BUDGET_FACTOR = 10;

/** The buckets of the A2A face's limits: tokens per minute (per `windowMs`), by name. */
export function admissionSizes(limits: Agent["spec"]["inbox"]["rateLimit"]) {
  return {
    a2aPerAddress: { perMinute: limits.perAddressPerMinute },
    a2aPerCaller: { perMinute: limits.perSenderPerMinute },
    a2aPerCallerReads: { perMinute: limits.perSenderPerMinute * A2A_READ_BUDGET_FACTOR },
    a2aPerCallerBytes: { perMinute: limits.perSenderBytesPerHour, windowMs: 3_600_000 },
  };
}
/** The buckets themselves: this process's, or (spec.runtime.workers) shared by every event loop. */
export type AdmissionBuckets = Record<keyof ReturnType<typeof admissionSizes>, Limiter>;

export class A2aAdmission {
  private readonly spec: Agent["spec"];
  private readonly buckets: AdmissionBuckets;

  constructor(agent: Agent, now: () => number = Date.now, buckets?: AdmissionBuckets) {
    this.spec = agent.spec;
    const sizes = admissionSizes(this.spec.inbox.rateLimit);
    const own = (size: { perMinute: number; windowMs?: number }) =>
      new RateLimiter(size.perMinute, { now, ...(size.windowMs ? { windowMs: size.windowMs } : {}) });
    this.buckets = buckets ?? {
      a2aPerAddress: own(sizes.a2aPerAddress),
      a2aPerCaller: own(sizes.a2aPerCaller),
      a2aPerCallerReads: own(sizes.a2aPerCallerReads),
      a2aPerCallerBytes: own(sizes.a2aPerCallerBytes),
    };
  }

  /** A request from `address` arrived: refused beyond the per-address limit. */
  address(address: string): void {
    const byAddress = this.buckets.a2aPerAddress.take(address);
    if (!byAddress.ok)
      throw new A2aError("RateLimited", `too many requests from ${address}`, {
        "retry-after": String(byAddress.retryAfterSeconds),
      });
  }

  /**
   * The A2A version the request asks for (section 3.6), the first non-empty of the values the
   * binding carries (header or metadata, then the query parameter); none, or only empty ones, is
   * 0.3 (section 3.6.2). `1.0` for any 1.x, `0.3` for 0.3 (served by the JSON-RPC binding only,
   * v03.ts); anything else is -32009.
   */
  negotiate(...given: unknown[]): "1.0" | "0.3" {
    const asked = given.find((v): v is string => typeof v === "string" && v.trim() !== "");
    const version = asked?.trim() ?? "0.3";
    if (/^1(\.\d+)?$/.test(version)) return "1.0";
    if (/^0\.3(\.\d+)?$/.test(version)) return "0.3";
    throw new A2aError(
      "VersionNotSupported",
      `A2A-Version ${version.slice(0, 32)} is not supported; this agent speaks 1.0 (send A2A-Version: 1.0), and 0.3 over JSON-RPC`,
    );
  }

  /** As negotiate, for the bindings that speak 1.0 only (HTTP+JSON, gRPC): 0.3 is -32009 saying how to upgrade. */
  version(...given: unknown[]): void {
    if (this.negotiate(...given) === "0.3")
      throw new A2aError(
        "VersionNotSupported",
        "A2A 0.3 is served over JSON-RPC only (a request without A2A-Version is 0.3): this binding speaks A2A 1.0; use a 1.0 client, which sends A2A-Version: 1.0 (header, or ?A2A-Version=1.0), or the JSON-RPC endpoint",
      );
  }

  /**
   * The authenticated caller's request of `size` bytes: refused beyond its limits. Reads of its
   * own tasks (`read`: GetTask, ListTasks — polling) have their own, larger budget.
   */
  caller(caller: Caller, size: number, read = false): void {
    const limits = this.spec.inbox.rateLimit;
    const byCaller = (read ? this.buckets.a2aPerCallerReads : this.buckets.a2aPerCaller).take(caller.id);
    if (!byCaller.ok)
      throw new A2aError(
        "RateLimited",
        read
          ? `rate limit of ${limits.perSenderPerMinute * A2A_READ_BUDGET_FACTOR} task reads per minute exceeded for ${caller.id}`
          : `rate limit of ${limits.perSenderPerMinute} requests per minute exceeded for ${caller.id}`,
        { "retry-after": String(byCaller.retryAfterSeconds) },
      );
    if (size > 0) {
      const bytes = this.buckets.a2aPerCallerBytes.take(caller.id, size);
      if (!bytes.ok)
        throw new A2aError(
          "RateLimited",
          `byte quota of ${limits.perSenderBytesPerHour} bytes per hour exceeded for ${caller.id}`,
          { "retry-after": String(bytes.retryAfterSeconds) },
        );
    }
  }
}
