import { readFile } from "node:fs/promises";
import { request } from "node:https";
import { parseArgs } from "node:util";
import { defaultCaCertificates, HttpClient } from "../net/http-client.ts";
import { signRequest } from "../protocol/http-signatures.ts";
import { privateKeyFromPem } from "../protocol/keys.ts";
import type { SigningKey } from "../protocol/signing.ts";
import { MAX_PAGE_BYTES, RelayClient } from "../net/relay-client.ts";
import { sseEvents } from "../net/sse.ts";

const say = (line: string) => process.stderr.write(`${line}\n`);

/** `ifp relay pull|tail RELAY_URL --key FILE --from AGENT_ID`: read your mailbox on a relay. */
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
    },
  });
  const [verb, url] = positionals;
  const from = values.from ?? process.env.IFP_AGENT_ID;
  if ((verb !== "pull" && verb !== "tail") || !url) throw usage("relay needs pull or tail and the relay's https URL");
  if (!values.key) throw usage("relay needs --key FILE (your Ed25519 key, PKCS#8 PEM)");
  if (!from) throw usage("relay needs --from AGENT_ID (or IFP_AGENT_ID)");
  const key: SigningKey = {
    agentId: from,
    keyId: values["key-id"]!,
    privateKey: privateKeyFromPem(await readFile(values.key)),
  };
  const extraCa = values["ca-file"] ? await readFile(values["ca-file"], "utf8") : undefined;
  if (verb === "pull") {
    const http = new HttpClient({ extraCa, userAgent: "ifp-cli" });
    try {
      const client = new RelayClient(url, key, http);
      say(`reading ${from}'s mailbox on ${url} …`);
      const { messages } = await client.pull({ limit: values.limit ? Number(values.limit) : 100 });
      for (const m of messages) {
        process.stdout.write(`${JSON.stringify(m)}\n`);
        if (values.ack) await client.ack(m.headers.message_id);
      }
      say(
        `${messages.length} message${messages.length === 1 ? "" : "s"}${values.ack ? ", acknowledged" : " (still waiting; --ack removes them)"}`,
      );
      return 0;
    } finally {
      await http.close();
    }
  }
  return tail(url.replace(/\/+$/, ""), key, extraCa);
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
            if (event.event === "message") process.stdout.write(`${event.data}\n`);
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
