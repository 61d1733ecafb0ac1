// The shared JetStream layout (runtime/src/contract/shared-layout.ts) against a real nats-server
// in operator mode, configured by serverConfig() as the install's is: two tenants, each a data
// account holding its Agents' streams and consumers, and three runtimes, each an account of its
// own with JetStream off and the imports of its own subjects. Alice, of the first tenant, tries
// every attack of nats-accounts.test.ts and those a shared stream opens, with her own credential
// and with a user of her account allowed every subject; each is refused. Each guard is then taken
// away in a variant of the layout (an export without its token position, a consumer-create
// export, an export of the whole API, a bucket that may roll up, a publish with a stream-wide message id, JetStream on in a
// runtime account, a data account without a limit) and the same attack succeeds: the check
// detects it.
import { join } from "node:path";
import {
  AckPolicy,
  jetstream,
  jetstreamManager,
  type JetStreamClient,
  type JetStreamManager,
  type StreamConfig,
} from "@nats-io/jetstream";
import { createAccount, fromSeed } from "@nats-io/nkeys";
import { connect, credsAuthenticator, headers, type NatsConnection } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startNats, type NatsServer } from "../../../e2e/support/nats.ts";
import { tempDir } from "../../../e2e/support/process.ts";
import { agentInboxPrefix, type NatsPermissions } from "../../../runtime/src/contract/nats-permissions.ts";
import {
  dataAccountExports,
  runtimeAccountImports,
  SHARED_BUCKETS,
  SHARED_STREAMS,
  sharedAgentConsumers,
  sharedAgentNames,
  sharedAgentPermissions,
  sharedInboxWatchSubject,
  sharedStreamConfigs,
  type DataAccountExport,
} from "../../../runtime/src/contract/shared-layout.ts";
import {
  CredentialIssuer,
  generateKeys,
  serverConfig,
  type NatsKeys,
} from "../../src/concerns/nats/credential-issuer.ts";
import {
  dataAccountJwt,
  dataAccountOf,
  pushAccountJwt,
  sharedRuntimeAccountJwt,
  type TenantLimits,
} from "../../src/concerns/nats/shared-accounts.ts";

let nats: NatsServer;
let issuer: CredentialIssuer;
let keys: NatsKeys;
let system: NatsConnection;
const open: NatsConnection[] = [];
const signingKey = () => fromSeed(new TextEncoder().encode(keys.signing)).getPublicKey();

const MIB = 1024 * 1024;
/** The server's whole file store: small, so that filling it is quick. */
const STORE_MIB = 48;
const EVERYTHING: NatsPermissions = { pub: [">"], sub: [">"] };

interface Tenant {
  name: string;
  account: string;
  exports: DataAccountExport[];
  jsm: JetStreamManager;
  js: JetStreamClient;
}
interface Runtime {
  name: string;
  account: string;
  tenant: Tenant;
  nc: NatsConnection;
  js: JetStreamClient;
  jsm: JetStreamManager;
}

async function user(account: string, name: string, permissions: NatsPermissions, inboxPrefix?: string) {
  const creds = await issuer.issue(name, permissions, Date.now(), undefined, account);
  const nc = await connect({
    servers: nats.url,
    authenticator: credsAuthenticator(new TextEncoder().encode(creds)),
    reconnect: false,
    ...(inboxPrefix ? { inboxPrefix } : {}),
  });
  open.push(nc);
  return nc;
}

/** A tenant as the operator would make it: its data account pushed, its streams applied by the operator's user there. */
async function tenant(
  name: string,
  opts: {
    limits?: TenantLimits;
    exports?: DataAccountExport[];
    streams?: (Partial<StreamConfig> & { name: string })[];
  } = {},
): Promise<Tenant> {
  const account = dataAccountOf(keys.signing, name);
  const limits = opts.limits ?? { diskBytes: 2 * MIB, memBytes: 0 };
  const exports = opts.exports ?? dataAccountExports();
  await pushAccountJwt(system, await dataAccountJwt(keys.operator, account, signingKey(), name, limits, exports));
  const nc = await user(account, `ifp-operator ${name}`, EVERYTHING);
  const jsm = await jetstreamManager(nc);
  for (const s of opts.streams ?? sharedStreamConfigs()) await jsm.streams.add(s);
  return { name, account, exports, jsm, js: jetstream(nc) };
}

