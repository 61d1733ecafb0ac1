// The OIDC callers' verifier (runtime/src/a2a/oidc.ts) against an issuer on loopback over real
// TLS, through the agent's HTTP client and target policy: a configured JWKS URL, the discovery
// document's checks, key rotation and its refetch cooldown, an issuer that cannot be reached, and
// the size of a token.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { localhostTls } from "../../../e2e/support/tls.ts";
import { OIDC_JWKS_COOLDOWN_MS, OIDC_JWKS_MAX_AGE_MS, OidcCallers } from "../../src/a2a/oidc.ts";
import { A2aError } from "../../src/a2a/wire.ts";
import { HttpClient } from "../../src/net/http-client.ts";
import { TargetPolicy } from "../../src/net/targets.ts";
import { A2aOidcIssuer } from "../../src/resources/agent.ts";
import type { Tls } from "../support/agent-harness.ts";
import { issuerKey, type OidcIssuer, startIssuer } from "../support/oidc-issuer.ts";

const AUDIENCE = "agent-under-test";
let tls: Tls;
let idp: OidcIssuer;
let http: HttpClient;
const clock = { now: Date.now() };

beforeAll(async () => {
  tls = await localhostTls();
  idp = await startIssuer(tls, AUDIENCE);
  http = new HttpClient({ extraCa: tls.ca, targets: new TargetPolicy(["127.0.0.0/8"]) });
});
afterAll(async () => {
  await http?.close();
  await idp?.close();
});

function callers(extra: Record<string, unknown> = {}, client: Pick<HttpClient, "request"> = http) {
  const spec = A2aOidcIssuer.parse({ issuer: idp.issuer, audience: AUDIENCE, ...extra });
  return new OidcCallers({ issuers: [spec], http: client, now: () => clock.now });
}

async function refusal(p: Promise<unknown>): Promise<A2aError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(A2aError);
  return err as A2aError;
}

/** A token issued at the verifier's clock, which the tests move on. */
const token = (claims: Record<string, unknown> = {}, key?: Parameters<OidcIssuer["token"]>[1]) => {
  const at = Math.floor(clock.now / 1000);
  return idp.token({ iat: at, exp: at + 300, ...claims }, key);
};

const count = (path: string) => idp.requests.get(path) ?? 0;

describe("OIDC verifier", () => {
  it("a configured jwksUrl is used without the discovery document", async () => {
    const before = count("/.well-known/openid-configuration");
    const caller = await callers({ jwksUrl: idp.jwksUrl }).verify(await token({ sub: "carol" }));
    expect(caller).toEqual({ id: `a2a-oidc:${idp.issuer}#carol`, level: 0, source: "a2a-oidc" });
    expect(count("/.well-known/openid-configuration")).toBe(before);
  });

  it("a discovery document naming another issuer, or a plaintext jwks_uri, is 503 and no key is taken", async () => {
    try {
      idp.discovery = { issuer: "https://evil.example" };
      const other = await refusal(callers().verify(await token()));
      expect(other.kind).toBe("Unavailable");
      expect(other.message).toMatch(/names issuer "https:\/\/evil\.example"/);
      idp.discovery = { jwks_uri: `http://localhost/jwks` };
      const plain = await refusal(callers().verify(await token()));
      expect(plain.kind).toBe("Unavailable");
      expect(plain.message).toMatch(/no https jwks_uri/);
    } finally {
      idp.discovery = {};
    }
  });

  it("an issuer on an address the target policy does not allow is not reached (503)", async () => {
    const strict = new HttpClient({ extraCa: tls.ca, targets: new TargetPolicy([]) });
    try {
      const before = count("/.well-known/openid-configuration");
      const err = await refusal(callers({}, strict).verify(await token()));
      expect(err.kind).toBe("Unavailable");
      expect(err.headers["retry-after"]).toBe("30");
      expect(count("/.well-known/openid-configuration")).toBe(before);
    } finally {
      await strict.close();
    }
  });

  it("a rotated key is fetched for its kid; an unknown kid fetches again only after the cooldown", async () => {
    const verifier = callers();
    await verifier.verify(await token());
    const rotated = issuerKey("key-2", "ES256");
    idp.keys.push(rotated);
    clock.now += OIDC_JWKS_COOLDOWN_MS;
    const fetched = count("/jwks");
    expect((await verifier.verify(await token({ sub: "dave" }, rotated))).id).toBe(`a2a-oidc:${idp.issuer}#dave`);
    expect(count("/jwks")).toBe(fetched + 1);
    // A stranger's kid right after: refused without another fetch.
    const stranger = issuerKey("key-stranger");
    const err = await refusal(verifier.verify(await token({}, stranger)));
    expect(err.kind).toBe("Unauthenticated");
    expect(count("/jwks")).toBe(fetched + 1);
    idp.keys.pop();
  });

  it("keys held are kept while the issuer is down; without any the call is 503", async () => {
    const verifier = callers();
    await verifier.verify(await token());
    idp.failing = true;
    try {
      clock.now += OIDC_JWKS_MAX_AGE_MS;
      expect((await verifier.verify(await token({ sub: "erin" }))).id).toBe(`a2a-oidc:${idp.issuer}#erin`);
      const fresh = await refusal(callers().verify(await token()));
      expect(fresh.kind).toBe("Unavailable");
      expect(fresh.message).toMatch(/answered 503/);
    } finally {
      idp.failing = false;
    }
  });

  it("a token over 16 KiB is refused unread, however well signed", async () => {
    const big = await token({ padding: "x".repeat(16 * 1024) });
    const err = await refusal(callers().verify(big));
    expect(err.kind).toBe("Unauthenticated");
    expect(err.message).toMatch(/longer than 16384 characters/);
  });

  it("a subject claim that is not a string is refused", async () => {
    const err = await refusal(callers({ subjectClaim: "uid" }).verify(await token({ uid: 42 })));
    expect(err.kind).toBe("Unauthenticated");
    expect(err.message).toMatch(/uid claim is not a string/);
  });
});
