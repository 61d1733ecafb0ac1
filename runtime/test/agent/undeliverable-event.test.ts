import { writeFileSync } from "node:fs";
import { join } from "node:path";
import pino from "pino";
import { afterAll, beforeAll, expect, it } from "vitest";
import { stringify } from "yaml";
import { startControlPlane, type ControlPlane } from "../../../e2e/support/controlplane.ts";
import { startNats, type NatsServer } from "../../../e2e/support/nats.ts";
import { localhostTls } from "../../../e2e/support/tls.ts";
import { waitFor } from "../../../e2e/support/ports.ts";
import { httpsRequest } from "../../../e2e/support/https.ts";
import { startAgent } from "../../src/agent/main.ts";
import { LocalApiClient } from "../../src/client/local.ts";
import { identity, peerOf, tempDir, writeKey } from "../support/fixtures.ts";

let cp: ControlPlane;
let nats: NatsServer;
beforeAll(async () => {
  [cp, nats] = await Promise.all([
    startControlPlane({ crds: ["crds/agents.ifp.dev.yaml"], controllerManager: false }),
    startNats(),
  ]);
  cp.kubectl(["create", "namespace", "team"]);
}, 300_000);
afterAll(async () => {
  await Promise.all([cp?.stop(), nats?.close()]);
});

it("records a Warning Event on the Agent when a message becomes undeliverable", async () => {
  const self = identity("eventful-agent");
  const dir = tempDir();
  const tls = await localhostTls();
  const resource = {
    apiVersion: "ifp.dev/v1alpha1",
    kind: "Agent",
    metadata: { name: "eventful", namespace: "team" },
    spec: {
      agentId: "eventful-agent",
      peers: [{ ...peerOf(identity("gone")), url: "https://localhost:1" }],
      outbound: { backoff: ["200ms"], retryFor: "1s" },
    },
  };
  cp.kubectl(["apply", "-f", "-"], stringify(resource));
  const uid = cp.json(["-n", "team", "get", "agent", "eventful"]).metadata.uid;
  const manifest = join(dir, "agent.yaml");
  writeFileSync(manifest, stringify({ ...resource, metadata: { ...resource.metadata, uid } }));
  const agent = await startAgent({
    manifest,
    port: 0,
    host: "127.0.0.1",
    tlsCert: tls.files.cert,
    tlsKey: tls.files.key,
    signingKey: writeKey(dir, self),
    nats: { url: nats.url },
    kubeconfig: cp.kubeconfig,
    localApiPort: 0,
    logger: pino({ level: "silent" }),
  });
  try {
    await waitFor("ready", async () => (await httpsRequest(`${agent.url}/readyz`, { ca: tls.ca })).status === 200);
    const sent = await new LocalApiClient(agent.localApiUrl).send({ to: "gone", text: "is anyone there?" });
    const event = await waitFor(
      "the Event",
      () =>
        cp
          .json(["-n", "team", "get", "events", "--field-selector", "involvedObject.name=eventful"])
          .items.find((e: any) => e.reason === "Undeliverable"),
      30_000,
      250,
    );
    expect(event).toMatchObject({ type: "Warning", involvedObject: { kind: "Agent", name: "eventful", uid } });
    expect(event.message).toContain(sent.message_id);
  } finally {
    await agent.close();
  }
});
