// An Agent's signing keys: generated once into a Secret, rotated on request (spec.signing.rotate),
// retired keys revoked when their transition ends or when spec.signing.revoke names them.
import type { V1Secret } from "@kubernetes/client-node";
import { generateSigningKey, privateKeyFromPem, rawPublicKey } from "../../../../runtime/src/protocol/keys.ts";
import { encryptionKeyFromPem, generateEncryptionKey } from "../../../../runtime/src/protocol/encryption.ts";
import {
  ENCRYPTION_KEY_FILE,
  parseSigningKeySet,
  SIGNING_KEY_FILE,
  SIGNING_KEYS_FILE,
  type EncryptionKeyRecord,
  type SigningKeyRecord,
  type SigningKeySet,
} from "../../../../runtime/src/contract/signing-keys.ts";
import type { AgentSpec } from "../../../../runtime/src/resources/agent.ts";
import { parseDuration } from "../../../../runtime/src/resources/fields.ts";
import { COMPONENT_LABEL, INSTANCE_LABEL, MANAGED_BY, managedByOperator } from "../../kube/metadata.ts";
import { isoSeconds, type Blocker } from "../../reconcile/conditions.ts";
import { note } from "../../reconcile/pipeline.ts";
import type { CustomObject } from "../../reconcile/context.ts";
import type { AgentContext } from "./context.ts";
import { childNames } from "../../reconcile/names.ts";
import type { Owner } from "../../reconcile/settings.ts";
import { GENERATED_MARK, generatedMark, hasGeneratedMark, signingMarkFields } from "../../reconcile/generated-mark.ts";
import { grantLabel, secretUsableBy } from "../../reconcile/references.ts";

export type SigningOutcome =
  | {
      secretName: string;
      publicKey: string;
      created: string;
      keyId: string;
      keys: SigningKeyRecord[];
      keysHash: string;
      /** The X25519 encryption key of the same Secret (encryption.key), when it has one. */
      encryption?: { keyId: string; publicKey: string };
      applied: string[];
      requeueAfterMs?: number;
    }
  | { blocker: Blocker; applied: string[] };

type Data = Record<string, string>;

export interface SigningPlan {
  /** The Secret's data after the plan (undefined: unchanged). */
  data?: Data;
  set: SigningKeySet;
  events: string[];
  /** When the next retired key is due for revocation. */
  nextDue?: number;
  error?: string;
}

const b64 = (s: string) => Buffer.from(s).toString("base64");
const unb64 = (s: string) => Buffer.from(s, "base64").toString();

/** What a plan changes as it goes: the Secret's data, what it did, whether anything changed, the next due revocation. */
interface PlanState {
  out: Data;
  events: string[];
  changed: boolean;
  nextDue?: number;
  stamp: string;
  now: Date;
}

/**
 * Pure: the key set from the Secret's data and spec.signing at `now`. Other data keys (such
 * as encryption.key) are kept as they are.
 */
export function planSigningKeys(data: Data, signing: AgentSpec["signing"], created: string, now: Date): SigningPlan {
  const read = readKeySet(data, signing, created);
  if ("error" in read) return { set: read.set ?? { keys: [], generation: 1 }, events: [], error: read.error };
  const st: PlanState = { out: { ...data }, events: [], changed: false, stamp: isoSeconds(now), now };
  let set = read.set;
  if (signing.rotate !== undefined && signing.rotate !== set.rotation) set = rotate(st, set, data, signing, created);
  const revokeNow = new Set(signing.revoke);
  set = revokeDueSigningKeys(st, set, revokeNow);
  set = revokeDueEncryptionKeys(st, set, revokeNow);
  // A key id named in revoke that is neither retired nor revoked: the active key, or unknown.
  const active = set.keys.find((k) => k.status === "active")!;
  if (revokeNow.has(active.keyId)) {
    return {
      set,
      events: st.events,
      error: `spec.signing.revoke names the active key ${active.keyId}; set spec.signing.rotate to replace it first`,
    };
  }
  // Without a rotation the Secret is left as it is: one key, whose set is implied.
  if (st.changed) st.out[SIGNING_KEYS_FILE] = b64(JSON.stringify(set));
  return { data: st.changed ? st.out : undefined, set, events: st.events, nextDue: st.nextDue };
}

