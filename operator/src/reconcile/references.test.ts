import { describe, expect, it } from "vitest";
import { dnsNameRefusal, imageRefusal, issuerEntry, issuerRefusal, requestedHosts, tlsRefusal } from "./references.ts";

const own = ["alice", "alice.team", "alice.team.svc", "alice.team.svc.cluster.local"];
const dns = (names: string[]) => [{ field: "spec.tls.dnsNames", names }];

describe("spec.tls.dnsNames", () => {
  it("may repeat the resource's own Service names, in any case", () => {
    expect(dnsNameRefusal(dns([]), own, "team")).toBeUndefined();
    expect(dnsNameRefusal(dns(["alice.team.svc", "ALICE.team"]), own, "team")).toBeUndefined();
  });

  it("refuses any other name, naming each one, the resource's own, the namespace and the flags", () => {
    const r = dnsNameRefusal(dns(["kubernetes.default.svc", "alice.team.svc", "bob.team.svc"]), own, "team");
    expect(r?.reason).toBe("DNSNameNotAllowed");
    expect(r?.message).toBe(
      "spec.tls.dnsNames: kubernetes.default.svc, bob.team.svc are neither a name of this resource's Services (alice, alice.team, alice.team.svc, alice.team.svc.cluster.local) nor allowed for namespace team; the install CA certifies no other name: the operator's --allowed-hosts team/kubernetes.default.svc (chart value allowedHosts: {team: [kubernetes.default.svc]}) or --allowed-dns-names (chart value allowedDnsNames) allows it",
    );
    expect(dnsNameRefusal(dns(["localhost"]), own, "team")?.message).toMatch(
      /^spec.tls.dnsNames: localhost is neither/,
    );
  });

  it("allows what the install lists: exact names, names under *.<domain> (not the domain itself, nor a look-alike), or *", () => {
    const allow = (allowedDnsNames: string[]) => ({ allowedDnsNames });
    expect(dnsNameRefusal(dns(["localhost"]), own, "team", allow(["localhost"]))).toBeUndefined();
    expect(
      dnsNameRefusal(
        dns(["a.agents.example.com", "b.c.agents.example.com"]),
        own,
        "team",
        allow(["*.agents.example.com"]),
      ),
    ).toBeUndefined();
    expect(dnsNameRefusal(dns(["agents.example.com"]), own, "team", allow(["*.agents.example.com"]))?.reason).toBe(
      "DNSNameNotAllowed",
    );
    expect(dnsNameRefusal(dns(["evilagents.example.com"]), own, "team", allow(["*.agents.example.com"]))?.reason).toBe(
      "DNSNameNotAllowed",
    );
    expect(
      dnsNameRefusal(dns(["x.agents.example.com.evil.net"]), own, "team", allow(["*.agents.example.com"]))?.reason,
    ).toBe("DNSNameNotAllowed");
    expect(dnsNameRefusal(dns(["anything.at.all"]), own, "team", allow(["*"]))).toBeUndefined();
    expect(dnsNameRefusal(dns(["bank.example"]), own, "team", allow(["localhost"]))?.message).toMatch(
      /allowed for namespace team \(localhost\)/,
    );
  });

  it("compares names in one form: case, a trailing dot and IDNA make no other name", () => {
    const allow = { allowedDnsNames: ["*.agents.example.com", "xn--bcher-kva.example"] };
    expect(dnsNameRefusal(dns(["A.Agents.Example.com.", "alice.team.svc."]), own, "team", allow)).toBeUndefined();
    expect(dnsNameRefusal(dns(["bücher.example"]), own, "team", allow)).toBeUndefined();
    expect(dnsNameRefusal(dns(["agents.example.com."]), own, "team", allow)?.reason).toBe("DNSNameNotAllowed");
    expect(dnsNameRefusal(dns(["evil.example."]), own, "team", allow)?.reason).toBe("DNSNameNotAllowed");
  });

  it("allows a namespace's hosts to that namespace only, whatever its name", () => {
    const lists = { allowedHosts: { team: ["shop.example.com", "*.team.example.com"] } };
    expect(dnsNameRefusal(dns(["shop.example.com", "a.team.example.com"]), own, "team", lists)).toBeUndefined();
    expect(dnsNameRefusal(dns(["shop.example.com"]), own, "other", lists)?.message).toMatch(
      /^spec.tls.dnsNames: shop.example.com is neither .* nor allowed for namespace other;/,
    );
    // A namespace named like a property of every object has no entries of its own.
    for (const ns of ["constructor", "toString", "__proto__"])
      expect(dnsNameRefusal(dns(["x.example"]), own, ns, lists)?.reason).toBe("DNSNameNotAllowed");
  });
});

