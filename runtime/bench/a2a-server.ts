// The A2A baseline of the inbox benchmark: a minimal agent on the official A2A JavaScript SDK
// (@a2a-js/sdk, its Express JSON-RPC transport, over HTTPS like the inbox). It accepts
// SendMessage (A2A 1.0's name for message/send) and answers with a short agent message. It
// neither verifies signatures nor persists anything (the SDK's in-memory task store).
import { readFileSync } from "node:fs";
import { createServer } from "node:https";
import express from "express";
import { Role, type AgentCard, type Message } from "@a2a-js/sdk";
import { AgentEvent, DefaultRequestHandler, InMemoryTaskStore, type AgentExecutor } from "@a2a-js/sdk/server";
import { jsonRpcHandler, UserBuilder } from "@a2a-js/sdk/server/express";

const [certFile, keyFile, port] = process.argv.slice(2);
const url = `https://localhost:${port}/a2a/jsonrpc`;

const card: AgentCard = {
  name: "bench-agent",
  description: "Accepts messages",
  supportedInterfaces: [{ url, protocolBinding: "JSONRPC", tenant: "", protocolVersion: "1.0" }],
  provider: undefined,
  version: "1.0.0",
  capabilities: { streaming: false, pushNotifications: false, extensions: [], extendedAgentCard: false },
  securitySchemes: {},
  securityRequirements: [],
  defaultInputModes: ["text/plain"],
  defaultOutputModes: ["text/plain"],
  skills: [],
  signatures: [],
} as unknown as AgentCard;

let n = 0;
const executor: AgentExecutor = {
  async execute(ctx, bus) {
    const reply: Message = {
      messageId: `r-${++n}`,
      contextId: ctx.contextId,
      taskId: "",
      role: Role.ROLE_AGENT,
      parts: [{ content: { $case: "text", value: "accepted" }, metadata: undefined, filename: "", mediaType: "" }],
      metadata: undefined,
      extensions: [],
      referenceTaskIds: [],
    } as unknown as Message;
    bus.publish(AgentEvent.message(reply));
    bus.finished();
  },
  async cancelTask() {},
};

const handler = new DefaultRequestHandler(card, new InMemoryTaskStore(), executor);
const app = express();
app.use(express.json({ limit: "1mb" }));
app.use("/a2a/jsonrpc", jsonRpcHandler({ requestHandler: handler, userBuilder: UserBuilder.noAuthentication }));
createServer({ cert: readFileSync(certFile!), key: readFileSync(keyFile!), minVersion: "TLSv1.2" }, app).listen(
  Number(port),
  "127.0.0.1",
  () => {
    process.stdout.write("listening\n");
  },
);