/** The key set the Secret holds (keys.json), or the one key it implies; an error when they do not agree. */
function readKeySet(
  data: Data,
  signing: AgentSpec["signing"],
  created: string,
): { set: SigningKeySet } | { error: string; set?: SigningKeySet } {
  const pem = data[SIGNING_KEY_FILE];
  if (!pem) return { error: `has no ${SIGNING_KEY_FILE}` };
  let activePublic: string;
  try {
    activePublic = rawPublicKey(privateKeyFromPem(unb64(pem)));
  } catch (err) {
    return { error: (err as Error).message };
  }
  if (!data[SIGNING_KEYS_FILE])
    return {
      set: {
        keys: [{ keyId: signing.keyId, publicKey: activePublic, status: "active", ...(created ? { created } : {}) }],
        generation: 1,
      },
    };
  let set: SigningKeySet;
  try {
    set = parseSigningKeySet(unb64(data[SIGNING_KEYS_FILE]));
  } catch (err) {
    return { error: `${SIGNING_KEYS_FILE} is not a key set: ${(err as Error).message.slice(0, 200)}` };
  }
  const active = set.keys.find((k) => k.status === "active");
  if (!active || active.publicKey !== activePublic)
    return { set, error: `${SIGNING_KEYS_FILE} does not name ${SIGNING_KEY_FILE} as its active key` };
  return { set };
}

/** A rotation: a fresh signing key (and encryption key), the active ones retired until the transition ends. */
function rotate(
  st: PlanState,
  set: SigningKeySet,
  data: Data,
  signing: AgentSpec["signing"],
  created: string,
): SigningKeySet {
  const generation = set.generation + 1;
  const fresh = generateSigningKey();
  const keyId = `${signing.keyId}-r${generation}`;
  const file = `retired-${generation - 1}.key`;
  const revokeAt = isoSeconds(new Date(st.now.getTime() + parseDuration(signing.transition)));
  // The encryption key is replaced with it, and its predecessor retired alongside.
  const encryption = rotateEncryptionKey(st, set.encryption, data, { generation, revokeAt, created });
  st.out[file] = data[SIGNING_KEY_FILE]!;
  st.out[SIGNING_KEY_FILE] = b64(fresh.privateKeyPem);
  st.events.push(
    `generated signing key ${keyId} (public key ${fresh.publicKey}); the previous key is retired and revoked at ${revokeAt}`,
  );
  st.changed = true;
  return {
    rotation: signing.rotate,
    generation,
    keys: [
      ...set.keys.map(
        (k): SigningKeyRecord =>
          k.status === "active" ? { ...k, status: "retired", retired: st.stamp, revokeAt, file } : k,
      ),
      { keyId, publicKey: fresh.publicKey, status: "active", created: st.stamp },
    ],
    ...(encryption ? { encryption } : {}),
  };
}

/** The encryption key's part of a rotation; its records unchanged when the Secret holds no usable encryption.key. */
function rotateEncryptionKey(
  st: PlanState,
  encryption: EncryptionKeyRecord[] | undefined,
  data: Data,
  r: { generation: number; revokeAt: string; created: string },
): EncryptionKeyRecord[] | undefined {
  const encryptionPem = data[ENCRYPTION_KEY_FILE];
  let current: { keyId: string; publicKey: string } | undefined;
  try {
    current = encryptionPem ? encryptionKeyFromPem(unb64(encryptionPem)) : undefined;
  } catch {
    current = undefined; // left as it is (and reported by ensureEncryptionKey)
  }
  if (!encryptionPem || !current) return encryption;
  const records: EncryptionKeyRecord[] = encryption?.some(
    (k) => k.status === "active" && k.publicKey === current.publicKey,
  )
    ? encryption
    : [
        ...(encryption ?? []).filter((k) => k.status !== "active"),
        {
          keyId: current.keyId,
          publicKey: current.publicKey,
          status: "active",
          ...(r.created ? { created: r.created } : {}),
        },
      ];
  const next = generateEncryptionKey();
  const retiredFile = `retired-encryption-${r.generation - 1}.key`;
  st.out[retiredFile] = encryptionPem;
  st.out[ENCRYPTION_KEY_FILE] = b64(next.privateKeyPem);
  st.events.push(`generated encryption key ${next.keyId}; the previous one is retired and revoked at ${r.revokeAt}`);
  return [
    ...records.map(
      (k): EncryptionKeyRecord =>
        k.status === "active"
          ? { ...k, status: "retired", retired: st.stamp, revokeAt: r.revokeAt, file: retiredFile }
          : k,
    ),
    { keyId: next.keyId, publicKey: next.publicKey, status: "active", created: st.stamp },
  ];
}

