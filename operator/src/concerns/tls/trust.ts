// One trust domain per install: the operator's own CA (kept in a Secret of the operator's
// namespace, rotated with an overlap) issues every default serving certificate, and each Agent
// and Relay gets a trust bundle ConfigMap `<name>-trust` (key ca.crt) that its runtime trusts in
// addition to the system roots: the install's CAs, the chart's extra CAs and the resource's own
// spec.tls.trust entries. In the install's cert-manager mode a cert-manager issuer of the user's
// issues the default serving certificates instead (tls.ts), and a bundle ConfigMap that
// trust-manager writes into each namespace joins every trust bundle.
import { secretUsableBy } from "../../reconcile/references.ts";
import { randomBytes } from "node:crypto";
import type { KubernetesObject, V1ConfigMap, V1Secret } from "@kubernetes/client-node";
import type { Logger } from "pino";
import { createCA, fingerprint, loadCA, parseCaBundle, validity, type CertificateAuthority } from "./certs.ts";
import { applyChildren } from "../../kube/apply.ts";
import type { Caches } from "../../kube/caches.ts";
import { errorMessage, isStatus, type Kube } from "../../kube/client.ts";
import type { Blocker } from "../../reconcile/conditions.ts";
import type { Marks, MarksSource } from "../../reconcile/generated-mark.ts";
import { childMeta } from "../../reconcile/names.ts";
import type { Owner } from "../../reconcile/settings.ts";

const HOUR = 3600_000;
const DAY = 24 * HOUR;

/** How long the install CA and the serving certificates live, and when each is replaced. */
export interface TrustLifetimes {
  /** Validity of an install CA (default 5 years). */
  caValidityMs: number;
  /** A next CA is made and published this long before the current one expires (default 1 year). */
  caRotateBeforeMs: number;
  /** The next CA is in every bundle this long before certificates are issued from it (default 30 days). */
  caOverlapMs: number;
  /** Validity of a default serving certificate (default 1 year; never past its CA's expiry). */
  certValidityMs: number;
  /** A serving certificate is re-issued this long before it expires (default 30 days). */
  certRenewBeforeMs: number;
}

export const DEFAULT_LIFETIMES: TrustLifetimes = {
  caValidityMs: 5 * 365 * DAY,
  caRotateBeforeMs: 365 * DAY,
  caOverlapMs: 30 * DAY,
  certValidityMs: 365 * DAY,
  certRenewBeforeMs: 30 * DAY,
};

/** Lifetimes that make sense together, or an Error naming the one that does not. */
export function checkLifetimes(l: TrustLifetimes): TrustLifetimes {
  for (const [k, v] of Object.entries(l))
    if (!Number.isFinite(v) || v <= 0) throw new Error(`${k} must be a positive duration`);
  if (l.caRotateBeforeMs >= l.caValidityMs)
    throw new Error("the CA rotation lead (--ca-rotate-before) must be shorter than the CA validity (--ca-validity)");
  if (l.caOverlapMs >= l.caRotateBeforeMs)
    throw new Error("the CA overlap (--ca-overlap) must be shorter than the CA rotation lead (--ca-rotate-before)");
  if (l.certRenewBeforeMs >= l.certValidityMs)
    throw new Error(
      "the certificate renewal lead (--cert-renew-before) must be shorter than the certificate validity (--cert-validity)",
    );
  return l;
}

// ---- The install CA's Secret -------------------------------------------------------------

/** Keys of the CA Secret: the current CA signs; the next is published only; the previous is still trusted. */
export const CA_KEYS = {
  cert: "ca.crt",
  key: "ca.key",
  nextCert: "next.crt",
  nextKey: "next.key",
  previousCert: "previous.crt",
  marksKey: "marks.key",
} as const;
/** When the next CA was first published (ISO time), on the CA Secret. */
export const NEXT_PUBLISHED = "ifp.dev/next-ca-published";
/** When the marks key was made (ISO time), on the CA Secret: what the operator generated before it carries no mark. */
export const MARKS_SINCE = "ifp.dev/marks-since";
/** The trust bundle's key in each `<name>-trust` ConfigMap, and where the runtime pods find it. */
export const BUNDLE_KEY = "ca.crt";

