// Where an agent's A2A face answers (docs/a2a.md): the runtime serves these paths, the operator
// reports them in the Agent's status.

/** The agent card. */
export const A2A_CARD_PATH = "/.well-known/agent-card.json";
/** The JWKS the card's signature points at (`jku`). */
export const A2A_JWKS_PATH = "/.well-known/a2a/jwks.json";
/** The JSON-RPC binding's endpoint (POST). */
export const A2A_JSONRPC_PATH = "/a2a/v1";
/** The HTTP+JSON binding's base: its paths (/message:send, /tasks/{id}, …) follow it. */
export const A2A_REST_PATH = "/a2a/rest";

/**
 * The gRPC binding's target for an agent at `base` listening on `port`: `<the base URL's host>:<port>`,
 * what the official SDKs' gRPC clients dial as it stands (an https:// URL is no gRPC target).
 */
export function a2aGrpcTarget(base: string, port: number): string {
  return `${new URL(base).hostname}:${port}`;
}

/** The A2A URLs of an agent at `base` (its public base URL), with the gRPC target when it listens on `grpcPort`. */
export function a2aUrls(
  base: string,
  grpcPort?: number,
): { card: string; jsonRpc: string; rest: string; grpc?: string } {
  const b = base.replace(/\/+$/, "");
  return {
    card: `${b}${A2A_CARD_PATH}`,
    jsonRpc: `${b}${A2A_JSONRPC_PATH}`,
    rest: `${b}${A2A_REST_PATH}`,
    ...(grpcPort === undefined ? {} : { grpc: a2aGrpcTarget(b, grpcPort) }),
  };
}