/** A retired key revoked at its date or when named in spec.signing.revoke: its file goes; else it sets the next due date. */
function revokeIfDue<K extends SigningKeyRecord | EncryptionKeyRecord>(
  st: PlanState,
  k: K,
  what: string,
  due: boolean,
): K {
  const at = k.revokeAt ? Date.parse(k.revokeAt) : 0;
  if (due || at <= st.now.getTime()) {
    if (k.file) delete st.out[k.file];
    st.events.push(`revoked ${what} key ${k.keyId}`);
    st.changed = true;
    const { file: _file, revokeAt: _at, ...rest } = k;
    return { ...rest, status: "revoked", revoked: st.stamp } as K;
  }
  st.nextDue = Math.min(st.nextDue ?? at, at);
  return k;
}

function revokeDueSigningKeys(st: PlanState, set: SigningKeySet, revokeNow: Set<string>): SigningKeySet {
  return {
    ...set,
    keys: set.keys.map((k) => (k.status === "retired" ? revokeIfDue(st, k, "signing", revokeNow.has(k.keyId)) : k)),
  };
}

/**
 * A retired encryption key goes with the signing key retired beside it (same rotation), at its
 * date or when either key id is named in spec.signing.revoke.
 */
function revokeDueEncryptionKeys(st: PlanState, set: SigningKeySet, revokeNow: Set<string>): SigningKeySet {
  if (!set.encryption) return set;
  const revokedRotations = new Set(
    set.keys
      .filter((k) => k.status === "revoked")
      .map((k) => k.revoked && rotationOf(set, k.keyId))
      .filter((n): n is number => n !== undefined),
  );
  return {
    ...set,
    encryption: set.encryption.map((k) => {
      if (k.status !== "retired") return k;
      const rotation = k.file ? Number(/(\d+)\.key$/.exec(k.file)?.[1]) : undefined;
      return revokeIfDue(
        st,
        k,
        "encryption",
        revokeNow.has(k.keyId) || (rotation !== undefined && revokedRotations.has(rotation)),
      );
    }),
  };
}

/** The rotation that retired a signing key (n of its retired-<n>.key), from the plan's record of it. */
function rotationOf(set: SigningKeySet, keyId: string): number | undefined {
  // Keys are generated in order: the n-th key (0-based) was retired by rotation n+1 into retired-<n+1>.key.
  const i = set.keys.findIndex((k) => k.keyId === keyId);
  return i < 0 ? undefined : i + 1;
}

/**
 * The signing key's Secret: generated once (Ed25519, PKCS#8 PEM under signing.key) and never
 * overwritten except by a rotation. It has no owner reference: the agent's identity outlives a
 * deleted Agent, and an Agent created again under the same name signs with the same key, known
 * as the operator's by its mark (signingSecretUse). A Secret named by spec.signing.secretName is
 * used only when the operator created it for this Agent or it carries the label
 * ifp.dev/agent: <Agent name>.
 */
export async function ensureSigningKey(
  ctx: AgentContext,
  obj: CustomObject,
  owner: Owner,
  signing: AgentSpec["signing"],
): Promise<SigningOutcome> {
  const ns = owner.metadata.namespace;
  const name = signing.secretName ?? childNames(owner.metadata.name).signingSecret;
  const applied: string[] = [];
  let secret =
    ctx.caches.get<V1Secret>("Secret", ns, name) ?? (await ctx.kube.read<V1Secret>("v1", "Secret", ns, name));
  // A Secret the user names is theirs to make: a key generated into it would be one no peer
  // knows, replaced (and the pods rolled) once the user's Secret arrives.
  if (!secret && signing.secretName) {
    return {
      blocker: {
        reason: "SigningSecretMissing",
        message: `Secret ${name} named in spec.signing.secretName does not exist in namespace ${ns}; nothing is rendered until it does`,
      },
      applied,
    };
  }
  secret ??= await generateSigningSecret(ctx, obj, owner, name, applied);
  const use = signingSecretUse(secret, owner, obj, signing, ctx.trust.marks().key);
  if (typeof use !== "string") return { blocker: use, applied };
  if (use === "published") secret = await markSigningSecret(ctx, obj, secret, applied);
  const ts = secret.metadata?.creationTimestamp;
  const plan = planSigningKeys(secret.data ?? {}, signing, ts ? isoSeconds(new Date(ts)) : "", new Date());
  if (plan.error) return { blocker: { reason: "InvalidSigningKey", message: `Secret ${name} ${plan.error}` }, applied };
  if (plan.data) secret = await applySigningPlan(ctx, obj, secret, plan, applied, !signing.secretName);
  const active = plan.set.keys.find((k) => k.status === "active")!;
  const encryption = await ensureEncryptionKey(ctx, obj, secret, name, applied);
  return {
    ...(encryption ? { encryption } : {}),
    secretName: name,
    publicKey: active.publicKey,
    keyId: active.keyId,
    created: active.created ?? "",
    keys: plan.set.keys,
    keysHash: JSON.stringify([...plan.set.keys, ...(plan.set.encryption ?? [])].map((k) => [k.keyId, k.status])),
    applied,
    ...(plan.nextDue !== undefined ? { requeueAfterMs: Math.max(1000, plan.nextDue - Date.now() + 500) } : {}),
  };
}

