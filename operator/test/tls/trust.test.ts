// One trust domain per install, on a real control plane: the install CA kept in a Secret of the
// operator's namespace, the serving certificates it issues, the trust bundle of every Agent and
// Relay (install CAs, the chart's extra CAs, spec.tls.trust), the CA's rotation with its
// overlap, driven in seconds, and the cert-manager mode (an install-wide issuer and bundle).
import { X509Certificate } from "node:crypto";
import { once } from "node:events";
import { createServer } from "node:https";
import { connect } from "node:tls";
import { KubeConfig } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startControlPlane, type ControlPlane } from "../../../e2e/support/controlplane.ts";
import { createCA, fingerprint, type CertificateAuthority } from "../../src/concerns/tls/certs.ts";
import { ISSUER } from "../../src/concerns/tls/tls.ts";
import { InstallTrust } from "../../src/concerns/tls/trust.ts";
import { Kube } from "../../src/kube/client.ts";
import { startManager, type ManagerOptions, type RunningManager } from "../../src/commands/manager.ts";
import { CERTIFICATE_CRD, capturedLog, getOrAbsent, perTest, until } from "../support/helpers.ts";

let cp: ControlPlane;
let manager: RunningManager | undefined;
let extra: CertificateAuthority;
let corp: CertificateAuthority;
const NS = "ifp-trust";
const SYSTEM = "ifp-system";
const CA_SECRET = "ifp-test-ca";
const operatorLog = capturedLog(600);
const CM = "ifp-cm";
// The Relays' public host is their namespaces', as chart value allowedHosts would allow it.
const settings = {
  runtimeImage: "ghcr.io/ifp-dev/ifp-runtime:test",
  runtimeImagePullPolicy: "IfNotPresent",
  natsUrl: "nats://nats.test:4222",
  allowedHosts: { [NS]: ["hub.example"], [CM]: ["hub.example"] },
};

const start = async (extraOpts: Partial<ManagerOptions> = {}) => {
  const m = await startManager({
    kubeconfig: cp.kubeconfig,
    settings,
    watchNamespaces: [NS],
    resyncMs: 2_000,
    trust: { namespace: SYSTEM, secretName: CA_SECRET, extraCas: extra.cert },
    log: operatorLog.log,
    ...extraOpts,
  });
  await m.started;
  return m;
};

const get = (ns: string, kind: string, name: string) => getOrAbsent(cp, ["-n", ns, "get", kind, name]);
const condition = (obj: any, type: string) => obj?.status?.conditions?.find((c: any) => c.type === type);
const untilReason = (ns: string, kind: string, name: string, reason: string, timeoutMs = 30_000) =>
  until(
    `${kind}/${name} Ready reason ${reason}`,
    () => {
      const o = get(ns, kind, name);
      return condition(o, "Ready")?.reason === reason ? o : undefined;
    },
    timeoutMs,
  );
const decode = (b64: string) => Buffer.from(b64, "base64").toString("utf8");
const installCa = () => decode(get(SYSTEM, "secret", CA_SECRET).data["ca.crt"]);
const bundleOf = (ns: string, name: string) =>
  get(ns, "configmap", `${name}-trust`)?.data?.["ca.crt"] as string | undefined;
/** An object with its managed fields, which say when it was written. */
const written = (ns: string, kind: string, name: string) =>
  getOrAbsent(cp, ["-n", ns, "get", kind, name, "--show-managed-fields"]);
/** When an object was last written: its managed fields' latest time (the API server's, to the second). */
const writtenAt = (obj: any): number =>
  Math.max(
    ...(obj?.metadata?.managedFields ?? [])
      .map((f: { time?: string }) => Date.parse(f.time ?? ""))
      .filter(Number.isFinite),
  );
const certsIn = (pem: string | undefined) =>
  pem?.match(/-----BEGIN CERTIFICATE-----[\s\S]*?-----END CERTIFICATE-----\n/g) ?? [];
