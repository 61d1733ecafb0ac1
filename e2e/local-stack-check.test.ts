import { join } from "node:path";
import { expect, it } from "vitest";
import { ifpCommand } from "../runtime/test/support/ifp-command.ts";
import { freePort } from "./support/ports.ts";
import { tempDir } from "./support/process.ts";
import { startLocalStack, type LocalStack } from "./support/local-stack.ts";

const ifp = ifpCommand(150_000);

/** The report's lines that fail: `FAIL  <level>  <id> …`. */
const fails = (stdout: string) => stdout.split("\n").filter((l) => /^FAIL\b/.test(l));
const verdict = (stdout: string, id: string) =>
  new RegExp(`^(pass|FAIL|skip)\\s+\\S+\\s+${id.replace(/\./g, "\\.")}\\s`, "m").exec(stdout)?.[1];

/**
 * The conformance kit on `npm start`'s defaults, run as docs/conformance.md tells it: against
 * alice with the kit's inbox on the stack's certificate, a fresh key whose agent id is the kit's
 * inbox (its identity document there), and alice's local API; against the relay as bob, whose
 * mailbox there no runtime reads. Both pass every MUST and SHOULD with --strict.
 */
it("ifp check --strict passes every MUST and SHOULD against npm start's alice (kit's inbox, --local-api) and relay", {
  timeout: 240_000,
}, async () => {
  const dir = tempDir("ifp-stack-check-");
  let stack: LocalStack | undefined;
  try {
    stack = await startLocalStack(dir);
    const { base, stateDir, caFile } = stack;
    const kitKey = join(dir, "kit.key");
    expect((await ifp("keygen", "--out", kitKey)).status).toBe(0);
    const inboxPort = await freePort();
    const inboxTls = ["--inbox-cert", join(stateDir, "tls.crt"), "--inbox-key", join(stateDir, "tls.key")];
    const started = Date.now();
    const [agent, relay] = await Promise.all([
      ifp(
        "check",
        `https://localhost:${base}`,
        "--strict",
        "--ca-file",
        caFile,
        "--key",
        kitKey,
        "--from",
        `https://localhost:${inboxPort}`,
        "--inbox-port",
        String(inboxPort),
        ...inboxTls,
        "--local-api",
        `http://127.0.0.1:${base + 100}`,
        // alice retries on IFP-6's schedule: the first retry after a minute, the second five later.
        "--send-wait",
        "75",
      ),
      ifp(
        "check",
        `https://localhost:${base + 2}`,
        "--relay",
        "--strict",
        "--ca-file",
        caFile,
        "--key",
        join(stateDir, "bob.key"),
        "--from",
        "bob-agent",
        ...inboxTls,
      ),
    ]);
    const seconds = Math.round((Date.now() - started) / 1000);
    expect(fails(agent.stdout), agent.stdout + agent.stderr).toEqual([]);
    expect(agent.status, agent.stdout).toBe(0);
    expect(fails(relay.stdout), relay.stdout + relay.stderr).toEqual([]);
    expect(relay.status, relay.stdout).toBe(0);
    // Those that rest on the defaults: a relay-only peer without an encryption key reached in
    // clear, the error-phase answer sent to the sender's own inbox, the relay's webhook to a name
    // of the stack's CA.
    for (const id of ["send.relay-preference", "send.relay-fallback", "send.retry-5xx", "inbox.protocol-problem.reply"])
      expect(verdict(agent.stdout, id), id).toBe("pass");
    for (const id of ["relay.push.webhook", "relay.push.webhook.trace", "relay.persistence", "relay.trace"])
      expect(verdict(relay.stdout, id), id).toBe("pass");
    expect(agent.stdout).toMatch(/^MUST\s+\d+ passed, 0 failed, 0 skipped$/m);
    expect(seconds).toBeLessThan(120);
  } finally {
    await stack?.stop();
  }
});
