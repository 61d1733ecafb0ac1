// The A2A push notifications' tests (a2a-push.test.ts) on the isolated NATS layout (docs/scale.md):
// the configs beside the tasks in the tenant's shared bucket, followed through its republish.
import { onLayout } from "../support/a2a-layouts.ts";

// @ts-expect-error: the same test file, loaded again as a module of its own.
await onLayout("isolated", () => import("./a2a-push.test.ts?isolated"));
