// What the operator's tests against real servers share: reads that call only NotFound absent,
// waits that end before the test's own timeout, and the operator's log attached to a failure.
import { join } from "node:path";
import { JetStreamApiError, jetstreamManager, type StreamInfo } from "@nats-io/jetstream";
import { connect, credsAuthenticator, type NatsConnection } from "@nats-io/transport-node";
import { agentInboxPrefix } from "../../../runtime/src/contract/nats-permissions.ts";
import pino, { type Logger } from "pino";
import { afterAll, afterEach, beforeAll, beforeEach } from "vitest";
import { startControlPlane, type ControlPlane } from "../../../e2e/support/controlplane.ts";
import { httpsRequest } from "../../../e2e/support/https.ts";
import { waitFor } from "../../../e2e/support/wait.ts";
import { LOG_FORMAT } from "../../../runtime/src/telemetry/log-format.ts";
import type { OperatorSettings } from "../../src/reconcile/settings.ts";
import { dataAccountOf } from "../../src/concerns/nats/shared-accounts.ts";
import { startManager, type ManagerOptions, type RunningManager } from "../../src/commands/manager.ts";
import { startNats, type NatsServer } from "../../../e2e/support/nats.ts";
import {
  type CredentialIssuer,
  KEY_FIELDS,
  type NatsKeys,
  serverConfig,
} from "../../src/concerns/nats/credential-issuer.ts";

/**
 * `kubectl get … -o json`, parsed; undefined only when the API server answers NotFound. Any
 * other failure (a refused connection, a bad certificate, an unknown resource type) throws, so
 * that "it was deleted" cannot pass on a broken connection.
 */
export function getOrAbsent<T = any>(cp: ControlPlane, args: string[]): T | undefined {
  try {
    return cp.json<T>(args);
  } catch (err) {
    if (/Error from server \(NotFound\)/.test((err as Error).message)) return undefined;
    throw err;
  }
}

/** JetStream's "stream not found" (10059), the only error that means a stream is absent. */
const STREAM_NOT_FOUND = 10059;

/** The stream's info, or undefined only when JetStream says it does not exist; anything else throws. */
export async function streamOrAbsent(url: string, name: string): Promise<StreamInfo | undefined> {
  const nc = await connect({ servers: url, reconnect: false, timeout: 5_000 });
  try {
    return await (await jetstreamManager(nc)).streams.info(name);
  } catch (err) {
    if (err instanceof JetStreamApiError && err.code === STREAM_NOT_FOUND) return undefined;
    throw err;
  } finally {
    await nc.close();
  }
}

/** Delete a stream, as a server that could not load it at its start leaves it: absent. */
export async function deleteStreamAt(url: string, name: string): Promise<void> {
  const nc = await connect({ servers: url, reconnect: false, timeout: 5_000 });
  try {
    await (await jetstreamManager(nc)).streams.delete(name);
  } finally {
    await nc.close();
  }
}

/** A pino logger that keeps the operator's last lines (debug and up) to print when a test fails. */
export function capturedLog(keep = 400): { log: Logger; lines: () => string[]; has: (pattern: RegExp) => boolean } {
  const lines: string[] = [];
  const echo = !!process.env.IFP_TEST_LOG;
  const log = pino(
    { ...LOG_FORMAT, level: process.env.IFP_TEST_LOG ?? "debug", base: { component: "ifp-operator" } },
    {
      write(line: string) {
        lines.push(line.trimEnd());
        if (lines.length > keep) lines.splice(0, lines.length - keep);
        if (echo) process.stdout.write(line);
      },
    },
  );
  return { log, lines: () => [...lines], has: (pattern) => lines.some((l) => pattern.test(l)) };
}

/** Time a wait may take and still fail on its own (with its message) before vitest's timeout. */
const MARGIN_MS = 5_000;
let testDeadline = Number.POSITIVE_INFINITY;

/**
 * In every test of the file: keep the test's deadline for `until`, and when the test fails,
 * print `report()` (the operator's log, the objects' state) with the failure.
 */
export function perTest(report: () => string): void {
  beforeEach(({ task, onTestFailed }) => {
    testDeadline = Date.now() + task.timeout;
    onTestFailed(() => {
      let text: string;
      try {
        text = report();
      } catch (err) {
        text = `(could not gather the report: ${(err as Error).message})`;
      }
      console.error(`--- ${task.name}: state at failure ---\n${text}`);
    });
  });
  // A worker runs files one after another in one module graph: a deadline left behind would cut
  // the waits of a later file's tests that keep none of their own to a second.
  afterEach(() => {
    testDeadline = Number.POSITIVE_INFINITY;
  });
}

