// kubectl-ifp: the kubectl plugin of the install (docs/kubectl-plugin.md). kubectl runs any
// executable named kubectl-* on PATH as `kubectl *`; this one reads the install through the
// user's kubeconfig with the user's own rights.
import { writeFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { describeResource, renderDescription } from "./describe.ts";
import { apiMessage, checkNamespace, connect, type Kind, PluginError, UsageError } from "./kube.ts";
import { writeReport } from "./report.ts";
import { collectStatus, renderStatus } from "./status.ts";

export const USAGE = `usage: kubectl ifp <command> [flags]

  status                      the install at a glance: the operator (ready, leader), NATS, the
                              install CA's expiry, and every Agent and Relay with Ready, pods,
                              backlog, messages accepted in the last hour and the last error
  describe agent|relay NAME   what it renders (Deployment, Services, ConfigMap, Secrets by name
                              and keys, NetworkPolicies), its conditions, signing keys and their
                              states, its peers, and its NATS credential's expiry
  report [-o FILE.tar.gz]     a support bundle: logs of the operator, NATS and the runtimes, the
                              Agents, Relays, Deployments, Pods, Services, ConfigMaps, Events and
                              NetworkPolicies, Secrets by name and keys only (never a value);
                              default file ifp-report-<time>.tar.gz

flags:
  -n, --namespace NS          the namespace (default: the context's); status and report: only it
  -A, --all-namespaces        status and report: every namespace (the default for both)
  -o, --output json|FILE      status and describe: json instead of a table; report: the file
      --kubeconfig FILE       the kubeconfig (default: KUBECONFIG, else ~/.kube/config)
      --context NAME          the kubeconfig's context to use
      --operator-namespace NS where the operator runs (default: found by its labels)
  -h, --help                  this text

Exit codes: 0 done, 1 a failure (not found, forbidden, the API server unreachable), 2 a usage
mistake.
`;

const KINDS: Record<string, Kind> = {
  agent: "Agent",
  agents: "Agent",
  "agents.ifp.dev": "Agent",
  ifpagent: "Agent",
  relay: "Relay",
  relays: "Relay",
  "relays.ifp.dev": "Relay",
  ifprelay: "Relay",
};

interface Parsed {
  command: string;
  args: string[];
  namespace?: string;
  allNamespaces: boolean;
  output?: string;
  kubeconfig?: string;
  context?: string;
  operatorNamespace?: string;
  help: boolean;
}

export function parse(argv: string[]): Parsed {
  let values: Record<string, string | boolean | undefined>;
  let positionals: string[];
  try {
    ({ values, positionals } = parseArgs({
      args: argv,
      allowPositionals: true,
      strict: true,
      options: {
        namespace: { type: "string", short: "n" },
        "all-namespaces": { type: "boolean", short: "A" },
        output: { type: "string", short: "o" },
        kubeconfig: { type: "string" },
        context: { type: "string" },
        "operator-namespace": { type: "string" },
        help: { type: "boolean", short: "h" },
      },
    }));
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  const [command = "", ...args] = positionals;
  return {
    command,
    args,
    namespace: values.namespace as string | undefined,
    allNamespaces: !!values["all-namespaces"],
    output: values.output as string | undefined,
    kubeconfig: values.kubeconfig as string | undefined,
    context: values.context as string | undefined,
    operatorNamespace: values["operator-namespace"] as string | undefined,
    help: !!values.help,
  };
}

function tableOrJson(output: string | undefined): "table" | "json" {
  if (output === undefined || output === "table" || output === "wide") return "table";
  if (output === "json") return "json";
  throw new UsageError(`-o ${output}: use json (or leave it out for a table)`);
}

async function run(p: Parsed, out: (s: string) => void): Promise<void> {
  if (p.namespace !== undefined && p.allNamespaces) throw new UsageError("-n and -A together: choose one");
  switch (p.command) {
    case "status": {
      if (p.args.length) throw new UsageError(`status takes no arguments (got ${p.args.join(" ")})`);
      const format = tableOrJson(p.output);
      const c = connect(p);
      if (p.namespace) await checkNamespace(c, p.namespace);
      const report = await collectStatus(c, { namespace: p.namespace, operatorNamespace: p.operatorNamespace });
      out(format === "json" ? `${JSON.stringify(report, null, 2)}\n` : renderStatus(report));
      return;
    }
    case "describe": {
      const [what, name, ...rest] = p.args;
      if (!what) throw new UsageError("describe needs a kind and a name: describe agent|relay NAME");
      const kind = KINDS[what.toLowerCase()];
      if (!kind) throw new UsageError(`unknown resource ${JSON.stringify(what)}: use agent or relay`);
      if (!name) throw new UsageError(`describe ${what} needs a name`);
      if (rest.length) throw new UsageError(`describe takes one name (got ${p.args.slice(1).join(" ")})`);
      if (p.allNamespaces) throw new UsageError("describe reads one namespace: -n NS, not -A");
      const format = tableOrJson(p.output);
      const c = connect(p);
      const namespace = p.namespace ?? c.defaultNamespace;
      await checkNamespace(c, namespace);
      const d = await describeResource(c, kind, namespace, name);
      out(format === "json" ? `${JSON.stringify(d, null, 2)}\n` : renderDescription(d));
      return;
    }
    case "report": {
      if (p.args.length) throw new UsageError(`report takes no arguments (got ${p.args.join(" ")})`);
      const file = p.output ?? `ifp-report-${new Date().toISOString().replace(/[:.]/g, "-")}.tar.gz`;
      if (file === "json") throw new UsageError("report writes a tar.gz: -o FILE.tar.gz");
      const c = connect(p);
      const bundle = await writeReport(c, { namespace: p.namespace, operatorNamespace: p.operatorNamespace });
      try {
        writeFileSync(file, bundle, { mode: 0o600 });
      } catch (err) {
        throw new PluginError(`cannot write ${file}: ${(err as Error).message}`);
      }
      process.stderr.write(`wrote ${file} (${bundle.length} bytes)\n`);
      return;
    }
    case "":
      throw new UsageError("no command");
    default:
      throw new UsageError(`unknown command ${JSON.stringify(p.command)}`);
  }
}

/** Runs the plugin; returns the exit code. Never throws: every failure is one line on stderr. */
export async function main(
  argv = process.argv.slice(2),
  out = (s: string) => void process.stdout.write(s),
): Promise<number> {
  let p: Parsed;
  try {
    p = parse(argv);
    if (p.help) {
      out(USAGE);
      return 0;
    }
    await run(p, out);
    return 0;
  } catch (err) {
    if (err instanceof UsageError) {
      process.stderr.write(`kubectl ifp: ${err.message}\n\n${USAGE}`);
      return 2;
    }
    const message = err instanceof PluginError ? err.message : apiMessage(err);
    process.stderr.write(`kubectl ifp: ${message}\n`);
    return 1;
  }
}
