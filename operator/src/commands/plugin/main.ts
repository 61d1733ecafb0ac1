// kubectl-ifp: the kubectl plugin of the install (docs/kubectl-plugin.md). kubectl runs any
// executable named kubectl-* on PATH as `kubectl *`; this one reads the install through the
// user's kubeconfig with the user's own rights.
import { writeFileSync } from "node:fs";
import { StringDecoder } from "node:string_decoder";
import { parseArgs } from "node:util";
import { BACKUP_FLAGS, BACKUP_USAGE, MESSAGING_FLAGS, type Parsed } from "./command-line.ts";
import { apiMessage, PluginError, UsageError } from "./errors.ts";
import type { Kind } from "./kube.ts";
import { printable } from "../../../../runtime/src/util/printable.ts";
import { type CompletionSpec, completionScript, SHELLS, type Shell } from "../../../../runtime/src/util/completion.ts";
import { versionLine } from "../../../../runtime/src/util/version.ts";

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
  send AGENT --to AGENT_ID --text "…" [--phase P] [--wait S]
                              send as the Agent AGENT: its runtime signs the message with the
                              Agent's key and stores it in its outbox (prints 202 and the message);
                              --wait follows the delivery for up to S seconds
  tail AGENT [--since S] [--count N] [--timeout S]
                              follow what the Agent AGENT receives: one JSON line per message its
                              inbox accepts, taking none from its application; --since starts S
                              seconds back, --count stops after N, --timeout after S seconds
  redrive AGENT (MESSAGE_ID | --all [--limit N])
                              send the Agent's dead letters again (one, or up to N oldest, default
                              100): back into its outbox with a fresh attempt count, never a second
                              copy of one delivered; prints the runtime's answer
                              send, tail and redrive run the runtime's ifp in one of the Agent's
                              ready pods (get and create on pods/exec, your own rights)
${BACKUP_USAGE}  completion bash|zsh         the shell's completion script: source <(kubectl ifp completion bash)
  version                     the plugin's version and the commit it was built from (--version)

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

const GLOBAL_FLAGS = [
  "--namespace",
  "--all-namespaces",
  "--output",
  "--kubeconfig",
  "--context",
  "--operator-namespace",
];

/** What `kubectl ifp completion` completes: the commands, and the words and flags each takes. */
const COMPLETION: CompletionSpec = {
  program: "kubectl-ifp",
  commands: {
    status: [],
    describe: ["agent", "relay"],
    report: [],
    send: ["--to", "--text", "--phase", "--wait"],
    tail: ["--since", "--count", "--timeout"],
    redrive: ["--all", "--limit"],
    backup: ["--nats-url", "--nats-server-name", "--no-data"],
    restore: ["--nats-url", "--nats-server-name", "--force", "--keys-only", "--timeout"],
    completion: [...SHELLS],
    version: [],
  },
  globalFlags: [...GLOBAL_FLAGS, "--help"],
};

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
        to: { type: "string" },
        text: { type: "string" },
        phase: { type: "string" },
        wait: { type: "string" },
        since: { type: "string" },
        count: { type: "string" },
        timeout: { type: "string" },
        limit: { type: "string" },
        all: { type: "boolean" },
        ...BACKUP_FLAGS,
        help: { type: "boolean", short: "h" },
        version: { type: "boolean", short: "V" },
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
    messaging: Object.fromEntries(
      MESSAGING_FLAGS.filter((f) => values[f] !== undefined).map((f) => [f, values[f] as string]),
    ),
    all: !!values.all,
    backup: Object.fromEntries(
      Object.keys(BACKUP_FLAGS).flatMap((f) => (values[f] === undefined ? [] : [[f, values[f]]])),
    ),
    help: !!values.help,
    version: !!values.version,
  };
}

/**
 * The API clients and each command's readers, imported by the command that reads the cluster:
 * the usage, a command-line mistake, completion and the version load none of them.
 */
const kube = () => import("./kube.ts");

function tableOrJson(output: string | undefined): "table" | "json" {
  if (output === undefined || output === "table" || output === "wide") return "table";
  if (output === "json") return "json";
  throw new UsageError(`-o ${output}: use json (or leave it out for a table)`);
}