const agentYaml = (ns: string, name: string, tls = "") => `apiVersion: ifp.dev/v1alpha1
kind: Agent
metadata: {name: ${name}, namespace: ${ns}}
spec:
  agentId: ${name}-id
${tls}`;
const poke = (ns: string, kind: string, name: string) =>
  cp.kubectl(["-n", ns, "annotate", "--overwrite", kind, name, `example.com/poke=${Date.now()}`]);

/** A TLS handshake on loopback with the Secret's certificate, verified against `ca` only, for the Service name. */
async function handshake(secret: any, ca: string, servername: string): Promise<void> {
  const server = createServer({ cert: decode(secret.data["tls.crt"]), key: decode(secret.data["tls.key"]) }, (_q, r) =>
    r.end(),
  );
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  try {
    const socket = connect({ host: "127.0.0.1", port: (server.address() as { port: number }).port, servername, ca });
    socket.on("error", () => {});
    try {
      await Promise.race([once(socket, "secureConnect"), once(socket, "error").then(([e]) => Promise.reject(e))]);
    } finally {
      socket.destroy();
    }
  } finally {
    server.close();
  }
}

perTest(() =>
  [
    `operator log (last ${Math.min(150, operatorLog.lines().length)} lines):`,
    ...operatorLog.lines().slice(-150),
    (() => {
      try {
        return cp.kubectl(["get", "agents,relays,configmaps,secrets", "-A"]);
      } catch (err) {
        return (err as Error).message;
      }
    })(),
  ].join("\n"),
);

beforeAll(async () => {
  [cp, extra, corp] = await Promise.all([
    startControlPlane({ crds: ["crds/agents.ifp.dev.yaml", "crds/relays.ifp.dev.yaml"] }),
    createCA("chart extra CA"),
    createCA("corp CA"),
  ]);
  for (const ns of [NS, SYSTEM]) cp.kubectl(["create", "namespace", ns]);
  manager = await start();
}, 300_000);

afterAll(async () => {
  await manager?.stop();
  await cp?.stop();
});

