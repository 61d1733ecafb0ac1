import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { createServer as createHttpsServer } from "node:https";
import { type AddressInfo, createServer } from "node:net";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startNats, type NatsServer } from "../../../e2e/support/nats.ts";
import { localhostTls } from "../../../e2e/support/tls.ts";
import { waitFor } from "../../../e2e/support/ports.ts";
import { identity, peerOf, tempDir, writeKey } from "../support/fixtures.ts";
import { ifpCommand } from "../support/ifp-command.ts";
import { runAgent, startHandler, type Tls } from "../support/agent-harness.ts";

const ifp = ifpCommand();

let nats: NatsServer;
let tls: Tls;
let agent: Awaited<ReturnType<typeof runAgent>>;
let handler: Awaited<ReturnType<typeof startHandler>>;
const person = identity("pete-cli");
const dir = tempDir();

beforeAll(async () => {
  [nats, tls, handler] = await Promise.all([startNats(), localhostTls(), startHandler()]);
  agent = await runAgent({
    self: identity("alice-agent"),
    natsUrl: nats.url,
    tls,
    spec: {
      displayName: "Alice's agent",
      capabilities: [{ name: "ping", description: "Responds", conditions: { temperature: "warm" } }],
      peers: [peerOf(person)],
      handler: { url: handler.url },
    },
  });
});
afterAll(async () => {
  await agent?.close();
  await handler?.close();
  await nats?.close();
});

