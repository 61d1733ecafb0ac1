// The A2A face of an agent (docs/a2a.md) as A2A clients meet it: the ifp-runtime command with
// spec.a2a enabled over real TLS, a real nats-server, the official A2A JS SDK's client, the
// card's signature checked with jose, and the test's application answering through the local API.
import { spawnSync } from "node:child_process";
import { createHmac, randomUUID, sign as edSign } from "node:crypto";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { verifyAgentCardSignature } from "@a2a-js/sdk";
import { DefaultAgentCardResolver } from "@a2a-js/sdk/client";
import { A2AError, JsonRpcTransportError, RequestMalformedError } from "@a2a-js/sdk/errors";
import canonicalize from "canonicalize";
import { httpbis } from "http-message-signatures";
import { flattenedVerify, importJWK } from "jose";
import { Agent as Dispatcher, fetch as undiciFetch } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { httpsRequest } from "../../../e2e/support/https.ts";
import { waitFor } from "../../../e2e/support/ports.ts";
import type { ManagedProcess } from "../../../e2e/support/process.ts";
import { toolPath } from "../../../e2e/tools/tools.ts";
import { jwks as jwksOf, signCard } from "../../src/a2a/card.ts";
import { contentDigest, signRequest } from "../../src/protocol/http-signatures.ts";
import {
  clientFactory,
  fetchWith as fetchWithCa,
  handedOffTo,
  localPostTo,
  spawnRuntime,
  userMessage,
} from "../support/a2a-harness.ts";
import { type LayoutNats, withLayoutNatsAndTls } from "../support/a2a-layouts.ts";
import { runAgent, startHandler, type Tls } from "../support/agent-harness.ts";
import { identity, peerOf, tempDir, writeAgentManifest, writeKey } from "../support/fixtures.ts";
import { onFreePorts } from "../support/free-ports.ts";

let nats: LayoutNats;
let tls: Tls;
// On the layout the file asks for (a2a.isolated.test.ts: the isolated one).
withLayoutNatsAndTls((n, t) => {
  nats = n;
  tls = t;
});

const self = identity("a2a-agent");
const signer = identity("a2a-signer");
const TOKEN = "a2a-test-token-0123456789abcdef";
const OTHER_TOKEN = "a2a-other-token-0123456789abcdef";

let runtime: ManagedProcess;
let handler: Awaited<ReturnType<typeof startHandler>>;
let base: string;
let localApi: string;
let dir: string;
let port: number;
let localPort: number;
let keyFile: string;

async function start(): Promise<void> {
  const spawn = { name: "ifp-runtime agent (a2a)", dir, keyFile, tls, port, localApiPort: localPort };
  runtime = await spawnRuntime({
    ...spawn,
    natsUrl: nats.url,
    tokens: [TOKEN, OTHER_TOKEN],
    args: await nats.runtimeArgs(self.agentId),
  });
}

beforeAll(async () => {
  handler = await startHandler();
  dir = tempDir("ifp-a2a-");
  keyFile = writeKey(dir, self);
  // The ports are kept across the runtime's restarts in the tests.
  await onFreePorts(["https", "localApi"], async (ports) => {
    [port, localPort] = [ports.https, ports.localApi];
    base = `https://localhost:${port}`;
    localApi = `http://127.0.0.1:${localPort}`;
    writeAgentManifest(dir, {
      agentId: self.agentId,
      displayName: "A2A test agent",
      // The URL the operator gives every agent: request signatures must name its authority.
      baseUrl: base,
      capabilities: [{ name: "calendar.availability", description: "Tells when its owner is free" }],
      peers: [peerOf(signer)],
      // A hand-off held by a killed runtime comes again after the handler's timeout and 30 s
      // (restarts, below): the application on loopback answers at once, 3 s is ample.
      handler: { url: handler.url, timeout: "3s" },
      inbox: { maxMessageBytes: 16 * 1024 },
      a2a: {
        enabled: true,
        authentication: { bearerTokenSecret: { name: "a2a-tokens" } },
        skills: [{ id: "smalltalk", name: "Small talk", description: "Talks", examples: ["hello"] }],
        waitFor: "5s",
      },
    });
    await start();
  });
}, 60_000);

afterAll(async () => {
  await runtime?.stop();
  await handler?.close();
});

const dispatcher = () => new Dispatcher({ connect: { ca: tls.ca } });
const fetchWith = (token: string | undefined) => fetchWithCa(tls.ca, token);
const factory = (token: string | undefined, preferred?: "JSONRPC" | "HTTP+JSON") =>
  clientFactory(tls.ca, token, preferred);

/** The hand-off of the A2A task `taskId`, once the application got it. */
const handedOff = (taskId: string, timeoutMs?: number) => handedOffTo(handler, taskId, timeoutMs);

const localPost = (path: string, body: unknown) => localPostTo(localApi, path, body);

/** A raw JSON-RPC call over TLS. */
async function rpc(body: unknown, headers: Record<string, string> = { authorization: `Bearer ${TOKEN}` }) {
  const res = await httpsRequest(`${base}/a2a/v1`, {
    method: "POST",
    headers: { "content-type": "application/json", "a2a-version": "1.0", ...headers },
    body: typeof body === "string" ? body : JSON.stringify(body),
    ca: tls.ca,
  });
  return { status: res.status, headers: res.headers, body: res.text ? res.json() : undefined };
}

/** A JSON-RPC call signed with the signer's IFP key for this agent's base URL. */
async function signedRpc(body: unknown) {
  const url = `${base}/a2a/v1`;
  const text = JSON.stringify(body);
  const headers = await signRequest(
    { method: "POST", url, headers: { "content-type": "application/json", "a2a-version": "1.0" }, body: text },
    signer.signing,
  );
  return httpsRequest(url, { method: "POST", headers, body: text, ca: tls.ca });
}

