import { describe, expect, it } from "vitest";
import { dnsNameRefusal, imageRefusal, issuerEntry, issuerRefusal, tlsRefusal } from "./references.ts";

const own = ["alice", "alice.team", "alice.team.svc", "alice.team.svc.cluster.local", "alice.example.org"];

describe("spec.tls.dnsNames", () => {
  it("may repeat the resource's own names, in any case", () => {
    expect(dnsNameRefusal(undefined, own)).toBeUndefined();
    expect(dnsNameRefusal(["alice.team.svc", "ALICE.example.org"], own)).toBeUndefined();
  });

  it("refuses any other name, naming each one, the resource's own and the flag", () => {
    const r = dnsNameRefusal(["kubernetes.default.svc", "alice.team.svc", "bob.team.svc"], own);
    expect(r?.reason).toBe("DNSNameNotAllowed");
    expect(r?.message).toBe(
      "spec.tls.dnsNames: kubernetes.default.svc, bob.team.svc are neither a name of this resource (alice, alice.team, alice.team.svc, alice.team.svc.cluster.local, alice.example.org) nor on the install's allow-list; the operator's --allowed-dns-names (chart value allowedDnsNames) lists them",
    );
    expect(dnsNameRefusal(["localhost"], own)?.message).toMatch(/^spec.tls.dnsNames: localhost is neither/);
  });

  it("allows what the install lists: exact names, names under *.<domain> (not the domain itself, nor a look-alike), or *", () => {
    expect(dnsNameRefusal(["localhost"], own, ["localhost"])).toBeUndefined();
    expect(dnsNameRefusal(["a.agents.example.com", "b.c.agents.example.com"], own, ["*.agents.example.com"])).toBeUndefined();
    expect(dnsNameRefusal(["agents.example.com"], own, ["*.agents.example.com"])?.reason).toBe("DNSNameNotAllowed");
    expect(dnsNameRefusal(["evilagents.example.com"], own, ["*.agents.example.com"])?.reason).toBe("DNSNameNotAllowed");
    expect(dnsNameRefusal(["x.agents.example.com.evil.net"], own, ["*.agents.example.com"])?.reason).toBe("DNSNameNotAllowed");
    expect(dnsNameRefusal(["anything.at.all"], own, ["*"])).toBeUndefined();
    expect(dnsNameRefusal(["bank.example"], own, ["localhost"])?.message).toMatch(/allow-list \(localhost\)/);
  });
});

describe("spec.tls.issuerRef", () => {
  const ref = (name: string, kind = "Issuer", group = "cert-manager.io") => ({ name, kind, group });

  it("may name an Issuer of the resource's own namespace", () => {
    expect(issuerRefusal(undefined)).toBeUndefined();
    expect(issuerRefusal(ref("team-ca"))).toBeUndefined();
  });

  it("may name a ClusterIssuer or another group's issuer only from the allow-list, by name or Kind/*", () => {
    expect(issuerRefusal(ref("letsencrypt", "ClusterIssuer"))).toMatchObject({
      reason: "IssuerNotAllowed",
      message: "spec.tls.issuerRef: ClusterIssuer/letsencrypt is not among the issuers this install allows (an Issuer of the resource's namespace); the operator's --allowed-issuers (chart value allowedIssuers) lists them",
    });
    expect(issuerRefusal(ref("letsencrypt", "ClusterIssuer"), ["ClusterIssuer/letsencrypt"])).toBeUndefined();
    expect(issuerRefusal(ref("internal", "ClusterIssuer"), ["ClusterIssuer/letsencrypt"])?.message).toMatch(/\(an Issuer of the resource's namespace, ClusterIssuer\/letsencrypt\)/);
    expect(issuerRefusal(ref("internal", "ClusterIssuer"), ["ClusterIssuer/*"])).toBeUndefined();
    // An Issuer kind of another group is not cert-manager's namespaced Issuer.
    const pca = ref("pca", "Issuer", "awspca.cert-manager.io");
    expect(issuerEntry(pca)).toBe("Issuer.awspca.cert-manager.io/pca");
    expect(issuerRefusal(pca)?.reason).toBe("IssuerNotAllowed");
    expect(issuerRefusal(pca, ["Issuer/*"])?.reason).toBe("IssuerNotAllowed");
    expect(issuerRefusal(pca, ["Issuer.awspca.cert-manager.io/pca"])).toBeUndefined();
  });
});

describe("spec.tls as a whole", () => {
  it("checks the issuer first, then the names, and nothing for a certificate of the user's own", () => {
    expect(tlsRefusal({ issuerRef: { name: "x", kind: "ClusterIssuer", group: "cert-manager.io" }, dnsNames: ["bank.example"] }, own, {})?.reason).toBe("IssuerNotAllowed");
    expect(tlsRefusal({ dnsNames: ["bank.example"] }, own, {})?.reason).toBe("DNSNameNotAllowed");
    expect(tlsRefusal({ dnsNames: ["bank.example"] }, own, { allowedDnsNames: ["bank.example"] })).toBeUndefined();
    expect(tlsRefusal({ secretName: "mine", dnsNames: ["bank.example"] }, own, {})).toBeUndefined();
    expect(tlsRefusal(undefined, own, {})).toBeUndefined();
  });

  it("leaves images to imageRefusal", () => {
    expect(imageRefusal("registry.example/x:1", { runtimeImage: "r:1" })?.reason).toBe("ImageNotAllowed");
  });
});