async function run(p: Parsed, out: (s: string) => void): Promise<number> {
  if (p.namespace !== undefined && p.allNamespaces) throw new UsageError("-n and -A together: choose one");
  if (p.command === "send" || p.command === "tail" || p.command === "redrive")
    return await messaging(p.command, p, out);
  if (p.command === "backup" || p.command === "restore")
    return await (await import("./backup-command.ts")).backupCommand(p.command, p);
  const backupFlag = Object.keys(p.backup)[0];
  if (backupFlag) throw new UsageError(`--${backupFlag} goes with backup or restore, not ${p.command || "no command"}`);
  const stray = [...Object.keys(p.messaging), ...(p.all ? ["all"] : [])];
  if (stray.length)
    throw new UsageError(`--${stray[0]} goes with send, tail or redrive, not ${p.command || "no command"}`);
  switch (p.command) {
    case "status": {
      if (p.args.length) throw new UsageError(`status takes no arguments (got ${p.args.join(" ")})`);
      const format = tableOrJson(p.output);
      const { checkNamespace, connect } = await kube();
      const { collectStatus, renderStatus } = await import("./status.ts");
      const c = connect(p);
      if (p.namespace) await checkNamespace(c, p.namespace);
      const report = await collectStatus(c, { namespace: p.namespace, operatorNamespace: p.operatorNamespace });
      out(format === "json" ? `${JSON.stringify(report, null, 2)}\n` : renderStatus(report));
      return 0;
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
      const { checkNamespace, connect } = await kube();
      const { describeResource, renderDescription } = await import("./describe.ts");
      const c = connect(p);
      const namespace = p.namespace ?? c.defaultNamespace;
      await checkNamespace(c, namespace);
      const d = await describeResource(c, kind, namespace, name);
      out(format === "json" ? `${JSON.stringify(d, null, 2)}\n` : renderDescription(d));
      return 0;
    }
    case "report": {
      if (p.args.length) throw new UsageError(`report takes no arguments (got ${p.args.join(" ")})`);
      const file = p.output ?? `ifp-report-${new Date().toISOString().replace(/[:.]/g, "-")}.tar.gz`;
      if (file === "json") throw new UsageError("report writes a tar.gz: -o FILE.tar.gz");
      const { connect } = await kube();
      const { writeReport } = await import("./report.ts");
      const c = connect(p);
      const bundle = await writeReport(c, { namespace: p.namespace, operatorNamespace: p.operatorNamespace });
      try {
        writeFileSync(file, bundle, { mode: 0o600 });
      } catch (err) {
        throw new PluginError(`cannot write ${file}: ${(err as Error).message}`);
      }
      process.stderr.write(`wrote ${file} (${bundle.length} bytes)\n`);
      return 0;
    }
    case "completion": {
      const [shell, ...rest] = p.args;
      if (!SHELLS.includes(shell as Shell) || rest.length)
        throw new UsageError(`completion takes one shell: ${SHELLS.join(" or ")}`);
      out(completionScript(COMPLETION, shell as Shell));
      return 0;
    }
    case "version":
      out(`${versionLine("kubectl-ifp")}\n`);
      return 0;
    case "":
      throw new UsageError("no command");
    default:
      throw new UsageError(`unknown command ${JSON.stringify(p.command)}`);
  }
}

const SECONDS = /^\d{1,7}$/;

function secondsFlag(name: string, value: string | undefined, max: number): string[] {
  if (value === undefined) return [];
  if (!SECONDS.test(value) || Number(value) > max)
    throw new UsageError(`--${name} takes whole seconds, 0 to ${max} (got ${JSON.stringify(value)})`);
  return [`--${name}`, String(Number(value))];
}

/**
 * send, tail and redrive: the arguments checked here, then the runtime's `ifp send --local-api`,
 * `ifp tail` or `ifp redrive` run in one of the Agent's ready pods (exec.ts); its exit code is
 * the plugin's.
 */
