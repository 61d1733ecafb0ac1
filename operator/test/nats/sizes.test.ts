// Sizes in bytes written as Kubernetes quantities (spec.inbox.maxBytes: 64Mi), against a real
// API server and a real nats-server: the API server refuses a malformed size at apply naming the
// field, the operator renders bytes into the manifest, the relay's stream and its status, and an
// Agent's runtime, run from exactly what the operator rendered, makes its inbox stream that size.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse } from "yaml";
import { startControlPlane, type ControlPlane } from "../../../e2e/support/controlplane.ts";
import { onLoopback, runDeploymentLocally, type LocalRuntime } from "../../../e2e/support/materialize.ts";
import { startNats, type NatsServer } from "../../../e2e/support/nats.ts";
import { freePort } from "../../../e2e/support/ports.ts";
import { releaseDir, tempDir } from "../../../e2e/support/process.ts";
import { agentNames } from "../../../runtime/src/agent/names.ts";
import { startManager, type RunningManager } from "../../src/commands/manager.ts";
import { capturedLog, getOrAbsent, kubectlOrError, perTest, streamOrAbsent, until } from "../support/helpers.ts";

let cp: ControlPlane;
let nats: NatsServer;
let manager: RunningManager;
const NS = "sizes";
const MI = 1024 * 1024;
const operatorLog = capturedLog(400);
const dir = tempDir("ifp-sizes-");
const running: LocalRuntime[] = [];

beforeAll(async () => {
  [cp, nats] = await Promise.all([
    startControlPlane({ crds: ["crds/agents.ifp.dev.yaml", "crds/relays.ifp.dev.yaml"], controllerManager: false }),
    startNats(),
  ]);
  cp.kubectl(["create", "namespace", NS]);
  manager = await startManager({
    kubeconfig: cp.kubeconfig,
    settings: {
      runtimeImage: "ghcr.io/ifp-dev/ifp-runtime:test",
      runtimeImagePullPolicy: "IfNotPresent",
      natsUrl: nats.url,
      allowedDnsNames: ["localhost"],
      clusterNetworks: ["127.0.0.0/8"],
    },
    nats: { url: nats.url },
    watchNamespaces: [NS],
    resyncMs: 60_000,
    log: operatorLog.log,
  });
  await manager.started;
}, 300_000);
afterAll(async () => {
  await Promise.all(running.map((r) => r.stop()));
  await manager?.stop();
  await Promise.all([cp?.stop(), nats?.close()]);
  releaseDir(dir);
});
perTest(() =>
  [
    "operator log:",
    ...operatorLog.lines().slice(-80),
    "agents and relays:",
    kubectlOrError(cp, ["-n", NS, "get", "agents,relays", "-o", "wide"]),
    ...running.flatMap((r) => [`${r.name} (runtime) log:`, r.output().slice(-4000)]),
  ].join("\n"),
);

const get = (kind: string, name: string) => getOrAbsent(cp, ["-n", NS, "get", kind, name]);
const condition = (obj: any, type: string) => obj?.status?.conditions?.find((c: any) => c.type === type);
const apply = (yaml: string) => cp.kubectl(["apply", "-f", "-"], yaml);
const agentYaml = (name: string, inbox: string) => `apiVersion: ifp.dev/v1alpha1
kind: Agent
metadata: {name: ${name}, namespace: ${NS}}
spec:
  agentId: ${name}-id
  tls: {dnsNames: [localhost]}
  inbox: ${inbox}
`;
const relayYaml = (name: string, spec: string) => `apiVersion: ifp.dev/v1alpha1
kind: Relay
metadata: {name: ${name}, namespace: ${NS}}
spec:
  url: https://localhost
${spec}`;
/** What the API server answers an apply (its error text), or undefined when it took it. */
const refusal = (yaml: string) => {
  try {
    apply(yaml);
    return undefined;
  } catch (err) {
    return String((err as Error).message);
  }
};
const manifestOf = (name: string) => parse(get("configmap", `${name}-manifest`).data["manifest.yaml"]);

