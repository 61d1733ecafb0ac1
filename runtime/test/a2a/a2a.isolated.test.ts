// The A2A face's tests (a2a.test.ts) on the isolated NATS layout (docs/scale.md): the runtime's
// tasks in its tenant's shared bucket, under its own account key, through its imports only.
import { onLayout } from "../support/a2a-layouts.ts";

// @ts-expect-error: the same test file, loaded again as a module of its own.
await onLayout("isolated", () => import("./a2a.test.ts?isolated"));
