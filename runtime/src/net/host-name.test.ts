import { describe, expect, it } from "vitest";
import { canonicalAgentId, canonicalHost, hostMatches } from "./host-name.ts";

describe("canonicalHost", () => {
  it("lower-cases, drops one trailing dot and writes an IDN as its A-label", () => {
    expect(canonicalHost("evil.example.")).toBe("evil.example");
    expect(canonicalHost("EVIL.Example")).toBe("evil.example");
    expect(canonicalHost("ÉVIL.example.")).toBe("xn--vil-9la.example");
    expect(canonicalHost("xn--vil-9la.example")).toBe("xn--vil-9la.example");
    expect(canonicalHost("*.Spam.Example.")).toBe("*.spam.example");
    expect(canonicalHost("evil.example..")).toBe("evil.example.");
  });

  it("leaves what is no domain as written, lower-cased", () => {
    expect(canonicalHost("[::1]")).toBe("[::1]");
    expect(canonicalHost("10.0.0.1")).toBe("10.0.0.1");
  });

  it("matches a name exactly or below a *.<domain> entry, never the domain itself or a look-alike", () => {
    expect(hostMatches("x.spam.example", "*.spam.example")).toBe(true);
    expect(hostMatches("spam.example", "*.spam.example")).toBe(false);
    expect(hostMatches("notspam.example", "*.spam.example")).toBe(false);
    expect(hostMatches("evil.example", "evil.example")).toBe(true);
  });

  it("makes the host of an https agent id canonical, any other id as it is", () => {
    expect(canonicalAgentId("https://Evil.Example./a")).toBe("https://evil.example/a");
    expect(canonicalAgentId("https://ÉVIL.example/a")).toBe("https://xn--vil-9la.example/a");
    expect(canonicalAgentId("did:key:z6MkExact")).toBe("did:key:z6MkExact");
    expect(canonicalAgentId("not a url")).toBe("not a url");
  });
});
