import { describe, expect, it } from "vitest";
import {
  certificateWaiting,
  desiredCertificate,
  DNS_NAMES_HASH,
  holdTlsValues,
  NOT_AFTER,
  selfSignedAction,
} from "./tls.ts";
import { hashOf } from "../../kube/metadata.ts";
import { certificateDnsNames } from "../../reconcile/names.ts";
import type { Owner } from "../../reconcile/settings.ts";

const owner: Owner = { kind: "Agent", metadata: { name: "alice", namespace: "team", uid: "u" } };
const names = certificateDnsNames(owner, "https://alice.example.org/base", ["extra.example"]);
const day = 24 * 3600_000;

describe("TLS", () => {
  it("covers the Service names, the public host and extra names", () => {
    expect(names).toEqual([
      "alice",
      "alice.team",
      "alice.team.svc",
      "alice.team.svc.cluster.local",
      "alice.example.org",
      "extra.example",
    ]);
  });

  it("asks cert-manager for a Certificate whose Secret the operator's informer sees", () => {
    const c = desiredCertificate(owner, { name: "le", kind: "ClusterIssuer", group: "cert-manager.io" }, names) as any;
    expect(c.metadata).toMatchObject({
      name: "alice-tls",
      namespace: "team",
      ownerReferences: [expect.objectContaining({ kind: "Agent", uid: "u", controller: true })],
    });
    expect(c.spec).toMatchObject({
      secretName: "alice-tls",
      commonName: "alice.team.svc",
      dnsNames: names,
      issuerRef: { name: "le", kind: "ClusterIssuer", group: "cert-manager.io" },
    });
    expect(c.spec.secretTemplate.labels).toMatchObject({
      "app.kubernetes.io/managed-by": "ifp-operator",
      "app.kubernetes.io/instance": "alice",
      "app.kubernetes.io/component": "agent",
    });
  });

  it("reads cert-manager's Ready condition", () => {
    expect(certificateWaiting(undefined)).toMatchObject({ reason: "CertificateNotReady" });
    expect(
      certificateWaiting({
        status: { conditions: [{ type: "Ready", status: "False", message: "issuer not found" }] },
      } as never),
    ).toEqual({ reason: "CertificateNotReady", message: "Certificate: issuer not found" });
    expect(
      certificateWaiting({ status: { conditions: [{ type: "Ready", status: "True" }] } } as never),
    ).toBeUndefined();
  });

  it("creates a self-signed certificate once, and renews it 30 days before it expires or when the names change", () => {
    const now = Date.parse("2026-06-01T00:00:00Z");
    const secret = (notAfter: number, dns = names) => ({
      metadata: { annotations: { [NOT_AFTER]: new Date(notAfter).toISOString(), [DNS_NAMES_HASH]: hashOf(dns) } },
      data: { "tls.crt": "x", "tls.key": "y" },
    });
    expect(selfSignedAction(undefined, names, now)).toEqual({ action: "create" });
    expect(selfSignedAction(secret(now + 100 * day), names, now)).toEqual({ action: "keep", renewAt: now + 70 * day });
    expect(selfSignedAction(secret(now + 10 * day), names, now).action).toBe("renew");
    expect(selfSignedAction(secret(now + 100 * day, ["other"]), names, now).action).toBe("renew");
    expect(selfSignedAction({ metadata: {}, data: {} }, names, now).action).toBe("renew");
  });
  it("holds a TLS Secret's PEM in the cache as digests, which the renewal reads as it reads the PEM", () => {
    const now = Date.parse("2026-06-01T00:00:00Z");
    const pem = (label: string, fill: string) =>
      Buffer.from(`-----BEGIN ${label}-----\n${fill.repeat(200)}\n-----END ${label}-----\n`).toString("base64");
    const full = {
      type: "kubernetes.io/tls",
      metadata: {
        annotations: { [NOT_AFTER]: new Date(now + 100 * day).toISOString(), [DNS_NAMES_HASH]: hashOf(names) },
      },
      data: {
        "tls.crt": pem("CERTIFICATE", "A"),
        "tls.key": pem("PRIVATE KEY", "B"),
        "ca.crt": pem("CERTIFICATE", "C"),
      },
    };
    const held = structuredClone(full);
    holdTlsValues(held);
    expect(Object.values(held.data).every((v) => /^sha256:[\w-]{43}$/.test(v))).toBe(true);
    expect(JSON.stringify(held)).not.toContain(full.data["tls.key"].slice(0, 40));
    expect(selfSignedAction(held, names, now)).toEqual(selfSignedAction(full, names, now));
    expect(selfSignedAction(held, names, now).action).toBe("keep");
    // Held again: the same.
    const again = structuredClone(held);
    holdTlsValues(again);
    expect(again).toEqual(held);
    // Another type of Secret, and one without its PEM, stay as they are.
    const opaque = { ...structuredClone(full), type: "Opaque" };
    holdTlsValues(opaque);
    expect(opaque.data).toEqual(full.data);
    const empty = { type: "kubernetes.io/tls", metadata: {}, data: { "tls.crt": "", "tls.key": "" } };
    holdTlsValues(empty);
    expect(selfSignedAction(empty, names, now).action).toBe("renew");
  });
});
