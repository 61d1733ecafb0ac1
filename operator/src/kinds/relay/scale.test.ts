import { describe, expect, it } from "vitest";
import { scaleStatus, selectorString } from "./scale.ts";

const pods = { "app.kubernetes.io/name": "ifp-runtime", "app.kubernetes.io/instance": "relay-1" };

describe("scaleStatus", () => {
  it("reads the pods that exist and are ready from the Deployment, and the selector from the labels", () => {
    expect(
      scaleStatus(pods, {
        status: { replicas: 2, readyReplicas: 1 },
      }),
    ).toEqual({
      replicas: 2,
      readyReplicas: 1,
      selector: "app.kubernetes.io/instance=relay-1,app.kubernetes.io/name=ifp-runtime",
    });
  });

  it("counts no pods before the Deployment exists or has a status, and keeps the selector", () => {
    expect(scaleStatus(pods)).toEqual({ replicas: 0, readyReplicas: 0, selector: selectorString(pods) });
    expect(scaleStatus(pods, {})).toMatchObject({ replicas: 0, readyReplicas: 0 });
  });

  it("writes a selector the API server parses the same whatever order the labels came in", () => {
    expect(selectorString({ b: "2", a: "1" })).toBe("a=1,b=2");
    expect(selectorString({})).toBe("");
  });
});
