import { describe, expect, it } from "vitest";
import {
  ISOLATED_LAYOUT_UNSUPPORTED,
  type UnsupportedFeature,
} from "../../../../runtime/src/contract/shared-layout.ts";
import { natsLayoutGate, natsLayoutGateOf, notOnNatsLayout } from "./layout-part.ts";

// The contract's list is empty (everything an Agent's spec asks for runs on the isolated layout):
// the gate is shown here with an entry of the test's own.
const relayed: UnsupportedFeature = {
  field: "spec.relay",
  why: "a test's entry",
  uses: (spec) => (spec.relay?.urls?.length ?? 0) > 0,
};
const spec = (more: object = {}) => ({ agentId: "a-agent", a2a: { enabled: true }, ...more }) as never;
const run = (gate: typeof natsLayoutGate, natsLayout: string, s: never) =>
  gate.ensure({ settings: { natsLayout } } as never, { resource: { spec: s } } as never);

describe("the isolated layout's gate", () => {
  it("lets an Agent with spec.a2a through: the contract lists nothing the layout does not serve", async () => {
    expect(ISOLATED_LAYOUT_UNSUPPORTED).toEqual([]);
    expect(notOnNatsLayout("isolated", spec())).toEqual([]);
    expect(await run(natsLayoutGate, "isolated", spec())).toEqual({});
  });

  it("refuses, on the isolated layout only, an Agent whose spec uses a listed field: Ready False NotOnNatsLayout, nothing rendered", async () => {
    const gate = natsLayoutGateOf([relayed]);
    const asking = spec({ relay: { urls: ["https://relay.example"] } });
    expect(await run(gate, "isolated", asking)).toEqual({
      blocked: {
        reason: "NotOnNatsLayout",
        message: expect.stringMatching(/^spec\.relay is not available on the isolated NATS layout of this install/),
      },
      holds: true,
      ends: true,
    });
    expect(await run(gate, "per-agent", asking)).toEqual({});
    expect(await run(gate, "isolated", spec())).toEqual({});
  });
});
