import { readFileSync } from "node:fs";
import { createServer } from "node:net";

/**
 * The kernel's range for ephemeral ports (outgoing connections, and listeners on port 0).
 * A port chosen below it cannot be taken in the meantime by an outgoing connection of the
 * tests' own clients, which a port that the kernel handed out for port 0 can.
 */
function ephemeralRange(): [number, number] {
  try {
    const [lo, hi] = readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/).map(Number);
    if (lo && hi) return [lo, hi];
  } catch {
    // Not Linux.
  }
  return [32768, 60999];
}

function tryListen(port: number): Promise<number | undefined> {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.unref();
    srv.once("error", () => resolve(undefined));
    srv.listen({ port, host: "127.0.0.1", exclusive: true }, () => {
      const addr = srv.address();
      const bound = typeof addr === "object" && addr ? addr.port : undefined;
      srv.close(() => resolve(bound));
    });
  });
}

/**
 * The ports at or above 10000 that fetch refuses to connect to (the Fetch standard's "bad ports"):
 * a server a test reaches with fetch must not listen on one.
 */
const FETCH_BAD_PORTS = new Set([10080]);

/**
 * A TCP port on 127.0.0.1 that was free a moment ago, and one fetch connects to. Chosen at random below the ephemeral
 * range when there is room (10000 up to it), else from the kernel. Prefer servers that listen
 * on port 0 and report their port; where that is impossible, retry a start that finds the port
 * taken (EADDRINUSE).
 */
export async function freePort(): Promise<number> {
  const [lo] = ephemeralRange();
  const base = 10_000;
  if (lo - base >= 1000) {
    for (let i = 0; i < 50; i++) {
      const candidate = base + Math.floor(Math.random() * (lo - base));
      if (FETCH_BAD_PORTS.has(candidate)) continue;
      const port = await tryListen(candidate);
      if (port) return port;
    }
  }
  const port = await tryListen(0);
  if (!port) throw new Error("no free port on 127.0.0.1");
  return port;
}

export { waitFor, consistently } from "./wait.ts";
