import { describe, expect, it } from "vitest";
import {
  carrierOf,
  extractCarrier,
  messageContext,
  startSpan,
  tracesExportersFromEnv,
  tracingEnabled,
  withMessageContext,
} from "./tracing.ts";

describe("tracesExportersFromEnv: what the OTEL_* variables ask for", () => {
  it.each([
    [{}, []],
    [{ OTEL_SERVICE_NAME: "x", OTEL_TRACES_SAMPLER: "always_on" }, []],
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: "http://c:4318" }, ["otlp"]],
    [{ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: "http://c:4318/v1/traces" }, ["otlp"]],
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: "  " }, []],
    [{ OTEL_TRACES_EXPORTER: "console" }, ["console"]],
    [{ OTEL_TRACES_EXPORTER: "otlp, console,otlp" }, ["otlp", "console"]],
    [{ OTEL_TRACES_EXPORTER: "none", OTEL_EXPORTER_OTLP_ENDPOINT: "http://c:4318" }, []],
    [{ OTEL_TRACES_EXPORTER: "console,none" }, []],
    [{ OTEL_SDK_DISABLED: "true", OTEL_TRACES_EXPORTER: "otlp" }, []],
    [{ OTEL_SDK_DISABLED: "TRUE", OTEL_EXPORTER_OTLP_ENDPOINT: "http://c:4318" }, []],
    [{ OTEL_SDK_DISABLED: "false", OTEL_EXPORTER_OTLP_ENDPOINT: "http://c:4318" }, ["otlp"]],
  ])("%j → %j", (env, want) => {
    expect(tracesExportersFromEnv(env).exporters).toEqual(want);
  });

  it("names exporters it does not have", () => {
    expect(tracesExportersFromEnv({ OTEL_TRACES_EXPORTER: "zipkin,otlp,jaeger" })).toEqual({
      exporters: ["otlp"],
      unknown: ["zipkin", "jaeger"],
    });
  });
});

describe("with tracing off (no configuration)", () => {
  it("reads and writes no trace context, and makes only non-recording spans", () => {
    expect(tracingEnabled()).toBe(false);
    const message = {
      headers: {
        extensions: { "trace-context": { traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" } },
      },
    };
    expect(messageContext(message)).toBeUndefined();
    expect(extractCarrier(message.headers.extensions["trace-context"])).toBeUndefined();
    expect(carrierOf()).toBeUndefined();
    const untouched: { headers: { message_id: string; extensions?: Record<string, unknown> } } = {
      headers: { message_id: "m" },
    };
    expect(withMessageContext(untouched)).toBe(untouched);
    expect(startSpan("x").isRecording()).toBe(false);
  });
});
