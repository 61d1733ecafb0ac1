// Outbound answers are read up to a cap, whatever the peer sends: a real TLS server on loopback
// answers endless, huge or gzip-bombed bodies.
import { createServer, type Server } from "node:https";
import { gzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { localhostTls } from "../../../e2e/support/tls.ts";
import { waitFor } from "../../../e2e/support/wait.ts";
import { DiscoveryClient } from "../../src/discovery/client.ts";
import { DEFAULT_MAX_RESPONSE_BYTES, HttpClient, ResponseTooLarge } from "../../src/net/http-client.ts";

let server: Server;
let base: string;
let http: HttpClient;
const seen: { path: string; acceptEncoding: string | undefined }[] = [];
let closedEarly = 0;
// 64 MiB of zeros compress to about 64 KiB.
const bomb = gzipSync(Buffer.alloc(64 * 1024 * 1024));

beforeAll(async () => {
  const tls = await localhostTls();
  server = createServer({ cert: tls.cert, key: tls.key }, (req, res) => {
    seen.push({ path: req.url ?? "", acceptEncoding: req.headers["accept-encoding"] });
    if (req.url?.includes("gzip")) {
      res.writeHead(200, {
        "content-type": "application/json",
        "content-encoding": "gzip",
        "content-length": bomb.length,
      });
      res.end(bomb);
      return;
    }
    // An endless body without a length: only the reader's cap ends it.
    res.writeHead(200, { "content-type": "application/json" });
    const chunk = Buffer.alloc(64 * 1024, 0x20);
    let sent = 0;
    const pump = () => {
      while (sent < 512 * 1024 * 1024) {
        sent += chunk.length;
        if (!res.write(chunk)) return void res.once("drain", pump);
      }
      res.end();
    };
    res.on("close", () => {
      if (!res.writableFinished) closedEarly++;
    });
    pump();
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  base = `https://localhost:${(server.address() as { port: number }).port}`;
  http = new HttpClient({ extraCa: tls.ca });
});

afterAll(async () => {
  await http.close();
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
});

describe("outbound answers have a bounded size", () => {
  it("cuts an endless body at the default cap, asking for no compression", async () => {
    await expect(http.request(`${base}/endless`)).rejects.toBeInstanceOf(ResponseTooLarge);
    expect(seen.at(-1)).toEqual({ path: "/endless", acceptEncoding: "identity" });
    // The connection is cut, not read to its end.
    await waitFor("the server to see its answer cut off", () => closedEarly >= 1, 5_000, 20);
    expect(DEFAULT_MAX_RESPONSE_BYTES).toBe(1024 * 1024);
  });

  it("counts a compressed answer sent anyway after decoding (a gzip bomb)", async () => {
    const before = process.memoryUsage().rss;
    await expect(http.request(`${base}/gzip`, { method: "POST", body: "{}" })).rejects.toBeInstanceOf(ResponseTooLarge);
    expect(process.memoryUsage().rss - before).toBeLessThan(48 * 1024 * 1024);
  });

  it("a discovery fetch of a huge document fails cleanly", async () => {
    const discovery = new DiscoveryClient(http);
    await expect(discovery.capabilities(`${base}/endless-doc`)).rejects.toThrow(/exceeds|allowed/);
    await expect(discovery.capabilities(`${base}/gzip-doc`)).rejects.toThrow(/exceeds|allowed/);
  });

  it("a smaller cap set by the call wins", async () => {
    await expect(http.request(`${base}/endless`, { maxBytes: 1000 })).rejects.toThrow("exceeds the 1000 bytes");
  });
});