describe("install CA", () => {
  it("is created once in the operator's namespace and kept across restarts", async () => {
    const secret = get(SYSTEM, "secret", CA_SECRET);
    expect(Object.keys(secret.data).sort()).toEqual(["ca.crt", "ca.key", "marks.key"]);
    // The key the operator marks what it generates with, and since when.
    expect(Buffer.from(secret.data["marks.key"], "base64")).toHaveLength(32);
    expect(Date.parse(secret.metadata.annotations["ifp.dev/marks-since"])).toBeLessThanOrEqual(Date.now());
    const cert = new X509Certificate(decode(secret.data["ca.crt"]));
    expect(cert.ca).toBe(true);
    await manager!.stop();
    manager = await start();
    const again = get(SYSTEM, "secret", CA_SECRET);
    expect(again.metadata.resourceVersion).toBe(secret.metadata.resourceVersion);
    expect(manager.trust.signer().cert).toBe(decode(secret.data["ca.crt"]));
  });

  it("is made once when two replicas start at the same time", async () => {
    const kc = new KubeConfig();
    kc.loadFromFile(cp.kubeconfig);
    const replicas = [1, 2].map(
      () =>
        new InstallTrust(new Kube(kc, operatorLog.log), {
          namespace: SYSTEM,
          secretName: "race-ca",
          log: operatorLog.log,
        }),
    );
    await Promise.all(replicas.map((r) => r.ensure()));
    const stored = decode(get(SYSTEM, "secret", "race-ca").data["ca.crt"]);
    expect(replicas.map((r) => r.signer().cert)).toEqual([stored, stored]);
  });

  it("tells its caller of each rotation step, the promotion of the next CA to signer included", async () => {
    const kc = new KubeConfig();
    kc.loadFromFile(cp.kubeconfig);
    const day = 24 * 3600_000;
    const lifetimes = { caValidityMs: 10 * day, caRotateBeforeMs: 4 * day, caOverlapMs: 1 * day };
    const t = new InstallTrust(new Kube(kc, operatorLog.log), {
      namespace: SYSTEM,
      secretName: "steps-ca",
      lifetimes,
      log: operatorLog.log,
    });
    const t0 = Date.now();
    expect(await t.ensure(t0)).toBe(false); // created: nothing to follow yet
    const first = t.signer().cert;
    expect(await t.ensure(t0 + 1000)).toBe(false); // nothing due
    expect(await t.ensure(t0 + 6.5 * day)).toBe(true); // the next CA published
    expect(t.bundleCerts()).toHaveLength(2);
    expect(t.signer().cert).toBe(first);
    // The overlap passed: the next CA signs. The bundle holds the same two CAs, but the
    // certificates must follow the new signer.
    expect(await t.ensure(t0 + 7.6 * day)).toBe(true);
    expect(t.signer().cert).not.toBe(first);
    expect(t.bundleCerts()).toContain(first);
  });

  it("issues every default serving certificate, and publishes a bundle with the install CA, the extra CAs and spec.tls.trust", async () => {
    cp.kubectl(["-n", NS, "create", "configmap", "corp-ca", `--from-literal=ca.crt=${corp.cert}`]);
    cp.kubectl(["apply", "-f", "-"], agentYaml(NS, "alice", "  tls:\n    trust: [{configMapRef: {name: corp-ca}}]\n"));
    cp.kubectl(
      ["apply", "-f", "-"],
      `apiVersion: ifp.dev/v1alpha1\nkind: Relay\nmetadata: {name: hub, namespace: ${NS}}\nspec: {url: "https://hub.example"}\n`,
    );
    const ca = installCa();
    for (const [kind, name] of [
      ["agent", "alice"],
      ["relay", "hub"],
    ] as const) {
      const tls = await until(`${name}-tls`, () => get(NS, "secret", `${name}-tls`));
      expect(tls.metadata.annotations[ISSUER]).toBe(fingerprint(ca));
      const leaf = new X509Certificate(decode(tls.data["tls.crt"]));
      expect(leaf.checkIssued(new X509Certificate(ca))).toBe(true);
      expect(leaf.verify(new X509Certificate(ca).publicKey)).toBe(true);
      const bundle = await until(`${name}-trust`, () => bundleOf(NS, name));
      expect(certsIn(bundle)).toEqual(kind === "agent" ? [ca, extra.cert, corp.cert] : [ca, extra.cert]);
      // A peer that trusts only the bundle accepts the runtime's certificate for its Service name.
      await handshake(tls, bundle, `${name}.${NS}.svc`);
      await expect(handshake(tls, corp.cert, `${name}.${NS}.svc`)).rejects.toThrow(
        /self-signed|unable to (get|verify)/i,
      );
      const dep = await until(`deployment ${name}`, () => get(NS, "deployment", name));
      expect(dep.spec.template.spec.containers[0].args).toContain("--ca-file=/etc/ifp/trust/ca.crt");
      expect(dep.spec.template.spec.volumes).toContainEqual({
        name: "trust",
        configMap: { name: `${name}-trust`, items: [{ key: "ca.crt", path: "ca.crt" }], defaultMode: 420 },
      });
    }
    await untilReason(NS, "agent", "alice", "RuntimeNotReady");
  });

  it("says which spec.tls.trust entry is missing or not labelled for the Agent, and picks it up once it is", {
    timeout: 150_000,
  }, async () => {
    cp.kubectl(
      ["apply", "-f", "-"],
      agentYaml(
        NS,
        "bob",
        "  tls:\n    trust:\n      - {configMapRef: {name: corp-ca}}\n      - {secretRef: {name: bob-partner-ca, key: partner.pem}}\n",
      ),
    );
    const agent = await untilReason(NS, "agent", "bob", "TrustSourceMissing");
    expect(condition(agent, "Ready")).toMatchObject({
      status: "False",
      message: `Secret bob-partner-ca named in spec.tls.trust[1].secretRef does not exist in namespace ${NS}`,
    });
    // The Event follows the status write.
    await until(
      "the TrustSourceMissing Event",
      () =>
        cp
          .json<any>(["-n", NS, "get", "events", "--field-selector", "involvedObject.name=bob"])
          .items.some((e: any) => e.reason === "TrustSourceMissing") || undefined,
    );
    // What can be published is: the runtime keeps trusting the install and the ConfigMap it named.
    expect(certsIn(await until("bob-trust", () => bundleOf(NS, "bob")))).toEqual([installCa(), extra.cert, corp.cert]);
    const partner = await createCA("partner CA");
    cp.kubectl([
      "-n",
      NS,
      "create",
      "secret",
      "generic",
      "bob-partner-ca",
      `--from-literal=partner.pem=${partner.cert}`,
    ]);
    // Not labelled for bob: refused, naming the field and the label that would allow it.
    poke(NS, "agent", "bob");
    const foreign = await untilReason(NS, "agent", "bob", "ForeignSecret", 60_000);
    expect(condition(foreign, "Ready").message).toMatch(
      /^spec.tls.trust\[1\].secretRef: Secret bob-partner-ca .* ifp.dev\/agent=bob/,
    );
    expect(certsIn(bundleOf(NS, "bob"))).toEqual([installCa(), extra.cert, corp.cert]);
    cp.kubectl(["-n", NS, "label", "secret", "bob-partner-ca", "ifp.dev/agent=bob"]);
    // Not watched (the user's object): it is looked at again within 30 seconds.
    await untilReason(NS, "agent", "bob", "RuntimeNotReady", 60_000);
    expect(certsIn(bundleOf(NS, "bob"))).toEqual([installCa(), extra.cert, corp.cert, partner.cert]);
  });

  it("reports a ConfigMap without a usable certificate as InvalidTrust, and goes on with the rest", async () => {
    cp.kubectl([
      "-n",
      NS,
      "create",
      "configmap",
      "carol-ca",
      "--from-literal=ca.crt=-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n",
    ]);
    cp.kubectl(["apply", "-f", "-"], agentYaml(NS, "carol", "  tls:\n    trust: [{configMapRef: {name: carol-ca}}]\n"));
    const agent = await untilReason(NS, "agent", "carol", "InvalidTrust");
    expect(condition(agent, "Ready").message).toBe(
      "ConfigMap carol-ca key ca.crt named in spec.tls.trust[0].configMapRef certificate 1 of 1 is not a valid X.509 certificate",
    );
    expect(certsIn(bundleOf(NS, "carol"))).toEqual([installCa(), extra.cert]);
    // The operator is still at work: another Agent is reconciled, and the fixed source is taken.
    cp.kubectl(["apply", "-f", "-"], agentYaml(NS, "dora"));
    await untilReason(NS, "agent", "dora", "RuntimeNotReady");
    cp.kubectl(
      ["apply", "-f", "-"],
      JSON.stringify({
        apiVersion: "v1",
        kind: "ConfigMap",
        metadata: { name: "carol-ca", namespace: NS },
        data: { "ca.crt": corp.cert },
      }),
    );
    poke(NS, "agent", "carol");
    await untilReason(NS, "agent", "carol", "RuntimeNotReady");
    expect(certsIn(bundleOf(NS, "carol"))).toEqual([installCa(), extra.cert, corp.cert]);
  });

  it("has an entry naming both a ConfigMap and a Secret refused by the API server", () => {
    expect(() =>
      cp.kubectl(
        ["apply", "-f", "-"],
        agentYaml(NS, "erin", "  tls:\n    trust: [{configMapRef: {name: a}, secretRef: {name: b}}]\n"),
      ),
    ).toThrow(/exactly one of configMapRef and secretRef/);
  });
});

