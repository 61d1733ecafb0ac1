// A JetStream stream's snapshot and its restore, through the server's own API as `nats stream
// backup` and `nats stream restore` use it (@nats-io/jetstream has no client for it):
//
// - `$JS.API.STREAM.SNAPSHOT.<stream>` with {deliver_subject, chunk_size, no_consumers: false}
//   answers {config, state}; the server then sends the snapshot (an s2-compressed tar of the
//   stream's store and its consumers' state) to deliver_subject in chunks, each to be answered on
//   its reply subject (the server's flow control), and an empty message at the end (with a status
//   header when it failed).
// - `$JS.API.STREAM.RESTORE.<stream>` with {config, state} answers {deliver_subject}; the chunks
//   are sent there as requests, each answered, and an empty one last, answered with the
//   stream_create_response of the restored stream.
//
// The data is kept as the server made it: only the server reads it.
import type { NatsConnection, Msg } from "@nats-io/transport-node";

/** The chunk size asked of the server, and sent to it (well below the default 1 MB max_payload). */
const CHUNK = 128 * 1024;

export interface StreamSnapshot {
  /** The restore request: the stream's configuration and state as the snapshot answered them. */
  meta: {
    config: { name: string } & Record<string, unknown>;
    state: { messages: number; last_seq: number } & Record<string, unknown>;
  };
  data: Buffer;
}

interface ApiError {
  error?: { code?: number; err_code?: number; description?: string };
}

const encode = (o: unknown) => new TextEncoder().encode(JSON.stringify(o));

function apiAnswer<T>(m: Msg, what: string): T {
  let body: T & ApiError;
  try {
    body = m.json<T & ApiError>();
  } catch {
    throw new Error(`${what}: the server answered ${m.data.length ? "something other than JSON" : "nothing"}`);
  }
  if (body.error)
    throw new Error(`${what}: ${body.error.description ?? "error"} (${body.error.err_code ?? body.error.code})`);
  return body;
}

/** The snapshot of `stream` (with its consumers), read whole. */
export async function snapshotStream(
  nc: NatsConnection,
  stream: string,
  inbox: string,
  timeoutMs = 60_000,
): Promise<StreamSnapshot> {
  const chunks: Buffer[] = [];
  let settle!: (err?: Error) => void;
  const done = new Promise<void>((resolve, reject) => {
    settle = (err) => (err ? reject(err) : resolve());
  });
  let timer = setTimeout(() => settle(new Error(`snapshot of ${stream}: no data for ${timeoutMs} ms`)), timeoutMs);
  const sub = nc.subscribe(inbox, {
    callback: (err, m) => {
      clearTimeout(timer);
      timer = setTimeout(() => settle(new Error(`snapshot of ${stream}: no data for ${timeoutMs} ms`)), timeoutMs);
      if (err) return settle(err);
      if (m.data.length === 0) {
        const code = m.headers?.code ?? 0;
        if (code >= 400)
          return settle(new Error(`snapshot of ${stream}: ${m.headers?.description || `status ${code}`}`));
        return settle();
      }
      chunks.push(Buffer.from(m.data));
      if (m.reply) m.respond();
    },
  });
  try {
    await nc.flush();
    const answer = apiAnswer<StreamSnapshot["meta"]>(
      await nc.request(
        `$JS.API.STREAM.SNAPSHOT.${stream}`,
        encode({ deliver_subject: inbox, chunk_size: CHUNK, no_consumers: false }),
        { timeout: timeoutMs },
      ),
      `snapshot of ${stream}`,
    );
    await done;
    return { meta: { config: answer.config, state: answer.state }, data: Buffer.concat(chunks) };
  } finally {
    clearTimeout(timer);
    sub.unsubscribe();
  }
}

/** Restores `snapshot` as stream `snapshot.meta.config.name`, which must not exist; returns its state. */
export async function restoreStream(
  nc: NatsConnection,
  snapshot: StreamSnapshot,
  timeoutMs = 60_000,
): Promise<{ messages: number; last_seq: number }> {
  const name = snapshot.meta.config.name;
  const what = `restore of ${name}`;
  const { deliver_subject } = apiAnswer<{ deliver_subject: string }>(
    await nc.request(`$JS.API.STREAM.RESTORE.${name}`, encode(snapshot.meta), { timeout: timeoutMs }),
    what,
  );
  for (let at = 0; at < snapshot.data.length; at += CHUNK) {
    const r = await nc.request(deliver_subject, snapshot.data.subarray(at, at + CHUNK), { timeout: timeoutMs });
    if (r.data.length) apiAnswer(r, what);
  }
  const last = apiAnswer<{ state: { messages: number; last_seq: number } }>(
    await nc.request(deliver_subject, new Uint8Array(0), { timeout: Math.max(timeoutMs, 300_000) }),
    what,
  );
  return last.state;
}
