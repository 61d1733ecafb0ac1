// A runtime killed (SIGKILL, a real child process) after it answered 202 to messages it had not
// handed on yet — some of them handed to an application that had not answered, the others still
// waiting in the inbox — hands every one of them to the application after its next start: 202
// means stored, whatever becomes of the process that said it. On the per-agent layout here, on
// the isolated one in killed-runtime.isolated.test.ts.
import { createServer, type ServerResponse } from "node:http";
import { describe, expect, it } from "vitest";
import { httpsRequest } from "../../../e2e/support/https.ts";
import { spawnProcess } from "../../../e2e/support/process.ts";
import { waitFor } from "../../../e2e/support/wait.ts";
import { identity, peerOf, signed, tempDir, writeAgentManifest, writeKey } from "../support/fixtures.ts";
import { type LayoutNats, withLayoutNatsAndTls } from "../support/a2a-layouts.ts";
import { agentProcessArgs, runAgent, startHandler, type Tls } from "../support/agent-harness.ts";
import { onFreePorts } from "../support/free-ports.ts";
import { untilReady } from "../support/runtime-process.ts";

let nats: LayoutNats;
let tls: Tls;
withLayoutNatsAndTls((n, t) => ([nats, tls] = [n, t]));

const BIN = new URL("../../bin/ifp-runtime.ts", import.meta.url).pathname;

/** An application that takes hand-offs and never answers them. */
async function silentApplication() {
  const held: ServerResponse[] = [];
  const ids: string[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      ids.push(JSON.parse(Buffer.concat(chunks).toString()).headers.message_id);
      held.push(res);
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const addr = server.address();
  return {
    url: `http://127.0.0.1:${typeof addr === "object" && addr ? addr.port : 0}/messages`,
    ids,
    close() {
      server.closeAllConnections();
      return new Promise<void>((r) => server.close(() => r()));
    },
  };
}

describe("an agent runtime killed with messages it accepted and had not handed on", () => {
  // On the isolated layout the operator's consumer is made for a 3 s hand-off timeout.
  it("hands each of them to the application after its next start", async () => {
    const self = identity("killed-agent");
    const pete = identity("pete-agent");
    const dir = tempDir();
    const key = writeKey(dir, self);
    const silent = await silentApplication();
    // A short hand-off timeout: the acknowledgement wait of a hand-off in flight is 30 s more.
    const spec = (url: string) => ({ peers: [peerOf(pete)], handler: { url, timeout: "3s" } });
    const layoutArgs = await nats.runtimeArgs(self.agentId);
    const child = await onFreePorts(["https"], async ({ https }) => {
      const c = spawnProcess(
        "ifp-runtime agent (to be killed)",
        process.execPath,
        [
          BIN,
          ...agentProcessArgs({
            manifest: writeAgentManifest(dir, { agentId: self.agentId, ...spec(silent.url) }),
            key,
            port: https,
            tls,
            natsUrl: nats.url,
          }),
          ...layoutArgs,
        ],
        { env: { ...process.env, IFP_LOG_LEVEL: "warn" } },
      );
      await untilReady(c, `https://localhost:${https}`, tls.ca);
      return { c, base: `https://localhost:${https}` };
    });
    const ids: string[] = [];
    try {
      for (let i = 0; i < 12; i++) {
        const m = signed(pete, self.agentId);
        const res = await httpsRequest(`${child.base}/.well-known/agent/inbox`, {
          method: "POST",
          ca: tls.ca,
          headers: { "content-type": "application/json" },
          body: JSON.stringify(m),
        });
        expect(res.status, res.text).toBe(202);
        ids.push(m.headers.message_id);
      }
      // Killed while hand-offs are under way: the application has some and answered none.
      await waitFor("hand-offs under way", () => silent.ids.length > 0, 20_000, 20);
    } finally {
      await child.c.stop({ signal: "SIGKILL" });
      await silent.close();
    }
    expect(silent.ids.length).toBeLessThan(ids.length);

    const app = await startHandler();
    const again = await runAgent({ self, spec: spec(app.url), tls, dir, ...(await nats.runAgentNats(self.agentId)) });
    try {
      await waitFor(
        "every accepted message at the application",
        () => ids.every((id) => app.received.some((r) => r.body.headers.message_id === id)),
        // The hand-offs of the killed runtime come again once their acknowledgement wait (33 s) is over.
        60_000,
        100,
      );
      const got = app.received.map((r) => r.body.headers.message_id);
      expect(got.filter((id) => !ids.includes(id))).toEqual([]);
      await waitFor("the hand-off consumer to have nothing pending", () => nats.handOffsSettled(self.agentId), 10_000);
    } finally {
      await again.close();
      await app.close();
    }
  }, 120_000);
});
