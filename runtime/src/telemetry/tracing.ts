// The runtime's OpenTelemetry tracing (docs/tracing.md), set up from the OTEL_* variables only
// and a no-op without them: the exporters, spans, and the trace context carried in messages and
// in NATS headers.
import {
  context,
  diag,
  DiagLogLevel,
  INVALID_SPAN_CONTEXT,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Attributes,
  type Context,
  type Span,
  type TimeInput,
} from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-http";
import { defaultResource, detectResources, envDetector, resourceFromAttributes } from "@opentelemetry/resources";
import {
  BasicTracerProvider,
  BatchSpanProcessor,
  ConsoleSpanExporter,
  type SpanExporter,
} from "@opentelemetry/sdk-trace-base";
import { ATTR_SERVICE_NAME, ATTR_SERVICE_VERSION } from "@opentelemetry/semantic-conventions";
import type { Logger } from "pino";

export { SpanKind } from "@opentelemetry/api";
export type { Span } from "@opentelemetry/api";

/**
 * OpenTelemetry tracing of the runtime (docs/tracing.md), configured only by the standard
 * OTEL_* environment variables. Without OTEL_TRACES_EXPORTER or an OTLP endpoint nothing is
 * set up: every helper below then returns at its first line, and no span, context or header is
 * ever made, so a runtime without tracing pays one boolean test per call site.
 */

/** The message extension that carries the W3C trace context: `{ traceparent, tracestate? }`. */
export const TRACE_CONTEXT_EXTENSION = "trace-context";
/** Instrumentation scope of the runtime's spans. */
export const TRACER_NAME = "ifp-runtime";

/** Span attribute names (docs/tracing.md). */
export const SPAN_ATTRIBUTES = {
  messageId: "ifp.message_id",
  conversationId: "ifp.conversation_id",
  sender: "ifp.sender",
  recipient: "ifp.recipient",
  recipients: "ifp.recipients",
  agent: "ifp.agent_id",
  relay: "ifp.relay",
  attempt: "ifp.attempt",
  outcome: "ifp.outcome",
  route: "ifp.route",
  transport: "ifp.transport",
  duplicate: "ifp.duplicate",
  errorCode: "ifp.error_code",
  status: "http.response.status_code",
  url: "url.full",
} as const;

let enabled = false;
const propagator = new W3CTraceContextPropagator();
const NOOP_SPAN: Span = trace.wrapSpanContext(INVALID_SPAN_CONTEXT);

/** Whether spans are recorded in this process. */
export const tracingEnabled = (): boolean => enabled;

export type TracesExporter = "otlp" | "console";

/**
 * Which exporters the environment asks for (OpenTelemetry's SDK configuration): none when
 * OTEL_SDK_DISABLED is true or OTEL_TRACES_EXPORTER is `none`; the listed ones when it is set;
 * otherwise OTLP when an endpoint (OTEL_EXPORTER_OTLP_ENDPOINT or
 * OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is given, and nothing at all when it is not — unlike the
 * SDK's own default, so that a runtime nobody configured never tries to reach localhost:4318.
 * Unknown names are returned in `unknown`.
 */
export function tracesExportersFromEnv(env: NodeJS.ProcessEnv): { exporters: TracesExporter[]; unknown: string[] } {
  if ((env.OTEL_SDK_DISABLED ?? "").trim().toLowerCase() === "true") return { exporters: [], unknown: [] };
  const listed = (env.OTEL_TRACES_EXPORTER ?? "")
    .split(",")
    .map((s) => s.trim().toLowerCase())
    .filter(Boolean);
  if (!listed.length) {
    const endpoint = (env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT ?? env.OTEL_EXPORTER_OTLP_ENDPOINT ?? "").trim();
    return { exporters: endpoint ? ["otlp"] : [], unknown: [] };
  }
  if (listed.includes("none")) return { exporters: [], unknown: [] };
  const exporters = [...new Set(listed.filter((e): e is TracesExporter => e === "otlp" || e === "console"))];
  return { exporters, unknown: listed.filter((e) => e !== "otlp" && e !== "console") };
}

export interface Tracing {
  enabled: boolean;
  /** Export what is buffered and stop; resolves within a few seconds even when the collector is gone. */
  shutdown(): Promise<void>;
}

/**
 * Set tracing up for this process from its environment: one per process (the tracer provider
 * is global), by the command-line entry point. `mode` names the runtime's default
 * service.name (`ifp-runtime-agent`, `ifp-runtime-relay`); OTEL_SERVICE_NAME and
 * OTEL_RESOURCE_ATTRIBUTES override it. Sampling follows OTEL_TRACES_SAMPLER (default
 * parentbased_always_on), batching OTEL_BSP_*, the exporter OTEL_EXPORTER_OTLP_*.
 */
