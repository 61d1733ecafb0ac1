import type { Logger } from "pino";
import type { NatsOptions } from "../nats/connection.ts";

export interface RelayOptions {
  manifest: string;
  port: number;
  host?: string;
  tlsCert: string;
  tlsKey: string;
  nats: Omit<NatsOptions, "name">;
  logger?: Logger;
}

export async function startRelay(_opts: RelayOptions): Promise<{ close(): Promise<void> }> {
  throw new Error("relay mode is not available yet");
}