const rawMessage = (text: string, messageId = randomUUID()) => ({
  message: { messageId, role: "ROLE_USER", parts: [{ text }] },
  configuration: { returnImmediately: true },
});

describe("the agent card", () => {
  it("is read by the SDK's resolver and its JWS verifies with jose against the agent's JWKS", async () => {
    const card = (await new DefaultAgentCardResolver({ fetchImpl: fetchWith(undefined) }).resolve(base)) as any;
    expect(card.name).toBe("A2A test agent");
    expect(card.supportedInterfaces.map((i: any) => [i.protocolBinding, i.url, i.protocolVersion])).toEqual([
      ["JSONRPC", `${base}/a2a/v1`, "1.0"],
      ["HTTP+JSON", `${base}/a2a/rest`, "1.0"],
      ["JSONRPC", `${base}/a2a/v1`, "0.3"],
    ]);
    expect(card.skills.map((s: any) => s.id)).toEqual(["calendar.availability", "smalltalk"]);
    expect(Object.keys(card.securitySchemes).sort()).toEqual(["bearer", "ifpHttpSignature"]);

    const raw = (await httpsRequest(`${base}/.well-known/agent-card.json`, { ca: tls.ca })).json();
    const [sig] = raw.signatures;
    const header = JSON.parse(Buffer.from(sig.protected, "base64url").toString());
    expect(header).toMatchObject({
      alg: "EdDSA",
      kid: `${self.agentId}#key-1`,
      jku: `${base}/.well-known/a2a/jwks.json`,
    });
    const jwks = (await httpsRequest(header.jku, { ca: tls.ca })).json();
    const jwk = jwks.keys.find((k: any) => k.kid === header.kid);
    const key = await importJWK(jwk, "EdDSA");
    const { signatures: _, ...unsigned } = raw;
    const payload = Buffer.from(canonicalize(unsigned)!).toString("base64url");
    const verified = await flattenedVerify({ protected: sig.protected, signature: sig.signature, payload }, key);
    expect(JSON.parse(Buffer.from(verified.payload).toString())).toEqual(unsigned);
    // A card changed after signing does not verify.
    const forged = Buffer.from(canonicalize({ ...unsigned, name: "someone else" })!).toString("base64url");
    await expect(
      flattenedVerify({ protected: sig.protected, signature: sig.signature, payload: forged }, key),
    ).rejects.toThrow();
  });
});

describe("the agent card, checked by libraries this runtime does not use", () => {
  /** The card and JWKS checked by go-jose with the RFC 8785 reference implementation (e2e/tools/card-verify). */
  function goJose(card: unknown, jwks: unknown): { status: number | null; result: any } {
    const at = tempDir("ifp-card-verify-");
    writeFileSync(join(at, "card.json"), JSON.stringify(card));
    writeFileSync(join(at, "jwks.json"), JSON.stringify(jwks));
    const run = spawnSync(toolPath("card-verify"), [join(at, "card.json"), join(at, "jwks.json")], {
      encoding: "utf8",
      timeout: 30_000,
    });
    return { status: run.status, result: JSON.parse(run.stdout.trim() || JSON.stringify({ error: run.stderr })) };
  }

  it("verifies, in each form served, with the official SDK's verifier and with go-jose over the section 8.4.1 form", async () => {
    const card10 = (
      await httpsRequest(`${base}/.well-known/agent-card.json`, { headers: { "a2a-version": "1.0" }, ca: tls.ca })
    ).json();
    const card03 = (await httpsRequest(`${base}/.well-known/agent-card.json`, { ca: tls.ca })).json();
    expect(card03.protocolVersion).toBe("0.3.0");
    const jwks = (await httpsRequest(`${base}/.well-known/a2a/jwks.json`, { ca: tls.ca })).json();
    const kid = `${self.agentId}#key-1`;
    const byKid = async (k: string) => jwks.keys.find((key: any) => key.kid === k);
    // The SDK's verifier reads a card as 1.0's AgentCard (docs/a2a.md#versions): the 1.0 form.
    await expect(verifyAgentCardSignature(byKid)(card10)).resolves.toBeUndefined();
    await expect(verifyAgentCardSignature(byKid)({ ...card10, name: "someone else" })).rejects.toThrow(
      /No valid signatures/,
    );
    for (const card of [card10, card03])
      expect(goJose(card, jwks)).toEqual({ status: 0, result: { verified: true, kids: [kid] } });
    // A card with an empty repeated field, signed as this runtime signs: the field is not in the payload.
    const withEmpty = { ...card10, signatures: undefined, skills: [{ ...card10.skills[0], examples: [] }] };
    const signed = {
      ...withEmpty,
      signatures: [await signCard(withEmpty, self.signing, `${base}/.well-known/a2a/jwks.json`)],
    };
    expect(goJose(signed, jwks)).toEqual({ status: 0, result: { verified: true, kids: [kid] } });
    await expect(verifyAgentCardSignature(byKid)(signed)).resolves.toBeUndefined();
  });

  it("refuses, in go-jose too, a changed card, another form's signature, and a key or algorithm that is not the card's", async () => {
    const card10 = (
      await httpsRequest(`${base}/.well-known/agent-card.json`, { headers: { "a2a-version": "1.0" }, ca: tls.ca })
    ).json();
    const card03 = (await httpsRequest(`${base}/.well-known/agent-card.json`, { ca: tls.ca })).json();
    const jwks = (await httpsRequest(`${base}/.well-known/a2a/jwks.json`, { ca: tls.ca })).json();
    const refused = (card: unknown, keys: unknown = jwks) => {
      const { status, result } = goJose(card, keys);
      expect(status, JSON.stringify(result)).toBe(1);
      return result.error as string;
    };
    expect(refused({ ...card10, name: "someone else" })).toMatch(/signature 1/);
    expect(refused({ ...card03, signatures: card10.signatures })).toMatch(/signature 1/);
    // The JWKS of another agent under the same kid.
    const other = jwksOf(identity("a2a-someone-else").signing).keys.map((k) => ({ ...k, kid: jwks.keys[0].kid }));
    expect(refused(card10, { keys: other })).toMatch(/signature 1/);
    // alg none, and HS256 keyed with the agent's public key (key confusion).
    const [sig] = card10.signatures;
    const header = JSON.parse(Buffer.from(sig.protected, "base64url").toString());
    const forged = (alg: string, sign: (input: string) => string) => {
      const protectedHeader = Buffer.from(JSON.stringify({ ...header, alg })).toString("base64url");
      const { signatures: _, ...unsigned } = card10;
      const input = `${protectedHeader}.${Buffer.from(canonicalize(unsigned)!).toString("base64url")}`;
      return { ...card10, signatures: [{ protected: protectedHeader, signature: sign(input) }] };
    };
    expect(refused(forged("none", () => ""))).toMatch(/signature 1/);
    const x = jwks.keys[0].x;
    expect(refused(forged("HS256", (input) => createHmac("sha256", x).update(input).digest("base64url")))).toMatch(
      /signature 1/,
    );
    expect(
      refused(
        forged("HS256", (input) => createHmac("sha256", x).update(input).digest("base64url")),
        {
          keys: [{ kty: "oct", k: Buffer.from(x).toString("base64url"), kid: header.kid }],
        },
      ),
    ).toMatch(/signature 1/);
  });
});

