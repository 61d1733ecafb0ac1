// status.summary on a real control plane, read by the operator from a real nats-server where a
// real agent runtime keeps its inbox, outbox and last error: what `kubectl get` shows, and no
// status write while nothing changes.
import { jetstream } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startControlPlane, type ControlPlane } from "../../../e2e/support/controlplane.ts";
import { startNats, type NatsServer } from "../../../e2e/support/nats.ts";
import { localhostTls } from "../../../e2e/support/tls.ts";
import { consistently } from "../../../e2e/support/wait.ts";
import { relayNames } from "../../../runtime/src/contract/relay-stream.ts";
import { LocalApiClient } from "../../../runtime/src/client/local.ts";
import { runAgent, startHandler, type Tls } from "../../../runtime/test/support/agent-harness.ts";
import { identity, peerOf, signed } from "../../../runtime/test/support/fixtures.ts";
import { startManager, type RunningManager } from "../../src/commands/manager.ts";
import { capturedLog, getOrAbsent, kubectlOrError, perTest, until } from "../support/helpers.ts";

let cp: ControlPlane;
let nats: NatsServer;
let tls: Tls;
let manager: RunningManager;
const NS = "traffic";
const operatorLog = capturedLog(400);
const settings = {
  runtimeImage: "ghcr.io/ifp-dev/ifp-runtime:test",
  runtimeImagePullPolicy: "IfNotPresent",
  natsUrl: "nats://nats.test:4222",
};

beforeAll(async () => {
  [cp, nats, tls] = await Promise.all([
    startControlPlane({ crds: ["crds/agents.ifp.dev.yaml", "crds/relays.ifp.dev.yaml"], controllerManager: false }),
    startNats(),
    localhostTls(),
  ]);
  cp.kubectl(["create", "namespace", NS]);
  manager = await startManager({
    kubeconfig: cp.kubeconfig,
    settings,
    nats: { url: nats.url },
    watchNamespaces: [NS],
    resyncMs: 60_000,
    summaryIntervalMs: 300,
    log: operatorLog.log,
  });
  await manager.started;
}, 300_000);
afterAll(async () => {
  await manager?.stop();
  await Promise.all([cp?.stop(), nats?.close()]);
});
perTest(() =>
  [
    "operator log:",
    ...operatorLog.lines().slice(-80),
    "agents and relays:",
    kubectlOrError(cp, ["-n", NS, "get", "agents,relays", "-o", "wide"]),
  ].join("\n"),
);

const summaryOf = (kind: string, name: string) => getOrAbsent(cp, ["-n", NS, "get", kind, name])?.status?.summary;
const resourceVersion = (kind: string, name: string) =>
  getOrAbsent(cp, ["-n", NS, "get", kind, name])?.metadata.resourceVersion;

