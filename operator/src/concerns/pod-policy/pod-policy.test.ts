// What spec.deployment may reach beyond its pod, as pure rules: the Secrets it names, the images
// of its containers, and where its pods may go. On the API server: operator/test/pod-policy/pod-security.test.ts.
import { describe, expect, it } from "vitest";
import type { DeploymentSettings } from "../../../../runtime/src/resources/deployment.ts";
import {
  containerImageRefusal,
  parseTolerationEntry,
  podSettingsRefusal,
  schedulingRefusal,
  secretReferences,
  serviceAccountUsableBy,
} from "./pod-policy.ts";
import type { Owner } from "../../reconcile/settings.ts";

const d = (x: object) => x as DeploymentSettings;
const owner: Owner = { kind: "Agent", metadata: { name: "shop", namespace: "ns", uid: "u" } };
const settings = { runtimeImage: "rt:1", runtimeImagePullPolicy: "IfNotPresent", natsUrl: "nats://n" };

describe("secretReferences", () => {
  it("finds every Secret the pod would read, with its field", () => {
    const refs = secretReferences(
      d({
        env: [
          { name: "A", value: "1" },
          { name: "B", valueFrom: { secretKeyRef: { name: "s-env", key: "k" } } },
          { name: "C", valueFrom: { configMapKeyRef: { name: "cm", key: "k" } } },
        ],
        sidecars: [
          {
            name: "app",
            image: "i",
            env: [{ name: "X", valueFrom: { secretKeyRef: { name: "s-side", key: "k" } } }],
            envFrom: [{ configMapRef: { name: "cm" } }, { secretRef: { name: "s-from" } }],
          },
        ],
        initContainers: [{ name: "init", image: "i", envFrom: [{ secretRef: { name: "s-init" } }] }],
        volumes: [
          { name: "a", secret: { secretName: "s-vol" } },
          { name: "b", projected: { sources: [{ configMap: { name: "cm" } }, { secret: { name: "s-proj" } }] } },
          { name: "c", csi: { driver: "d", nodePublishSecretRef: { name: "s-csi" } } },
          { name: "d", emptyDir: {} },
        ],
      }),
    );
    expect(refs).toEqual([
      { field: "spec.deployment.env[1].valueFrom.secretKeyRef.name", name: "s-env" },
      { field: "spec.deployment.sidecars[0].env[0].valueFrom.secretKeyRef.name", name: "s-side" },
      { field: "spec.deployment.sidecars[0].envFrom[1].secretRef.name", name: "s-from" },
      { field: "spec.deployment.initContainers[0].envFrom[0].secretRef.name", name: "s-init" },
      { field: "spec.deployment.volumes[0].secret.secretName", name: "s-vol" },
      { field: "spec.deployment.volumes[1].projected.sources[1].secret.name", name: "s-proj" },
      { field: "spec.deployment.volumes[2].csi.nodePublishSecretRef.name", name: "s-csi" },
    ]);
    expect(secretReferences(undefined)).toEqual([]);
  });

  it("refuses a Secret that is missing, or neither made nor labelled for the resource; allows one labelled for it", async () => {
    const secrets: Record<string, object> = {
      mine: { metadata: { name: "mine", labels: { "ifp.dev/agent": "shop" } } },
      theirs: { metadata: { name: "theirs", labels: { "ifp.dev/agent": "other" } } },
    };
    const read = async (_ns: string, name: string) => secrets[name] as any;
    const vol = (name: string) => d({ volumes: [{ name: "v", secret: { secretName: name } }] });
    expect(await podSettingsRefusal(read, owner, vol("mine"), settings)).toBeUndefined();
    expect(await podSettingsRefusal(read, owner, vol("theirs"), settings)).toMatchObject({
      reason: "ForeignSecret",
      message: expect.stringMatching(
        /^spec.deployment.volumes\[0\].secret.secretName: Secret theirs .* ifp.dev\/agent=shop/,
      ),
    });
    expect(await podSettingsRefusal(read, owner, vol("later"), settings)).toMatchObject({
      reason: "SecretMissing",
      message: expect.stringMatching(/^spec.deployment.volumes\[0\].secret.secretName: Secret later does not exist/),
    });
  });
});

