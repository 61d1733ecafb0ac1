// The installed NATS behind TLS: the operator issues the server certificate from the install CA
// (a real API server), a real nats-server serves it, the operator and a runtime's connection verify
// it with the install's trust, a client without that trust or without TLS is refused, the
// certificate is renewed when due, and the reloader makes the running server take a renewed file.
import { createConnection } from "node:net";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { X509Certificate } from "node:crypto";
import { connect } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { KubeConfig } from "@kubernetes/client-node";
import { startControlPlane, type ControlPlane } from "../../../e2e/support/controlplane.ts";
import { startNats, startNatsCluster, type NatsServer } from "../../../e2e/support/nats.ts";
import { freePort } from "../../../e2e/support/ports.ts";
import { waitFor } from "../../../e2e/support/wait.ts";
import { releaseDir, tempDir } from "../../../e2e/support/process.ts";
import { Nats } from "../../../runtime/src/nats/connection.ts";
import { createCA, issuedBy } from "../../src/concerns/tls/certs.ts";
import { Kube } from "../../src/kube/client.ts";
import { NatsServerTls } from "../../src/concerns/tls/nats-tls.ts";
import { joinBundle } from "../../src/concerns/tls/trust.ts";
import { startManager, type RunningManager } from "../../src/commands/manager.ts";
import { runReloader } from "../../src/commands/reload-nats.ts";
import { capturedLog, getOrAbsent, perTest, until } from "../support/helpers.ts";

const NS = "natstls";
const SYSTEM = "ifp-system";
const SECRET = "ifp-nats-tls";

