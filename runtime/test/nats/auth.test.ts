// The runtime against a nats-server that requires authentication: user and password, a token,
// and a .creds file (user JWT + NKey seed) of a server in operator mode. The right credentials
// connect; wrong ones leave the runtime unready with an error line that names the refusal,
// instead of a silent wait.
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Writable } from "node:stream";
import { credsAuthenticator, nkeys, type ConnectionOptions } from "@nats-io/transport-node";
import pino from "pino";
import { LOG_FORMAT } from "../../src/telemetry/log-format.ts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startNats, type NatsServer } from "../../../e2e/support/nats.ts";
import { localhostTls } from "../../../e2e/support/tls.ts";
import { httpsRequest } from "../../../e2e/support/https.ts";
import { describeExit, spawnProcess } from "../../../e2e/support/process.ts";
import { waitFor } from "../../../e2e/support/wait.ts";
import type { NatsOptions } from "../../src/nats/connection.ts";
import { startRelay } from "../../src/relay/main.ts";
import {
  identity,
  peerOf,
  signed,
  tempDir,
  writeAgentManifest,
  writeKey,
  writeRelayManifest,
} from "../support/fixtures.ts";
import { onFreePorts } from "../support/free-ports.ts";
import { untilReady } from "../support/runtime-process.ts";

type KeyPair = ReturnType<typeof nkeys.createOperator>;
type Credentials = Omit<NatsOptions, "url" | "name">;

const BIN = new URL("../../bin/ifp-runtime.ts", import.meta.url).pathname;
const alice = identity("alice-agent");
const bob = identity("bob-agent");
let tls: Awaited<ReturnType<typeof localhostTls>>;
beforeAll(async () => {
  tls = await localhostTls();
});

const b64 = (b: Uint8Array | string) => Buffer.from(b).toString("base64url");

/** A NATS JWT (header.claims.signature, Ed25519 by the issuer's NKey). */
function jwt(issuer: KeyPair, subject: string, name: string, nats: object): string {
  const header = b64(JSON.stringify({ typ: "JWT", alg: "ed25519-nkey" }));
  const claims = b64(
    JSON.stringify({
      jti: b64(crypto.getRandomValues(new Uint8Array(16))),
      iat: Math.floor(Date.now() / 1000),
      iss: issuer.getPublicKey(),
      sub: subject,
      name,
      nats: { ...nats, version: 2 },
    }),
  );
  return `${header}.${claims}.${b64(issuer.sign(new TextEncoder().encode(`${header}.${claims}`)))}`;
}

/**
 * Decentralized authentication as nsc sets it up: an operator, a system account, an account
 * with JetStream, and a `.creds` file for a user of that account; `strangerCreds` is a user of
 * an account the server does not know.
 */
function operatorSetup(dir: string) {
  const operator = nkeys.createOperator();
  const system = nkeys.createAccount();
  const account = nkeys.createAccount();
  const limits = { subs: -1, data: -1, payload: -1, imports: -1, exports: -1, wildcards: true, conn: -1, leaf: -1 };
  const accountJwt = jwt(operator, account.getPublicKey(), "ifp", {
    type: "account",
    limits: { ...limits, mem_storage: -1, disk_storage: -1, streams: -1, consumer: -1 },
  });
  const systemJwt = jwt(operator, system.getPublicKey(), "SYS", { type: "account", limits });
  const credsFor = (issuer: KeyPair, file: string) => {
    const user = nkeys.createUser();
    const userJwt = jwt(issuer, user.getPublicKey(), "runtime", {
      type: "user",
      pub: {},
      sub: {},
      subs: -1,
      data: -1,
      payload: -1,
    });
    const text = `-----BEGIN NATS USER JWT-----\n${userJwt}\n------END NATS USER JWT------\n\n-----BEGIN USER NKEY SEED-----\n${new TextDecoder().decode(user.getSeed())}\n------END USER NKEY SEED------\n`;
    writeFileSync(join(dir, file), text, { mode: 0o600 });
    return join(dir, file);
  };
  const creds = credsFor(account, "runtime.creds");
  return {
    creds,
    strangerCreds: credsFor(nkeys.createAccount(), "stranger.creds"),
    config: [
      `operator: "${jwt(operator, operator.getPublicKey(), "ifp-test", { type: "operator", system_account: system.getPublicKey() })}"`,
      `system_account: ${system.getPublicKey()}`,
      "resolver: MEMORY",
      `resolver_preload: { ${account.getPublicKey()}: "${accountJwt}", ${system.getPublicKey()}: "${systemJwt}" }`,
    ].join("\n"),
  };
}

interface AuthCase {
  kind: string;
  config: string;
  /** For the test's own readiness check of the server. */
  probe: Partial<ConnectionOptions>;
  good: Credentials;
  wrong: Credentials;
  /** The same credentials as ifp-runtime flags. */
  flags: (c: Credentials) => string[];
}

