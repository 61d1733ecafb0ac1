import { beforeAll, describe, expect, it } from "vitest";
import { createCA, validity, type CertificateAuthority } from "./certs.ts";
import { desiredAgentChildren } from "../../kinds/agent/desired.ts";
import { certificateDnsNames } from "../../reconcile/names.ts";
import type { Owner } from "../../reconcile/settings.ts";
import { selfSignedAction, DNS_NAMES_HASH, ISSUER, NOT_AFTER } from "./tls.ts";
import { hashOf } from "../../kube/metadata.ts";
import { Agent } from "../../../../runtime/src/resources/agent.ts";
import {
  CA_KEYS,
  caRotationStep,
  caSecret,
  caStateOf,
  checkLifetimes,
  DEFAULT_LIFETIMES,
  desiredTrustBundle,
  installCaCerts,
  joinBundle,
  MAX_TRUST_SOURCE_BYTES,
  MARKS_SINCE,
  NEXT_PUBLISHED,
  trustFromSource,
  type CaState,
} from "./trust.ts";

const owner: Owner = { kind: "Agent", metadata: { name: "alice", namespace: "team", uid: "u" } };
const S = 1000;
const l = {
  caValidityMs: 100 * S,
  caRotateBeforeMs: 40 * S,
  caOverlapMs: 10 * S,
  certValidityMs: 50 * S,
  certRenewBeforeMs: 5 * S,
};
let c1: CertificateAuthority, c2: CertificateAuthority, other: CertificateAuthority, long: CertificateAuthority;
const pemOf = (ca: CertificateAuthority) => ({ cert: ca.cert, key: ca.key });
const end = (ca: CertificateAuthority) => validity(ca.cert).notAfter.getTime();

beforeAll(async () => {
  [c1, c2, other, long] = await Promise.all([
    createCA("c1", 100 * S),
    createCA("c2", 100 * S),
    createCA("other"),
    createCA("long", 200 * S),
  ]);
});

