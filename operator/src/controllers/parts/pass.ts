// What the parts of a runtime's pass share: the resource's spec as every part reads it, and what
// earlier parts found for later ones (the Secrets' names, the exposure plan, the NATS account).
import type { DeploymentSettings } from "../../../../runtime/src/resources/deployment.ts";
import type { ExposeSpec } from "../../../../runtime/src/resources/expose.ts";
import type { SigningOutcome } from "../agent/signing.ts";
import type { Blocker } from "../conditions.ts";
import type { ExposurePlan } from "../exposure-apply.ts";
import type { Pass } from "../pipeline.ts";
import type { StreamObservation } from "../relay/status.ts";
import type { TlsSpecInput } from "../tls.ts";
import type { TrustRef } from "../trust.ts";

/** The spec fields every runtime (Agent and Relay) has and the common parts read. */
export interface RuntimeSpec {
  spec: {
    image?: string;
    tls?: TlsSpecInput & { trust?: TrustRef[] };
    expose?: ExposeSpec;
    deployment?: DeploymentSettings;
  };
}

/** What the parts found, for the parts after them and the status. */
export interface Found {
  /** The Secret the pods mount as their serving certificate. */
  tlsSecret?: string;
  /** A certificate still being issued. */
  tlsWaiting?: Blocker;
  /** The exposure children to render, and the Gateway API versions served. */
  exposure?: ExposurePlan;
  /** The runtime's own NATS account, when the operator issues its credential. */
  natsAccount?: string;
  /** An Agent's signing key, once it is usable. */
  signing?: Exclude<SigningOutcome, { blocker: unknown }>;
  /** A Relay's stream as this pass left it. */
  stream?: StreamObservation;
}

export type RuntimePass<R extends RuntimeSpec = RuntimeSpec> = Pass<R, Found>;

/** The reasons of a TLS blocker that hold the workload: the pods would mount a Secret that is not there or not theirs. */
export const TLS_HOLDS = ["TLSSecretMissing", "InvalidTLSSecret", "ForeignSecret"];
