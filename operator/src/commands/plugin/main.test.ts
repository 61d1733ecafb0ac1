// kubectl ifp loads the API clients only for the commands that read the cluster.
import { spawnSync } from "node:child_process";
import { describe, expect, it } from "vitest";

const MAIN = new URL("./main.ts", import.meta.url).href;

/** The modules `main(argv)` loads in a fresh Node, by URL, and its exit code. */
function loadedBy(argv: string[]): { code: number; modules: string[] } {
  const script = `
    import { registerHooks } from "node:module";
    const modules = [];
    registerHooks({ resolve(specifier, context, next) { const r = next(specifier, context); modules.push(r.url); return r; } });
    const { main } = await import(${JSON.stringify(MAIN)});
    const code = await main(${JSON.stringify(argv)}, () => {});
    process.stdout.write(JSON.stringify({ code, modules }));
  `;
  const r = spawnSync(process.execPath, ["--input-type=module", "-e", script], {
    encoding: "utf8",
    env: { ...process.env, KUBECONFIG: "/nonexistent/kubeconfig" },
  });
  return JSON.parse(r.stdout);
}

const apiClients = (modules: string[]) => modules.filter((m) => m.includes("/@kubernetes/client-node/"));

describe("kubectl ifp's start", () => {
  it("loads no API client for what needs no cluster: the usage, a mistake in the command line, completion, the version", () => {
    for (const argv of [["--help"], [], ["nosuch"], ["describe", "agent"], ["completion", "bash"], ["version"]]) {
      const { code, modules } = loadedBy(argv);
      expect(code, argv.join(" ")).toBe(
        argv[0] === "--help" || argv[0] === "completion" || argv[0] === "version" ? 0 : 2,
      );
      expect(apiClients(modules), argv.join(" ")).toEqual([]);
    }
  });

  it("loads them for a command that reads the cluster", () => {
    const { code, modules } = loadedBy(["status"]);
    expect(code).toBe(1);
    expect(apiClients(modules).length).toBeGreaterThan(0);
  });
});
