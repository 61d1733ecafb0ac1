import { readFile } from "node:fs/promises";
import { parseArgs } from "node:util";
import { privateKeyFromPem } from "../protocol/keys.ts";
import { exitCode, formatReport } from "./report.ts";
import { CheckUsageError, runChecks } from "./runner.ts";

/** `ifp check URL …`: parse, run, print. Usage mistakes throw CheckUsageError (exit 2). */
export async function checkCommand(args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: {
      relay: { type: "boolean" },
      key: { type: "string" },
      from: { type: "string" },
      "key-id": { type: "string", default: "key-1" },
      "ca-file": { type: "string" },
      json: { type: "boolean" },
      only: { type: "string" },
      timeout: { type: "string" },
    },
  });
  if (positionals.length !== 1) throw new CheckUsageError("check needs exactly one https URL");
  const from = values.from ?? process.env.IFP_AGENT_ID;
  if (values.key && !from) throw new CheckUsageError("--key needs --from AGENT_ID (or IFP_AGENT_ID): the agent the key belongs to");
  if (values.from && !values.key) throw new CheckUsageError("--from needs --key FILE");
  const timeout = values.timeout === undefined ? undefined : Number(values.timeout);
  if (timeout !== undefined && !(timeout > 0 && timeout <= 60)) throw new CheckUsageError("--timeout takes seconds, from more than 0 to 60");
  const key = values.key ? { agentId: from!, keyId: values["key-id"]!, privateKey: privateKeyFromPem(await readFile(values.key)) } : undefined;
  const report = await runChecks({
    url: positionals[0]!,
    relay: values.relay,
    key,
    extraCa: values["ca-file"] ? await readFile(values["ca-file"], "utf8") : undefined,
    only: values.only,
    timeoutMs: timeout === undefined ? undefined : timeout * 1000,
  });
  process.stdout.write(values.json ? `${JSON.stringify(report, null, 2)}\n` : formatReport(report));
  return exitCode(report);
}