describe("containerImageRefusal", () => {
  const withImages = (image: string) =>
    d({ sidecars: [{ name: "ok", image: "registry.example/app:1" }], initContainers: [{ name: "i", image }] });
  it("allows any image without an allow-list", () => {
    expect(containerImageRefusal(withImages("evil.example/x"), settings)).toBeUndefined();
  });
  it("holds sidecars and init containers to the allow-list when there is one", () => {
    const s = { ...settings, allowedImages: ["registry.example/*"] };
    expect(containerImageRefusal(withImages("registry.example/init:1"), s)).toBeUndefined();
    expect(containerImageRefusal(withImages("rt:1"), s)).toBeUndefined();
    expect(containerImageRefusal(withImages("evil.example/x"), s)).toMatchObject({
      reason: "ImageNotAllowed",
      message: expect.stringMatching(/^spec.deployment.initContainers\[0\].image: evil.example\/x is not among/),
    });
  });
});

describe("schedulingRefusal", () => {
  it("refuses every placement the install has not allowed", () => {
    expect(schedulingRefusal(d({ nodeSelector: { "node-role.kubernetes.io/control-plane": "" } }), {})).toMatchObject({
      reason: "NodeLabelNotAllowed",
      message: expect.stringMatching(
        /^spec.deployment.nodeSelector: node label "node-role.kubernetes.io\/control-plane"/,
      ),
    });
    expect(schedulingRefusal(d({ tolerations: [{ operator: "Exists" }] }), {})).toMatchObject({
      reason: "TolerationNotAllowed",
      message: expect.stringMatching(/^spec.deployment.tolerations\[0\]/),
    });
    expect(schedulingRefusal(d({ priorityClassName: "system-node-critical" }), {})).toMatchObject({
      reason: "PriorityClassNotAllowed",
      message: expect.stringMatching(/^spec.deployment.priorityClassName: system-node-critical/),
    });
    const required = {
      nodeAffinity: {
        requiredDuringSchedulingIgnoredDuringExecution: {
          nodeSelectorTerms: [
            { matchExpressions: [{ key: "kubernetes.io/hostname", operator: "In", values: ["cp"] }] },
          ],
        },
      },
    };
    expect(schedulingRefusal(d({ affinity: required }), {})?.message).toMatch(
      /^spec.deployment.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms\[0\].matchExpressions\[0\].key/,
    );
    const preferred = {
      nodeAffinity: {
        preferredDuringSchedulingIgnoredDuringExecution: [
          { weight: 1, preference: { matchFields: [{ key: "metadata.name", operator: "In", values: ["cp"] }] } },
        ],
      },
    };
    expect(schedulingRefusal(d({ affinity: preferred }), {})?.message).toMatch(
      /preference.matchFields\[0\].key: node label "metadata.name"/,
    );
    expect(
      schedulingRefusal(
        d({
          affinity: {
            podAffinity: {
              requiredDuringSchedulingIgnoredDuringExecution: [{ topologyKey: "kubernetes.io/hostname" }],
            },
          },
        }),
        {},
      )?.reason,
    ).toBe("NodeLabelNotAllowed");
  });

  it("allows what the install lists, and anti-affinity and spreading always", () => {
    const allowed = {
      allowedNodeLabels: ["kubernetes.io/hostname", "disk"],
      allowedTolerations: [parseTolerationEntry("dedicated=ifp:NoSchedule")!, parseTolerationEntry("spot")!],
      allowedPriorityClasses: ["ifp-high"],
    };
    expect(
      schedulingRefusal(
        d({
          nodeSelector: { disk: "ssd" },
          tolerations: [
            { key: "dedicated", operator: "Equal", value: "ifp", effect: "NoSchedule" },
            { key: "spot", operator: "Exists" },
          ],
          affinity: {
            podAntiAffinity: { requiredDuringSchedulingIgnoredDuringExecution: [{ topologyKey: "anything" }] },
            podAffinity: {
              preferredDuringSchedulingIgnoredDuringExecution: [
                { weight: 1, podAffinityTerm: { topologyKey: "kubernetes.io/hostname" } },
              ],
            },
          },
          topologySpreadConstraints: [{ topologyKey: "anything", maxSkew: 1, whenUnsatisfiable: "ScheduleAnyway" }],
          priorityClassName: "ifp-high",
        }),
        allowed,
      ),
    ).toBeUndefined();
    // A toleration wider than the entry: any value of the key, any effect, or every taint.
    expect(
      schedulingRefusal(d({ tolerations: [{ key: "dedicated", operator: "Exists", effect: "NoSchedule" }] }), allowed)
        ?.reason,
    ).toBe("TolerationNotAllowed");
    expect(
      schedulingRefusal(d({ tolerations: [{ key: "dedicated", operator: "Equal", value: "ifp" }] }), allowed)?.reason,
    ).toBe("TolerationNotAllowed");
    expect(schedulingRefusal(d({ tolerations: [{ operator: "Exists" }] }), allowed)?.reason).toBe(
      "TolerationNotAllowed",
    );
    expect(
      schedulingRefusal(
        d({
          tolerations: [{ operator: "Exists" }],
          nodeSelector: { any: "x" },
          priorityClassName: "system-node-critical",
        }),
        { allowedTolerations: [{ key: "*" }], allowedNodeLabels: ["*"], allowedPriorityClasses: ["*"] },
      ),
    ).toBeUndefined();
  });

  it("reads --allowed-tolerations entries", () => {
    expect(parseTolerationEntry("dedicated=ifp:NoSchedule")).toEqual({
      key: "dedicated",
      value: "ifp",
      effect: "NoSchedule",
    });
    expect(parseTolerationEntry("example.com/gpu")).toEqual({ key: "example.com/gpu" });
    expect(parseTolerationEntry("k=")).toEqual({ key: "k", value: "" });
    expect(parseTolerationEntry("*")).toEqual({ key: "*" });
    for (const bad of ["", "*=x", "a*", "k:Sometimes", "k=v=w"]) expect(parseTolerationEntry(bad), bad).toBeUndefined();
  });
});