export interface CaState {
  current: { cert: string; key: string };
  next?: { cert: string; key: string; publishedAt: number };
  previous?: { cert: string };
  /**
   * The key the operator marks what it generates with (generated-mark.ts): kept across every
   * rotation, made once when absent, never shown to a runtime.
   */
  marks?: { key: string; since: number };
}

const decode = (b64: string | undefined) => (b64 ? Buffer.from(b64, "base64").toString("utf8") : undefined);

/** The CA state a Secret holds (throws with what is wrong when it is unusable: a trust root is never replaced silently). */
export function caStateOf(secret: V1Secret): CaState {
  const d = secret.data ?? {};
  const cert = decode(d[CA_KEYS.cert]);
  const key = decode(d[CA_KEYS.key]);
  if (!cert || !key) throw new Error(`has no ${CA_KEYS.cert} and ${CA_KEYS.key}`);
  parseCaBundle(cert);
  const state: CaState = { current: { cert, key } };
  const nextCert = decode(d[CA_KEYS.nextCert]);
  const nextKey = decode(d[CA_KEYS.nextKey]);
  if (nextCert && nextKey) {
    parseCaBundle(nextCert);
    const published = Date.parse(secret.metadata?.annotations?.[NEXT_PUBLISHED] ?? "");
    state.next = {
      cert: nextCert,
      key: nextKey,
      publishedAt: Number.isFinite(published) ? published : validity(nextCert).notBefore.getTime(),
    };
  }
  const previous = decode(d[CA_KEYS.previousCert]);
  if (previous && pemOk(previous)) state.previous = { cert: previous };
  const marks = d[CA_KEYS.marksKey];
  const since = Date.parse(secret.metadata?.annotations?.[MARKS_SINCE] ?? "");
  if (marks && Buffer.from(marks, "base64").length >= 32 && Number.isFinite(since)) state.marks = { key: marks, since };
  return state;
}

function pemOk(pem: string): boolean {
  try {
    parseCaBundle(pem);
    return true;
  } catch {
    return false;
  }
}

export type CaStep =
  | { action: "create" }
  /** The current CA has expired with no next to take over: start afresh. */
  | { action: "replace" }
  | { action: "add-next" }
  | { action: "promote" }
  | { action: "drop-previous" }
  | { action: "keep"; nextCheckAt: number };

/**
 * Pure: what the CA state needs now. The next CA is made `caRotateBeforeMs` before the current
 * expires and published at once; after `caOverlapMs` it becomes the signing CA (serving
 * certificates are then re-issued from it), and the old one stays in the bundles as the
 * previous CA until it expires.
 */
export function caRotationStep(state: CaState | undefined, now: number, l: TrustLifetimes): CaStep {
  if (!state) return { action: "create" };
  const currentEnd = validity(state.current.cert).notAfter.getTime();
  if (currentEnd <= now) return state.next ? { action: "promote" } : { action: "replace" };
  if (state.previous) {
    const end = validity(state.previous.cert).notAfter.getTime();
    if (end <= now) return { action: "drop-previous" };
  }
  if (state.next && now >= state.next.publishedAt + l.caOverlapMs) return { action: "promote" };
  const rotateAt = currentEnd - l.caRotateBeforeMs;
  if (!state.next && now >= rotateAt) return { action: "add-next" };
  const times = [state.next ? state.next.publishedAt + l.caOverlapMs : rotateAt, currentEnd];
  if (state.previous) times.push(validity(state.previous.cert).notAfter.getTime());
  return { action: "keep", nextCheckAt: Math.min(...times) };
}

