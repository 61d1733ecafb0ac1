// The baseline of the inbox benchmark: a bare fastify HTTPS POST handler that parses the JSON
// body and answers 202, with nothing else — no verification, no storage.
import { readFileSync } from "node:fs";
import Fastify from "fastify";

const [certFile, keyFile, port] = process.argv.slice(2);
const app = Fastify({
  https: { cert: readFileSync(certFile!), key: readFileSync(keyFile!), minVersion: "TLSv1.2" },
  bodyLimit: 1024 * 1024,
});
app.post("/.well-known/agent/inbox", async (req, reply) => {
  const body = req.body as { headers?: { message_id?: string } };
  return reply.code(202).send({ status: "accepted", message_id: body.headers?.message_id });
});
await app.listen({ port: Number(port), host: "127.0.0.1" });
process.stdout.write("listening\n");
