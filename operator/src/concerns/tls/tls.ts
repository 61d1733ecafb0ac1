// The runtime's serving certificate: from a Secret the user names, from cert-manager when an
// issuer is named (by the resource, or for the whole install in its cert-manager mode), or else
// issued by the install CA (trust.ts) into a Secret the operator owns (and renews: before it
// expires, when its names change, and when the signing CA rotates).
import type { KubernetesObject, V1Secret } from "@kubernetes/client-node";
import { isoSeconds } from "../../../../runtime/src/util/time.ts";
import { validity } from "./certs.ts";
import { applyChildren, controlledBy, ChildConflictError } from "../../kube/apply.ts";
import { markedFor, ownedMark } from "../../reconcile/generated-mark.ts";
import type { Caches } from "../../kube/caches.ts";
import type { Kube } from "../../kube/client.ts";
import { digestOf, long } from "../../kube/digest.ts";
import type { Blocker } from "../../reconcile/conditions.ts";
import type { NoteReason } from "../../reconcile/context.ts";
import { COMPONENT_LABEL, hashOf, INSTANCE_LABEL, MANAGED_BY } from "../../kube/metadata.ts";
import { childMeta, childNames } from "../../reconcile/names.ts";
import type { Owner } from "../../reconcile/settings.ts";
import { secretUsableBy } from "../../reconcile/references.ts";
import { DEFAULT_LIFETIMES, type InstallTrust } from "./trust.ts";

export interface TlsSpecInput {
  secretName?: string;
  issuerRef?: { name: string; kind: string; group: string };
  dnsNames?: string[];
}

export interface TlsOutcome {
  /** The Secret the pods mount. */
  secretName: string;
  blocker?: Blocker;
  waiting?: Blocker;
  applied: string[];
  /** Events worth recording. */
  events: (({ type: "Normal"; reason: NoteReason } | { type: "Warning"; reason: string }) & { message: string })[];
  requeueAfterMs?: number;
}

export const NOT_AFTER = "ifp.dev/not-after";
export const DNS_NAMES_HASH = "ifp.dev/dns-names-hash";
/** The SHA-256 fingerprint of the install CA that issued the certificate. */
export const ISSUER = "ifp.dev/issuer";
/** Default serving certificates are re-issued this long before they expire (unless the operator is told otherwise). */
export const RENEW_BEFORE_MS = DEFAULT_LIFETIMES.certRenewBeforeMs;
const MAX_TIMER_MS = 24 * 3600_000;

/** Pure: the cert-manager Certificate for a runtime's Service names and public host. */
export function desiredCertificate(
  owner: Owner,
  issuerRef: NonNullable<TlsSpecInput["issuerRef"]>,
  dnsNames: string[],
): KubernetesObject {
  const n = childNames(owner.metadata.name);
  return {
    apiVersion: "cert-manager.io/v1",
    kind: "Certificate",
    metadata: childMeta(owner, n.certificate),
    spec: {
      secretName: n.tlsSecret,
      commonName: dnsNames[2] ?? dnsNames[0],
      dnsNames,
      issuerRef: { name: issuerRef.name, kind: issuerRef.kind, group: issuerRef.group },
      privateKey: { algorithm: "ECDSA", size: 256, rotationPolicy: "Always" },
      // The Secret carries our labels so that the operator's informer sees it.
      secretTemplate: {
        labels: { ...MANAGED_BY, [INSTANCE_LABEL]: owner.metadata.name, [COMPONENT_LABEL]: owner.kind.toLowerCase() },
      },
    },
  } as KubernetesObject;
}

/** The keys of a TLS Secret the operator only checks are there (selfSignedAction, userTls). */
const CHECKED_ONLY = ["tls.crt", "tls.key", "ca.crt"] as const;

/**
 * The cache's form of a Secret (in place): a `kubernetes.io/tls` Secret's certificate, private
 * key and CA as their digests. What the operator reads of its own certificates is in their
 * annotations (expiry, issuer, names); of the PEM it only checks that it is there. So the
 * operator's memory keeps no runtime's serving key, and a certificate costs 51 characters, not a
 * kilobyte. A reader that needs the PEM reads the Secret from the API server.
 */
export function holdTlsValues(secret: V1Secret): void {
  if (secret.type !== "kubernetes.io/tls" || !secret.data) return;
  for (const k of CHECKED_ONLY) {
    const v = secret.data[k];
    if (long(v)) secret.data[k] = digestOf(v);
  }
}

/**
 * Pure: what a default certificate's Secret needs now: created, re-issued (close to expiry, names
 * changed, or issued by another CA than the install's signing CA), or kept until `renewAt`.
 */
