import { statSync } from "node:fs";
import { readFile } from "node:fs/promises";
import type { FastifyInstance } from "fastify";
import pino, { type Logger } from "pino";
import { loadManifest } from "../config/manifest.ts";
import { Nats, type NatsOptions } from "../nats/connection.ts";
import { isoSeconds } from "../protocol/documents.ts";
import { privateKeyFromPem, rawPublicKey } from "../protocol/keys.ts";
import { signMessage, type SigningKey } from "../protocol/signing.ts";
import { Verifier } from "../protocol/verify.ts";
import { Agent } from "../resources/agent.ts";
import { parseDuration } from "../resources/common.ts";
import { createRuntimeMetrics } from "../server/metrics.ts";
import { readTls, watchTls } from "../server/tls.ts";
import { buildAgentApp } from "./app.ts";
import { ANNOTATIONS, Documents } from "./documents.ts";
import { HandlerDelivery } from "./handoff.ts";
import { agentNames } from "./names.ts";
import { OutboxStore } from "./outbox.ts";
import { errorReply } from "./replies.ts";
import { InboxStore } from "./store.ts";

export interface AgentOptions {
  manifest: string;
  port: number;
  host?: string;
  tlsCert: string;
  tlsKey: string;
  signingKey: string;
  nats: Omit<NatsOptions, "name">;
  logger?: Logger;
}

export interface RunningAgent {
  app: FastifyInstance;
  url: string;
  agent: Agent;
  nats: Nats;
  close(): Promise<void>;
}

/** Start the agent mode: load everything, listen on TLS, connect NATS, hand messages on. */
export async function startAgent(opts: AgentOptions): Promise<RunningAgent> {
  const log = opts.logger ?? pino({ level: process.env.IFP_LOG_LEVEL ?? "info" });
  const agent = await loadManifest(opts.manifest, Agent);
  const spec = agent.spec;
  const privateKey = privateKeyFromPem(await readFile(opts.signingKey));
  const signing: SigningKey = { agentId: spec.agentId, keyId: spec.signing.keyId, privateKey };
  const keyCreated =
    agent.metadata.annotations?.[ANNOTATIONS.signingKeyCreated] ??
    agent.metadata.creationTimestamp ??
    isoSeconds(statSync(opts.signingKey).mtime);
  const documents = new Documents(agent, rawPublicKey(privateKey), keyCreated);
  const verifier = new Verifier(spec.peers);
  const names = agentNames(spec.agentId);
  const metrics = createRuntimeMetrics("agent");
  const tlsFiles = { certFile: opts.tlsCert, keyFile: opts.tlsKey };

  const nats = new Nats({ ...opts.nats, name: `ifp-agent ${spec.agentId}` }, log);
  const inbox = new InboxStore(nats, names, parseDuration(spec.inbox.replayWindow));
  const outbox = new OutboxStore(nats, names);
  let ready = false;

  const app = buildAgentApp({
    agent,
    documents,
    verifier,
    store: inbox,
    metrics,
    logger: log,
    tls: readTls(tlsFiles),
    ready: () => ready && nats.isConnected,
  });
  const stopWatch = watchTls(app, tlsFiles, log);

  const handoff = spec.handler
    ? new HandlerDelivery(
        nats,
        names,
        {
          url: spec.handler.url,
          timeoutMs: parseDuration(spec.handler.timeout),
          deadLetterAfterMs: parseDuration(spec.handler.deadLetterAfter),
        },
        log,
        metrics,
        {
          async onProtocolProblem(message, problem) {
            const reply = errorReply(message, { agentId: spec.agentId, displayName: spec.displayName }, {
              code: message.ifp !== 4 ? "unsupported_version" : "unknown_phase",
              text: `Your message ${message.headers.message_id} was received but not processed: ${problem}.`,
              details: { supported_ifp: [4], phases: ["greeting", "context", "probe", "recommend", "close", "error"] },
            });
            await outbox.enqueue(signMessage(reply, signing));
          },
        },
      )
    : undefined;

  const abort = new AbortController();
  const started = (async () => {
    await nats.start(abort.signal);
    for (let delay = 500; ; delay = Math.min(delay * 2, 10_000)) {
      try {
        await inbox.ensure();
        await outbox.ensure();
        await documents.syncUpdated(nats, names, log);
        break;
      } catch (err) {
        if (abort.signal.aborted) return;
        log.warn({ err: (err as Error).message }, "JetStream streams not ready yet");
        await new Promise((r) => setTimeout(r, delay));
      }
    }
    ready = true;
    handoff?.start();
    log.info({ agentId: spec.agentId, stream: names.inboxStream }, "agent ready");
  })().catch((err) => {
    if (!abort.signal.aborted) log.error({ err }, "agent start failed");
  });

  await app.listen({ port: opts.port, host: opts.host ?? "0.0.0.0" });
  const address = app.server.address();
  const port = typeof address === "object" && address ? address.port : opts.port;
  const url = `https://${opts.host && opts.host !== "0.0.0.0" ? opts.host : "localhost"}:${port}`;
  log.info({ url, agentId: spec.agentId }, "agent listening");

  return {
    app,
    url,
    agent,
    nats,
    async close() {
      abort.abort();
      stopWatch();
      await app.close();
      await handoff?.stop();
      await started;
      await nats.close();
    },
  };
}
