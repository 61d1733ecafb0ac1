// The chart's pass-through values: images by digest and through a mirror registry, the operator's
// and NATS's extra flags, environment and volumes, every operator flag the chart maps, and the
// schema's refusals of malformed ones. helm alone: the API server's checks of the same values are
// a value set of chart.test.ts.
import { spawnSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { parseAllDocuments, stringify } from "yaml";
import { toolPath } from "./tools/tools.ts";
import { tempDir } from "./support/process.ts";
import { parseFlags } from "../operator/src/commands/main.ts";
import { DEFAULT_ACCOUNT_LIMITS } from "../operator/src/concerns/nats/account-limits.ts";
import { NATS_DIGEST } from "../charts/ifp-operator/values.schema.ts";

const CHART = "charts/ifp-operator";
const NS = "ifp-system";
const DIGEST = `sha256:${"0123456789abcdef".repeat(4)}`;

type Obj = Record<string, any>;
const helm = (...args: string[]) => {
  const r = spawnSync(toolPath("helm"), args, { encoding: "utf8", timeout: 30_000 });
  if (r.error) throw new Error(`helm ${args.join(" ")} could not run: ${r.error.message}`);
  return { status: r.status, out: r.stdout + r.stderr, stdout: r.stdout };
};
const valuesFile = (values: object) => {
  const file = join(tempDir("ifp-values-"), "values.yaml");
  writeFileSync(file, stringify(values));
  return file;
};
const render = (values: object): Obj[] => {
  const r = helm("template", "ifp", CHART, "--namespace", NS, "-f", valuesFile(values));
  if (r.status !== 0) throw new Error(r.out);
  return parseAllDocuments(r.stdout)
    .map((d) => d.toJSON())
    .filter(Boolean);
};
const find = (objects: Obj[], kind: string, name: string): Obj => {
  const o = objects.find((d) => d.kind === kind && d.metadata.name === name);
  if (!o) throw new Error(`no ${kind} ${name}`);
  return o;
};
const operatorPod = (objects: Obj[]) => find(objects, "Deployment", "ifp-ifp-operator").spec.template.spec;
const natsPod = (objects: Obj[]) => find(objects, "StatefulSet", "ifp-ifp-operator-nats").spec.template.spec;
/** Every container image of every pod the chart renders, with the runtime image the operator is told. */
const images = (objects: Obj[]) => {
  const out: Record<string, string> = {};
  for (const d of objects) {
    const spec = d.kind === "Pod" ? d.spec : d.spec?.template?.spec;
    if (!spec) continue;
    for (const c of [...(spec.initContainers ?? []), ...spec.containers]) out[`${d.metadata.name}/${c.name}`] = c.image;
  }
  const arg = operatorPod(objects).containers[0].args.find((a: string) => a.startsWith("--runtime-image="));
  out["--runtime-image"] = arg.split("=")[1];
  return out;
};
/** The schema's refusal of values: helm template fails and names the value. */
const refused = (values: object, pattern: RegExp) => {
  const r = helm("template", "ifp", CHART, "-f", valuesFile(values));
  expect(r.status, r.out).not.toBe(0);
  expect(r.out).toMatch(/values don't meet the specifications of the schema/);
  expect(r.out).toMatch(pattern);
  // lint refuses the same.
  const lint = helm("lint", "--strict", CHART, "-f", valuesFile(values));
  expect(lint.status, lint.out).not.toBe(0);
  expect(lint.out).toMatch(pattern);
};

describe("chart values passed through", () => {
  it("names every image by tag by default, the NATS image by the digest of its full version", () => {
    expect(images(render({}))).toEqual({
      "ifp-ifp-operator/operator": "ghcr.io/ifp-dev/ifp-operator:0.1.0",
      "--runtime-image": "ghcr.io/ifp-dev/ifp-runtime:0.1.0",
      "ifp-ifp-operator-nats/repair-store": "ghcr.io/ifp-dev/ifp-operator:0.1.0",
      "ifp-ifp-operator-nats/nats": `nats@${NATS_DIGEST}`,
      "ifp-ifp-operator-nats/reloader": "ghcr.io/ifp-dev/ifp-operator:0.1.0",
      "ifp-ifp-operator-test/check": "ghcr.io/ifp-dev/ifp-runtime:0.1.0",
      "ifp-ifp-operator-uninstall/prepare-uninstall": "ghcr.io/ifp-dev/ifp-operator:0.1.0",
    });
  });

  it("names each image by digest where one is set (it wins over the tag), through global.imageRegistry", () => {
    const objects = render({
      global: { imageRegistry: "mirror.example:5000/ifp" },
      image: { tag: "9.9.9", digest: DIGEST },
      runtimeImage: { digest: DIGEST },
      nats: { image: { digest: DIGEST } },
    });
    expect(images(objects)).toEqual({
      "ifp-ifp-operator/operator": `mirror.example:5000/ifp/ifp-dev/ifp-operator@${DIGEST}`,
      "--runtime-image": `mirror.example:5000/ifp/ifp-dev/ifp-runtime@${DIGEST}`,
      "ifp-ifp-operator-nats/repair-store": `mirror.example:5000/ifp/ifp-dev/ifp-operator@${DIGEST}`,
      // An image without a registry (Docker Hub's) gets the mirror prepended.
      "ifp-ifp-operator-nats/nats": `mirror.example:5000/ifp/nats@${DIGEST}`,
      "ifp-ifp-operator-nats/reloader": `mirror.example:5000/ifp/ifp-dev/ifp-operator@${DIGEST}`,
      "ifp-ifp-operator-test/check": `mirror.example:5000/ifp/ifp-dev/ifp-runtime@${DIGEST}`,
      "ifp-ifp-operator-uninstall/prepare-uninstall": `mirror.example:5000/ifp/ifp-dev/ifp-operator@${DIGEST}`,
    });
    // A mirror with tags.
    const tagged = images(render({ global: { imageRegistry: "localhost:5000" }, runtimeImage: { tag: "1.2.3" } }));
    expect(tagged["--runtime-image"]).toBe("localhost:5000/ifp-dev/ifp-runtime:1.2.3");
    expect(tagged["ifp-ifp-operator-nats/nats"]).toBe(`localhost:5000/nats@${NATS_DIGEST}`);
    // A NATS image of another tag, its digest cleared.
    const other = images(render({ nats: { image: { tag: "2.12.16-alpine", digest: "" } } }));
    expect(other["ifp-ifp-operator-nats/nats"]).toBe("nats:2.12.16-alpine");
  });

  it("adds extraArgs, extraEnv, extraVolumes and extraVolumeMounts to the operator and to NATS", () => {
    const env = [
      { name: "IFP_NATS_USER", valueFrom: { secretKeyRef: { name: "nats-user", key: "user" } } },
      { name: "EXTRA", value: "1" },
    ];
    const volume = { name: "extra", configMap: { name: "extra-config" } };
    const mount = { name: "extra", mountPath: "/etc/extra", readOnly: true };
    const objects = render({
      extraArgs: ["--log-level=debug", "--workers=8"],
      extraEnv: env,
      extraVolumes: [volume],
      extraVolumeMounts: [mount],
      nats: {
        extraArgs: ["--debug"],
        extraEnv: [{ name: "GOMEMLIMIT", value: "900MiB" }],
        extraVolumes: [volume],
        extraVolumeMounts: [mount],
      },
    });
    const op = operatorPod(objects);
    const args: string[] = op.containers[0].args;
    // After the chart's own flags, so that an extra flag wins; the operator reads it so.
    expect(args.slice(-2)).toEqual(["--log-level=debug", "--workers=8"]);
    expect(args).toContain("--log-level=info");
    const parsed = parseFlags(args) as Obj;
    expect(parsed.logLevel).toBe("debug");
    expect(parsed.options.workers).toBe(8);
    expect(op.containers[0].env.slice(-2)).toEqual(env);
    expect(op.containers[0].env.map((e: Obj) => e.name)).toContain("POD_NAME");
    expect(op.volumes.at(-1)).toEqual(volume);
    expect(op.containers[0].volumeMounts.at(-1)).toEqual(mount);
    const nats = natsPod(objects);
    const server = nats.containers.find((c: Obj) => c.name === "nats");
    expect(server.args).toEqual(["--config", "/etc/nats/nats.conf", "--debug"]);
    expect(server.env.at(-1)).toEqual({ name: "GOMEMLIMIT", value: "900MiB" });
    expect(nats.volumes.at(-1)).toEqual(volume);
    expect(server.volumeMounts.at(-1)).toEqual(mount);
    // None of it by default.
    const plain = render({});
    expect(operatorPod(plain).volumes.map((v: Obj) => v.name)).toEqual(["tmp"]);
    expect(natsPod(plain).containers.find((c: Obj) => c.name === "nats").args).toEqual([
      "--config",
      "/etc/nats/nats.conf",
    ]);
  });

  it("maps every operator flag to a value: workers, resync, nats.authSecret, which the operator parses", () => {
    const flags = (values: object) => operatorPod(render(values)).containers[0].args as string[];
    const defaults = flags({});
    expect(defaults).toContain("--workers=4");
    expect(defaults).toContain("--resync=5m");
    expect(defaults.some((a) => a.startsWith("--nats-auth-secret"))).toBe(false);
    const set = flags({
      workers: 12,
      resync: "90s",
      nats: { install: false, url: "nats://n:4222", authSecret: "nats-auth" },
    });
    expect(set).toContain("--workers=12");
    expect(set).toContain("--resync=90s");
    expect(set).toContain("--nats-auth-secret=nats-auth");
    const parsed = parseFlags(set) as Obj;
    expect(parsed.options.workers).toBe(12);
    expect(parsed.options.resyncMs).toBe(90_000);
    expect(parsed.options.settings.natsAuthSecret).toBe("nats-auth");
  });

  it("gives every runtime's NATS account the limits of runtime.natsAccountLimits, the operator's defaults by default", () => {
    const limits = (values: object) =>
      (parseFlags(operatorPod(render(values)).containers[0].args) as Obj).options.natsAccountLimits;
    expect(limits({})).toEqual(DEFAULT_ACCOUNT_LIMITS);
    expect(
      limits({
        runtime: {
          natsAccountLimits: {
            dataBytes: "16Mi",
            memoryBytes: 1048576,
            streams: 12,
            consumers: 64,
            subscriptions: 512,
          },
        },
      }),
    ).toEqual({
      ...DEFAULT_ACCOUNT_LIMITS,
      dataBytes: 16 * 1024 * 1024,
      memoryBytes: 1024 * 1024,
      streams: 12,
      consumers: 64,
      subscriptions: 512,
    });
  });

  it("runs the Agents on the NATS layout of runtime.natsLayout, isolated by default, with the tenants' limits", () => {
    const options = (values: object) => (parseFlags(operatorPod(render(values)).containers[0].args) as Obj).options;
    expect(options({})).toMatchObject({ natsLayout: "isolated", natsTenantLimits: { diskBytes: 1024 * 1024 * 1024 } });
    expect(options({ runtime: { natsLayout: "per-agent" } }).natsLayout).toBeUndefined();
    expect(
      options({ runtime: { natsLayout: "isolated", natsTenantLimits: { diskBytes: "256Mi", memoryBytes: 0 } } }),
    ).toMatchObject({ natsLayout: "isolated", natsTenantLimits: { diskBytes: 256 * 1024 * 1024, memBytes: 0 } });
    expect(options({ runtime: { natsLayout: "isolated" } }).natsTenantLimits).toEqual({
      diskBytes: 1024 * 1024 * 1024,
      memBytes: 0,
    });
    // No data account without a limit, none on a NATS the operator does not make accounts on.
    refused({ runtime: { natsLayout: "isolated", natsTenantLimits: { diskBytes: 0 } } }, /diskBytes/);
    refused({ runtime: { natsLayout: "shared" } }, /natsLayout/);
    const noAuth = helm("template", "ifp", CHART, "-f", valuesFile({ nats: { auth: { enabled: false } } }));
    expect(noAuth.status).not.toBe(0);
    expect(noAuth.out).toMatch(
      /runtime\.natsLayout isolated \(the default\) needs nats\.auth\.enabled.*set runtime\.natsLayout per-agent/,
    );
  });

  it("reaches every flag of the operator from values: rendered by the chart, or set through extraEnv or extraArgs for a reason", () => {
    // The flags `ifp-operator --help` lists for the operator itself (not its subcommands).
    const help = spawnSync(process.execPath, ["operator/bin/ifp-operator.ts", "--help"], {
      encoding: "utf8",
      timeout: 60_000,
    });
    expect(help.status, help.stderr).toBe(0);
    const own = help.stdout.split(/^usage: ifp-operator \S/m)[1]!;
    const flags = [...new Set([...own.matchAll(/^ {2}(--[a-z][-a-z]*)/gm)].map((m) => m[1]!))];
    expect(flags.length).toBeGreaterThan(40);
    const NOT_RENDERED: Record<string, string> = {
      "--kubeconfig": "in a pod the operator uses its ServiceAccount",
      "--nats-user": "the operator's own NATS user: extraEnv IFP_NATS_USER from a Secret",
      "--nats-password": "extraEnv IFP_NATS_PASSWORD from a Secret, never a value in the release",
      "--nats-token": "extraEnv IFP_NATS_TOKEN from a Secret, never a value in the release",
      "--nats-creds-secret-key":
        "the chart mounts nats.credentialsSecret.key under its own name, which the operator takes as the key",
    };
    const rendered = new Set(
      [
        {},
        {
          nats: {
            install: false,
            url: "nats://n:4222",
            tls: { verifyOwnServer: true },
            credentialsSecret: { name: "creds" },
            authSecret: "auth",
          },
          trust: {
            extraCAs: "-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n",
            certManager: { issuerRef: { name: "ca" }, bundle: { configMapName: "bundle" } },
          },
          tracing: { otlpEndpoint: "http://otel:4318", env: { OTEL_TRACES_SAMPLER: "always_on" } },
          allowedImages: ["a/*"],
          allowedIssuers: ["ClusterIssuer/x"],
          allowedDnsNames: ["*.example"],
          allowedHosts: { team: ["a.example"] },
          allowedNodeLabels: ["kubernetes.io/os"],
          allowedTolerations: ["*"],
          allowedPriorityClasses: ["*"],
          imagePullSecrets: [{ name: "pull" }],
          metrics: { networkPolicyNamespaces: ["monitoring"] },
          watchNamespaces: ["team"],
        },
        { runtime: { natsLayout: "per-agent" } },
      ].flatMap((values) => (operatorPod(render(values)).containers[0].args as string[]).map((a) => a.split("=")[0]!)),
    );
    expect(flags.filter((f) => !rendered.has(f) && !NOT_RENDERED[f])).toEqual([]);
    // Nothing is excused that the chart renders after all.
    expect(Object.keys(NOT_RENDERED).filter((f) => rendered.has(f))).toEqual([]);
  });

  it("runs NATS under a ServiceAccount of its own that mounts no token", () => {
    const objects = render({ imagePullSecrets: [{ name: "registry-credentials" }] });
    const sa = find(objects, "ServiceAccount", "ifp-ifp-operator-nats");
    expect(sa.automountServiceAccountToken).toBe(false);
    expect(sa.imagePullSecrets).toEqual([{ name: "registry-credentials" }]);
    const pod = natsPod(objects);
    expect(pod.serviceAccountName).toBe("ifp-ifp-operator-nats");
    expect(pod.automountServiceAccountToken).toBe(false);
    // No NATS, no ServiceAccount for it.
    expect(
      render({ nats: { install: false, url: "nats://n:4222" } }).filter(
        (d) => d.metadata.name === "ifp-ifp-operator-nats",
      ),
    ).toEqual([]);
  });

  it("refuses malformed values with the schema's words, on template and on lint", () => {
    refused({ image: { digest: "sha256:abc" } }, /image\/digest.*(does not match|Does not match)|image\.digest/);
    refused({ image: { digest: "md5:0123456789abcdef0123456789abcdef" } }, /digest/);
    refused({ nats: { image: { tag: "2.12 alpine" } } }, /nats\/image\/tag|nats\.image\.tag/);
    refused(
      { runtimeImage: { repository: "ghcr.io/ifp-dev/ifp-runtime:1.0@sha256:x" } },
      /runtimeImage\/repository|runtimeImage\.repository/,
    );
    refused({ global: { imageRegistry: "https://mirror.example" } }, /global\/imageRegistry|global\.imageRegistry/);
    refused({ extraArgs: ["workers=8"] }, /extraArgs\/0|extraArgs\.0/);
    refused({ extraArgs: "--workers=8" }, /extraArgs/);
    refused({ extraEnv: [{ value: "1" }] }, /extraEnv\/0|extraEnv\.0|name/);
    refused({ extraEnv: [{ name: "BAD NAME", value: "1" }] }, /extraEnv\/0\/name|extraEnv\.0\.name/);
    refused({ extraVolumes: [{ name: "Bad_Name", emptyDir: {} }] }, /extraVolumes\/0\/name|extraVolumes\.0\.name/);
    refused(
      { extraVolumeMounts: [{ name: "x", mountPath: "relative" }] },
      /extraVolumeMounts\/0\/mountPath|extraVolumeMounts\.0\.mountPath/,
    );
    refused({ nats: { extraArgs: [""] } }, /nats\/extraArgs\/0|nats\.extraArgs\.0/);
    refused({ workers: 0 }, /workers/);
    refused({ workers: 65 }, /workers/);
    refused({ workers: "4" }, /workers/);
    refused({ resync: "5 minutes" }, /resync/);
    refused({ nats: { authSecret: "Not_A_Name" } }, /nats\/authSecret|nats\.authSecret/);
  });
});
