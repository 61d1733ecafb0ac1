// The installed NATS's server certificate, issued by the install CA.
//
// The chart's NATS serves TLS only, with the certificate in a Secret of the operator's namespace
// that its pods mount (tls.crt, tls.key, and ca.crt: the install's bundle, which the servers of
// a cluster verify each other's route connections with). The operator keeps it like a default
// serving certificate (tls.ts): issued when missing, re-issued before it expires, when its names
// change or when the install CA's signer changes; ca.crt follows every change of the bundle (a
// next CA published). The runtimes verify the server with their trust bundle, the operator with
// the install CAs it holds. A reloader beside each NATS server makes it read a renewed file.
import type { V1Secret } from "@kubernetes/client-node";
import type { Logger } from "pino";
import { isoSeconds } from "../../../../runtime/src/util/time.ts";
import { errorMessage, isStatus, type Kube } from "../../kube/client.ts";
import { COMPONENT_LABEL, hashOf, MANAGED_BY } from "../../kube/metadata.ts";
import { DNS_NAMES_HASH, ISSUER, NOT_AFTER, selfSignedAction } from "./tls.ts";
import { joinBundle, type InstallTrust } from "./trust.ts";

export const NATS_TLS_KEYS = { cert: "tls.crt", key: "tls.key", ca: "ca.crt" } as const;

/** The longest wait between two checks: a missed renewal is noticed within it. */
const MAX_WAIT_MS = 3600_000;

export interface NatsServerTlsOptions {
  namespace: string;
  secretName: string;
  /** The names clients and the other servers reach the NATS servers by (the chart's Services). */
  dnsNames: string[];
  log: Logger;
}

export class NatsServerTls {
  private readonly kube: Kube;
  private readonly trust: InstallTrust;
  private readonly opts: NatsServerTlsOptions;
  private timer: NodeJS.Timeout | undefined;
  private running = false;
  /** A change arrived while a check was running: check again right after it. */
  private again = false;
  private stopped = false;

  constructor(kube: Kube, trust: InstallTrust, opts: NatsServerTlsOptions) {
    if (!opts.dnsNames.length)
      throw new Error("the NATS server certificate needs at least one DNS name (--nats-tls-dns-names)");
    this.kube = kube;
    this.trust = trust;
    this.opts = opts;
  }

  /**
   * Bring the Secret to what it must hold now; returns how long until it must be looked at again
   * (its renewal time, at most an hour).
   */
  async ensure(now = Date.now()): Promise<number> {
    const { namespace, secretName, dnsNames, log } = this.opts;
    const bundle = joinBundle(this.trust.bundleCerts());
    for (let attempt = 1; ; attempt++) {
      const secret = await this.kube.read<V1Secret>("v1", "Secret", namespace, secretName);
      const issuer = this.trust.signerId();
      const step = selfSignedAction(secret, dnsNames, now, issuer, this.trust.lifetimes.certRenewBeforeMs);
      const caNow = secret?.data?.[NATS_TLS_KEYS.ca]
        ? Buffer.from(secret.data[NATS_TLS_KEYS.ca]!, "base64").toString()
        : undefined;
      if (step.action === "keep" && caNow === bundle) return Math.max(1000, Math.min(MAX_WAIT_MS, step.renewAt! - now));
      const body: V1Secret = {
        apiVersion: "v1",
        kind: "Secret",
        type: "kubernetes.io/tls",
        metadata: {
          name: secretName,
          namespace,
          labels: { ...MANAGED_BY, [COMPONENT_LABEL]: "nats" },
          annotations: { ...secret?.metadata?.annotations },
        },
        data: { ...secret?.data, [NATS_TLS_KEYS.ca]: Buffer.from(bundle).toString("base64") },
      };
      if (step.action !== "keep") {
        const leaf = await this.trust.signer().issue({
          commonName: dnsNames[0]!,
          dnsNames,
          bothEnds: true,
          validityMs: this.trust.lifetimes.certValidityMs,
        });
        body.data![NATS_TLS_KEYS.cert] = Buffer.from(leaf.cert).toString("base64");
        body.data![NATS_TLS_KEYS.key] = Buffer.from(leaf.key).toString("base64");
        Object.assign(body.metadata!.annotations!, {
          [ISSUER]: issuer,
          [NOT_AFTER]: isoSeconds(leaf.notAfter),
          [DNS_NAMES_HASH]: hashOf(dnsNames),
        });
      }
      try {
        if (!secret) {
          await this.kube.createIfAbsent(body);
        } else {
          body.metadata!.resourceVersion = secret.metadata?.resourceVersion;
          await this.kube.replace(body);
        }
        log.info(
          {
            secret: `${namespace}/${secretName}`,
            step: step.action === "keep" ? "bundle" : step.action,
            notAfter: body.metadata!.annotations![NOT_AFTER],
          },
          "wrote the NATS server certificate",
        );
      } catch (err) {
        // Another replica wrote it in between: look again.
        if (!isStatus(err, 409) || attempt >= 5) throw err;
      }
    }
  }

  /**
   * Ensure at once (retried every 30 s while it fails), then at each renewal time, at least
   * hourly, and whenever `changed()` is called.
   */
  start(): void {
    this.schedule(0);
  }

  /** The install CAs changed (a rotation step): ca.crt, and after a promotion the certificate, follow. */
  changed(): void {
    this.schedule(0);
  }

  private schedule(ms: number): void {
    if (this.stopped) return;
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(() => void this.tick(), ms);
    this.timer.unref();
  }

  private async tick(): Promise<void> {
    if (this.running) {
      this.again = true;
      return;
    }
    this.running = true;
    this.again = false;
    let wait: number;
    try {
      wait = await this.ensure();
    } catch (err) {
      this.opts.log.error(
        { err: errorMessage(err), secret: `${this.opts.namespace}/${this.opts.secretName}` },
        "could not renew the NATS server certificate; retrying",
      );
      wait = 30_000;
    } finally {
      this.running = false;
    }
    this.schedule(this.again ? 0 : wait);
  }

  stop(): void {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
  }
}
