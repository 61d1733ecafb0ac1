// The floor of the inbox benchmark: the least a verify-and-store inbox can do. `node:https`,
// JSON.parse, the canonical JSON (JCS) of the signed part as the runtime makes it, Ed25519 verify
// with a KeyObject parsed once per key, one JetStream publish with a dedupe id (Nats-Msg-Id)
// into the same inbox stream as the runtime's, then 202 once the PubAck is in. No schema, limits,
// conversation record or metrics.
//
//   node floor-server.ts <cert> <key> <port> <nats url> <keys.json> <subject prefix> [<creds> <inbox prefix>]
//
// keys.json: {"<agent id>#<key id>": "<raw public key, base64url>"}.
import { readFileSync } from "node:fs";
import { createServer } from "node:https";
import { jetstream } from "@nats-io/jetstream";
import { connect, credsAuthenticator } from "@nats-io/transport-node";
import { encodeToken } from "../src/contract/nats.ts";
import { publicKeyFromRaw } from "../src/protocol/keys.ts";
import { verifySignature } from "../src/protocol/signing.ts";

const [certFile, keyFile, port, natsUrl, keysFile, prefix, credsFile, inboxPrefix] = process.argv.slice(2);
const keys = new Map(
  Object.entries(JSON.parse(readFileSync(keysFile!, "utf8")) as Record<string, string>).map(([id, raw]) => [
    id,
    publicKeyFromRaw(raw),
  ]),
);
const nc = await connect({
  servers: natsUrl!,
  name: "ifp-floor",
  ...(credsFile ? { authenticator: credsAuthenticator(readFileSync(credsFile)) } : {}),
  ...(inboxPrefix ? { inboxPrefix } : {}),
});
const js = jetstream(nc);

const answer = (res: import("node:http").ServerResponse, status: number, body: string) => {
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
  res.end(body);
};

createServer({ cert: readFileSync(certFile!), key: readFileSync(keyFile!), minVersion: "TLSv1.2" }, (req, res) => {
  const chunks: Buffer[] = [];
  req.on("data", (c: Buffer) => chunks.push(c));
  req.on("end", async () => {
    const raw = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
    try {
      const message = JSON.parse(raw.toString("utf8"));
      const sig = message?.security?.signatures?.[0];
      const key = keys.get(sig?.key_id);
      if (!key || !verifySignature(message, sig, key)) return answer(res, 401, '{"error":"invalid_signature"}');
      const id = String(message.headers.message_id);
      await js.publish(`${prefix}.${encodeToken(id)}`, raw, { msgID: `${sig.key_id} ${id}`, timeout: 5_000 });
      answer(res, 202, `{"status":"accepted","message_id":${JSON.stringify(id)}}`);
    } catch {
      answer(res, 400, '{"error":"invalid_format"}');
    }
  });
}).listen(Number(port), "127.0.0.1", () => process.stdout.write("listening\n"));