describe("the card's origin", () => {
  it("names the configured base URL whatever Host the request gives: a forged Host gets the canonical card", async () => {
    const canonical = (await httpsRequest(`${base}/.well-known/agent-card.json`, { ca: tls.ca })).text;
    const forged = await httpsRequest(`${base}/.well-known/agent-card.json`, {
      headers: { host: "attacker.example" },
      ca: tls.ca,
    });
    expect(forged.status).toBe(200);
    expect(forged.text).toBe(canonical);
    expect(forged.text).not.toContain("attacker.example");
    const header = JSON.parse(Buffer.from(forged.json().signatures[0].protected, "base64url").toString());
    expect(header.jku).toBe(`${base}/.well-known/a2a/jwks.json`);
  });

  it("without a configured base URL (a runtime run by hand) names only the agent's own names, and takes no request signature", async () => {
    const bare = await runAgent({
      self: identity("a2a-bare"),
      spec: { peers: [peerOf(signer)], a2a: { enabled: true } },
      ...(await nats.runAgentNats("a2a-bare")),
      tls,
    });
    try {
      const at = bare.url.replace("127.0.0.1", "localhost");
      const card = await httpsRequest(`${at}/.well-known/agent-card.json`, {
        headers: { host: "attacker.example" },
        ca: tls.ca,
      });
      expect(card.status).toBe(200);
      expect(card.text).not.toContain("attacker.example");
      expect(card.json().supportedInterfaces[0].url).toMatch(/^https:\/\/[a-z0-9-]+\.[a-z0-9-]+\.svc\/a2a\/v1$/);
      const body = JSON.stringify({ jsonrpc: "2.0", id: 1, method: "ListTasks", params: {} });
      const url = `${at}/a2a/v1`;
      const headers = await signRequest(
        { method: "POST", url, headers: { "content-type": "application/json", "a2a-version": "1.0" }, body },
        signer.signing,
      );
      const res = await httpsRequest(url, { method: "POST", headers, body, ca: tls.ca });
      expect(res.status).toBe(401);
      expect(res.json().error.message).toMatch(/no spec.baseUrl/);
    } finally {
      await bare.close();
    }
  });
});

