import { CoordinationV1Api, type KubeConfig, type V1Lease } from "@kubernetes/client-node";
import type { Logger } from "pino";
import { errorMessage, isStatus } from "./kube/client.ts";

/**
 * Leader election with a coordination.k8s.io Lease: the holder renews it every few seconds;
 * another replica takes it over once it has not been renewed for `leaseSeconds`.
 */
export class LeaderElector {
  private readonly api: CoordinationV1Api;
  private readonly identity: string;
  private readonly namespace: string;
  private readonly name: string;
  private readonly leaseSeconds = 15;
  private readonly log: Logger;
  private timer: NodeJS.Timeout | undefined;
  private leading = false;
  private stopped = false;

  constructor(kc: KubeConfig, opts: { namespace: string; name: string; identity: string; log: Logger }) {
    this.api = kc.makeApiClient(CoordinationV1Api);
    this.namespace = opts.namespace;
    this.name = opts.name;
    this.identity = opts.identity;
    this.log = opts.log;
  }

  /** Resolves once this replica leads; calls onLost if it ever stops leading. */
  run(onLost: () => void): Promise<void> {
    return new Promise((resolve) => {
      const tick = async () => {
        if (this.stopped) return;
        const held = await this.tryAcquireOrRenew().catch((err) => {
          this.log.warn({ err: errorMessage(err) }, "leader election failed");
          return false;
        });
        if (held && !this.leading) {
          this.leading = true;
          this.log.info({ lease: `${this.namespace}/${this.name}`, identity: this.identity }, "became leader");
          resolve();
        } else if (!held && this.leading) {
          this.leading = false;
          this.log.error("lost the leader lease");
          onLost();
        }
        this.timer = setTimeout(tick, held ? 5_000 : 2_000);
      };
      void tick();
    });
  }

  private async tryAcquireOrRenew(): Promise<boolean> {
    const now = new Date();
    let lease: V1Lease | undefined;
    try {
      lease = await this.api.readNamespacedLease({ name: this.name, namespace: this.namespace });
    } catch (err) {
      if (!isStatus(err, 404)) throw err;
    }
    const spec = { holderIdentity: this.identity, leaseDurationSeconds: this.leaseSeconds, renewTime: now as unknown as Date };
    if (!lease) {
      try {
        await this.api.createNamespacedLease({ namespace: this.namespace, body: { metadata: { name: this.name, namespace: this.namespace }, spec: { ...spec, acquireTime: now as unknown as Date, leaseTransitions: 0 } } });
        return true;
      } catch (err) {
        if (isStatus(err, 409)) return false;
        throw err;
      }
    }
    const holder = lease.spec?.holderIdentity;
    const renewed = lease.spec?.renewTime ? new Date(lease.spec.renewTime).getTime() : 0;
    const expired = renewed + (lease.spec?.leaseDurationSeconds ?? this.leaseSeconds) * 1000 < now.getTime();
    if (holder !== this.identity && !expired) return false;
    const transitions = (lease.spec?.leaseTransitions ?? 0) + (holder === this.identity ? 0 : 1);
    try {
      await this.api.replaceNamespacedLease({
        name: this.name,
        namespace: this.namespace,
        body: { ...lease, spec: { ...lease.spec, ...spec, leaseTransitions: transitions, ...(holder === this.identity ? {} : { acquireTime: now as unknown as Date }) } },
      });
      return true;
    } catch (err) {
      if (isStatus(err, 409)) return false;
      throw err;
    }
  }

  /** Give the lease up so another replica can take over at once. */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    if (!this.leading) return;
    try {
      const lease = await this.api.readNamespacedLease({ name: this.name, namespace: this.namespace });
      if (lease.spec?.holderIdentity === this.identity) {
        await this.api.replaceNamespacedLease({ name: this.name, namespace: this.namespace, body: { ...lease, spec: { ...lease.spec, holderIdentity: undefined, renewTime: undefined } } });
      }
    } catch {
      // the lease simply expires
    }
  }
}
