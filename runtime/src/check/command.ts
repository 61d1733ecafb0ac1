// `ifp check URL …`: its flags parsed into CheckOptions, the checks run (runner.ts), the report
// printed (for people or as JSON), and the exit code.
import { readFile } from "node:fs/promises";
import { parseArgs } from "node:util";
import { privateKeyFromPem } from "../protocol/keys.ts";
import type { SigningKey } from "../protocol/signing.ts";
import { printableJson } from "../util/printable.ts";
import { exitCode, failingLevels, formatReport } from "./report.ts";
import { CheckUsageError, runChecks } from "./runner.ts";

async function signingKey(file: string, agentId: string, keyId: string): Promise<SigningKey> {
  const pem = await readFile(file).catch((err: Error) => {
    throw new CheckUsageError(`cannot read ${file}: ${err.message}`);
  });
  try {
    return { agentId, keyId, privateKey: privateKeyFromPem(pem) };
  } catch (err) {
    throw new CheckUsageError(`${file} is not an Ed25519 key (PKCS#8 PEM): ${(err as Error).message}`);
  }
}

const seconds = (flag: string, v: string | undefined, max: number): number | undefined => {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!(n > 0 && n <= max)) throw new CheckUsageError(`${flag} takes seconds, from more than 0 to ${max}`);
  return n * 1000;
};

/** `ifp check URL …`: parse, run, print. Usage mistakes throw CheckUsageError (exit 2). */
export async function checkCommand(args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: {
      relay: { type: "boolean" },
      "relay-url": { type: "string" },
      key: { type: "string" },
      from: { type: "string" },
      "key-id": { type: "string", default: "key-1" },
      "peer-key": { type: "string" },
      "peer-from": { type: "string" },
      "peer-key-id": { type: "string", default: "key-1" },
      "ca-file": { type: "string" },
      "inbox-cert": { type: "string" },
      "inbox-key": { type: "string" },
      "inbox-port": { type: "string" },
      "inbox-host": { type: "string" },
      "local-api": { type: "string" },
      "local-api-token": { type: "string" },
      "send-wait": { type: "string" },
      json: { type: "boolean" },
      strict: { type: "boolean" },
      profile: { type: "boolean" },
      only: { type: "string" },
      timeout: { type: "string" },
    },
  });
  if (positionals.length !== 1) throw new CheckUsageError("check needs exactly one https URL");
  const from = values.from ?? process.env.IFP_AGENT_ID;
  if (values.key && !from)
    throw new CheckUsageError("--key needs --from AGENT_ID (or IFP_AGENT_ID): the agent the key belongs to");
  if (values.from && !values.key) throw new CheckUsageError("--from needs --key FILE");
  if (!values["peer-key"] !== !values["peer-from"])
    throw new CheckUsageError("--peer-key and --peer-from go together: a second agent the relay serves");
  if (!values["inbox-cert"] !== !values["inbox-key"])
    throw new CheckUsageError(
      "--inbox-cert and --inbox-key go together: the certificate of the kit's inbox, which the target trusts",
    );
  if (values["relay-url"] && !values.relay) throw new CheckUsageError("--relay-url is for a relay (--relay)");
  if (values["local-api-token"] && !values["local-api"])
    throw new CheckUsageError("--local-api-token needs --local-api URL");
  const port = values["inbox-port"] === undefined ? undefined : Number(values["inbox-port"]);
  if (port !== undefined && !(Number.isInteger(port) && port >= 0 && port < 65536))
    throw new CheckUsageError("--inbox-port takes a port number");
  const timeoutMs = seconds("--timeout", values.timeout, 60);
  const sendWaitMs = seconds("--send-wait", values["send-wait"], 3600);
  const read = (file: string) =>
    readFile(file, "utf8").catch((err: Error) => {
      throw new CheckUsageError(`cannot read ${file}: ${err.message}`);
    });
  const key = values.key ? await signingKey(values.key, from!, values["key-id"]!) : undefined;
  const peerKey = values["peer-key"]
    ? await signingKey(values["peer-key"], values["peer-from"]!, values["peer-key-id"]!)
    : undefined;
  const report = await runChecks({
    url: positionals[0]!,
    relay: values.relay,
    relayUrl: values["relay-url"],
    key,
    peerKey,
    extraCa: values["ca-file"] ? await read(values["ca-file"]) : undefined,
    inbox: values["inbox-cert"]
      ? {
          cert: await read(values["inbox-cert"]),
          key: await read(values["inbox-key"]!),
          port,
          host: values["inbox-host"],
        }
      : undefined,
    localApi: values["local-api"]
      ? {
          url: values["local-api"],
          token: values["local-api-token"] ? (await read(values["local-api-token"])).trim() : undefined,
        }
      : undefined,
    sendWaitMs,
    only: values.only,
    timeoutMs,
  });
  const gate = { strict: values.strict, profile: values.profile };
  process.stdout.write(
    values.json
      ? printableJson(`${JSON.stringify({ ...report, gate: { fails: failingLevels(gate) } }, null, 2)}\n`)
      : formatReport(report, gate),
  );
  return exitCode(report, gate);
}