describe("A2A clients through the official SDK", () => {
  it("JSON-RPC: a message is answered as a submitted task, handed on once, read back, and its updates streamed", async () => {
    const client = await factory(TOKEN).createFromUrl(base);
    const sent = (await client.sendMessage(userMessage("hello over JSON-RPC"))) as any;
    expect(sent.id).toMatch(/^[0-9a-f-]{36}$/);
    expect(sent.status.state).toBe(1); // TASK_STATE_SUBMITTED
    const handed = await handedOff(sent.id);
    expect(handed.headers["ifp-auth-source"]).toBe("a2a-bearer");
    expect(handed.headers["ifp-auth-level"]).toBe("0");
    expect(handed.body.body.text).toBe("hello over JSON-RPC");
    expect(handed.body.headers.conversation_id).toBe(sent.contextId);

    const got = (await client.getTask({ id: sent.id, historyLength: undefined, tenant: "" })) as any;
    expect(got.history[0].parts[0].content.value).toBe("hello over JSON-RPC");

    const events: any[] = [];
    const following = (async () => {
      for await (const e of client.resubscribeTask({ id: sent.id, tenant: "" })) events.push(e.payload);
    })();
    await waitFor("the subscription's first event", async () => events.length > 0, 10_000);
    // The application: an artifact through the task route, then a reply to the hand-off.
    expect(
      (
        await localPost(`/a2a/tasks/${sent.id}`, {
          state: "TASK_STATE_WORKING",
          artifact: { name: "notes", text: "a draft" },
        })
      ).status,
    ).toBe(200);
    const reply = await localPost("/outbox", {
      in_reply_to: handed.body.headers.message_id,
      to: handed.body.headers.from.agent,
      phase: "response",
      text: "hello back",
    });
    expect(reply.status).toBe(202);
    // The reply went to the task, not to the network: its delivery record says so at once.
    const record = (await (
      await fetch(`${localApi}/outbox/${encodeURIComponent(reply.body.message_id)}`)
    ).json()) as any;
    expect(record).toMatchObject({ state: "delivered", recipients: [{ state: "delivered", via: "a2a-task" }] });
    await following;
    expect(events[0].$case).toBe("task");
    const artifact = events.find((e) => e.$case === "artifactUpdate");
    expect(artifact.value.artifact.parts[0].content.value).toBe("a draft");
    const last = events.at(-1);
    expect(last.$case).toBe("statusUpdate");
    expect(last.value.status.state).toBe(3); // TASK_STATE_COMPLETED
    expect(last.value.status.message.parts[0].content.value).toBe("hello back");
    const done = (await client.getTask({ id: sent.id, historyLength: undefined, tenant: "" })) as any;
    expect(done.status.state).toBe(3);
    expect(done.artifacts).toHaveLength(1);
    const listed = (await client.listTasks({
      tenant: "",
      contextId: sent.contextId,
      status: 0,
      pageToken: "",
    } as any)) as any;
    expect(listed.tasks.map((t: any) => t.id)).toEqual([sent.id]);
  });

  it("HTTP+JSON: a streamed message gives the task, then the application's updates, and ends when it completes", async () => {
    const client = await factory(TOKEN, "HTTP+JSON").createFromUrl(base);
    const events: any[] = [];
    const m = userMessage("hello over REST");
    for await (const e of client.sendMessageStream(m)) {
      events.push(e.payload);
      if (events.length === 1) {
        const taskId = (e.payload!.value as { id: string }).id;
        await handedOff(taskId);
        await localPost(`/a2a/tasks/${taskId}`, { state: "TASK_STATE_WORKING" });
        await localPost(`/a2a/tasks/${taskId}`, { state: "TASK_STATE_COMPLETED", message: { text: "done" } });
      }
    }
    expect(events.map((e) => e.$case)).toEqual(["task", "statusUpdate", "statusUpdate"]);
    expect(events.map((e) => e.value.status?.state)).toEqual([1, 2, 3]);
  });

  it("a blocking send waits for the application's answer", async () => {
    const client = await factory(TOKEN).createFromUrl(base);
    const m = userMessage("answer me");
    m.configuration.returnImmediately = false;
    const answering = (async () => {
      const handed = await waitFor(
        "the blocking message's hand-off",
        async () => handler.received.some((r) => r.body.body.text === "answer me"),
        10_000,
      ).then(() => handler.received.find((r) => r.body.body.text === "answer me")!);
      await localPost("/outbox", { in_reply_to: handed.body.headers.message_id, phase: "response", text: "answered" });
    })();
    const task = (await client.sendMessage(m)) as any;
    await answering;
    expect(task.status.state).toBe(3);
    expect(task.status.message.parts[0].content.value).toBe("answered");
  });
});

