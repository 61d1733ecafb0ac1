// The `ifp` command (runtime/bin/ifp.ts): discover, send, keygen and completion here, and check,
// tail, redrive, circuits and relay from the modules it loads for them; each command's usage.
import { readFile, writeFile } from "node:fs/promises";
import { parseArgs } from "node:util";
import { composeMessage } from "../agent/compose.ts";
import { LocalUsageError } from "./local-commands.ts";
import { DiscoveryClient, DiscoveryError } from "../discovery/client.ts";
import { connectFailure } from "../net/connect-error.ts";
import { HttpClient } from "../net/http-client.ts";
import { generateSigningKey, privateKeyFromPem } from "../protocol/keys.ts";
import { inboxPost } from "../protocol/message.ts";
import { signMessage } from "../protocol/signing.ts";
import { printable, printableJson } from "../util/printable.ts";
import { versionLine } from "../util/version.ts";
import { type CompletionSpec, completionScript, SHELLS, type Shell } from "../util/completion.ts";

/** Each command's usage, as `ifp COMMAND --help` prints it. */
const COMMANDS: Record<string, string> = {
  discover: `  ifp discover URL [--ca-file F] [--json]
      fetch, validate and show a peer's identity and capability documents
`,
  send: `  ifp send --from-key FILE --from AGENT_ID --to URL --text "…" [--phase P] [--key-id K] [--ca-file F]
      sign one message with your key and POST it to the peer's inbox
  ifp send --local-api URL (--to AGENT_ID | --a2a CARD_URL) --text "…" [--phase P] [--wait S]
      send as the agent whose runtime serves this local API (http://127.0.0.1:8081 in its pod):
      the runtime signs it with the agent's key and stores it in its outbox before the 202;
      --a2a sends to the A2A agent whose agent card is at CARD_URL (its answer comes back to
      the agent's application as a reply); --wait follows its delivery for up to S seconds
      (exit 0 once delivered)
`,
  tail: `  ifp tail [--local-api URL] [--since S] [--count N] [--timeout S] [--stop-on-eof]
      follow what the agent receives: one JSON line per message its inbox accepts (the local
      API's GET /messages/watch, on the pod's loopback; default IFP_LOCAL_API, else
      http://127.0.0.1:8081), taking none from its application; --since starts S seconds back,
      --count stops after N messages, --timeout after S seconds (exit 1 when fewer than N came),
      --stop-on-eof when standard input closes
`,
  redrive: `  ifp redrive (MESSAGE_ID | --all [--limit N]) [--local-api URL]
      send the agent's dead letters again (one, or up to N, default 100, oldest first): back
      into its outbox with a fresh attempt count, never a second copy of one delivered; through
      the local API (default IFP_LOCAL_API, else http://127.0.0.1:8081). Prints the runtime's
      answer (202, or 200 with what was redriven and skipped); exit 0 once redriven, 1 otherwise
`,
  circuits: `  ifp circuits [--local-api URL]
      the destinations (inbox, relay and A2A URLs) whose circuit breaker is open or half-open in
      the agent's runtime, as JSON after the status: 200 {"circuits": [{destination, state,
      failures, open_until}], "total": N}; through the local API (default IFP_LOCAL_API, else
      http://127.0.0.1:8081)
`,
  check: `  ifp check URL [--relay [--relay-url URL]] [--key FILE --from AGENT_ID [--key-id K]]
            [--peer-key FILE --peer-from AGENT_ID] [--inbox-cert F --inbox-key F [--inbox-port N]]
            [--local-api URL [--local-api-token FILE]] [--send-wait S] [--ca-file F] [--json]
            [--strict] [--profile] [--only GROUP] [--timeout S]
      run the conformance checks against any IFP agent (or, with --relay, relay) and report
      each as pass, fail or skip with its level (MUST, SHOULD, MAY, or this project's profile)
      and section; GROUP is discovery, tls, inbox or send (agent), tls or relay (relay).
      Without a key the target trusts, the checks that need one are skipped; with the kit's
      inbox (a certificate the target trusts) and --local-api it also checks what the target
      sends. Exit 1 when a MUST fails (also a SHOULD with --strict, a profile check with
      --profile), 0 otherwise, 2 for a usage mistake. At most 60 requests, https only.
`,
  keygen: `  ifp keygen --out FILE
      write a new Ed25519 signing key (PKCS#8 PEM) and print its public half
`,
  relay: `  ifp relay pull|tail RELAY_URL --key FILE --from AGENT_ID [--key-id K] [--ca-file F] [--ack] [--limit N]
      read your mailbox on a relay (pull lists waiting messages, --ack removes them;
      tail follows new ones)
  ifp relay publish RELAY_URL --key FILE --from AGENT_ID --to AGENT_ID --text "…" [--phase P]
            [--key-id K] [--ca-file F]
      sign one message with your key and publish it on a relay for the agent reading there;
      prints the relay's answer as one JSON line (exit 0 once it took the message);
      --from did:key sends as the did:key of your key
`,
};