/** The public half of the active key a signing Secret holds; undefined when it holds none that parses. */
export function signingKeyIn(data: Data | undefined): string | undefined {
  const pem = data?.[SIGNING_KEY_FILE];
  if (!pem) return undefined;
  try {
    return rawPublicKey(privateKeyFromPem(unb64(pem)));
  } catch {
    return undefined;
  }
}

/**
 * Pure: whether the Agent may sign with the key of `secret`, and why. A Secret named in
 * spec.signing.secretName: made by the operator for this Agent or labelled for it by its owner
 * (secretUsableBy). The default `<name>-signing`, which has no owner reference (it outlives its
 * Agent) and which anyone who may create Secrets could make before the Agent exists: only with
 * the operator's mark of the key it holds ("marked"), or, for a Secret of an earlier version,
 * when the Agent's status, which only the operator writes, already publishes that key from it
 * ("published", marked then). Anything else is refused.
 */
export function signingSecretUse(
  secret: V1Secret,
  owner: Owner,
  obj: CustomObject,
  signing: AgentSpec["signing"],
  markKey: Buffer,
): "named" | "marked" | "published" | Blocker {
  if (signing.secretName) return secretUsableBy(secret, owner, "spec.signing.secretName") ?? "named";
  const ns = owner.metadata.namespace;
  const name = secret.metadata?.name ?? "";
  const key = signingKeyIn(secret.data);
  if (key && hasGeneratedMark(secret, markKey, signingMarkFields(ns, name, key))) return "marked";
  const published = (obj.status as { signingKey?: { publicKey?: string; secretName?: string } } | undefined)
    ?.signingKey;
  if (key && published?.publicKey === key && published.secretName === name) return "published";
  return {
    reason: "ForeignSecret",
    message: `Secret ${name}, where the operator keeps this Agent's signing key, was not generated by the operator for Agent ${owner.metadata.name} (it carries no mark of the operator's for the key it holds, and the Agent's status publishes no such key); it is neither used nor overwritten: delete Secret ${name} and the operator generates a new key, or, if this Agent may sign with the key it holds, name it in spec.signing.secretName and label it ${grantLabel(owner.kind)}=${owner.metadata.name}`,
  };
}

/** The operator's mark of the active key on the default signing Secret `name` of namespace `ns`. */
function signingMark(ctx: AgentContext, ns: string, name: string, publicKey: string): string {
  return generatedMark(ctx.trust.marks().key, signingMarkFields(ns, name, publicKey));
}

/** The Secret replaced (at its resourceVersion) with `annotations` added, and `data` when given. */
function replaceAnnotated(
  ctx: AgentContext,
  secret: V1Secret,
  annotations: Record<string, string>,
  data: Data | undefined = secret.data,
): Promise<V1Secret> {
  return ctx.kube.replace<V1Secret>({
    ...secret,
    apiVersion: "v1",
    kind: "Secret",
    metadata: { ...secret.metadata, annotations: { ...secret.metadata?.annotations, ...annotations } },
    ...(data ? { data } : {}),
  });
}

/** A signing Secret of an earlier version whose key the Agent's status publishes: marked as the operator's. */
async function markSigningSecret(
  ctx: AgentContext,
  obj: CustomObject,
  secret: V1Secret,
  applied: string[],
): Promise<V1Secret> {
  const name = secret.metadata?.name ?? "";
  const key = signingKeyIn(secret.data)!;
  const marked = await replaceAnnotated(ctx, secret, {
    [GENERATED_MARK]: signingMark(ctx, secret.metadata?.namespace ?? "", name, key),
  });
  applied.push(`Secret/${name}`);
  await note(
    ctx,
    obj,
    "MarkedSigningKey",
    `marked Secret ${name} as the operator's: this Agent's status already publishes its key ${key}`,
  );
  return marked;
}

