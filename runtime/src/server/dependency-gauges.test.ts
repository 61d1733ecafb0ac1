// The gauges of what a runtime depends on, read at scrape time: its NATS connection and the
// expiry of the certificate in its certificate file, renewed in place.
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { createCA } from "../../../operator/src/concerns/tls/certs.ts";
import { tempDir } from "../../../e2e/support/process.ts";
import { createRuntimeMetrics, dependencyGauges } from "./metrics.ts";

const value = async (metrics: ReturnType<typeof createRuntimeMetrics>, name: string) =>
  (await metrics.registry.getSingleMetric(name)!.get()).values[0]?.value;

describe("dependencyGauges", () => {
  it("says whether NATS is connected at each scrape", async () => {
    let connected = true;
    const metrics = createRuntimeMetrics("agent");
    dependencyGauges(metrics, { natsConnected: () => connected, certFile: "/nonexistent" });
    expect(await value(metrics, "ifp_nats_connected")).toBe(1);
    connected = false;
    expect(await value(metrics, "ifp_nats_connected")).toBe(0);
    expect(await metrics.registry.metrics()).toMatch(/^ifp_nats_connected\{mode="agent"\} 0$/m);
  });

  it("gives the expiry of the certificate file, follows its renewal, and keeps the last value when it cannot read it", async () => {
    const dir = tempDir("ifp-cert-gauge-");
    const file = join(dir, "tls.crt");
    const ca = await createCA();
    const first = await ca.issue({ commonName: "a", dnsNames: ["a.example"], validityMs: 2 * 86_400_000 });
    writeFileSync(file, first.cert);
    const metrics = createRuntimeMetrics("relay");
    dependencyGauges(metrics, { natsConnected: () => true, certFile: file });
    // Certificates carry whole seconds.
    const seconds = (d: Date) => Math.floor(d.getTime() / 1000);
    expect(await value(metrics, "ifp_tls_certificate_expiry_timestamp_seconds")).toBe(seconds(first.notAfter));
    const renewed = await ca.issue({ commonName: "a", dnsNames: ["a.example"], validityMs: 30 * 86_400_000 });
    writeFileSync(file, renewed.cert);
    expect(await value(metrics, "ifp_tls_certificate_expiry_timestamp_seconds")).toBe(seconds(renewed.notAfter));
    writeFileSync(file, "not a certificate");
    expect(await value(metrics, "ifp_tls_certificate_expiry_timestamp_seconds")).toBe(seconds(renewed.notAfter));
  });
});
