// Each runtime's NATS credential: the permissions computed per resource (a table of subjects,
// matched as nats-server matches them), when a credential is renewed, bad keys refused; and on a
// real API server the bootstrap Secret, the `<name>-nats` Secrets of an Agent and a Relay, their
// mount in the Deployment, and the renewal of a credential that is due.
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { V1Secret } from "@kubernetes/client-node";
import { pino } from "pino";
import { beforeAll, describe, expect, it } from "vitest";
import { startNats } from "../../../e2e/support/nats.ts";
import { consistently } from "../../../e2e/support/wait.ts";
import { Nats } from "../../../runtime/src/nats/connection.ts";
import type { ControlPlane } from "../../../e2e/support/controlplane.ts";
import {
  agentPermissions,
  operatorPermissions,
  relayPermissions,
  type NatsPermissions,
} from "../../../runtime/src/contract/nats-permissions.ts";
import {
  CredentialIssuer,
  credsClaims,
  credsFacts,
  generateKeys,
  renewalDue,
  serverConfig,
  CREDENTIAL_LIFETIME_MS,
} from "../../src/concerns/nats/credential-issuer.ts";
import { credsFactsIn, holdNatsCredential } from "../../src/concerns/nats/runtime-credential.ts";
import { getOrAbsent, natsAccountOperator, perTest, until } from "../support/helpers.ts";

/** nats-server's subject matching: `*` one token, `>` one or more trailing tokens. */
function matches(pattern: string, subject: string): boolean {
  const p = pattern.split(".");
  const s = subject.split(".");
  for (let i = 0; i < p.length; i++) {
    if (p[i] === ">") return s.length > i;
    if (i >= s.length || (p[i] !== "*" && p[i] !== s[i])) return false;
  }
  return p.length === s.length;
}
const allows = (list: string[], subject: string) => list.some((p) => matches(p, subject));

const hub = { metadata: { name: "hub", namespace: "team" }, spec: { url: "https://relay.example" } } as Parameters<
  typeof relayPermissions
>[0];