/** The completion of ifp: each command's flags as its usage names them. */
function completionSpec(): CompletionSpec {
  const flags = (usage: string) => [...new Set(usage.match(/--[a-z][a-z0-9-]*/g) ?? [])];
  const commands = Object.fromEntries(Object.entries(COMMANDS).map(([name, usage]) => [name, flags(usage)]));
  commands.relay = ["pull", "tail", "publish", ...(commands.relay ?? [])];
  return { program: "ifp", commands: { ...commands, completion: [...SHELLS], version: [] }, globalFlags: ["--help"] };
}

function completion(args: string[]): number {
  const shell = args[0];
  if (args.length !== 1 || !SHELLS.includes(shell as Shell))
    throw new UsageError(`completion takes one shell: ${SHELLS.join(" or ")}`);
  process.stdout.write(completionScript(completionSpec(), shell as Shell));
  return 0;
}

const FOOTER = `
--ca-file trusts extra CA certificates (self-signed peers both humans agreed on).
IFP_AGENT_ID may stand in for --from.
`;

const USAGE = `usage: ifp <command> [options]

${Object.values(COMMANDS).join("")}  ifp completion bash|zsh
      print the shell's completion script: source <(ifp completion bash)
  ifp --version
      print the version of the ifp command and the commit it was built from
${FOOTER}`;

class UsageError extends Error {}

const say = (line: string) => process.stderr.write(`${printable(line, { lines: true })}\n`);
/** Output that carries what others wrote (documents, answers): printable on the admin's terminal. */
const print = (text: string) => process.stdout.write(printable(text, { lines: true }));
const printJson = (json: string) => process.stdout.write(printableJson(json));

export async function main(argv = process.argv.slice(2)): Promise<number> {
  const [command, ...rest] = argv;
  try {
    if (command !== undefined && Object.hasOwn(COMMANDS, command) && rest.some((a) => a === "--help" || a === "-h")) {
      process.stdout.write(`usage:\n${COMMANDS[command]}${FOOTER}`);
      return 0;
    }
    switch (command) {
      case "discover":
        return await discover(rest);
      case "send":
        return await send(rest);
      case "keygen":
        return await keygen(rest);
      case "check": {
        const { checkCommand } = await import("../check/command.ts");
        const { CheckUsageError } = await import("../check/runner.ts");
        return await checkCommand(rest).catch((err: unknown) => {
          throw err instanceof CheckUsageError ? new UsageError(err.message) : err;
        });
      }
      case "tail": {
        const { tailCommand } = await import("./local-commands.ts");
        return await tailCommand(rest);
      }
      case "redrive": {
        const { redriveCommand } = await import("./local-commands.ts");
        return await redriveCommand(rest);
      }
      case "circuits": {
        const { circuitsCommand } = await import("./local-commands.ts");
        return await circuitsCommand(rest);
      }
      case "relay": {
        const { relayCommand } = await import("./relay-commands.ts");
        return await relayCommand(rest);
      }
      case "completion":
        return completion(rest);
      case "--version":
      case "-V":
      case "version":
        process.stdout.write(`${versionLine("ifp")}\n`);
        return 0;
      case undefined:
      case "help":
      case "--help":
      case "-h":
        process.stdout.write(USAGE);
        return command ? 0 : 2;
      default:
        throw new UsageError(`unknown command ${JSON.stringify(command)}`);
    }
  } catch (err) {
    if (
      err instanceof UsageError ||
      err instanceof LocalUsageError ||
      (err as { code?: string }).code?.startsWith("ERR_PARSE_ARGS")
    ) {
      say(`ifp: ${(err as Error).message}\n\n${USAGE}`);
      return 2;
    }
    say(`ifp: ${(err as Error).message}`);
    return 1;
  }
}

