#!/usr/bin/env node
// npm start — the local stack: a nats-server with JetStream, the example agents alice and bob
// and the example relay, each a real ifp-runtime process on loopback with a self-signed CA, and
// next to each agent the example application (examples/app) its Agent runs as a sidecar, with
// that sidecar's environment. Prints the URLs and a command that sends a signed message, then
// what the applications log (each message as it arrives, each reply), prefixed by agent;
// Ctrl-C stops everything.
import { spawn, type ChildProcess } from "node:child_process";
import { createInterface } from "node:readline";
import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseAllDocuments, stringify } from "yaml";
import { startNats } from "../support/nats.ts";
import { localhostTls } from "../support/tls.ts";
import { httpsRequest } from "../support/https.ts";
import { waitFor } from "../support/ports.ts";
import { stopChild } from "../support/process.ts";
import { cacheRoot, TOOLS } from "../tools/tools.ts";
import { generateEncryptionKey } from "../../runtime/src/protocol/encryption.ts";

const root = fileURLToPath(new URL("../../", import.meta.url));
const runtime = join(root, "runtime/bin/ifp-runtime.ts");
const exampleApp = join(root, "examples/app/main.ts");
const stateDir =
  process.env.IFP_STACK_DIR ??
  join(process.env.XDG_STATE_HOME ?? join(homedir(), ".local", "state"), "ifp-operator", "stack");
const basePort = Number(process.env.IFP_STACK_PORT ?? 8443);

function readYaml(file: string): any[] {
  return parseAllDocuments(readFileSync(join(root, "examples", file), "utf8"))
    .map((d) => d.toJSON())
    .filter(Boolean);
}

mkdirSync(stateDir, { recursive: true });
// The first run builds nats-server from its Go module (the tools' cache, e2e/tools/tools.ts):
// say so before the wait, and how to skip it.
const natsTool = TOOLS["nats-server"]!;
if (!process.env.IFP_NATS_SERVER && !existsSync(join(cacheRoot(), natsTool.key, "nats-server")))
  process.stdout.write(
    `npm start: building ${natsTool.key} with Go from the Go module proxy — the NATS JetStream server the agents and the relay store messages in. This happens once (a minute or two): it is cached in ${join(cacheRoot(), natsTool.key)} for every later run and for the tests. IFP_NATS_SERVER=/path/to/nats-server uses a server you already have instead.\n`,
  );
const nats = await startNats({ storeDir: join(stateDir, "jetstream") });
const tls = await localhostTls(join(stateDir));
const keys = Object.fromEntries(
  [...readYaml("agent-alice.yaml"), ...readYaml("agent-bob.yaml")]
    .filter((d) => d.kind === "Secret")
    .map((s) => [s.metadata.name as string, s.stringData["signing.key"] as string]),
);

interface Proc {
  name: string;
  url: string;
  child: ChildProcess;
}
const procs: Proc[] = [];

function start(name: string, mode: "agent" | "relay", manifest: object, port: number, extra: string[]): Proc {
  const file = join(stateDir, `${name}.yaml`);
  writeFileSync(file, stringify(manifest));
  const child = spawn(
    process.execPath,
    [
      runtime,
      mode,
      "--manifest",
      file,
      "--port",
      String(port),
      "--metrics-port",
      String(port + 300),
      "--host",
      "127.0.0.1",
      "--tls-cert",
      tls.files.cert,
      "--tls-key",
      tls.files.key,
      "--nats",
      nats.url,
      ...extra,
    ],
    {
      stdio: ["ignore", "inherit", "inherit"],
      env: { ...process.env, IFP_LOG_LEVEL: process.env.IFP_LOG_LEVEL ?? "warn" },
    },
  );
  const p = { name, url: `https://localhost:${port}`, child };
  procs.push(p);
  return p;
}

const [alice, bob] = ["agent-alice.yaml", "agent-bob.yaml"].map((f) => readYaml(f).find((d) => d.kind === "Agent"));
const relay = readYaml("relay.yaml").find((d) => d.kind === "Relay");
// Each agent's local API is on its port + 100, its application on its port + 200.
const ports = { alice: basePort, bob: basePort + 1, relay: basePort + 2 };
const local = (url: string) =>
  url.replace(/^https:\/\/(alice|bob|relay)\.[^/]+/, (_m, n: keyof typeof ports) => `https://localhost:${ports[n]}`);