describe("the ifp command", () => {
  it("discover prints and validates a peer's documents", async () => {
    const url = agent.url.replace("127.0.0.1", "localhost");
    const r = await ifp("discover", url, "--ca-file", tls.files.ca);
    expect(r.status).toBe(0);
    expect(r.stdout).toContain("agent     alice-agent (Alice's agent)");
    expect(r.stdout).toMatch(/ping v1 — Responds \[temperature=warm\]/);
    expect(r.stderr).toMatch(/discovering/);
    const json = JSON.parse((await ifp("discover", url, "--ca-file", tls.files.ca, "--json")).stdout);
    expect(json.capabilities.agent_id).toBe("alice-agent");
  });

  it("discover prints a hostile peer's documents without escape sequences or control characters, each value on its line", async () => {
    // What a peer may write into its documents: an OSC 52 clipboard write, cursor moves that hide
    // a line, a C1 CSI, a bidi override, and a line break that would fake a line of its own.
    const evil = "x\x1b]52;c;cm0gLXJmIH4K\x07\x1b[2K\x1b[1A\x9b31m\u202e\nkey       forged ed25519 active AAAA";
    const docs: Record<string, unknown> = {
      "/.well-known/agent/identity": {
        ifp: 5,
        agent_id: "mallory-agent",
        display: evil,
        keys: [{ key_id: "key-1", type: "ed25519", public_key: "AAAA", status: "active" }],
        endpoints: { inbox: `https://localhost/${evil}` },
      },
      "/.well-known/agent/capabilities": {
        ifp: 7,
        agent_id: "mallory-agent",
        capabilities: [{ name: "ping", description: evil }],
      },
    };
    const server = createHttpsServer({ cert: tls.cert, key: tls.key }, (req, res) => {
      const doc = docs[req.url ?? ""];
      res.writeHead(doc ? 200 : 404, { "content-type": "application/json" }).end(JSON.stringify(doc ?? {}));
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    try {
      const url = `https://localhost:${(server.address() as AddressInfo).port}`;
      const r = await ifp("discover", url, "--ca-file", tls.files.ca);
      expect(r.status, r.stderr).toBe(0);
      // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what must be gone
      expect(r.stdout).not.toMatch(/[\x00-\x09\x0b-\x1f\x7f-\x9f\u202e]/);
      expect(r.stdout.split("\n").filter((l) => l.startsWith("key "))).toEqual(["key       key-1 ed25519 active AAAA"]);
      expect(r.stdout).toContain("agent     mallory-agent (x key       forged ed25519 active AAAA)");
      // The JSON keeps the data, its control characters written as escapes.
      const json = await ifp("discover", url, "--ca-file", tls.files.ca, "--json");
      // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what must be gone
      expect(json.stdout).not.toMatch(/[\x00-\x09\x0b-\x1f\x7f-\x9f\u202e]/);
      expect(JSON.parse(json.stdout).identity.display).toBe(evil);
    } finally {
      await new Promise((r) => server.close(r));
    }
  });

  it("discover fails clearly without trust, on plain http, and on garbage", async () => {
    const url = agent.url.replace("127.0.0.1", "localhost");
    const untrusted = await ifp("discover", url);
    expect(untrusted.status).toBe(1);
    expect(untrusted.stdout + untrusted.stderr).toMatch(/unavailable|cannot reach/);
    expect((await ifp("discover", "http://localhost:1")).stderr).toMatch(/only https/);
    expect((await ifp("discover", "not a url")).stderr).toMatch(/not a URL/);
    expect((await ifp("discover")).status).toBe(2);
  });

  it("discover and send say which failure it was: an untrusted CA, a refused connection, DNS, a timeout", async () => {
    const url = agent.url.replace("127.0.0.1", "localhost");
    const key = writeKey(dir, person);
    const send = (to: string) => ifp("send", "--from-key", key, "--from", "pete-cli", "--to", to, "--text", "hi");
    const line = (r: { stderr: string }) => r.stderr.trim().split("\n").at(-1);
    // The agent's certificate, from a CA the command was not given.
    for (const r of [await ifp("discover", url), await send(url)]) {
      expect(r.status).toBe(1);
      expect(line(r)).toMatch(
        /^ifp: (cannot learn who answers at https:\/\/localhost:\d+: )?cannot reach https:\/\/localhost:\d+\/\.well-known\/agent\/identity: the certificate of localhost:\d+ is not signed by a CA this command trusts \(\w+\): --ca-file FILE adds the CA that signed it$/,
      );
    }
    // A port nothing listens on.
    const closed = await new Promise<number>((resolve) => {
      const s = createServer().listen(0, "127.0.0.1", () => {
        const { port } = s.address() as AddressInfo;
        s.close(() => resolve(port));
      });
    });
    for (const r of [await ifp("discover", `https://localhost:${closed}`), await send(`https://localhost:${closed}`)])
      expect(line(r)).toMatch(
        new RegExp(`connection refused: nothing listens at localhost:${closed} \\(ECONNREFUSED\\)$`),
      );
    // A name no DNS knows (.invalid never resolves, RFC 6761).
    expect(line(await ifp("discover", "https://no-such-agent.invalid"))).toMatch(
      /DNS (does not know|did not answer for) (the name )?no-such-agent\.invalid/,
    );
    // A server that takes the connection and never answers.
    const silent = createServer(() => {});
    await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
    try {
      const port = (silent.address() as AddressInfo).port;
      expect(line(await ifp("discover", `https://localhost:${port}`))).toMatch(
        new RegExp(`timed out waiting for localhost:${port}$`),
      );
    } finally {
      silent.close();
    }
  });

  it("send signs a message and delivers it to the inbox", async () => {
    const key = writeKey(dir, person);
    const r = await ifp(
      "send",
      "--from-key",
      key,
      "--from",
      "pete-cli",
      "--to",
      agent.url.replace("127.0.0.1", "localhost"),
      "--text",
      "hello from a person",
      "--ca-file",
      tls.files.ca,
    );
    expect(r.stderr).toMatch(/sending msg:/);
    expect(r.stdout).toMatch(/^202 \{"status":"accepted","message_id":"msg:/);
    expect(r.status).toBe(0);
    await waitFor("the handler", () => handler.received.some((m) => m.body.body.text === "hello from a person"));
  });

  it("send reports the peer's refusal", async () => {
    const stranger = identity("stranger");
    const r = await ifp(
      "send",
      "--from-key",
      writeKey(dir, stranger),
      "--from",
      "stranger",
      "--to",
      agent.url.replace("127.0.0.1", "localhost"),
      "--text",
      "hi",
      "--ca-file",
      tls.files.ca,
    );
    expect(r.status).toBe(1);
    expect(r.stdout).toMatch(/^401 .*unknown_sender/);
  });

  it("keygen writes a key once and prints its public half", async () => {
    const out = join(dir, "new.key");
    const r = await ifp("keygen", "--out", out);
    expect(r.status).toBe(0);
    expect(r.stdout.trim()).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(readFileSync(out, "utf8")).toMatch(/BEGIN PRIVATE KEY/);
    const again = await ifp("keygen", "--out", out);
    expect(again.status).toBe(1);
    expect(again.stderr).toMatch(/never overwritten/);
  });

  it("answers --help of every command with its usage and exit 0, and --version with the package's version", async () => {
    for (const command of ["discover", "send", "check", "keygen", "relay"]) {
      for (const flag of ["--help", "-h"]) {
        const r = await ifp(command, flag);
        expect(r.status, `${command} ${flag}: ${r.stderr}`).toBe(0);
        expect(r.stdout).toContain(`ifp ${command} `);
        expect(r.stderr).toBe("");
      }
    }
    // After other arguments too, and before a missing required option is complained about.
    expect((await ifp("relay", "pull", "--help")).status).toBe(0);
    const { version } = JSON.parse(readFileSync(new URL("../../../package.json", import.meta.url), "utf8")) as {
      version: string;
    };
    for (const flag of ["--version", "-V"]) {
      const v = await ifp(flag);
      expect(v.status).toBe(0);
      expect(v.stdout).toMatch(new RegExp(`^ifp ${version.replace(/\./g, "\\.")} \\(commit [0-9a-f]{12}\\)\n$`));
    }
    // An unknown command is still a usage mistake.
    expect((await ifp("nonsense", "--help")).status).toBe(2);
  });

  it("prints a completion script for bash and zsh that completes commands and each command's flags", async () => {
    const bash = await ifp("completion", "bash");
    expect(bash.status, bash.stderr).toBe(0);
    const complete = (...words: string[]) => {
      const script = `${bash.stdout}\nCOMP_WORDS=(${words.map((w) => `'${w}'`).join(" ")}); COMP_CWORD=${words.length - 1}; _ifp_complete; printf '%s\\n' "\${COMPREPLY[@]}"`;
      const r = spawnSync("bash", ["-c", script], { encoding: "utf8" });
      expect(r.status, r.stderr).toBe(0);
      return r.stdout.split("\n").filter(Boolean);
    };
    expect(complete("ifp", "")).toEqual(expect.arrayContaining(["discover", "send", "check", "relay", "completion"]));
    expect(complete("ifp", "se")).toEqual(["send"]);
    expect(complete("ifp", "send", "--from")).toEqual(["--from-key", "--from"]);
    expect(complete("ifp", "relay", "p")).toEqual(["pull", "publish"]);
    expect(complete("ifp", "completion", "")).toEqual(["bash", "zsh", "--help"]);
    const zsh = await ifp("completion", "zsh");
    expect(zsh.status).toBe(0);
    expect(zsh.stdout).toContain("bashcompinit");
    expect(zsh.stdout).toContain("complete -o default -F _ifp_complete ifp");
    for (const bad of [["completion"], ["completion", "fish"], ["completion", "bash", "zsh"]]) {
      const r = await ifp(...bad);
      expect(r.status, bad.join(" ")).toBe(2);
      expect(r.stderr).toMatch(/^ifp: completion takes one shell: bash or zsh/);
    }
  });
});