export function selfSignedAction(
  secret: V1Secret | undefined,
  dnsNames: string[],
  now: number,
  issuer?: string,
  renewBeforeMs = RENEW_BEFORE_MS,
): { action: "create" | "renew" | "keep"; renewAt?: number } {
  if (!secret) return { action: "create" };
  const notAfter = Date.parse(secret.metadata?.annotations?.[NOT_AFTER] ?? "");
  if (!Number.isFinite(notAfter) || !secret.data?.["tls.crt"] || !secret.data?.["tls.key"]) return { action: "renew" };
  if (secret.metadata?.annotations?.[DNS_NAMES_HASH] !== hashOf(dnsNames)) return { action: "renew" };
  if (issuer !== undefined && secret.metadata?.annotations?.[ISSUER] !== issuer) return { action: "renew" };
  const renewAt = notAfter - renewBeforeMs;
  return renewAt <= now ? { action: "renew" } : { action: "keep", renewAt };
}

/** The certificate's Ready condition, as cert-manager reports it. */
export function certificateWaiting(cert: KubernetesObject | undefined): Blocker | undefined {
  const conditions = (
    cert as
      | { status?: { conditions?: { type: string; status: string; reason?: string; message?: string }[] } }
      | undefined
  )?.status?.conditions;
  const ready = conditions?.find((c) => c.type === "Ready");
  if (ready?.status === "True") return undefined;
  return {
    reason: "CertificateNotReady",
    message: ready?.message
      ? `Certificate: ${ready.message}`
      : "cert-manager has not issued the serving certificate yet",
  };
}

/**
 * The serving certificate of a runtime: the user's Secret (spec.tls.secretName), a cert-manager
 * Certificate (spec.tls.issuerRef, else the install's issuer), or one the install CA issues.
 */
export async function ensureTls(
  kube: Kube,
  caches: Caches,
  trust: InstallTrust,
  owner: Owner,
  tls: TlsSpecInput | undefined,
  dnsNames: string[],
  now = Date.now(),
): Promise<TlsOutcome> {
  if (tls?.secretName) return userTlsSecret(kube, owner, tls.secretName);
  // The resource's own issuer, else the install's (cert-manager mode), else the install CA.
  const issuerRef = tls?.issuerRef ?? trust.certManager.issuerRef;
  if (issuerRef) return certManagerTls(kube, caches, owner, issuerRef, !!tls?.issuerRef, dnsNames);
  return installCaTls(kube, caches, trust, owner, dnsNames, now);
}

/** spec.tls.secretName: used as it is once it exists, may be used by this resource and holds a key pair. */
async function userTlsSecret(kube: Kube, owner: Owner, secretName: string): Promise<TlsOutcome> {
  const ns = owner.metadata.namespace;
  // A user's Secret is not labelled, so not cached: read it (reads are cheap, writes are not).
  const secret = await kube.read<V1Secret>("v1", "Secret", ns, secretName);
  const base = { secretName, applied: [], events: [] };
  if (!secret)
    return {
      ...base,
      blocker: {
        reason: "TLSSecretMissing",
        message: `Secret ${secretName} named in spec.tls.secretName does not exist in namespace ${ns}`,
      },
      requeueAfterMs: 30_000,
    };
  const refusal = secretUsableBy(secret, owner, "spec.tls.secretName");
  if (refusal) return { ...base, blocker: refusal, requeueAfterMs: 30_000 };
  if (!secret.data?.["tls.crt"] || !secret.data?.["tls.key"]) {
    return {
      ...base,
      blocker: { reason: "InvalidTLSSecret", message: `Secret ${secretName} has no tls.crt and tls.key` },
      requeueAfterMs: 30_000,
    };
  }
  return base;
}

/** A cert-manager Certificate into `<name>-tls`; waiting until cert-manager says it is Ready. */
async function certManagerTls(
  kube: Kube,
  caches: Caches,
  owner: Owner,
  issuerRef: NonNullable<TlsSpecInput["issuerRef"]>,
  own: boolean,
  dnsNames: string[],
): Promise<TlsOutcome> {
  const ns = owner.metadata.namespace;
  const n = childNames(owner.metadata.name);
  const base = { secretName: n.tlsSecret, applied: [] as string[], events: [] as TlsOutcome["events"] };
  if (!(await kube.serves("cert-manager.io", "v1", "certificates", ns))) {
    const who = own ? "spec.tls.issuerRef" : "the install's trust.certManager.issuerRef (--cert-manager-issuer)";
    return {
      ...base,
      blocker: {
        reason: "CertManagerMissing",
        message: `${who} needs cert-manager, but the API server does not serve cert-manager.io/v1 Certificate; install cert-manager or use spec.tls.secretName`,
      },
      requeueAfterMs: 60_000,
    };
  }
  const want = desiredCertificate(owner, issuerRef, dnsNames);
  const applied = await applyChildren(kube, caches, owner, [want]);
  const live = await kube.read(want.apiVersion!, want.kind!, ns, n.certificate);
  const waiting = certificateWaiting(live);
  return { ...base, applied, waiting, requeueAfterMs: waiting ? 15_000 : undefined };
}

