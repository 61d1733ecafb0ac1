// The local API for applications in other pods (spec.localApi.service): its token Secret (made
// once, kept), its ClusterIP Service, the runtime's flags, port and token mount, and the names
// its serving certificate must cover. Pure parts are table-tested in local-api.test.ts.
import { randomBytes } from "node:crypto";
import type { KubernetesObject, V1Deployment, V1Secret, V1Service } from "@kubernetes/client-node";
import type { Agent } from "../../../../runtime/src/resources/agent.ts";
import { controlledBy } from "../../kube/apply.ts";
import { markedFor, ownedMark, type Marks } from "../../reconcile/generated-mark.ts";
import { createdFor } from "../../reconcile/references.ts";
import { COMPONENT_LABEL, INSTANCE_LABEL, MANAGED_BY } from "../../kube/metadata.ts";
import type { Blocker } from "../../reconcile/conditions.ts";
import { note } from "../../reconcile/pipeline.ts";
import type { CustomObject, NoteReason } from "../../reconcile/context.ts";
import type { AgentContext } from "./context.ts";
import { childMeta, ownerReference, selectorLabels } from "../../reconcile/names.ts";
import type { Owner } from "../../reconcile/settings.ts";

export const LOCAL_API_TOKEN_DIR = "/etc/ifp/local-api";
export const LOCAL_API_TOKEN_PATH = `${LOCAL_API_TOKEN_DIR}/token`;
export const LOCAL_API_TOKEN_KEY = "token";
/** Shortest token the runtime accepts (runtime/src/agent/local-api/auth.ts). */
const MIN_TOKEN_LENGTH = 16;

/** `<name>-local-api`: both the token Secret and the Service. */
export const localApiName = (agentName: string) => `${agentName}-local-api`;

/** The listener's port when spec.localApi.service is enabled, else undefined. */
export function localApiServicePort(agent: Pick<Agent, "spec">): number | undefined {
  const s = agent.spec.localApi.service;
  return s?.enabled ? s.port : undefined;
}

/** The Service's in-cluster names, for the default serving certificate (empty when disabled). */
export function localApiDnsNames(owner: Owner, agent: Pick<Agent, "spec">): string[] {
  if (localApiServicePort(agent) === undefined) return [];
  const name = localApiName(owner.metadata.name);
  const ns = owner.metadata.namespace;
  return [name, `${name}.${ns}`, `${name}.${ns}.svc`, `${name}.${ns}.svc.cluster.local`];
}

/**
 * The ClusterIP Service `<name>-local-api` (port `local-api`). Session affinity keeps each
 * application on one replica: an acknowledgement must reach the replica that handed the message out.
 */
export function localApiService(owner: Owner, port: number): V1Service {
  return {
    apiVersion: "v1",
    kind: "Service",
    metadata: childMeta(owner, localApiName(owner.metadata.name)),
    spec: {
      type: "ClusterIP",
      selector: selectorLabels(owner),
      sessionAffinity: "ClientIP",
      ports: [{ name: "local-api", port, targetPort: "local-api", protocol: "TCP" }],
    },
  };
}

/** The runtime Deployment with the listener's flags, container port and the token mounted (pure; a copy). */
export function withLocalApi(deployment: V1Deployment, owner: Owner, port: number): V1Deployment {
  const d = structuredClone(deployment);
  const pod = d.spec!.template.spec!;
  const c = pod.containers.find((x) => x.name === "runtime")!;
  c.args = [...(c.args ?? []), `--local-api-tls-port=${port}`, `--local-api-token-file=${LOCAL_API_TOKEN_PATH}`];
  c.ports = [...(c.ports ?? []), { name: "local-api", containerPort: port, protocol: "TCP" }];
  c.volumeMounts = [...(c.volumeMounts ?? []), { name: "local-api", mountPath: LOCAL_API_TOKEN_DIR, readOnly: true }];
  pod.volumes = [
    ...(pod.volumes ?? []),
    {
      name: "local-api",
      secret: { secretName: localApiName(owner.metadata.name), items: [{ key: LOCAL_API_TOKEN_KEY, path: "token" }] },
    },
  ];
  return d;
}

/** The children to apply for the local API (the Service; the Deployment is changed by withLocalApi). */
export function localApiChildren(owner: Owner, agent: Pick<Agent, "spec">): KubernetesObject[] {
  const port = localApiServicePort(agent);
  return port === undefined ? [] : [localApiService(owner, port)];
}

/** A new token: 32 random bytes, base64url. */
export function newLocalApiToken(): string {
  return randomBytes(32).toString("base64url");
}

/**
 * A Secret holding one generated value, as first created: the operator's labels, a controller
 * owner reference to the Agent and the operator's mark of both, by which it is known as the
 * operator's own (and deleted with the Agent).
 */
export function generatedSecret(owner: Owner, name: string, key: string, value: string, marks: Marks): V1Secret {
  const ns = owner.metadata.namespace;
  return {
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
      annotations: ownedMark(marks, ns, name, owner.metadata.uid),
      ownerReferences: [ownerReference(owner)],
    },
    data: { [key]: Buffer.from(value).toString("base64") },
  };
}

/**
 * Undefined when the operator made this Secret for `owner`: a controller owner reference to it,
 * the operator's labels naming it and the operator's mark of both (a Secret made before the
 * operator had its marks key, by an earlier version, needs none). Anyone who may create Secrets
 * in the namespace could otherwise make one under the name before the operator does, with a
 * value they know; labels and, once the Agent exists, an owner reference they can copy, the mark
 * they cannot.
 */