/** A runtime of `t`: its account pushed with its imports, its consumers made by the operator, its user connected. */
async function runtime(
  t: Tenant,
  name: string,
  opts: { permissions?: NatsPermissions; jetstream?: boolean; importsOf?: string; exports?: DataAccountExport[] } = {},
): Promise<Runtime> {
  const account = createAccount().getPublicKey();
  await pushAccountJwt(
    system,
    await sharedRuntimeAccountJwt(keys.operator, account, `agent:${t.name}/${name}`, t.account, signingKey(), {
      jetstream: opts.jetstream,
      // An import of the whole API covers `$JS.API.INFO` itself: nats-server refuses a second import of it.
      imports: runtimeAccountImports(t.account, opts.importsOf ?? account, opts.exports).filter(
        (i) => i.type !== "service" || !i.local_subject || !opts.exports?.some((e) => e.subject === "$JS.API.>"),
      ),
    }),
  );
  for (const c of sharedAgentConsumers(account, { handlerTimeoutMs: 30_000, senderAckWaitMs: 30_000 }))
    await t.jsm.consumers.add(c.stream, c.config);
  const inbox = agentInboxPrefix(name);
  const nc = await user(account, `agent:${name}`, opts.permissions ?? sharedAgentPermissions(inbox, account), inbox);
  return { name, account, tenant: t, nc, js: jetstream(nc), jsm: await jetstreamManager(nc, { checkAPI: false }) };
}

/** Another user of the runtime's own account, allowed every subject: a credential without the allow-lists. */
async function unrestricted(r: Runtime): Promise<Runtime> {
  const nc = await user(r.account, `${r.name}-unrestricted`, EVERYTHING);
  return { ...r, nc, js: jetstream(nc), jsm: await jetstreamManager(nc, { checkAPI: false }) };
}

const works = (p: Promise<unknown>) =>
  p.then(
    () => true,
    () => false,
  );

/** An inbound message of `r`'s, as the shared layout stores it: its own subject, no stream-wide message id. */
const inboxSubject = (r: Runtime, id: string) => `${sharedAgentNames(r.account).inbox(id)}.sender`;

/** What the tenant's operator user sees stored on a subject (the last message there). */
const stored = (t: Tenant, stream: string, subject: string) =>
  t.jsm.streams.getMessage(stream, { last_by_subj: subject }).then(
    (m) => m?.string(),
    () => undefined,
  );

/** The next message of `r`'s consumer as `as` asks for it, or undefined. */
async function pull(as: Runtime, consumer: string, stream: string = SHARED_STREAMS.inbox) {
  try {
    const c = await as.js.consumers.get(stream, consumer);
    return (await c.next({ expires: 1_500 }))?.string();
  } catch {
    return undefined;
  }
}

/** What `as` hears on `subject` while `act` runs (a core subscription: a stream import delivers there). */
async function hear(as: Runtime, subject: string, act: () => Promise<unknown>): Promise<string[]> {
  const heard: string[] = [];
  const sub = as.nc.subscribe(subject, {
    callback: (e, m) => {
      if (!e) heard.push(m.string());
    },
  });
  await as.nc.flush();
  await act();
  await as.nc.flush();
  sub.unsubscribe();
  return heard;
}

/** A request's answer, or undefined when nobody answers or the server refuses it. */
async function ask(r: Runtime, subject: string, body = "", timeout = 1_500): Promise<string | undefined> {
  try {
    return (await r.nc.request(subject, body, { timeout })).string();
  } catch {
    return undefined;
  }
}

