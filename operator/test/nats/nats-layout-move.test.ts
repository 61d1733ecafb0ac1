// Moving an install from the per-agent NATS layout to the isolated one (operator/src/concerns/nats/layout-move.ts)
// against a real API server and a real nats-server in operator mode, the operator started with
// the layout flags the chart renders for `runtime.natsLayout` (`--set runtime.natsLayout=per-agent`,
// the earlier default, then the chart's default, isolated), and bob's runtime run exactly as the operator rendered
// it each time. On the per-agent layout bob has messages handed on, messages waiting in his inbox
// (his application answers 503) and messages waiting in his outbox (his peer zed is down). The
// operator switched to the isolated layout scales him to zero, moves everything into his
// namespace's data account once his runtime has stopped, and renders him for the isolated layout;
// a sender keeps sending throughout, retrying what is not answered 202. Every message reaches
// his application exactly once by id (those handed on before never again), his outbox delivers
// each of its messages to zed once zed is back, his per-agent streams are gone from the store,
// a repeat of a message handed on before the move is still a repeat, and the copy waiting in
// his mailbox at the namespace's Relay is where it was (a Relay keeps its own account on both
// layouts). His credential is refused once the move begins, and his runtime, still running,
// answers 503 to what it cannot store. Switched back to
// per-agent (a rollback), the operator refuses him with a condition of its own and renders
// nothing, leaving his runtime on the isolated layout running.
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseAllDocuments } from "yaml";
import { httpsRequest } from "../../../e2e/support/https.ts";
import { onLoopback, runDeploymentLocally, type LocalRuntime } from "../../../e2e/support/materialize.ts";
import type { NatsServer } from "../../../e2e/support/nats.ts";
import { freePort } from "../../../e2e/support/ports.ts";
import { releaseDir, tempDir } from "../../../e2e/support/process.ts";
import { localhostTls } from "../../../e2e/support/tls.ts";
import { toolPath } from "../../../e2e/tools/tools.ts";
import { startHandler } from "../../../runtime/test/support/agent-harness.ts";
import { identity, peerOf, signed } from "../../../runtime/test/support/fixtures.ts";
import { record, scriptedPeer, send } from "../../../runtime/test/support/outbox-harness.ts";
import { parseFlags } from "../../src/commands/main.ts";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { connect, credsAuthenticator, type NatsConnection } from "@nats-io/transport-node";
import { relayNames } from "../../../runtime/src/contract/relay-stream.ts";
import { layoutOfAccountJwt } from "../../src/concerns/nats/layout-move.ts";
import { CredentialIssuer, generateKeys } from "../../src/concerns/nats/credential-issuer.ts";
import {
  accountSecretOf,
  kubectlOrError,
  natsAccountOperator,
  operatorModeNats,
  runtimeConnection,
  perTest,
  until as waitUntil,
  untilRuntimeReady,
} from "../support/helpers.ts";

const until = <T>(
  what: string,
  probe: () => Promise<T | undefined | false> | T | undefined | false,
  timeoutMs = 120_000,
) => waitUntil(what, probe, timeoutMs);
const NS = "move-a";
const keys = generateKeys();
const issuer = CredentialIssuer.fromKeys(keys);
const alice = identity("alice-agent");
const zedId = identity("zed-agent");
let nats: NatsServer;
const open: NatsConnection[] = [];
const dir = tempDir("ifp-layout-move-");
let bob: LocalRuntime | undefined;
let handlerUp = true;
let handler: Awaited<ReturnType<typeof startHandler>>;
let zedUp = false;
let zed: Awaited<ReturnType<typeof scriptedPeer>>;
let tls: Awaited<ReturnType<typeof localhostTls>>;
let port: number;
let metricsPort: number;

/** The layout flags of the operator as the chart renders them with these `--set`s, parsed as the operator parses them. */
function chartLayout(...set: string[]) {
  const r = spawnSync(toolPath("helm"), ["template", "ifp", "charts/ifp-operator", "-n", "ifp-system", ...set], {
    encoding: "utf8",
    timeout: 60_000,
  });
  if (r.status !== 0) throw new Error(`helm template failed: ${r.stdout}${r.stderr}`);
  const operator = parseAllDocuments(r.stdout)
    .map((d) => d.toJSON())
    .find((d) => d?.kind === "Deployment" && d.metadata.name === "ifp-ifp-operator");
  const { options } = parseFlags(operator.spec.template.spec.containers[0].args, {});
  return { natsLayout: options.natsLayout, natsTenantLimits: options.natsTenantLimits };
}

