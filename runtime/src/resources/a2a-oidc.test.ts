// spec.a2a.authentication.oidc: what the Agent's schema takes of an OIDC issuer.
import { describe, expect, it } from "vitest";
import { A2aOidcIssuer } from "./agent.ts";

const issuer = { issuer: "https://idp.example/realms/agents", audience: "a2a-alice" };

describe("spec.a2a.authentication.oidc[]", () => {
  it("defaults to RS256 and ES256 and the sub claim", () => {
    expect(A2aOidcIssuer.parse(issuer)).toEqual({ ...issuer, algorithms: ["RS256", "ES256"], subjectClaim: "sub" });
  });

  it.each(["none", "HS256", "HS384", "HS512"])(
    "refuses the algorithm %s (only asymmetric ones verify against a JWKS)",
    (alg) => {
      expect(A2aOidcIssuer.safeParse({ ...issuer, algorithms: [alg] }).success).toBe(false);
    },
  );

  it("refuses an empty algorithm list, a plaintext issuer or JWKS, and no audience", () => {
    expect(A2aOidcIssuer.safeParse({ ...issuer, algorithms: [] }).success).toBe(false);
    expect(A2aOidcIssuer.safeParse({ ...issuer, issuer: "http://idp.example" }).success).toBe(false);
    expect(A2aOidcIssuer.safeParse({ ...issuer, jwksUrl: "http://idp.example/keys" }).success).toBe(false);
    expect(A2aOidcIssuer.safeParse({ issuer: issuer.issuer }).success).toBe(false);
  });
});