/** Pure: the CA Secret's body for a state. */
export function caSecret(namespace: string, name: string, state: CaState): V1Secret {
  const enc = (s: string) => Buffer.from(s).toString("base64");
  const data: Record<string, string> = {
    [CA_KEYS.cert]: enc(state.current.cert),
    [CA_KEYS.key]: enc(state.current.key),
  };
  if (state.next)
    Object.assign(data, { [CA_KEYS.nextCert]: enc(state.next.cert), [CA_KEYS.nextKey]: enc(state.next.key) });
  if (state.previous) data[CA_KEYS.previousCert] = enc(state.previous.cert);
  if (state.marks) data[CA_KEYS.marksKey] = state.marks.key;
  return {
    apiVersion: "v1",
    kind: "Secret",
    type: "Opaque",
    metadata: {
      name,
      namespace,
      labels: {
        "app.kubernetes.io/name": "ifp-operator",
        "app.kubernetes.io/component": "install-ca",
        "app.kubernetes.io/part-of": "ifp-operator",
      },
      annotations: {
        ...(state.next ? { [NEXT_PUBLISHED]: new Date(state.next.publishedAt).toISOString() } : {}),
        ...(state.marks ? { [MARKS_SINCE]: new Date(state.marks.since).toISOString() } : {}),
      },
    },
    data,
  };
}

/** Pure: the install's CA certificates every bundle holds: previous (until it expires), current, next. */
export function installCaCerts(state: CaState): string[] {
  return [state.previous?.cert, state.current.cert, state.next?.cert].filter((c): c is string => !!c);
}

/** Pure: one PEM bundle from several sources, each certificate once, in order. */
export function joinBundle(...sources: string[][]): string {
  const seen = new Set<string>();
  const out: string[] = [];
  for (const pem of sources.flat()) {
    const norm = `${pem.trim().replace(/\r\n/g, "\n")}\n`;
    if (seen.has(norm)) continue;
    seen.add(norm);
    out.push(norm);
  }
  return out.join("");
}

/**
 * The install's cert-manager mode (chart value trust.certManager): an issuer of the user's (a CA
 * ClusterIssuer, say) that issues the serving certificate of every resource that names none of its
 * own, and a ConfigMap present in each namespace (a trust-manager Bundle's target) whose key every
 * trust bundle includes, so that the runtimes trust that issuer's CA.
 */
export interface CertManagerMode {
  issuerRef?: { name: string; kind: string; group: string };
  bundle?: { configMapName: string; key: string };
}

export interface InstallTrustOptions {
  /** The operator's own namespace, where the CA Secret lives. */
  namespace: string;
  secretName: string;
  lifetimes?: Partial<TrustLifetimes>;
  /** Extra CA certificates (PEM) put in every bundle, for example the chart's trust.extraCAs. */
  extraCas?: string;
  /** The cert-manager mode; off when absent. */
  certManager?: CertManagerMode;
  log: Logger;
}

/**
 * The install CA: loaded (or created once) from its Secret, rotated when due, and the signer of
 * default serving certificates. Several replicas may race to create or rotate it: creation is
 * create-if-absent then re-read, a rotation is a replace at the read resourceVersion.
 */
export class InstallTrust implements MarksSource {
  readonly lifetimes: TrustLifetimes;
  readonly namespace: string;
  readonly secretName: string;
  readonly certManager: CertManagerMode;
  private readonly extra: string[];
  private readonly log: Logger;
  private state: CaState | undefined;
  private ca: CertificateAuthority | undefined;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;

  private readonly kube: Kube;

  constructor(kube: Kube, opts: InstallTrustOptions) {
    this.kube = kube;
    this.lifetimes = checkLifetimes({ ...DEFAULT_LIFETIMES, ...opts.lifetimes });
    this.namespace = opts.namespace;
    this.secretName = opts.secretName;
    this.extra = opts.extraCas?.trim() ? parseCaBundle(opts.extraCas) : [];
    this.certManager = opts.certManager ?? {};
    this.log = opts.log;
  }

  /** The CA that signs serving certificates now. */
  signer(): CertificateAuthority {
    if (!this.ca) throw new Error("the install CA is not loaded yet");
    return this.ca;
  }

