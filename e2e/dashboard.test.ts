// The monitoring the chart offers: the ServiceMonitor, PodMonitor and Grafana dashboard it
// renders, and a dashboard whose every query names a metric that a real agent, relay and
// operator export (scraped from them, not listed by hand).
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse, parseAllDocuments } from "yaml";
import { INPUT_SERIES } from "./support/alert-cases.ts";
import { toolPath } from "./tools/tools.ts";
import { startControlPlane, type ControlPlane } from "./support/controlplane.ts";
import { labels } from "../operator/src/reconcile/names.ts";
import { runtimeDeployment } from "../operator/src/concerns/workload/workload.ts";
import { startManager, type RunningManager } from "../operator/src/commands/manager.ts";
import { capturedLog } from "../operator/test/support/helpers.ts";
import { identity, peerOf, signed } from "../runtime/test/support/fixtures.ts";
import {
  runAgent,
  scrapeMetrics,
  startHandler,
  type Tls,
  withNatsAndTls,
} from "../runtime/test/support/agent-harness.ts";
import { alice, clientOf, relayEnv, runRelay, type RelayEnv } from "../runtime/test/support/relay-harness.ts";
import { Histogram, type Registry } from "prom-client";
import { createRuntimeMetrics, dependencyGauges, streamKeeperGauges } from "../runtime/src/server/metrics.ts";
import type { NatsServer } from "./support/nats.ts";
import type { RunningRelay } from "../runtime/src/relay/main.ts";

const CHART = "charts/ifp-operator";
const DASHBOARD = `${CHART}/dashboards/ifp.json`;
type Obj = Record<string, any>;

const helm = (...args: string[]) => {
  const r = spawnSync(toolPath("helm"), ["template", "ifp", CHART, "--namespace", "ifp-system", ...args], {
    encoding: "utf8",
    timeout: 30_000,
  });
  if (r.error) throw r.error;
  return {
    status: r.status,
    out: r.stdout + r.stderr,
    objects:
      r.status === 0
        ? (parseAllDocuments(r.stdout)
            .map((d) => d.toJSON())
            .filter(Boolean) as Obj[])
        : [],
  };
};

/** Every expr of every panel and template variable in the dashboard. */
function queries(dashboard: Obj): string[] {
  const out: string[] = [];
  const walk = (panels: Obj[]) => {
    for (const p of panels) {
      for (const t of p.targets ?? []) out.push(t.expr);
      walk(p.panels ?? []);
    }
  };
  walk(dashboard.panels);
  for (const v of dashboard.templating.list)
    if (v.type === "query") out.push(typeof v.query === "string" ? v.query : v.query.query);
  return out;
}

const PROMQL_WORDS = new Set([
  "sum",
  "max",
  "min",
  "avg",
  "count",
  "rate",
  "irate",
  "increase",
  "histogram_quantile",
  "by",
  "without",
  "on",
  "ignoring",
  "label_values",
  "and",
  "or",
  "unless",
  "le",
]);

/** The metric names a PromQL expression reads: identifiers followed by `{`, `[` or `)` that are not functions, keywords or labels. */
export function metricNames(expr: string): string[] {
  const stripped = expr
    .replace(/"(?:[^"\\]|\\.)*"/g, '""')
    .replace(/\b(by|without)\s*\([^)]*\)/g, "")
    // label_values(metric, label): the label is not a metric.
    .replace(/(label_values\(.*),\s*\w+\s*\)/g, "$1)");
  const names = new Set<string>();
  for (const m of stripped.matchAll(/([a-zA-Z_:][\w:]*)\s*(\{|\[|\)|,)/g)) {
    const name = m[1]!;
    if (PROMQL_WORDS.has(name)) continue;
    // A label matcher inside braces (name=~...) is never followed by { [ ) or ,.
    names.add(name);
  }
  return [...names];
}

/** The metric families an exposition declares (# TYPE lines), with the series names a histogram adds. */
function exported(text: string): Set<string> {
  const out = new Set<string>();
  for (const m of text.matchAll(/^# TYPE (\S+) (\S+)$/gm)) {
    out.add(m[1]!);
    if (m[2] === "histogram") for (const s of ["_bucket", "_sum", "_count"]) out.add(`${m[1]}${s}`);
  }
  return out;
}

/** The label names a PromQL expression reads: its matchers, grouping lists and label_values' label. */
export function labelNames(expr: string): string[] {
  const stripped = expr.replace(/"(?:[^"\\]|\\.)*"/g, '""');
  const names = new Set<string>();
  for (const [, inside] of stripped.matchAll(/\{([^}]*)\}/g))
    for (const m of inside!.matchAll(/([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)/g)) names.add(m[1]!);
  for (const [, , list] of stripped.matchAll(/\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)/g)) {
    for (const l of list!
      .split(",")
      .map((x) => x.trim())
      .filter(Boolean))
      names.add(l);
  }
  for (const m of stripped.matchAll(/label_values\(.*,\s*(\w+)\s*\)/g)) names.add(m[1]!);
  return [...names];
}