async function messaging(command: "send" | "tail" | "redrive", p: Parsed, out: (s: string) => void): Promise<number> {
  const [name, ...rest] = p.args;
  if (!name) throw new UsageError(`${command} needs the Agent's name: ${command} AGENT`);
  if (command === "redrive" && rest.length > 1)
    throw new UsageError(`redrive takes one Agent and one MESSAGE_ID (got ${p.args.join(" ")})`);
  if (command !== "redrive" && rest.length)
    throw new UsageError(`${command} takes one Agent (got ${p.args.join(" ")})`);
  if (p.allNamespaces) throw new UsageError(`${command} reads one namespace: -n NS, not -A`);
  if (p.output !== undefined) throw new UsageError(`${command} has no -o: it prints what ifp prints`);
  const m = p.messaging;
  const allowed: readonly string[] =
    command === "send"
      ? ["to", "text", "phase", "wait"]
      : command === "tail"
        ? ["since", "count", "timeout"]
        : ["limit", "all"];
  const stray = [...Object.keys(m), ...(p.all ? ["all"] : [])].find((f) => !allowed.includes(f));
  if (stray) throw new UsageError(`--${stray} does not go with ${command}`);
  let args: string[];
  if (command === "redrive") {
    const id = rest[0];
    if (p.all === (id !== undefined)) throw new UsageError("redrive takes one MESSAGE_ID, or --all");
    if (m.limit !== undefined && (!p.all || !/^[1-9]\d{0,3}$/.test(m.limit) || Number(m.limit) > 1000))
      throw new UsageError(`--limit goes with --all and takes 1 to 1000 (got ${JSON.stringify(m.limit)})`);
    args = ["redrive", "--local-api", "", ...(p.all ? ["--all", ...(m.limit ? ["--limit", m.limit] : [])] : [id!])];
  } else if (command === "send") {
    if (!m.to)
      throw new UsageError("send needs --to AGENT_ID (the recipient's agent id, as the Agent's peers name it)");
    if (m.text === undefined) throw new UsageError('send needs --text "…"');
    if (m.phase === "") throw new UsageError("--phase cannot be empty");
    args = ["send", "--local-api", "", "--to", m.to, "--text", m.text];
    if (m.phase) args.push("--phase", m.phase);
    args.push(...secondsFlag("wait", m.wait, 3600));
  } else {
    args = ["tail", "--local-api", "", "--stop-on-eof"];
    args.push(...secondsFlag("since", m.since, 7 * 24 * 3600), ...secondsFlag("timeout", m.timeout, 24 * 3600));
    if (m.count !== undefined) {
      if (!/^[1-9]\d{0,6}$/.test(m.count))
        throw new UsageError(`--count takes a whole number of messages, 1 or more (got ${JSON.stringify(m.count)})`);
      args.push("--count", m.count);
    }
  }
  const { checkNamespace, connect } = await kube();
  const { checkExec, execIfp, RUNTIME_CONTAINER, runtimePod } = await import("./exec.ts");
  const c = connect(p);
  const namespace = p.namespace ?? c.defaultNamespace;
  await checkNamespace(c, namespace);
  const target = await runtimePod(c, namespace, name);
  await checkExec(c, target);
  args[2] = target.localApi;
  process.stderr.write(`kubectl ifp: ${command} through pod ${target.pod} (container ${RUNTIME_CONTAINER})\n`);
  const stop = new AbortController();
  const interrupt = () => stop.abort();
  process.once("SIGINT", interrupt);
  process.once("SIGTERM", interrupt);
  const utf8 = new StringDecoder("utf8");
  const errText = new StringDecoder("utf8");
  try {
    return await execIfp(c, target, args, {
      out: (b) => out(utf8.write(b)),
      err: (b) => void process.stderr.write(printable(errText.write(b), { lines: true })),
      stdin: command === "tail",
      stop: stop.signal,
    });
  } finally {
    process.off("SIGINT", interrupt);
    process.off("SIGTERM", interrupt);
  }
}

/** Runs the plugin; returns the exit code. Never throws: every failure is one line on stderr. */
export async function main(
  argv = process.argv.slice(2),
  write = (s: string) => void process.stdout.write(s),
): Promise<number> {
  // Everything printed carries what others wrote (statuses, Events, a runtime's answers).
  const out = (s: string) => write(printable(s, { lines: true }));
  let p: Parsed;
  try {
    p = parse(argv);
    if (p.help) {
      out(USAGE);
      return 0;
    }
    if (p.version) return await run({ ...p, command: "version", args: [] }, out);
    return await run(p, out);
  } catch (err) {
    if (err instanceof UsageError) {
      process.stderr.write(`kubectl ifp: ${err.message}\n\n${USAGE}`);
      return 2;
    }
    const message = err instanceof PluginError ? err.message : apiMessage(err);
    process.stderr.write(`kubectl ifp: ${printable(message)}\n`);
    return 1;
  }
}
