// Observing a running agent or relay from the outside: a raw TLS handshake, and its metrics.
import { connect as tlsConnect } from "node:tls";
import { type JetStreamManager, jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { agentNames } from "../../src/contract/agent-names.ts";

export type Handshake = { ok: true; protocol: string | null } | { ok: false; code: string; message: string };

/**
 * One TLS handshake with the given protocol range. The client lowers OpenSSL's security level
 * so that it really offers TLS 1.0/1.1 (Node 24 otherwise refuses on its own, before any byte
 * reaches the server): a failure is then the server's refusal.
 */
export function tlsHandshake(
  port: number,
  ca: string,
  range: { minVersion: "TLSv1" | "TLSv1.1" | "TLSv1.2"; maxVersion: "TLSv1.1" | "TLSv1.2" | "TLSv1.3" },
): Promise<Handshake> {
  return new Promise((resolve) => {
    const s = tlsConnect({
      host: "127.0.0.1",
      port,
      ca,
      servername: "localhost",
      ciphers: "DEFAULT:@SECLEVEL=0",
      ...range,
    });
    s.setTimeout(10_000, () => s.destroy(Object.assign(new Error("handshake timed out"), { code: "ETIMEDOUT" })));
    s.once("secureConnect", () => {
      resolve({ ok: true, protocol: s.getProtocol() });
      s.destroy();
    });
    s.once("error", (err: NodeJS.ErrnoException) => resolve({ ok: false, code: err.code ?? "", message: err.message }));
  });
}

/** The sum of a Prometheus sample over the series whose labels include `labels` (0 when none). */
export function metricValue(exposition: string, name: string, labels: Record<string, string> = {}): number {
  let sum = 0;
  for (const line of exposition.split("\n")) {
    const m = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    const have = Object.fromEntries([...(m[2] ?? "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((x) => [x[1], x[2]]));
    if (Object.entries(labels).every(([k, v]) => have[k] === v)) sum += Number(m[3]);
  }
  return sum;
}

/**
 * Whether a JetStream consumer has nothing left to deliver and nothing delivered but not yet
 * acknowledged: nothing more comes through it. A handler that saw a message may still be
 * acknowledging it; wait for this before asserting that nothing more was handed on.
 */
export async function consumerSettled(jsm: JetStreamManager, stream: string, consumer: string): Promise<boolean> {
  const info = await jsm.consumers.info(stream, consumer);
  return info.num_pending === 0 && info.num_ack_pending === 0;
}

/** consumerSettled through a connection of its own to the nats-server at `url`. */
export async function consumerSettledAt(url: string, stream: string, consumer: string): Promise<boolean> {
  const nc = await connect({ servers: url });
  try {
    return await consumerSettled(await jetstreamManager(nc), stream, consumer);
  } finally {
    await nc.close();
  }
}

/** Every message stored in the agent's inbox (by its agentStoreKey) was handed to spec.handler and acknowledged. */
export function handOffsSettled(url: string, agentKey: string): Promise<boolean> {
  const n = agentNames(agentKey);
  return consumerSettledAt(url, n.inboxStream, n.handlerConsumer);
}

/** Every message in the agent's outbox (by its agentStoreKey) was taken by its sender and acknowledged. */
export function outboxSettled(url: string, agentKey: string): Promise<boolean> {
  const n = agentNames(agentKey);
  return consumerSettledAt(url, n.outboxStream, n.senderConsumer);
}