const operator = natsAccountOperator({
  namespace: NS,
  keys: accountSecretOf(keys, issuer),
  alongside: {
    start: async () => {
      nats = await operatorModeNats(keys, issuer, dir);
    },
    stop: async () => nats?.close(),
  },
  natsUrl: () => nats.url,
  settings: { allowedDnsNames: ["localhost"], clusterNetworks: ["127.0.0.0/8"] },
  manager: { ...chartLayout("--set", "runtime.natsLayout=per-agent"), summaryIntervalMs: 500 },
});
const cp = () => operator.cp();
const get = (kind: string, name: string) => operator.get(kind, name);
const ready = () => get("agent", "bob")?.status?.conditions?.find((c: { type: string }) => c.type === "Ready");
const account = () => issuer.accountOf(get("agent", "bob").metadata.uid);

beforeAll(async () => {
  tls = await localhostTls();
  handler = await startHandler(() => (handlerUp ? 200 : 503));
  zed = await scriptedPeer(tls, () => ({ status: zedUp ? 202 : 503 }));
  port = await freePort();
  metricsPort = await freePort();
}, 120_000);
afterAll(async () => {
  await bob?.stop();
  for (const nc of open) await nc.close().catch(() => {});
  await handler?.close();
  await zed?.close();
  releaseDir(dir);
});
perTest(() =>
  [
    "operator log:",
    ...operator.log.lines().slice(-80),
    kubectlOrError(cp(), ["-n", NS, "get", "agents,deployments", "-o", "wide"]),
    `bob (runtime) log:`,
    bob?.output().slice(-6000) ?? "",
  ].join("\n"),
);

/** Bob's runtime as the operator rendered it, on loopback, trusting zed's certificate besides the install's CA. */
async function runBob(): Promise<{ url: string; localApiUrl: string; ca: string }> {
  rmSync(join(dir, "bob"), { recursive: true, force: true });
  const loopback = onLoopback(port, metricsPort);
  bob = runDeploymentLocally(cp(), NS, "bob", dir, {
    ...loopback,
    rewriteArg: (a) => (a.startsWith("--nats=") ? `--nats=${nats.url}` : loopback.rewriteArg(a)),
    rewriteFile: (path, text) => (path.endsWith("ca.crt") ? `${text.trimEnd()}\n${tls.ca}` : text),
  });
  const { localApiUrl } = await bob.listening(120_000);
  const ca = get("configmap", "bob-trust").data["ca.crt"] as string;
  const url = `https://localhost:${port}`;
  await untilRuntimeReady("bob", url, ca);
  return { url, localApiUrl: localApiUrl!, ca };
}

const hubNames = relayNames({ metadata: { namespace: NS, name: "hub" }, spec: { url: "https://localhost" } } as never);
/** The Relay's account as a user allowed everything there sees it, and its JWT on the resolver. */
async function relayView() {
  const relayAccount = issuer.accountOf(get("relay", "hub").metadata.uid);
  const creds = await issuer.issue("test", { pub: [">"], sub: [">"] }, Date.now(), undefined, relayAccount);
  const nc = await runtimeConnection(nats.url, creds, "test", open);
  return {
    nc,
    jsm: await jetstreamManager(nc, { checkAPI: false }),
    claims: async () => {
      const system = await connect({
        servers: nats.url,
        authenticator: credsAuthenticator(await issuer.systemCreds()),
      });
      open.push(system);
      return (await system.request(`$SYS.REQ.ACCOUNT.${relayAccount}.CLAIMS.LOOKUP`, "", { timeout: 5_000 })).string();
    },
  };
}

/** POST a signed message to bob's inbox: its status (0: nothing answered). */
async function post(url: string, ca: string, m: object): Promise<{ status: number }> {
  try {
    const res = await httpsRequest(`${url}/.well-known/agent/inbox`, {
      method: "POST",
      headers: { "content-type": "application/json; charset=utf-8", accept: "application/json" },
      body: JSON.stringify(m),
      ca,
    });
    return { status: res.status };
  } catch {
    return { status: 0 };
  }
}

const handedOn = (id: string) => handler.received.filter((h) => h.body.headers.message_id === id).length;
const zedGot = (id: string) =>
  zed.requests.filter((r) => r.status === 202 && r.body?.headers?.message_id === id).length;

const inbound: { before: string[]; waiting: string[]; during: string[] } = { before: [], waiting: [], during: [] };
const outbound: string[] = [];
let first: { m: ReturnType<typeof signed> } | undefined;