async function httpFor(caFile: string | undefined): Promise<HttpClient> {
  return new HttpClient({ extraCa: caFile ? await readFile(caFile, "utf8") : undefined, userAgent: "ifp-cli" });
}

async function discover(args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: { "ca-file": { type: "string" }, json: { type: "boolean" } },
  });
  const url = positionals[0];
  if (!url) throw new UsageError("discover needs the peer's https URL");
  const http = await httpFor(values["ca-file"]);
  try {
    const client = new DiscoveryClient(http);
    say(`discovering ${DiscoveryClient.wellKnownBase(url)} …`);
    const [identity, capabilities] = await Promise.allSettled([client.identity(url), client.capabilities(url)]);
    if (identity.status === "rejected" && capabilities.status === "rejected") throw identity.reason;
    const out = {
      identity: identity.status === "fulfilled" ? identity.value : { error: (identity.reason as Error).message },
      capabilities:
        capabilities.status === "fulfilled" ? capabilities.value : { error: (capabilities.reason as Error).message },
    };
    if (values.json) {
      printJson(`${JSON.stringify(out, null, 2)}\n`);
    } else {
      // Every value is the peer's: one line each, so none can fake a line of its own.
      const v = (x: unknown) => printable(String(x));
      if (identity.status === "fulfilled") {
        const d = identity.value;
        print(`agent     ${v(d.agent_id)}${d.display ? ` (${v(d.display)})` : ""}\n`);
        for (const k of d.keys) print(`key       ${v(k.key_id)} ${v(k.type)} ${v(k.status)} ${v(k.public_key)}\n`);
        if (d.endpoints?.inbox) print(`inbox     ${v(d.endpoints.inbox)}\n`);
        if (d.relay?.urls.length)
          print(`relays    ${v(d.relay.urls.join(", "))} (${v(d.relay.preference ?? "any")})\n`);
      } else {
        print(`identity  unavailable: ${v((identity.reason as Error).message)}\n`);
      }
      if (capabilities.status === "fulfilled") {
        const c = capabilities.value;
        print(`supports  IFP ${(c.ifp_support ?? []).join(", ")}; updated ${v(c.updated ?? "?")}\n`);
        for (const cap of c.capabilities) {
          const cond = cap.conditions
            ? ` [${Object.entries(cap.conditions)
                .map(([k, val]) => `${k}=${val}`)
                .join(", ")}]`
            : "";
          print(`  ${v(cap.name)} v${v(cap.version)} — ${v(cap.description)}${v(cond)}\n`);
        }
      } else {
        print(`capabilities unavailable: ${v((capabilities.reason as Error).message)}\n`);
      }
    }
    return identity.status === "fulfilled" && capabilities.status === "fulfilled" ? 0 : 1;
  } finally {
    await http.close();
  }
}

