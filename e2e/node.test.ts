// The runtime image on a real Kubernetes node (npm run e2e:node): the control plane of the
// other e2e tests plus a real kubelet, containerd, kube-proxy and CoreDNS on this machine
// (e2e/support/node.ts), the image built without a Docker engine (e2e/images/build.ts). The
// Deployment and Service are the ones the operator renders for an Agent; a second pod reaches
// the agent over HTTPS through the Service by its DNS names.
import { generateKeyPairSync, randomUUID } from "node:crypto";
import { request } from "node:https";
import { afterAll, beforeAll, describe, expect, it, onTestFailed } from "vitest";
import { renderManifest, runtimeDeployment, runtimeService, runtimeServiceAccount, serviceDnsNames, childNames, type Owner } from "../operator/src/controllers/runtime.ts";
import { buildImage, type BuiltImage } from "./images/build.ts";
import { startControlPlane, type ControlPlane } from "./support/controlplane.ts";
import { startNats, type NatsServer } from "./support/nats.ts";
import { realNodeUnsupported, startNode, type RealNode } from "./support/node.ts";
import { waitFor } from "./support/ports.ts";
import { createCA, type CertificateAuthority } from "./support/tls.ts";

// Not part of `npm test` yet: it changes the host's network (a bridge, iptables rules, two
// sysctls, all undone at the end) and builds the node's tools on first use.
const unsupported = process.env.IFP_E2E_NODE === "1" ? realNodeUnsupported() : "it runs with npm run e2e:node (IFP_E2E_NODE=1)";
if (unsupported) process.stderr.write(`e2e/node.test.ts skipped: ${unsupported}\n`);

const NS = "ifp-node-e2e";
const AGENT = "alice";