describe("permissions per resource", () => {
  const alice = agentPermissions("alice");
  const relay = relayPermissions(hub);
  const op = operatorPermissions();
  const cases: [string, NatsPermissions, "pub" | "sub", string, boolean][] = [
    // The agent's own streams, consumers, buckets and subjects.
    ["agent: own inbox stream info", alice, "pub", "$JS.API.STREAM.INFO.IFP_INBOX_alice", true],
    ["agent: create own inbox stream", alice, "pub", "$JS.API.STREAM.CREATE.IFP_INBOX_alice", true],
    ["agent: own handler consumer", alice, "pub", "$JS.API.CONSUMER.MSG.NEXT.IFP_INBOX_alice.handler", true],
    [
      "agent: own durable consumer create",
      alice,
      "pub",
      "$JS.API.CONSUMER.CREATE.IFP_INBOX_alice.handler.ifp.inbox.alice.msg.>",
      true,
    ],
    ["agent: ack own messages", alice, "pub", "$JS.ACK.IFP_INBOX_alice.handler.1.2.3.4.0", true],
    ["agent: store an inbound message", alice, "pub", "ifp.inbox.alice.msg.m1", true],
    ["agent: own outbox", alice, "pub", "ifp.outbox.alice.msg", true],
    ["agent: own peers bucket", alice, "pub", "$KV.ifp_peers_alice.bob", true],
    ["agent: own conversations bucket", alice, "pub", "$KV.ifp_conv_alice.c.conv", true],
    ["agent: own key of the shared bucket", alice, "pub", "$KV.ifp_agents.alice.capabilities", true],
    [
      "agent: read own key of the shared bucket",
      alice,
      "pub",
      "$JS.API.DIRECT.GET.KV_ifp_agents.$KV.ifp_agents.alice.capabilities",
      true,
    ],
    ["agent: own replies", alice, "sub", "_INBOX_A_alice.abc.1", true],
    // Nothing of another agent, of a relay, or of the whole account.
    ["agent: another's stream", alice, "pub", "$JS.API.STREAM.INFO.IFP_INBOX_bob", false],
    ["agent: another's stream whose id starts alike", alice, "pub", "$JS.API.STREAM.INFO.IFP_INBOX_alice2", false],
    ["agent: another's messages", alice, "pub", "$JS.API.STREAM.MSG.GET.IFP_INBOX_bob", false],
    ["agent: another's consumer", alice, "pub", "$JS.API.CONSUMER.MSG.NEXT.IFP_INBOX_bob.handler", false],
    [
      "agent: a consumer named like its own stream on another's",
      alice,
      "pub",
      "$JS.API.CONSUMER.CREATE.IFP_INBOX_bob.IFP_INBOX_alice",
      false,
    ],
    ["agent: another's durable", alice, "pub", "$JS.API.CONSUMER.DURABLE.CREATE.IFP_INBOX_bob.IFP_INBOX_alice", false],
    ["agent: another's bucket", alice, "pub", "$KV.ifp_peers_bob.x", false],
    ["agent: another's key of the shared bucket", alice, "pub", "$KV.ifp_agents.bob.capabilities", false],
    [
      "agent: read another's key of the shared bucket",
      alice,
      "pub",
      "$JS.API.DIRECT.GET.KV_ifp_agents.$KV.ifp_agents.bob.capabilities",
      false,
    ],
    ["agent: read the shared bucket by sequence", alice, "pub", "$JS.API.DIRECT.GET.KV_ifp_agents", false],
    ["agent: another's inbox subjects", alice, "pub", "ifp.inbox.bob.msg.m1", false],
    ["agent: a relay's stream", alice, "pub", "$JS.API.STREAM.INFO.IFP_RELAY_team_2Fhub", false],
    [
      "agent: delete its own stream (no more than the purge it needs)",
      alice,
      "pub",
      "$JS.API.STREAM.DELETE.IFP_INBOX_alice",
      true,
    ],
    [
      "agent: a consumer with a filter named like its own stream on another's",
      alice,
      "pub",
      "$JS.API.CONSUMER.CREATE.IFP_INBOX_bob.IFP_INBOX_alice.ifp.inbox.bob.>",
      false,
    ],
    [
      "agent: another's consumer info named like its stream",
      alice,
      "pub",
      "$JS.API.CONSUMER.INFO.IFP_INBOX_bob.IFP_INBOX_alice",
      false,
    ],
    [
      "agent: another's messages by a consumer named like its stream",
      alice,
      "pub",
      "$JS.API.CONSUMER.MSG.NEXT.IFP_INBOX_bob.IFP_INBOX_alice",
      false,
    ],
    ["agent: list every stream", alice, "pub", "$JS.API.STREAM.LIST", false],
    ["agent: the default inbox", alice, "sub", "_INBOX.abc", false],
    ["agent: another's replies", alice, "sub", "_INBOX_A_bob.abc", false],
    ["agent: another's data", alice, "sub", "ifp.inbox.bob.msg.m1", false],
    // The relay: its stream and bucket.
    ["relay: own stream", relay, "pub", "$JS.API.STREAM.INFO.IFP_RELAY_team_2Fhub", true],
    ["relay: own mailbox copy", relay, "pub", "ifp.relay.team_2Fhub.mbox.alice.m1", true],
    ["relay: own bucket", relay, "pub", "$KV.ifp_relay_team_2Fhub.subs", true],
    ["relay: own replies", relay, "sub", "_INBOX_R_team_2Fhub.x", true],
    [
      "relay: another relay's consumer",
      relay,
      "pub",
      "$JS.API.CONSUMER.CREATE.IFP_RELAY_team_2Fother.IFP_RELAY_team_2Fhub",
      false,
    ],
    ["relay: another relay's stream", relay, "pub", "$JS.API.STREAM.MSG.GET.IFP_RELAY_team_2Fother", false],
    ["relay: an agent's inbox", relay, "pub", "$JS.API.STREAM.INFO.IFP_INBOX_alice", false],
    ["relay: another relay's subjects", relay, "pub", "ifp.relay.team_2Fother.mbox.alice.m1", false],
    // The operator: stream management, no data.
    ["operator: create a relay stream", op, "pub", "$JS.API.STREAM.CREATE.IFP_RELAY_team_2Fhub", true],
    ["operator: delete a relay stream", op, "pub", "$JS.API.STREAM.DELETE.IFP_RELAY_team_2Fhub", true],
    ["operator: read a message", op, "pub", "$JS.API.STREAM.MSG.GET.IFP_INBOX_alice", false],
    ["operator: direct get", op, "pub", "$JS.API.DIRECT.GET.IFP_INBOX_alice", false],
    ["operator: a consumer", op, "pub", "$JS.API.CONSUMER.CREATE.IFP_INBOX_alice.spy", false],
    ["operator: agent data", op, "pub", "ifp.inbox.alice.msg.m1", false],
    ["operator: KV", op, "pub", "$KV.ifp_agents.alice.capabilities", false],
    ["operator: an agent's handler backlog", op, "pub", "$JS.API.CONSUMER.INFO.IFP_INBOX_alice.handler", true],
    ["operator: another consumer's info", op, "pub", "$JS.API.CONSUMER.INFO.IFP_INBOX_alice.sender", false],
    [
      "operator: an agent's last error",
      op,
      "pub",
      "$JS.API.DIRECT.GET.KV_ifp_agents.$KV.ifp_agents.alice.last_error",
      true,
    ],
    [
      "operator: a relay's last error",
      op,
      "pub",
      "$JS.API.DIRECT.GET.KV_ifp_relay_team_2Fhub.$KV.ifp_relay_team_2Fhub.last_error",
      true,
    ],
    [
      "operator: an agent's capabilities key",
      op,
      "pub",
      "$JS.API.DIRECT.GET.KV_ifp_agents.$KV.ifp_agents.alice.capabilities",
      false,
    ],
    [
      "operator: a relay's subscriptions",
      op,
      "pub",
      "$JS.API.DIRECT.GET.KV_ifp_relay_team_2Fhub.$KV.ifp_relay_team_2Fhub.subs.alice",
      false,
    ],
    ["operator: the default inbox", op, "sub", "_INBOX.x", false],
  ];
  it.each(cases)("%s", (_what, perms, dir, subject, allowed) => {
    expect(allows(perms[dir], subject)).toBe(allowed);
  });

  it("ids with dots and wildcards stay one token", () => {
    const p = agentPermissions("a.b*>");
    expect(p.pub.every((s) => !s.includes("a.b") && !s.includes("*>"))).toBe(true);
    expect(allows(p.pub, "$JS.API.STREAM.INFO.IFP_INBOX_a")).toBe(false);
    expect(allows(p.sub, "_INBOX_A_a.x")).toBe(false);
  });
});