describe("install CA rotation", () => {
  it("creates a CA when there is none", () => {
    expect(caRotationStep(undefined, Date.now(), l)).toEqual({ action: "create" });
  });

  it.each([
    { name: "keeps a young CA until the rotation lead", at: -50, state: () => ({ current: pemOf(c1) }), want: "keep" },
    {
      name: "publishes a next CA at the rotation lead",
      at: -40,
      state: () => ({ current: pemOf(c1) }),
      want: "add-next",
    },
    {
      name: "keeps the next CA published through the overlap",
      at: -35,
      state: () => ({ current: pemOf(c1), next: { ...pemOf(c2), publishedAt: end(c1) - 40 * S } }),
      want: "keep",
    },
    {
      name: "signs with the next CA once the overlap is over",
      at: -30,
      state: () => ({ current: pemOf(c1), next: { ...pemOf(c2), publishedAt: end(c1) - 40 * S } }),
      want: "promote",
    },
    {
      name: "promotes a next CA when the current one expired",
      at: 1,
      state: () => ({ current: pemOf(c1), next: { ...pemOf(c2), publishedAt: end(c1) - 1 * S } }),
      want: "promote",
    },
    {
      name: "starts afresh when the current CA expired with no next",
      at: 1,
      state: () => ({ current: pemOf(c1) }),
      want: "replace",
    },
  ] as { name: string; at: number; state: () => CaState; want: string }[])("$name", ({ at, state, want }) => {
    expect(caRotationStep(state(), end(c1) + at * S, l).action).toBe(want);
  });

  it("drops the previous CA once it expired, and says when to look again", () => {
    const state: CaState = { current: pemOf(long), previous: { cert: c1.cert } };
    expect(caRotationStep(state, end(c1) + S, l).action).toBe("drop-previous");
    expect(caRotationStep(state, end(c1) - 70 * S, l)).toEqual({ action: "keep", nextCheckAt: end(c1) });
    expect(caRotationStep({ current: pemOf(long) }, end(c1) + S, l)).toEqual({
      action: "keep",
      nextCheckAt: end(long) - 40 * S,
    });
  });

  it("keeps its state in a Secret and reads it back; refuses an unusable Secret with a message that names the keys", () => {
    const state: CaState = {
      current: pemOf(c2),
      next: { ...pemOf(other), publishedAt: Date.parse("2026-01-01T00:00:00Z") },
      previous: { cert: c1.cert },
      marks: { key: Buffer.alloc(32, 7).toString("base64"), since: Date.parse("2025-06-01T00:00:00Z") },
    };
    const secret = caSecret("ifp-system", "ifp-ca", state);
    expect(secret.metadata).toMatchObject({
      name: "ifp-ca",
      namespace: "ifp-system",
      annotations: { [NEXT_PUBLISHED]: "2026-01-01T00:00:00.000Z", [MARKS_SINCE]: "2025-06-01T00:00:00.000Z" },
    });
    expect(Object.keys(secret.data!).sort()).toEqual(Object.values(CA_KEYS).sort());
    expect(caStateOf(secret)).toEqual(state);
    expect(installCaCerts(state)).toEqual([c1.cert, c2.cert, other.cert]);
    expect(() => caStateOf({ data: {} })).toThrow(/has no ca.crt and ca.key/);
    expect(() =>
      caStateOf({ data: { "ca.crt": Buffer.from("garbage").toString("base64"), "ca.key": "eA==" } }),
    ).toThrow(/no PEM certificate/);
  });

  it("checks that the lifetimes fit together", () => {
    expect(checkLifetimes(DEFAULT_LIFETIMES)).toBe(DEFAULT_LIFETIMES);
    expect(() => checkLifetimes({ ...l, caOverlapMs: l.caRotateBeforeMs })).toThrow(/--ca-overlap/);
    expect(() => checkLifetimes({ ...l, caRotateBeforeMs: l.caValidityMs })).toThrow(/--ca-rotate-before/);
    expect(() => checkLifetimes({ ...l, certRenewBeforeMs: l.certValidityMs })).toThrow(/--cert-renew-before/);
    expect(() => checkLifetimes({ ...l, certValidityMs: 0 })).toThrow(/positive/);
  });

  it("issues serving certificates that never outlive their CA", async () => {
    const leaf = await c1.issue({ commonName: "alice", dnsNames: ["alice"], validityMs: 1000 * S });
    expect(leaf.notAfter.getTime()).toBe(end(c1));
  });

  it("re-issues a default certificate when the signing CA changed", () => {
    const now = Date.now();
    const names = certificateDnsNames(owner, undefined, undefined);
    const secret = {
      metadata: {
        annotations: {
          [NOT_AFTER]: new Date(now + 100 * S).toISOString(),
          [DNS_NAMES_HASH]: hashOf(names),
          [ISSUER]: "c1",
        },
      },
      data: { "tls.crt": "x", "tls.key": "y" },
    };
    expect(selfSignedAction(secret, names, now, "c1", 5 * S)).toEqual({
      action: "keep",
      renewAt: Date.parse(secret.metadata.annotations[NOT_AFTER]) - 5 * S,
    });
    expect(selfSignedAction(secret, names, now, "c2", 5 * S).action).toBe("renew");
  });
});