  /** The key the operator marks what it generates with, and since when it has been (generated-mark.ts). */
  marks(): Marks {
    const m = this.state?.marks;
    if (!m) throw new Error("the install CA is not loaded yet");
    return { key: Buffer.from(m.key, "base64"), since: m.since };
  }

  /** The SHA-256 fingerprint of the signing CA's certificate. */
  signerId(): string {
    return fingerprint(this.signer().cert);
  }

  /** The install's part of every bundle: its CAs (previous, current, next) and the extra CAs. */
  bundleCerts(): string[] {
    if (!this.state) throw new Error("the install CA is not loaded yet");
    return [...installCaCerts(this.state), ...this.extra];
  }

  /**
   * Read, create or rotate the CA Secret until it needs nothing; returns whether the published
   * CAs or the signing CA changed (a promotion changes only the signer: the certificates it
   * issued must follow).
   */
  async ensure(now = Date.now()): Promise<boolean> {
    const published = (s: CaState) => `${joinBundle(installCaCerts(s))}\nsigner:${s.current.cert}`;
    const before = this.state ? published(this.state) : "";
    for (let attempt = 1; ; attempt++) {
      const secret = await this.kube.read<V1Secret>("v1", "Secret", this.namespace, this.secretName);
      let state: CaState | undefined;
      if (secret) {
        try {
          state = caStateOf(secret);
        } catch (err) {
          throw new Error(
            `the install CA Secret ${this.namespace}/${this.secretName} ${errorMessage(err)}; fix it or delete it to make a new CA (every default serving certificate is then re-issued)`,
          );
        }
      }
      const rotation = caRotationStep(state, now, this.lifetimes);
      // A CA Secret of an earlier version gets its marks key before anything else.
      const step: Exclude<CaStep, { action: "keep" }> | { action: "add-marks" } | { action: "keep" } =
        state && !state.marks ? { action: "add-marks" } : rotation;
      if (step.action === "keep") {
        await this.load(state!);
        return before !== "" && before !== published(state!);
      }
      if (attempt > 5)
        throw new Error(`the install CA Secret ${this.namespace}/${this.secretName} kept changing under this replica`);
      const next = await this.apply(step, state, now);
      const body = caSecret(this.namespace, this.secretName, next);
      try {
        if (!secret) {
          // Another replica may have made it first: then read theirs.
          if (await this.kube.createIfAbsent(body))
            this.log.info(
              { secret: `${this.namespace}/${this.secretName}`, notAfter: validity(next.current.cert).notAfter },
              "Created the install CA",
            );
        } else {
          body.metadata!.resourceVersion = secret.metadata?.resourceVersion;
          await this.kube.replace(body);
          this.log.info(
            { secret: `${this.namespace}/${this.secretName}`, step: step.action },
            step.action === "add-marks" ? "Added the marks key to the install CA Secret" : "Rotated the install CA",
          );
        }
      } catch (err) {
        if (!isStatus(err, 409)) throw err;
      }
    }
  }

  private async apply(
    step: Exclude<CaStep, { action: "keep" }> | { action: "add-marks" },
    state: CaState | undefined,
    now: number,
  ): Promise<CaState> {
    const marks = state?.marks ?? { key: randomBytes(32).toString("base64"), since: now };
    return { ...(await this.rotated(step, state, now)), marks };
  }

  private async rotated(
    step: Exclude<CaStep, { action: "keep" }> | { action: "add-marks" },
    state: CaState | undefined,
    now: number,
  ): Promise<Omit<CaState, "marks">> {
    const fresh = async () => {
      const ca = await createCA(
        `ifp-operator install CA ${this.namespace}/${this.secretName} ${new Date(now).toISOString().slice(0, 10)}`,
        this.lifetimes.caValidityMs,
        now,
      );
      return { cert: ca.cert, key: ca.key };
    };
    switch (step.action) {
      case "create":
      case "replace":
        return {
          current: await fresh(),
          ...(state && step.action === "replace" ? { previous: { cert: state.current.cert } } : {}),
        };
      case "add-next":
        return { ...state!, next: { ...(await fresh()), publishedAt: now } };
      case "promote":
        return { current: { cert: state!.next!.cert, key: state!.next!.key }, previous: { cert: state!.current.cert } };
      case "drop-previous":
        return { current: state!.current, ...(state!.next ? { next: state!.next } : {}) };
      case "add-marks":
        return state!;
    }
  }