/** kubectl's output, or its error message: for failure reports, which must not fail themselves. */
export function kubectlOrError(cp: ControlPlane, args: string[]): string {
  try {
    return cp.kubectl(args);
  } catch (err) {
    return (err as Error).message;
  }
}

/**
 * waitFor, polling every 200 ms, with its deadline cut to end before the test's own timeout,
 * so that a wait that runs out fails with what it waited for and the failure report runs.
 */
export function until<T>(
  what: string,
  probe: () => Promise<T | undefined | false> | T | undefined | false,
  timeoutMs = 30_000,
  intervalMs = 200,
): Promise<T> {
  const left = testDeadline - Date.now() - MARGIN_MS;
  return waitFor(what, probe, Math.max(1_000, Math.min(timeoutMs, left)), intervalMs);
}

const total = async (m: { get(): Promise<{ values: { value: number }[] }> }): Promise<number> =>
  (await m.get()).values.reduce((a, v) => a + v.value, 0);

/**
 * Resolves once the manager has made `n` resyncs since the call and then worked off what they
 * queued: its resync counter `n` higher, then as many passes finished as keys were ever asked
 * for (workqueue_adds_total, which counts an add during a key's pass as client-go does), with no
 * add between the two readings of it. Every Agent and Relay of the caches has then been
 * reconciled after the n-th resync began, so a test that holds that passes leave something as
 * it is waits for these first, then looks.
 */
export async function resyncs(manager: Pick<RunningManager, "metrics">, n: number, timeoutMs = 30_000): Promise<void> {
  const { resyncs: counter, shared } = manager.metrics;
  const from = await total(counter);
  await until(
    `${n} resyncs, each worked off`,
    async () => {
      if ((await total(counter)) - from < n) return false;
      const asked = await total(shared.queueAdds);
      const passes = await total(shared.reconcileTotal);
      return passes === asked && (await total(shared.queueAdds)) === asked;
    },
    timeoutMs,
    50,
  );
}

/** Resolves once the runtime at `url` (its certificate from `ca`) answers /readyz with 200. */
export function untilRuntimeReady(name: string, url: string, ca: string, timeoutMs = 60_000): Promise<true> {
  return until(
    `${name}'s runtime ready`,
    async () => (await httpsRequest(`${url}/readyz`, { ca }).catch(() => undefined))?.status === 200,
    timeoutMs,
    250,
  );
}

/** cert-manager's Certificate API as far as the operator uses it (the CRD alone: nothing issues). */
export const CERTIFICATE_CRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: certificates.cert-manager.io}
spec:
  group: cert-manager.io
  names: {kind: Certificate, listKind: CertificateList, plural: certificates, singular: certificate}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      subresources: {status: {}}
      schema:
        openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