describe("callers signing with IFP keys (RFC 9421)", () => {
  it("are taken at their IFP level, and see only their own tasks", async () => {
    const body = JSON.stringify({ jsonrpc: "2.0", id: 7, method: "SendMessage", params: rawMessage("signed hello") });
    const url = `${base}/a2a/v1`;
    const headers = await signRequest(
      { method: "POST", url, headers: { "content-type": "application/json", "a2a-version": "1.0" }, body },
      signer.signing,
    );
    const res = await httpsRequest(url, { method: "POST", headers, body, ca: tls.ca });
    expect(res.status).toBe(200);
    const task = res.json().result.task;
    expect(res.json().id).toBe(7);
    const handed = await handedOff(task.id);
    expect(handed.body.headers.from.agent).toBe(signer.agentId);
    expect(handed.headers["ifp-auth-level"]).toBe("2");
    expect(handed.headers["ifp-auth-source"]).toBe("a2a-signature:peers");
    // The bearer caller asks for the signer's task: there is none for it.
    const other = await rpc({ jsonrpc: "2.0", id: 8, method: "GetTask", params: { id: task.id } });
    expect(other.status).toBe(200);
    expect(other.body.error.code).toBe(-32001);
    const rest = await httpsRequest(`${base}/a2a/rest/tasks/${task.id}`, {
      headers: { authorization: `Bearer ${OTHER_TOKEN}`, "a2a-version": "1.0" },
      ca: tls.ca,
    });
    expect(rest.status).toBe(404);
    expect(rest.json().error.details[0].reason).toBe("TASK_NOT_FOUND");
  });

  it("list only their own tasks: ListTasks shows no other caller's task, nor its history, in either binding", async () => {
    const signerText = `the signer's own words ${randomUUID()}`;
    const bearerText = `the bearer's own words ${randomUUID()}`;
    const bySigner = await signedRpc({ jsonrpc: "2.0", id: 40, method: "SendMessage", params: rawMessage(signerText) });
    const signerTask = bySigner.json().result.task.id as string;
    const byBearer = await rpc({ jsonrpc: "2.0", id: 41, method: "SendMessage", params: rawMessage(bearerText) });
    const bearerTask = byBearer.body.result.task.id as string;
    const ids = (listed: { tasks: { id: string }[] }) => listed.tasks.map((t) => t.id);
    const all = { pageSize: 100, historyLength: 10, includeArtifacts: true };

    const listedByBearer = await rpc({ jsonrpc: "2.0", id: 42, method: "ListTasks", params: all });
    expect(listedByBearer.status, JSON.stringify(listedByBearer.body)).toBe(200);
    expect(ids(listedByBearer.body.result)).toContain(bearerTask);
    expect(ids(listedByBearer.body.result)).not.toContain(signerTask);
    expect(JSON.stringify(listedByBearer.body)).not.toContain(signerText);
    const signerList = await signedRpc({ jsonrpc: "2.0", id: 43, method: "ListTasks", params: all });
    expect(signerList.status, signerList.text).toBe(200);
    const listedBySigner = signerList.json().result;
    expect(ids(listedBySigner)).toContain(signerTask);
    expect(ids(listedBySigner)).not.toContain(bearerTask);
    expect(JSON.stringify(listedBySigner)).toContain(signerText);
    expect(JSON.stringify(listedBySigner)).not.toContain(bearerText);
    // Another token is another caller; HTTP+JSON keeps the same rule.
    const rest = await httpsRequest(`${base}/a2a/rest/tasks?pageSize=100&historyLength=10`, {
      headers: { authorization: `Bearer ${OTHER_TOKEN}`, "a2a-version": "1.0" },
      ca: tls.ca,
    });
    expect(rest.status).toBe(200);
    expect(ids(rest.json())).not.toContain(signerTask);
    expect(ids(rest.json())).not.toContain(bearerTask);
    expect(rest.text).not.toContain(signerText);
    expect(rest.text).not.toContain(bearerText);
  });

  it("a signed request replayed with another Host, or sent again, is refused with 401", async () => {
    const body = JSON.stringify({ jsonrpc: "2.0", id: 50, method: "SendMessage", params: rawMessage("replayed") });
    // A request the signer sent to another A2A agent, replayed here naming that agent's host.
    const elsewhere = "https://other-agent.example/a2a/v1";
    const forOther = await signRequest(
      { method: "POST", url: elsewhere, headers: { "content-type": "application/json", "a2a-version": "1.0" }, body },
      signer.signing,
    );
    const forged = await httpsRequest(`${base}/a2a/v1`, {
      method: "POST",
      headers: { ...forOther, host: "other-agent.example" },
      body,
      ca: tls.ca,
    });
    expect(forged.status).toBe(401);
    expect(forged.json().error.data[0].reason).toBe("UNAUTHENTICATED");
    expect(forged.json().error.message).toMatch(/does not verify/);
    // A request signed for this agent is taken once.
    const url = `${base}/a2a/v1`;
    const headers = await signRequest(
      { method: "POST", url, headers: { "content-type": "application/json", "a2a-version": "1.0" }, body },
      signer.signing,
    );
    const first = await httpsRequest(url, { method: "POST", headers, body, ca: tls.ca });
    expect(first.status).toBe(200);
    const again = await httpsRequest(url, { method: "POST", headers, body, ca: tls.ca });
    expect(again.status).toBe(401);
    expect(again.json().error.message).toMatch(/taken before/);
  });

  it("a stale created, or a signature without a nonce, is refused with 401", async () => {
    const body = JSON.stringify({ jsonrpc: "2.0", id: 51, method: "ListTasks", params: {} });
    const url = `${base}/a2a/v1`;
    const stale = await signRequest(
      { method: "POST", url, headers: { "content-type": "application/json", "a2a-version": "1.0" }, body },
      signer.signing,
      new Date(Date.now() - 400_000),
    );
    const old = await httpsRequest(url, { method: "POST", headers: stale, body, ca: tls.ca });
    expect(old.status).toBe(401);
    expect(old.json().error.message).toMatch(/older than 300 s/);
    // The profile's signature in every other respect, made by the RFC 9421 library, with no nonce.
    const created = new Date();
    const unsigned = {
      "content-type": "application/json",
      "a2a-version": "1.0",
      "content-digest": contentDigest(body),
    };
    const noNonce = await httpbis.signMessage(
      {
        key: {
          id: `${signer.agentId}#${signer.signing.keyId}`,
          alg: "ed25519",
          sign: async (data: Buffer) => edSign(null, data, signer.signing.privateKey),
        },
        name: "sig1",
        fields: ["@method", "@authority", "@path", "@query", "content-digest"],
        params: ["created", "expires", "keyid", "alg"],
        paramValues: { created, expires: new Date(created.getTime() + 60_000) },
      },
      { method: "POST", url, headers: unsigned },
    );
    const bare = await httpsRequest(url, {
      method: "POST",
      headers: noNonce.headers as Record<string, string>,
      body,
      ca: tls.ca,
    });
    expect(bare.status).toBe(401);
    expect(bare.json().error.message).toMatch(/needs a nonce/);
  });

  it("a signature over another body is refused with 401", async () => {
    const body = JSON.stringify({ jsonrpc: "2.0", id: 1, method: "ListTasks", params: {} });
    const url = `${base}/a2a/v1`;
    const headers = await signRequest({ method: "POST", url, body }, signer.signing);
    const res = await httpsRequest(url, {
      method: "POST",
      headers: { ...headers, "content-type": "application/json", "a2a-version": "1.0" },
      body: body.replace("ListTasks", "GetTask"),
      ca: tls.ca,
    });
    expect(res.status).toBe(401);
    expect(res.json().error).toMatchObject({ code: -31401, data: [{ reason: "UNAUTHENTICATED" }] });
  });
});

