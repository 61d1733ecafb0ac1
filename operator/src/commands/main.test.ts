import { describe, expect, it } from "vitest";
import { microTime } from "./leader.ts";
import { parseFlags } from "./main.ts";
import { DEFAULT_ACCOUNT_LIMITS } from "../concerns/nats/account-limits.ts";
import { parseReloadNatsFlags } from "./reload-nats.ts";

describe("ifp-operator flags", () => {
  it("takes NATS TLS: the installed server's certificate (which implies verifying with the install's trust), or verification only", () => {
    const issued = parseFlags(
      ["--nats-tls-secret=n-tls", "--nats-tls-dns-names=n.sys.svc, *.n-headless.sys.svc", "--ca-namespace=sys"],
      {},
    ).options;
    expect(issued).toMatchObject({
      natsTlsVerifyWithTrust: true,
      natsServerTls: { namespace: "sys", secretName: "n-tls", dnsNames: ["n.sys.svc", "*.n-headless.sys.svc"] },
    });
    expect(parseFlags(["--nats-tls=trust"], {}).options).toMatchObject({
      natsTlsVerifyWithTrust: true,
      natsServerTls: undefined,
    });
    expect(parseFlags([], {}).options).toMatchObject({ natsTlsVerifyWithTrust: undefined, natsServerTls: undefined });
    expect(() => parseFlags(["--nats-tls=yes"], {})).toThrow(/--nats-tls is off or trust/);
    expect(() => parseFlags(["--nats-tls-secret=n-tls"], {})).toThrow(/needs --nats-tls-dns-names/);
    expect(() => parseFlags(["--nats-tls=off", "--nats-tls-secret=n-tls", "--nats-tls-dns-names=n"], {})).toThrow(
      /needs --nats-tls=trust/,
    );
  });

  it("takes reload-nats's flags, and refuses it without what it watches and whom it signals", () => {
    expect(
      parseReloadNatsFlags(["--watch=/etc/nats-tls", "--pid-file=/var/run/nats/nats.pid", "--interval=2s"], {}),
    ).toEqual({
      help: false,
      watch: ["/etc/nats-tls"],
      pidFile: "/var/run/nats/nats.pid",
      intervalMs: 2_000,
      logLevel: "info",
    });
    expect(() => parseReloadNatsFlags(["--watch=/etc/nats-tls"], {})).toThrow(/needs --watch and --pid-file/);
    expect(() => parseReloadNatsFlags(["--pid-file=/p"], {})).toThrow(/needs --watch and --pid-file/);
    expect(parseReloadNatsFlags(["--help"], {}).help).toBe(true);
  });

  it("takes the chart's flags", () => {
    const { options, logLevel } = parseFlags(
      [
        "--nats-url=nats://nats:4222",
        "--runtime-image=img:1",
        "--runtime-image-pull-policy=Always",
        "--watch-namespaces=a, b",
        "--leader-elect=true",
        "--leader-election-namespace=ops",
        "--metrics-port=8080",
        "--health-port=8081",
        "--log-level=debug",
        "--nats-creds=/etc/ifp/nats/user.creds",
        "--nats-creds-secret=nats-creds",
      ],
      { POD_NAME: "op-1" },
    );
    expect(logLevel).toBe("debug");
    expect(options).toMatchObject({
      settings: {
        runtimeImage: "img:1",
        runtimeImagePullPolicy: "Always",
        natsUrl: "nats://nats:4222",
        natsCredsSecret: { name: "nats-creds", key: "user.creds" },
      },
      nats: { url: "nats://nats:4222", credsFile: "/etc/ifp/nats/user.creds" },
      watchNamespaces: ["a", "b"],
      leaderElection: { namespace: "ops", identity: "op-1" },
      healthPort: 8081,
      metricsPort: 8080,
      resyncMs: 300_000,
      workers: 4,
    });
  });

  it("reads the environment, and a bare --leader-elect", () => {
    const { options } = parseFlags(["--leader-elect", "--resync=30s"], {
      IFP_NATS_URL: "nats://x:4222",
      IFP_NATS_TOKEN: "t",
      POD_NAMESPACE: "sys",
    });
    expect(options.nats).toMatchObject({ url: "nats://x:4222", token: "t" });
    expect(options.leaderElection).toMatchObject({ namespace: "sys" });
    expect(options.resyncMs).toBe(30_000);
    expect(parseFlags([], {}).options.leaderElection).toBeUndefined();
    expect(parseFlags([], {}).options.nats).toBeUndefined();
  });

  it("renders runtime NetworkPolicies only when told, with the namespaces that may scrape metrics", () => {
    expect(parseFlags([], {}).options.settings.runtimeNetworkPolicies).toBeUndefined();
    expect(
      parseFlags(["--runtime-network-policies=false", "--metrics-namespaces=monitoring"], {}).options.settings
        .runtimeNetworkPolicies,
    ).toBeUndefined();
    expect(parseFlags(["--runtime-network-policies"], {}).options.settings.runtimeNetworkPolicies).toEqual({
      metricsNamespaces: [],
    });
    expect(
      parseFlags(["--runtime-network-policies=true", "--metrics-namespaces=monitoring, ops"], {}).options.settings
        .runtimeNetworkPolicies,
    ).toEqual({ metricsNamespaces: ["monitoring", "ops"] });
    expect(() => parseFlags(["--runtime-network-policies=yes"], {})).toThrow(
      /--runtime-network-policies is true or false/,
    );
    expect(() => parseFlags(["--runtime-network-policies", "--metrics-namespaces=Monitoring"], {})).toThrow(
      /--metrics-namespaces takes namespace names/,
    );
  });

  it("takes the runtime pods' UID, GID and pull secrets", () => {
    const defaults = parseFlags([], {}).options.settings;
    expect(defaults).toMatchObject({ runtimeRunAsUser: 10001, runtimeRunAsGroup: 10001, runtimeImagePullSecrets: [] });
    const none = parseFlags(
      ["--runtime-run-as-user=none", "--runtime-run-as-group=none", "--runtime-image-pull-secrets=a, b,"],
      {},
    ).options.settings;
    expect(none).toMatchObject({
      runtimeRunAsUser: null,
      runtimeRunAsGroup: null,
      runtimeImagePullSecrets: ["a", "b"],
    });
    const fixed = parseFlags(["--runtime-run-as-user=1000680000", "--runtime-run-as-group=0"], {}).options.settings;
    expect(fixed).toMatchObject({ runtimeRunAsUser: 1000680000, runtimeRunAsGroup: 0 });
  });

  it("takes the cluster's networks the runtimes may reach: private ranges by default, none, or a list", () => {
    expect(parseFlags([], {}).options.settings.clusterNetworks).toEqual([
      "10.0.0.0/8",
      "172.16.0.0/12",
      "192.168.0.0/16",
      "fd00::/8",
    ]);
    expect(parseFlags(["--cluster-networks=none"], {}).options.settings.clusterNetworks).toEqual([]);
    expect(parseFlags(["--cluster-networks=10.96.0.0/12, 10.244.0.0/16"], {}).options.settings.clusterNetworks).toEqual(
      ["10.96.0.0/12", "10.244.0.0/16"],
    );
    expect(() => parseFlags(["--cluster-networks=10.0.0.0/33"], {})).toThrow(
      /--cluster-networks takes IP addresses or CIDR blocks/,
    );
  });

  it("takes the issuers and DNS names spec.tls may name, and refuses malformed entries", () => {
    const { settings } = parseFlags(
      [
        "--allowed-issuers=ClusterIssuer/letsencrypt,ClusterIssuer/*,Issuer.awspca.cert-manager.io/pca",
        "--allowed-dns-names=localhost,*.agents.example.com",
      ],
      {},
    ).options;
    expect(settings.allowedIssuers).toEqual([
      "ClusterIssuer/letsencrypt",
      "ClusterIssuer/*",
      "Issuer.awspca.cert-manager.io/pca",
    ]);
    expect(settings.allowedDnsNames).toEqual(["localhost", "*.agents.example.com"]);
    expect(parseFlags([], {}).options.settings).toMatchObject({ allowedIssuers: [], allowedDnsNames: [] });
    for (const bad of ["letsencrypt", "ClusterIssuer/", "/x", "ClusterIssuer/a/b", "Cluster Issuer/x"])
      expect(() => parseFlags([`--allowed-issuers=${bad}`], {}), bad).toThrow(
        /--allowed-issuers takes Kind\[\.group\]\/name entries/,
      );
    for (const bad of ["a..b", "*example.com", "x.*.com", "-a.com", "a b"])
      expect(() => parseFlags([`--allowed-dns-names=${bad}`], {}), bad).toThrow(/--allowed-dns-names takes DNS names/);
  });

  it("takes the hosts each namespace's resources may name, gathered by namespace, and refuses malformed entries", () => {
    expect(
      parseFlags(["--allowed-hosts=team/shop.example.com, team/*.team.example.com,other/api.example.org"], {}).options
        .settings.allowedHosts,
    ).toEqual({ team: ["shop.example.com", "*.team.example.com"], other: ["api.example.org"] });
    expect(parseFlags([], {}).options.settings.allowedHosts).toEqual({});
    for (const bad of [
      "shop.example.com",
      "team/",
      "/shop.example.com",
      "Team/x.com",
      "team/*",
      "team/x.*.com",
      "a/b/c",
      "team/a b",
    ])
      expect(() => parseFlags([`--allowed-hosts=${bad}`], {}), bad).toThrow(
        /--allowed-hosts takes namespace\/host entries/,
      );
  });

  it("refuses bad input with a clear message", () => {
    expect(() => parseFlags(["--health-port=http"], {})).toThrow(
      /--health-port must be a whole number from 0 to 65535, not "http"/,
    );
    expect(() => parseFlags(["--resync=often"], {})).toThrow(/--resync takes a duration/);
    expect(() => parseFlags(["--leader-elect=maybe"], {})).toThrow(/--leader-elect is true or false/);
    expect(() => parseFlags(["--runtime-run-as-user=root"], {})).toThrow(
      /--runtime-run-as-user is a whole number from 0 to 2147483647 or none, not "root"/,
    );
    expect(() => parseFlags(["--runtime-run-as-group=-1"], {})).toThrow(/--runtime-run-as-group is a whole number/);
    expect(() => parseFlags(["--runtime-run-as-user=1.5"], {})).toThrow(/--runtime-run-as-user is a whole number/);
    expect(() => parseFlags(["--no-such-flag"], {})).toThrow(/Unknown option '--no-such-flag'/);
  });

  it("takes the finalizer timeout and the operator's own Deployment, and refuses bad ones", () => {
    expect(parseFlags([], {}).options).toMatchObject({ finalizerTimeoutMs: 300_000, operatorDeployment: undefined });
    const { options } = parseFlags(["--finalizer-timeout=90s", "--operator-deployment=ifp-system/ifp-operator"], {});
    expect(options).toMatchObject({
      finalizerTimeoutMs: 90_000,
      operatorDeployment: { namespace: "ifp-system", name: "ifp-operator" },
    });
    expect(parseFlags([], { IFP_OPERATOR_DEPLOYMENT: "ops/op" }).options.operatorDeployment).toEqual({
      namespace: "ops",
      name: "op",
    });
    for (const bad of ["ifp-operator", "a/b/c", "/x", "x/", "A/b", "ns/-x", `${"n".repeat(64)}/x`, "ns/x y"]) {
      expect(() => parseFlags([`--operator-deployment=${bad}`], {})).toThrow(
        /--operator-deployment takes NAMESPACE\/NAME/,
      );
    }
    expect(() => parseFlags(["--finalizer-timeout=0s"], {})).toThrow(/--finalizer-timeout takes a duration/);
    expect(() => parseFlags(["--finalizer-timeout=forever"], {})).toThrow(/--finalizer-timeout takes a duration/);
  });

  it("takes what every runtime's NATS account may hold, and refuses sizes and counts that are not", () => {
    expect(parseFlags([], {}).options.natsAccountLimits).toEqual(DEFAULT_ACCOUNT_LIMITS);
    const { options } = parseFlags(
      [
        "--nats-account-data-bytes=16Mi",
        "--nats-account-memory-bytes=1048576",
        "--nats-account-unbounded-relay-bytes=2Gi",
        "--nats-account-streams=12",
        "--nats-account-consumers=64",
        "--nats-account-connections=8",
        "--nats-account-subscriptions=512",
      ],
      {},
    );
    expect(options.natsAccountLimits).toEqual({
      dataBytes: 16 * 1024 * 1024,
      memoryBytes: 1024 * 1024,
      unboundedRelayBytes: 2 * 1024 * 1024 * 1024,
      streams: 12,
      consumers: 64,
      connections: 8,
      subscriptions: 512,
    });
    for (const bad of ["-1", "1.5", "0.3Ki", "lots", "1e40"])
      expect(() => parseFlags([`--nats-account-data-bytes=${bad}`], {})).toThrow(
        /--nats-account-data-bytes must be a whole number of bytes or a quantity/,
      );
    for (const bad of ["0", "-1", "ten"])
      expect(() => parseFlags([`--nats-account-streams=${bad}`], {})).toThrow(
        /--nats-account-streams must be a whole number/,
      );
  });

  it("takes the install's NATS layout and its tenants' limits, and refuses what cannot work", () => {
    expect(parseFlags([], {}).options.natsLayout).toBeUndefined();
    expect(parseFlags(["--nats-layout=per-agent"], {}).options.natsLayout).toBeUndefined();
    const secret = "--nats-account-secret=ifp-nats";
    expect(parseFlags([secret, "--nats-layout=isolated"], {}).options).toMatchObject({
      natsLayout: "isolated",
      natsTenantLimits: { diskBytes: 1024 * 1024 * 1024, memBytes: 0 },
    });
    expect(
      parseFlags([secret, "--nats-tenant-disk-bytes=256Mi", "--nats-tenant-memory-bytes=1Mi"], {
        IFP_NATS_LAYOUT: "isolated",
      }).options.natsTenantLimits,
    ).toEqual({ diskBytes: 256 * 1024 * 1024, memBytes: 1024 * 1024 });
    expect(() => parseFlags(["--nats-layout=shared"], {})).toThrow(/--nats-layout is per-agent or isolated/);
    expect(() => parseFlags(["--nats-layout=isolated"], {})).toThrow(/needs --nats-account-secret/);
    expect(() => parseFlags(["--nats-tenant-disk-bytes=1Gi"], {})).toThrow(/needs --nats-layout isolated/);
    // No data account without a limit: neither unlimited (-1) nor none at all (0, no JetStream).
    for (const bad of ["-1", "0", "lots"])
      expect(() => parseFlags([secret, "--nats-layout=isolated", `--nats-tenant-disk-bytes=${bad}`], {})).toThrow(
        /--nats-tenant-disk-bytes must be/,
      );
  });

  it("takes the number or share of Agents that may roll at once", () => {
    expect(parseFlags([], {}).options.rolloutLimit).toEqual({ percent: 25 });
    expect(parseFlags(["--max-rolling-agents=10"], {}).options.rolloutLimit).toEqual({ count: 10 });
    expect(parseFlags([], { IFP_MAX_ROLLING_AGENTS: "100%" }).options.rolloutLimit).toEqual({ percent: 100 });
    for (const bad of ["0", "0%", "101%", "-1", "1.5", "ten", "10 %", "%", "1234567"]) {
      expect(() => parseFlags([`--max-rolling-agents=${bad}`], {})).toThrow(
        /--max-rolling-agents takes a number of Agents/,
      );
    }
  });

  it("takes the install CA's Secret, lifetimes and extra CAs", async () => {
    const { createCA } = await import("../concerns/tls/certs.ts");
    const { mkdtempSync, writeFileSync } = await import("node:fs");
    const { join } = await import("node:path");
    const { tmpdir } = await import("node:os");
    const dir = mkdtempSync(join(tmpdir(), "ifp-flags-"));
    const extra = join(dir, "extra.crt");
    writeFileSync(extra, (await createCA("corp")).cert);
    const { options } = parseFlags(
      [
        "--ca-secret=ifp-ca",
        "--ca-validity=10s",
        "--ca-rotate-before=6s",
        "--ca-overlap=2s",
        "--cert-validity=8s",
        "--cert-renew-before=1s",
        `--extra-ca-file=${extra}`,
      ],
      { POD_NAMESPACE: "ifp-system" },
    );
    expect(options.trust).toMatchObject({
      namespace: "ifp-system",
      secretName: "ifp-ca",
      lifetimes: {
        caValidityMs: 10_000,
        caRotateBeforeMs: 6_000,
        caOverlapMs: 2_000,
        certValidityMs: 8_000,
        certRenewBeforeMs: 1_000,
      },
    });
    expect(options.trust?.extraCas).toMatch(/BEGIN CERTIFICATE/);
    expect(parseFlags(["--ca-namespace=ops"], {}).options.trust).toMatchObject({
      namespace: "ops",
      secretName: "ifp-operator-ca",
      lifetimes: { caValidityMs: 5 * 365 * 24 * 3600_000 },
    });
    expect(() => parseFlags(["--ca-overlap=soon"], {})).toThrow(/--ca-overlap takes a duration/);
    expect(() => parseFlags(["--ca-overlap=0s"], {})).toThrow(/--ca-overlap takes a duration/);
    expect(() => parseFlags(["--ca-overlap=9000h"], {})).toThrow(
      /--ca-overlap\) must be shorter than the CA rotation lead/,
    );
    writeFileSync(extra, "not a certificate");
    expect(() => parseFlags([`--extra-ca-file=${extra}`], {})).toThrow(/--extra-ca-file .*holds no PEM certificate/);
    expect(() => parseFlags([`--extra-ca-file=${join(dir, "absent")}`], {})).toThrow(/--extra-ca-file .*ENOENT/);
  });

  it("formats Lease times as metav1.MicroTime", () => {
    expect(microTime(new Date("2026-01-01T00:00:00.123Z"))).toBe("2026-01-01T00:00:00.123000Z");
  });
});