export function startTracing(opts: {
  mode: string;
  version?: string;
  logger: Logger;
  env?: NodeJS.ProcessEnv;
  attributes?: Attributes;
}): Tracing {
  const env = opts.env ?? process.env;
  const { exporters, unknown } = tracesExportersFromEnv(env);
  if (unknown.length)
    opts.logger.warn(
      { exporters: unknown },
      "OTEL_TRACES_EXPORTER names exporters this runtime does not have (it has otlp and console); ignored",
    );
  if (!exporters.length) return { enabled: false, shutdown: async () => {} };
  const protocol = env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL ?? env.OTEL_EXPORTER_OTLP_PROTOCOL;
  if (protocol && protocol !== "http/json" && exporters.includes("otlp")) {
    opts.logger.warn(
      { protocol },
      "the OTLP trace exporter sends http/json; OTEL_EXPORTER_OTLP_PROTOCOL is not followed",
    );
  }
  // The SDK's own diagnostics (a collector that cannot be reached, ...) go to the runtime's log.
  const diagLog = opts.logger.child({ component: "opentelemetry" });
  diag.setLogger(
    {
      error: (msg, ...args) => diagLog.warn({ args: args.map(String) }, msg),
      warn: (msg, ...args) => diagLog.warn({ args: args.map(String) }, msg),
      info: (msg) => diagLog.debug(msg),
      debug: () => {},
      verbose: () => {},
    },
    { logLevel: DiagLogLevel.WARN, suppressOverrideMessage: true },
  );
  const resource = defaultResource()
    .merge(
      resourceFromAttributes({
        [ATTR_SERVICE_NAME]: `ifp-runtime-${opts.mode}`,
        ...(opts.version ? { [ATTR_SERVICE_VERSION]: opts.version } : {}),
        "ifp.mode": opts.mode,
        ...opts.attributes,
      }),
    )
    .merge(detectResources({ detectors: [envDetector] }));
  const spanExporters: SpanExporter[] = exporters.map((e) =>
    e === "otlp" ? new OTLPTraceExporter() : new ConsoleSpanExporter(),
  );
  const provider = new BasicTracerProvider({
    resource,
    spanProcessors: spanExporters.map((e) => new BatchSpanProcessor(e)),
  });
  const contextManager = new AsyncLocalStorageContextManager().enable();
  context.setGlobalContextManager(contextManager);
  trace.setGlobalTracerProvider(provider);
  enabled = true;
  opts.logger.info({ exporters }, "tracing on");
  return {
    enabled: true,
    async shutdown() {
      enabled = false;
      const bounded = new Promise<void>((resolve) => setTimeout(resolve, 5_000).unref());
      await Promise.race([
        provider.shutdown().catch((err: unknown) => diagLog.warn({ err: String(err) }, "tracing shutdown failed")),
        bounded,
      ]);
      trace.disable();
      context.disable();
    },
  };
}

/** W3C trace context as carried in a message or a NATS header set. */
export interface TraceCarrier {
  traceparent: string;
  tracestate?: string;
}

const getter = {
  keys: (c: Record<string, string>) => Object.keys(c),
  get: (c: Record<string, string>, k: string) => c[k],
};
const setter = { set: (c: Record<string, string>, k: string, v: string) => void (c[k] = v) };

/** The context a carrier continues, or undefined when it holds no valid W3C traceparent. */
export function extractCarrier(carrier: unknown): Context | undefined {
  if (!enabled || !carrier || typeof carrier !== "object") return undefined;
  const { traceparent, tracestate } = carrier as Record<string, unknown>;
  // W3C traceparent is 55 characters in version 00; later versions may add fields, never megabytes.
  if (typeof traceparent !== "string" || traceparent.length > 256) return undefined;
  const c: Record<string, string> = { traceparent };
  if (typeof tracestate === "string" && tracestate.length <= 512) c.tracestate = tracestate;
  const ctx = propagator.extract(ROOT_CONTEXT, c, getter);
  return trace.getSpanContext(ctx) ? ctx : undefined;
}

/** The carrier of a context's span, or undefined when it has no valid span context. */
export function carrierOf(ctx: Context = context.active()): TraceCarrier | undefined {
  if (!enabled) return undefined;
  const c: Record<string, string> = {};
  propagator.inject(ctx, c, setter);
  return c.traceparent
    ? { traceparent: c.traceparent, ...(c.tracestate ? { tracestate: c.tracestate } : {}) }
    : undefined;
}

