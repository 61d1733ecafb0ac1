// The first step of docs/versioning.md on a real API server: the Agent CRD as generated, with a
// second version v1beta1 served beside v1alpha1 (still the storage version), the same schema and
// conversion None. An object made through either version reads the same through the other, and
// is stored as v1alpha1.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startControlPlane, type ControlPlane } from "../../../e2e/support/controlplane.ts";
import { waitFor } from "../../../e2e/support/wait.ts";
import { agentCrd, toYaml } from "../../src/crd/generate.ts";
import { kubectlOrError, perTest } from "../support/helpers.ts";

let cp: ControlPlane;
const NS = "versions";

type Version = { name: string; served: boolean; storage: boolean; [k: string]: unknown };

/** The generated Agent CRD with v1beta1 served beside v1alpha1: the same schema, conversion None. */
function twoVersionCrd() {
  const crd = structuredClone(agentCrd()) as { spec: { versions: Version[]; conversion?: unknown } };
  const [alpha] = crd.spec.versions;
  expect(crd.spec.versions).toHaveLength(1);
  expect(alpha).toMatchObject({ name: "v1alpha1", served: true, storage: true });
  crd.spec.versions = [alpha!, { ...structuredClone(alpha!), name: "v1beta1", served: true, storage: false }];
  crd.spec.conversion = { strategy: "None" };
  return crd;
}

const agentYaml = (version: string, name: string, agentId: string) =>
  `apiVersion: ifp.dev/${version}\nkind: Agent\nmetadata: {name: ${name}, namespace: ${NS}}\nspec:\n  agentId: ${agentId}\n  replicas: 2\n  capabilities:\n    - {name: echo, description: Echoes}\n`;

perTest(() => kubectlOrError(cp, ["get", "crd", "agents.ifp.dev", "-o", "yaml"]));

beforeAll(async () => {
  cp = await startControlPlane({ controllerManager: false });
  cp.kubectl(["apply", "--server-side", "-f", "-"], toYaml(twoVersionCrd()));
  // Polled: kubectl wait fails at once on a CRD whose status has no conditions yet.
  await waitFor(
    "the CRD Established",
    () =>
      cp
        .json<{ status?: { conditions?: { type: string; status: string }[] } }>(["get", "crd", "agents.ifp.dev"])
        .status?.conditions?.some((c) => c.type === "Established" && c.status === "True"),
    40_000,
    200,
  );
  // and both versions served (the API server's discovery follows the CRD a moment later).
  for (const version of ["v1alpha1", "v1beta1"])
    await waitFor(
      `agents.${version}.ifp.dev served`,
      () => {
        try {
          cp.kubectl(["get", "--raw", `/apis/ifp.dev/${version}/agents`]);
          return true;
        } catch {
          return undefined;
        }
      },
      40_000,
      200,
    );
  cp.kubectl(["create", "namespace", NS]);
}, 300_000);
afterAll(async () => {
  await cp?.stop();
});

describe("the Agent CRD with two served versions", () => {
  it("serves both, stores v1alpha1, and lists them in discovery", async () => {
    const crd = cp.json<{ spec: { versions: Version[] }; status: { storedVersions: string[] } }>([
      "get",
      "crd",
      "agents.ifp.dev",
    ]);
    expect(crd.spec.versions.map((v) => [v.name, v.served, v.storage])).toEqual([
      ["v1alpha1", true, true],
      ["v1beta1", true, false],
    ]);
    expect(crd.status.storedVersions).toEqual(["v1alpha1"]);
    // The group's discovery document follows the CRD a moment later.
    const group = await waitFor("both versions in discovery", () => {
      const g = JSON.parse(cp.kubectl(["get", "--raw", "/apis/ifp.dev"]));
      return g.versions.length === 2 ? g : undefined;
    });
    expect(group.versions.map((v: { version: string }) => v.version).sort()).toEqual(["v1alpha1", "v1beta1"]);
    // The API server orders versions by their maturity, not as listed: v1beta1 is preferred at
    // once, and a plain `kubectl get agents` reads through it; the operator names v1alpha1.
    expect(group.preferredVersion.version).toBe("v1beta1");
  });

  it("reads an object made through v1beta1 through v1alpha1, with the defaults applied, and the other way", () => {
    cp.kubectl(["apply", "-f", "-"], agentYaml("v1beta1", "beta-made", "https://beta.example/agents/b"));
    cp.kubectl(["apply", "-f", "-"], agentYaml("v1alpha1", "alpha-made", "https://alpha.example/agents/a"));
    for (const name of ["beta-made", "alpha-made"]) {
      const alpha = cp.json<any>(["-n", NS, "get", `agents.v1alpha1.ifp.dev/${name}`]);
      const beta = cp.json<any>(["-n", NS, "get", `agents.v1beta1.ifp.dev/${name}`]);
      expect(alpha.apiVersion).toBe("ifp.dev/v1alpha1");
      expect(beta.apiVersion).toBe("ifp.dev/v1beta1");
      // Conversion None changes apiVersion only: the same object, uid, spec and the same defaults.
      expect(beta.metadata.uid).toBe(alpha.metadata.uid);
      expect(beta.spec).toEqual(alpha.spec);
      expect(alpha.spec.replicas).toBe(2);
      expect(alpha.spec.signing).toBeDefined();
      // Unversioned, kubectl reads through the preferred version.
      expect(cp.json<any>(["-n", NS, "get", `agents.ifp.dev/${name}`]).apiVersion).toBe("ifp.dev/v1beta1");
    }
  });

  it("keeps the schema's validation in both versions", () => {
    for (const version of ["v1alpha1", "v1beta1"]) {
      const bad = `apiVersion: ifp.dev/${version}\nkind: Agent\nmetadata: {name: bad-${version}, namespace: ${NS}}\nspec: {agentId: x, replicas: 101}\n`;
      expect(() => cp.kubectl(["apply", "-f", "-"], bad)).toThrow(/replicas/);
    }
  });

  it("writes status through the other version's status subresource, and scales through either", () => {
    cp.kubectl([
      "-n",
      NS,
      "patch",
      "agents.v1beta1.ifp.dev/alpha-made",
      "--subresource=status",
      "--type=merge",
      "-p",
      JSON.stringify({ status: { replicas: 2, selector: "app.kubernetes.io/instance=alpha-made" } }),
    ]);
    expect(cp.json<any>(["-n", NS, "get", "agents.v1alpha1.ifp.dev/alpha-made"]).status).toMatchObject({
      replicas: 2,
      selector: "app.kubernetes.io/instance=alpha-made",
    });
    cp.kubectl(["-n", NS, "scale", "agents.v1beta1.ifp.dev/alpha-made", "--replicas=3"]);
    expect(cp.json<any>(["-n", NS, "get", "agents.v1alpha1.ifp.dev/alpha-made"]).spec.replicas).toBe(3);
  });
});