describe.skipIf(unsupported !== undefined)("the runtime image on a real node", () => {
  let cp: ControlPlane;
  let node: RealNode;
  let nats: NatsServer;
  let runtimeImage: BuiltImage;
  let ca: CertificateAuthority;
  let failed = false;
  const timings: Record<string, number> = {};
  const timed = async <T,>(what: string, fn: () => Promise<T> | T): Promise<T> => {
    const t = Date.now();
    try {
      return await fn();
    } finally {
      timings[what] = Math.round((Date.now() - t) / 100) / 10;
    }
  };
  const pod = (name: string) => cp.tryJson(["-n", NS, "get", "pod", name]);
  const diagnose = () => {
    let logs = "";
    try {
      logs = cp.kubectl(["-n", NS, "logs", "-l", `app.kubernetes.io/instance=${AGENT}`, "--tail=30"]);
    } catch (err) {
      logs = (err as Error).message;
    }
    return `${cp.kubectl(["get", "pods,events", "-A", "-o", "wide"])}\n--- agent log\n${logs}\n${node.logTail(2000)}`;
  };

  beforeAll(async () => {
    const pause = await timed("pause image", () => buildImage("pause"));
    runtimeImage = await timed("runtime image", () => buildImage("runtime"));
    cp = await timed("control plane", () => startControlPlane({}));
    node = await timed("node", () => startNode(cp, { sandboxImage: pause }));
    await timed("image import", () => node.importImage(runtimeImage));
    // nats-server on the node's bridge address: the pods' way to a process of the host.
    nats = await startNats({ host: node.hostIP });
    ca = await createCA("ifp node e2e CA");
  }, 20 * 60_000);

  afterAll(async () => {
    if (failed && node) process.stderr.write(`e2e/node.test.ts: logs of the real node kept in ${node.keepLogs()}\n`);
    await node?.stop();
    await Promise.all([cp?.stop(), nats?.close()]);
    process.stderr.write(`e2e/node.test.ts timings (s): ${JSON.stringify(timings)}\n`);
  }, 5 * 60_000);

  it("runs an agent from the runtime image, Ready, and serves it through its Service by DNS name", async () => {
    onTestFailed(() => {
      failed = true;
    });
    const owner: Owner = { kind: "Agent", metadata: { name: AGENT, namespace: NS, uid: randomUUID() } };
    const agent = {
      apiVersion: "ifp.dev/v1alpha1",
      kind: "Agent",
      metadata: owner.metadata,
      spec: { agentId: "alice-agent", displayName: "Alice on a real node", capabilities: [{ name: "message.reply", description: "Replies" }] },
    };
    const names = childNames(AGENT);
    const serving = await ca.issue({ commonName: AGENT, dnsNames: serviceDnsNames(owner) });
    const signing = generateKeyPairSync("ed25519").privateKey.export({ format: "pem", type: "pkcs8" }).toString();
    // What the operator applies for an Agent, less the owner references (no Agent object exists
    // here for the garbage collector to find).
    const bare = <T extends { metadata?: { ownerReferences?: unknown } }>(o: T): T => {
      delete o.metadata!.ownerReferences;
      return o;
    };
    const deployment = bare(runtimeDeployment({
      owner,
      mode: "agent",
      replicas: 1,
      image: runtimeImage.ref,
      settings: { runtimeImage: runtimeImage.ref, runtimeImagePullPolicy: "Never", natsUrl: nats.url },
      tlsSecret: names.tlsSecret,
      signingSecret: names.signingSecret,
      configHash: "e2e",
    }));
    const objects = [
      { apiVersion: "v1", kind: "Namespace", metadata: { name: NS } },
      { apiVersion: "v1", kind: "ConfigMap", metadata: { name: names.configMap, namespace: NS }, data: { "manifest.yaml": renderManifest(agent) } },
      { apiVersion: "v1", kind: "Secret", metadata: { name: names.tlsSecret, namespace: NS }, type: "kubernetes.io/tls", stringData: { "tls.crt": serving.cert, "tls.key": serving.key } },
      { apiVersion: "v1", kind: "Secret", metadata: { name: names.signingSecret, namespace: NS }, stringData: { "signing.key": signing } },
      { apiVersion: "v1", kind: "ConfigMap", metadata: { name: "test-ca", namespace: NS }, data: { "ca.crt": ca.cert } },
      bare(runtimeServiceAccount(owner, false)),
      deployment,
      bare(runtimeService(owner)),
    ];
    cp.kubectl(["apply", "-f", "-"], JSON.stringify({ apiVersion: "v1", kind: "List", items: objects }));

    // The agent's pod: scheduled on the real node, Running and Ready (its readiness probe is
    // /readyz over HTTPS, which needs the NATS server on the host).
    const agentPod = await waitFor("the agent's pod to be Ready", () => {
      const pods = cp.tryJson(["-n", NS, "get", "pods", "-l", `app.kubernetes.io/instance=${AGENT}`])?.items ?? [];
      return pods.find((p: any) => p.status?.phase === "Running" && p.status.conditions?.some((c: any) => c.type === "Ready" && c.status === "True"));
    }, 180_000, 1000).catch((err) => {
      throw new Error(`${err.message}\n${diagnose()}`);
    });
    expect(agentPod.spec.nodeName).toBe(node.name);
    expect(agentPod.status.podIP).toMatch(/^10\.85\.0\./);
    expect(agentPod.status.containerStatuses[0].image).toContain(runtimeImage.ref.split(":")[0]);
    // Its log, through the API server and the kubelet: the agent reached NATS and is serving.
    const log = cp.kubectl(["-n", NS, "logs", agentPod.metadata.name]);
    expect(log).toMatch(/"agent ready"/);
    expect(log).toMatch(/"agentId":"alice-agent"/);

    // The Service's ClusterIP, from the host through kube-proxy's rules.
    const svc = cp.json(["-n", NS, "get", "service", names.service]);
    const fromHost = await waitFor("the Service to answer from the host", () => getThroughService(svc.spec.clusterIP, `${AGENT}.${NS}.svc`, ca.cert).catch(() => undefined), 60_000, 1000);
    expect(fromHost.status).toBe(200);
    expect(JSON.parse(fromHost.text).agent_id).toBe("alice-agent");

    // Another pod on the node, by the Service's DNS names (CoreDNS), over HTTPS checked
    // against the test CA.
    const urls = [`https://${AGENT}.${NS}.svc.cluster.local/.well-known/agent/capabilities`, `https://${AGENT}/.well-known/agent/capabilities`];
    const client = {
      apiVersion: "v1",
      kind: "Pod",
      metadata: { name: "client", namespace: NS },
      spec: {
        restartPolicy: "Never",
        securityContext: { runAsNonRoot: true, runAsUser: 10001, runAsGroup: 10001 },
        containers: [
          {
            name: "client",
            image: runtimeImage.ref,
            imagePullPolicy: "Never",
            command: ["node", "--input-type=module", "-e", CLIENT_SCRIPT],
            env: [
              { name: "URLS", value: JSON.stringify(urls) },
              { name: "NODE_EXTRA_CA_CERTS", value: "/etc/test-ca/ca.crt" },
            ],
            volumeMounts: [{ name: "ca", mountPath: "/etc/test-ca", readOnly: true }],
          },
        ],
        volumes: [{ name: "ca", configMap: { name: "test-ca" } }],
      },
    };
    cp.kubectl(["apply", "-f", "-"], JSON.stringify(client));
    const done = await waitFor("the client pod to finish", () => {
      const p = pod("client");
      return ["Succeeded", "Failed"].includes(p?.status?.phase) ? p : undefined;
    }, 180_000, 1000).catch((err) => {
      throw new Error(`${err.message}\n${diagnose()}`);
    });
    const terminated = done.status.containerStatuses[0].state.terminated;
    expect(done.status.phase, `client pod: ${terminated?.message}\n${diagnose()}`).toBe("Succeeded");
    const results = JSON.parse(terminated.message) as Record<string, any>;
    for (const url of urls) {
      expect(results[url], url).toMatchObject({ status: 200, agent_id: "alice-agent", resolved: svc.spec.clusterIP });
    }
    expect(results.node, "the image's Node").toMatch(/^v24\./);
  }, 8 * 60_000);
});