describe("the runtimes' tracing flags", () => {
  it("takes an OTLP endpoint and OTEL_* variables, from flags or the environment", () => {
    expect(parseFlags([], {}).options.settings.runtimeTracing).toBeUndefined();
    const flags = parseFlags(
      [
        "--runtime-otlp-endpoint=http://otel-collector.monitoring:4318",
        `--runtime-otel-env={"OTEL_TRACES_SAMPLER":"parentbased_traceidratio","OTEL_TRACES_SAMPLER_ARG":"0.1"}`,
      ],
      {},
    );
    expect(flags.options.settings.runtimeTracing).toEqual({
      otlpEndpoint: "http://otel-collector.monitoring:4318",
      env: { OTEL_TRACES_SAMPLER: "parentbased_traceidratio", OTEL_TRACES_SAMPLER_ARG: "0.1" },
    });
    const fromEnv = parseFlags([], { IFP_RUNTIME_OTLP_ENDPOINT: "https://collector:4318", IFP_RUNTIME_OTEL_ENV: "{}" });
    expect(fromEnv.options.settings.runtimeTracing).toEqual({ otlpEndpoint: "https://collector:4318", env: {} });
  });

  it.each([
    [["--runtime-otlp-endpoint=collector:4318"], /http or https URL/],
    [["--runtime-otlp-endpoint=file:///etc/passwd"], /http or https URL/],
    [["--runtime-otel-env=not json"], /JSON object/],
    [["--runtime-otel-env=[1]"], /JSON object/],
    [[`--runtime-otel-env={"IFP_LOG_LEVEL":"debug"}`], /only OTEL_\* variables/],
    [[`--runtime-otel-env={"PATH":"/tmp"}`], /only OTEL_\* variables/],
    [[`--runtime-otel-env={"otel_service_name":"x"}`], /only OTEL_\* variables/],
    [[`--runtime-otel-env={"OTEL_SERVICE_NAME":1}`], /is a string/],
    [[`--runtime-otel-env={"OTEL_SERVICE_NAME":"${"x".repeat(5000)}"}`], /is a string/],
  ])("refuses %s", (argv, message) => {
    expect(() => parseFlags(argv, {})).toThrow(message);
  });
});
