// Ports chosen for a runtime the tests start on ports named in its flags or manifest: free a moment
// before it listens, and chosen again when another test's server took one meanwhile; a port named
// long before its server starts is held until then.
import { createServer } from "node:net";
import { freePort } from "../../../e2e/support/ports.ts";

/** How many times the ports are chosen before a start that keeps finding one taken fails. */
export const PORT_ATTEMPTS = 3;

/**
 * `start` on ports free a moment before, one for each of `names`; when it fails because one was
 * taken meanwhile (EADDRINUSE in what it failed with: a runtime's log says it), on ports chosen
 * again, at most PORT_ATTEMPTS times. `start` is given every port it needs at once, so that a
 * manifest naming a port (its baseUrl) is written again with the new ones. Any other failure
 * fails at once.
 */
export async function onFreePorts<K extends string, T>(
  names: readonly K[],
  start: (ports: Record<K, number>) => Promise<T>,
): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    const ports = {} as Record<K, number>;
    for (const name of names) ports[name] = await freePort();
    try {
      return await start(ports);
    } catch (err) {
      if (attempt >= PORT_ATTEMPTS || !portTaken(err)) throw err;
    }
  }
}

/** Whether a start failed because a port it was to listen on was taken. */
function portTaken(err: unknown): boolean {
  return /EADDRINUSE/.test(err instanceof Error ? `${err.message}\n${err.stack ?? ""}` : String(err));
}

/**
 * What `starts` start (runtimes that name each other's ports), begun together. When one fails, the
 * others that started are stopped with `stop` before its failure is thrown: under onFreePorts, a
 * port taken meanwhile then starts them all again, on ports chosen again.
 */
export async function startedTogether<T extends readonly Promise<unknown>[]>(
  starts: T,
  stop: (started: Awaited<T[number]>) => Promise<unknown>,
): Promise<{ -readonly [K in keyof T]: Awaited<T[K]> }> {
  const settled = await Promise.allSettled(starts);
  const failed = settled.find((s) => s.status === "rejected");
  if (!failed) return settled.map((s) => (s as PromiseFulfilledResult<unknown>).value) as never;
  await Promise.all(settled.map((s) => (s.status === "fulfilled" ? stop(s.value as Awaited<T[number]>) : undefined)));
  throw failed.reason;
}

/** A port held for a server that starts later than something naming it (a spec, a flag). */
export interface HeldPort {
  readonly port: number;
  /** Frees the port, a moment before its server listens on it (again: nothing). */
  release(): Promise<void>;
}

/**
 * Holds `port` of loopback for a server that is down until the test starts it, so that no other
 * test's server takes it meanwhile: a listener that hangs up on every connection, as unreachable
 * as that server while it is down. Fails with EADDRINUSE when the port is taken: hold it under
 * onFreePorts.
 */
export async function heldPort(port: number): Promise<HeldPort> {
  const server = createServer((socket) => socket.destroy());
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen({ port, host: "127.0.0.1", exclusive: true }, resolve);
  });
  let released: Promise<void> | undefined;
  return {
    port,
    release: () => {
      released ??= new Promise<void>((resolve) => server.close(() => resolve()));
      return released;
    },
  };
}
