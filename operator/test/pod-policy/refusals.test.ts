import { describe, expect, it } from "vitest";
import { privateKeyFromPem, rawPublicKey } from "../../../runtime/src/protocol/keys.ts";
import { getOrAbsent, resyncs, until } from "../support/helpers.ts";

import {
  NS,
  agentYaml,
  condition,
  events,
  get,
  json,
  cp,
  manager,
  poke,
  secretYaml,
  untilObserved,
  untilReason,
  useOperator,
} from "../support/operator.ts";

useOperator();

describe("Agent", () => {
  it("never runs a runtime under a ServiceAccount of its name someone else made in the namespace", {
    timeout: 120_000,
  }, async () => {
    const ns = "ifp-squat";
    cp.kubectl(["create", "namespace", ns]);
    const inNs = (kind: string, name: string) => getOrAbsent(cp, ["-n", ns, "get", kind, name]);
    // Whoever may create ServiceAccounts there makes one of the runtime's name first, not the operator's.
    cp.kubectl(["-n", ns, "create", "serviceaccount", "eve-runtime"]);
    cp.kubectl(["apply", "-f", "-"], agentYaml("eve").replace(`namespace: ${NS}`, `namespace: ${ns}`));
    const reconciling = () => condition(inNs("agent", "eve"), "Ready");
    await until(
      "eve refused with ChildConflict",
      () => reconciling()?.reason === "ChildConflict" || undefined,
      30_000,
      250,
    );
    expect(reconciling().message).toMatch(/ServiceAccount eve-runtime already exists and is not managed by this Agent/);
    expect(inNs("deployment", "eve")).toBeUndefined();
    expect(inNs("serviceaccount", "eve-runtime").metadata.ownerReferences).toBeUndefined();
    // Once it is gone, the operator makes its own and renders the Agent.
    cp.kubectl(["-n", ns, "delete", "serviceaccount", "eve-runtime"]);
    await until(
      "eve's Deployment under the operator's own ServiceAccount",
      () => inNs("deployment", "eve")?.spec.template.spec.serviceAccountName === "eve-runtime" || undefined,
      60_000,
      500,
    );
    expect(inNs("serviceaccount", "eve-runtime").metadata.ownerReferences).toEqual([
      expect.objectContaining({ kind: "Agent", name: "eve" }),
    ]);
    cp.kubectl(["-n", ns, "delete", "agent", "eve", "--wait=false"]);
  });

  it("refuses an introduction-token Secret that is missing, or neither made nor labelled for the Agent, and renders it once labelled", async () => {
    const field = "spec.inbox.introductionTokens.secretName";
    cp.kubectl(["apply", "-f", "-"], agentYaml("ivy", "  inbox: {introductionTokens: {secretName: ivy-tokens}}\n"));
    const missing = await untilReason("agent", "ivy", "IntroductionSecretMissing");
    expect(condition(missing, "Ready")).toMatchObject({
      status: "False",
      message: `${field}: Secret ivy-tokens does not exist in namespace ${NS}`,
    });
    expect(condition(missing, "Stalled")).toMatchObject({ status: "True", reason: "IntroductionSecretMissing" });
    expect(get("deployment", "ivy")).toBeUndefined();
    await until("the Warning/IntroductionSecretMissing Event", () =>
      events("ivy").some((e) => `${e.type}/${e.reason}` === "Warning/IntroductionSecretMissing"),
    );

    // The Secret exists, but nobody made or labelled it for ivy (another team's tokens, say).
    cp.kubectl(
      ["apply", "-f", "-"],
      secretYaml(
        "ivy-tokens",
        { tokens: "a-token-the-humans-handed-out\n" },
        { "app.kubernetes.io/part-of": "other-team" },
      ),
    );
    poke("agent", "ivy"); // the Secret is not watched (not ours)
    const foreign = await untilReason("agent", "ivy", "ForeignSecret");
    expect(condition(foreign, "Ready")).toMatchObject({ status: "False", reason: "ForeignSecret" });
    expect(condition(foreign, "Ready").message).toBe(
      `${field}: Secret ivy-tokens was not created by the operator for Agent ivy and has no label ifp.dev/agent=ivy; label it so if this Agent may use it`,
    );
    expect(condition(foreign, "Stalled")).toMatchObject({ status: "True", reason: "ForeignSecret" });
    const warning = await until("the Warning/ForeignSecret Event", () =>
      events("ivy").find((e) => `${e.type}/${e.reason}` === "Warning/ForeignSecret"),
    );
    expect(warning.message).toContain(`${field}: Secret ivy-tokens`);
    // Nothing mounts it: no Deployment after this pass, nor after a later one (a spec change
    // the status shows observed, still refusing the Secret).
    expect(get("deployment", "ivy")).toBeUndefined();
    cp.kubectl(["-n", NS, "patch", "agent", "ivy", "--type=merge", "-p", '{"spec":{"replicas":2}}']);
    expect(condition(await untilObserved("agent", "ivy", 2), "Ready")).toMatchObject({ reason: "ForeignSecret" });
    expect(get("deployment", "ivy")).toBeUndefined();

    // Labelled for ivy by its owner: mounted, and the runtime told where.
    cp.kubectl(["-n", NS, "label", "secret", "ivy-tokens", "ifp.dev/agent=ivy"]);
    poke("agent", "ivy");
    await untilReason("agent", "ivy", "RuntimeNotReady");
    const pod = get("deployment", "ivy").spec.template.spec;
    expect(pod.volumes.find((v: any) => v.name === "introduction").secret).toMatchObject({
      secretName: "ivy-tokens",
      items: [{ key: "tokens", path: "tokens" }],
    });
    expect(pod.containers[0].args).toContain("--introduction-secret-file=/etc/ifp/introduction/tokens");
  });

  it("runs only an image the install allows: another spec.image is refused, no key nor anything else made for it until fixed", async () => {
    cp.kubectl(["apply", "-f", "-"], agentYaml("imgs", "  image: registry.example/ifpx/runtime:1\n"));
    const refused = await untilReason("agent", "imgs", "ImageNotAllowed");
    expect(condition(refused, "Ready").message).toMatch(
      /^spec.image: registry.example\/ifpx\/runtime:1 is not among the images this install allows/,
    );
    expect(condition(refused, "Stalled")).toMatchObject({ status: "True", reason: "ImageNotAllowed" });
    expect(refused.status.signingKey).toBeUndefined();
    await until("the Warning/ImageNotAllowed Event", () =>
      events("imgs").some((e) => `${e.type}/${e.reason}` === "Warning/ImageNotAllowed"),
    );
    // Refused before anything is made: no signing key, no other Secret, no Deployment, no finalizer;
    // not in the pass that refused it nor in the resyncs after it.
    const madeFor = () =>
      json(["-n", NS, "get", "secrets,deployments,services,configmaps", "-o", "json"])
        .items.filter((o: any) => o.metadata.name === "imgs" || o.metadata.name.startsWith("imgs-"))
        .map((o: any) => `${o.kind}/${o.metadata.name}`);
    await resyncs(manager, 2);
    expect(madeFor(), "made for the refused Agent").toEqual([]);
    expect(get("agent", "imgs").metadata.finalizers ?? []).toEqual([]);
    expect(events("imgs").filter((e) => e.type === "Normal")).toEqual([]);
    cp.kubectl([
      "-n",
      NS,
      "patch",
      "agent",
      "imgs",
      "--type=merge",
      "-p",
      '{"spec":{"image":"registry.example/ifp/runtime:2"}}',
    ]);
    const allowed = await untilReason("agent", "imgs", "RuntimeNotReady");
    expect(get("deployment", "imgs").spec.template.spec.containers[0].image).toBe("registry.example/ifp/runtime:2");
    // The key is made as for any Agent, and published.
    const key = get("secret", "imgs-signing");
    expect(allowed.status.signingKey.publicKey).toBe(
      rawPublicKey(privateKeyFromPem(Buffer.from(key.data["signing.key"], "base64").toString())),
    );
    // Refused again once running: its pods are held, and the key it publishes stays, untouched.
    cp.kubectl(["-n", NS, "patch", "agent", "imgs", "--type=merge", "-p", '{"spec":{"image":"registry.example/x:1"}}']);
    const again = await untilReason("agent", "imgs", "ImageNotAllowed");
    expect(again.status.signingKey).toEqual(allowed.status.signingKey);
    expect(get("secret", "imgs-signing").metadata.resourceVersion).toBe(key.metadata.resourceVersion);
    expect(get("deployment", "imgs").spec.template.spec.containers[0].image).toBe("registry.example/ifp/runtime:2");
  });
});
