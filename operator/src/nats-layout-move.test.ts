import { describe, expect, it } from "vitest";
import { DEFAULT_ACCOUNT_LIMITS, accountLimitsOf } from "./nats-account-limits.ts";
import { CredentialIssuer, generateKeys } from "./nats-credential-issuer.ts";
import { layoutOfAccountJwt } from "./nats-layout-move.ts";
import { dataAccountOf, sharedRuntimeAccountJwt } from "./nats-shared-accounts.ts";

describe("layoutOfAccountJwt", () => {
  it("tells a runtime account of the isolated layout (its import of $JS.API.INFO) from one of the per-agent layout", async () => {
    const keys = generateKeys();
    const issuer = CredentialIssuer.fromKeys(keys);
    const account = issuer.accountOf("uid-1");
    const k = issuer.sharedLayoutKeys();
    const perAgent = await issuer.runtimeAccountJwt(
      account,
      "agent:a/b",
      accountLimitsOf(undefined, DEFAULT_ACCOUNT_LIMITS, false),
    );
    const isolated = await sharedRuntimeAccountJwt(
      k.operatorSeed,
      account,
      "agent:a/b",
      dataAccountOf(keys.signing, "a"),
      k.signingKey,
    );
    expect(layoutOfAccountJwt(perAgent)).toBe("per-agent");
    expect(layoutOfAccountJwt(isolated)).toBe("isolated");
    // Imports of another kind make no account isolated.
    const other = await sharedRuntimeAccountJwt(
      k.operatorSeed,
      account,
      "agent:a/b",
      dataAccountOf(keys.signing, "a"),
      k.signingKey,
      {
        imports: [],
      },
    );
    expect(layoutOfAccountJwt(other)).toBe("per-agent");
  });
});