describe("install CA rotation", () => {
  // A rotation driven in seconds (CAs of 20 s): the promotion of the next CA must reach the
  // controllers at once (it changes the signer, not the bundle), or the certificate follows only
  // at a later step.
  it("publishes the next CA first, issues from it only after the overlap, and drops the old one once it expired", {
    timeout: 120_000,
  }, async () => {
    const ROT = "ifp-rotation";
    cp.kubectl(["create", "namespace", ROT]);
    // CA valid 20 s; the next one 15 s before that (at ~5 s); issued from after 5 s more; the old
    // one dropped once it expired (at ~20 s).
    const overlapMs = 5_000;
    const rot = await start({
      watchNamespaces: [ROT],
      trust: {
        namespace: SYSTEM,
        secretName: "rotation-ca",
        lifetimes: {
          caValidityMs: 20_000,
          caRotateBeforeMs: 15_000,
          caOverlapMs: overlapMs,
          certValidityMs: 60_000,
          certRenewBeforeMs: 5_000,
        },
      },
    });
    try {
      cp.kubectl(["apply", "-f", "-"], agentYaml(ROT, "rita"));
      const first = await until("rita-tls", () => get(ROT, "secret", "rita-tls"));
      const c1 = fingerprint(decode(get(SYSTEM, "secret", "rotation-ca").data["ca.crt"]));
      expect(first.metadata.annotations[ISSUER]).toBe(c1);
      const published = new Map<string, number>();
      let issuedFromNext: { fp: string; at: number } | undefined;
      let dropped = false;
      // Watch the bundle and the certificate, every observation checked against the rules.
      await until(
        "a rotation: next CA published, issued from, old CA dropped",
        () => {
          const map = written(ROT, "configmap", "rita-trust");
          const bundle = certsIn(map?.data?.["ca.crt"]).map(fingerprint);
          const leaf = written(ROT, "secret", "rita-tls");
          // When the API server stored what was read (whatever the machine's load delays this poll by).
          for (const fp of bundle) if (!published.has(fp)) published.set(fp, writtenAt(map));
          const issuer = leaf.metadata.annotations[ISSUER];
          // The certificate's CA is always in the bundle a peer reads.
          expect(bundle).toContain(issuer);
          if (issuer !== c1 && !issuedFromNext) issuedFromNext = { fp: issuer, at: writtenAt(leaf) };
          if (issuedFromNext && !bundle.includes(c1)) dropped = true;
          return issuedFromNext && dropped;
        },
        90_000,
        200,
      );
      // The next CA was in the bundle for the overlap before a certificate came from it (less the
      // API server's times' rounding to the second).
      expect(issuedFromNext!.at - published.get(issuedFromNext!.fp)!).toBeGreaterThanOrEqual(overlapMs - 1_000);
      const leaf = new X509Certificate(decode(get(ROT, "secret", "rita-tls").data["tls.crt"]));
      const stored = get(SYSTEM, "secret", "rotation-ca");
      const chain = ["ca.crt", "next.crt", "previous.crt"]
        .filter((k) => stored.data[k])
        .map((k) => new X509Certificate(decode(stored.data[k])));
      expect(chain.some((ca) => leaf.checkIssued(ca) && leaf.verify(ca.publicKey))).toBe(true);
    } finally {
      await rot.stop();
    }
  });
});