  private async load(state: CaState): Promise<void> {
    if (this.state && this.state.current.cert === state.current.cert && this.ca) {
      this.state = state;
      return;
    }
    this.ca = await loadCA(state.current);
    this.state = state;
  }

  /**
   * Ensure now, then again whenever a step is due (checked at least hourly): `onChange` runs
   * when the published CAs changed, so that every bundle and certificate follows.
   */
  async start(onChange: () => void, now: () => number = Date.now): Promise<void> {
    await this.ensure(now());
    const schedule = (ms: number) => {
      if (this.stopped) return;
      this.timer = setTimeout(() => void tick(), ms);
      this.timer.unref();
    };
    const tick = async () => {
      let wait = HOUR;
      try {
        // A call that never answers must not stop the rotation for good: past the deadline the
        // check is tried again (a second check alongside a stuck one is safe: every write is
        // conditional on the Secret's resourceVersion).
        if (await withDeadline(this.ensure(now()), ENSURE_DEADLINE_MS, "checking the install CA")) onChange();
        // A step may have come due since the check (its time fell in between): then at once.
        const step = caRotationStep(this.state, now(), this.lifetimes);
        wait = step.action === "keep" ? Math.max(1000, Math.min(HOUR, step.nextCheckAt - now())) : 1000;
        this.log.debug(
          { secret: `${this.namespace}/${this.secretName}`, step: step.action, nextCheckInMs: wait },
          "checked the install CA",
        );
      } catch (err) {
        this.log.error({ err: errorMessage(err) }, "could not check the install CA");
        wait = err instanceof DeadlineExceeded ? 1000 : 30_000;
      }
      schedule(wait);
    };
    const step = caRotationStep(this.state, now(), this.lifetimes);
    schedule(step.action === "keep" ? Math.max(1000, Math.min(HOUR, step.nextCheckAt - now())) : 1000);
  }

  stop(): void {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
  }
}

/** How long one check of the install CA (a read, perhaps a write) may take before it is tried again. */
const ENSURE_DEADLINE_MS = 20_000;

class DeadlineExceeded extends Error {}

/** `p`, or a DeadlineExceeded once `ms` passed; `p`'s own later outcome is ignored. */
function withDeadline<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  p.catch(() => {});
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new DeadlineExceeded(`${what} took more than ${ms / 1000} s`)), ms);
  });
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}

// ---- Per-resource trust bundles ------------------------------------------------------------

export interface TrustRef {
  configMapRef?: { name: string; key: string };
  secretRef?: { name: string; key: string };
}

/** Largest source text read from one referenced ConfigMap or Secret key. */
export const MAX_TRUST_SOURCE_BYTES = 256 * 1024;

/** The trust bundle ConfigMap's name for a resource. */
export function trustConfigMapName(name: string): string {
  return `${name}-trust`;
}

/** Pure: the trust bundle ConfigMap of a resource. */
export function desiredTrustBundle(owner: Owner, pem: string): V1ConfigMap {
  return {
    apiVersion: "v1",
    kind: "ConfigMap",
    metadata: childMeta(owner, trustConfigMapName(owner.metadata.name)),
    data: { [BUNDLE_KEY]: pem },
  };
}

/** Where the install's cert-manager bundle is named, as reports say it. */
export const CERT_MANAGER_BUNDLE_FIELD = "the install's trust.certManager.bundle (--cert-manager-bundle)";

/**
 * Pure: the CA certificates one trust source's object yields, or a Blocker naming where the
 * source is named: spec.tls.trust[index], or `field` (the install's cert-manager bundle).
 */