describe("sizes as Kubernetes quantities", () => {
  it("are refused at apply when malformed, fractional, negative, overflowing or out of range, naming the field", () => {
    const field = "spec.inbox.maxBytes";
    // Each as YAML writes it: a quoted string, or a number.
    for (const bad of [
      "'64Mo'",
      "'-5Mi'",
      "'0.5'",
      "0.5",
      "'1e400'",
      "'99999999Ei'",
      "'8Ei'",
      "''",
      "' '",
      "' 64Mi'",
      "'1000m'",
      "'1.5Mi'",
      "'1M'",
      "-1",
      "9223372036854775807",
    ]) {
      const answer = refusal(agentYaml("bad", `{maxBytes: ${bad}}`));
      expect(answer, `maxBytes: ${bad}`).toMatch(new RegExp(`${field.replaceAll(".", "\\.")}: Invalid value`));
    }
    // The message says what the field takes.
    expect(refusal(agentYaml("bad", "{maxBytes: '64Mo'}"))).toMatch(
      /spec\.inbox\.maxBytes: Invalid value: .*must be a whole number of bytes, or one with a binary \(Ki, Mi, Gi, …\) or decimal \(k, M, G, …\) suffix, from 1Mi to 1Pi/,
    );
    expect(refusal(agentYaml("bad", "{maxBytes: '0.5'}"))).toMatch(
      /spec\.inbox\.maxBytes: Invalid value: .*from 1Mi to 1Pi/,
    );
    expect(get("agent", "bad")).toBeUndefined();
    // Every size field of both kinds is guarded the same way, and named.
    const cases: [string, string][] = [
      [agentYaml("bad", "{maxMessageBytes: '17Mi'}"), "spec.inbox.maxMessageBytes"],
      [agentYaml("bad", "{rateLimit: {perSenderBytesPerHour: '1.5'}}"), "spec.inbox.rateLimit.perSenderBytesPerHour"],
      [relayYaml("badr", "  retention: {maxBytes: '-1'}\n"), "spec.retention.maxBytes"],
      [relayYaml("badr", "  retention: {maxBytes: -2}\n"), "spec.retention.maxBytes"],
      [relayYaml("badr", "  retention: {maxBytes: '99999999Ei'}\n"), "spec.retention.maxBytes"],
      [relayYaml("badr", "  limits: {maxMessageBytes: 64Mo}\n"), "spec.limits.maxMessageBytes"],
      [relayYaml("badr", "  limits: {perAgentBytesPerHour: 1Ki}\n"), "spec.limits.perAgentBytesPerHour"],
      [
        relayYaml("badr", "  publishers: {limits: {perSenderBytesPerHour: '0.5Ki'}}\n"),
        "spec.publishers.limits.perSenderBytesPerHour",
      ],
      [
        relayYaml("badr", "  publishers: {limits: {perRecipientBytesPerHour: 1e400x}}\n"),
        "spec.publishers.limits.perRecipientBytesPerHour",
      ],
    ];
    for (const [yaml, path] of cases)
      expect(refusal(yaml), path).toMatch(new RegExp(`${path.replaceAll(".", "\\.")}: Invalid value`));
    expect(get("relay", "badr")).toBeUndefined();
    // Integers, quantities of both kinds, and -1 for an unbounded relay stream are taken.
    for (const ok of ["1048576", "64Mi", "'1Gi'", "500M", "'2e6'", "1536Ki"])
      expect(refusal(agentYaml("fine", `{maxBytes: ${ok}}`)), `maxBytes: ${ok}`).toBeUndefined();
    expect(refusal(relayYaml("finer", "  retention: {maxBytes: -1}\n"))).toBeUndefined();
    cp.kubectl(["-n", NS, "delete", "agent", "fine", "--wait=false"]);
    cp.kubectl(["-n", NS, "delete", "relay", "finer", "--wait=false"]);
  });

  it("reach a Relay's manifest, JetStream stream and status as bytes", async () => {
    apply(
      relayYaml(
        "hub",
        "  retention: {maxBytes: 64Mi}\n  limits: {maxMessageBytes: 2M, perAgentBytesPerHour: 1Gi}\n  publishers: {limits: {perSenderBytesPerHour: 500k}}\n",
      ),
    );
    // The object keeps what the user wrote.
    expect(get("relay", "hub").spec.retention.maxBytes).toBe("64Mi");
    const name = `IFP_RELAY_${NS}_2Fhub`;
    const stream = await until("the relay's stream", () => streamOrAbsent(nats.url, name));
    expect(stream.config.max_bytes).toBe(64 * MI);
    const relay = await until("the stream in status", () => {
      const r = get("relay", "hub");
      return r?.status?.stream ? r : undefined;
    });
    expect(relay.status.stream.maxBytes).toBe(64 * MI);
    expect(condition(relay, "StreamReady")).toMatchObject({ status: "True" });
    await until("hub's manifest", () => get("configmap", "hub-manifest"));
    const spec = manifestOf("hub").spec;
    expect(spec.retention.maxBytes).toBe(64 * MI);
    expect(spec.limits).toMatchObject({ maxMessageBytes: 2_000_000, perAgentBytesPerHour: 1024 * MI });
    expect(spec.publishers.limits.perSenderBytesPerHour).toBe(500_000);
  });

  it("make an Agent's runtime, run from what the operator rendered, create its inbox stream of that many bytes", {
    timeout: 120_000,
  }, async () => {
    apply(agentYaml("ana", "{maxBytes: 64Mi, maxMessageBytes: 512Ki}"));
    await until("ana's Deployment", () => get("deployment", "ana"));
    expect(manifestOf("ana").spec.inbox).toMatchObject({ maxBytes: 64 * MI, maxMessageBytes: 512 * 1024 });
    const [port, metricsPort] = [await freePort(), await freePort()];
    const runtime = runDeploymentLocally(cp, NS, "ana", dir, onLoopback(port, metricsPort));
    running.push(runtime);
    await runtime.listening();
    const inbox = agentNames(`${NS}/ana`).inboxStream;
    const stream = await until("ana's inbox stream", () => streamOrAbsent(nats.url, inbox), 60_000);
    expect(stream.config.max_bytes).toBe(67108864);
  });
});
