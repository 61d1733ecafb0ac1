import { X509Certificate } from "node:crypto";
import { describe, expect, it } from "vitest";
import { CERTIFICATE_CRD, getOrAbsent, kubectlOrError, until } from "../support/helpers.ts";

import {
  NS,
  agentYaml,
  condition,
  events,
  get,
  json,
  cp,
  poke,
  tmpFile,
  untilReason,
  useOperator,
} from "../support/operator.ts";

useOperator();

describe("Agent", () => {
  it("mounts the TLS Secret the spec names, and says so while it is missing", async () => {
    cp.kubectl(["apply", "-f", "-"], agentYaml("dave", "  tls: {secretName: dave-own-tls}\n"));
    const agent = await untilReason("agent", "dave", "TLSSecretMissing");
    expect(condition(agent, "Ready").message).toBe(
      `Secret dave-own-tls named in spec.tls.secretName does not exist in namespace ${NS}`,
    );
    expect(condition(agent, "Stalled")).toMatchObject({ status: "True", reason: "TLSSecretMissing" });
    const { cert, key } = await (await import("../../src/concerns/tls/certs.ts")).selfSignedServing("dave", ["dave"]);
    cp.kubectl([
      "-n",
      NS,
      "create",
      "secret",
      "tls",
      "dave-own-tls",
      `--cert=${await tmpFile("tls.crt", cert)}`,
      `--key=${await tmpFile("tls.key", key)}`,
    ]);
    poke("agent", "dave"); // a change brings a pass at once
    // Not labelled for dave: refused until its owner labels it.
    const foreign = await untilReason("agent", "dave", "ForeignSecret");
    expect(condition(foreign, "Ready").message).toMatch(
      /^spec.tls.secretName: Secret dave-own-tls .* ifp.dev\/agent=dave/,
    );
    expect(get("deployment", "dave")).toBeUndefined();
    cp.kubectl(["-n", NS, "label", "secret", "dave-own-tls", "ifp.dev/agent=dave"]);
    poke("agent", "dave");
    const ready = await untilReason("agent", "dave", "RuntimeNotReady");
    expect(ready.status.tlsSecretName).toBe("dave-own-tls");
    expect(
      get("deployment", "dave").spec.template.spec.volumes.find((v: any) => v.name === "tls").secret.secretName,
    ).toBe("dave-own-tls");
    expect(get("secret", "dave-tls")).toBeUndefined();
  });

  it("asks cert-manager for the certificate when spec.tls.issuerRef is set, once its API exists", {
    timeout: 150_000,
  }, async () => {
    cp.kubectl(
      ["apply", "-f", "-"],
      agentYaml(
        "erin",
        "  baseUrl: https://erin.example.org\n  tls: {issuerRef: {name: letsencrypt, kind: ClusterIssuer}}\n",
      ),
    );
    const missing = await untilReason("agent", "erin", "CertManagerMissing");
    expect(condition(missing, "Ready").message).toMatch(/install cert-manager or use spec.tls.secretName/);
    expect(condition(missing, "Stalled")).toMatchObject({ status: "True" });
    // cert-manager's API (its CRD only: nothing issues here) appears later.
    cp.kubectl(["apply", "-f", "-"], CERTIFICATE_CRD);
    await until("the Certificate CRD established", () =>
      getOrAbsent(cp, ["get", "crd", "certificates.cert-manager.io"])?.status?.conditions?.some(
        (c: any) => c.type === "Established" && c.status === "True",
      ),
    );
    poke("agent", "erin");
    const waiting = await untilReason("agent", "erin", "CertificateNotReady");
    expect(condition(waiting, "Reconciling")).toMatchObject({ status: "True" });
    const cert = json(["-n", NS, "get", "certificates.cert-manager.io", "erin-tls"]);
    expect(cert.metadata.ownerReferences[0]).toMatchObject({ kind: "Agent", name: "erin", controller: true });
    expect(cert.spec).toMatchObject({
      secretName: "erin-tls",
      issuerRef: { name: "letsencrypt", kind: "ClusterIssuer", group: "cert-manager.io" },
    });
    expect(cert.spec.dnsNames).toEqual([
      "erin",
      `erin.${NS}`,
      `erin.${NS}.svc`,
      `erin.${NS}.svc.cluster.local`,
      "erin.example.org",
    ]);
    expect(
      get("deployment", "erin").spec.template.spec.volumes.find((v: any) => v.name === "tls").secret.secretName,
    ).toBe("erin-tls");
    cp.kubectl([
      "-n",
      NS,
      "patch",
      "certificates.cert-manager.io",
      "erin-tls",
      "--subresource=status",
      "--type=merge",
      "-p",
      JSON.stringify({
        status: { conditions: [{ type: "Ready", status: "True", reason: "Ready", message: "issued" }] },
      }),
    ]);
    // The operator looks at a Certificate being issued every 15 s.
    await untilReason("agent", "erin", "RuntimeNotReady", "Ready", 40_000);
  });

  it("issues no certificate for a name that is not the Agent's own or allowed, nor from an issuer the install does not allow", async () => {
    // The API server's own name, which every runtime would believe from a certificate of the install CA.
    cp.kubectl(["apply", "-f", "-"], agentYaml("mitm", "  tls: {dnsNames: [kubernetes.default.svc]}\n"));
    const refused = await untilReason("agent", "mitm", "DNSNameNotAllowed");
    expect(condition(refused, "Ready").message).toMatch(
      /^spec.tls.dnsNames: kubernetes.default.svc is neither a name of this resource's Services \(mitm, mitm\.[^)]*\) nor allowed for namespace ifp-test \(\*\.agents\.example\.net, erin.example.org, \*\.relays\.example\)/,
    );
    expect(condition(refused, "Stalled")).toMatchObject({ status: "True", reason: "DNSNameNotAllowed" });
    await until("the Warning/DNSNameNotAllowed Event", () =>
      events("mitm").some((e) => `${e.type}/${e.reason}` === "Warning/DNSNameNotAllowed"),
    );
    expect(get("secret", "mitm-tls")).toBeUndefined();
    expect(get("secret", "mitm-signing")).toBeUndefined();
    expect(get("deployment", "mitm")).toBeUndefined();
    // An unlisted ClusterIssuer: refused before any Certificate is asked for.
    cp.kubectl(
      ["apply", "-f", "-"],
      agentYaml("mitm", "  tls: {issuerRef: {name: internal-ca, kind: ClusterIssuer}}\n"),
    );
    const issuer = await untilReason("agent", "mitm", "IssuerNotAllowed");
    expect(condition(issuer, "Ready").message).toMatch(
      /^spec.tls.issuerRef: ClusterIssuer\/internal-ca is not among the issuers this install allows \(an Issuer of the resource's namespace, ClusterIssuer\/letsencrypt\)/,
    );
    // (cert-manager's API may not be served yet in this run: then there is nothing to find either.)
    const cert = kubectlOrError(cp, [
      "-n",
      NS,
      "get",
      "--ignore-not-found",
      "-o",
      "name",
      "certificates.cert-manager.io/mitm-tls",
    ]);
    expect(cert.trim() === "" || /doesn't have a resource type/.test(cert), cert).toBe(true);
    // A name under an allowed domain: issued and rendered.
    cp.kubectl(["apply", "-f", "-"], agentYaml("mitm", "  tls: {dnsNames: [mitm.agents.example.net]}\n"));
    await untilReason("agent", "mitm", "RuntimeNotReady");
    expect(get("secret", "mitm-tls")).toBeDefined();
    expect(get("deployment", "mitm")).toBeDefined();
  });

  it("issues no certificate for the host of spec.baseUrl or an exposure host that is not the Agent's own or allowed", {
    timeout: 120_000,
  }, async () => {
    // The API server's name, another tenant's Service and the installed NATS's, each as a public host.
    const attempts = [
      ["  baseUrl: https://kubernetes.default.svc\n", "spec.baseUrl: kubernetes.default.svc"],
      ["  baseUrl: https://victim.other-team.svc\n", "spec.baseUrl: victim.other-team.svc"],
      ["  expose:\n    ingress: {host: nats.ifp-system.svc}\n", "spec.expose.ingress.host: nats.ifp-system.svc"],
      [
        "  expose:\n    gateway: {parentRefs: [{name: gw}], hostname: kubernetes.default.svc, mode: passthrough}\n",
        "spec.expose.gateway.hostname: kubernetes.default.svc",
      ],
    ] as const;
    for (const [extra, named] of attempts) {
      cp.kubectl(["apply", "-f", "-"], agentYaml("hostile", extra));
      const refused = await until(`hostile refused for ${named}`, () => {
        const a = get("agent", "hostile");
        return condition(a, "Ready")?.reason === "DNSNameNotAllowed" && condition(a, "Ready").message.startsWith(named)
          ? a
          : undefined;
      });
      expect(condition(refused, "Ready").message).toMatch(
        /nor allowed for namespace ifp-test .*--allowed-hosts ifp-test\/.* \(chart value allowedHosts: \{ifp-test: \[.*\]\}\) or --allowed-dns-names/,
      );
      expect(condition(refused, "Stalled")).toMatchObject({ status: "True", reason: "DNSNameNotAllowed" });
      expect(get("secret", "hostile-tls")).toBeUndefined();
      expect(get("deployment", "hostile")).toBeUndefined();
    }
    await until("the Warning/DNSNameNotAllowed Event", () =>
      events("hostile").some((e) => `${e.type}/${e.reason}` === "Warning/DNSNameNotAllowed"),
    );
    // Its own Service's name as the public host, and a host the install allows its namespace: issued for it.
    cp.kubectl(["apply", "-f", "-"], agentYaml("hostile", `  baseUrl: https://hostile.${NS}.svc\n`));
    await untilReason("agent", "hostile", "RuntimeNotReady");
    cp.kubectl(["apply", "-f", "-"], agentYaml("hostile", "  baseUrl: https://erin.example.org\n"));
    const cert = await until("a certificate naming erin.example.org", () => {
      const tls = get("secret", "hostile-tls");
      return tls &&
        new X509Certificate(Buffer.from(tls.data["tls.crt"], "base64")).subjectAltName?.includes("DNS:erin.example.org")
        ? tls
        : undefined;
    });
    expect(cert).toBeDefined();
  });
});