describe("abuse", () => {
  it("refuses unauthenticated calls and wrong tokens with 401 in each binding's error shape", async () => {
    const none = await rpc({ jsonrpc: "2.0", id: 1, method: "ListTasks", params: {} }, {});
    expect(none.status).toBe(401);
    expect(none.headers["www-authenticate"]).toContain("Bearer");
    expect(none.body).toMatchObject({
      jsonrpc: "2.0",
      id: 1,
      error: {
        code: -31401,
        data: [
          {
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            reason: "UNAUTHENTICATED",
            domain: "a2a-protocol.org",
          },
        ],
      },
    });
    const wrong = await rpc(
      { jsonrpc: "2.0", id: 2, method: "ListTasks", params: {} },
      { authorization: "Bearer nope-nope-nope-nope" },
    );
    expect(wrong.status).toBe(401);
    // The version as a query parameter (section 3.6.1).
    const rest = await httpsRequest(`${base}/a2a/rest/tasks?A2A-Version=1.0`, { ca: tls.ca });
    expect(rest.status).toBe(401);
    expect(rest.json().error).toMatchObject({ code: 401, status: "UNAUTHENTICATED" });
    // The SDK's clients tell it from a malformed request: over JSON-RPC by the code, over
    // HTTP+JSON by the status.
    for (const binding of ["JSONRPC", "HTTP+JSON"] as const) {
      const client = await factory("wrong-token-wrong-token", binding).createFromUrl(base);
      const err: any = await client.sendMessage(userMessage("let me in")).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err, binding).toBeInstanceOf(A2AError);
      expect(err, binding).not.toBeInstanceOf(RequestMalformedError);
      if (binding === "JSONRPC") {
        expect(err).toBeInstanceOf(JsonRpcTransportError);
        expect(err.envelopeCode).toBe(-31401);
        expect(err.data).toMatchObject([{ reason: "UNAUTHENTICATED" }]);
      } else expect(err.statusCode).toBe(401);
    }
  });

  it("refuses a body over spec.inbox.maxMessageBytes with 413 and hands nothing on", async () => {
    const before = handler.received.length;
    const big = await rpc({ jsonrpc: "2.0", id: 3, method: "SendMessage", params: rawMessage("x".repeat(20_000)) });
    expect(big.status).toBe(413);
    expect(big.body.error.data[0].reason).toBe("PAYLOAD_TOO_LARGE");
    const restBig = await httpsRequest(`${base}/a2a/rest/message:send`, {
      method: "POST",
      headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json", "a2a-version": "1.0" },
      body: JSON.stringify(rawMessage("y".repeat(20_000))),
      ca: tls.ca,
    });
    expect(restBig.status).toBe(413);
    expect(handler.received.length).toBe(before);
  });

  it("a repeated messageId is the same task and one hand-off", async () => {
    const messageId = randomUUID();
    const first = await rpc({ jsonrpc: "2.0", id: 4, method: "SendMessage", params: rawMessage("once", messageId) });
    const again = await rpc({ jsonrpc: "2.0", id: 5, method: "SendMessage", params: rawMessage("once", messageId) });
    expect(again.body.result.task.id).toBe(first.body.result.task.id);
    await handedOff(first.body.result.task.id);
    // Another caller's message with the same messageId is its own.
    const other = await rpc(
      { jsonrpc: "2.0", id: 6, method: "SendMessage", params: rawMessage("once", messageId) },
      { authorization: `Bearer ${OTHER_TOKEN}` },
    );
    expect(other.body.result.task.id).not.toBe(first.body.result.task.id);
    await handedOff(other.body.result.task.id);
    // Every hand-off stored is delivered and acknowledged: a second one of the first task would be among them.
    await waitFor("every hand-off acknowledged", () => nats.handOffsSettled(self.agentId), 15_000);
    expect(
      handler.received.filter((r) => r.body.headers.extensions?.a2a?.task_id === first.body.result.task.id),
    ).toHaveLength(1);
  });

  it("answers malformed JSON-RPC with its error codes", async () => {
    const parse = await rpc("{not json");
    expect(parse.status).toBe(200);
    expect(parse.body).toMatchObject({ jsonrpc: "2.0", id: null, error: { code: -32700 } });
    expect((await rpc({ id: 1, method: "SendMessage" })).body.error.code).toBe(-32600);
    expect((await rpc([{ jsonrpc: "2.0", id: 1, method: "ListTasks" }])).body.error.code).toBe(-32600);
    const unknown = await rpc({ jsonrpc: "2.0", id: "u", method: "message/send", params: {} });
    expect(unknown.body).toMatchObject({ id: "u", error: { code: -32601 } });
    const params = await rpc({
      jsonrpc: "2.0",
      id: 9,
      method: "SendMessage",
      params: { message: { role: "ROLE_USER" } },
    });
    expect(params.body.error.code).toBe(-32602);
    const push = await rpc({ jsonrpc: "2.0", id: 10, method: "CreateTaskPushNotificationConfig", params: {} });
    expect(push.body.error.code).toBe(-32602);
    const media = await rpc("<x/>", { authorization: `Bearer ${TOKEN}`, "content-type": "application/xml" });
    expect(media.status).toBe(415);
    const restUnknown = await httpsRequest(`${base}/a2a/rest/nothing:here`, {
      method: "POST",
      headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json", "a2a-version": "1.0" },
      body: "{}",
      ca: tls.ca,
    });
    expect(restUnknown.status).toBe(404);
    expect(restUnknown.json().error.status).toBe("NOT_FOUND");
  });

  it("answers JSON nested too deep as a bad request with a clear error in each binding, never a retryable 5xx", async () => {
    const deep = `${"[".repeat(5_000)}${"]".repeat(5_000)}`;
    const params = (id: string) =>
      `{"message":{"messageId":"${id}","role":"ROLE_USER","parts":[{"data":{"data":${deep}}}]},"configuration":{"returnImmediately":true}}`;
    const rpcBody = `{"jsonrpc":"2.0","id":7,"method":"SendMessage","params":${params(randomUUID())}}`;
    const headers = { authorization: `Bearer ${TOKEN}`, "content-type": "application/json", "a2a-version": "1.0" };
    const viaRpc = await httpsRequest(`${base}/a2a/v1`, { method: "POST", headers, body: rpcBody, ca: tls.ca });
    // JSON-RPC answers its errors with 200: the bad request's own code, not -32603 with a retry.
    expect(viaRpc.status, viaRpc.text).toBe(200);
    expect(viaRpc.json().error).toMatchObject({
      code: -32600,
      message: expect.stringMatching(/nested deeper than 100/),
    });
    expect(viaRpc.json().error.data).not.toHaveProperty("retryAfterSeconds");
    const viaRest = await httpsRequest(`${base}/a2a/rest/message:send`, {
      method: "POST",
      headers,
      body: params(randomUUID()),
      ca: tls.ca,
    });
    expect(viaRest.status, viaRest.text).toBe(400);
    expect(viaRest.json().error.message).toMatch(/nested deeper than 100/);
    // The application's side, the local API, the same: a task update nested too deep is a bad request.
    const task = (await rpc({ jsonrpc: "2.0", id: 8, method: "SendMessage", params: rawMessage("a deep update") })).body
      .result.task;
    await handedOff(task.id);
    const update = await fetch(`${localApi}/a2a/tasks/${task.id}`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: `{"state":"TASK_STATE_WORKING","artifact":{"parts":[{"data":{"data":${deep}}}]}}`,
    });
    expect(update.status).toBe(400);
    expect(await update.json()).toEqual({
      status: "error",
      code: "invalid_format",
      message: expect.stringMatching(/nested deeper than 100/),
    });
  });

  it("refuses to cancel a finished task, and to add to it", async () => {
    const sent = await rpc({ jsonrpc: "2.0", id: 11, method: "SendMessage", params: rawMessage("cancel me") });
    const id = sent.body.result.task.id;
    const canceled = await rpc({ jsonrpc: "2.0", id: 12, method: "CancelTask", params: { id } });
    expect(canceled.body.result.status.state).toBe("TASK_STATE_CANCELED");
    const again = await rpc({ jsonrpc: "2.0", id: 13, method: "CancelTask", params: { id } });
    expect(again.body.error.code).toBe(-32002);
    const more = await rpc({
      jsonrpc: "2.0",
      id: 14,
      method: "SendMessage",
      params: { message: { messageId: randomUUID(), taskId: id, role: "ROLE_USER", parts: [{ text: "more" }] } },
    });
    expect(more.body.error.code).toBe(-32004);
    const late = await localPost(`/a2a/tasks/${id}`, { state: "TASK_STATE_COMPLETED" });
    expect(late.status).toBe(409);
    const handed = await handedOff(id);
    const lateReply = await localPost("/outbox", { in_reply_to: handed.body.headers.message_id, text: "too late" });
    expect(lateReply.status).toBe(409);
    expect((await localPost("/a2a/tasks/no-such-task", { state: "TASK_STATE_COMPLETED" })).status).toBe(404);
    expect((await localPost(`/a2a/tasks/${id}`, { state: "TASK_STATE_NOPE" })).status).toBe(400);
  });
});

