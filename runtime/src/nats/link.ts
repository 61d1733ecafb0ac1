// NatsLink: what of the process's NATS connection (Nats, connection.ts) the JetStream layouts and
// the backlog readers use, so that they need not import the connection that imports them.
import type { JetStreamClient, JetStreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";

/** The connection as it stands: its clients, whether it is up, and calls abandoned when it goes. */
export interface NatsLink {
  readonly nc: NatsConnection | undefined;
  readonly js: JetStreamClient;
  readonly jsm: JetStreamManager;
  readonly isConnected: boolean;
  /** `call`, rejected with 503 `unavailable` as soon as the connection is lost (Nats.whileConnected). */
  whileConnected<T>(call: Promise<T>, what?: string): Promise<T>;
}