describe("issuing and renewal", () => {
  const keys = generateKeys();
  const issuer = CredentialIssuer.fromKeys(keys);
  const perms = agentPermissions("alice");

  it("a credential, however long, reaches a NATS that authenticates no client (its default 4 KB CONNECT line); the A2A bucket only with spec.a2a", async () => {
    // A NATS of one's own that authenticates no one still reads the CONNECT line the credential is in.
    const id = "https://bob-the-agent.ifp-bob-example.svc.cluster.local:8443";
    const key = "ifp-bob-example/bob-the-agent";
    const plain = agentPermissions(id, key);
    const a2a = agentPermissions(id, key, { a2a: true });
    expect(plain.pub.some((s) => s.includes("KV_ifp_a2a_"))).toBe(false);
    expect(a2a.pub.filter((s) => s.includes("KV_ifp_a2a_")).length).toBeGreaterThan(0);
    const server = await startNats();
    const dir = mkdtempSync(join(tmpdir(), "ifp-creds-"));
    const credsFile = join(dir, "nats.creds");
    writeFileSync(credsFile, await issuer.issue(`agent:${key}`, a2a, Date.now()));
    // The runtime's own connection, as it starts with --nats-creds.
    const nats = new Nats({ url: server.url, name: "long-id", credsFile }, pino({ level: "silent" }));
    try {
      await nats.start(AbortSignal.timeout(15_000));
      expect(nats.isConnected).toBe(true);
      await nats.close();
    } finally {
      await server.stop();
    }
  });

  it("issues a user JWT of the account, signed by its signing key, with the permissions and an expiry", async () => {
    const now = Date.now();
    const creds = await issuer.issue("agent:ns/alice", perms, now);
    const c = credsClaims(creds)!;
    expect(c.issuerAccount).toBe(issuer.accountKey);
    expect(c.pub).toEqual(perms.pub);
    expect(c.sub).toEqual(perms.sub);
    expect(c.exp).toBe(Math.floor((now + CREDENTIAL_LIFETIME_MS) / 1000));
    expect(
      Math.abs(renewalDue(credsFacts(creds), perms, issuer.accountKey) - (now + CREDENTIAL_LIFETIME_MS * (2 / 3))),
    ).toBeLessThan(1_000);
    // One with a short life left is due now.
    expect(
      renewalDue(
        credsFacts(await issuer.issue("x", perms, now - CREDENTIAL_LIFETIME_MS * 0.75)),
        perms,
        issuer.accountKey,
      ),
    ).toBeLessThan(now);
  });

  it("renews at once what is missing, unreadable, of another account or with other permissions", async () => {
    const creds = await issuer.issue("x", perms);
    expect(renewalDue(credsFacts(undefined), perms, issuer.accountKey)).toBe(0);
    expect(renewalDue(credsFacts("not a creds file"), perms, issuer.accountKey)).toBe(0);
    expect(
      renewalDue(
        credsFacts("-----BEGIN NATS USER JWT-----\nabc.def.ghi\n------END NATS USER JWT------"),
        perms,
        issuer.accountKey,
      ),
    ).toBe(0);
    expect(renewalDue(credsFacts(creds), agentPermissions("bob"), issuer.accountKey)).toBe(0);
    // One list changed and the other not: publish alone (a subject granted or withdrawn), subscribe alone.
    expect(
      renewalDue(credsFacts(creds), { ...perms, pub: [...perms.pub, "ifp.extra.subject"] }, issuer.accountKey),
    ).toBe(0);
    expect(renewalDue(credsFacts(creds), { ...perms, pub: perms.pub.slice(1) }, issuer.accountKey)).toBe(0);
    expect(renewalDue(credsFacts(creds), { ...perms, sub: [...perms.sub, "ifp.extra.>"] }, issuer.accountKey)).toBe(0);
    // Unchanged, in another order: not due.
    expect(
      renewalDue(credsFacts(creds), { pub: [...perms.pub].reverse(), sub: perms.sub }, issuer.accountKey),
    ).toBeGreaterThan(Date.now());
    expect(
      renewalDue(
        credsFacts(await CredentialIssuer.fromKeys(generateKeys()).issue("x", perms)),
        perms,
        issuer.accountKey,
      ),
    ).toBe(0);
  });

  it("holds a credential in the cache as its facts, read from the JWT once its signature is verified", async () => {
    const creds = await issuer.issue("x", perms);
    const secretOf = (file: string): V1Secret => ({ data: { "nats.creds": Buffer.from(file).toString("base64") } });
    const secret = secretOf(creds);
    holdNatsCredential(secret);
    expect(credsFactsIn(secret)).toEqual(credsFacts(creds));
    expect(credsFacts(creds)).toMatchObject({ issuerAccount: issuer.accountKey, exp: credsClaims(creds)!.exp });
    expect(renewalDue(credsFactsIn(secret), perms, issuer.accountKey)).toBeGreaterThan(Date.now());
    expect(renewalDue(credsFactsIn(secret), { ...perms, sub: [...perms.sub, "ifp.extra.>"] }, issuer.accountKey)).toBe(
      0,
    );
    // Held again: the same.
    const again = structuredClone(secret);
    holdNatsCredential(again);
    expect(again).toEqual(secret);
    // A JWT whose claims were changed after it was signed (a later expiry) is held as no credential: issued anew.
    const [head, body, sig] = /-----BEGIN NATS USER JWT-----\s*(\S+)/.exec(creds)![1]!.split(".");
    const claims = JSON.parse(Buffer.from(body!, "base64url").toString());
    const later = Buffer.from(JSON.stringify({ ...claims, exp: claims.exp + 86_400 })).toString("base64url");
    const forged = secretOf(creds.replace(`${head}.${body}.${sig}`, `${head}.${later}.${sig}`));
    holdNatsCredential(forged);
    expect(credsFactsIn(forged)).toBeUndefined();
    expect(renewalDue(credsFactsIn(forged), perms, issuer.accountKey)).toBe(0);
    // A value written through the API that looks held (facts of a credential valid for a year, of
    // the right account and subjects) is no file: held as none, so it is issued anew.
    const facts = { ...credsFacts(creds)!, exp: Math.floor(Date.now() / 1000) + 365 * 86_400 };
    for (const prefix of ["ifp-held-facts:", "ifp-held-facts-0000000000000000:"]) {
      const planted: V1Secret = { data: { "nats.creds": `${prefix}${JSON.stringify(facts)}` } };
      holdNatsCredential(planted);
      expect(credsFactsIn(planted)).toBeUndefined();
      expect(renewalDue(credsFactsIn(planted), perms, issuer.accountKey)).toBe(0);
    }
    // What is no credential file at all is held so too.
    const junk = secretOf("mine");
    holdNatsCredential(junk);
    expect(credsFactsIn(junk)).toBeUndefined();
  });

  it("refuses keys of the wrong kind", () => {
    expect(() => new CredentialIssuer("not-a-key", keys.signing)).toThrow(/account public key/);
    expect(() => new CredentialIssuer(issuer.accountKey, keys.operator)).toThrow(/account/);
    expect(() => new CredentialIssuer(issuer.accountKey, "SAnonsense")).toThrow();
    expect(() => CredentialIssuer.fromKeys({ ...keys, account: keys.operator })).toThrow(/account/);
  });

  it("writes a server configuration with the operator, the full resolver on the NATS volume and both preloaded accounts", async () => {
    const conf = await serverConfig(keys);
    expect(conf).toMatch(/^max_control_line: 64KB$/m);
    expect(conf).toMatch(/^resolver: \{ type: full, dir: "\/data\/jwt", allow_delete: true, interval: "2m" \}$/m);
    expect(conf).toMatch(/^resolver_preload: \{$/m);
    await expect(serverConfig(keys, { resolverDir: 'x"y' })).rejects.toThrow(/resolver directory/);
    expect(conf).toContain(issuer.accountKey);
    expect(conf).not.toMatch(/\bS[A-Z]{2}[A-Z2-7]{50,}/); // no seed
  });
});

describe("on a real API server", () => {
  const NS = "natscreds";
  const operator = natsAccountOperator({ namespace: NS });
  const { get, credsOf } = operator;
  let cp: ControlPlane;
  beforeAll(() => {
    cp = operator.cp();
  });
  perTest(() => [`operator log (last 100 lines):`, ...operator.log.lines().slice(-100)].join("\n"));
  /** An Agent `name` with the agent id `<name>-id`. */
  const applyAgent = (name: string) =>
    cp.kubectl(
      ["apply", "-f", "-"],
      JSON.stringify({
        apiVersion: "ifp.dev/v1alpha1",
        kind: "Agent",
        metadata: { name, namespace: NS },
        spec: { agentId: `${name}-id` },
      }),
    );

  it("generates the account keys and the server configuration once", () => {
    const s = getOrAbsent(cp, ["-n", "ifp-system", "get", "secret", "ifp-nats-account"]);
    expect(Object.keys(s.data).sort()).toEqual([
      "account-signing.seed",
      "account.pub",
      "account.seed",
      "auth.conf",
      "operator.seed",
      "system.seed",
    ]);
    expect(Buffer.from(s.data["auth.conf"], "base64").toString()).toMatch(/^resolver: \{ type: full\b/m);
  });

  it("issues an Agent's and a Relay's own credential, mounts it, and renews one that is due", async () => {
    applyAgent("alice");
    cp.kubectl(
      ["apply", "-f", "-"],
      JSON.stringify({
        apiVersion: "ifp.dev/v1alpha1",
        kind: "Relay",
        metadata: { name: "hub", namespace: NS },
        spec: { url: "https://relay.example" },
      }),
    );
    const agentCreds = await until("alice-nats", () => credsOf("alice"));
    // Its streams and buckets by its namespace/name, its reply inbox by its agent id.
    const alicePermissions = agentPermissions("alice-id", `${NS}/alice`);
    expect(credsClaims(agentCreds)!.pub).toEqual(alicePermissions.pub);
    expect(credsClaims(agentCreds)!.pub).toContain(`$JS.API.*.*.IFP_INBOX_${NS}_2Falice`);
    const relayCreds = await until("hub-nats", () => credsOf("hub"));
    expect(credsClaims(relayCreds)!.pub).toEqual(
      relayPermissions({ metadata: { name: "hub", namespace: NS }, spec: { url: "https://relay.example" } } as never)
        .pub,
    );
    const secret = get("secret", "alice-nats");
    expect(secret.metadata.ownerReferences[0]).toMatchObject({ kind: "Agent", name: "alice" });

    const dep = await until("alice's Deployment", () => get("deployment", "alice"));
    const pod = dep.spec.template.spec;
    expect(pod.volumes.find((v: any) => v.name === "nats").secret).toEqual({
      secretName: "alice-nats",
      items: [{ key: "nats.creds", path: "nats.creds" }],
      defaultMode: 420,
    });
    const runtime = pod.containers.find((c: any) => c.name === "runtime") ?? pod.containers[0];
    expect(runtime.env).toContainEqual({ name: "IFP_NATS_CREDS", value: "/etc/ifp/nats/nats.creds" });

    // A credential at 3/4 of its life is replaced by a fresh one on the next pass.
    const account = getOrAbsent(cp, ["-n", "ifp-system", "get", "secret", "ifp-nats-account"]).data;
    const field = (k: string) => Buffer.from(account[k], "base64").toString();
    const issuer = new CredentialIssuer(field("account.pub"), field("account-signing.seed"));
    const old = await issuer.issue("old", alicePermissions, Date.now() - CREDENTIAL_LIFETIME_MS * 0.75);
    cp.kubectl([
      "-n",
      NS,
      "patch",
      "secret",
      "alice-nats",
      "--type=merge",
      "-p",
      JSON.stringify({ data: { "nats.creds": Buffer.from(old).toString("base64") } }),
    ]);
    const renewed = await until("the renewal", () => {
      const c = credsOf("alice");
      return c && c !== old && c !== agentCreds ? c : undefined;
    });
    expect(credsClaims(renewed)!.exp!).toBeGreaterThan(credsClaims(old)!.exp!);
    expect(renewalDue(credsFacts(renewed), alicePermissions, issuer.accountKey)).toBeGreaterThan(Date.now());
  });

  it("keeps a valid credential through passes that find it in the cache, which holds its facts and no seed", async () => {
    applyAgent("dave");
    const creds = await until("dave-nats", () => credsOf("dave"));
    const manager = operator.manager();
    const cached = await until("dave-nats in the cache", () => manager.caches.get<V1Secret>("Secret", NS, "dave-nats"));
    const held = cached.data!["nats.creds"]!;
    // Its facts: of dave's account, and the expiry of the file the API server holds.
    expect(held).toMatch(/^ifp-held-facts-[0-9a-f]{16}:\{/);
    expect(JSON.parse(held.slice(held.indexOf(":") + 1))).toEqual(credsFacts(creds));
    // Nothing of the file: neither the user seed nor the JWT.
    const seed = /-----BEGIN USER NKEY SEED-----\s*(\S+)/.exec(creds)![1]!;
    expect(seed).toMatch(/^SU/);
    expect(held).not.toContain(seed);
    expect(held).not.toContain("NATS USER JWT");
    // The resync runs every second: a credential read wrongly from the cache is issued anew at each pass.
    const rv = get("secret", "dave-nats").metadata.resourceVersion;
    const reconciles = async () => (await manager.metrics.reconciles.get()).values.reduce((n, v) => n + v.value, 0);
    const from = await reconciles();
    await until("ten more passes", async () => (await reconciles()) - from >= 10);
    expect(get("secret", "dave-nats").metadata.resourceVersion).toBe(rv);
    expect(credsOf("dave")).toBe(creds);
  });

  it("never overwrites a Secret of that name it does not control", async () => {
    cp.kubectl(["-n", NS, "create", "secret", "generic", "bob-nats", "--from-literal=nats.creds=mine"]);
    cp.kubectl(
      ["apply", "-f", "-"],
      JSON.stringify({
        apiVersion: "ifp.dev/v1alpha1",
        kind: "Agent",
        metadata: { name: "bob", namespace: NS },
        spec: { agentId: "bob-id" },
      }),
    );
    const ready = await until("bob's conflict", () =>
      get("agent", "bob")?.status?.conditions?.find((c: any) => c.type === "Ready" && c.reason === "ChildConflict"),
    );
    expect(ready.message).toMatch(/Secret bob-nats exists and was not made by the operator for this Agent/);
    expect(credsOf("bob")).toBe("mine");
  });

  it("never uses a Secret of that name with the Agent's owner reference and the operator's labels but not the operator's mark", async () => {
    // Refused for its image, the Agent gets nothing, no credential either: the name is free to
    // plant under, and the Agent's uid there to copy.
    const agent = (image?: string) =>
      JSON.stringify({
        apiVersion: "ifp.dev/v1alpha1",
        kind: "Agent",
        metadata: { name: "carol", namespace: NS },
        spec: { agentId: "carol-id", ...(image ? { image } : {}) },
      });
    cp.kubectl(["apply", "-f", "-"], agent("registry.example/other:1"));
    const uid = (
      await until("carol refused for its image", () => {
        const a = get("agent", "carol");
        return a?.status?.conditions?.some((c: any) => c.type === "Ready" && c.reason === "ImageNotAllowed")
          ? a
          : undefined;
      })
    ).metadata.uid;
    expect(credsOf("carol")).toBeUndefined();
    cp.kubectl(
      ["apply", "-f", "-"],
      JSON.stringify({
        apiVersion: "v1",
        kind: "Secret",
        metadata: {
          name: "carol-nats",
          namespace: NS,
          labels: {
            "app.kubernetes.io/managed-by": "ifp-operator",
            "app.kubernetes.io/instance": "carol",
            "app.kubernetes.io/component": "agent",
            "app.kubernetes.io/part-of": "ifp-operator",
          },
          ownerReferences: [
            {
              apiVersion: "ifp.dev/v1alpha1",
              kind: "Agent",
              name: "carol",
              uid,
              controller: true,
              blockOwnerDeletion: true,
            },
          ],
        },
        stringData: { "nats.creds": "mine" },
      }),
    );
    const rv = get("secret", "carol-nats").metadata.resourceVersion;
    cp.kubectl(["apply", "-f", "-"], agent());
    const ready = await until("carol's conflict", () =>
      get("agent", "carol")?.status?.conditions?.find((c: any) => c.type === "Ready" && c.reason === "ChildConflict"),
    );
    expect(ready.message).toMatch(/Secret carol-nats exists and was not made by the operator for this Agent/);
    await consistently(
      "the planted credential neither mounted nor overwritten",
      () =>
        !get("deployment", "carol")?.spec.template.spec.volumes?.some(
          (v: any) => v.secret?.secretName === "carol-nats",
        ) && get("secret", "carol-nats").metadata.resourceVersion === rv,
      5_000,
    );
  });
});
