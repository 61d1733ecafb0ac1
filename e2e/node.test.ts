// The product on a real Kubernetes node, installed as a user installs it: the control plane of
// the other e2e tests on the node's bridge address, a real kubelet, containerd, kube-proxy and
// CoreDNS on this machine (e2e/support/node.ts), and then only what users do, as
// docs/install.md says: a release (`npm run release`, e2e/release/release.ts, of the commit
// checked out) published to a registry (`npm run release -- --publish`, to crane's registry on
// loopback): its images, their signatures and provenance, and its chart; `cosign verify` and
// `cosign verify-attestation` of each image; the node's containerd configured for that registry
// as a cluster admin configures a private one (a hosts.toml), and pulling every image from it
// by digest (NATS and pause, which the release does not bring, copied there as to a mirror);
// `helm install` of the chart from the registry (oci://) with `global.imageRegistry` naming it,
// `kubectl apply` of examples/ (their images from that registry), pods that talk to the agents
// over the network, `helm test`. Nothing is imported into the node. The operator runs
// as the chart's pod and reaches the API server in-cluster (the `kubernetes` Service through
// kube-proxy); NATS is the chart's StatefulSet on a volume of the node's default StorageClass.
//
// Part of `npm test`; skipped with one line where the machine cannot run a node, or with
// IFP_E2E_NODE=0.
import { execFile, spawn, spawnSync } from "node:child_process";
import { generateKeyPairSync, randomUUID } from "node:crypto";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { verifyAgentCardSignature } from "@a2a-js/sdk";
import canonicalize from "canonicalize";
import { flattenedVerify, importJWK } from "jose";
import { afterAll, beforeAll, describe, expect, it, onTestFailed } from "vitest";
import { parseAllDocuments } from "yaml";
import { buildImage, IMAGES, type BuiltImage } from "./images/build.ts";
import { releaseOfHead } from "./release/of-head.ts";
import { RELEASED_IMAGES, type Release } from "./release/release.ts";
import { pushArchive } from "./release/sign.ts";
import { startControlPlane, type ControlPlane } from "./support/controlplane.ts";
import { EXAMPLES_NAMESPACES_FILE, exampleNamespaces } from "./support/examples.ts";
import { installBlock, OFFLINE_COSIGN_ENV, sh, verifiedDigests } from "./support/install-docs.ts";
import { createNode, nodeTestUnsupported, type RealNode } from "./support/node.ts";
import { restartedContainers } from "./support/restarts.ts";
import { fileTimings } from "./support/timings.ts";
import { type Registry, startRegistry } from "./support/registry.ts";
import { waitFor } from "./support/ports.ts";
import { createCA } from "./support/tls.ts";
import { toolPath } from "./tools/tools.ts";

const unsupported = nodeTestUnsupported();
if (unsupported) process.stderr.write(`e2e/node.test.ts skipped: ${unsupported}\n`);

/** Where the release is published in the registry: HOST/NAMESPACE, as `npm run release -- --publish … --to`. */
const NAMESPACE = "ifp-dev";
/** The kubectl plugin, `kubectl ifp` when on the PATH as kubectl-ifp. */
const PLUGIN = fileURLToPath(new URL("../operator/bin/kubectl-ifp.ts", import.meta.url));
const SYSTEM = "ifp-system";
const RELEASE = "ifp";
/** The chart's full name for the release above: <release>-<chart>, as the release name does not hold the chart's. */
const FULL = `${RELEASE}-ifp-operator`;
/** Where examples/ without a namespace go (the namespace their URLs name). */
const EXAMPLES_NS = "ifp-examples";

type Obj = Record<string, any>;

/** Run a program without blocking the event loop; rejects with its output on failure. */
function run(cmd: string, args: string[], timeoutMs: number, env?: NodeJS.ProcessEnv): Promise<string> {
  return new Promise((resolve, reject) =>
    execFile(
      cmd,
      args,
      { timeout: timeoutMs, maxBuffer: 64 * 1024 * 1024, env: env ?? process.env },
      (err, stdout, stderr) =>
        err
          ? reject(new Error(`${cmd} ${args.join(" ")} failed (${err.code ?? err.signal}): ${stderr || stdout}`))
          : resolve(stdout),
    ),
  );
}

/** The examples as a user applies them: each document in its own namespace, else EXAMPLES_NS. */
function exampleDocs(): { file: string; doc: Obj; namespace: string }[] {
  const dir = new URL("../examples/", import.meta.url);
  return readdirSync(dir)
    .filter((f) => f.endsWith(".yaml"))
    .sort()
    .flatMap((file) =>
      parseAllDocuments(readFileSync(new URL(file, dir), "utf8")).map((d) => ({ file, doc: d.toJSON() as Obj })),
    )
    .filter(({ doc }) => doc?.kind)
    .map((d) => ({ ...d, namespace: d.doc.kind === "Namespace" ? "" : (d.doc.metadata?.namespace ?? EXAMPLES_NS) }));
}

/** The example application's container as the examples declare it (image, resources, security context), without its settings. */
function exampleApp(): Obj {
  const alice = exampleDocs().find((d) => d.doc.kind === "Agent" && d.doc.spec.deployment?.sidecars?.length)!;
  const { env: _env, ...container } = alice.doc.spec.deployment.sidecars[0];
  return container;
}

/**
 * The namespaces of the test's own Agents (besides the examples'): created before the install and
 * listed in watchNamespaces with the examples' ones, as a user lists the namespaces they use.
 */
const OWN_NAMESPACES = { ownCA: "ifp-own-ca", relayed: "ifp-relayed" } as const;

/** An Ed25519 signing key of the user's own: the PEM of its Secret and its public key for peers. */
function signingKey(name: string): { name: string; pem: string; publicKey: string } {
  const { privateKey, publicKey } = generateKeyPairSync("ed25519");
  return {
    name,
    pem: privateKey.export({ type: "pkcs8", format: "pem" }).toString(),
    publicKey: publicKey.export({ format: "jwk" }).x!,
  };
}

/** The Secret a user makes for an Agent's signing key, labelled for that Agent. */
const signingSecret = (k: { name: string; pem: string }, namespace: string): Obj => ({
  apiVersion: "v1",
  kind: "Secret",
  metadata: { name: `${k.name}-signing-key`, namespace, labels: { "ifp.dev/agent": k.name } },
  stringData: { "signing.key": k.pem },
});

/** The example application as a sidecar (the handler on the pod's loopback), with its settings. */
const withApp = (env: Obj[]) => ({
  handler: { url: "http://127.0.0.1:8080" },
  deployment: { sidecars: [{ ...exampleApp(), env }] },
});

const readyCondition = (o: Obj | undefined) =>
  o?.status?.conditions?.find((c: Obj) => c.type === "Ready")?.status === "True";
const podReady = (p: Obj) => p.status?.phase === "Running" && readyCondition(p);