interface EnvVar {
  name: string;
  value?: string;
}
/** The application sidecar's plain environment variables (those with a value) from the Agent. */
const appEnv: Record<"alice" | "bob", Record<string, string>> = { alice: {}, bob: {} };
// On loopback the example's cluster addresses become localhost ports, and the sidecar a process.
for (const [name, agent] of [
  ["alice", alice],
  ["bob", bob],
] as const) {
  agent.spec.peers = agent.spec.peers.map((p: { url?: string }) => ({ ...p, url: p.url && local(p.url) }));
  if (agent.spec.relay) agent.spec.relay.urls = agent.spec.relay.urls.map(local);
  const sidecar = (agent.spec.deployment?.sidecars ?? []).find((c: { image?: string }) =>
    /ifp-example-app/.test(c.image ?? ""),
  );
  if (!sidecar || !agent.spec.handler)
    throw new Error(`examples/agent-${name}.yaml: expected the example application as a sidecar and spec.handler`);
  for (const e of (sidecar.env ?? []) as EnvVar[]) if (e.value !== undefined) appEnv[name][e.name] = e.value;
  agent.spec.handler = { ...agent.spec.handler, url: `http://127.0.0.1:${ports[name] + 200}` };
  // Pod settings are the operator's, not the runtime's.
  delete agent.spec.deployment;
  // Peers and the relay are on this machine's loopback (in a cluster the operator allows the cluster's networks).
  agent.spec.network = { allowPrivateTargets: ["127.0.0.0/8", "::1/128"] };
}
// alice also speaks A2A (docs/a2a.md), to clients with the bearer token kept in the state directory.
alice.spec.a2a = { enabled: true, authentication: { bearerTokenSecret: { name: "alice-a2a-tokens" } } };
const a2aTokens = keepOnce(join(stateDir, "alice.a2a-tokens"), () => `${randomBytes(24).toString("base64url")}\n`);
const a2aToken = readFileSync(a2aTokens, "utf8").split("\n")[0]!.trim();
relay.spec.url = local(relay.spec.url);
relay.spec.network = { allowPrivateTargets: ["127.0.0.0/8", "::1/128"] };

/**
 * What the operator gives an Agent's runtime beside its signing key (operator/src/kinds/agent/):
 * an X25519 encryption key (encryption.key of the signing Secret; the agent publishes it and can
 * receive encrypted messages) and, with spec.handler, the hand-off secret it signs each hand-off
 * with (the Secret <name>-handoff), which the application gets as IFP_HANDOFF_SECRET. Made once
 * and kept in the state directory, as the operator keeps its Secrets.
 */
function keepOnce(file: string, make: () => string): string {
  if (!existsSync(file)) writeFileSync(file, make(), { mode: 0o600 });
  return file;
}
const secrets = Object.fromEntries(
  (["alice", "bob"] as const).map((name) => {
    const handoff = keepOnce(join(stateDir, `${name}.handoff`), () => randomBytes(32).toString("base64url"));
    const encryption = keepOnce(join(stateDir, `${name}.encryption.key`), () => generateEncryptionKey().privateKeyPem);
    appEnv[name].IFP_HANDOFF_SECRET = readFileSync(handoff, "utf8").trim();
    return [name, { handoff, encryption }];
  }),
) as Record<"alice" | "bob", { handoff: string; encryption: string }>;

for (const [name, manifest] of [
  ["alice", alice],
  ["bob", bob],
] as const) {
  const keyFile = join(stateDir, `${name}.key`);
  writeFileSync(keyFile, keys[`${name}-signing-key`]!, { mode: 0o600 });
  start(name, "agent", manifest, ports[name], [
    "--signing-key",
    keyFile,
    "--encryption-key",
    secrets[name].encryption,
    "--handoff-secret-file",
    secrets[name].handoff,
    "--ca-file",
    tls.files.ca,
    "--local-api-port",
    String(ports[name] + 100),
    ...(name === "alice" ? ["--a2a-token-file", a2aTokens] : []),
  ]);
}
// The relay trusts the stack's CA as the agents do (the operator gives every runtime its trust
// bundle): for webhooks to the stack's names and the identity documents of the senders it looks up.
start("relay", "relay", relay, ports.relay, ["--ca-file", tls.files.ca]);

