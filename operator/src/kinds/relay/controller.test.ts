import { describe, expect, it } from "vitest";
import { checkPartOrder } from "../../reconcile/pipeline.ts";
import { relayController } from "./controller.ts";

describe("the Relay's part list", () => {
  it("fills each slot a part reads by a part before it", () => {
    expect(relayController.parts.flatMap((p) => p.needs ?? [])).toEqual(
      expect.arrayContaining(["natsAccount", "exposure", "tlsSecret"]),
    );
    expect(() => checkPartOrder(relayController.parts)).not.toThrow();
    const stream = relayController.parts.findIndex((p) => p.name === "relay-stream");
    expect(() => checkPartOrder([relayController.parts[stream]!, ...relayController.parts])).toThrow(
      /part relay-stream needs natsAccount/,
    );
  });
});
