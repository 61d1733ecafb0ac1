// What every A2A request passes before its method runs, whichever binding carries it (the
// HTTP bindings in routes.ts, gRPC in grpc.ts): the per-address limit, the A2A-Version, and the
// caller's limits of the inbox (requests per minute, bytes per hour). One instance per agent, so
// that a caller has one budget across the bindings.
import type { Agent } from "../resources/agent.ts";
import { RateLimiter } from "../server/ratelimit.ts";
import type { Caller } from "./callers.ts";
import { A2aError } from "./wire.ts";

export class A2aAdmission {
  private readonly spec: Agent["spec"];
  private readonly perAddress: RateLimiter;
  private readonly perCaller: RateLimiter;
  private readonly perCallerBytes: RateLimiter;

  constructor(agent: Agent, now: () => number = Date.now) {
    this.spec = agent.spec;
    const limits = this.spec.inbox.rateLimit;
    this.perAddress = new RateLimiter(limits.perAddressPerMinute, { now });
    this.perCaller = new RateLimiter(limits.perSenderPerMinute, { now });
    this.perCallerBytes = new RateLimiter(limits.perSenderBytesPerHour, { now, windowMs: 3_600_000 });
  }

  /** A request from `address` arrived: refused beyond the per-address limit. */
  address(address: string): void {
    const byAddress = this.perAddress.take(address);
    if (!byAddress.ok)
      throw new A2aError("RateLimited", `too many requests from ${address}`, {
        "retry-after": String(byAddress.retryAfterSeconds),
      });
  }

  /** The A2A-Version the request names: absent, or a 1.x this agent speaks. */
  version(version: string | undefined): void {
    if (typeof version === "string" && version.trim() !== "" && !/^1(\.\d+)?$/.test(version.trim()))
      throw new A2aError(
        "VersionNotSupported",
        `A2A-Version ${version.slice(0, 32)} is not supported; this agent speaks 1.0`,
      );
  }

  /** The authenticated caller's request of `size` bytes: refused beyond its limits. */
  caller(caller: Caller, size: number): void {
    const limits = this.spec.inbox.rateLimit;
    const byCaller = this.perCaller.take(caller.id);
    if (!byCaller.ok)
      throw new A2aError(
        "RateLimited",
        `rate limit of ${limits.perSenderPerMinute} requests per minute exceeded for ${caller.id}`,
        { "retry-after": String(byCaller.retryAfterSeconds) },
      );
    if (size > 0) {
      const bytes = this.perCallerBytes.take(caller.id, size);
      if (!bytes.ok)
        throw new A2aError(
          "RateLimited",
          `byte quota of ${limits.perSenderBytesPerHour} bytes per hour exceeded for ${caller.id}`,
          { "retry-after": String(bytes.retryAfterSeconds) },
        );
    }
  }
}