describe("the installed NATS behind TLS", () => {
  let cp: ControlPlane;
  let manager: RunningManager;
  let nats: NatsServer;
  let port: number;
  const dir = tempDir("ifp-nats-tls-");
  const tlsDir = join(dir, "tls");
  const operatorLog = capturedLog(400);
  perTest(() =>
    [
      `operator log (last 100 lines):`,
      ...operatorLog.lines().slice(-100),
      "nats-server log:",
      nats?.log().slice(-3000) ?? "",
    ].join("\n"),
  );
  const secretData = () => {
    const s = getOrAbsent(cp, ["-n", SYSTEM, "get", "secret", SECRET]);
    return (
      s &&
      (Object.fromEntries(
        Object.entries(s.data as Record<string, string>).map(([k, v]) => [k, Buffer.from(v, "base64").toString()]),
      ) as Record<string, string>)
    );
  };
  const writeTlsFiles = (data: Record<string, string>) => {
    mkdirSync(tlsDir, { recursive: true });
    for (const k of ["tls.crt", "tls.key", "ca.crt"]) writeFileSync(join(tlsDir, k), data[k]!);
  };

  beforeAll(async () => {
    cp = await startControlPlane({
      crds: ["crds/agents.ifp.dev.yaml", "crds/relays.ifp.dev.yaml"],
      controllerManager: false,
    });
    cp.kubectl(["create", "namespace", NS]);
    cp.kubectl(["create", "namespace", SYSTEM]);
    port = await freePort();
    manager = await startManager({
      kubeconfig: cp.kubeconfig,
      settings: {
        runtimeImage: "ghcr.io/ifp-dev/ifp-runtime:test",
        runtimeImagePullPolicy: "IfNotPresent",
        natsUrl: `nats://localhost:${port}`,
      },
      nats: { url: `nats://localhost:${port}` },
      natsServerTls: { namespace: SYSTEM, secretName: SECRET, dnsNames: ["localhost"] },
      natsTlsVerifyWithTrust: true,
      trust: { namespace: SYSTEM, secretName: "ifp-ca" },
      watchNamespaces: [NS],
      resyncMs: 2_000,
      log: operatorLog.log,
    });
    // As the chart's NATS pod: it starts once the operator has written its certificate.
    writeTlsFiles(await until("the NATS server certificate", () => secretData(), 60_000));
    nats = await startNats({
      port,
      config: [
        `pid_file: "${join(dir, "nats.pid")}"`,
        `tls {`,
        `  cert_file: "${join(tlsDir, "tls.crt")}"`,
        `  key_file: "${join(tlsDir, "tls.key")}"`,
        `  timeout: 2`,
        `}`,
      ].join("\n"),
      connect: { servers: `localhost:${port}`, tls: { ca: readFileSync(join(tlsDir, "ca.crt"), "utf8") } },
    });
  }, 300_000);
  afterAll(async () => {
    await manager?.stop();
    await nats?.close();
    await cp?.stop();
    releaseDir(dir);
  });

  it("issues the server certificate from the install CA, for the given names and both ends of a route", async () => {
    const data = secretData()!;
    const cert = new X509Certificate(data["tls.crt"]!);
    expect(cert.subjectAltName).toBe("DNS:localhost");
    expect(cert.keyUsage).toEqual(expect.arrayContaining(["1.3.6.1.5.5.7.3.1", "1.3.6.1.5.5.7.3.2"]));
    expect(await issuedBy(data["tls.crt"]!, manager.trust.signer().cert)).toBe(true);
    expect(data["ca.crt"]).toBe(joinBundle(manager.trust.bundleCerts()));
  });

  it("the operator connects with verified TLS: a Relay's stream is made, and runtimes are told to verify NATS with their trust bundle", async () => {
    cp.kubectl(
      ["apply", "-f", "-"],
      JSON.stringify({
        apiVersion: "ifp.dev/v1alpha1",
        kind: "Relay",
        metadata: { name: "hub", namespace: NS },
        spec: { url: "https://relay.example" },
      }),
    );
    cp.kubectl(
      ["apply", "-f", "-"],
      JSON.stringify({
        apiVersion: "ifp.dev/v1alpha1",
        kind: "Agent",
        metadata: { name: "alice", namespace: NS },
        spec: { agentId: "alice" },
      }),
    );
    const relay = await until(
      "the Relay's stream",
      () => {
        const r = getOrAbsent(cp, ["-n", NS, "get", "relay", "hub"]);
        return r?.status?.conditions?.find((c: any) => c.type === "StreamReady" && c.status === "True") ? r : undefined;
      },
      45_000,
    );
    expect(relay).toBeDefined();
    const dep: any = await until("alice's Deployment", () => getOrAbsent(cp, ["-n", NS, "get", "deployment", "alice"]));
    expect(dep.spec.template.spec.containers[0].args).toContain("--nats-ca=/etc/ifp/trust/ca.crt");
  });

  it("a runtime's connection verifies the server with its trust bundle; no TLS, or the system roots only, are refused", async () => {
    // The trust bundle the runtime pod mounts, wherever the Deployment says it is.
    const dep: any = getOrAbsent(cp, ["-n", NS, "get", "deployment", "alice"]);
    const configMap = dep.spec.template.spec.volumes.find((v: any) => v.name === "trust").configMap.name;
    const bundle = await until(
      "alice's trust bundle",
      () => getOrAbsent(cp, ["-n", NS, "get", "configmap", configMap])?.data?.["ca.crt"],
    );
    const bundleFile = join(dir, "runtime-ca.crt");
    writeFileSync(bundleFile, bundle);
    const runtime = new Nats(
      { url: nats.url.replace("127.0.0.1", "localhost"), name: "runtime-test", tls: { caFile: bundleFile } },
      operatorLog.log,
    );
    await runtime.start(AbortSignal.timeout(20_000));
    expect(runtime.isConnected).toBe(true);
    await runtime.close();

    // The system roots do not know the install CA.
    await expect(connect({ servers: `localhost:${port}`, reconnect: false, timeout: 3_000 })).rejects.toThrow(
      /certificate/i,
    );
    // A client that does not speak TLS gets nowhere: the server requires it before CONNECT.
    const answer = await new Promise<string>((resolve) => {
      let text = "";
      const s = createConnection(port, "127.0.0.1");
      s.on("data", (d) => {
        text += d.toString();
        if (text.includes("\n")) s.write('CONNECT {"verbose":true}\r\nPING\r\n');
      });
      s.on("close", () => resolve(text));
      s.on("error", () => {});
      s.setTimeout(8_000, () => s.destroy());
    });
    expect(answer).toMatch(/"tls_required":true/);
    expect(answer).not.toMatch(/PONG|\+OK/);
  });

  it("re-issues when due, when its names change or the signer changes; ca.crt follows the bundle", async () => {
    const kc = new KubeConfig();
    kc.loadFromFile(cp.kubeconfig);
    const kube = new Kube(kc, operatorLog.log);
    const keeper = new NatsServerTls(kube, manager.trust, {
      namespace: SYSTEM,
      secretName: SECRET,
      dnsNames: ["localhost"],
      log: operatorLog.log,
    });
    const serial = () => new X509Certificate(secretData()!["tls.crt"]!).serialNumber;
    const first = serial();
    // Nothing due: kept, and the next look is before its renewal time.
    const wait = await keeper.ensure();
    expect(serial()).toBe(first);
    expect(wait).toBeGreaterThan(0);
    expect(wait).toBeLessThanOrEqual(3600_000);
    // Within the renewal window: a new certificate.
    const notAfter = new X509Certificate(secretData()!["tls.crt"]!).validToDate.getTime();
    await keeper.ensure(notAfter - manager.trust.lifetimes.certRenewBeforeMs + 1000);
    const second = serial();
    expect(second).not.toBe(first);
    // Other names: a new certificate with them.
    const renamed = new NatsServerTls(kube, manager.trust, {
      namespace: SYSTEM,
      secretName: SECRET,
      dnsNames: ["localhost", "nats.example"],
      log: operatorLog.log,
    });
    await renamed.ensure();
    expect(new X509Certificate(secretData()!["tls.crt"]!).subjectAltName).toBe("DNS:localhost, DNS:nats.example");
    await keeper.ensure();
    expect(new X509Certificate(secretData()!["tls.crt"]!).subjectAltName).toBe("DNS:localhost");
    // A Secret whose ca.crt was changed by hand gets the install's bundle back, the certificate kept.
    const s = getOrAbsent(cp, ["-n", SYSTEM, "get", "secret", SECRET]);
    const kept = serial();
    s.data["ca.crt"] = Buffer.from("not a bundle").toString("base64");
    cp.kubectl(["replace", "-f", "-"], JSON.stringify(s));
    await keeper.ensure();
    expect(secretData()!["ca.crt"]).toBe(joinBundle(manager.trust.bundleCerts()));
    expect(serial()).toBe(kept);
  });

  it("the reloader makes the running server serve a renewed certificate", async () => {
    // A certificate of another CA, which only a client trusting that CA accepts.
    const other = await createCA("nats reload test CA");
    const leaf = await other.issue({ commonName: "localhost", dnsNames: ["localhost"], bothEnds: true });
    const trustsOther = () =>
      connect({ servers: `localhost:${port}`, reconnect: false, timeout: 3_000, tls: { ca: other.cert } });
    await expect(trustsOther()).rejects.toThrow(/certificate/i);
    const stop = new AbortController();
    const reloaderLog = capturedLog(50);
    const reloader = runReloader(
      { watch: [tlsDir], pidFile: join(dir, "nats.pid"), intervalMs: 200, log: reloaderLog.log },
      stop.signal,
    );
    try {
      // The reloader says it watches once it took its first digest: a change after that is one it sees.
      await until("the reloader's first digest", () => reloaderLog.has(/watching the NATS server's certificate/));
      writeFileSync(join(tlsDir, "tls.key"), leaf.key);
      writeFileSync(join(tlsDir, "tls.crt"), leaf.cert);
      const nc = await until(
        "a client trusting the new CA connected",
        async () => {
          try {
            return await trustsOther();
          } catch {
            return undefined;
          }
        },
        15_000,
        250,
      );
      await nc.close();
      expect(nats.log()).toMatch(/Reloaded server configuration/i);
    } finally {
      stop.abort();
      await reloader;
    }
  });
});

describe("the routes of a clustered NATS over mutual TLS, as the chart configures them", () => {
  const dir = tempDir("ifp-nats-routes-");
  afterAll(() => releaseDir(dir));
  // The chart's cluster block: each server presents the certificate and verifies the others' with ca.crt.
  const routeTls = async (name: string, bothEnds: boolean, trusted?: string) => {
    const ca = await createCA(`route test CA ${name}`);
    const leaf = await ca.issue({ commonName: "localhost", dnsNames: ["localhost"], ips: ["127.0.0.1"], bothEnds });
    const d = join(dir, name);
    mkdirSync(d, { recursive: true });
    writeFileSync(join(d, "tls.crt"), leaf.cert);
    writeFileSync(join(d, "tls.key"), leaf.key);
    writeFileSync(join(d, "ca.crt"), trusted ?? ca.cert);
    return [
      `tls {`,
      `  cert_file: "${join(d, "tls.crt")}"`,
      `  key_file: "${join(d, "tls.key")}"`,
      `  ca_file: "${join(d, "ca.crt")}"`,
      `  timeout: 2`,
      `}`,
    ].join("\n");
  };

  it("forms the cluster with the operator's certificate (valid for both ends of a route)", {
    timeout: 120_000,
  }, async () => {
    const cluster = await startNatsCluster({ clusterConfig: await routeTls("both", true) });
    try {
      await cluster.ready(60_000);
      expect(cluster.log()).toMatch(/Route connection created/);
    } finally {
      await cluster.close();
    }
  });

  it("does not form it when a server's certificate is not of the CA the others trust: the routes verify each other", {
    timeout: 120_000,
  }, async () => {
    const stranger = await createCA("a CA nobody trusts");
    const cluster = await startNatsCluster({
      clusterConfig: await routeTls("untrusted", true, stranger.cert),
      waitReady: false,
    });
    try {
      // Each node tried its routes and refused the others' certificates: the event that shows
      // the routes had their chance, rather than a wait for a cluster that never forms.
      await waitFor(
        "every node to refuse a route for its certificate",
        () => cluster.nodes.every((n) => /TLS route handshake error.*certificate/i.test(n.log())) || undefined,
        30_000,
        100,
      );
      expect(await Promise.all(cluster.names.map((_, i) => cluster.routes(i)))).toEqual(cluster.names.map(() => 0));
      expect(cluster.log()).not.toMatch(/Route connection created/);
    } finally {
      await cluster.close();
    }
  });
});