/** A new signing Secret with a fresh signing key and encryption key (or the one another pass made meanwhile). */
async function generateSigningSecret(
  ctx: AgentContext,
  obj: CustomObject,
  owner: Owner,
  name: string,
  applied: string[],
): Promise<V1Secret> {
  const ns = owner.metadata.namespace;
  const key = generateSigningKey();
  const created = await ctx.kube.createIfAbsent<V1Secret>({
    apiVersion: "v1",
    kind: "Secret",
    type: "Opaque",
    metadata: {
      name,
      namespace: ns,
      labels: {
        ...MANAGED_BY,
        [INSTANCE_LABEL]: owner.metadata.name,
        [COMPONENT_LABEL]: "agent",
        "app.kubernetes.io/part-of": "ifp-operator",
      },
      annotations: { "ifp.dev/public-key": key.publicKey, [GENERATED_MARK]: signingMark(ctx, ns, name, key.publicKey) },
    },
    data: {
      [SIGNING_KEY_FILE]: b64(key.privateKeyPem),
      "encryption.key": b64(generateEncryptionKey().privateKeyPem),
    },
  });
  if (created) {
    applied.push(`Secret/${name}`);
    await note(
      ctx,
      obj,
      "GeneratedSigningKey",
      `generated an Ed25519 signing key into Secret ${name}; public key ${key.publicKey}`,
    );
  }
  const secret = created ?? (await ctx.kube.read<V1Secret>("v1", "Secret", ns, name));
  if (!secret) throw new Error(`Secret ${name} vanished right after it was created`);
  return secret;
}

/** Write a plan's data into the Secret, its public-key annotation (and mark) following the active key, and note what it did. */
async function applySigningPlan(
  ctx: AgentContext,
  obj: CustomObject,
  secret: V1Secret,
  plan: SigningPlan,
  applied: string[],
  marked: boolean,
): Promise<V1Secret> {
  const active = plan.set.keys.find((k) => k.status === "active")!;
  const { namespace = "", name = "" } = secret.metadata ?? {};
  const replaced = await replaceAnnotated(
    ctx,
    secret,
    {
      "ifp.dev/public-key": active.publicKey,
      ...(marked ? { [GENERATED_MARK]: signingMark(ctx, namespace, name, active.publicKey) } : {}),
    },
    plan.data,
  );
  applied.push(`Secret/${secret.metadata?.name}`);
  for (const e of plan.events)
    await note(ctx, obj, e.startsWith("revoked") ? "RevokedSigningKey" : "RotatedSigningKey", e);
  return replaced;
}

/**
 * The encryption key of the signing Secret (docs/encryption.md): added once to a Secret the
 * operator made, never replaced; a Secret the user made is left alone. Undefined when there is none.
 */
async function ensureEncryptionKey(
  ctx: AgentContext,
  obj: CustomObject,
  secret: V1Secret,
  name: string,
  applied: string[],
): Promise<{ keyId: string; publicKey: string } | undefined> {
  let pem = secret.data?.["encryption.key"];
  const ours = managedByOperator(secret);
  if (!pem && ours) {
    const added = b64(generateEncryptionKey().privateKeyPem);
    try {
      // Optimistic concurrency (resourceVersion): a Secret changed meanwhile is looked at again on the next reconcile.
      await ctx.kube.replace<V1Secret>({
        ...secret,
        apiVersion: "v1",
        kind: "Secret",
        data: { ...secret.data, "encryption.key": added },
      });
      pem = added;
      applied.push(`Secret/${name}`);
      await note(ctx, obj, "GeneratedEncryptionKey", `added an X25519 encryption key to Secret ${name}`);
    } catch (err) {
      ctx.log.warn(
        { secret: name, err: (err as Error).message },
        "could not add the encryption key; trying again on the next reconcile",
      );
      return undefined;
    }
  }
  if (!pem) return undefined;
  try {
    const k = encryptionKeyFromPem(unb64(pem));
    return { keyId: k.keyId, publicKey: k.publicKey };
  } catch (err) {
    await ctx.kube.event(
      obj,
      "Warning",
      "InvalidEncryptionKey",
      `Secret ${name}: encryption.key is not usable (${(err as Error).message}); the agent runs without an encryption key`,
    );
    return undefined;
  }
}
