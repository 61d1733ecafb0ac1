// What `kubectl ifp describe` prints, every line and every column of it, for an Agent with all
// it can show and for the sparse cases: a Relay with nothing rendered yet, an Agent without
// keys, credentials that do not expire, have expired or cannot be read.
import { describe, expect, it } from "vitest";
import { type Description, renderDescription } from "./describe.ts";

const NOW = Date.parse("2026-03-01T12:00:00Z");

const agent: Description = {
  kind: "Agent",
  namespace: "team",
  name: "alice",
  ready: { status: "True", reason: "RuntimeReady", message: "1/1 runtime replicas ready" },
  conditions: [
    { type: "Ready", status: "True", reason: "RuntimeReady", message: "1/1 runtime replicas ready" },
    { type: "Reconciling", status: "False", reason: "Reconciled" },
  ],
  agentId: "https://alice.example/agents/alice",
  endpoint: "https://alice.team.svc:8443",
  replicas: { desired: 1, current: 1, ready: 1 },
  children: [
    { kind: "ConfigMap", name: "alice-manifest" },
    { kind: "Deployment", name: "alice", ready: "1/1" },
    { kind: "Secret", name: "alice-handoff", keys: ["secret"] },
    { kind: "Secret", name: "alice-signing", keys: [] },
    { kind: "Service", name: "alice" },
  ],
  signingKeys: [
    {
      keyId: "key-1",
      status: "retired",
      publicKey: "PUBKEY1",
      retired: "2026-02-01T00:00:00Z",
      revokeAt: "2026-03-31T12:00:00Z",
    },
    { keyId: "key-0", status: "revoked", revoked: "2026-01-01T00:00:00Z" },
    { keyId: "key-2", status: "active", publicKey: "PUBKEY2", created: "2026-02-01T00:00:00Z" },
  ],
  encryptionKey: { keyId: "enc-1", publicKey: "ENCPUB" },
  peers: [
    { agentId: "https://bob.example/agents/bob", url: "https://bob.example", keys: 1 },
    { agentId: "https://carol.example/a", keys: 0 },
  ],
  peerSelector: { matchLabels: { team: "blue" } },
  resiliency: { failureThreshold: 5, coolDown: "30s", maxInFlight: 8, timeout: "15s" },
  circuits: {
    total: 2,
    circuits: [
      {
        destination: "https://bob.example/.well-known/agent/inbox",
        state: "open",
        failures: 5,
        open_until: "2026-03-01T12:00:30.000Z",
      },
      { destination: "relay:https://relay.example\u001b]52;c;eA==\u0007", state: "half-open", failures: 6 },
    ],
  },
  natsCredential: { secret: "alice-nats", expires: "2030-01-02T03:04:05.000Z", issued: "2026-03-01T11:00:00.000Z" },
};

const relay: Description = {
  kind: "Relay",
  namespace: "team",
  name: "hub",
  ready: { status: "Unknown" },
  conditions: [],
  url: "https://hub.relays.example",
  replicas: {},
  children: [],
  signingKeys: [],
  peers: [],
  stream: { name: "IFP_RELAY_HUB", messages: 12 },
  natsCredential: { secret: "hub-nats", error: "not found (no NATS accounts, or not issued yet)" },
};

const bare: Description = {
  kind: "Agent",
  namespace: "team",
  name: "broken",
  ready: { status: "False", reason: "InvalidSigningKey" },
  conditions: [{ type: "Ready", status: "False", reason: "InvalidSigningKey" }],
  replicas: { desired: 0, current: 0, ready: 0 },
  children: [],
  signingKeys: [],
  peers: [],
  circuits: { error: 'agent "broken" has no ready pod' },
  natsCredential: { secret: "broken-nats" },
};