describe("serviceAccountUsableBy", () => {
  const saAgent: Owner = { kind: "Agent", metadata: { name: "alice", namespace: "team", uid: "uid-1" } };
  const saRelay: Owner = { kind: "Relay", metadata: { name: "hub", namespace: "team", uid: "uid-2" } };
  const sa = (labels?: Record<string, string>) => ({
    metadata: { name: "alice-app", namespace: "team", ...(labels ? { labels } : {}) },
  });
  it.each([
    { name: "labelled for this Agent", owner: saAgent, obj: sa({ "ifp.dev/agent": "alice" }), ok: true },
    { name: "labelled for another Agent", owner: saAgent, obj: sa({ "ifp.dev/agent": "bob" }), ok: false },
    { name: "labelled for a Relay of the name", owner: saAgent, obj: sa({ "ifp.dev/relay": "alice" }), ok: false },
    { name: "not labelled", owner: saAgent, obj: sa(), ok: false },
    { name: "labelled for this Relay", owner: saRelay, obj: sa({ "ifp.dev/relay": "hub" }), ok: true },
  ])("$name: $ok", ({ owner, obj, ok }) => {
    const refusal = serviceAccountUsableBy(obj, owner);
    expect(refusal === undefined).toBe(ok);
    if (!ok) expect(refusal).toMatchObject({ reason: "ForeignServiceAccount" });
  });
});