beforeAll(async () => {
  keys = generateKeys();
  issuer = CredentialIssuer.fromKeys(keys);
  const dir = tempDir("ifp-nats-shared-");
  nats = await startNats({
    storeDir: join(dir, "store"),
    config: `${await serverConfig(keys, { resolverDir: join(dir, "jwt") })}\njetstream { max_file_store: ${STORE_MIB}MB }\n`,
    connect: { authenticator: credsAuthenticator(await issuer.systemCreds()) },
  });
  system = await connect({
    servers: nats.url,
    authenticator: credsAuthenticator(await issuer.systemCreds()),
    reconnect: false,
  });
  open.push(system);
}, 60_000);
afterAll(async () => {
  for (const nc of open) await nc.close().catch(() => {});
  await nats?.close();
});

describe("the shared layout: one data account per tenant, an account per runtime importing its own subjects", () => {
  let t1: Tenant;
  let t2: Tenant;
  let alice: Runtime;
  let bob: Runtime;
  let carol: Runtime;
  beforeAll(async () => {
    t1 = await tenant("team-1");
    t2 = await tenant("team-2");
    alice = await runtime(t1, "alice");
    bob = await runtime(t1, "bob");
    carol = await runtime(t2, "carol");
  }, 60_000);

  it("gives each runtime its own inbox, consumer, acks and KV keys through its imports", async () => {
    const ack = await bob.js.publish(inboxSubject(bob, "m1"), "for bob");
    expect(ack.stream).toBe(SHARED_STREAMS.inbox);
    const c = await bob.js.consumers.get(SHARED_STREAMS.inbox, bob.account);
    const m = await c.next({ expires: 5_000 });
    expect(m?.string()).toBe("for bob");
    expect(await m!.ackAck()).toBe(true);
    expect((await bob.jsm.consumers.info(SHARED_STREAMS.inbox, bob.account)).ack_floor.stream_seq).toBe(ack.seq);
    // A KV record under its key, read back by direct get.
    const key = `$KV.${SHARED_BUCKETS.peers}.${bob.account}.doc`;
    await bob.js.publish(key, "bob's peers");
    expect((await bob.jsm.direct.getMessage(`KV_${SHARED_BUCKETS.peers}`, { last_by_subj: key }))?.string()).toBe(
      "bob's peers",
    );
    // The outbox too, and the message each tenant's stream holds is its own.
    await carol.js.publish(`ifp.outbox.${carol.account}.msg.o1`, "carol's");
    expect(await pull(carol, carol.account, SHARED_STREAMS.outbox)).toBe("carol's");
    expect((await t1.jsm.streams.info(SHARED_STREAMS.outbox)).state.messages).toBe(0);
  }, 30_000);

  it("keeps one message per subject: a repeated message is refused, and a message id of another runtime's cannot pre-empt its message", async () => {
    await bob.js.publish(inboxSubject(bob, "dup"), "first");
    await expect(bob.js.publish(inboxSubject(bob, "dup"), "again")).rejects.toThrow(/maximum messages per subject/);
    // Alice stores a message of her own under the id bob's next message would have had as a stream-wide id.
    const taken = headers();
    taken.set("Nats-Msg-Id", "signed:https://peer.example m2");
    await alice.js.publish(inboxSubject(alice, "m2"), "alice's", { headers: taken });
    // The layout's publish carries no message id: bob's message is stored.
    expect((await bob.js.publish(inboxSubject(bob, "m2"), "bob's m2")).duplicate).toBe(false);
    expect(await stored(t1, SHARED_STREAMS.inbox, inboxSubject(bob, "m2"))).toBe("bob's m2");
    // With the id the product's own inbox sets today, stream-wide in a shared stream, it is lost.
    const same = headers();
    same.set("Nats-Msg-Id", "signed:https://peer.example m2");
    expect((await bob.js.publish(inboxSubject(bob, "m3"), "bob's m3", { headers: same })).duplicate).toBe(true);
    expect(await stored(t1, SHARED_STREAMS.inbox, inboxSubject(bob, "m3"))).toBeUndefined();
  }, 30_000);

  it("refuses alice everything of bob's, with her credential and with a user of her account allowed every subject", async () => {
    await bob.js.publish(inboxSubject(bob, "secret"), "bob's secret");
    await bob.js.publish(`$KV.${SHARED_BUCKETS.conversations}.${bob.account}.c1`, "bob's conversation");
    const before = (await t1.jsm.consumers.info(SHARED_STREAMS.inbox, bob.account)).num_pending;
    for (const a of [alice, await unrestricted(alice)]) {
      const heard: string[] = [];
      const sub = a.nc.subscribe(">", {
        callback: (e, m) => {
          if (!e) heard.push(m.string());
        },
      });
      // Publishing into bob's inbox and KV keys.
      expect(await works(a.js.publish(inboxSubject(bob, "forged"), "forged", { timeout: 1_500 }))).toBe(false);
      expect(
        await works(a.js.publish(`$KV.${SHARED_BUCKETS.peers}.${bob.account}.doc`, "forged", { timeout: 1_500 })),
      ).toBe(false);
      // Reading them: direct get by subject, and by sequence in a request's body on her own subject.
      expect(await ask(a, `$JS.API.DIRECT.GET.${SHARED_STREAMS.inbox}.${inboxSubject(bob, "secret")}`)).toBeUndefined();
      expect(
        await ask(
          a,
          `$JS.API.DIRECT.GET.KV_${SHARED_BUCKETS.conversations}.$KV.${SHARED_BUCKETS.conversations}.${bob.account}.c1`,
        ),
      ).toBeUndefined();
      for (const body of [{ seq: 1 }, { last_by_subj: inboxSubject(bob, "secret") }, { next_by_subj: "ifp.>" }]) {
        const answer = await ask(
          a,
          `$JS.API.DIRECT.GET.${SHARED_STREAMS.inbox}.${inboxSubject(alice, "m2")}`,
          JSON.stringify(body),
        );
        expect(answer ?? "").not.toContain("secret");
      }
      expect(await ask(a, `$JS.API.DIRECT.GET.${SHARED_STREAMS.inbox}`, JSON.stringify({ seq: 1 }))).toBeUndefined();
      // Bob's consumer: its messages, its info, acks of its deliveries.
      expect(await pull(a, bob.account)).toBeUndefined();
      expect(await ask(a, `$JS.API.CONSUMER.INFO.${SHARED_STREAMS.inbox}.${bob.account}`)).toBeUndefined();
      a.nc.publish(`$JS.ACK.${SHARED_STREAMS.inbox}.${bob.account}.1.1.1.0.0`);
      // A consumer of her own on the shared stream, filtered on bob's subjects; the stream's info and list.
      expect(
        await ask(
          a,
          `$JS.API.CONSUMER.CREATE.${SHARED_STREAMS.inbox}.${a.account}.${inboxSubject(bob, "secret")}`,
          JSON.stringify({
            stream_name: SHARED_STREAMS.inbox,
            config: { name: a.account, filter_subject: inboxSubject(bob, "secret"), ack_policy: AckPolicy.None },
          }),
        ),
      ).toBeUndefined();
      expect(
        await ask(a, `$JS.API.STREAM.INFO.${SHARED_STREAMS.inbox}`, JSON.stringify({ subjects_filter: ">" })),
      ).toBeUndefined();
      expect(await ask(a, "$JS.API.STREAM.LIST")).toBeUndefined();
      // Streams of her own that would source, mirror or republish, or sit on bob's reply inbox: no JetStream.
      const own = (config: Partial<StreamConfig> & { name: string }) => works(a.jsm.streams.add(config));
      expect(
        await own({
          name: "S",
          subjects: ["s.>"],
          sources: [{ name: SHARED_STREAMS.inbox, external: { api: "$JS.API", deliver: "" } }],
        }),
      ).toBe(false);
      expect(await own({ name: "M", mirror: { name: SHARED_STREAMS.inbox } })).toBe(false);
      expect(
        await own({ name: "R", subjects: ["r.>"], republish: { src: ">", dest: `ifp.inbox.${bob.account}.msg.r` } }),
      ).toBe(false);
      expect(await own({ name: "I", subjects: [`${agentInboxPrefix("bob")}.>`] })).toBe(false);
      // $SYS: the resolver's updates, the server's state.
      expect(await ask(a, "$SYS.REQ.CLAIMS.UPDATE", "not a JWT")).toBeUndefined();
      expect(await ask(a, "$SYS.REQ.SERVER.PING.JSZ", "{}")).toBeUndefined();
      // Bob works meanwhile: a message of his comes and is taken; nothing of it reaches her.
      await bob.js.publish(inboxSubject(bob, `while-${a.nc.info?.client_id}`), "bob's other");
      await a.nc.flush();
      sub.unsubscribe();
      expect(heard.filter((s) => s.includes("bob's"))).toEqual([]);
    }
    expect(await stored(t1, SHARED_STREAMS.inbox, inboxSubject(bob, "forged"))).toBeUndefined();
    expect(await stored(t1, `KV_${SHARED_BUCKETS.peers}`, `$KV.${SHARED_BUCKETS.peers}.${bob.account}.doc`)).toBe(
      "bob's peers",
    );
    // Bob's consumer saw no ack but his own: everything not yet taken still pending, two more.
    expect((await t1.jsm.consumers.info(SHARED_STREAMS.inbox, bob.account)).num_pending).toBe(before + 2);
    // Carol, of the other tenant, with bob's key in her subjects, reaches nothing either.
    expect(await works(carol.js.publish(inboxSubject(bob, "cross"), "x", { timeout: 1_500 }))).toBe(false);
  }, 120_000);

  it("lets a runtime hear the messages stored on its own inbox subjects, and none of another's", async () => {
    const own = sharedInboxWatchSubject(alice.account);

    const heard = await hear(alice, own, () => alice.js.publish(inboxSubject(alice, "heard"), "alice's heard"));
    expect(heard).toEqual(["alice's heard"]);
    // Bob's messages, on his watch subject in her account and on hers: nothing.
    let n = 0;
    for (const subject of [sharedInboxWatchSubject(bob.account), own, "ifp-watch.>", ">"])
      for (const a of [alice, await unrestricted(alice)])
        expect(
          await hear(a, subject, () => bob.js.publish(inboxSubject(bob, `unheard-${n++}`), "bob's unheard")),
          subject,
        ).toEqual([]);
  }, 30_000);

  it("refuses rollups: a runtime's own KV key cannot purge every runtime's", async () => {
    const rollup = headers();
    rollup.set("Nats-Rollup", "all");
    await expect(
      alice.js.publish(`$KV.${SHARED_BUCKETS.peers}.${alice.account}.x`, "", { headers: rollup }),
    ).rejects.toThrow(/rollup not permitted/);
    expect(await stored(t1, `KV_${SHARED_BUCKETS.peers}`, `$KV.${SHARED_BUCKETS.peers}.${bob.account}.doc`)).toBe(
      "bob's peers",
    );
  }, 30_000);
});

