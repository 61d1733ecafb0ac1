// Leader election with a coordination.k8s.io Lease, in the manner of client-go's: the holder
// renews every few seconds; it gives up leading when it could not renew within the renew
// deadline; another replica takes over once it has seen the lease unchanged for its duration.
// As in client-go, expiry is judged by this replica's clock alone: the local time at which it
// last saw the record change, plus leaseDurationSeconds. The holder's renewTime is never
// compared with the local clock, since the clocks of different nodes are skewed.
import { CoordinationV1Api, type KubeConfig, type V1Lease } from "@kubernetes/client-node";
import type { Logger } from "pino";
import { errorMessage, isStatus } from "../kube/client.ts";

/** metav1.MicroTime: RFC 3339 with exactly six fractional digits. */
export function microTime(d: Date): string {
  return d.toISOString().replace(/\.(\d{3})Z$/, ".$1000Z");
}

/** The Lease annotation in which the leader writes its version (kubectl ifp status shows it). */
export const LEADER_VERSION_ANNOTATION = "ifp.dev/version";

export interface LeaderElectorOptions {
  namespace: string;
  /** Annotations the holder writes on the Lease with each acquire and renewal. */
  annotations?: Record<string, string>;
  name: string;
  identity: string;
  log: Logger;
  leaseSeconds?: number;
  renewDeadlineMs?: number;
  retryMs?: number;
  /** The local clock in ms (Date.now by default); a test may skew it. */
  now?: () => number;
}

export class LeaderElector {
  private readonly api: CoordinationV1Api;
  private readonly opts: Required<Omit<LeaderElectorOptions, "log" | "annotations">>;
  private readonly annotations: Record<string, string>;
  private readonly log: Logger;
  private timer: NodeJS.Timeout | undefined;
  private leading = false;
  private stopped = false;
  private lastRenew = 0;
  /** The lease record as last read or written, and the local time at which it last changed. */
  private observedRecord: string | undefined;
  private observedTime = 0;

  constructor(kc: KubeConfig, opts: LeaderElectorOptions) {
    this.api = kc.makeApiClient(CoordinationV1Api);
    this.log = opts.log;
    this.annotations = opts.annotations ?? {};
    // Defaults for what the caller left out, an explicit `undefined` included: a Lease written
    // without its duration never expires for the other candidates.
    this.opts = {
      ...opts,
      leaseSeconds: opts.leaseSeconds ?? 15,
      renewDeadlineMs: opts.renewDeadlineMs ?? 10_000,
      retryMs: opts.retryMs ?? 2_000,
      now: opts.now ?? Date.now,
    };
  }

  private now(): number {
    return this.opts.now();
  }

  /** Remember the record; the observation time moves only when the record differs. */
  private observe(spec: V1Lease["spec"], at: number): void {
    const rec = JSON.stringify([
      spec?.holderIdentity ?? "",
      spec?.renewTime ? new Date(spec.renewTime).getTime() : 0,
      spec?.leaseTransitions ?? 0,
      spec?.leaseDurationSeconds ?? 0,
    ]);
    if (rec !== this.observedRecord) {
      this.observedRecord = rec;
      this.observedTime = at;
    }
  }

  get isLeader(): boolean {
    return this.leading;
  }

  /** Resolves once this replica leads (never, if stopped first); onLost if it stops leading. */
  run(onLost: () => void): Promise<void> {
    return new Promise((resolve) => {
      const tick = async () => {
        if (this.stopped) return;
        let held: boolean;
        try {
          held = await this.tryAcquireOrRenew();
        } catch (err) {
          this.log.warn({ err: errorMessage(err) }, "leader election: could not reach the lease");
          held = this.leading && this.now() - this.lastRenew < this.opts.renewDeadlineMs;
        }
        if (this.stopped) return;
        if (held && !this.leading) {
          this.leading = true;
          this.log.info(
            { lease: `${this.opts.namespace}/${this.opts.name}`, identity: this.opts.identity },
            "became leader",
          );
          resolve();
        } else if (!held && this.leading) {
          this.leading = false;
          this.log.error({ lease: `${this.opts.namespace}/${this.opts.name}` }, "lost the leader lease");
          onLost();
          return;
        }
        this.timer = setTimeout(tick, this.opts.retryMs);
      };
      void tick();
    });
  }

  private async tryAcquireOrRenew(): Promise<boolean> {
    const now = new Date(this.now());
    const { namespace, name, identity, leaseSeconds } = this.opts;
    let lease: V1Lease | undefined;
    try {
      lease = await this.api.readNamespacedLease({ name, namespace });
    } catch (err) {
      if (!isStatus(err, 404)) throw err;
    }
    const renewTime = microTime(now) as unknown as Date;
    if (!lease) {
      try {
        await this.api.createNamespacedLease({
          namespace,
          body: {
            metadata: { name, namespace, annotations: this.annotations },
            spec: {
              holderIdentity: identity,
              leaseDurationSeconds: leaseSeconds,
              acquireTime: renewTime,
              renewTime,
              leaseTransitions: 0,
            },
          },
        });
        this.lastRenew = now.getTime();
        this.observe(
          { holderIdentity: identity, renewTime, leaseTransitions: 0, leaseDurationSeconds: leaseSeconds },
          now.getTime(),
        );
        return true;
      } catch (err) {
        if (isStatus(err, 409)) return false;
        throw err;
      }
    }
    const holder = lease.spec?.holderIdentity;
    this.observe(lease.spec, now.getTime());
    const expired = this.observedTime + (lease.spec?.leaseDurationSeconds ?? leaseSeconds) * 1000 < now.getTime();
    if (holder && holder !== identity && !expired) return false;
    const mine = holder === identity;
    const spec = {
      ...lease.spec,
      holderIdentity: identity,
      leaseDurationSeconds: leaseSeconds,
      renewTime,
      acquireTime:
        mine && lease.spec?.acquireTime ? (microTime(new Date(lease.spec.acquireTime)) as unknown as Date) : renewTime,
      leaseTransitions: (lease.spec?.leaseTransitions ?? 0) + (mine ? 0 : 1),
    };
    try {
      const metadata = { ...lease.metadata, annotations: { ...lease.metadata?.annotations, ...this.annotations } };
      await this.api.replaceNamespacedLease({ name, namespace, body: { ...lease, metadata, spec } });
      this.lastRenew = now.getTime();
      this.observe(spec, now.getTime());
      return true;
    } catch (err) {
      if (isStatus(err, 409)) return false;
      throw err;
    }
  }

  /** Stop, and give the lease up so that another replica can take over at once. */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    if (!this.leading) return;
    this.leading = false;
    try {
      const lease = await this.api.readNamespacedLease({ name: this.opts.name, namespace: this.opts.namespace });
      if (lease.spec?.holderIdentity === this.opts.identity) {
        await this.api.replaceNamespacedLease({
          name: this.opts.name,
          namespace: this.opts.namespace,
          body: {
            ...lease,
            spec: {
              ...lease.spec,
              holderIdentity: undefined,
              leaseDurationSeconds: 1,
              renewTime: microTime(new Date(this.now())) as unknown as Date,
            },
          },
        });
      }
    } catch {
      // the lease simply expires
    }
  }
}
