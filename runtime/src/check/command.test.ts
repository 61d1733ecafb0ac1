// `ifp check`'s options: the usage mistakes refused before any request (exit 2 in the CLI), and
// the gate --strict and --profile set, in the JSON report and the exit code.
import { createServer } from "node:net";
import { afterEach, describe, expect, it, vi } from "vitest";
import { checkCommand } from "./command.ts";
import { CheckUsageError } from "./runner.ts";

afterEach(() => {
  vi.restoreAllMocks();
});

describe("ifp check's usage mistakes", () => {
  it("refuses each before it makes a request", async () => {
    const cases: [string[], RegExp][] = [
      [[], /exactly one https URL/],
      [["https://a.example", "https://b.example"], /exactly one https URL/],
      [["https://a.example", "--from", "alice"], /--from needs --key FILE/],
      [["https://a.example", "--peer-key", "k.pem"], /--peer-key and --peer-from go together/],
      [["https://a.example", "--inbox-cert", "c.pem"], /--inbox-cert and --inbox-key go together/],
      [["https://a.example", "--relay-url", "https://r.example"], /--relay-url is for a relay/],
      [["https://a.example", "--local-api-token", "t"], /--local-api-token needs --local-api/],
      [["https://a.example", "--inbox-cert", "c", "--inbox-key", "k", "--inbox-port", "70000"], /--inbox-port/],
      [["https://a.example", "--inbox-cert", "c", "--inbox-key", "k", "--inbox-port", "1.5"], /--inbox-port/],
      [["https://a.example", "--timeout", "0"], /--timeout takes seconds, from more than 0 to 60/],
      [["https://a.example", "--timeout", "61"], /--timeout takes seconds/],
      [["https://a.example", "--send-wait", "soon"], /--send-wait takes seconds, from more than 0 to 3600/],
      [["https://a.example", "--key", "/nonexistent/key.pem", "--from", "alice"], /cannot read \/nonexistent/],
      [["http://a.example"], /not https/],
    ];
    const write = vi.spyOn(process.stdout, "write");
    for (const [args, message] of cases) {
      const err = await checkCommand(args).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err, args.join(" ")).toBeInstanceOf(CheckUsageError);
      expect((err as Error).message, args.join(" ")).toMatch(message);
    }
    expect(write).not.toHaveBeenCalled();
  });

  it("needs --from (or IFP_AGENT_ID) with --key", async () => {
    vi.stubEnv("IFP_AGENT_ID", "");
    await expect(checkCommand(["https://a.example", "--key", "k.pem"])).rejects.toThrow(/--key needs --from/);
    vi.unstubAllEnvs();
  });
});

describe("ifp check's gate", () => {
  /** `ifp check` with these flags against a loopback port nothing listens on (its TLS checks fail). */
  async function runAgainstClosedPort(...flags: string[]): Promise<{ code: number; out: string }> {
    const server = createServer();
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const { port } = server.address() as { port: number };
    await new Promise((r) => server.close(r));
    let out = "";
    vi.spyOn(process.stdout, "write").mockImplementation((chunk: string | Uint8Array) => {
      out += String(chunk);
      return true;
    });
    const code = await checkCommand([`https://127.0.0.1:${port}`, "--only", "tls", "--timeout", "2", ...flags]);
    vi.restoreAllMocks();
    return { code, out };
  }

  it("reports in JSON which levels fail the run, and exits 1 for the failed MUST whatever the gate", async () => {
    const plain = await runAgainstClosedPort("--json");
    expect(plain.code).toBe(1);
    const report = JSON.parse(plain.out);
    expect(report.gate).toEqual({ fails: ["MUST"] });
    expect(report.results.find((r: { id: string }) => r.id === "tls.version")).toMatchObject({ result: "fail" });
    const gated = await runAgainstClosedPort("--json", "--strict", "--profile");
    expect(JSON.parse(gated.out).gate).toEqual({ fails: ["MUST", "SHOULD", "profile"] });
    expect(gated.code).toBe(1);
  });

  it("prints the text report without --json", async () => {
    const { code, out } = await runAgainstClosedPort();
    expect(code).toBe(1);
    expect(out).toMatch(/^ifp check agent https:\/\/127\.0\.0\.1:\d+\n/);
    expect(out).toMatch(/^FAIL {2}MUST {5}tls\.version/m);
    expect(out).toMatch(/^failing: tls\.version/m);
  });
});