describe("kubectl ifp describe, as printed", () => {
  it("an Agent with conditions, children, keys in rotation, peers and a NATS credential", () => {
    expect(renderDescription(agent, NOW)).toBe(AGENT);
  });

  it("a Relay with nothing rendered yet, a stream, and a credential that cannot be read", () => {
    expect(renderDescription(relay, NOW)).toBe(RELAY);
  });

  it("an Agent without keys, and credentials that do not expire, have expired, or are not known", () => {
    expect(renderDescription(bare, NOW)).toBe(BARE);
    expect(
      renderDescription({ ...bare, natsCredential: { secret: "broken-nats", expires: "2026-02-27T12:00:00Z" } }, NOW),
    ).toBe(BARE_EXPIRED);
    expect(renderDescription({ ...bare, natsCredential: undefined }, NOW)).toBe(BARE_NO_CREDENTIAL);
  });
});

const AGENT = `Agent:       team/alice
Agent ID:    https://alice.example/agents/alice
Endpoint:    https://alice.team.svc:8443
Ready:       True RuntimeReady — 1/1 runtime replicas ready
Replicas:    1 desired, 1 running, 1 ready

Conditions:
  TYPE          STATUS   REASON         MESSAGE
  Ready         True     RuntimeReady   1/1 runtime replicas ready
  Reconciling   False    Reconciled

Renders:
  KIND         NAME             DETAIL
  ConfigMap    alice-manifest
  Deployment   alice            1/1 ready
  Secret       alice-handoff    keys: secret
  Secret       alice-signing    keys: (none)
  Service      alice

Signing keys:
  KEY ID   STATUS    CREATED                RETIRED                REVOKE AT                       PUBLIC KEY
  key-1    retired                          2026-02-01T00:00:00Z   2026-03-31T12:00:00Z (in 30d)   PUBKEY1
  key-0    revoked                                                 2026-01-01T00:00:00Z
  key-2    active    2026-02-01T00:00:00Z                                                          PUBKEY2
Encryption key: enc-1 ENCPUB

Peers:
  AGENT ID                         URL                   KEYS
  https://bob.example/agents/bob   https://bob.example   1
  https://carol.example/a                                0
  and those of spec.peerSelector: {"matchLabels":{"team":"blue"}}

Outbound, per destination: the circuit opens after 5 failures in a row for 30s, then one probe; at most 8 in flight; 15s per request

Circuits not closed: 2
  DESTINATION                                   STATE       FAILURES   OPEN UNTIL
  https://bob.example/.well-known/agent/inbox   open        5          2026-03-01T12:00:30.000Z
  relay:https://relay.example                   half-open   6

NATS credential: Secret alice-nats, expires 2030-01-02T03:04:05.000Z (in 1403d), issued 60m ago
`;

const RELAY = `Relay:       team/hub
URL:         https://hub.relays.example
Ready:       Unknown
Replicas:    ? desired, 0 running, 0 ready

Renders:
  nothing yet

Agents served:
  none listed

Stream:      {"name":"IFP_RELAY_HUB","messages":12}

NATS credential: Secret hub-nats, not found (no NATS accounts, or not issued yet)
`;

/** The bare Agent's description, ending with its NATS credential line (none without one). */
const bareDescription = (credential?: string) => `Agent:       team/broken
Ready:       False InvalidSigningKey
Replicas:    0 desired, 0 running, 0 ready

Conditions:
  TYPE    STATUS   REASON              MESSAGE
  Ready   False    InvalidSigningKey

Renders:
  nothing yet

Signing keys:
  none published yet
Encryption key: none (cannot receive encrypted messages)

Peers:
  none listed

Circuits not closed: cannot be read (agent "broken" has no ready pod)
${credential === undefined ? "" : `\nNATS credential: ${credential}\n`}`;

const BARE = bareDescription("Secret broken-nats, does not expire");
const BARE_EXPIRED = bareDescription("Secret broken-nats, expires 2026-02-27T12:00:00Z (expired 2d ago)");
const BARE_NO_CREDENTIAL = bareDescription();