describe("limits", () => {
  it("reads a request without A2A-Version as 0.3: a 1.0 method is -32601 saying how to call it, HTTP+JSON refuses 0.3 with -32009; 1.0 by header or query is served", async () => {
    const body = { jsonrpc: "2.0", id: 1, method: "ListTasks", params: {} };
    for (const version of [undefined, "", " "]) {
      const res = await rpc(body, {
        authorization: `Bearer ${TOKEN}`,
        ...(version === undefined ? {} : { "a2a-version": version }),
      });
      if (version === undefined) {
        const bare = await httpsRequest(`${base}/a2a/v1`, {
          method: "POST",
          headers: { "content-type": "application/json", authorization: `Bearer ${TOKEN}` },
          body: JSON.stringify(body),
          ca: tls.ca,
        });
        // Answered as 0.3 answers: `data` the ErrorInfo object.
        expect(bare.json().error).toMatchObject({ code: -32601, data: { reason: "METHOD_NOT_FOUND" } });
        expect(bare.json().error.message).toMatch(/method of A2A 1\.0.*A2A-Version: 1\.0/);
        continue;
      }
      expect(res.body.error.code, JSON.stringify(version)).toBe(-32601);
    }
    const rest = await httpsRequest(`${base}/a2a/rest/tasks`, {
      headers: { authorization: `Bearer ${TOKEN}` },
      ca: tls.ca,
    });
    expect(rest.status).toBe(400);
    expect(rest.json().error).toMatchObject({ code: 400, details: [{ reason: "VERSION_NOT_SUPPORTED" }] });
    const byQuery = await httpsRequest(`${base}/a2a/rest/tasks?A2A-Version=1.0`, {
      headers: { authorization: `Bearer ${TOKEN}` },
      ca: tls.ca,
    });
    expect(byQuery.status).toBe(200);
    expect((await rpc(body, { authorization: `Bearer ${TOKEN}`, "a2a-version": "1.0" })).body.result).toBeDefined();
    // JSON-RPC takes the query parameter too, and an empty header leaves it to the query.
    for (const headers of [{}, { "a2a-version": "" }] as Record<string, string>[]) {
      const rpcByQuery = await httpsRequest(`${base}/a2a/v1?A2A-Version=1.0`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${TOKEN}`, ...headers },
        body: JSON.stringify(body),
        ca: tls.ca,
      });
      expect(rpcByQuery.json(), JSON.stringify(headers)).toMatchObject({ id: 1, result: { tasks: expect.any(Array) } });
    }
  });

  it("a caller past spec.inbox.rateLimit.perSenderPerMinute is answered 429 with Retry-After, its task reads having ten times that budget; a newer A2A-Version is refused", async () => {
    let limitedPort = 0;
    const limited = await onFreePorts(["https"], async ({ https }) => {
      limitedPort = https;
      return runAgent({
        self: identity("a2a-limited"),
        spec: {
          baseUrl: `https://localhost:${https}`,
          peers: [peerOf(signer)],
          inbox: { rateLimit: { perSenderPerMinute: 2 } },
          a2a: { enabled: true },
        },
        port: https,
        ...(await nats.runAgentNats("a2a-limited")),
        tls,
      });
    });
    try {
      const url = `https://localhost:${limitedPort}/a2a/v1`;
      const call = async (id: number, headers: Record<string, string> = {}, method = "GetExtendedAgentCard") => {
        const body = JSON.stringify({ jsonrpc: "2.0", id, method, params: {} });
        const signedHeaders = await signRequest(
          {
            method: "POST",
            url,
            headers: { "content-type": "application/json", "a2a-version": "1.0", ...headers },
            body,
          },
          signer.signing,
        );
        return httpsRequest(url, { method: "POST", headers: signedHeaders, body, ca: tls.ca });
      };
      const version = await call(0, { "a2a-version": "2.0" });
      expect(version.json().error).toMatchObject({ code: -32009 });
      // Refused before the caller was counted: two calls of the minute are left.
      expect((await call(1)).status).toBe(200);
      expect((await call(2)).status).toBe(200);
      const third = await call(3);
      expect(third.status).toBe(429);
      expect(Number(third.headers["retry-after"])).toBeGreaterThan(0);
      const retryAfter = third.headers["retry-after"];
      expect(third.json()).toMatchObject({
        id: 3,
        error: {
          code: -31429,
          data: [
            { reason: "RATE_LIMITED", domain: "a2a-protocol.org", metadata: { retryAfterSeconds: retryAfter } },
            { "@type": "type.googleapis.com/google.rpc.RetryInfo", retryDelay: `${retryAfter}s` },
          ],
        },
      });
      // Polling its tasks has a budget of its own, ten times as large: 20 reads (GetTask, ListTasks,
      // and 0.3's tasks/get, an empty A2A-Version being 0.3), then 429.
      for (let id = 10; id < 30; id++) {
        const [headers, method] =
          id % 3 === 0 ? [{ "a2a-version": "" }, "tasks/get"] : [{}, id % 3 === 1 ? "GetTask" : "ListTasks"];
        expect((await call(id, headers, method)).status, `read ${id - 9}: ${method}`).toBe(200);
      }
      const pastReads = await call(30, {}, "ListTasks");
      expect(pastReads.status).toBe(429);
      expect(pastReads.json().error).toMatchObject({ code: -31429, message: expect.stringMatching(/20 task reads/) });
      // Without bearer tokens configured, the card offers the signature scheme only.
      const card = (await httpsRequest(url.replace("/a2a/v1", "/.well-known/agent-card.json"), { ca: tls.ca })).json();
      expect(Object.keys(card.securitySchemes)).toEqual(["ifpHttpSignature"]);
    } finally {
      await limited.close();
    }
  });
});