export function generatedSecretRefusal(
  secret: V1Secret,
  owner: Owner,
  what: string,
  marks: Marks,
): Blocker | undefined {
  const name = secret.metadata?.name;
  if (controlledBy(secret, owner.metadata.uid) && createdFor(secret, owner)) {
    if (markedFor(secret, marks, owner.metadata.uid)) return undefined;
    return {
      reason: "ForeignSecret",
      message: `Secret ${name}, where the operator keeps this ${owner.kind}'s ${what}, was not made by the operator for ${owner.kind} ${owner.metadata.name} (it carries no mark of the operator's); it is neither used nor overwritten: delete Secret ${name} and the operator makes a new one`,
    };
  }
  const earlier = secret.metadata?.ownerReferences?.find(
    (r) => r.controller && r.kind === owner.kind && r.name === owner.metadata.name && r.uid !== owner.metadata.uid,
  );
  if (earlier && createdFor(secret, owner)) {
    return {
      reason: "ForeignSecret",
      message: `Secret ${name}, where the operator keeps this ${owner.kind}'s ${what}, belongs to an earlier ${owner.kind} ${owner.metadata.name} (uid ${earlier.uid}); it is neither used nor overwritten, and goes with that one, after which the operator makes a new one`,
    };
  }
  return {
    reason: "ForeignSecret",
    message: `Secret ${name}, where the operator keeps this ${owner.kind}'s ${what}, was not made by the operator for ${owner.kind} ${owner.metadata.name} (it lacks the owner reference to it or the operator's labels); it is neither used nor overwritten: delete Secret ${name} and the operator makes a new one`,
  };
}

/** The token Secret as first created. */
export function localApiTokenSecret(owner: Owner, token: string, marks: Marks): V1Secret {
  return generatedSecret(owner, localApiName(owner.metadata.name), LOCAL_API_TOKEN_KEY, token, marks);
}

/**
 * A Secret with one generated value (a token, a key): created once with a random 32-byte value
 * and never overwritten. A Secret under that name is used only when the operator made it for this
 * Agent (generatedSecretRefusal); any other is refused, never overwritten. Its value must
 * have MIN_TOKEN_LENGTH characters or more, else the blocker names the Secret and key.
 */
export async function ensureGeneratedSecret(
  ctx: AgentContext,
  obj: CustomObject,
  owner: Owner,
  s: { name: string; key: string; reason: NoteReason; invalidReason: string; what: string },
): Promise<LocalApiOutcome> {
  const ns = owner.metadata.namespace;
  const applied: string[] = [];
  let secret =
    ctx.caches.get<V1Secret>("Secret", ns, s.name) ?? (await ctx.kube.read<V1Secret>("v1", "Secret", ns, s.name));
  const marks = ctx.trust.marks();
  if (!secret) {
    const created = await ctx.kube.createIfAbsent<V1Secret>(
      generatedSecret(owner, s.name, s.key, newLocalApiToken(), marks),
    );
    if (created) {
      applied.push(`Secret/${s.name}`);
      await note(ctx, obj, s.reason, `generated the ${s.what} into Secret ${s.name} (key ${s.key})`);
    }
    secret = created ?? (await ctx.kube.read<V1Secret>("v1", "Secret", ns, s.name));
    if (!secret) throw new Error(`Secret ${s.name} vanished right after it was created`);
  }
  const refused = generatedSecretRefusal(secret, owner, s.what, marks);
  if (refused) return { applied, blocker: refused };
  const b64 = secret.data?.[s.key];
  const value = b64 ? Buffer.from(b64, "base64").toString().trim() : "";
  if (value.length < MIN_TOKEN_LENGTH) {
    return {
      applied,
      blocker: {
        reason: s.invalidReason,
        message: `Secret ${s.name} needs a key ${s.key} of at least ${MIN_TOKEN_LENGTH} characters`,
      },
    };
  }
  return { applied };
}

export type LocalApiOutcome = { applied: string[]; blocker?: Blocker };

/**
 * When enabled: the token Secret, created once and never overwritten (rotate by writing a new
 * token into it); one the operator did not make for this Agent is refused. It is owned by the
 * Agent and goes with it. When disabled: a Service left from an earlier enabled spec is deleted
 * (the Secret stays).
 */
export async function ensureLocalApi(
  ctx: AgentContext,
  obj: CustomObject,
  owner: Owner,
  agent: Pick<Agent, "spec">,
): Promise<LocalApiOutcome> {
  const ns = owner.metadata.namespace;
  const name = localApiName(owner.metadata.name);
  if (localApiServicePort(agent) === undefined) {
    const svc = ctx.caches.get<V1Service>("Service", ns, name);
    if (svc && controlledBy(svc, owner.metadata.uid)) {
      await ctx.kube.objects.delete({ apiVersion: "v1", kind: "Service", metadata: { name, namespace: ns } });
      return { applied: [`Service/${name} (deleted)`] };
    }
    return { applied: [] };
  }
  return ensureGeneratedSecret(ctx, obj, owner, {
    name,
    key: LOCAL_API_TOKEN_KEY,
    reason: "GeneratedLocalApiToken",
    invalidReason: "InvalidLocalApiToken",
    what: "local API token",
  });
}