type WithExtensions = { headers: { extensions?: Record<string, unknown> } };

/** The trace context a message carries in headers.extensions["trace-context"] (ignored when malformed). */
export function messageContext(message: WithExtensions): Context | undefined {
  if (!enabled) return undefined;
  return extractCarrier(message.headers.extensions?.[TRACE_CONTEXT_EXTENSION]);
}

/**
 * The message with the current span's trace context in headers.extensions["trace-context"]
 * (replacing one it had), before it is signed; the message itself when tracing is off.
 */
export function withMessageContext<M extends WithExtensions>(message: M, ctx: Context = context.active()): M {
  const carrier = carrierOf(ctx);
  if (!carrier) return message;
  return {
    ...message,
    headers: { ...message.headers, extensions: { ...message.headers.extensions, [TRACE_CONTEXT_EXTENSION]: carrier } },
  };
}

/** Sets `traceparent`/`tracestate` on a NATS header set from the active span (stored copies, the inbox). */
export function injectHeaders(h: { set(k: string, v: string): void }): void {
  const carrier = carrierOf();
  if (!carrier) return;
  h.set("traceparent", carrier.traceparent);
  if (carrier.tracestate) h.set("tracestate", carrier.tracestate);
}

/** The context stored in a NATS header set by injectHeaders(). */
export function headersContext(h: { get(k: string): string } | undefined): Context | undefined {
  if (!enabled || !h) return undefined;
  const traceparent = h.get("traceparent");
  return traceparent ? extractCarrier({ traceparent, tracestate: h.get("tracestate") || undefined }) : undefined;
}

export interface SpanOptions {
  kind?: SpanKind;
  /** The parent: a remote context from a message or headers; the active context when undefined. */
  parent?: Context;
  /** Attributes, or a function giving them (not called when tracing is off). */
  attributes?: Attributes | (() => Attributes);
  startTime?: TimeInput;
}

/** Start a span (a no-op span when tracing is off); the caller ends it. */
export function startSpan(name: string, opts: SpanOptions = {}): Span {
  if (!enabled) return NOOP_SPAN;
  const attributes = typeof opts.attributes === "function" ? opts.attributes() : opts.attributes;
  return trace
    .getTracer(TRACER_NAME)
    .startSpan(
      name,
      { kind: opts.kind ?? SpanKind.INTERNAL, attributes, startTime: opts.startTime },
      opts.parent ?? context.active(),
    );
}

/**
 * Run `fn` in a span that is active for everything it calls (so stored headers and composed
 * messages pick it up), ending it when `fn` settles; a thrown error marks the span as failed.
 * With tracing off, just `fn(noop span)`.
 */
export async function inSpan<T>(name: string, opts: SpanOptions, fn: (span: Span) => Promise<T>): Promise<T> {
  if (!enabled) return fn(NOOP_SPAN);
  const span = startSpan(name, opts);
  try {
    return await context.with(trace.setSpan(opts.parent ?? context.active(), span), () => fn(span));
  } catch (err) {
    failSpan(span, err);
    throw err;
  } finally {
    span.end();
  }
}

/** Mark a span as failed by an error: its status, its `error.type` and, for protocol errors, their code. */
export function failSpan(span: Span, err: unknown, status?: number): void {
  if (!enabled) return;
  const e = err as { code?: unknown; statusCode?: unknown; message?: unknown; name?: unknown };
  const code = typeof e?.code === "string" ? e.code : undefined;
  if (code) span.setAttribute(SPAN_ATTRIBUTES.errorCode, code);
  const s = status ?? (typeof e?.statusCode === "number" ? e.statusCode : undefined);
  if (s !== undefined) span.setAttribute(SPAN_ATTRIBUTES.status, s);
  span.setAttribute("error.type", code ?? (typeof e?.name === "string" ? e.name : "error"));
  span.setStatus({
    code: SpanStatusCode.ERROR,
    message: typeof e?.message === "string" ? e.message.slice(0, 300) : undefined,
  });
}

/** The attributes naming a message (never its body). */
export function messageAttributes(message: {
  headers: { message_id: string; conversation_id: string; from: { agent: string } };
}): Attributes {
  const h = message.headers;
  return {
    [SPAN_ATTRIBUTES.messageId]: h.message_id,
    [SPAN_ATTRIBUTES.conversationId]: h.conversation_id,
    [SPAN_ATTRIBUTES.sender]: h.from.agent,
  };
}