const dir = tempDir();
const op = operatorSetup(dir);
const cases: AuthCase[] = [
  {
    kind: "user and password",
    config: 'authorization { user: "ifp", password: "s3cret pass" }',
    probe: { user: "ifp", pass: "s3cret pass" },
    good: { user: "ifp", pass: "s3cret pass" },
    wrong: { user: "ifp", pass: "not it" },
    flags: (c) => ["--nats-user", c.user!, "--nats-password", c.pass!],
  },
  {
    kind: "token",
    config: 'authorization { token: "t0ken-for-ifp" }',
    probe: { token: "t0ken-for-ifp" },
    good: { token: "t0ken-for-ifp" },
    wrong: { token: "guessed" },
    flags: (c) => ["--nats-token", c.token!],
  },
  {
    kind: "a .creds file (operator mode)",
    config: op.config,
    probe: { authenticator: credsAuthenticator(readFileSync(op.creds)) },
    good: { credsFile: op.creds },
    wrong: { credsFile: op.strangerCreds },
    flags: (c) => ["--nats-creds", c.credsFile!],
  },
];

/** A pino logger whose lines the test reads. */
function capturedLogger() {
  const lines: { level: string; msg: string; err?: string }[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const l of chunk.toString().split("\n").filter(Boolean)) lines.push(JSON.parse(l));
      done();
    },
  });
  return { logger: pino({ ...LOG_FORMAT, level: "info" }, sink), lines };
}

async function relayWith(server: NatsServer, credentials: Credentials) {
  const { logger, lines } = capturedLogger();
  const manifest = writeRelayManifest(
    tempDir(),
    { url: "https://localhost", agents: [peerOf(alice), peerOf(bob)] },
    "auth-relay",
  );
  const relay = await startRelay({
    manifest,
    port: 0,
    host: "127.0.0.1",
    tlsCert: tls.files.cert,
    tlsKey: tls.files.key,
    nats: { url: server.url, ...credentials },
    logger,
  });
  const url = relay.url.replace("127.0.0.1", "localhost");
  return { relay, url, lines, readyz: async () => (await httpsRequest(`${url}/readyz`, { ca: tls.ca })).status };
}

describe.each(cases)("NATS with $kind", (c) => {
  let server: NatsServer;
  beforeAll(async () => {
    server = await startNats({ config: c.config, connect: c.probe });
  });
  afterAll(async () => {
    await server?.close();
  });

  it("connects with the right credentials and serves", async () => {
    const r = await relayWith(server, c.good);
    try {
      await waitFor("the relay to be ready", async () => (await r.readyz()) === 200, 30_000, 100);
      expect(r.lines.filter((l) => l.level === "error" || l.level === "fatal")).toEqual([]);
    } finally {
      await r.relay.close();
    }
  });

  it("stays unready with wrong credentials and says why, at error level", async () => {
    const r = await relayWith(server, c.wrong);
    try {
      const line = await waitFor("the refusal in the log", () => r.lines.find((l) => l.level === "error"), 20_000, 50);
      expect(line.msg).toMatch(/NATS refused the credentials/);
      expect(line.err).toMatch(/Authorization Violation/i);
      expect(r.lines.some((l) => /^connected to NATS/.test(l.msg))).toBe(false);
      const ready = await httpsRequest(`${r.url}/readyz`, { ca: tls.ca });
      expect(ready.status).toBe(503);
      expect(ready.json()).toMatchObject({ status: "error", code: "unavailable" });
    } finally {
      await r.relay.close();
    }
  });

  it("takes the credentials as ifp-runtime flags (agent mode)", async () => {
    const work = tempDir();
    const manifest = writeAgentManifest(work, { agentId: "bob-agent", peers: [peerOf(alice)] });
    const key = writeKey(work, bob);
    // On a free port, chosen again when another test's server took it before the runtime listened.
    const { child, base } = await onFreePorts(["https"], async ({ https: port }) => {
      const child = spawnProcess(
        `ifp-runtime agent (${c.kind})`,
        process.execPath,
        [
          BIN,
          "agent",
          ...["--manifest", manifest, "--port", String(port), "--metrics-port", "0", "--host", "127.0.0.1"],
          ...["--tls-cert", tls.files.cert, "--tls-key", tls.files.key, "--signing-key", key],
          ...["--nats", server.url, "--local-api-port", "0", ...c.flags(c.good)],
        ],
        { env: { ...process.env, IFP_LOG_LEVEL: "warn" } },
      );
      const base = `https://localhost:${port}`;
      await untilReady(child, base, tls.ca);
      return { child, base };
    });
    try {
      const res = await httpsRequest(`${base}/.well-known/agent/inbox`, {
        method: "POST",
        ca: tls.ca,
        headers: { "content-type": "application/json" },
        body: JSON.stringify(signed(alice, "bob-agent")),
      });
      expect(res.status).toBe(202);
      expect(describeExit(await child.stop()), child.log()).toBe("exited with code 0");
    } finally {
      // Only cleanup here (bounded, and a no-op once it ended), so that a failure above is the one reported.
      await child.stop();
    }
    const output = child.log();
    expect(output).not.toMatch(/"level":"(error|fatal)"/);
  });
});