/** The label names each series of an exposition carries in its samples (the histograms' `le`, the default labels among them). */
function carried(text: string): Map<string, Set<string>> {
  const out = new Map<string, Set<string>>();
  for (const m of text.matchAll(/^([a-zA-Z_:][\w:]*)\{(.*)\} \S+$/gm)) {
    const set = out.get(m[1]!) ?? out.set(m[1]!, new Set()).get(m[1]!)!;
    for (const l of m[2]!.matchAll(/(\w+)="/g)) set.add(l[1]!);
  }
  return out;
}

/** The label names each metric of a registry declares, by the series names it exports: those of metrics no traffic has touched yet too. */
function declared(registry: Registry): Map<string, Set<string>> {
  const out = new Map<string, Set<string>>();
  for (const m of registry.getMetricsAsArray()) {
    // prom-client keeps the labelNames a metric was created with on the metric.
    const names = new Set((m as unknown as { labelNames?: string[] }).labelNames ?? []);
    if (!(m instanceof Histogram)) {
      out.set(m.name, names);
      continue;
    }
    for (const series of [`${m.name}_sum`, `${m.name}_count`]) out.set(series, names);
    out.set(`${m.name}_bucket`, new Set([...names, "le"]));
  }
  return out;
}

/**
 * Labels the Prometheus Operator gives every target it scrapes: a PodMonitor's pods get these,
 * a ServiceMonitor's endpoints `service` as well.
 */
const TARGET_LABELS = ["job", "instance", "namespace", "pod", "container", "endpoint"];

/** Prometheus' name for a Kubernetes label in __meta_kubernetes_pod_label_<name>. */
const metaName = (label: string) => label.replace(/[^a-zA-Z0-9_]/g, "_");

/**
 * The labels a monitor's targets get: the Prometheus Operator's own, and each relabeling's
 * target label whose source labels the scraped pods carry.
 */
function monitorLabels(endpoints: Obj[], podLabels: Record<string, string>, extra: string[] = []): Set<string> {
  const out = new Set([...TARGET_LABELS, ...extra]);
  const pod = new Set(Object.keys(podLabels).map((k) => `__meta_kubernetes_pod_label_${metaName(k)}`));
  for (const e of endpoints) {
    for (const r of e.relabelings ?? []) {
      const sources: string[] = r.sourceLabels ?? [];
      if (r.targetLabel && sources.every((l) => !l.startsWith("__meta_kubernetes_pod_label_") || pod.has(l)))
        out.add(r.targetLabel);
    }
  }
  return out;
}

describe("chart monitoring objects", () => {
  it("renders none of them by default", () => {
    const r = helm();
    expect(r.status, r.out).toBe(0);
    expect(r.objects.filter((o) => ["ServiceMonitor", "PodMonitor"].includes(o.kind))).toEqual([]);
    expect(r.objects.find((o) => o.kind === "ConfigMap" && o.metadata.name.endsWith("-dashboard"))).toBeUndefined();
  });

  it("renders a ServiceMonitor for the operator, a PodMonitor for the runtimes and the dashboard ConfigMap", () => {
    const r = helm(
      "--set",
      "metrics.serviceMonitor.enabled=true",
      "--set",
      "metrics.podMonitor.enabled=true",
      "--set",
      "metrics.dashboard.enabled=true",
      "--set",
      "metrics.podMonitor.labels.release=prom",
    );
    expect(r.status, r.out).toBe(0);
    const sm = r.objects.find((o) => o.kind === "ServiceMonitor")!;
    const svc = r.objects.find(
      (o) => o.kind === "Service" && o.metadata.labels["app.kubernetes.io/component"] === "operator",
    )!;
    // The ServiceMonitor selects the operator's Service by labels it carries, and scrapes a port it has.
    for (const [k, v] of Object.entries(sm.spec.selector.matchLabels)) expect(svc.metadata.labels[k], k).toBe(v);
    expect(svc.spec.ports.map((p: Obj) => p.name)).toContain(sm.spec.endpoints[0].port);

    // The PodMonitor selects what the operator renders for an Agent's and a Relay's runtime pods.
    const pm = r.objects.find((o) => o.kind === "PodMonitor")!;
    expect(pm.metadata.labels.release).toBe("prom");
    expect(pm.spec.namespaceSelector).toEqual({ any: true });
    for (const kind of ["Agent", "Relay"] as const) {
      const owner = { apiVersion: "ifp.dev/v1alpha1", kind, metadata: { name: "x", namespace: "n", uid: "u" } };
      const podLabels = labels(owner as never);
      for (const [k, v] of Object.entries(pm.spec.selector.matchLabels)) expect(podLabels[k], k).toBe(v);
      const d = runtimeDeployment({
        owner: owner as never,
        mode: kind === "Agent" ? "agent" : "relay",
        replicas: 1,
        image: "i",
        settings: { runtimeImage: "i", runtimeImagePullPolicy: "IfNotPresent", natsUrl: "nats://n:4222" } as never,
        tlsSecret: "t",
        configHash: "h",
      });
      const c = d.spec!.template.spec!.containers[0]!;
      const port = c.ports!.find((p) => p.name === pm.spec.podMetricsEndpoints[0].port);
      expect(port?.containerPort).toBe(9090);
      expect(c.args).toContain("--metrics-port=9090");
    }

    const cm = r.objects.find((o) => o.kind === "ConfigMap" && o.metadata.name.endsWith("-dashboard"))!;
    expect(cm.metadata.labels.grafana_dashboard).toBe("1");
    expect(JSON.parse(cm.data["ifp.json"])).toEqual(JSON.parse(readFileSync(DASHBOARD, "utf8")));
  });

  it("refuses bad monitoring values, naming them", () => {
    const bad = helm("--set", "metrics.serviceMonitor.interval=forever");
    expect(bad.status).not.toBe(0);
    expect(bad.out).toMatch(/interval/);
    const unknown = helm("--set", "metrics.podMonitor.enable=true");
    expect(unknown.status).not.toBe(0);
    expect(unknown.out).toMatch(/enable/);
  });
});

describe("the Grafana dashboard", () => {
  let nats: NatsServer;
  let tls: Tls;
  withNatsAndTls((n, t) => ([nats, tls] = [n, t]));
  let cp: ControlPlane;
  let operator: RunningManager;
  let env: RelayEnv;
  let relay: RunningRelay;
  beforeAll(async () => {
    cp = await startControlPlane({
      crds: ["crds/agents.ifp.dev.yaml", "crds/relays.ifp.dev.yaml"],
      controllerManager: false,
    });
    operator = await startManager({
      kubeconfig: cp.kubeconfig,
      settings: {
        runtimeImage: "img:test",
        runtimeImagePullPolicy: "IfNotPresent",
        natsUrl: "nats://nats:4222",
      } as never,
      watchNamespaces: [],
      resyncMs: 60_000,
      log: capturedLog().log,
      healthPort: 0,
      metricsPort: 0,
    });
    await operator.started;
    env = await relayEnv();
    relay = await runRelay(env);
  }, 300_000);
  afterAll(async () => {
    await operator?.stop();
    await relay?.close();
    await env?.close();
    await cp?.stop();
  });

  /** The expositions of a real agent, relay and operator after a little traffic (an accepted message, a publish), scraped once for the tests below. */
  let scraped: Promise<{ agent: string; relay: string; operator: string }> | undefined;
  const scrapeAll = () =>
    (scraped ??= (async () => {
      const handler = await startHandler();
      const pete = identity("pete-agent");
      const agent = await runAgent({
        self: identity("dash-agent"),
        natsUrl: nats.url,
        tls,
        spec: { peers: [peerOf(pete)], handler: { url: handler.url } },
      });
      try {
        expect((await agent.post(signed(pete, "dash-agent"))).status).toBe(202);
        expect((await clientOf(env, relay, alice).publish(signed(alice, "bob-agent"))).status).toBe(202);
        return {
          agent: await agent.scrape(),
          relay: await scrapeMetrics(relay.metricsUrl),
          operator: await (await fetch(`${operator.metricsUrl}/metrics`)).text(),
        };
      } finally {
        await agent.close();
        await handler.close();
      }
    })());

  it("parses, and every metric its queries use is exported by a real agent, relay or operator", async () => {
    const dashboard = JSON.parse(readFileSync(DASHBOARD, "utf8"));
    expect(dashboard.uid).toBe("ifp-overview");
    const texts = await scrapeAll();
    const names = new Set([...exported(texts.agent), ...exported(texts.relay), ...exported(texts.operator)]);
    const used = [...new Set(queries(dashboard).flatMap(metricNames))].sort();
    expect(used.length).toBeGreaterThan(20);
    // Each family the issue asks a panel for is there.
    for (const n of [
      "ifp_inbox_messages_accepted_total",
      "ifp_relay_mailbox_depth",
      "ifp_outbox_oldest_age_seconds",
      "controller_runtime_reconcile_total",
      "workqueue_depth",
    ])
      expect(used).toContain(n);
    expect(used.filter((n) => !names.has(n))).toEqual([]);
  });

  it("queries only labels its metrics carry or the chart's PodMonitor and ServiceMonitor give them", async () => {
    const dashboard = JSON.parse(readFileSync(DASHBOARD, "utf8"));
    const r = helm("--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.podMonitor.enabled=true");
    expect(r.status, r.out).toBe(0);
    const podMonitor = r.objects.find((o) => o.kind === "PodMonitor")!;
    const serviceMonitor = r.objects.find((o) => o.kind === "ServiceMonitor")!;
    // The runtimes' pods as the operator renders them (what the PodMonitor's relabelings read); the operator's own pod.
    const runtimePod = (kind: "Agent" | "Relay") =>
      labels({ apiVersion: "ifp.dev/v1alpha1", kind, metadata: { name: "x", namespace: "n", uid: "u" } } as never);
    const operatorPod = r.objects.find(
      (o) => o.kind === "Deployment" && o.metadata.labels["app.kubernetes.io/component"] === "operator",
    )!.spec.template.metadata.labels;
    const texts = await scrapeAll();
    // Per source: what it exports, the labels of each of its metrics (carried by the samples or
    // declared by the code that makes them), and what its monitor adds to every series.
    const source = (text: string, registry: Registry, monitor: Set<string>) => ({
      metrics: exported(text),
      carried: carried(text),
      declared: declared(registry),
      monitor,
    });
    const sources = [
      source(
        texts.agent,
        createRuntimeMetrics("agent").registry,
        monitorLabels(podMonitor.spec.podMetricsEndpoints, runtimePod("Agent")),
      ),
      source(
        texts.relay,
        createRuntimeMetrics("relay").registry,
        monitorLabels(podMonitor.spec.podMetricsEndpoints, runtimePod("Relay")),
      ),
      source(
        texts.operator,
        operator.metrics.registry,
        monitorLabels(serviceMonitor.spec.endpoints, operatorPod, ["service"]),
      ),
    ];
    const missing: string[] = [];
    for (const expr of queries(dashboard)) {
      for (const metric of metricNames(expr)) {
        const available = new Set(
          sources
            .filter((src) => src.metrics.has(metric))
            .flatMap((src) => [
              ...src.monitor,
              ...(src.carried.get(metric) ?? []),
              ...(src.declared.get(metric) ?? []),
            ]),
        );
        for (const label of labelNames(expr))
          if (!available.has(label)) missing.push(`${label} on ${metric} in ${expr}`);
      }
    }
    expect(missing).toEqual([]);
    // The labels the dashboard's variables and panels select by are among them.
    const used = new Set(queries(dashboard).flatMap(labelNames));
    for (const l of ["namespace", "ifp_name", "le", "transport", "controller"]) expect(used).toContain(l);
  });

  it("has alerts and alert tests that read only metrics and labels a real agent, relay or operator exports", async () => {
    const rules = parse(readFileSync(`${CHART}/alerts/ifp.rules.yaml`, "utf8")) as { groups: { rules: Obj[] }[] };
    const exprs: string[] = rules.groups.flatMap((g) => g.rules.map((r) => r.expr));
    const r = helm("--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.podMonitor.enabled=true");
    expect(r.status, r.out).toBe(0);
    const podMonitor = r.objects.find((o) => o.kind === "PodMonitor")!;
    const serviceMonitor = r.objects.find((o) => o.kind === "ServiceMonitor")!;
    const runtimePod = (kind: "Agent" | "Relay") =>
      labels({ apiVersion: "ifp.dev/v1alpha1", kind, metadata: { name: "x", namespace: "n", uid: "u" } } as never);
    const operatorPod = r.objects.find(
      (o) => o.kind === "Deployment" && o.metadata.labels["app.kubernetes.io/component"] === "operator",
    )!.spec.template.metadata.labels;
    const texts = await scrapeAll();
    // The runtime's registry with the gauges its main adds (streams, dependencies): the labels
    // they declare, although no stream was missing in the scrape.
    const runtimeRegistry = (mode: "agent" | "relay") => {
      const m = createRuntimeMetrics(mode);
      streamKeeperGauges(m, { missing: () => [], unmet: () => [] });
      dependencyGauges(m, { natsConnected: () => true, certFile: "/nonexistent" });
      return m.registry;
    };
    const sources = [
      [texts.agent, runtimeRegistry("agent"), monitorLabels(podMonitor.spec.podMetricsEndpoints, runtimePod("Agent"))],
      [texts.relay, runtimeRegistry("relay"), monitorLabels(podMonitor.spec.podMetricsEndpoints, runtimePod("Relay"))],
      [
        texts.operator,
        operator.metrics.registry,
        monitorLabels(serviceMonitor.spec.endpoints, operatorPod, ["service"]),
      ],
    ].map(([text, registry, monitor]) => ({
      metrics: exported(text as string),
      carried: carried(text as string),
      declared: declared(registry as Registry),
      monitor: monitor as Set<string>,
    }));
    const available = (metric: string) =>
      new Set(
        sources
          .filter((src) => src.metrics.has(metric))
          .flatMap((src) => [...src.monitor, ...(src.carried.get(metric) ?? []), ...(src.declared.get(metric) ?? [])]),
      );
    const exportedAnywhere = (metric: string) => sources.some((src) => src.metrics.has(metric));
    const used = [...new Set(exprs.flatMap(metricNames))].sort();
    for (const n of [
      "ifp_outbound_deliveries_total",
      "ifp_jetstream_stream_missing",
      "ifp_nats_connected",
      "ifp_tls_certificate_expiry_timestamp_seconds",
      "controller_runtime_reconcile_errors_total",
    ])
      expect(used).toContain(n);
    expect(used.filter((n) => !exportedAnywhere(n))).toEqual([]);
    const missing: string[] = [];
    for (const expr of exprs)
      for (const metric of metricNames(expr))
        for (const label of labelNames(expr))
          if (!available(metric).has(label)) missing.push(`${label} on ${metric} in ${expr}`);
    // The series the alerts are tested with (e2e/alerts.test.ts): real names and real labels, and
    // those the rules read.
    for (const s of INPUT_SERIES) {
      if (!exportedAnywhere(s.metric)) missing.push(`input series ${s.metric} is not exported`);
      if (!used.includes(s.metric)) missing.push(`input series ${s.metric} is read by no alert`);
      for (const label of Object.keys(s.labels))
        if (!available(s.metric).has(label)) missing.push(`input series label ${label} on ${s.metric}`);
    }
    expect(missing).toEqual([]);
    // The label values the rules and tests select by are those the runtimes give.
    expect(texts.agent).toMatch(/^ifp_nats_connected(\{[^}]*\})? 1$/m);
    expect(texts.relay).toMatch(/^ifp_nats_connected(\{[^}]*\})? 1$/m);
    const expiry = Number(/^ifp_tls_certificate_expiry_timestamp_seconds(?:\{[^}]*\})? (\S+)$/m.exec(texts.agent)?.[1]);
    expect(expiry * 1000).toBeGreaterThan(Date.now());
    expect(runtimePod("Agent")["app.kubernetes.io/component"]).toBe("agent");
  });

  it("finds the labels a query reads", () => {
    expect(
      labelNames('sum by (ifp_name, result) (rate(ifp_x_total{namespace=~"$namespace",ifp_name=~"a,b=c"}[5m]))').sort(),
    ).toEqual(["ifp_name", "namespace", "result"]);
    expect(labelNames("histogram_quantile(0.99, sum by (le, controller) (rate(x_bucket[5m])))").sort()).toEqual([
      "controller",
      "le",
    ]);
    expect(labelNames('label_values(process_start_time_seconds{mode=~"agent|relay"}, ifp_name)').sort()).toEqual([
      "ifp_name",
      "mode",
    ]);
    expect(labelNames("a / on (pod) group_left (node) b").sort()).toEqual(["node", "pod"]);
  });

  it("finds a metric name the exports lack", () => {
    expect(metricNames('sum by (ifp_name) (rate(ifp_not_a_metric_total{namespace=~"$namespace"}[5m]))')).toEqual([
      "ifp_not_a_metric_total",
    ]);
    expect(
      metricNames(
        "histogram_quantile(0.99, sum by (le, controller) (rate(controller_runtime_reconcile_time_seconds_bucket[5m])))",
      ),
    ).toEqual(["controller_runtime_reconcile_time_seconds_bucket"]);
    expect(metricNames('label_values(process_start_time_seconds{mode=~"agent|relay"}, ifp_name)')).toEqual([
      "process_start_time_seconds",
    ]);
  });
});
