// `ifp send --local-api` and `ifp tail` against a real agent runtime (its local API) on a real
// nats-server: what `kubectl ifp send|tail` runs inside an Agent's pod.
import { spawn } from "node:child_process";
import { connect } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startNats, type NatsServer } from "../../../e2e/support/nats.ts";
import { httpsRequest } from "../../../e2e/support/https.ts";
import { localhostTls } from "../../../e2e/support/tls.ts";
import { waitFor } from "../../../e2e/support/ports.ts";
import { MAX_WATCHES } from "../../src/agent/local-api/routes/watch.ts";
import { LocalApiClient } from "../../src/client/local.ts";
import { identity, peerOf, signed } from "../support/fixtures.ts";
import { runAgent, startHandler, type Tls } from "../support/agent-harness.ts";
import { runLocalApiAgent, type LocalApiAgent } from "../support/local-api-harness.ts";

const BIN = new URL("../../bin/ifp.ts", import.meta.url).pathname;

/** One ifp process: its output as it comes, and its end. */
function ifp(...args: string[]) {
  const child = spawn(process.execPath, [BIN, ...args], { stdio: ["pipe", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (c: Buffer) => (stdout += c));
  child.stderr.on("data", (c: Buffer) => (stderr += c));
  const exit = new Promise<number | null>((resolve) => child.on("close", (code) => resolve(code)));
  const timer = setTimeout(() => child.kill("SIGKILL"), 60_000);
  void exit.then(() => clearTimeout(timer));
  return {
    child,
    out: () => stdout,
    err: () => stderr,
    lines: () =>
      stdout
        .split("\n")
        .filter(Boolean)
        .map((l) => JSON.parse(l)),
    done: async () => ({ status: await exit, stdout, stderr }),
  };
}

let nats: NatsServer;
let tls: Tls;
let alice: Awaited<ReturnType<typeof runAgent>>;
let handler: Awaited<ReturnType<typeof startHandler>>;
const pete = identity("pete-local");
const aliceId = identity("alice-local");

beforeAll(async () => {
  [nats, tls, handler] = await Promise.all([startNats(), localhostTls(), startHandler()]);
  alice = await runAgent({
    self: aliceId,
    natsUrl: nats.url,
    tls,
    spec: { peers: [peerOf(pete)], handler: { url: handler.url } },
  });
});
afterAll(async () => {
  await alice?.close();
  await handler?.close();
  await nats?.close();
});

const deliver = async (text: string) => {
  const m = signed(pete, aliceId.agentId, { phase: "context" }, text);
  const res = await httpsRequest(`${alice.url}/.well-known/agent/inbox`, {
    method: "POST",
    headers: { "content-type": "application/json; charset=utf-8" },
    body: JSON.stringify(m),
    ca: tls.ca,
  });
  expect(res.status).toBe(202);
  return m.headers.message_id;
};

/** `ifp tail` against the local API at `url`. */
const tail = (url: string, ...args: string[]) => ifp("tail", "--local-api", url, ...args);
/** `ifp send` of `text` to pete through alice's local API. */
const sendToPete = (text: string, ...args: string[]) =>
  ifp("send", "--local-api", alice.localApiUrl, "--to", pete.agentId, "--text", text, ...args);
/** Until the tail says it follows the inbox: its watch is open, and shows every message accepted from then on. */
const following = (t: ReturnType<typeof ifp>) =>
  waitFor("the tail to start", async () => /following/.test(t.err()), 20_000);

describe("ifp tail", () => {
  it("prints each message the inbox accepts while the handler still gets every one, and stops after --count", async () => {
    const t = tail(alice.localApiUrl, "--count", "2", "--timeout", "50");
    await following(t);
    const ids = [await deliver("first"), await deliver("second")];
    const r = await t.done();
    expect(r.status, r.stderr).toBe(0);
    const got = t.lines();
    expect(got.map((l) => l.message_id)).toEqual(ids);
    expect(got[0]).toMatchObject({
      sender: pete.agentId,
      auth_level: 2,
      handed_on: true,
      message: {
        headers: { from: { agent: pete.agentId }, to: [{ agent: aliceId.agentId }] },
        body: { text: "first" },
      },
    });
    expect(Date.parse(got[1].stored)).toBeGreaterThan(0);
    await waitFor("the handler to get both", async () =>
      ids.every((id) => handler.received.some((h) => h.body.headers.message_id === id)),
    );
  });

  it("--since shows what was accepted before it started; --timeout ends it, exit 1 when fewer than --count came", async () => {
    const id = await deliver("earlier");
    // Without --count, the end of --timeout is a normal end (quiet: nothing is accepted while both run).
    const [r, quiet] = await Promise.all([
      tail(alice.localApiUrl, "--since", "60", "--count", "1000", "--timeout", "3").done(),
      tail(alice.localApiUrl, "--timeout", "1").done(),
    ]);
    expect(r.status).toBe(1);
    expect(r.stdout).toContain(id);
    expect(r.stderr).toMatch(/of 1000 message\(s\) in 3 s/);
    expect(quiet.status).toBe(0);
    expect(quiet.stdout).toBe("");
  });

  it("--stop-on-eof ends it when standard input closes (the end of a kubectl exec)", async () => {
    const t = tail(alice.localApiUrl, "--stop-on-eof");
    await following(t);
    t.child.stdin.end();
    expect((await t.done()).status).toBe(0);
  });

  it("refuses bad arguments with the usage (exit 2) and says what went wrong otherwise (exit 1)", async () => {
    for (const args of [
      ["--count", "0"],
      ["--count", "x"],
      ["--since", "-5"],
      ["--since", "99999999"],
      ["--timeout", "1.5"],
      ["--local-api", "not a url"],
      ["--local-api", "ftp://127.0.0.1:1"],
      ["--bogus"],
    ]) {
      const r = await ifp("tail", ...args).done();
      expect(r.status, args.join(" ")).toBe(2);
      expect(r.stderr).toMatch(/usage:/);
    }
    const down = await tail("http://127.0.0.1:1", "--timeout", "5").done();
    expect(down.status).toBe(1);
    expect(down.stderr).toMatch(/cannot reach the local API at http:\/\/127\.0\.0\.1:1/);
    expect(down.stderr).not.toMatch(/\n\s+at /);
  });
});

describe("GET /messages/watch", () => {
  let bob: LocalApiAgent;
  beforeAll(async () => {
    bob = await runLocalApiAgent({
      self: identity("bob-local"),
      natsUrl: nats.url,
      tls,
      spec: { peers: [peerOf(pete)] },
    });
  });
  afterAll(async () => {
    await bob?.close();
  });

  it("takes nothing from the application's message stream, is served on the loopback only, and refuses a bad since", async () => {
    const m = signed(pete, "bob-local", { phase: "context" }, "for the stream");
    expect((await bob.deliver(m)).status).toBe(202);
    const watched = await tail(bob.localApiUrl, "--since", "60", "--count", "1", "--timeout", "20").done();
    expect(watched.status, watched.stderr).toBe(0);
    expect(JSON.parse(watched.stdout)).toMatchObject({ message_id: m.headers.message_id, handed_on: true });
    // The application still gets it, as a first delivery.
    const [got] = await bob.local().pull(10, 5);
    expect(got).toMatchObject({ message_id: m.headers.message_id, delivery_attempt: 1 });
    await bob.local().ack(m.headers.message_id);

    const remote = await bob.request("/messages/watch", { headers: { authorization: `Bearer ${"t".repeat(43)}` } });
    expect(remote.status).toBe(404);
    for (const since of ["-1", "abc", "604801", "1e3"]) {
      const bad = await fetch(`${bob.localApiUrl}/messages/watch?since=${encodeURIComponent(since)}`);
      expect(bad.status, since).toBe(400);
      expect(await bad.json()).toMatchObject({ status: "error", code: "invalid_format" });
    }
  });
});

describe("GET /messages/watch, held open", () => {
  it(`serves at most ${MAX_WATCHES} watches at once (429 past that, with Retry-After), and a closed one frees its place`, async () => {
    // Asked for all at once: the places are counted before the consumers are made.
    const asked = await Promise.all(
      Array.from({ length: MAX_WATCHES + 4 }, async () => {
        const ac = new AbortController();
        const res = await fetch(`${alice.localApiUrl}/messages/watch`, { signal: ac.signal });
        return { ac, res, body: res.status === 200 ? undefined : await res.json() };
      }),
    );
    const open = asked.filter((a) => a.res.status === 200);
    expect(open).toHaveLength(MAX_WATCHES);
    for (const { res } of open) expect(res.headers.get("content-type")).toMatch(/^text\/event-stream/);
    const refused = asked.filter((a) => a.res.status !== 200);
    expect(refused.map((r) => r.res.status)).toEqual([429, 429, 429, 429]);
    expect(refused[0]?.res.headers.get("retry-after")).toBe("5");
    expect(refused[0]?.body).toMatchObject({ status: "error", code: "rate_limited" });
    open.pop()!.ac.abort();
    await waitFor("a place to free up", async () => {
      const ac = new AbortController();
      const res = await fetch(`${alice.localApiUrl}/messages/watch`, { signal: ac.signal });
      const ok = res.status === 200;
      ac.abort();
      return ok;
    });
    for (const { ac } of open) ac.abort();
  });

  it("gives back the place of a client that leaves before its watch is open", async () => {
    const { port } = new URL(alice.localApiUrl);
    for (let i = 0; i < 3 * MAX_WATCHES; i++) {
      const sock = connect(Number(port), "127.0.0.1");
      await new Promise((r) => sock.once("connect", r));
      sock.end("GET /messages/watch HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n");
      sock.destroy();
    }
    await waitFor(`${MAX_WATCHES} watches to open again`, async () => {
      const acs = Array.from({ length: MAX_WATCHES }, () => new AbortController());
      const got = await Promise.all(
        acs.map((ac) => fetch(`${alice.localApiUrl}/messages/watch`, { signal: ac.signal }).then((r) => r.status)),
      );
      for (const ac of acs) ac.abort();
      return got.every((s) => s === 200);
    });
  });
});

describe("ifp send --local-api", () => {
  it("queues a message the runtime signs as the agent, and follows its delivery with --wait", async () => {
    const r = await sendToPete("hello from the pod").done();
    expect(r.status, r.stderr).toBe(0);
    const [code, ...rest] = r.stdout.trim().split(" ");
    expect(code).toBe("202");
    const queued = JSON.parse(rest.join(" "));
    expect(queued).toMatchObject({ status: "queued", duplicate: false });
    expect(queued.message.headers).toMatchObject({
      from: { agent: aliceId.agentId },
      to: [{ agent: pete.agentId }],
      phase: "context",
    });
    expect(queued.message.security.signatures).toMatchObject([{ alg: "ed25519", key_id: `${aliceId.agentId}#key-1` }]);
    const record = await new LocalApiClient(alice.localApiUrl).status(queued.message_id);
    expect(record.recipients.map((x) => x.agent)).toEqual([pete.agentId]);
    // pete has no address: the outbox gives up on it, and --wait shows the final record, exit 1.
    const waited = await sendToPete("x", "--wait", "1").done();
    expect(waited.status).toBe(1);
    expect(waited.stdout).toMatch(/^202 /);
    const final = JSON.parse(waited.stdout.trim().split("\n")[1]!);
    expect(final).toMatchObject({ state: expect.stringMatching(/^(failed|undeliverable)$/) });
  });

  it("shows the runtime's refusal, and refuses flags that do not go with --local-api (exit 2)", async () => {
    const refused = await sendToPete("x", "--phase", "").done();
    expect(refused.status).toBe(1);
    expect(refused.stdout).toMatch(/^400 \{"status":"error","code":"invalid_format"/);
    const down = await ifp("send", "--local-api", "http://127.0.0.1:1", "--to", pete.agentId, "--text", "x").done();
    expect(down.status).toBe(1);
    expect(down.stderr).toMatch(/cannot reach the local API/);
    for (const args of [
      ["--from", "someone"],
      ["--from-key", "/nowhere"],
      ["--ca-file", "/nowhere"],
    ]) {
      const r = await sendToPete("x", ...args).done();
      expect(r.status, args.join(" ")).toBe(2);
      expect(r.stderr).toMatch(/does not apply/);
    }
    const noText = await ifp("send", "--local-api", alice.localApiUrl, "--to", pete.agentId).done();
    expect(noText.status).toBe(2);
    const waitAlone = await ifp(
      "send",
      "--from-key",
      "k",
      "--from",
      "a",
      "--to",
      "https://x",
      "--text",
      "x",
      "--wait",
      "3",
    ).done();
    expect(waitAlone.status).toBe(2);
    expect(waitAlone.stderr).toMatch(/--wait follows a message sent with --local-api/);
    const badWait = await sendToPete("x", "--wait", "soon").done();
    expect(badWait.status).toBe(2);
  });
});