async function send(args: string[]): Promise<number> {
  const { values } = parseArgs({
    args,
    options: {
      "from-key": { type: "string" },
      from: { type: "string" },
      "key-id": { type: "string", default: "key-1" },
      to: { type: "string" },
      text: { type: "string" },
      phase: { type: "string", default: "context" },
      "ca-file": { type: "string" },
      "local-api": { type: "string" },
      a2a: { type: "string" },
      wait: { type: "string" },
    },
  });
  if (values["local-api"] !== undefined) {
    for (const flag of ["from-key", "from", "ca-file"] as const)
      if (values[flag] !== undefined)
        throw new UsageError(`--local-api sends as the agent whose runtime serves it: --${flag} does not apply`);
    if (values.to !== undefined && values.a2a !== undefined)
      throw new UsageError("send takes one recipient: --to AGENT_ID or --a2a CARD_URL");
    if (!values.to && !values.a2a)
      throw new UsageError(
        "send needs --to AGENT_ID (the recipient's agent id) or --a2a CARD_URL (an A2A agent's card)",
      );
    if (values.text === undefined) throw new UsageError('send needs --text "…"');
    const { localSend } = await import("./local-commands.ts");
    return await localSend({
      localApi: values["local-api"],
      to: values.a2a !== undefined ? { a2a: values.a2a } : values.to!,
      text: values.text,
      phase: values.phase!,
      wait: values.wait,
    });
  }
  if (values.wait !== undefined) throw new UsageError("--wait follows a message sent with --local-api");
  if (values.a2a !== undefined)
    throw new UsageError("--a2a sends through the agent's runtime, which speaks A2A: give its --local-api");
  const keyFile = values["from-key"];
  const from = values.from ?? process.env.IFP_AGENT_ID;
  if (!keyFile) throw new UsageError("send needs --from-key FILE (your Ed25519 key, PKCS#8 PEM)");
  if (!from) throw new UsageError("send needs --from AGENT_ID (or IFP_AGENT_ID)");
  if (!values.to) throw new UsageError("send needs --to URL (the peer's https base URL)");
  if (values.text === undefined) throw new UsageError('send needs --text "…"');
  const privateKey = privateKeyFromPem(await readFile(keyFile));
  const http = await httpFor(values["ca-file"]);
  try {
    const discovery = new DiscoveryClient(http);
    say(`discovering ${values.to} …`);
    let to: string;
    let inbox: string;
    try {
      const identity = await discovery.identity(values.to);
      to = identity.agent_id;
      inbox = identity.endpoints?.inbox ?? `${DiscoveryClient.wellKnownBase(values.to)}/inbox`;
    } catch (err) {
      if (!(err instanceof DiscoveryError)) throw err;
      throw new Error(`cannot learn who answers at ${values.to}: ${err.message}`);
    }
    const message = signMessage(composeMessage({ to, phase: values.phase, text: values.text }, { agentId: from }), {
      agentId: from,
      keyId: values["key-id"]!,
      privateKey,
    });
    say(`sending ${message.headers.message_id} to ${to} at ${inbox} …`);
    const res = await http.request(inbox, inboxPost(message)).catch((err: unknown) => {
      throw new Error(`cannot reach ${inbox}: ${connectFailure(err, inbox) ?? (err as Error).message}`);
    });
    printJson(`${res.status} ${res.text}\n`);
    return res.status === 202 ? 0 : 1;
  } finally {
    await http.close();
  }
}

async function keygen(args: string[]): Promise<number> {
  const { values } = parseArgs({ args, options: { out: { type: "string" } } });
  if (!values.out) throw new UsageError("keygen needs --out FILE");
  const { privateKeyPem, publicKey } = generateSigningKey();
  await writeFile(values.out, privateKeyPem, { mode: 0o600, flag: "wx" }).catch((err: NodeJS.ErrnoException) => {
    throw new Error(err.code === "EEXIST" ? `${values.out} exists; it is never overwritten` : err.message);
  });
  process.stdout.write(`${publicKey}\n`);
  say(`wrote ${values.out}; the line above is its public key (spec.peers[].keys[].publicKey)`);
  return 0;
}
