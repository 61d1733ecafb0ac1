#!/usr/bin/env node
// npm start — the local stack: a nats-server with JetStream, the example agents alice and bob
// and the example relay, each a real ifp-runtime process on loopback with a self-signed CA.
// Prints the URLs and a command that sends a signed message; Ctrl-C stops everything.
import { spawn, type ChildProcess } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseAllDocuments, stringify } from "yaml";
import { startNats } from "../support/nats.ts";
import { localhostTls } from "../support/tls.ts";
import { httpsRequest } from "../support/https.ts";
import { waitFor } from "../support/ports.ts";
import { stopChild } from "../support/process.ts";

const root = fileURLToPath(new URL("../../", import.meta.url));
const runtime = join(root, "runtime/bin/ifp-runtime.ts");
const stateDir = process.env.IFP_STACK_DIR ?? join(process.env.XDG_STATE_HOME ?? join(homedir(), ".local", "state"), "ifp-operator", "stack");
const basePort = Number(process.env.IFP_STACK_PORT ?? 8443);

function readYaml(file: string): any[] {
  return parseAllDocuments(readFileSync(join(root, "examples", file), "utf8")).map((d) => d.toJSON()).filter(Boolean);
}

mkdirSync(stateDir, { recursive: true });
const nats = await startNats({ storeDir: join(stateDir, "jetstream") });
const tls = await localhostTls(join(stateDir));
const keys = Object.fromEntries(
  readYaml("signing-keys.yaml").map((s) => [s.metadata.name as string, s.stringData["signing.key"] as string]),
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
    [runtime, mode, "--manifest", file, "--port", String(port), "--host", "127.0.0.1", "--tls-cert", tls.files.cert, "--tls-key", tls.files.key, "--nats", nats.url, ...extra],
    { stdio: ["ignore", "inherit", "inherit"], env: { ...process.env, IFP_LOG_LEVEL: process.env.IFP_LOG_LEVEL ?? "warn" } },
  );
  const p = { name, url: `https://localhost:${port}`, child };
  procs.push(p);
  return p;
}

const [alice, bob] = ["agent-alice.yaml", "agent-bob.yaml"].map((f) => readYaml(f)[0]);
const relay = readYaml("relay.yaml")[0];
const ports = { alice: basePort, bob: basePort + 1, relay: basePort + 2 };
const local = (url: string) => url.replace(/^https:\/\/(alice|bob|relay)\.[^/]+/, (_m, n: keyof typeof ports) => `https://localhost:${ports[n]}`);
// On loopback the example's cluster addresses become localhost ports.
for (const agent of [alice, bob]) {
  agent.spec.peers = agent.spec.peers.map((p: { url?: string }) => ({ ...p, url: p.url && local(p.url) }));
  if (agent.spec.relay) agent.spec.relay.urls = agent.spec.relay.urls.map(local);
  delete agent.spec.handler;
}
relay.spec.url = local(relay.spec.url);

for (const [name, manifest] of [["alice", alice], ["bob", bob]] as const) {
  const keyFile = join(stateDir, `${name}.key`);
  writeFileSync(keyFile, keys[`${name}-signing-key`]!, { mode: 0o600 });
  start(name, "agent", manifest, ports[name], ["--signing-key", keyFile, "--ca-file", tls.files.ca, "--local-api-port", String(ports[name] + 100)]);
}
start("relay", "relay", relay, ports.relay, []);

// Each stop is bounded: SIGTERM, then SIGKILL after a grace period.
const stop = async () => {
  await Promise.all(procs.map((p) => stopChild(p.child, 10_000)));
  await nats.stop();
  process.exit(0);
};
process.once("SIGINT", stop);
process.once("SIGTERM", stop);
for (const p of procs) {
  p.child.once("exit", (code) => {
    if (code !== 0 && code !== null) {
      process.stderr.write(`${p.name} exited with ${code}; stopping the stack\n`);
      void stop();
    }
  });
}

await Promise.all(procs.map((p) => waitFor(`${p.name} to be ready`, async () => (await httpsRequest(`${p.url}/readyz`, { ca: tls.ca })).status === 200, 60_000, 250)));

const send = `npx ifp send --from-key ${join(stateDir, "bob.key")} --from bob-agent --to ${procs[0]!.url} --text "Hello from Bob's agent" --ca-file ${tls.files.ca}`;
process.stdout.write(`
ifp local stack is up (state in ${stateDir})
  nats      ${nats.url}
  alice     ${procs[0]!.url}/.well-known/agent/capabilities   (local API http://127.0.0.1:${ports.alice + 100})
  bob       ${procs[1]!.url}/.well-known/agent/capabilities   (local API http://127.0.0.1:${ports.bob + 100})
  relay     ${procs[2]!.url}
  CA        ${tls.files.ca}

Send alice a signed message from bob:
  ${send}

Ctrl-C stops everything.
`);
