// OpenID Connect callers of the A2A face (docs/a2a.md#authentication): the ifp-runtime command
// with spec.a2a.authentication.oidc naming an issuer on loopback (HTTPS with the test CA,
// discovery document and JWKS), JWTs made by jose, the calls made over real TLS by raw HTTP and
// by the official A2A JS SDK's client.
import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { httpsRequest } from "../../../e2e/support/https.ts";
import { waitFor } from "../../../e2e/support/ports.ts";
import type { NatsServer } from "../../../e2e/support/nats.ts";
import type { ManagedProcess } from "../../../e2e/support/process.ts";
import { clientFactory, spawnRuntime, userMessage } from "../support/a2a-harness.ts";
import { startHandler, type Tls, withNatsAndTls } from "../support/agent-harness.ts";
import { identity, LOOPBACK_TARGETS, tempDir, writeAgentManifest, writeKey } from "../support/fixtures.ts";
import { onFreePorts } from "../support/free-ports.ts";
import { issuerKey, type OidcIssuer, publicKeyHmacToken, startIssuer, unsecuredToken } from "../support/oidc-issuer.ts";

let nats: NatsServer;
let tls: Tls;
withNatsAndTls((n, t) => {
  nats = n;
  tls = t;
});

const self = identity("a2a-oidc-agent");
const AUDIENCE = "https://agents.example/a2a-oidc-agent";

let runtime: ManagedProcess;
let handler: Awaited<ReturnType<typeof startHandler>>;
let idp: OidcIssuer;
let base: string;

beforeAll(async () => {
  [handler, idp] = await Promise.all([startHandler(), startIssuer(tls, AUDIENCE)]);
  const dir = tempDir("ifp-a2a-oidc-");
  runtime = await onFreePorts(["https", "localApi"], async ({ https: port, localApi: localApiPort }) => {
    base = `https://localhost:${port}`;
    writeAgentManifest(dir, {
      agentId: self.agentId,
      handler: { url: handler.url, timeout: "3s" },
      // The issuer is on loopback: its JWKS is fetched only because the policy allows it.
      network: LOOPBACK_TARGETS,
      a2a: { enabled: true, authentication: { oidc: [{ issuer: idp.issuer, audience: AUDIENCE }] } },
    });
    const keyFile = writeKey(dir, self);
    return spawnRuntime({
      name: "ifp-runtime agent (a2a oidc)",
      dir,
      keyFile,
      tls,
      natsUrl: nats.url,
      port,
      localApiPort,
    });
  });
}, 60_000);

afterAll(async () => {
  await runtime?.stop();
  await Promise.all([handler?.close(), idp?.close()]);
});

const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

/** An HTTP+JSON call. */
async function rest(method: string, path: string, headers: Record<string, string>, body?: unknown) {
  const res = await httpsRequest(`${base}/a2a/rest${path}`, {
    method,
    headers: { "content-type": "application/json", "a2a-version": "1.0", ...headers },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    ca: tls.ca,
  });
  return { status: res.status, headers: res.headers, body: res.text ? res.json() : undefined };
}

const send = (token: string, text = "hello") =>
  rest("POST", "/message:send", bearer(token), {
    message: { messageId: randomUUID(), role: "ROLE_USER", parts: [{ text }] },
    configuration: { returnImmediately: true },
  });

/** The documented 401: A2A's google.rpc.Status with an ErrorInfo, the challenge, and why. */
function expectUnauthenticated(res: Awaited<ReturnType<typeof rest>>, why: RegExp) {
  expect(res.status, JSON.stringify(res.body)).toBe(401);
  expect(res.headers["www-authenticate"]).toBe('Bearer realm="a2a", Signature');
  expect(res.body.error).toMatchObject({
    code: 401,
    status: "UNAUTHENTICATED",
    details: [{ "@type": "type.googleapis.com/google.rpc.ErrorInfo", reason: "UNAUTHENTICATED" }],
  });
  expect(res.body.error.message).toMatch(why);
}