describe("shutdown", () => {
  it("an open task stream ends when the runtime closes, without holding its shutdown", async () => {
    let base = "";
    const agent = await onFreePorts(["https"], async ({ https }) => {
      base = `https://localhost:${https}`;
      return runAgent({
        self: identity("a2a-closing"),
        spec: { baseUrl: base, peers: [peerOf(signer)], a2a: { enabled: true } },
        port: https,
        ...(await nats.runAgentNats("a2a-closing")),
        tls,
      });
    });
    const signedCall = async (method: string, path: string, body?: string) => {
      const url = `${base}${path}`;
      const headers = await signRequest(
        {
          method,
          url,
          headers: { "a2a-version": "1.0", ...(body ? { "content-type": "application/json" } : {}) },
          body,
        },
        signer.signing,
      );
      return undiciFetch(url, { method, headers, body, dispatcher: dispatcher() });
    };
    const sent = await signedCall("POST", "/a2a/rest/message:send", JSON.stringify(rawMessage("stay open")));
    const id = ((await sent.json()) as any).task.id;
    const res = await signedCall("GET", `/a2a/rest/tasks/${id}:subscribe`);
    expect(res.headers.get("content-type")).toContain("text/event-stream");
    const reader = res.body!.getReader();
    const first = new TextDecoder().decode((await reader.read()).value);
    expect(first).toContain(`"id":"${id}"`);
    const started = Date.now();
    await agent.close();
    expect(Date.now() - started).toBeLessThan(5_000);
    await expect(
      (async () => {
        while (!(await reader.read()).done);
      })(),
    ).resolves.toBeUndefined();
  });
});

describe("task size", () => {
  it("a task that would outgrow what NATS carries is refused with 413 and stays as it was", async () => {
    const sent = await rpc({ jsonrpc: "2.0", id: 30, method: "SendMessage", params: rawMessage("big results") });
    const id = sent.body.result.task.id;
    const chunk = "z".repeat(15_000);
    let status = 0;
    let appended = 0;
    for (let i = 0; i < 120 && status !== 413; i++) {
      status = (await localPost(`/a2a/tasks/${id}`, { artifact: { artifactId: "big", text: chunk, append: true } }))
        .status;
      if (status === 200) appended++;
    }
    expect(status).toBe(413);
    expect(appended).toBeGreaterThan(10);
    const got = await rpc({ jsonrpc: "2.0", id: 31, method: "GetTask", params: { id } });
    expect(got.body.result.artifacts[0].parts).toHaveLength(appended);
  }, 60_000);
});

describe("restarts", () => {
  it("a runtime killed after answering loses neither the task nor its hand-off", async () => {
    handler.received.length = 0;
    await handler.down();
    const sent = await rpc({ jsonrpc: "2.0", id: 20, method: "SendMessage", params: rawMessage("survive") });
    const id = sent.body.result.task.id;
    await runtime.stop({ signal: "SIGKILL" });
    await handler.up();
    await start();
    const got = await rpc({ jsonrpc: "2.0", id: 21, method: "GetTask", params: { id } });
    expect(got.body.result.status.state).toBe("TASK_STATE_SUBMITTED");
    // The killed runtime held the hand-off: it comes again once its consumer's ack wait (the
    // handler's timeout and 30 s) has passed.
    await handedOff(id, 60_000);
  }, 120_000);
});