describe("trust bundles", () => {
  it("joins sources in order, each certificate once", () => {
    expect(joinBundle([c1.cert, c2.cert], [c1.cert.replace(/\n/g, "\r\n"), other.cert])).toBe(
      c1.cert + c2.cert + other.cert,
    );
  });

  it("publishes <name>-trust, owned by the resource", () => {
    const cm = desiredTrustBundle(owner, c1.cert);
    expect(cm.metadata).toMatchObject({
      name: "alice-trust",
      namespace: "team",
      ownerReferences: [expect.objectContaining({ kind: "Agent", uid: "u", controller: true })],
    });
    expect(cm.data).toEqual({ "ca.crt": c1.cert });
  });

  it("mounts the bundle and passes --ca-file, without rolling the pods when it changes", () => {
    const agent = {
      ...Agent.parse({
        apiVersion: "ifp.dev/v1alpha1",
        kind: "Agent",
        metadata: owner.metadata,
        spec: { agentId: "alice", signing: { keyId: "k" } },
      }),
      metadata: owner.metadata,
    } as any;
    const inputs = {
      settings: { runtimeImage: "i", runtimeImagePullPolicy: "IfNotPresent", natsUrl: "nats://n" },
      signing: { secretName: "s", created: "", publicKey: "p" },
      tlsSecret: "alice-tls",
    };
    const d = desiredAgentChildren(agent, inputs).find((c) => c.kind === "Deployment") as any;
    const pod = d.spec.template.spec;
    expect(pod.containers[0].args).toContain("--ca-file=/etc/ifp/trust/ca.crt");
    expect(pod.containers[0].volumeMounts).toContainEqual({
      name: "trust",
      mountPath: "/etc/ifp/trust",
      readOnly: true,
    });
    // No subPath: the kubelet updates a mounted ConfigMap only without one.
    expect(pod.containers[0].volumeMounts.some((m: any) => m.subPath)).toBe(false);
    expect(pod.volumes).toContainEqual({
      name: "trust",
      configMap: { name: "alice-trust", items: [{ key: "ca.crt", path: "ca.crt" }] },
    });
  });

  const cm = (data: Record<string, string>, binaryData?: Record<string, string>) => ({
    apiVersion: "v1",
    kind: "ConfigMap",
    metadata: { name: "corp" },
    data,
    binaryData,
  });
  const secret = (data: Record<string, string>) => ({
    apiVersion: "v1",
    kind: "Secret",
    metadata: { name: "corp" },
    data,
  });
  const b64 = (s: string) => Buffer.from(s).toString("base64");
  it.each([
    {
      name: "a ConfigMap's key",
      ref: { configMapRef: { name: "corp", key: "ca.crt" } },
      obj: () => cm({ "ca.crt": c1.cert + c2.cert }),
      want: () => ({ certs: [c1.cert, c2.cert] }),
    },
    {
      name: "a ConfigMap's binaryData key",
      ref: { configMapRef: { name: "corp", key: "ca.crt" } },
      obj: () => cm({}, { "ca.crt": b64(c1.cert) }),
      want: () => ({ certs: [c1.cert] }),
    },
    {
      name: "a Secret's key",
      ref: { secretRef: { name: "corp", key: "bundle.pem" } },
      obj: () => secret({ "bundle.pem": b64(`# our CA\n${c2.cert}`) }),
      want: () => ({ certs: [c2.cert] }),
    },
    {
      name: "a missing ConfigMap",
      ref: { configMapRef: { name: "corp", key: "ca.crt" } },
      obj: () => undefined,
      want: () => ({
        blocker: {
          reason: "TrustSourceMissing",
          message: "ConfigMap corp named in spec.tls.trust[2].configMapRef does not exist in namespace team",
        },
      }),
    },
    {
      name: "a missing Secret",
      ref: { secretRef: { name: "corp", key: "ca.crt" } },
      obj: () => undefined,
      want: () => ({
        blocker: {
          reason: "TrustSourceMissing",
          message: "Secret corp named in spec.tls.trust[2].secretRef does not exist in namespace team",
        },
      }),
    },
    {
      name: "a missing key",
      ref: { configMapRef: { name: "corp", key: "ca.crt" } },
      obj: () => cm({ other: c1.cert }),
      want: () => ({
        blocker: {
          reason: "InvalidTrust",
          message: "ConfigMap corp named in spec.tls.trust[2].configMapRef has no key ca.crt",
        },
      }),
    },
    {
      name: "text that is no PEM",
      ref: { configMapRef: { name: "corp", key: "ca.crt" } },
      obj: () => cm({ "ca.crt": "hello; DROP TABLE" }),
      want: () => ({
        blocker: {
          reason: "InvalidTrust",
          message: expect.stringMatching(/spec\.tls\.trust\[2\]\.configMapRef holds no PEM certificate/),
        },
      }),
    },
    {
      name: "a PEM block that is no certificate",
      ref: { configMapRef: { name: "corp", key: "ca.crt" } },
      obj: () => cm({ "ca.crt": `${c1.cert}-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n` }),
      want: () => ({
        blocker: {
          reason: "InvalidTrust",
          message: expect.stringMatching(/certificate 2 of 2 is not a valid X\.509 certificate/),
        },
      }),
    },
    {
      name: "a private key instead of a certificate",
      ref: { secretRef: { name: "corp", key: "ca.crt" } },
      obj: () => secret({ "ca.crt": b64(c1.key) }),
      want: () => ({ blocker: { reason: "InvalidTrust", message: expect.stringMatching(/holds no PEM certificate/) } }),
    },
    {
      name: "a source too large",
      ref: { configMapRef: { name: "corp", key: "ca.crt" } },
      obj: () => cm({ "ca.crt": c1.cert + "x".repeat(MAX_TRUST_SOURCE_BYTES) }),
      want: () => ({ blocker: { reason: "InvalidTrust", message: expect.stringMatching(/larger than/) } }),
    },
  ])("reads $name", ({ ref, obj, want }) => {
    const got = trustFromSource(2, ref as any, obj() as any, "team");
    expect(got).toEqual(want());
    // A message never echoes the source's text.
    if ("blocker" in got) expect(got.blocker.message).not.toMatch(/DROP TABLE|PRIVATE KEY/);
  });
});