describe("OIDC callers", () => {
  it("the card declares the issuer as an openIdConnect scheme, one of the schemes any of which suffices", async () => {
    const card = (
      await httpsRequest(`${base}/.well-known/agent-card.json`, { headers: { "a2a-version": "1.0" }, ca: tls.ca })
    ).json();
    expect(card.securitySchemes.oidc).toEqual({
      openIdConnectSecurityScheme: {
        openIdConnectUrl: `${idp.issuer}/.well-known/openid-configuration`,
        description: `A JWT access token of ${idp.issuer} (Authorization: Bearer)`,
      },
    });
    // No securityRequirements: any declared scheme suffices (docs/a2a.md, the signed card).
    expect(card.securityRequirements).toBeUndefined();
    // The 0.3 card (a request without A2A-Version) writes the scheme in 0.3's form.
    const v03 = (await httpsRequest(`${base}/.well-known/agent-card.json`, { ca: tls.ca })).json();
    expect(v03.securitySchemes.oidc).toEqual({
      type: "openIdConnect",
      openIdConnectUrl: `${idp.issuer}/.well-known/openid-configuration`,
      description: `A JWT access token of ${idp.issuer} (Authorization: Bearer)`,
    });
  });

  it("a valid token gets a task, handed on as its issuer's subject; another subject cannot read it", async () => {
    const alice = await idp.token();
    const sent = await send(alice, "from alice");
    expect(sent.status, JSON.stringify(sent.body)).toBe(200);
    const id = sent.body.task.id;
    // The JWKS was found through the discovery document.
    expect(idp.requests.get("/.well-known/openid-configuration")).toBeGreaterThanOrEqual(1);
    expect(idp.requests.get("/jwks")).toBeGreaterThanOrEqual(1);

    expect((await rest("GET", `/tasks/${id}`, bearer(alice))).body.id).toBe(id);
    const bob = await idp.token({ sub: "bob" });
    const other = await rest("GET", `/tasks/${id}`, bearer(bob));
    expect(other.status).toBe(404);
    expect(other.body.error.details[0].reason).toBe("TASK_NOT_FOUND");
    expect((await rest("GET", "/tasks", bearer(bob))).body.tasks).toEqual([]);

    await waitFor("the hand-off", async () =>
      handler.received.some((r) => r.body.headers.extensions?.a2a?.task_id === id),
    );
    const handed = handler.received.find((r) => r.body.headers.extensions.a2a.task_id === id)!;
    expect(handed.headers["ifp-sender"]).toBe(`a2a-oidc:${idp.issuer}#alice`);
    expect(handed.headers["ifp-auth-source"]).toBe("a2a-oidc");
    expect(handed.headers["ifp-auth-level"]).toBe("0");
  });

  it("the official SDK's client sends and reads with the token, over both bindings", async () => {
    const token = await idp.token({ sub: "sdk-user" });
    for (const binding of ["JSONRPC", "HTTP+JSON"] as const) {
      const client = await clientFactory(tls.ca, token, binding).createFromUrl(base);
      const sent = (await client.sendMessage(userMessage(binding))) as any;
      const got = (await client.getTask({ id: sent.id, historyLength: undefined, tenant: "" })) as any;
      expect(got.id).toBe(sent.id);
    }
  });

  it("a token expired within the clock skew is taken; one expired longer ago is 401", async () => {
    const now = Math.floor(Date.now() / 1000);
    expect((await send(await idp.token({ exp: now - 20 }))).status).toBe(200);
    expectUnauthenticated(await send(await idp.token({ exp: now - 120, iat: now - 600 })), /expired/);
  });

  it("a token without exp, or not valid yet, is 401", async () => {
    const now = Math.floor(Date.now() / 1000);
    expectUnauthenticated(await send(await idp.token({ exp: undefined })), /no exp claim/);
    expectUnauthenticated(await send(await idp.token({ nbf: now + 600 })), /not valid yet/);
  });

  it("a token for another audience is 401", async () => {
    expectUnauthenticated(await send(await idp.token({ aud: "https://agents.example/someone-else" })), /audience/);
  });

  it("a token of another issuer, even signed by the issuer's key, is 401", async () => {
    expectUnauthenticated(
      await send(await idp.token({ iss: "https://idp.example/other" })),
      /issuer "https:\/\/idp\.example\/other" are not accepted/,
    );
  });

  it("an unsecured token (alg none) is 401", async () => {
    expectUnauthenticated(
      await send(unsecuredToken(idp.claims())),
      /algorithm is not one issuer .* accepts \(RS256, ES256\)/,
    );
  });

  it("key confusion: an HS256 token whose HMAC key is the issuer's public key is 401", async () => {
    expectUnauthenticated(
      await send(await publicKeyHmacToken(idp.claims(), idp.keys[0]!)),
      /algorithm is not one issuer .* accepts \(RS256, ES256\)/,
    );
  });

  it("a token signed by a key the issuer does not publish (unknown kid) is 401", async () => {
    const stranger = issuerKey("key-unknown");
    expectUnauthenticated(await send(await idp.token({}, stranger)), /no key of issuer .* matches/);
  });

  it("a token whose signature is not the issuer's key's (right kid, other key) is 401", async () => {
    const impostor = { ...issuerKey("key-1") };
    expectUnauthenticated(await send(await idp.token({}, impostor)), /signature does not verify/);
  });

  it("a token without the subject claim is 401, and so is one that is no JWT at all, over JSON-RPC too", async () => {
    expectUnauthenticated(await send(await idp.token({ sub: undefined })), /no sub claim/);
    const res = await httpsRequest(`${base}/a2a/v1`, {
      method: "POST",
      headers: { "content-type": "application/json", "a2a-version": "1.0", ...bearer("not.a.jwt") },
      body: JSON.stringify({ jsonrpc: "2.0", id: 7, method: "ListTasks", params: {} }),
      ca: tls.ca,
    });
    expect(res.status).toBe(401);
    expect(res.json()).toMatchObject({ jsonrpc: "2.0", id: 7, error: { message: "the bearer token is not accepted" } });
  });
});