describe("the hosts of spec.baseUrl, spec.url and spec.expose", () => {
  it("are held to the same allow-list as spec.tls.dnsNames, each named by its field", () => {
    const asked = (url: string | undefined, expose?: { ingress?: { host: string }; gateway?: { hostname: string } }) =>
      requestedHosts("spec.baseUrl", url, expose);
    expect(dnsNameRefusal(asked("https://alice.team.svc:8443/x"), own, "team")).toBeUndefined();
    expect(dnsNameRefusal(asked("https://kubernetes.default.svc"), own, "team")?.message).toMatch(
      /^spec.baseUrl: kubernetes.default.svc is neither/,
    );
    expect(dnsNameRefusal(asked("https://bob.team.svc"), own, "team")?.message).toMatch(/^spec.baseUrl: bob.team.svc /);
    expect(dnsNameRefusal(asked("https://KUBERNETES.default.svc."), own, "team")?.reason).toBe("DNSNameNotAllowed");
    expect(
      dnsNameRefusal(asked(undefined, { ingress: { host: "nats.ifp-system.svc" } }), own, "team")?.message,
    ).toMatch(/^spec.expose.ingress.host: nats.ifp-system.svc /);
    expect(
      dnsNameRefusal(asked(undefined, { gateway: { hostname: "api.example.com" } }), own, "team")?.message,
    ).toMatch(/^spec.expose.gateway.hostname: api.example.com /);
    expect(
      dnsNameRefusal(asked("https://shop.example.com", { ingress: { host: "shop.example.com" } }), own, "team", {
        allowedHosts: { team: ["shop.example.com"] },
      }),
    ).toBeUndefined();
    expect(
      dnsNameRefusal(asked("https://shop.example.com"), own, "team", { allowedDnsNames: ["*.example.com"] }),
    ).toBeUndefined();
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
      message:
        "spec.tls.issuerRef: ClusterIssuer/letsencrypt is not among the issuers this install allows (an Issuer of the resource's namespace); the operator's --allowed-issuers (chart value allowedIssuers) lists them",
    });
    expect(issuerRefusal(ref("letsencrypt", "ClusterIssuer"), ["ClusterIssuer/letsencrypt"])).toBeUndefined();
    expect(issuerRefusal(ref("internal", "ClusterIssuer"), ["ClusterIssuer/letsencrypt"])?.message).toMatch(
      /\(an Issuer of the resource's namespace, ClusterIssuer\/letsencrypt\)/,
    );
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
    const names = {
      namespace: "team",
      own,
      requested: requestedHosts("spec.baseUrl", "https://kubernetes.default.svc", undefined),
    };
    const none = { namespace: "team", own, requested: [] };
    expect(
      tlsRefusal(
        { issuerRef: { name: "x", kind: "ClusterIssuer", group: "cert-manager.io" }, dnsNames: ["bank.example"] },
        none,
        {},
      )?.reason,
    ).toBe("IssuerNotAllowed");
    expect(tlsRefusal({ dnsNames: ["bank.example"] }, none, {})?.reason).toBe("DNSNameNotAllowed");
    expect(tlsRefusal({ dnsNames: ["bank.example"] }, none, { allowedDnsNames: ["bank.example"] })).toBeUndefined();
    expect(tlsRefusal({ secretName: "mine", dnsNames: ["bank.example"] }, names, {})).toBeUndefined();
    expect(tlsRefusal(undefined, none, {})).toBeUndefined();
    expect(tlsRefusal(undefined, names, {})?.message).toMatch(/^spec.baseUrl: kubernetes.default.svc /);
  });

  it("leaves images to imageRefusal", () => {
    expect(imageRefusal("registry.example/x:1", { runtimeImage: "r:1" })?.reason).toBe("ImageNotAllowed");
  });
});
