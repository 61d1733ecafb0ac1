import { describe, expect, it } from "vitest";
import { checkPartOrder } from "../../reconcile/pipeline.ts";
import { agentController } from "./controller.ts";

describe("the Agent's part list", () => {
  it("fills each slot a part reads by a part before it", () => {
    expect(agentController.parts.flatMap((p) => p.needs ?? [])).toEqual(
      expect.arrayContaining(["natsAccount", "exposure", "signing", "tlsSecret"]),
    );
    expect(() => checkPartOrder(agentController.parts)).not.toThrow();
    const workload = agentController.parts.findIndex((p) => p.name === "workload");
    expect(() => checkPartOrder([agentController.parts[workload]!, ...agentController.parts])).toThrow(
      /part workload needs signing, tlsSecret, exposure/,
    );
  });
});