/** GET the capability document from a ClusterIP, presenting `host` for SNI and Host. */
function getThroughService(ip: string, host: string, ca: string): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: ip, port: 443, path: "/.well-known/agent/capabilities", servername: host, headers: { host }, ca, timeout: 5000 }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString("utf8") }));
    });
    req.on("timeout", () => req.destroy(new Error("timeout")));
    req.on("error", reject);
    req.end();
  });
}

/**
 * The client pod: for each URL, resolve its host (the cluster's DNS) and GET it, retrying while
 * kube-proxy and CoreDNS catch up; the results go to the termination message.
 */
const CLIENT_SCRIPT = `
import { writeFileSync } from "node:fs";
import { lookup } from "node:dns/promises";
const results = { node: process.version };
for (const url of JSON.parse(process.env.URLS)) {
  for (let attempt = 1; ; attempt++) {
    try {
      const { address } = await lookup(new URL(url).hostname, { family: 4 });
      const res = await fetch(url, { signal: AbortSignal.timeout(5000) });
      const body = await res.json();
      results[url] = { status: res.status, agent_id: body.agent_id, resolved: address };
      break;
    } catch (err) {
      if (attempt >= 30) { results[url] = { error: String(err?.cause?.message ?? err?.message ?? err) }; break; }
      await new Promise((r) => setTimeout(r, 2000));
    }
  }
}
writeFileSync("/dev/termination-log", JSON.stringify(results));
process.exitCode = JSON.parse(process.env.URLS).every((u) => results[u].status === 200) ? 0 : 1;
`;