export function trustFromSource(
  index: number | string,
  ref: TrustRef,
  obj: KubernetesObject | undefined,
  namespace: string,
): { certs: string[] } | { blocker: Blocker } {
  const kind = ref.configMapRef ? "ConfigMap" : "Secret";
  const r = (ref.configMapRef ?? ref.secretRef)!;
  const field =
    typeof index === "string" ? index : `spec.tls.trust[${index}].${ref.configMapRef ? "configMapRef" : "secretRef"}`;
  if (!obj)
    return {
      blocker: {
        reason: "TrustSourceMissing",
        message: `${kind} ${r.name} named in ${field} does not exist in namespace ${namespace}`,
      },
    };
  let text: string | undefined;
  if (kind === "ConfigMap") {
    const cm = obj as V1ConfigMap;
    text = cm.data?.[r.key] ?? decode(cm.binaryData?.[r.key]);
  } else {
    text = decode((obj as V1Secret).data?.[r.key]);
  }
  if (text === undefined)
    return { blocker: { reason: "InvalidTrust", message: `${kind} ${r.name} named in ${field} has no key ${r.key}` } };
  if (Buffer.byteLength(text) > MAX_TRUST_SOURCE_BYTES)
    return {
      blocker: {
        reason: "InvalidTrust",
        message: `${kind} ${r.name} key ${r.key} named in ${field} is larger than ${MAX_TRUST_SOURCE_BYTES} bytes`,
      },
    };
  try {
    return { certs: parseCaBundle(text) };
  } catch (err) {
    return {
      blocker: {
        reason: "InvalidTrust",
        message: `${kind} ${r.name} key ${r.key} named in ${field} ${errorMessage(err)}`,
      },
    };
  }
}

export interface TrustOutcome {
  /** The ConfigMap the pods mount. */
  configMapName: string;
  applied: string[];
  blocker?: Blocker;
}

/**
 * Publish a resource's trust bundle: the install's CAs, the extra CAs, the install's cert-manager
 * bundle (its ConfigMap in the resource's namespace, an implicit configMapRef entry) and the
 * resource's spec.tls.trust entries. An entry that is missing or unusable is left out and
 * reported (the first one as the blocker); the rest is still published, so that the runtime
 * keeps trusting the install. The referenced objects are the user's, not watched: a resource
 * with a blocker is looked at again every 30 seconds, the others at each resync.
 */
export async function ensureTrust(
  kube: Kube,
  caches: Caches,
  trust: InstallTrust,
  owner: Owner,
  refs: TrustRef[] | undefined,
): Promise<TrustOutcome> {
  const ns = owner.metadata.namespace;
  const user: string[] = [];
  let blocker: Blocker | undefined;
  const bundle = trust.certManager.bundle;
  if (bundle) {
    const ref = { configMapRef: { name: bundle.configMapName, key: bundle.key } };
    const got = trustFromSource(
      CERT_MANAGER_BUNDLE_FIELD,
      ref,
      await kube.read("v1", "ConfigMap", ns, bundle.configMapName),
      ns,
    );
    if ("blocker" in got) blocker = got.blocker;
    else user.push(...got.certs);
  }
  for (const [i, ref] of (refs ?? []).entries()) {
    const r = ref.configMapRef ?? ref.secretRef;
    if (!r) continue;
    const obj = await kube.read("v1", ref.configMapRef ? "ConfigMap" : "Secret", ns, r.name);
    // A CA bundle in a ConfigMap is public; a Secret is used only when made or labelled for this owner.
    const refusal = obj && ref.secretRef ? secretUsableBy(obj, owner, `spec.tls.trust[${i}].secretRef`) : undefined;
    if (refusal) {
      blocker ??= refusal;
      continue;
    }
    const got = trustFromSource(i, ref, obj, ns);
    if ("blocker" in got) blocker ??= got.blocker;
    else user.push(...got.certs);
  }
  const pem = joinBundle(trust.bundleCerts(), user);
  const applied = await applyChildren(kube, caches, owner, [desiredTrustBundle(owner, pem)]);
  return { configMapName: trustConfigMapName(owner.metadata.name), applied, ...(blocker ? { blocker } : {}) };
}
