// `ifp relay pull|tail|publish`: an agent's mailbox on a relay read (once, or followed over SSE)
// or one signed message published there, from the command line.
import { readFile } from "node:fs/promises";
import { request } from "node:https";
import { parseArgs } from "node:util";
import { defaultCaCertificates, HttpClient } from "../net/http-client.ts";
import { signRequest } from "../protocol/http-signatures.ts";
import { composeMessage } from "../agent/compose.ts";
import { didKeyFromPublicKey } from "../protocol/did-key.ts";
import { privateKeyFromPem, rawPublicKey } from "../protocol/keys.ts";
import { signMessage, type SigningKey } from "../protocol/signing.ts";
import type { Message } from "../protocol/message.ts";
import { MAX_PAGE_BYTES, RelayClient, RelayError, relayRefusal } from "../net/relay-client.ts";
import { sseEvents } from "../net/sse.ts";
import { printable, printableJson } from "../util/printable.ts";

const say = (line: string) => process.stderr.write(`${printable(line, { lines: true })}\n`);
/** JSON of others' messages and answers, printable on the admin's terminal. */
const printJson = (json: string) => process.stdout.write(printableJson(json));

/**
 * `ifp relay pull|tail|publish RELAY_URL --key FILE --from AGENT_ID`: read your mailbox on a
 * relay, or publish one signed message there for another agent. `--from did:key` is the did:key
 * of the key itself.
 */
export async function relayCommand(args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: {
      key: { type: "string" },
      from: { type: "string" },
      "key-id": { type: "string", default: "key-1" },
      "ca-file": { type: "string" },
      ack: { type: "boolean" },
      limit: { type: "string" },
      to: { type: "string" },
      text: { type: "string" },
      phase: { type: "string", default: "context" },
    },
  });
  const [verb, url] = positionals;
  const from = values.from ?? process.env.IFP_AGENT_ID;
  if ((verb !== "pull" && verb !== "tail" && verb !== "publish") || !url)
    throw usage("relay needs pull, tail or publish and the relay's https URL");
  if (!URL.canParse(url) || new URL(url).protocol !== "https:")
    throw usage(`the relay's URL must be an https URL (${JSON.stringify(url)} is not)`);
  if (!values.key) throw usage("relay needs --key FILE (your Ed25519 key, PKCS#8 PEM)");
  if (!from) throw usage("relay needs --from AGENT_ID (or IFP_AGENT_ID)");
  if (verb === "publish" && (!values.to || values.text === undefined))
    throw usage("relay publish needs --to AGENT_ID and --text");
  const privateKey = privateKeyFromPem(await readFile(values.key));
  const key: SigningKey = {
    agentId: from === "did:key" ? didKeyFromPublicKey(rawPublicKey(privateKey)) : from,
    keyId: values["key-id"]!,
    privateKey,
  };
  const extraCa = values["ca-file"] ? await readFile(values["ca-file"], "utf8") : undefined;
  if (verb === "tail") return tail(url.replace(/\/+$/, ""), key, extraCa);
  const http = new HttpClient({ extraCa, userAgent: "ifp-cli" });
  try {
    const client = new RelayClient(url, key, http);
    if (verb === "publish") {
      const message = signMessage(
        composeMessage({ to: values.to, phase: values.phase, text: values.text }, { agentId: key.agentId }),
        key,
      );
      return await publish(client, message, url);
    }
    say(`reading ${key.agentId}'s mailbox on ${url} …`);
    const { messages } = await client.pull({ limit: values.limit ? Number(values.limit) : 100 });
    for (const m of messages) {
      printJson(`${JSON.stringify(m)}\n`);
      if (values.ack) await client.ack(m.headers.message_id);
    }
    say(
      `${messages.length} message${messages.length === 1 ? "" : "s"}${values.ack ? ", acknowledged" : " (still waiting; --ack removes them)"}`,
    );
    return 0;
  } catch (err) {
    if (err instanceof RelayError) throw new Error(`the relay answered ${err.status} ${err.code}: ${err.message}`);
    throw err;
  } finally {
    await http.close();
  }
}

/**
 * One signed POST /relay/publish: its answer as one JSON line on stdout (status, message_id, and
 * for a refusal the relay's code and message), exit 0 for a 2xx and 1 otherwise.
 */
async function publish(client: RelayClient, message: Message, url: string): Promise<number> {
  const res = await client.publish(message);
  const ok = res.status >= 200 && res.status < 300;
  const refused = ok
    ? undefined
    : relayRefusal(res.status, res.text, { code: "unexpected_status", message: `the relay answered ${res.status}` });
  const answer = {
    status: res.status,
    message_id: message.headers.message_id,
    from: message.headers.from.agent,
    ...(refused ? { code: refused.code, message: refused.message } : {}),
  };
  printJson(`${JSON.stringify(answer)}\n`);
  say(
    ok
      ? `published ${answer.message_id} on ${url} for ${message.headers.to.map((t) => t.agent).join(", ")}`
      : `the relay answered ${res.status} ${answer.code}: ${answer.message}${res.retryAfter ? ` (retry after ${res.retryAfter} s)` : ""}`,
  );
  return ok ? 0 : 1;
}

/** Follow the mailbox over SSE, one JSON message per line, until Ctrl-C. */
async function tail(base: string, key: SigningKey, extraCa: string | undefined): Promise<number> {
  const url = `${base}/relay/events`;
  const headers = await signRequest({ method: "GET", url, headers: { accept: "text/event-stream" } }, key);
  say(`following ${key.agentId}'s mailbox on ${base} (Ctrl-C stops) …`);
  return new Promise((resolve) => {
    const req = request(url, { headers, ca: extraCa ? [...defaultCaCertificates(), extraCa] : undefined }, (res) => {
      if (res.statusCode !== 200) {
        let body = "";
        res.on("data", (c: Buffer) => (body += c));
        res.on("end", () => {
          say(`the relay answered ${res.statusCode}: ${body}`);
          resolve(1);
        });
        return;
      }
      // Framed as the SSE standard allows (LF, CRLF or CR line ends): one message per line out.
      void (async () => {
        try {
          for await (const event of sseEvents(res, MAX_PAGE_BYTES))
            if (event.event === "message") printJson(`${event.data}\n`);
        } catch (err) {
          say(`the stream from ${base} broke off: ${(err as Error).message}`);
          resolve(1);
        }
      })();
      res.on("end", () => resolve(0));
    });
    req.on("error", (err) => {
      say(`cannot reach ${base}: ${err.message}`);
      resolve(1);
    });
    process.once("SIGINT", () => {
      req.destroy();
      resolve(0);
    });
    req.end();
  });
}

function usage(message: string): Error {
  const e = new Error(message);
  (e as { code?: string }).code = "ERR_PARSE_ARGS_USAGE";
  return e;
}