describe("each guard taken away: the same attack succeeds", () => {
  it("an export without its token position lets an import name another runtime's key", async () => {
    const loose = dataAccountExports().map(({ account_token_position: _, ...e }) => e) as DataAccountExport[];
    const t = await tenant("loose", { exports: loose });
    const bob = await runtime(t, "bob-loose");
    await bob.js.publish(inboxSubject(bob, "secret"), "bob's secret");
    // The operator's mistake in alice's account JWT: bob's key in her imports.
    const alice = await runtime(t, "alice-loose", { importsOf: bob.account, permissions: EVERYTHING });
    expect(await works(alice.js.publish(inboxSubject(bob, "forged"), "forged"))).toBe(true);
    expect(await ask(alice, `$JS.API.DIRECT.GET.${SHARED_STREAMS.inbox}.${inboxSubject(bob, "secret")}`)).toBe(
      "bob's secret",
    );
    expect(await ask(alice, `$JS.API.CONSUMER.INFO.${SHARED_STREAMS.inbox}.${bob.account}`)).toContain(bob.account);
    expect(await pull(alice, bob.account)).toBe("bob's secret");
    const watched = sharedInboxWatchSubject(bob.account);
    expect(await hear(alice, watched, () => bob.js.publish(inboxSubject(bob, "heard"), "bob's heard"))).toEqual([
      "bob's heard",
    ]);

    // With the token position, the same mistaken import reaches nothing.
    const t2 = await tenant("tight");
    const bob2 = await runtime(t2, "bob-tight");
    await bob2.js.publish(inboxSubject(bob2, "secret"), "bob's secret");
    const alice2 = await runtime(t2, "alice-tight", { importsOf: bob2.account, permissions: EVERYTHING });
    expect(await works(alice2.js.publish(inboxSubject(bob2, "forged"), "forged", { timeout: 1_500 }))).toBe(false);
    expect(
      await ask(alice2, `$JS.API.DIRECT.GET.${SHARED_STREAMS.inbox}.${inboxSubject(bob2, "secret")}`),
    ).toBeUndefined();
    // Her account's imports all refused, the server's own API answers in it: JetStream is not enabled there.
    expect(await ask(alice2, `$JS.API.CONSUMER.INFO.${SHARED_STREAMS.inbox}.${bob2.account}`)).toContain(
      "JetStream not enabled",
    );
    expect(await pull(alice2, bob2.account)).toBeUndefined();
    expect(
      await hear(alice2, sharedInboxWatchSubject(bob2.account), () =>
        bob2.js.publish(inboxSubject(bob2, "heard"), "bob's heard"),
      ),
    ).toEqual([]);
  }, 60_000);

  it("an export of the data account's whole JetStream API lets a runtime list and read every stream", async () => {
    const api: DataAccountExport[] = [
      { name: "api", subject: "$JS.API.>", type: "service" } as DataAccountExport,
      ...dataAccountExports().filter((e) => !e.subject.startsWith("$JS.API.")),
    ];
    const t = await tenant("whole-api", { exports: api });
    const bob = await runtime(t, "bob-api");
    await bob.js.publish(inboxSubject(bob, "secret"), "bob's secret");
    const alice = await runtime(t, "alice-api", { permissions: EVERYTHING, exports: api });
    expect(await ask(alice, "$JS.API.STREAM.LIST")).toContain(SHARED_STREAMS.inbox);
    expect(
      await ask(
        alice,
        `$JS.API.STREAM.MSG.GET.${SHARED_STREAMS.inbox}`,
        JSON.stringify({ last_by_subj: inboxSubject(bob, "secret") }),
      ),
    ).toContain(Buffer.from("bob's secret").toString("base64"));
  }, 60_000);

  it("an export of consumer creation, keyed by the consumer's name, lets a runtime filter on another's subjects", async () => {
    const create: DataAccountExport = {
      name: "consumer create",
      subject: "$JS.API.CONSUMER.CREATE.*.*.>",
      type: "service",
      account_token_position: 6,
    };
    const t = await tenant("create", { exports: [...dataAccountExports(), create] });
    const bob = await runtime(t, "bob-create");
    await bob.js.publish(inboxSubject(bob, "secret"), "bob's secret");
    const alice = await runtime(t, "alice-create", { permissions: EVERYTHING, exports: t.exports });
    // The subject names her consumer, the filter bob's subjects: the token checks only the name.
    const filtered = `$JS.API.CONSUMER.CREATE.${SHARED_STREAMS.inbox}.${alice.account}.${inboxSubject(bob, "secret")}`;
    const answer = await alice.nc.request(
      filtered,
      JSON.stringify({
        stream_name: SHARED_STREAMS.inbox,
        config: {
          durable_name: alice.account,
          filter_subject: inboxSubject(bob, "secret"),
          ack_policy: AckPolicy.Explicit,
          num_replicas: 1,
        },
        action: "",
      }),
      { timeout: 1_500 },
    );
    expect(answer.json<{ error?: unknown }>().error).toBeUndefined();
    expect(await pull(alice, alice.account)).toBe("bob's secret");
  }, 60_000);

  it("a bucket that may roll up lets a runtime's own key purge every runtime's", async () => {
    const loose = {
      ...sharedStreamConfigs()[3]!,
      name: "KV_ifp_loose",
      subjects: ["$KV.ifp_loose.>"],
      allow_rollup_hdrs: true,
      deny_purge: false,
    };
    const t = await tenant("rollup", { streams: [...sharedStreamConfigs(), loose] });
    const bob = await runtime(t, "bob-rollup");
    const alice = await runtime(t, "alice-rollup");
    await bob.js.publish(`$KV.ifp_loose.${bob.account}.doc`, "bob's");
    const rollup = headers();
    rollup.set("Nats-Rollup", "all");
    await alice.js.publish(`$KV.ifp_loose.${alice.account}.x`, "", { headers: rollup });
    expect(await stored(t, "KV_ifp_loose", `$KV.ifp_loose.${bob.account}.doc`)).toBeUndefined();
  }, 60_000);

  it("JetStream on in a runtime's account lets it reserve the rest of the store, and the next tenant is refused", async () => {
    const t = await tenant("reserve");
    const mallory = await runtime(t, "mallory", { jetstream: true, permissions: EVERYTHING });
    const js = await jetstreamManager(mallory.nc);
    // The largest stream the server still places: all of the store no tenant has reserved.
    let mib = STORE_MIB;
    const hoard = (n: number) => works(js.streams.add({ name: "HOARD", subjects: ["hoard.>"], max_bytes: n * MIB }));
    while (mib > 0 && !(await hoard(mib))) mib--;
    expect(mib).toBeGreaterThan(0);
    await expect(tenant("after-reserve")).rejects.toThrow(/not enabled/);
    await js.streams.delete("HOARD");
    await tenant("after-hoard");
  }, 60_000);

  it("a tenant at its data account's limit refuses only itself; without limits one tenant fills the store for the others", async () => {
    const payload = new Uint8Array(512 * 1024);
    const fill = async (r: Runtime, tag: string) => {
      for (let i = 0; i < 2 * STORE_MIB; i++)
        if (!(await works(r.js.publish(inboxSubject(r, `${tag}-${i}`), payload)))) return i;
      return 2 * STORE_MIB;
    };
    const limited = await tenant("limited", { limits: { diskBytes: 4 * MIB, memBytes: 0 } });
    const other = await tenant("other", { limits: { diskBytes: 4 * MIB, memBytes: 0 } });
    const mallory = await runtime(limited, "mallory-limited");
    const victim = await runtime(other, "victim");
    expect(await fill(mallory, "fill")).toBeLessThan(2 * 4);
    expect(await works(victim.js.publish(inboxSubject(victim, "after"), payload))).toBe(true);
    // Data accounts without a limit, as every runtime account is today: the first fills the server's store.
    const greedy = await runtime(await tenant("unlimited", { limits: { diskBytes: -1, memBytes: 0 } }), "greedy");
    const next = await runtime(await tenant("unlimited-2", { limits: { diskBytes: -1, memBytes: 0 } }), "next");
    expect(await fill(greedy, "fill")).toBeGreaterThan(2 * 4);
    expect(await works(next.js.publish(inboxSubject(next, "after-fill"), new Uint8Array(64)))).toBe(false);
    // Nor does what a limited tenant reserved stay its own beside an unlimited one: every data account needs its limit.
    expect(await works(victim.js.publish(inboxSubject(victim, "after-fill"), payload))).toBe(false);
  }, 120_000);
});
