// The gRPC binding of an Agent's A2A face under load (bench:inbox): SendMessage calls from a
// client @grpc/proto-loader generates from the contract's a2a.proto, over TLS on one channel
// (HTTP/2 multiplexes the calls in flight), with a bearer token in the metadata.
import { credentials, loadPackageDefinition, Metadata, type ServiceError } from "@grpc/grpc-js";
import { loadSync } from "@grpc/proto-loader";
import { drive, type LoadResult } from "./load.ts";

const PROTO = new URL("../src/contract/a2a.proto", import.meta.url).pathname;

/** SendMessage requests (returnImmediately) of about `bytes` of text each, with distinct message ids. */
export function grpcMessages(n: number, bytes = 1800): Record<string, unknown>[] {
  const text = "x".repeat(bytes);
  const run = Date.now().toString(36);
  return Array.from({ length: n }, (_, i) => ({
    message: { messageId: `g-${run}-${i}`, role: "ROLE_USER", parts: [{ text }] },
    configuration: { returnImmediately: true },
  }));
}

/** `requests` sent to the gRPC target `target` (<host>:<port>) with `concurrency` calls in flight; status 0 (OK) is accepted. */
export async function grpcLoad(
  target: string,
  requests: Record<string, unknown>[],
  concurrency: number,
  ca: string,
  token: string,
): Promise<LoadResult> {
  const definition = loadSync(PROTO, { keepCase: false, longs: Number, enums: String, defaults: false, oneofs: true });
  // The client proto-loader generates at run time.
  const A2AService = (loadPackageDefinition(definition) as any).lf.a2a.v1.A2AService;
  const client = new A2AService(target, credentials.createSsl(Buffer.from(ca)));
  const metadata = new Metadata();
  metadata.set("authorization", `Bearer ${token}`);
  metadata.set("a2a-version", "1.0");
  const one = (req: Record<string, unknown>) =>
    new Promise<number>((resolve) => {
      client.SendMessage(req, metadata, (err: ServiceError | null, res: { task?: unknown } | undefined) =>
        resolve(err ? err.code : res?.task ? 0 : -1),
      );
    });
  try {
    return await drive(requests, concurrency, one, 0);
  } finally {
    client.close();
  }
}