`;

/**
 * A control plane and an operator that issues each runtime its own NATS credential from the
 * account Secret `ifp-nats-account` in `ops` (generated by the operator when `keys` is absent,
 * else holding them, as for a server started with them), for the tests of the describe block it
 * is called in: started before them, stopped after. The operator watches `namespace` only.
 */
/** The account Secret natsAccountOperator makes for the install's NATS keys (its `keys`). */
export const accountSecretOf = (keys: NatsKeys, issuer: CredentialIssuer) => () => ({
  accountKey: issuer.accountKey,
  fields: Object.fromEntries(Object.entries(KEY_FIELDS).map(([k, f]) => [f, keys[k as keyof NatsKeys]])),
});

/** A nats-server in operator mode with the install's keys, as serverConfig() configures it, its store and resolver under `dir`. */
export async function operatorModeNats(
  keys: NatsKeys,
  issuer: CredentialIssuer,
  dir: string,
  moreConfig = "",
): Promise<NatsServer> {
  return startNats({
    storeDir: join(dir, "store"),
    config: `${await serverConfig(keys, { resolverDir: join(dir, "jwt") })}${moreConfig}`,
    connect: { authenticator: credsAuthenticator(await issuer.systemCreds()) },
  });
}

export function natsAccountOperator(opts: {
  namespace: string;
  ops?: string;
  /** The keys (and the account's public key) to put in the account Secret before the operator starts. */
  keys?: () => { fields: Record<string, string>; accountKey: string };
  /** The operator's own NATS connection. */
  natsUrl?: () => string;
  settings?: Partial<OperatorSettings>;
  manager?: Partial<ManagerOptions>;
  /** Another server the operator needs, started with the control plane and stopped with it. */
  alongside?: { start(): Promise<void>; stop(): Promise<void> };
}): {
  cp: () => ControlPlane;
  log: ReturnType<typeof capturedLog>;
  get: (kind: string, name: string) => any;
  /** The credentials file of the runtime's `<name>-nats` Secret. */
  credsOf: (name: string) => string | undefined;
  /** The operator stopped and started again with these manager options over the first (its flags changed, as by `helm upgrade`). */
  restart: (manager: Partial<ManagerOptions>) => Promise<void>;
  /** The running operator (its caches and metrics). */
  manager: () => RunningManager;
} {
  const ops = opts.ops ?? "ifp-system";
  const log = capturedLog(400);
  let cp: ControlPlane | undefined;
  let manager: RunningManager | undefined;
  const get = (kind: string, name: string) => getOrAbsent(cp!, ["-n", opts.namespace, "get", kind, name]);
  beforeAll(async () => {
    [cp] = await Promise.all([
      startControlPlane({ crds: ["crds/agents.ifp.dev.yaml", "crds/relays.ifp.dev.yaml"], controllerManager: false }),
      opts.alongside?.start(),
    ]);
    cp.kubectl(["create", "namespace", opts.namespace]);
    cp.kubectl(["create", "namespace", ops]);
    const keys = opts.keys?.();
    if (keys)
      cp.kubectl([
        "-n",
        ops,
        "create",
        "secret",
        "generic",
        "ifp-nats-account",
        `--from-literal=account.pub=${keys.accountKey}`,
        ...Object.entries(keys.fields).map(([f, v]) => `--from-literal=${f}=${v}`),
      ]);
    manager = await start(opts.manager);
  }, 300_000);
  const start = async (over: Partial<ManagerOptions> | undefined) => {
    const m = await startManager({
      kubeconfig: cp!.kubeconfig,
      settings: {
        runtimeImage: "ghcr.io/ifp-dev/ifp-runtime:test",
        runtimeImagePullPolicy: "IfNotPresent",
        natsUrl: "nats://nats.test:4222",
        ...opts.settings,
      },
      ...(opts.natsUrl ? { nats: { url: opts.natsUrl() } } : {}),
      natsAccount: { namespace: ops, name: "ifp-nats-account" },
      watchNamespaces: [opts.namespace],
      resyncMs: 1_000,
      log: log.log,
      ...over,
    });
    await m.started;
    return m;
  };
  afterAll(async () => {
    await manager?.stop();
    await Promise.all([cp?.stop(), opts.alongside?.stop()]);
  });
  return {
    cp: () => cp!,
    log,
    get,
    manager: () => manager!,
    async restart(over) {
      await manager?.stop();
      manager = await start({ ...opts.manager, ...over });
    },
    credsOf: (name) => {
      const s = get("secret", `${name}-nats`);
      return s ? Buffer.from(s.data["nats.creds"], "base64").toString("utf8") : undefined;
    },
  };
}

/**
 * A connection with a runtime's credential (the text of its `.creds`), replies under its agent
 * id's inbox prefix; kept in `open` for closing. Tried again when the server's authentication
 * timed out (the test's process, which runs the operator too, may be busy signing), never when
 * it refused the credential.
 */
export async function runtimeConnection(
  url: string,
  creds: string,
  agentId: string,
  open: NatsConnection[],
): Promise<NatsConnection> {
  for (let attempt = 1; ; attempt++) {
    try {
      const nc = await connect({
        servers: url,
        authenticator: credsAuthenticator(new TextEncoder().encode(creds)),
        inboxPrefix: agentInboxPrefix(agentId),
        reconnect: false,
      });
      open.push(nc);
      return nc;
    } catch (err) {
      if (attempt >= 3 || !/Authentication Timeout/i.test(String(err))) throw err;
    }
  }
}

/** A credential of a user allowed every subject in namespace `ns`'s data account (the isolated layout): the tenant as it is. */
export function tenantCreds(issuer: CredentialIssuer, signingSeed: string, ns: string): Promise<string> {
  return issuer.issue("test", { pub: [">"], sub: [">"] }, Date.now(), undefined, dataAccountOf(signingSeed, ns));
}
