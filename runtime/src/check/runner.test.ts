// The runner's own rules, without a target that answers: which URLs it takes, the usage errors,
// and how a run's verdicts become the report's results and summary (against a closed port).
import { createServer } from "node:net";
import { describe, expect, it } from "vitest";
import { CHECKS } from "./catalog.ts";
import { exitCode } from "./report.ts";
import { CheckUsageError, localApiBase, runChecks, targetBase } from "./runner.ts";
import { AGENT_GROUPS, LEVELS, type Outcome, RELAY_GROUPS } from "./types.ts";

/** A loopback port nothing listens on (taken, then given back). */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const { port } = server.address() as { port: number };
  await new Promise((r) => server.close(r));
  return port;
}

describe("targetBase", () => {
  it("takes an https base URL, without its trailing slashes", () => {
    expect(targetBase("https://agent.example/")).toBe("https://agent.example");
    expect(targetBase("https://agent.example/base//")).toBe("https://agent.example/base");
    expect(targetBase("https://agent.example:8443")).toBe("https://agent.example:8443");
  });

  it("refuses anything but https, a query or fragment, and what is not a URL", () => {
    expect(() => targetBase("http://agent.example")).toThrow(/not https: IFP transport is TLS only/);
    expect(() => targetBase("ftp://agent.example")).toThrow(CheckUsageError);
    expect(() => targetBase("https://agent.example/?x=1")).toThrow(/without query or fragment/);
    expect(() => targetBase("https://agent.example/#top")).toThrow(/without query or fragment/);
    expect(() => targetBase("agent.example")).toThrow(/is not a URL/);
  });
});

describe("localApiBase", () => {
  it("takes https anywhere and http to a loopback address only", () => {
    expect(localApiBase("https://api.example/x/")).toBe("https://api.example/x");
    for (const host of ["127.0.0.1", "127.1.2.3", "localhost", "[::1]"])
      expect(localApiBase(`http://${host}:8081/`)).toBe(`http://${host}:8081`);
  });

  it("refuses plain http elsewhere, a query or fragment, and what is not a URL", () => {
    for (const url of ["http://10.0.0.1:8081", "http://api.example", "http://127.0.0.1.example"])
      expect(() => localApiBase(url), url).toThrow(/https URL, or http to a loopback address/);
    expect(() => localApiBase("https://api.example/?token=x")).toThrow(/without query or fragment/);
    expect(() => localApiBase("not a url")).toThrow(/is not a URL/);
  });
});

describe("runChecks", () => {
  it("refuses usage mistakes before it makes a request", async () => {
    await expect(runChecks({ url: "https://a.example", only: "relay" })).rejects.toThrow(
      `--only takes one of ${AGENT_GROUPS.join(", ")} for an agent`,
    );
    await expect(runChecks({ url: "https://a.example", relay: true, only: "inbox" })).rejects.toThrow(
      `--only takes one of ${RELAY_GROUPS.join(", ")} for a relay`,
    );
    await expect(runChecks({ url: "https://a.example", localApi: { url: "http://127.0.0.1:1" } })).rejects.toThrow(
      /--local-api needs the kit's inbox/,
    );
    await expect(runChecks({ url: "http://a.example" })).rejects.toBeInstanceOf(CheckUsageError);
    await expect(
      runChecks({ url: "https://a.example", relay: true, relayUrl: "https://relay.example?x" }),
    ).rejects.toThrow(/without query or fragment/);
  });

  it("grades a target that answers nothing: each verdict once, at its catalog level, tallied per level; a MUST fails the run", async () => {
    const port = await closedPort();
    const report = await runChecks({ url: `https://127.0.0.1:${port}/`, only: "tls", timeoutMs: 2_000 });
    expect(report).toMatchObject({ target: `https://127.0.0.1:${port}`, kind: "agent" });
    expect(report.requests).toBeGreaterThan(0);
    const ids = report.results.map((r) => r.id);
    expect(new Set(ids).size).toBe(ids.length);
    for (const r of report.results) {
      expect(r.id.startsWith("tls.")).toBe(true);
      const rule = CHECKS[r.id as keyof typeof CHECKS];
      expect({ level: r.level, section: r.section }).toEqual(rule);
      expect(r.reason.length).toBeLessThanOrEqual(301);
    }
    // The handshake cannot succeed; no HTTPS answer came, so the run-wide redirect check has nothing to judge.
    expect(report.results.find((r) => r.id === "tls.version")).toMatchObject({ result: "fail" });
    expect(report.results.find((r) => r.id === "tls.redirect-free")).toMatchObject({
      result: "skip",
      reason: "no HTTPS answer seen",
    });
    const count = (o: Outcome, level?: string) =>
      report.results.filter((r) => r.result === o && (level === undefined || r.level === level)).length;
    for (const o of ["pass", "fail", "skip"] as const) {
      expect(report.summary[o]).toBe(count(o));
      for (const level of LEVELS) expect(report.summary.levels[level][o], `${level} ${o}`).toBe(count(o, level));
    }
    expect(exitCode(report)).toBe(1);
  });

  it("skips what depends on an answer that never came, rather than failing it twice", async () => {
    const port = await closedPort();
    const report = await runChecks({ url: `https://127.0.0.1:${port}`, only: "discovery", timeoutMs: 2_000 });
    const status = report.results.find((r) => r.id === "discovery.capabilities.status");
    expect(status).toMatchObject({ level: "MAY", result: "fail" });
    const dependent = report.results.filter(
      (r) => r.id.startsWith("discovery.capabilities.") && r.id !== "discovery.capabilities.status",
    );
    expect(dependent.length).toBeGreaterThan(0);
    expect(dependent.every((r) => r.result === "skip")).toBe(true);
    // Discovery's documents are optional (MAY): missing them alone does not fail the run.
    expect(report.results.filter((r) => r.result === "fail").every((r) => r.level === "MAY")).toBe(true);
    expect(exitCode(report, { strict: true, profile: true })).toBe(0);
  });
});
