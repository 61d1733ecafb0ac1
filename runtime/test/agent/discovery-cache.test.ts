// The discovery client's cache (runtime/src/discovery/client.ts) against a real HTTPS server that
// counts requests: ETag revalidation with 304, Cache-Control max-age, no-store and no-cache.
import { createServer, type Server } from "node:https";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { localhostTls } from "../../../e2e/support/tls.ts";
import { DiscoveryClient } from "../../src/discovery/client.ts";
import { HttpClient } from "../../src/net/http-client.ts";
import type { Tls } from "../support/agent-harness.ts";

interface Served {
  doc: unknown;
  etag?: string;
  cacheControl?: string;
}
interface Seen {
  path: string;
  ifNoneMatch: string | undefined;
  status: number;
}

let tls: Tls;
let server: Server;
let base: string;
let http: HttpClient;
let served: Served;
let seen: Seen[];
let clock: number;
let client: DiscoveryClient;

const identityDoc = (display: string) => ({
  ifp: 5,
  agent_id: "peer-agent",
  display,
  keys: [{ key_id: "key-1", type: "ed25519", public_key: "AAAA", status: "active" }],
});

beforeAll(async () => {
  tls = await localhostTls();
  server = createServer({ cert: tls.cert, key: tls.key }, (req, res) => {
    const ifNoneMatch = req.headers["if-none-match"];
    const headers: Record<string, string> = { "content-type": "application/json" };
    if (served.etag) headers.etag = served.etag;
    if (served.cacheControl) headers["cache-control"] = served.cacheControl;
    const status =
      req.url !== "/.well-known/agent/identity" ? 404 : served.etag && ifNoneMatch === served.etag ? 304 : 200;
    seen.push({ path: req.url ?? "", ifNoneMatch, status });
    res.writeHead(status, headers).end(status === 200 ? JSON.stringify(served.doc) : undefined);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const addr = server.address();
  base = `https://localhost:${typeof addr === "object" && addr ? addr.port : 0}`;
  http = new HttpClient({ extraCa: tls.ca });
});
afterAll(async () => {
  await http?.close();
  server?.closeAllConnections();
  await new Promise<void>((r) => (server ? server.close(() => r()) : r()));
});
beforeEach(() => {
  seen = [];
  clock = Date.now();
  client = new DiscoveryClient(http, () => clock);
});

describe("discovery cache", () => {
  it("makes no request within max-age, then revalidates with If-None-Match and reuses the document on 304", async () => {
    served = { doc: identityDoc("v1"), etag: '"v1"', cacheControl: "public, max-age=300, must-revalidate" };
    const first = await client.identity(base);
    expect(first).toMatchObject({ agent_id: "peer-agent", display: "v1" });
    clock += 299_000;
    expect(await client.identity(base)).toEqual(first);
    expect(seen).toEqual([{ path: "/.well-known/agent/identity", ifNoneMatch: undefined, status: 200 }]);

    clock += 2_000; // stale now
    expect(await client.identity(base)).toEqual(first);
    expect(seen.slice(1)).toEqual([{ path: "/.well-known/agent/identity", ifNoneMatch: '"v1"', status: 304 }]);
    // The 304 renewed the freshness: no request for another max-age.
    clock += 299_000;
    await client.identity(base);
    expect(seen).toHaveLength(2);
  });

  it("takes the new document when the ETag changed", async () => {
    served = { doc: identityDoc("v1"), etag: '"v1"', cacheControl: "max-age=60" };
    await client.identity(base);
    served = { doc: identityDoc("v2"), etag: '"v2"', cacheControl: "max-age=60" };
    expect(await client.identity(base)).toMatchObject({ display: "v1" }); // still fresh
    clock += 61_000;
    expect(await client.identity(base)).toMatchObject({ display: "v2" });
    expect(seen.map((s) => [s.ifNoneMatch, s.status])).toEqual([
      [undefined, 200],
      ['"v1"', 200],
    ]);
  });

  it("refetches a no-store document on every call and keeps nothing to revalidate with", async () => {
    served = { doc: identityDoc("v1"), etag: '"v1"', cacheControl: "no-store" };
    for (let i = 0; i < 3; i++) expect(await client.identity(base)).toMatchObject({ display: "v1" });
    expect(seen).toEqual(
      Array.from({ length: 3 }, () => ({ path: "/.well-known/agent/identity", ifNoneMatch: undefined, status: 200 })),
    );
  });

  it("revalidates a no-cache document on every call, reusing it on 304", async () => {
    served = { doc: identityDoc("v1"), etag: '"v1"', cacheControl: "no-cache" };
    for (let i = 0; i < 3; i++) expect(await client.identity(base)).toMatchObject({ display: "v1" });
    expect(seen.map((s) => [s.ifNoneMatch, s.status])).toEqual([
      [undefined, 200],
      ['"v1"', 304],
      ['"v1"', 304],
    ]);
  });

  it("keeps a document without Cache-Control for 60 s", async () => {
    served = { doc: identityDoc("v1") };
    await client.identity(base);
    clock += 59_000;
    await client.identity(base);
    expect(seen).toHaveLength(1);
    clock += 2_000;
    await client.identity(base);
    expect(seen).toHaveLength(2);
  });

  it("forgets a peer's documents on invalidate()", async () => {
    served = { doc: identityDoc("v1"), etag: '"v1"', cacheControl: "max-age=300" };
    await client.identity(base);
    client.invalidate(base);
    await client.identity(base);
    expect(seen.map((s) => [s.ifNoneMatch, s.status])).toEqual([
      [undefined, 200],
      [undefined, 200],
    ]);
  });

  it("expires an entry kept stale for longer than keepStaleMs: no If-None-Match then, and the entry is swept", async () => {
    served = { doc: identityDoc("v1"), etag: '"v1"', cacheControl: "max-age=60" };
    await client.identity(base);
    clock += 60_000 + 3600_000 - 1; // stale, still kept to revalidate
    await client.identity(base);
    expect(seen[1]).toMatchObject({ ifNoneMatch: '"v1"', status: 304 });
    clock += 60_000 + 3600_000; // stale for over an hour
    await client.identity(base);
    expect(seen[2]).toMatchObject({ ifNoneMatch: undefined, status: 200 });
    // A document stored later sweeps the expired ones ahead of it.
    const other = new DiscoveryClient(http, () => clock, { keepStaleMs: 1_000 });
    await other.identity(base);
    clock += 62_000;
    expect(other.size).toBe(1);
    await other.identity(base.replace("localhost", "127.0.0.1")); // another URL: a second entry
    expect(other.size).toBe(1);
  });

  it("caps a huge max-age at maxFreshMs (24 h)", async () => {
    served = { doc: identityDoc("v1"), etag: '"v1"', cacheControl: "max-age=99999999999999999999" };
    await client.identity(base);
    clock += 24 * 3600_000 - 1;
    await client.identity(base);
    expect(seen).toHaveLength(1);
    clock += 2;
    await client.identity(base);
    expect(seen[1]).toMatchObject({ ifNoneMatch: '"v1"', status: 304 });
  });
});