describe("moving an install from the per-agent NATS layout to the isolated one", () => {
  it("has messages handed on, waiting in bob's inbox and waiting in his outbox on the per-agent layout", async () => {
    const apply = (kind: string, name: string, spec: string) =>
      cp().kubectl(
        ["apply", "-f", "-"],
        `apiVersion: ifp.dev/v1alpha1\nkind: ${kind}\nmetadata: {name: ${name}, namespace: ${NS}}\nspec:\n${spec}`,
      );
    apply(
      "Agent",
      "bob",
      `  agentId: bob-agent
  capabilities:
    - {name: chat.message, description: Messages}
  tls: {dnsNames: [localhost]}
  handler: {url: "${handler.url}"}
  peers:
    - ${JSON.stringify(peerOf(alice))}
    - ${JSON.stringify({ ...peerOf(zedId), url: zed.url })}
`,
    );
    // A Relay of the namespace, with a copy waiting in bob's mailbox there.
    apply(
      "Relay",
      "hub",
      `  url: https://localhost
  retention: {maxAge: 72h}
`,
    );
    const hub = await until("the Relay's stream", () =>
      relayView().then(
        async (h) => ((await h.jsm.streams.info(hubNames.stream).catch(() => undefined)) ? h : undefined),
        () => undefined,
      ),
    );
    await jetstream(hub.nc).publish(hubNames.copy("bob-agent", "waiting-at-the-relay"), "a copy for bob");
    const deployment = await until("bob's Deployment", () => get("deployment", "bob"));
    expect(deployment.spec.template.spec.containers[0].args).not.toContain("--nats-layout=isolated");
    const { url, localApiUrl, ca } = await runBob();
    for (let i = 0; i < 3; i++) {
      const m = signed(alice, "bob-agent", {}, `handed on before the move ${i}`);
      first ??= { m };
      expect((await post(url, ca, m)).status).toBe(202);
      inbound.before.push(m.headers.message_id);
    }
    await until("bob's application took them", () => inbound.before.every((id) => handedOn(id) === 1));
    handlerUp = false;
    for (let i = 0; i < 5; i++) {
      const m = signed(alice, "bob-agent", {}, `waiting in the inbox ${i}`);
      expect((await post(url, ca, m)).status).toBe(202);
      inbound.waiting.push(m.headers.message_id);
    }
    for (let i = 0; i < 3; i++) {
      const sent = await send(localApiUrl, { to: "zed-agent", text: `waiting in the outbox ${i}` });
      expect(sent.status).toBe(202);
      outbound.push(sent.body.message_id);
    }
    // Each tried once and refused: waiting with its attempt state.
    for (const id of outbound)
      await until(`${id} tried`, async () => ((await record(localApiUrl, id))?.recipients?.[0]?.attempts ?? 0) >= 1);
    expect(inbound.waiting.every((id) => handedOn(id) === 0)).toBe(true);
  }, 300_000);

  it("moves them on the switch to the isolated layout: each handed on once by id, the outbox delivered once its peer is back, the per-agent streams gone", async () => {
    const bobAccount = account();
    const store = join(dir, "store", "jetstream", bobAccount, "streams");
    expect(readdirSync(store).sort()).toEqual(
      expect.arrayContaining(["IFP_INBOX_move-a_2Fbob", "IFP_OUTBOX_move-a_2Fbob"]),
    );
    const bobCreds = operator.credsOf("bob")!;
    // A sender that keeps sending through the switch, each message again until it is answered 202.
    let sending = true;
    const ca = get("configmap", "bob-trust").data["ca.crt"] as string;
    const url = `https://localhost:${port}`;
    const answers: number[] = [];
    const traffic = (async () => {
      for (let i = 0; sending; i++) {
        const m = signed(alice, "bob-agent", {}, `sent during the move ${i}`);
        for (;;) {
          const r = await post(url, ca, m);
          answers.push(r.status);
          if (r.status === 202) break;
          // Anything else is the documented "try again": a 503, or no runtime listening. The
          // sender's own pace between tries (200 ms) is the clock here, not a wait for the move.
          expect([0, 503]).toContain(r.status);
          await new Promise((res) => setTimeout(res, 200));
        }
        inbound.during.push(m.headers.message_id);
      }
    })();

    await operator.restart(chartLayout());
    // The operator holds bob at zero replicas; the test stops his runtime as the kubelet would.
    await until("bob scaled to zero", () => get("deployment", "bob")?.spec.replicas === 0);
    await until("bob told he is moving", () => ready()?.reason === "MovingNatsLayout");
    // Fenced: his credential connects no more, so his runtime, still running, takes nothing in
    // (503: the sender tries again) and nothing it kept could be written after the copy.
    await expect(
      connect({
        servers: nats.url,
        authenticator: credsAuthenticator(new TextEncoder().encode(bobCreds)),
        reconnect: false,
      }),
    ).rejects.toThrow(/authorization/i);
    const fenced = signed(alice, "bob-agent", {}, "sent to the fenced runtime");
    await until("the fenced runtime answers 503", async () => (await post(url, ca, fenced)).status === 503);
    await bob!.stop();
    bob = undefined;
    const deployment = await until("bob rendered for the isolated layout", () => {
      const d = get("deployment", "bob");
      return d?.spec.replicas === 1 && d.spec.template.spec.containers[0].args.includes("--nats-layout=isolated")
        ? d
        : undefined;
    });
    expect(deployment).toBeTruthy();
    const moved = cp().json<any>(["-n", NS, "get", "events", "--field-selector", "reason=MovedNatsLayout"]).items;
    // The waiting messages and those the sender got a 202 for from the per-agent runtime until it stopped.
    const counts =
      /(\d+) inbox messages not yet handed on and 3 handed on, 0 inbound dead letters, 3 outbox entries/.exec(
        moved.map((e: { message: string }) => e.message).join("\n"),
      );
    expect(Number(counts?.[1])).toBeGreaterThanOrEqual(inbound.waiting.length);
    const { localApiUrl } = await runBob();
    // Sent again, as its sender would: accepted into the new place.
    expect((await post(url, ca, fenced)).status).toBe(202);
    inbound.during.push(fenced.headers.message_id);
    await until("a message sent after the move", () => inbound.during.length >= 4);
    sending = false;
    await traffic;

    handlerUp = true;
    zedUp = true;
    const all = [...inbound.before, ...inbound.waiting, ...inbound.during];
    await until("every inbound message handed on", () => all.every((id) => handedOn(id) >= 1), 180_000);
    for (const id of outbound) await until(`${id} delivered to zed`, () => zedGot(id) >= 1, 180_000);
    // Settled: nothing more arrives.
    await until("bob's consumers idle", async () => {
      const s = get("agent", "bob")?.status?.summary;
      return s && s.backlog === 0;
    });
    expect(Object.fromEntries(all.map((id) => [id, handedOn(id)]))).toEqual(
      Object.fromEntries(all.map((id) => [id, 1])),
    );
    expect(Object.fromEntries(outbound.map((id) => [id, zedGot(id)]))).toEqual(
      Object.fromEntries(outbound.map((id) => [id, 1])),
    );
    // Its delivery records came along: each delivered, after the attempts made on the per-agent layout.
    for (const id of outbound) {
      const r = await record(localApiUrl, id);
      expect(r.state).toBe("delivered");
      expect(r.recipients[0].attempts).toBeGreaterThanOrEqual(2);
    }
    // A repeat of a message handed on before the move is a repeat: not handed on again, while a new one behind it is.
    expect((await post(url, ca, first!.m)).status).toBe(202);
    const behind = signed(alice, "bob-agent", {}, "behind the repeat");
    expect((await post(url, ca, behind)).status).toBe(202);
    await until("the message behind the repeat handed on", () => handedOn(behind.headers.message_id) === 1);
    expect(handedOn(inbound.before[0]!)).toBe(1);
    // The per-agent streams are gone from the store.
    const left = existsSync(store) ? readdirSync(store).filter((s) => !s.startsWith(".")) : [];
    expect(left).toEqual([]);
    expect(answers.filter((s) => s !== 202 && s !== 0 && s !== 503)).toEqual([]);
    // The Relay keeps its own account on both layouts: its mailboxes stay where they were.
    const hub = await relayView();
    const kept = await hub.jsm.streams.getMessage(hubNames.stream, {
      last_by_subj: hubNames.copy("bob-agent", "waiting-at-the-relay"),
    });
    expect(kept?.string()).toBe("a copy for bob");
    expect(layoutOfAccountJwt(await hub.claims())).toBe("per-agent");
  }, 420_000);

  it("is refused on a rollback to the per-agent layout, with a condition of its own, and rendered nothing", async () => {
    const args = get("deployment", "bob").spec.template.spec.containers[0].args;
    await operator.restart(chartLayout("--set", "runtime.natsLayout=per-agent"));
    const cond = await until("bob refused", () => (ready()?.reason === "OnIsolatedNatsLayout" ? ready() : undefined));
    expect(cond.status).toBe("False");
    expect(cond.message).toMatch(/--nats-layout isolated again/);
    // Nothing rendered or pushed for him: his runtime runs on as the isolated install left it.
    expect(get("deployment", "bob").spec.template.spec.containers[0].args).toEqual(args);
    const ca = get("configmap", "bob-trust").data["ca.crt"] as string;
    const m = signed(alice, "bob-agent", {}, "after the rollback");
    expect((await post(`https://localhost:${port}`, ca, m)).status).toBe(202);
    await until("handed on after the rollback", () => handedOn(m.headers.message_id) === 1);
    // Upgraded again, he is rendered for the isolated layout again with nothing to move (no
    // controller runs his pods here: his rollout is what is left pending).
    await operator.restart(chartLayout());
    await until("bob rendered again", () => ready()?.reason === "RolloutPending");
    const moves = cp().json<any>(["-n", NS, "get", "events", "--field-selector", "reason=MovedNatsLayout"]).items;
    expect(moves.reduce((n: number, e: { count?: number }) => n + (e.count ?? 1), 0)).toBe(1);
  }, 300_000);
});