/** The example application of one agent, its output printed line by line after the agent's name. */
function startApp(name: "alice" | "bob"): ChildProcess {
  const child = spawn(process.execPath, [exampleApp], {
    stdio: ["ignore", "pipe", "pipe"],
    env: {
      ...process.env,
      ...appEnv[name],
      IFP_APP_HOST: "127.0.0.1",
      IFP_APP_PORT: String(ports[name] + 200),
      IFP_LOCAL_API: `http://127.0.0.1:${ports[name] + 100}`,
    },
  });
  for (const stream of [child.stdout!, child.stderr!]) {
    createInterface({ input: stream, crlfDelay: Infinity }).on("line", (line) =>
      process.stdout.write(`${name.padEnd(5)} | ${line}\n`),
    );
  }
  procs.push({ name: `${name}'s application`, url: `http://127.0.0.1:${ports[name] + 200}`, child });
  watch(procs.at(-1)!);
  return child;
}

// Each stop is bounded: SIGTERM, then SIGKILL after a grace period. Ctrl-C ends with 0, a part
// that failed with 1.
let stopping = false;
const stop = async (code: number) => {
  if (stopping) return;
  stopping = true;
  await Promise.all(procs.map((p) => stopChild(p.child, 10_000)));
  await nats.stop();
  process.exit(code);
};
process.once("SIGINT", () => stop(0));
process.once("SIGTERM", () => stop(0));
const PORT_HINT = `its port may be taken (EADDRINUSE above): IFP_STACK_PORT=N npm start moves the stack to ports N, N+1 and N+2 (alice, bob, the relay), their local APIs to +100 and their applications to +200 (now ${basePort})`;
function watch(p: Proc): void {
  p.child.once("exit", (code) => {
    if (code !== 0 && !stopping) {
      process.stderr.write(
        `npm start: ${p.name} exited with ${code ?? "a signal"}; ${PORT_HINT}; stopping the stack\n`,
      );
      void stop(1);
    }
  });
}
procs.forEach(watch);

await Promise.all(
  procs.map((p) =>
    waitFor(
      `${p.name} to be ready`,
      async () => (await httpsRequest(`${p.url}/readyz`, { ca: tls.ca })).status === 200,
      60_000,
      250,
    ),
  ),
).catch(async (err: unknown) => {
  if (stopping) return new Promise<never>(() => {});
  process.stderr.write(`npm start: ${(err as Error).message}; ${PORT_HINT}; stopping the stack\n`);
  await stop(1);
});

const send = `npx ifp send --from-key ${join(stateDir, "bob.key")} --from bob-agent --to ${procs[0]!.url} --text "Hello from Bob's agent" --ca-file ${tls.files.ca}`;
const a2aMessage = `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m-'$(date +%s)'","role":"ROLE_USER","parts":[{"text":"Hello from an A2A client"}]}}}`;
const a2aCall = `curl -s --cacert ${tls.files.ca} -H 'authorization: Bearer ${a2aToken}' -H 'content-type: application/json' -H 'a2a-version: 1.0' ${procs[0]!.url}/a2a/v1 -d '${a2aMessage}'`;
process.stdout.write(`
ifp local stack is up (state in ${stateDir})
  nats      ${nats.url}
  alice     ${procs[0]!.url}/.well-known/agent/capabilities   (local API http://127.0.0.1:${ports.alice + 100})
            ${procs[0]!.url}/.well-known/agent-card.json   (A2A)
  bob       ${procs[1]!.url}/.well-known/agent/capabilities   (local API http://127.0.0.1:${ports.bob + 100})
  relay     ${procs[2]!.url}
  CA        ${tls.files.ca}

Send alice a signed message from bob:
  ${send}

Or talk to alice as an A2A client (JSON-RPC SendMessage; the answer waits for her application's reply):
  ${a2aCall}

Below, what the example applications log: each message as it arrives, and the reply. At start
alice's application greets bob (IFP_APP_GREET in examples/agent-alice.yaml) and bob's answers.
Ctrl-C stops everything.

`);
// Started once the runtimes are ready, so that the greeting is delivered at its first attempt.
startApp("bob");
startApp("alice");