describe("cert-manager mode", () => {
  // cert-manager's Certificate API is its CRD alone (nothing issues here), and the bundle ConfigMap
  // is made by the test where trust-manager would write it.
  it("asks the install's issuer for every certificate a resource names none for, and adds the bundle ConfigMap to every trust bundle", {
    timeout: 120_000,
  }, async () => {
    cp.kubectl(["create", "namespace", CM]);
    cp.kubectl(["apply", "-f", "-"], CERTIFICATE_CRD);
    await until("the Certificate CRD established", () =>
      getOrAbsent(cp, ["get", "crd", "certificates.cert-manager.io"])?.status?.conditions?.some(
        (c: any) => c.type === "Established" && c.status === "True",
      ),
    );
    const issuerCa = await createCA("cert-manager CA issuer");
    cp.kubectl(["-n", CM, "create", "configmap", "ifp-ca-bundle", `--from-literal=trust-bundle.pem=${issuerCa.cert}`]);
    cp.kubectl(["-n", CM, "create", "configmap", "corp-ca", `--from-literal=ca.crt=${corp.cert}`]);
    const certManager = {
      issuerRef: { name: "ifp-ca", kind: "ClusterIssuer", group: "cert-manager.io" },
      bundle: { configMapName: "ifp-ca-bundle", key: "trust-bundle.pem" },
    };
    const cm = await start({
      watchNamespaces: [CM],
      trust: { namespace: SYSTEM, secretName: "cm-ca", extraCas: extra.cert, certManager },
    });
    try {
      const ca = decode(get(SYSTEM, "secret", "cm-ca").data["ca.crt"]);
      cp.kubectl(["apply", "-f", "-"], agentYaml(CM, "cora"));
      cp.kubectl(
        ["apply", "-f", "-"],
        `apiVersion: ifp.dev/v1alpha1\nkind: Relay\nmetadata: {name: hub, namespace: ${CM}}\nspec: {url: "https://hub.example"}\n`,
      );
      for (const name of ["cora", "hub"]) {
        // No spec.tls: a Certificate of the install's issuer, and no certificate of the install CA.
        const cert = await until(`Certificate ${name}-tls`, () =>
          get(CM, "certificates.cert-manager.io", `${name}-tls`),
        );
        expect(cert.spec).toMatchObject({ secretName: `${name}-tls`, issuerRef: certManager.issuerRef });
        expect(cert.metadata.ownerReferences[0]).toMatchObject({ name, controller: true });
        expect(get(CM, "secret", `${name}-tls`)).toBeUndefined();
        // The bundle: the install's CAs, the extra CAs, then the bundle ConfigMap's.
        expect(certsIn(await until(`${name}-trust`, () => bundleOf(CM, name)))).toEqual([
          ca,
          extra.cert,
          issuerCa.cert,
        ]);
      }
      const cora = await untilReason(CM, "agent", "cora", "CertificateNotReady");
      expect(cora.status.tlsSecretName).toBe("cora-tls");
      // spec.tls.issuerRef may name the install's issuer though --allowed-issuers does not list it; no other.
      cp.kubectl(
        ["apply", "-f", "-"],
        agentYaml(
          CM,
          "cody",
          "  tls:\n    issuerRef: {name: ifp-ca, kind: ClusterIssuer}\n    trust: [{configMapRef: {name: corp-ca}}]\n",
        ),
      );
      await untilReason(CM, "agent", "cody", "CertificateNotReady");
      expect(certsIn(bundleOf(CM, "cody"))).toEqual([ca, extra.cert, issuerCa.cert, corp.cert]);
      cp.kubectl(
        ["apply", "-f", "-"],
        agentYaml(CM, "otto", "  tls:\n    issuerRef: {name: other-ca, kind: ClusterIssuer}\n"),
      );
      expect(condition(await untilReason(CM, "agent", "otto", "IssuerNotAllowed"), "Ready").message).toMatch(
        /^spec.tls.issuerRef: ClusterIssuer\/other-ca is not among the issuers this install allows \(an Issuer of the resource's namespace, ClusterIssuer\/ifp-ca\)/,
      );
      // Without the bundle ConfigMap the runtime keeps the rest, and the resource says what is missing.
      cp.kubectl(["-n", CM, "delete", "configmap", "ifp-ca-bundle"]);
      cp.kubectl([
        "-n",
        CM,
        "patch",
        "certificates.cert-manager.io",
        "cora-tls",
        "--subresource=status",
        "--type=merge",
        "-p",
        JSON.stringify({
          status: { conditions: [{ type: "Ready", status: "True", reason: "Ready", message: "issued" }] },
        }),
      ]);
      poke(CM, "agent", "cora");
      const missing = await untilReason(CM, "agent", "cora", "TrustSourceMissing");
      expect(condition(missing, "Ready").message).toBe(
        `ConfigMap ifp-ca-bundle named in the install's trust.certManager.bundle (--cert-manager-bundle) does not exist in namespace ${CM}`,
      );
      expect(certsIn(bundleOf(CM, "cora"))).toEqual([ca, extra.cert]);
    } finally {
      await cm.stop();
    }
  });
});
