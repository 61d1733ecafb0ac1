// The killed runtime's test (killed-runtime.test.ts) on the isolated NATS layout (docs/scale.md):
// the inbox in the tenant's shared stream, the hand-off consumer the operator made in it.
import { onLayout } from "../support/a2a-layouts.ts";

// @ts-expect-error: the same test file, loaded again as a module of its own.
await onLayout("isolated", () => import("./killed-runtime.test.ts?isolated"));
