// spec.disruption of an Agent and a Relay: the PodDisruptionBudget the operator renders for a
// runtime of more than one replica (operator/src/concerns/workload/disruption.ts).
import { z } from "zod";

const PERCENT = /^([1-9][0-9]?|100)%$/;

export const DisruptionSpec = z
  .object({
    enabled: z
      .boolean()
      .default(true)
      .describe(
        "Render a PodDisruptionBudget <name> while spec.replicas is more than 1 (none with one replica: it would block every node drain); false deletes the one rendered",
      ),
    maxUnavailable: z
      .any()
      .refine(
        (v) =>
          (typeof v === "number" && Number.isInteger(v) && v >= 1 && v <= 100) ||
          (typeof v === "string" && PERCENT.test(v)),
        "must be a whole number from 1 to 100 or a percentage from 1% to 100%",
      )
      .meta({
        "x-kubernetes-int-or-string": true,
        pattern: PERCENT.source,
        "x-kubernetes-validations": [
          {
            rule: "type(self) == string || (self >= 1 && self <= 100)",
            message: "must be a whole number from 1 to 100 or a percentage from 1% to 100%",
          },
        ],
      })
      .default(1)
      .describe(
        "Runtime pods a voluntary disruption (a node drain, a cluster upgrade) may take down at once: a number, or a percentage of spec.replicas rounded up",
      ),
  })
  .describe("How many of the runtime's pods voluntary disruptions may take down at once");
export type DisruptionSpec = z.infer<typeof DisruptionSpec>;