describe.skipIf(unsupported !== undefined)("the chart and the examples on a real node", () => {
  let cp: ControlPlane;
  let node: RealNode;
  /**
   * Every image the node runs, by its kind (runtime, operator, app, nats, pause): its reference by
   * digest in the registry (<registry>/ifp-dev/<name>@sha256:… for the release's), and its archive.
   */
  const images: Record<string, BuiltImage> & Record<"pause" | "runtime" | "operator" | "nats", BuiltImage> = {} as any;
  /** The release installed, published to `registry`. */
  let released: Release;
  /** The loopback registry the release is published to and the node pulls from. */
  let registry: Registry;
  /** The tags NATS and pause are copied to the registry under. */
  const mirrorTags: Record<string, string> = {};
  let helmEnv: NodeJS.ProcessEnv;
  let failed = false;
  const { timed, print: printTimings } = fileTimings("e2e/node.test.ts");
  const helm = (args: string[], timeoutMs: number) =>
    run(toolPath("helm"), [...args, "--kubeconfig", cp.kubeconfig], timeoutMs, helmEnv);
  /**
   * The chart's values a user sets to run the release's images from a registry of their own:
   * `global.imageRegistry` (the digests come with the packaged chart); NATS, which the release
   * does not bring, by the tag and digest of its copy in that registry (docs/install.md, Images
   * by digest, through a mirror).
   */
  const imageValues = () => {
    return [
      `global.imageRegistry=${registry.host}`,
      `nats.image.tag=${mirrorTags.nats}`,
      `nats.image.digest=${images.nats.ref.split("@")[1]}`,
    ].flatMap((s) => ["--set", s]);
  };
  /**
   * An example as a user applies it on a cluster without access to the public registry: each
   * container image that is one of the project's images (the same name, e.g. …/ifp-app:1.0)
   * names that image in the user's registry instead, by digest. Nothing else changes.
   */
  const withRegistryImages = (doc: Obj): Obj =>
    JSON.parse(JSON.stringify(doc), (_key, value) => {
      if (
        value &&
        typeof value === "object" &&
        !Array.isArray(value) &&
        typeof value.image === "string" &&
        typeof value.name === "string"
      ) {
        const name = /([^/:@]+)(?:[:@][^/]*)?$/.exec(value.image)?.[1];
        const local = Object.values(images).find((img) => img.ref.split("/").pop()!.split(/[:@]/)[0] === name);
        if (local) return { ...value, image: local.ref };
      }
      return value;
    });
  const diagnose = () => {
    const safe = (fn: () => string) => {
      try {
        return fn();
      } catch (err) {
        return (err as Error).message;
      }
    };
    return [
      safe(() => cp.kubectl(["get", "pods,pvc,events", "-A", "-o", "wide"])),
      `--- operator log\n${safe(() => cp.kubectl(["-n", SYSTEM, "logs", "-l", "app.kubernetes.io/component=operator", "--tail=40"]))}`,
      restartedContainers(cp),
      node.logTail(1500),
    ].join("\n");
  };
  // The failure is said again after the diagnosis: a report that keeps only the tail of a long
  // output still shows what went wrong.
  const withDiagnosis = <T>(p: Promise<T>) =>
    p.catch((err) => {
      const message = (err as Error).message;
      throw new Error(`${message}\n${diagnose()}\n--- the failure, again:\n${message}`);
    });
  const pods = (ns: string, selector?: string): Obj[] =>
    cp.json(["-n", ns, "get", "pods", ...(selector ? ["-l", selector] : [])]).items;

  /** Apply an object of the test's own, its images named in the user's registry. */
  const apply = (o: Obj) => cp.kubectl(["apply", "-f", "-"], JSON.stringify(withRegistryImages(o)));
  /**
   * The first half of the user's-CA test, applied with the install (so that carol starts beside
   * the examples' pods, not after them): the CA, carol's Secret and carol; dave is the test's.
   */
  const startOwnCA = async () => {
    // What a user does: a CA of their own, a kubernetes.io/tls Secret for the receiving agent
    // (spec.tls.secretName), the CA in a ConfigMap the sending agent names in spec.tls.trust.
    const ns = OWN_NAMESPACES.ownCA;
    const ca = await createCA("ifp node e2e user CA");
    const leaf = await ca.issue({
      commonName: "carol",
      dnsNames: ["carol", `carol.${ns}`, `carol.${ns}.svc`, `carol.${ns}.svc.cluster.local`],
    });
    const [carol, dave] = [signingKey("carol"), signingKey("dave")];
    const app = withApp;
    const tag = randomUUID().slice(0, 8);
    const greeting = `Hello carol, from dave (${tag})`;
    const objects: Obj[] = [
      { apiVersion: "v1", kind: "Namespace", metadata: { name: ns } },
      {
        apiVersion: "v1",
        kind: "Secret",
        metadata: { name: "carol-tls", namespace: ns, labels: { "ifp.dev/agent": "carol" } },
        type: "kubernetes.io/tls",
        stringData: { "tls.crt": leaf.cert, "tls.key": leaf.key },
      },
      { apiVersion: "v1", kind: "ConfigMap", metadata: { name: "own-ca", namespace: ns }, data: { "ca.crt": ca.cert } },
      ...[carol, dave].map((k) => signingSecret(k, ns)),
      {
        apiVersion: "ifp.dev/v1alpha1",
        kind: "Agent",
        metadata: { name: "carol", namespace: ns },
        spec: {
          agentId: "carol-agent",
          tls: { secretName: "carol-tls" },
          signing: { secretName: "carol-signing-key" },
          peers: [
            {
              agentId: "dave-agent",
              url: `https://dave.${ns}.svc`,
              keys: [{ keyId: "key-1", publicKey: dave.publicKey }],
            },
          ],
          ...app([]),
        },
      },
      {
        apiVersion: "ifp.dev/v1alpha1",
        kind: "Agent",
        metadata: { name: "dave", namespace: ns },
        spec: {
          agentId: "dave-agent",
          tls: { trust: [{ configMapRef: { name: "own-ca" } }] },
          signing: { secretName: "dave-signing-key" },
          peers: [
            {
              agentId: "carol-agent",
              url: `https://carol.${ns}.svc`,
              keys: [{ keyId: "key-1", publicKey: carol.publicKey }],
            },
          ],
          ...app([
            { name: "IFP_APP_GREET", value: "carol-agent" },
            { name: "IFP_APP_GREET_TEXT", value: greeting },
          ]),
        },
      },
    ];
    // carol first, Ready before dave greets her (else the greeting waits for dave's next attempt, a minute later).
    for (const o of objects.slice(0, -1)) apply(o);
    return { ns, ca, objects, tag };
  };
  let ownCA: ReturnType<typeof startOwnCA>;
  /**
   * The first half of the relayed test, applied with the install (so that the Relay and grace
   * start beside the examples' pods): the keys, their Secrets, the Relay and grace; frank is the test's.
   */
  const startRelayed = () => {
    // What a user does for agents that cannot be reached directly: a Relay that serves them, each
    // agent reading its mailbox there (spec.relay.urls), and each knowing the other only by its
    // key and that relay (a peer entry with relay.urls and no url). frank's application greets
    // grace; grace's answers; both messages go through the relay's mailboxes.
    const ns = OWN_NAMESPACES.relayed;
    const relayUrl = `https://mailroom.${ns}.svc`;
    const [frank, grace] = [signingKey("frank"), signingKey("grace")];
    const served = (k: typeof frank) => ({
      agentId: `${k.name}-agent`,
      keys: [{ keyId: "key-1", publicKey: k.publicKey }],
    });
    const tag = randomUUID().slice(0, 8);
    const greeting = `Hello grace, from frank through the relay (${tag})`;
    const agent = (k: typeof frank, peer: typeof frank, env: Obj[]): Obj => ({
      apiVersion: "ifp.dev/v1alpha1",
      kind: "Agent",
      metadata: { name: k.name, namespace: ns },
      spec: {
        agentId: `${k.name}-agent`,
        signing: { secretName: `${k.name}-signing-key` },
        relay: { urls: [relayUrl] },
        peers: [{ ...served(peer), relay: { urls: [relayUrl] } }],
        // The user runs this relay in their own cluster: message bodies may cross it in clear.
        encryption: { relayTrust: [{ url: relayUrl, level: "self-operated" }] },
        ...withApp(env),
      },
    });
    const relay: Obj = {
      apiVersion: "ifp.dev/v1alpha1",
      kind: "Relay",
      metadata: { name: "mailroom", namespace: ns },
      spec: { url: relayUrl, agents: [served(frank), served(grace)] },
    };
    for (const k of [frank, grace]) apply(signingSecret(k, ns));
    apply(relay);
    apply(agent(grace, frank, []));
    return { ns, grace, frank, agent, greeting, tag };
  };
  let relayed: ReturnType<typeof startRelayed>;

  beforeAll(async () => {
    // The release of the commit checked out (`npm run release`, unless kept for this commit), made
    // while the node starts: nothing of the node needs it before the install.
    const releasing = timed("release", releaseOfHead);
    releasing.catch(() => {});
    // The images the release does not bring (pause, NATS; cached by their inputs' hash), and the registry.
    await timed("images", () => {
      for (const kind of Object.keys(IMAGES).filter((k) => !RELEASED_IMAGES.some((r) => r.kind === k)))
        images[kind] = buildImage(kind);
    });
    registry = await startRegistry("node");
    const to = `${registry.host}/${NAMESPACE}`;
    await timed("mirror", () => {
      // NATS and pause copied to the registry as to a mirror, under their names and tags; the
      // node pulls them by digest.
      const work = mkdtempSync(join(tmpdir(), "ifp-node-push-"));
      try {
        for (const kind of ["nats", "pause"] as const) {
          const nameAndTag = images[kind].ref.split("/").pop()!;
          mirrorTags[kind] = nameAndTag.split(":")[1]!;
          images[kind] = {
            ref: pushArchive(images[kind].archive, `${registry.host}/${nameAndTag}`, work),
            archive: images[kind].archive,
          };
        }
      } finally {
        rmSync(work, { recursive: true, force: true });
      }
    });
    // The node's containerd pulls from the registry (plain HTTP on loopback, as its hosts.toml says).
    node = await timed("node", () =>
      createNode({
        sandboxImage: images.pause.ref,
        registries: [{ host: registry.host, server: `http://${registry.host}` }],
      }),
    );
    try {
      cp = await timed("control plane", () =>
        startControlPlane({ address: node.hostIP, serviceCIDR: node.serviceCIDR, serviceAccounts: true }),
      );
      await timed("join", () => node.join(cp));
      released = await timed("release, after the join", () => releasing);
      await timed("publish", async () => {
        // As docs/install.md publishes a release signed with a key: images, signatures and
        // provenance, and the chart; then each image verified as its lines say.
        await run("npm", ["run", "release", "--", "--publish", released.dir, "--to", to], 10 * 60_000);
        for (const line of installBlock("cosign verify --key", registry.host)) {
          const m = /^cosign (verify|verify-attestation) .*\/ifp-dev\/([\w-]+):\S+$/.exec(line);
          if (!m) continue;
          const r = await sh(line, released.dir, OFFLINE_COSIGN_ENV);
          if (r.code !== 0) throw new Error(`${line}: exit ${r.code}\n${r.stderr}`);
          const img = released.images.find((i) => i.name === m[2])!;
          expect(verifiedDigests(m[1]!, r.stdout), line).toEqual([img.digest]);
        }
        for (const r of RELEASED_IMAGES) {
          const img = released.images.find((i) => i.name === r.name)!;
          images[r.kind] = { ref: `${to}/${img.name}@${img.digest}`, archive: join(released.dir, img.archive) };
        }
      });
      // helm's configuration and cache in the control plane's directory, not the user's.
      helmEnv = {
        ...process.env,
        HELM_CONFIG_HOME: `${cp.dir}/helm/config`,
        HELM_CACHE_HOME: `${cp.dir}/helm/cache`,
        HELM_DATA_HOME: `${cp.dir}/helm/data`,
      };
      // The examples' namespaces first: the operator watches them (and its own) as the README installs it.
      cp.kubectl(["apply", "-f", EXAMPLES_NAMESPACES_FILE]);
      for (const ns of Object.values(OWN_NAMESPACES)) cp.kubectl(["create", "namespace", ns]);
      const watched = `watchNamespaces={${[...exampleNamespaces(), ...Object.values(OWN_NAMESPACES)].join(",")}}`;
      await timed("helm install", () =>
        withDiagnosis(
          helm(
            [
              "install",
              RELEASE,
              `oci://${registry.host}/${NAMESPACE}/charts/ifp-operator`,
              "--version",
              released.version,
              "--plain-http",
              "-n",
              SYSTEM,
              "--create-namespace",
              "--set",
              watched,
              ...imageValues(),
              "--wait",
              "--timeout",
              "6m",
            ],
            7 * 60_000,
          ),
        ),
      );
      // The Agents and the Relay that two later tests wait for before their own steps, started
      // now beside the examples' pods (their tests apply the rest).
      ownCA = startOwnCA();
      ownCA.catch(() => {});
      relayed = startRelayed();
    } catch (err) {
      failed = true;
      throw err;
    }
  }, 25 * 60_000);

  afterAll(async () => {
    if (failed && node) process.stderr.write(`e2e/node.test.ts: logs of the real node kept in ${node.keepLogs()}\n`);
    await node?.stop();
    await cp?.stop();
    await registry?.stop();
    printTimings(node ? ` (kube-proxy in ${node.proxyMode} mode)` : "");
  }, 5 * 60_000);

  const failing = () =>
    onTestFailed(() => {
      failed = true;
    });

  it("installs the chart: the operator runs from its image and reaches the API server in-cluster; NATS runs on a claimed volume", async () => {
    failing();
    // The `kubernetes` Service leads to the API server at the node's address, through kube-proxy.
    const slices = cp.json([
      "-n",
      "default",
      "get",
      "endpointslices",
      "-l",
      "kubernetes.io/service-name=kubernetes",
    ]).items;
    expect(slices.flatMap((s: Obj) => s.endpoints.flatMap((e: Obj) => e.addresses))).toEqual([node.hostIP]);
    expect(cp.json(["-n", "default", "get", "service", "kubernetes"]).spec.clusterIP).toBe(node.kubernetesServiceIP);

    const [operator] = pods(SYSTEM, "app.kubernetes.io/component=operator");
    expect(operator, diagnose()).toBeDefined();
    expect(podReady(operator!), diagnose()).toBe(true);
    expect(operator!.spec.nodeName).toBe(node.name);
    // The packaged chart's operator image, by the archive's digest, under the user's registry.
    const operatorImage = operator!.spec.containers[0].image;
    expect(operatorImage).toBe(images.operator.ref);
    expect(operatorImage).toMatch(
      new RegExp(`^${registry.host.replace(/\./g, "\\.")}/${NAMESPACE}/ifp-operator@sha256:[0-9a-f]{64}$`),
    );
    expect(operator!.status.containerStatuses[0].imageID, "the image run is the one of that digest").toContain(
      images.operator.ref.split("@")[1],
    );
    expect(operator!.spec.containers[0].args).toContain(`--runtime-image=${images.runtime.ref}`);
    // In-cluster: the service account's token, no kubeconfig; the chart's args only.
    const container = operator!.spec.containers[0];
    expect(container.args.some((a: string) => a.startsWith("--kubeconfig"))).toBe(false);
    expect(operator!.spec.volumes.some((v: Obj) => v.projected?.sources?.some((s: Obj) => s.serviceAccountToken))).toBe(
      true,
    );

    const [nats] = pods(SYSTEM, "app.kubernetes.io/component=nats");
    expect(podReady(nats!), diagnose()).toBe(true);
    // NATS's copy in the registry, by digest: the image the pod names, and the one it runs
    // (containerd reports an image pulled by digest alone under its config's id, the digest in
    // imageID).
    expect(nats!.spec.containers.find((c: Obj) => c.name === "nats").image).toBe(images.nats.ref);
    expect(nats!.status.containerStatuses.find((c: Obj) => c.name === "nats").imageID).toContain(
      images.nats.ref.split("@")[1],
    );
    // TLS only, with the operator's certificate, and the reloader beside the server.
    const reloader = nats!.status.containerStatuses.find((c: Obj) => c.name === "reloader");
    expect(reloader?.ready, diagnose()).toBe(true);
    expect(nats!.spec.containers.find((c: Obj) => c.name === "reloader").image).toBe(images.operator.ref);
    expect(cp.json(["-n", SYSTEM, "get", "secret", `${FULL}-nats-tls`]).data["tls.crt"]).toBeTruthy();
    // Nothing imported: every image the node's containerd holds it pulled from the registry, by digest.
    const held = node
      .ctr(["images", "ls", "-q"])
      .split("\n")
      .filter((r) => r && !r.startsWith("sha256:"));
    expect(held.filter((r) => !r.startsWith(`${registry.host}/`))).toEqual([]);
    expect(held).toEqual(expect.arrayContaining([images.operator.ref, images.nats.ref, images.pause.ref]));
    const claim = cp.json(["-n", SYSTEM, "get", "pvc", `data-${nats!.metadata.name}`]);
    expect(claim.status.phase).toBe("Bound");
    expect(claim.spec.storageClassName).toBe("ifp-node-local");
  }, 60_000);

  it("applies the examples, and the operator makes every Agent and Relay Ready", async () => {
    failing();
    const docs = exampleDocs();
    for (const ns of new Set(docs.map((d) => d.namespace).filter(Boolean))) {
      if (!docs.some((d) => d.doc.kind === "Namespace" && d.doc.metadata.name === ns))
        cp.kubectl(["create", "namespace", ns]);
    }
    // Namespaces first, then the rest, as `kubectl apply -f examples/` would order them.
    for (const { doc, namespace } of [...docs].sort(
      (a, b) => Number(b.doc.kind === "Namespace") - Number(a.doc.kind === "Namespace"),
    )) {
      cp.kubectl(
        ["apply", ...(namespace ? ["-n", namespace] : []), "-f", "-"],
        JSON.stringify(withRegistryImages(doc)),
      );
    }
    const resources = docs.filter((d) => d.doc.kind === "Agent" || d.doc.kind === "Relay");
    expect(resources.length).toBeGreaterThanOrEqual(3);
    await withDiagnosis(
      waitFor(
        `${resources.map((r) => `${r.doc.kind} ${r.namespace}/${r.doc.metadata.name}`).join(", ")} Ready`,
        () =>
          resources.every((r) =>
            readyCondition(cp.tryJson(["-n", r.namespace, "get", r.doc.kind.toLowerCase(), r.doc.metadata.name])),
          ),
        300_000,
        2000,
      ),
    );
    for (const r of resources) {
      const running = pods(r.namespace, `app.kubernetes.io/instance=${r.doc.metadata.name}`).filter(podReady);
      expect(running.length, `${r.doc.kind} ${r.doc.metadata.name}`).toBeGreaterThan(0);
      for (const p of running) expect(p.spec.nodeName).toBe(node.name);
      // The runtime by the release's digest, as the packaged chart told the operator.
      for (const p of running)
        expect(p.spec.containers.find((c: Obj) => c.name === "runtime")?.image).toBe(images.runtime.ref);
      // Each Agent on the chart's default NATS layout, the isolated one; a Relay keeps its own account.
      if (r.doc.kind === "Agent")
        for (const p of running)
          expect(p.spec.containers.find((c: Obj) => c.name === "runtime")?.args, r.doc.metadata.name).toContain(
            "--nats-layout=isolated",
          );
    }
  }, 330_000);

  it("runs every container of the operator, NATS and the runtimes as non-root with a read-only root filesystem", async () => {
    failing();
    const namespaces = [
      SYSTEM,
      ...new Set(
        exampleDocs()
          .map((d) => d.namespace)
          .filter(Boolean),
      ),
    ];
    const checked: string[] = [];
    for (const ns of namespaces) {
      for (const p of pods(ns).filter((x) => x.status?.phase === "Running")) {
        for (const status of p.status.containerStatuses ?? []) {
          // What containerd actually runs (the OCI spec runc was given), not only what the pod asked for.
          const id = String(status.containerID).replace(/^containerd:\/\//, "");
          const spec = JSON.parse(node.ctr(["containers", "info", id])).Spec;
          const what = `${ns}/${p.metadata.name}/${status.name}`;
          expect(spec.process.user.uid, what).toBeGreaterThan(0);
          expect(spec.process.user.gid, what).toBeGreaterThan(0);
          expect(spec.root.readonly, what).toBe(true);
          expect(spec.process.noNewPrivileges, what).toBe(true);
          expect(spec.process.capabilities?.effective ?? [], what).toEqual([]);
          checked.push(what);
        }
      }
    }
    expect(checked.some((c) => c.startsWith(`${SYSTEM}/${FULL}-`))).toBe(true);
    expect(checked.some((c) => c.startsWith(`${SYSTEM}/${FULL}-nats-`))).toBe(true);
    expect(checked.length).toBeGreaterThanOrEqual(5);
  }, 60_000);

  it("carries messages between two agents in two namespaces both ways over HTTPS, from their sidecars, from another pod and through the relay", async () => {
    failing();
    const docs = exampleDocs();
    const agents = docs.filter((d) => d.doc.kind === "Agent");
    // Two agents that know each other as peers, in different namespaces.
    const pair = agents.flatMap((a) =>
      agents
        .filter(
          (b) =>
            b !== a &&
            a.doc.spec.peers?.some((p: Obj) => p.agentId === b.doc.spec.agentId) &&
            b.doc.spec.peers?.some((p: Obj) => p.agentId === a.doc.spec.agentId),
        )
        .map((b) => [a, b] as const),
    )[0];
    expect(pair, "two example Agents that are each other's peers").toBeDefined();
    // a: the agent whose application greets the other at start (IFP_APP_GREET).
    const greets = (x: Obj) =>
      (x.doc.spec.deployment?.sidecars ?? []).some((c: Obj) =>
        (c.env ?? []).some(
          (e: Obj) =>
            e.name === "IFP_APP_GREET" &&
            String(e.value)
              .split(",")
              .includes(pair![x === pair![0] ? 1 : 0].doc.spec.agentId),
        ),
      );
    const [a, b] = greets(pair![0]) ? pair! : [pair![1], pair![0]];
    expect(greets(a), "an example application greets its agent's peer").toBe(true);
    expect(a.namespace, "the two agents live in different namespaces").not.toBe(b.namespace);
    // The agent whose local API is offered to other pods as a Service, as the example declares it.
    const served = [a, b].find((x) => x.doc.spec.localApi?.service?.enabled);
    expect(served, "an example Agent with spec.localApi.service.enabled").toBeDefined();
    const other = served === a ? b : a;

    const relayDoc = docs.find((d) => d.doc.kind === "Relay")!;
    // Through the relay: an agent that reads its mailbox there (spec.relay.urls), and another
    // agent the relay serves, which publishes to it with its signing key.
    const reader = agents.find((x) => x.doc.spec.relay?.urls?.includes(relayDoc.doc.spec.url))!;
    const publisher = agents.find(
      (x) =>
        x !== reader &&
        relayDoc.doc.spec.agents.some((g: Obj) => g.agentId === x.doc.spec.agentId) &&
        x.doc.spec.signing?.secretName,
    )!;
    expect(reader, "an example Agent reading its mailbox on the example Relay").toBeDefined();
    expect(publisher, "an example Agent the example Relay serves, with a signing Secret").toBeDefined();
    const servedByRelay = relayDoc.doc.spec.agents.find((g: Obj) => g.agentId === publisher.doc.spec.agentId);
    const publisherKeyId = {
      agentId: publisher.doc.spec.agentId as string,
      keyId: servedByRelay.keys[0].keyId as string,
    };

    const tag = randomUUID().slice(0, 8);
    const texts = {
      api: `from an application in another pod, through ${served!.doc.spec.agentId}'s local API Service (${tag})`,
      relay: `via the relay to ${reader.doc.spec.agentId} (${tag})`,
    };
    const senders = [
      localApiSender(
        `send-${tag}`,
        served!.namespace,
        served!.doc.metadata.name,
        served!.doc.spec.localApi.service.port ?? 9443,
        images.runtime.ref,
        { to: other.doc.spec.agentId, phase: "greeting", text: texts.api },
      ),
      relayPublisher(
        `relay-${tag}`,
        publisher.namespace,
        publisher.doc.metadata.name,
        publisher.doc.spec.signing.secretName,
        publisherKeyId,
        relayDoc.doc.spec.url,
        images.runtime.ref,
        { to: reader.doc.spec.agentId, text: texts.relay },
      ),
    ];
    for (const s of senders) cp.kubectl(["apply", "-f", "-"], JSON.stringify(s));
    const results = await withDiagnosis(
      Promise.all(
        senders.map((s) =>
          waitFor(
            `pod ${s.metadata.namespace}/${s.metadata.name} to finish`,
            () => {
              const p = cp.tryJson(["-n", s.metadata.namespace, "get", "pod", s.metadata.name]);
              return ["Succeeded", "Failed"].includes(p?.status?.phase) ? p : undefined;
            },
            300_000,
            2000,
          ),
        ),
      ),
    );
    const ids: string[] = [];
    for (const p of results) {
      const message = p.status.containerStatuses[0].state.terminated?.message ?? "";
      expect(
        p.status.phase,
        `${p.metadata.name}: ${message}\n${cp.kubectl(["-n", p.metadata.namespace, "logs", p.metadata.name]).slice(-2000)}`,
      ).toBe("Succeeded");
      ids.push(JSON.parse(message).message_id);
    }

    // The receiving side: what each recipient's application (the sidecar) logged, read through
    // the API server. The greeting of a's application and b's application's answer are the
    // exchange both ways; the others carry the test's text.
    const greeting = a.doc.spec.deployment.sidecars
      .flatMap((c: Obj) => c.env ?? [])
      .find((e: Obj) => e.name === "IFP_APP_GREET_TEXT")?.value as string;
    const expected = [
      {
        to: b,
        what: `the greeting of ${a.doc.spec.agentId}'s application`,
        line: (l: string) =>
          l.includes(`received greeting`) && l.includes(`from ${a.doc.spec.agentId}`) && l.includes(greeting),
      },
      {
        to: a,
        what: `${b.doc.spec.agentId}'s answer`,
        line: (l: string) =>
          l.includes(`from ${b.doc.spec.agentId}`) && l.includes(`Got your greeting message`) && l.includes(greeting),
      },
      {
        to: other,
        what: "the message sent through the local API Service",
        line: (l: string) =>
          l.includes(`from ${served!.doc.spec.agentId}`) && (l.includes(texts.api) || l.includes(ids[0]!)),
      },
      {
        to: reader,
        what: "the message through the relay",
        line: (l: string) =>
          l.includes(`from ${publisher.doc.spec.agentId}`) && (l.includes(texts.relay) || l.includes(ids[1]!)),
      },
    ];
    const appLogs = (x: typeof a) =>
      pods(x.namespace, `app.kubernetes.io/instance=${x.doc.metadata.name}`)
        .map((p) => cp.kubectl(["-n", x.namespace, "logs", p.metadata.name, "-c", "app"]))
        .join("\n");
    const found = (e: (typeof expected)[number]) => appLogs(e.to).split("\n").some(e.line);
    await withDiagnosis(
      waitFor("each message in its recipient application's log", () => expected.every(found), 150_000, 2000).catch(
        (err) => {
          const runtimeLogs = (x: { namespace: string; doc: Obj }) =>
            pods(x.namespace, `app.kubernetes.io/instance=${x.doc.metadata.name}`)
              .map((p) => cp.kubectl(["-n", x.namespace, "logs", p.metadata.name, "-c", "runtime", "--tail=25"]))
              .join("\n");
          const missing = expected
            .filter((e) => !found(e))
            .map((e) => `${e.what} in ${e.to.doc.metadata.name}'s log:\n${appLogs(e.to).slice(-1500)}`);
          // The other side of the exchange: what each application sent and was told.
          const senders = [a, b].map(
            (x) => `--- application log of ${x.doc.metadata.name}\n${appLogs(x).slice(-1500)}`,
          );
          const runtimes = [...agents, relayDoc].map(
            (x) =>
              `--- runtime log of ${x.doc.kind} ${x.namespace}/${x.doc.metadata.name}\n${runtimeLogs(x).slice(-2500)}`,
          );
          throw new Error(
            `${(err as Error).message}; not found: ${missing.join("\n")}\n${senders.join("\n")}\n${runtimes.join("\n")}`,
          );
        },
      ),
    );
  }, 540_000);

  it("comes back whole after an agent's pod and then the NATS pod are deleted: every stream loaded, every Agent and Relay Ready, messages flowing", async () => {
    failing();
    const docs = exampleDocs();
    const resources = docs.filter((d) => d.doc.kind === "Agent" || d.doc.kind === "Relay");
    const agents = docs.filter((d) => d.doc.kind === "Agent");
    const served = agents.find((x) => x.doc.spec.localApi?.service?.enabled)!;
    const other = agents.find(
      (x) => x !== served && served.doc.spec.peers?.some((p: Obj) => p.agentId === x.doc.spec.agentId),
    )!;
    expect(other, "a peer of the Agent whose local API is a Service").toBeDefined();
    const allReady = (what: string) =>
      withDiagnosis(
        waitFor(
          `${what}: ${resources.map((r) => `${r.doc.kind} ${r.namespace}/${r.doc.metadata.name}`).join(", ")} Ready`,
          () =>
            resources.every((r) =>
              readyCondition(cp.tryJson(["-n", r.namespace, "get", r.doc.kind.toLowerCase(), r.doc.metadata.name])),
            ),
          300_000,
          2000,
        ),
      );
    const send = async (tag: string) => {
      const pod = localApiSender(
        `restart-${tag}`,
        served.namespace,
        served.doc.metadata.name,
        served.doc.spec.localApi.service.port ?? 9443,
        images.runtime.ref,
        { to: other.doc.spec.agentId, phase: "greeting", text: `across restarts (${tag})` },
      );
      cp.kubectl(["apply", "-f", "-"], JSON.stringify(pod));
      const done = await withDiagnosis(
        waitFor(
          `pod ${pod.metadata.name} to finish`,
          () => {
            const p = cp.tryJson(["-n", served.namespace, "get", "pod", pod.metadata.name]);
            return ["Succeeded", "Failed"].includes(p?.status?.phase) ? p : undefined;
          },
          300_000,
          2000,
        ),
      );
      const message = done.status.containerStatuses[0].state.terminated?.message ?? "";
      expect(done.status.phase, `${pod.metadata.name}: ${message}`).toBe("Succeeded");
      return JSON.parse(message).message_id as string;
    };
    const tag = randomUUID().slice(0, 8);
    // A routine restart of the receiving agent (a rollout, a drain, an OOM kill): its runtime
    // starts a second time against the streams it made.
    cp.kubectl([
      "-n",
      other.namespace,
      "delete",
      "pod",
      "-l",
      `app.kubernetes.io/instance=${other.doc.metadata.name}`,
      "--wait=true",
    ]);
    await allReady(`after ${other.doc.metadata.name}'s pod was deleted`);
    const before = await send(`${tag}-before`);
    // Then the NATS pod: the server starts again on its volume.
    const [nats] = pods(SYSTEM, "app.kubernetes.io/component=nats");
    cp.kubectl(["-n", SYSTEM, "delete", "pod", nats!.metadata.name, "--wait=true"]);
    await withDiagnosis(
      waitFor(
        "the NATS pod Ready again",
        () =>
          pods(SYSTEM, "app.kubernetes.io/component=nats").some(
            (p) => podReady(p) && p.metadata.uid !== nats!.metadata.uid,
          ),
        300_000,
        2000,
      ),
    );
    const [again] = pods(SYSTEM, "app.kubernetes.io/component=nats").filter(podReady);
    const natsLog = cp.kubectl(["-n", SYSTEM, "logs", again!.metadata.name, "-c", "nats"]);
    expect(natsLog).toMatch(/Restored \d+ messages for stream/);
    expect(natsLog).not.toMatch(/Error recreating stream|could not be recovered/);
    await allReady("after the NATS pod was deleted");
    const after = await send(`${tag}-after`);
    const appLog = () =>
      pods(other.namespace, `app.kubernetes.io/instance=${other.doc.metadata.name}`)
        .map((p) => cp.kubectl(["-n", other.namespace, "logs", p.metadata.name, "-c", "app"]))
        .join("\n");
    await withDiagnosis(
      waitFor(
        "both messages in the recipient application's log",
        () =>
          [before, after].every(
            (id) =>
              appLog().includes(id) ||
              appLog().includes(`across restarts (${id === before ? `${tag}-before` : `${tag}-after`})`),
          ),
        120_000,
        2000,
      ),
    );
  }, 900_000);

  it("trusts an Agent whose certificate a user's own CA issued, given to the sender in spec.tls.trust", async () => {
    failing();
    const { ns, ca, objects, tag } = await ownCA;
    await withDiagnosis(
      waitFor(
        "Agent carol Ready",
        () => readyCondition(cp.tryJson(["-n", ns, "get", "agent", "carol"])),
        180_000,
        1000,
      ),
    );
    apply(objects.at(-1)!);
    // dave's trust bundle holds the user's CA beside the install's.
    await waitFor(
      "dave-trust with the user's CA",
      () => (cp.tryJson(["-n", ns, "get", "configmap", "dave-trust"])?.data?.["ca.crt"] ?? "").includes(ca.cert.trim()),
      60_000,
      1000,
    );
    const appLog = (name: string) =>
      pods(ns, `app.kubernetes.io/instance=${name}`)
        .map((p) => cp.kubectl(["-n", ns, "logs", p.metadata.name, "-c", "app"]))
        .join("\n");
    await withDiagnosis(
      waitFor(
        "dave's greeting in carol's application log, and carol's answer in dave's",
        () =>
          appLog("carol")
            .split("\n")
            .some((l) => l.includes("received greeting") && l.includes("from dave-agent") && l.includes(tag)) &&
          appLog("dave")
            .split("\n")
            .some((l) => l.includes("from carol-agent") && l.includes(tag)),
        240_000,
        2000,
      ).catch((err) => {
        throw new Error(
          `${(err as Error).message}\n--- carol\n${appLog("carol").slice(-1500)}\n--- dave\n${appLog("dave").slice(-1500)}`,
        );
      }),
    );
    // carol served the user's certificate, not one of the install CA.
    const carolPod = pods(ns, "app.kubernetes.io/instance=carol")[0]!;
    expect(carolPod.spec.volumes.find((v: Obj) => v.name === "tls")?.secret?.secretName).toBe("carol-tls");
  }, 330_000);

  it("carries messages both ways between two agents that reach each other only through a Relay", async () => {
    failing();
    const { ns, grace, frank, agent, greeting, tag } = relayed;
    await withDiagnosis(
      waitFor(
        "Relay mailroom and Agent grace Ready",
        () =>
          readyCondition(cp.tryJson(["-n", ns, "get", "relay", "mailroom"])) &&
          readyCondition(cp.tryJson(["-n", ns, "get", "agent", "grace"])),
        180_000,
        1000,
      ),
    );
    // frank's application greets at once: grace has no endpoint to ask for its capability
    // document, and the relay keeps the greeting until grace reads it.
    apply(
      agent(frank, grace, [
        { name: "IFP_APP_GREET", value: "grace-agent" },
        { name: "IFP_APP_GREET_TEXT", value: greeting },
        { name: "IFP_APP_GREET_WAIT_SECONDS", value: "0" },
      ]),
    );
    const logs = (name: string, container: string) =>
      pods(ns, `app.kubernetes.io/instance=${name}`)
        .map((p) => cp.kubectl(["-n", ns, "logs", p.metadata.name, "-c", container]))
        .join("\n");
    await withDiagnosis(
      waitFor(
        "frank's greeting in grace's application log, and grace's answer in frank's",
        () =>
          logs("grace", "app")
            .split("\n")
            .some((l) => l.includes("received greeting") && l.includes("from frank-agent") && l.includes(tag)) &&
          logs("frank", "app")
            .split("\n")
            .some((l) => l.includes("from grace-agent") && l.includes(tag)),
        240_000,
        2000,
      ).catch((err) => {
        const show = (name: string, container: string) =>
          `--- ${name} ${container}\n${logs(name, container).slice(-2000)}`;
        throw new Error(
          `${(err as Error).message}\n${[show("frank", "app"), show("grace", "app"), show("frank", "runtime"), show("grace", "runtime"), show("mailroom", "runtime")].join("\n")}`,
        );
      }),
    );
  }, 330_000);

  it("takes a stranger's message at the example Relay by its default policy and hands it to the agent reading there; refuses a sender it cannot look up", async () => {
    failing();
    // A sender the Relay does not list: a pod that signs with a did:key it makes itself, so the
    // relay finds its key only in its id. It publishes to the agent that reads its mailbox on the
    // example Relay, checks that it cannot read there, and that a simple name the Relay does not
    // list is refused (401 unknown_sender); the outcome goes to the termination message.
    const docs = exampleDocs();
    const relayDoc = docs.find((d) => d.doc.kind === "Relay")!;
    const agents = docs.filter((d) => d.doc.kind === "Agent");
    const reader = agents.find((x) => x.doc.spec.relay?.urls?.includes(relayDoc.doc.spec.url))!;
    expect(reader, "an example Agent reading its mailbox on the example Relay").toBeDefined();
    expect(relayDoc.doc.spec.publishers?.policy ?? "verified", "the example Relay keeps the default policy").toBe(
      "verified",
    );
    const tag = randomUUID().slice(0, 8);
    const text = `from a stranger through the relay to ${reader.doc.spec.agentId} (${tag})`;
    const pod = strangerPublisher(
      `stranger-${tag}`,
      reader.namespace,
      reader.doc.metadata.name,
      relayDoc.doc.spec.url,
      images.runtime.ref,
      { to: reader.doc.spec.agentId, text },
    );
    cp.kubectl(["apply", "-f", "-"], JSON.stringify(pod));
    const done = await withDiagnosis(
      waitFor(
        `pod ${reader.namespace}/${pod.metadata.name} to finish`,
        () => {
          const p = cp.tryJson(["-n", reader.namespace, "get", "pod", pod.metadata.name]);
          return ["Succeeded", "Failed"].includes(p?.status?.phase) ? p : undefined;
        },
        300_000,
        2000,
      ),
    );
    const message = done.status.containerStatuses[0].state.terminated?.message ?? "";
    expect(
      done.status.phase,
      `${message}\n${cp.kubectl(["-n", reader.namespace, "logs", pod.metadata.name]).slice(-2000)}`,
    ).toBe("Succeeded");
    const result = JSON.parse(message);
    expect(result).toMatchObject({ status: 202, read: "401 unknown_sender", unknown: "401 unknown_sender" });
    const appLog = () =>
      pods(reader.namespace, `app.kubernetes.io/instance=${reader.doc.metadata.name}`)
        .map((p) => cp.kubectl(["-n", reader.namespace, "logs", p.metadata.name, "-c", "app"]))
        .join("\n");
    await withDiagnosis(
      waitFor(
        "the stranger's message in the reader's application log",
        () =>
          appLog()
            .split("\n")
            .some((l) => l.includes(`from ${result.agent_id}`) && (l.includes(tag) || l.includes(result.message_id))),
        150_000,
        2000,
      ).catch((err) => {
        const runtime = (x: { namespace: string; doc: Obj }) =>
          pods(x.namespace, `app.kubernetes.io/instance=${x.doc.metadata.name}`)
            .map((p) => cp.kubectl(["-n", x.namespace, "logs", p.metadata.name, "-c", "runtime", "--tail=25"]))
            .join("\n");
        throw new Error(
          `${(err as Error).message}\n--- app\n${appLog().slice(-1500)}\n--- reader runtime\n${runtime(reader).slice(-2500)}\n--- relay runtime\n${runtime(relayDoc).slice(-2500)}`,
        );
      }),
    );
  }, 540_000);

  it("kubectl ifp status and report show the install as it runs: the operator leading, NATS and every example Agent and Relay Ready, a bundle without Secret values", async () => {
    failing();
    // As kubectl runs the plugin (operator/bin/kubectl-ifp.ts), with the user's kubeconfig.
    const plugin = (args: string[]) => run(process.execPath, [PLUGIN, ...args, "--kubeconfig", cp.kubeconfig], 120_000);
    const status = JSON.parse(await withDiagnosis(plugin(["status", "-o", "json"])));
    expect(status.operator).toMatchObject({ namespace: SYSTEM, ready: true });
    expect(status.operator.leader?.holder).toMatch(new RegExp(`^${FULL}-`));
    expect(status.nats).toMatchObject({ namespace: SYSTEM, ready: true });
    expect(Date.parse(status.installCa?.notAfter)).toBeGreaterThan(Date.now());
    const resources = exampleDocs().filter((d) => d.doc.kind === "Agent" || d.doc.kind === "Relay");
    for (const r of resources)
      expect(
        status.resources.find(
          (x: Obj) => x.kind === r.doc.kind && x.namespace === r.namespace && x.name === r.doc.metadata.name,
        ),
        `${r.doc.kind} ${r.namespace}/${r.doc.metadata.name} in kubectl ifp status`,
      ).toMatchObject({ ready: "True" });
    const table = await plugin(["status"]);
    for (const r of resources) expect(table).toContain(r.doc.metadata.name);
    // describe reads an Agent's circuits from one of its pods (ifp circuits in the runtime container).
    const agentDoc = resources.find((r) => r.doc.kind === "Agent")!;
    const described = await withDiagnosis(
      plugin(["describe", "agent", agentDoc.doc.metadata.name, "-n", agentDoc.namespace]),
    );
    expect(described).toMatch(/^Circuits not closed: (none|\d+)$/m);

    const dir = mkdtempSync(join(tmpdir(), "ifp-node-report-"));
    try {
      const file = join(dir, "bundle.tar.gz");
      await withDiagnosis(plugin(["report", "-o", file]));
      const names = spawnSync("tar", ["-tzf", file], { encoding: "utf8" }).stdout.split("\n");
      for (const f of ["ifp-report/status.json", `ifp-report/namespaces/${SYSTEM}/secrets.json`])
        expect(names).toContain(f);
      // What the plugin could not read it lists in errors.txt, shown here.
      const errors = spawnSync("tar", ["-xzOf", file, "ifp-report/errors.txt"], { encoding: "utf8" }).stdout;
      if (errors.trim())
        process.stderr.write(`e2e/node.test.ts: kubectl ifp report's errors.txt:\n${errors.slice(0, 3000)}\n`);
      for (const r of resources)
        expect(names).toContain(`ifp-report/namespaces/${r.namespace}/${r.doc.kind.toLowerCase()}s.json`);
      // The logs of the operator's and NATS's pods and of each runtime.
      const logs = (ns: string) =>
        names.filter((n) => n.startsWith(`ifp-report/namespaces/${ns}/logs/`) && n.endsWith(".log"));
      expect(logs(SYSTEM).length).toBeGreaterThanOrEqual(2);
      for (const r of resources) expect(logs(r.namespace).length, r.namespace).toBeGreaterThan(0);
      // The install CA's key and the NATS account's seed are in the cluster's Secrets, not in the bundle.
      const raw = spawnSync("tar", ["-xzOf", file], { encoding: "latin1", maxBuffer: 256 << 20 }).stdout;
      // Certificates, public keys and JWTs are public and may be in ConfigMaps; the rest is not.
      const secretValues = (cp.json(["-n", SYSTEM, "get", "secrets"]).items as Obj[])
        .flatMap((x) => Object.entries(x.data ?? {}) as [string, string][])
        .filter(([key]) => !/\.(crt|pub|jwt)$/.test(key))
        .map(([, v]) => Buffer.from(v, "base64").toString("latin1"))
        .filter((v) => v.length >= 32 && !v.includes("BEGIN CERTIFICATE"));
      expect(secretValues.length).toBeGreaterThan(0);
      for (const v of secretValues) expect(raw.includes(v)).toBe(false);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 300_000);

  it("kubectl ifp send sends as one example Agent through its own runtime, and kubectl ifp tail in the other's pod sees it arrive", async () => {
    failing();
    const agents = exampleDocs().filter((d) => d.doc.kind === "Agent");
    // A sender whose peers name the receiver by its URL.
    const pair = agents.flatMap((a) =>
      agents
        .filter((b) => b !== a && a.doc.spec.peers?.some((p: Obj) => p.agentId === b.doc.spec.agentId && p.url))
        .map((b) => [a, b] as const),
    )[0];
    expect(pair, "an example Agent whose peers name another by URL").toBeDefined();
    const [from, to] = pair!;
    const plugin = (args: string[]) => [PLUGIN, ...args, "--kubeconfig", cp.kubeconfig];
    const tag = randomUUID().slice(0, 8);
    const text = `through kubectl ifp send (${tag})`;
    // tail first, as a person watching would; --since covers a message accepted before its watch opened.
    const tail = spawn(process.execPath, plugin(["tail", to.doc.metadata.name, "-n", to.namespace, "--since", "120"]), {
      stdio: ["ignore", "pipe", "pipe"],
    });
    let tailOut = "";
    let tailErr = "";
    tail.stdout.on("data", (c: Buffer) => (tailOut += c));
    tail.stderr.on("data", (c: Buffer) => (tailErr += c));
    const tailExit = new Promise<number | null>((resolve) => tail.on("close", (code) => resolve(code)));
    try {
      await withDiagnosis(
        waitFor(
          "kubectl ifp tail to follow",
          () => {
            if (tail.exitCode !== null) throw new Error(`kubectl ifp tail ended (${tail.exitCode}): ${tailErr}`);
            return /following the messages the agent at http:\/\/127\.0\.0\.1:\d+ accepts/.test(tailErr);
          },
          120_000,
          250,
        ),
      );
      expect(tailErr).toMatch(
        new RegExp(`^kubectl ifp: tail through pod ${to.doc.metadata.name}-\\S+ \\(container runtime\\)\n`),
      );
      const sent = await withDiagnosis(
        run(
          process.execPath,
          plugin([
            "send",
            from.doc.metadata.name,
            "-n",
            from.namespace,
            "--to",
            to.doc.spec.agentId,
            "--text",
            text,
            "--wait",
            "120",
          ]),
          180_000,
        ),
      );
      const [queuedLine, recordLine] = sent.trim().split("\n");
      expect(queuedLine, sent).toMatch(/^202 /);
      const queued = JSON.parse(queuedLine!.slice(4));
      // Signed by the runtime with the Agent's own key, from its outbox.
      expect(queued).toMatchObject({ status: "queued", duplicate: false });
      expect(queued.message.headers.from).toMatchObject({ agent: from.doc.spec.agentId });
      expect(queued.message.security.signatures[0].key_id).toMatch(new RegExp(`^${from.doc.spec.agentId}#`));
      expect(JSON.parse(recordLine!)).toMatchObject({
        message_id: queued.message_id,
        state: "delivered",
        recipients: [{ agent: to.doc.spec.agentId, state: "delivered" }],
      });
      const arrived = () =>
        tailOut
          .split("\n")
          .filter(Boolean)
          .map((l) => JSON.parse(l) as Obj)
          .find((l) => l.message_id === queued.message_id);
      await withDiagnosis(waitFor("the message in kubectl ifp tail's output", () => arrived(), 60_000, 250));
      // As the receiver accepted it: verified against the key it lists for its peer (level 2).
      expect(arrived()).toMatchObject({
        sender: from.doc.spec.agentId,
        auth_level: 2,
        handed_on: true,
        message: { body: { text } },
      });
      // Ctrl-C ends the plugin, and the exec with it.
      tail.kill("SIGINT");
      expect(await tailExit).toBe(0);
    } finally {
      tail.kill("SIGKILL");
    }
    // ifp's exit code comes back through the exec: a tail that stops by itself after the
    // message (0), and one that does not see the 1000 messages it waits for (1).
    const again = await run(
      process.execPath,
      plugin(["tail", to.doc.metadata.name, "-n", to.namespace, "--since", "600", "--count", "1", "--timeout", "60"]),
      120_000,
    );
    expect(again.trim().split("\n")).toHaveLength(1);
    const short = spawnSync(
      process.execPath,
      plugin(["tail", to.doc.metadata.name, "-n", to.namespace, "--count", "1000", "--timeout", "3"]),
      { encoding: "utf8", timeout: 120_000 },
    );
    expect(short.status, short.stderr).toBe(1);
    expect(short.stderr).toMatch(/0 of 1000 message\(s\) in 3 s/);
  }, 420_000);

  it("an A2A client in a pod reads alice's agent card through her Service, verifies its signature, and gets a SendMessage's task completed by her application's reply", async () => {
    failing();
    const docs = exampleDocs();
    const agent = docs.find((d) => d.doc.kind === "Agent" && d.doc.spec.a2a?.enabled);
    expect(agent, "an example Agent with spec.a2a.enabled").toBeDefined();
    const { name } = agent!.doc.metadata;
    const { namespace } = agent!;
    const tokens = agent!.doc.spec.a2a.authentication?.bearerTokenSecret;
    expect(tokens?.name, "the example's A2A bearer token Secret").toBeDefined();
    // The URL the other examples reach the agent at: its Service.
    const base = `https://${name}.${namespace}.svc`;
    const tag = randomUUID().slice(0, 8);
    const text = `Hello from an A2A client (${tag})`;
    const client = scriptPod(
      `a2a-${tag}`,
      namespace,
      images.runtime.ref,
      A2A_SCRIPT,
      [
        { name: "BASE", value: base },
        { name: "TEXT", value: text },
        { name: "TOKENS", valueFrom: { secretKeyRef: { name: tokens.name, key: tokens.key ?? "tokens" } } },
        // The install's CA, from the trust bundle the operator keeps beside every Agent.
        { name: "NODE_EXTRA_CA_CERTS", value: "/etc/ifp/trust/ca.crt" },
      ],
      [{ name: "trust", path: "/etc/ifp/trust", source: { configMap: { name: `${name}-trust` } } }],
    );
    cp.kubectl(["apply", "-f", "-"], JSON.stringify(client));
    const done = await withDiagnosis(
      waitFor(
        `pod ${namespace}/${client.metadata.name} to finish`,
        () => {
          const p = cp.tryJson(["-n", namespace, "get", "pod", client.metadata.name]);
          return ["Succeeded", "Failed"].includes(p?.status?.phase) ? p : undefined;
        },
        300_000,
        2000,
      ),
    );
    const log = cp.kubectl(["-n", namespace, "logs", client.metadata.name]);
    expect(done.status.phase, log.slice(-3000)).toBe("Succeeded");
    const result = JSON.parse(log.trim().split("\n").pop()!);
    // The card names the Service's URL (the request's Host) for its JSON-RPC interface.
    expect(result.card.supportedInterfaces).toContainEqual(
      expect.objectContaining({ url: `${base}/a2a/v1`, protocolBinding: "JSONRPC" }),
    );
    // Its JWS verifies with the key of the agent's JWKS over the card's canonical form (RFC 8785)…
    const [sig] = result.card.signatures;
    const header = JSON.parse(Buffer.from(sig.protected, "base64url").toString());
    expect(header).toMatchObject({
      alg: "EdDSA",
      kid: `${agent!.doc.spec.agentId}#key-1`,
      jku: `${base}/.well-known/a2a/jwks.json`,
    });
    const jwk = result.jwks.keys.find((k: Obj) => k.kid === header.kid);
    const { signatures: _signatures, ...unsigned } = result.card;
    const payload = Buffer.from(canonicalize(unsigned)!).toString("base64url");
    await flattenedVerify(
      { protected: sig.protected, signature: sig.signature, payload },
      await importJWK(jwk, "EdDSA"),
    );
    // …and with the official A2A SDK's verifier, which reads the card as the SDK's clients do.
    await expect(
      verifyAgentCardSignature(async (kid) => result.jwks.keys.find((k: Obj) => k.kid === kid))(result.card),
    ).resolves.toBeUndefined();
    // …and that key is the one its peers trust for it (the public half of the example's signing key).
    const trusted = docs
      .filter((d) => d.doc.kind === "Agent")
      .flatMap((d) => d.doc.spec.peers ?? [])
      .find((p: Obj) => p.agentId === agent!.doc.spec.agentId);
    expect(jwk.x).toBe(trusted.keys[0].publicKey);
    // A changed card does not verify.
    const forged = Buffer.from(canonicalize({ ...unsigned, name: "someone else" })!).toString("base64url");
    await expect(
      flattenedVerify(
        { protected: sig.protected, signature: sig.signature, payload: forged },
        await importJWK(jwk, "EdDSA"),
      ),
    ).rejects.toThrow();
    // The task, completed by the application's reply; without the token, 401.
    expect(result.task.status.state, JSON.stringify(result.sent)).toBe("TASK_STATE_COMPLETED");
    expect(result.task.status.message.parts[0].text).toBe(`Got your request message: “${text}”`);
    expect(result.unauthenticated).toBe(401);
  }, 330_000);

  it("passes helm test", async () => {
    failing();
    const out = await withDiagnosis(helm(["test", RELEASE, "-n", SYSTEM, "--timeout", "4m"], 5 * 60_000));
    expect(out).toMatch(/Phase:\s+Succeeded/);
  }, 330_000);
});

/** Security settings of the test's own pods: what the restricted Pod Security Standard asks. */
const RESTRICTED = {
  pod: { runAsNonRoot: true, runAsUser: 10001, runAsGroup: 10001, seccompProfile: { type: "RuntimeDefault" } },
  container: { allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: { drop: ["ALL"] } },
};

function scriptPod(
  name: string,
  namespace: string,
  image: string,
  script: string,
  env: Obj[],
  mounts: { name: string; path: string; source: Obj; writable?: boolean }[],
): Obj {
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name, namespace, labels: { "app.kubernetes.io/part-of": "ifp-node-e2e" } },
    spec: {
      restartPolicy: "Never",
      automountServiceAccountToken: false,
      securityContext: RESTRICTED.pod,
      containers: [
        {
          name: "send",
          image,
          imagePullPolicy: "IfNotPresent",
          command: ["node", "--input-type=module", "-e", script],
          env,
          securityContext: RESTRICTED.container,
          volumeMounts: mounts.map((m) => ({ name: m.name, mountPath: m.path, readOnly: !m.writable })),
        },
      ],
      volumes: mounts.map((m) => ({ name: m.name, ...m.source })),
    },
  };
}

/**
 * A pod of the agent's application: queues one message at the agent's local API Service and
 * follows it until delivered, and checks that a request without the token or with another is
 * refused (401); the outcome goes to the termination message.
 */
function localApiSender(
  name: string,
  namespace: string,
  agent: string,
  port: number,
  image: string,
  message: Obj,
): Obj {
  return scriptPod(
    name,
    namespace,
    image,
    LOCAL_API_SCRIPT,
    [
      { name: "LOCAL_API", value: `https://${agent}-local-api.${namespace}.svc:${port}` },
      { name: "TOKEN", valueFrom: { secretKeyRef: { name: `${agent}-local-api`, key: "token" } } },
      { name: "MESSAGE", value: JSON.stringify(message) },
      { name: "NODE_EXTRA_CA_CERTS", value: "/etc/ifp/trust/ca.crt" },
    ],
    [{ name: "trust", path: "/etc/ifp/trust", source: { configMap: { name: `${agent}-trust` } } }],
  );
}

/** A pod that publishes one message to the relay, signed with the sending agent's key. */
function relayPublisher(
  name: string,
  namespace: string,
  agent: string,
  signingSecret: string,
  key: { agentId: string; keyId: string },
  relayUrl: string,
  image: string,
  message: Obj,
): Obj {
  return scriptPod(
    name,
    namespace,
    image,
    RELAY_SCRIPT,
    [
      { name: "RELAY", value: relayUrl },
      { name: "AGENT_ID", value: key.agentId },
      { name: "KEY_ID", value: key.keyId },
      { name: "MESSAGE", value: JSON.stringify(message) },
    ],
    [
      { name: "trust", path: "/etc/ifp/trust", source: { configMap: { name: `${agent}-trust` } } },
      { name: "signing", path: "/etc/ifp/signing", source: { secret: { secretName: signingSecret } } },
    ],
  );
}

/** A pod that publishes one message to the relay as a stranger: signed with a did:key it makes itself. */
function strangerPublisher(
  name: string,
  namespace: string,
  trustOf: string,
  relayUrl: string,
  image: string,
  message: Obj,
): Obj {
  return scriptPod(
    name,
    namespace,
    image,
    STRANGER_SCRIPT,
    [
      { name: "RELAY", value: relayUrl },
      { name: "MESSAGE", value: JSON.stringify(message) },
    ],
    [
      { name: "trust", path: "/etc/ifp/trust", source: { configMap: { name: `${trustOf}-trust` } } },
      // Where ifp keygen writes the stranger's key (the root filesystem is read-only).
      { name: "work", path: "/work", source: { emptyDir: {} }, writable: true },
    ],
  );
}

/**
 * What the relay scripts share: the runtime image's own ifp command, run as a person runs it in a
 * pod of that image, and its JSON answer.
 */
const IFP_IN_POD = `
import { spawnSync } from "node:child_process";
import { writeFileSync } from "node:fs";
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const ifp = (...args) => spawnSync(process.execPath, ["/app/runtime/bin/ifp.js", ...args], { encoding: "utf8" });
const ca = ["--ca-file", "/etc/ifp/trust/ca.crt"];
const message = JSON.parse(process.env.MESSAGE);
const answerOf = (r) => { try { return JSON.parse(r.stdout); } catch { return undefined; } };
/** ifp relay publish until the relay takes it or refuses it for good (a 4xx other than 429). */
async function publish(from, keyFile, extra = []) {
  const result = {};
  for (let attempt = 1; attempt <= 60; attempt++) {
    const r = ifp("relay", "publish", process.env.RELAY, "--key", keyFile, "--from", from, ...extra, "--to", message.to, "--text", message.text, ...ca);
    const answer = answerOf(r);
    if (answer) Object.assign(result, { status: answer.status, agent_id: answer.from, message_id: answer.message_id, text: r.stdout.trim() });
    else result.error = r.stderr.trim().slice(-500);
    if (answer && (answer.status === 202 || (answer.status >= 400 && answer.status < 500 && answer.status !== 429))) break;
    await sleep(2000);
  }
  return result;
}
const done = (result, ok) => {
  console.log(JSON.stringify(result));
  writeFileSync("/dev/termination-log", JSON.stringify(result).slice(0, 4000));
  process.exitCode = ok ? 0 : 1;
};
`;

const STRANGER_SCRIPT = `${IFP_IN_POD}
const made = ifp("keygen", "--out", "/work/stranger.pem");
if (made.status !== 0) throw new Error(made.stderr);
// Signed with the did:key of a key it made itself.
const result = await publish("did:key", "/work/stranger.pem");
// Reading is the served agents' alone.
const read = ifp("relay", "pull", process.env.RELAY, "--key", "/work/stranger.pem", "--from", "did:key", ...ca);
result.read = /the relay answered (\\d+ \\w+)/.exec(read.stderr)?.[1] ?? "exit " + read.status + ": " + read.stderr.slice(-300);
// A simple name the Relay does not list cannot be looked up.
const unknown = answerOf(ifp("relay", "publish", process.env.RELAY, "--key", "/work/stranger.pem", "--from", "stranger-without-identity", "--to", message.to, "--text", message.text, ...ca));
result.unknown = unknown ? unknown.status + " " + (unknown.code ?? "") : "no answer";
done(result, result.status === 202 && result.read === "401 unknown_sender" && result.unknown === "401 unknown_sender");
`;

const LOCAL_API_SCRIPT = `
import { writeFileSync } from "node:fs";
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const headers = { authorization: "Bearer " + process.env.TOKEN, "content-type": "application/json" };
const deadline = Date.now() + 240_000;
const result = {};
let queued;
while (!queued && Date.now() < deadline) {
  try {
    const res = await fetch(process.env.LOCAL_API + "/outbox", { method: "POST", headers, body: process.env.MESSAGE, signal: AbortSignal.timeout(10_000) });
    const body = await res.json().catch(() => ({}));
    if (res.status === 202 || res.status === 200) queued = body;
    else result.last = { status: res.status, body };
  } catch (err) {
    result.last = String(err?.cause?.message ?? err?.message ?? err);
  }
  if (!queued) await sleep(2000);
}
result.message_id = queued?.message_id;
// Without the token, or with another, the Service refuses: 401 unauthorized, nothing queued.
const refused = async (h) => {
  const res = await fetch(process.env.LOCAL_API + "/outbox", { method: "POST", headers: { "content-type": "application/json", ...h }, body: process.env.MESSAGE, signal: AbortSignal.timeout(10_000) }).catch((err) => ({ status: String(err?.cause?.message ?? err) }));
  return res.status + " " + ((await res.json?.().catch(() => ({})))?.code ?? "");
};
if (queued) result.refused = [await refused({}), await refused({ authorization: "Bearer " + "x".repeat(43) })];
while (queued && Date.now() < deadline) {
  const res = await fetch(process.env.LOCAL_API + "/outbox/" + encodeURIComponent(queued.message_id), { headers, signal: AbortSignal.timeout(10_000) }).catch(() => undefined);
  result.record = await res?.json().catch(() => undefined);
  if (["delivered", "failed", "undeliverable"].includes(result.record?.state)) break;
  await sleep(1000);
}
console.log(JSON.stringify(result));
writeFileSync("/dev/termination-log", JSON.stringify(result).slice(0, 4000));
process.exitCode = result.record?.state === "delivered" && result.refused?.every((r) => r === "401 unauthorized") ? 0 : 1;
`;

/**
 * An A2A client as a user writes one with fetch: the agent card and the JWKS (printed for the test
 * to verify), SendMessage over JSON-RPC at the card's interface with the first bearer token of
 * the Secret, GetTask until the task is terminal, and one call without a token. One JSON line.
 */
const A2A_SCRIPT = `
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const deadline = Date.now() + 240_000;
const token = process.env.TOKENS.split("\\n")[0].trim();
const result = {};
while (!result.card && Date.now() < deadline) {
  try {
    const res = await fetch(process.env.BASE + "/.well-known/agent-card.json", {
      headers: { "A2A-Version": "1.0" },
      signal: AbortSignal.timeout(10_000),
    });
    if (res.status === 200) result.card = await res.json();
    else result.last = res.status;
  } catch (err) {
    result.last = String(err?.cause?.message ?? err?.message ?? err);
  }
  if (!result.card) await sleep(2000);
}
const jsonRpc = result.card?.supportedInterfaces?.find((i) => i.protocolBinding === "JSONRPC")?.url;
if (jsonRpc) {
  result.jwks = await (await fetch(process.env.BASE + "/.well-known/a2a/jwks.json")).json();
  const rpc = async (id, method, params, auth = true) => {
    const res = await fetch(jsonRpc, {
      method: "POST",
      headers: { "content-type": "application/json", "a2a-version": "1.0", ...(auth ? { authorization: "Bearer " + token } : {}) },
      body: JSON.stringify({ jsonrpc: "2.0", id, method, params }),
      signal: AbortSignal.timeout(60_000),
    });
    return { status: res.status, body: await res.json().catch(() => undefined) };
  };
  const message = { messageId: "m-" + Date.now(), role: "ROLE_USER", parts: [{ text: process.env.TEXT }] };
  result.sent = await rpc(1, "SendMessage", { message });
  let task = result.sent.body?.result?.task;
  while (task && !["TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_REJECTED", "TASK_STATE_CANCELED"].includes(task.status?.state) && Date.now() < deadline) {
    await sleep(1000);
    task = (await rpc(2, "GetTask", { id: task.id })).body?.result ?? task;
  }
  result.task = task;
  result.unauthenticated = (await rpc(3, "SendMessage", { message: { ...message, messageId: message.messageId + "-x" } }, false)).status;
}
console.log(JSON.stringify(result));
process.exitCode = result.task?.status?.state === "TASK_STATE_COMPLETED" ? 0 : 1;
`;

const RELAY_SCRIPT = `${IFP_IN_POD}
// Signed with the sending agent's own key, from its signing Secret.
const result = await publish(process.env.AGENT_ID, "/etc/ifp/signing/signing.key", ["--key-id", process.env.KEY_ID]);
done(result, result.status === 202);
`;