describe("status.summary", () => {
  it("shows an Agent's accepted messages, backlog and last error in kubectl get, written only when they change", async () => {
    const self = identity("summary-agent");
    const peer = identity("summary-peer");
    let answer = 503;
    const handler = await startHandler(() => answer);
    cp.kubectl(
      ["apply", "-f", "-"],
      `apiVersion: ifp.dev/v1alpha1\nkind: Agent\nmetadata: {name: counted, namespace: ${NS}}\nspec: {agentId: ${self.agentId}}\n`,
    );
    // The runtime the operator would run for it, on the same NATS: a handler that refuses for now,
    // and a peer nobody answers for, given up after a second.
    const agent = await runAgent({
      self,
      natsUrl: nats.url,
      tls,
      spec: {
        peers: [peerOf(peer), { ...peerOf(identity("gone-peer")), url: "https://localhost:1" }],
        handler: { url: handler.url },
        outbound: { backoff: ["200ms"], retryFor: "1s" },
      },
      resource: { name: "counted", namespace: NS },
    });
    try {
      // The first sample is the base: nothing accepted yet.
      await until("a first summary", () => summaryOf("agent", "counted")?.acceptedLastHour === 0, 30_000);
      for (let i = 0; i < 3; i++) expect((await agent.post(signed(peer, self.agentId))).status).toBe(202);
      await until(
        "three accepted, waiting for the handler",
        () => {
          const s = summaryOf("agent", "counted");
          return s?.acceptedLastHour === 3 && s.backlog === 3;
        },
        30_000,
      );
      const table = cp.kubectl(["-n", NS, "get", "agent", "counted"]);
      expect(table.split("\n")[0]).toMatch(/ACCEPTED 1H\s+BACKLOG/);
      expect(table.split("\n")[1]).toMatch(/\s3\s+3\s/);

      // The handler takes them; a message to the peer nobody answers for is given up.
      answer = 200;
      await new LocalApiClient(agent.localApiUrl).send({ to: "gone-peer", text: "nobody there" });
      await until(
        "backlog gone and the last error shown",
        () => {
          const s = summaryOf("agent", "counted");
          return s?.backlog === 0 && /^Undeliverable: message \S+ to gone-peer: /.test(s.lastError ?? "");
        },
        30_000,
      );
      const s = summaryOf("agent", "counted");
      expect(Date.parse(s.lastErrorTime)).toBeGreaterThan(Date.now() - 60_000);
      // The default view, not only -o wide.
      const shown = cp.kubectl(["-n", NS, "get", "agent", "counted"]).split("\n");
      expect(shown[0]).toMatch(/BACKLOG\s+LAST ERROR\s+AGE/);
      expect(shown[1]).toMatch(/\s0\s+Undeliverable: message \S+ to gone-peer: /);

      // Nothing changes: the operator samples every 300 ms and writes nothing.
      const rv = resourceVersion("agent", "counted");
      await consistently(
        "no status write while the traffic stands still",
        () => resourceVersion("agent", "counted") === rv,
        2_000,
      );
    } finally {
      await agent.close();
      await handler.close();
    }
  });

  it("shows a Relay's stored copies and backlog, and its last error", async () => {
    cp.kubectl(
      ["apply", "-f", "-"],
      `apiVersion: ifp.dev/v1alpha1\nkind: Relay\nmetadata: {name: hub, namespace: ${NS}}\nspec: {url: "https://hub.example"}\n`,
    );
    const names = relayNames({
      metadata: { name: "hub", namespace: NS },
      spec: { url: "https://hub.example" },
    } as never);
    await until("a first summary", () => summaryOf("relay", "hub")?.acceptedLastHour === 0, 30_000);
    // Copies as the relay runtime stores them, and the last error it leaves in its bucket.
    const nc = await connect({ servers: nats.url });
    try {
      const js = jetstream(nc);
      for (const id of ["m1", "m2"])
        await js.publish(names.copy("bob-agent", id), JSON.stringify(signed(identity("alice-agent"), "bob-agent")));
      const { Kvm } = await import("@nats-io/kv");
      const kv = await new Kvm(nc).create(names.kvBucket, { history: 1 });
      await kv.put(
        "last_error",
        JSON.stringify({
          at: new Date().toISOString(),
          reason: "PushGivenUp: message m0 to bob-agent: webhook answered 410",
        }),
      );
    } finally {
      await nc.close();
    }
    await until(
      "two stored, waiting, and the error",
      () => {
        const s = summaryOf("relay", "hub");
        return (
          s?.acceptedLastHour === 2 &&
          s.backlog === 2 &&
          s.lastError === "PushGivenUp: message m0 to bob-agent: webhook answered 410"
        );
      },
      30_000,
    );
    const shown = cp.kubectl(["-n", NS, "get", "relay", "hub"]).split("\n");
    expect(shown[0]).toMatch(/ACCEPTED 1H\s+BACKLOG\s+LAST ERROR\s+AGE/);
    expect(shown[1]).toMatch(/\s2\s+2\s+PushGivenUp: message m0 to bob-agent: webhook answered 410\s/);
  });
});