/** A certificate of the install CA for the resource's names, in a Secret the operator owns, renewed before it ends. */
async function installCaTls(
  kube: Kube,
  caches: Caches,
  trust: InstallTrust,
  owner: Owner,
  dnsNames: string[],
  now: number,
): Promise<TlsOutcome> {
  const ns = owner.metadata.namespace;
  const n = childNames(owner.metadata.name);
  const secret =
    caches.get<V1Secret>("Secret", ns, n.tlsSecret) ?? (await kube.read<V1Secret>("v1", "Secret", ns, n.tlsSecret));
  if (secret && !(controlledBy(secret, owner.metadata.uid) && markedFor(secret, trust.marks(), owner.metadata.uid))) {
    throw new ChildConflictError(
      `Secret ${n.tlsSecret} already exists and was not made by the operator for this ${owner.kind}; delete or rename it, or name it in spec.tls.secretName`,
    );
  }
  const issuer = trust.signerId();
  const step = installCaStep(trust, issuer, secret, dnsNames, now);
  const issued =
    step.action === "keep"
      ? { applied: [], events: [] }
      : await issueInto(kube, trust, owner, secret, { dnsNames, issuer, action: step.action });
  const renewIn = step.renewAt ? Math.max(1000, Math.min(step.renewAt - now, MAX_TIMER_MS)) : MAX_TIMER_MS;
  return { secretName: n.tlsSecret, ...issued, requeueAfterMs: renewIn };
}

/**
 * What to do with the install CA's certificate. One already valid to the end of its CA cannot be
 * renewed further by that CA (even once that CA has expired): it is kept rather than re-issued on
 * every pass, and looked at again shortly — the rotation loop makes the next CA the signer (it is
 * published long before).
 */
function installCaStep(
  trust: InstallTrust,
  issuer: string,
  secret: V1Secret | undefined,
  dnsNames: string[],
  now: number,
) {
  const step = selfSignedAction(secret, dnsNames, now, issuer, trust.lifetimes.certRenewBeforeMs);
  const leafEnd = Date.parse(secret?.metadata?.annotations?.[NOT_AFTER] ?? "");
  if (
    step.action === "renew" &&
    secret?.metadata?.annotations?.[ISSUER] === issuer &&
    secret?.metadata?.annotations?.[DNS_NAMES_HASH] === hashOf(dnsNames)
  ) {
    const caEnd = validity(trust.signer().cert).notAfter.getTime();
    if (Number.isFinite(leafEnd) && leafEnd >= caEnd - 1000) return { action: "keep" as const, renewAt: now + 2_000 };
  }
  return step;
}

/** Issue a certificate of the install CA into the resource's TLS Secret: created, or replaced to renew it. */
async function issueInto(
  kube: Kube,
  trust: InstallTrust,
  owner: Owner,
  secret: V1Secret | undefined,
  { dnsNames, issuer, action }: { dnsNames: string[]; issuer: string; action: "create" | "renew" },
): Promise<Pick<TlsOutcome, "applied" | "events">> {
  const n = childNames(owner.metadata.name);
  const ca = trust.signer();
  const leaf = await ca.issue({
    commonName: dnsNames[2] ?? dnsNames[0]!,
    dnsNames,
    validityMs: trust.lifetimes.certValidityMs,
  });
  const notAfter = isoSeconds(leaf.notAfter);
  const body: V1Secret = {
    apiVersion: "v1",
    kind: "Secret",
    type: "kubernetes.io/tls",
    metadata: childMeta(owner, n.tlsSecret, {
      annotations: {
        "ifp.dev/issued-by": "install-ca",
        [ISSUER]: issuer,
        [NOT_AFTER]: notAfter,
        [DNS_NAMES_HASH]: hashOf(dnsNames),
        ...ownedMark(trust.marks(), owner.metadata.namespace, n.tlsSecret, owner.metadata.uid),
      },
    }),
    data: {
      "tls.crt": Buffer.from(leaf.cert).toString("base64"),
      "tls.key": Buffer.from(leaf.key).toString("base64"),
      "ca.crt": Buffer.from(ca.cert).toString("base64"),
    },
  };
  if (action === "create") {
    if (!(await kube.createIfAbsent(body))) return { applied: [], events: [] };
    return {
      applied: [`Secret/${n.tlsSecret}`],
      events: [
        {
          type: "Normal",
          reason: "IssuedCertificate",
          message: `issued a serving certificate of the install CA into Secret ${n.tlsSecret}, valid until ${notAfter}`,
        },
      ],
    };
  }
  body.metadata!.resourceVersion = secret!.metadata?.resourceVersion;
  await kube.replace(body);
  return {
    applied: [`Secret/${n.tlsSecret}`],
    events: [
      {
        type: "Normal",
        reason: "RenewedCertificate",
        message: `re-issued the serving certificate (install CA) in Secret ${n.tlsSecret}, valid until ${notAfter}`,
      },
    ],
  };
}
