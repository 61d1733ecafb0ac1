// The unit tests of the chart's alerts (charts/ifp-operator/alerts/ifp.rules.yaml) for
// `promtool test rules`: input series as Prometheus holds them after the chart's PodMonitor
// (runtimes: namespace, pod, ifp_kind, ifp_name, job, instance, container, endpoint) and
// ServiceMonitor (operator: namespace, pod, service, …) scraped them. e2e/alerts.test.ts runs
// them; e2e/dashboard.test.ts checks that every metric and label they use is one a real agent,
// relay or operator exports or its monitor adds.

/** One input series: its metric name, its labels, and its values in promtool's expanding notation. */
export interface InputSeries {
  metric: string;
  labels: Record<string, string>;
  values: string;
}

export interface AlertCase {
  alertname: string;
  /** Minutes from the start at which the alert is checked. */
  at: number;
  /** The alerts firing then: the labels of each (without alertname). */
  firing: Record<string, string>[];
}

const runtime = (kind: "agent" | "relay", name: string, ns = "team-a", pod = `${name}-7d9f8c6b5-x2kqp`) => ({
  namespace: ns,
  pod,
  ifp_kind: kind,
  ifp_name: name,
  job: "ifp-system/ifp-ifp-operator-runtimes",
  instance: `10.244.0.${name.length}:9090`,
  container: "runtime",
  endpoint: "metrics",
});
const operator = {
  namespace: "ifp-system",
  pod: "ifp-ifp-operator-5c9b7d8f4-abcde",
  service: "ifp-ifp-operator",
  job: "ifp-ifp-operator",
  instance: "10.244.0.9:8080",
  container: "operator",
  endpoint: "metrics",
};
const DAY = 86_400;

export const INPUT_SERIES: InputSeries[] = [
  // alice gives up on 3 outbound messages at minute 11; bob delivers everything.
  {
    metric: "ifp_outbound_deliveries_total",
    labels: { ...runtime("agent", "alice"), result: "undeliverable" },
    values: "0x10 3x30",
  },
  {
    metric: "ifp_outbound_deliveries_total",
    labels: { ...runtime("agent", "alice"), result: "delivered" },
    values: "0+5x40",
  },
  {
    metric: "ifp_outbound_deliveries_total",
    labels: { ...runtime("agent", "bob"), result: "undeliverable" },
    values: "0x40",
  },
  {
    metric: "ifp_outbound_deliveries_total",
    labels: { ...runtime("agent", "bob"), result: "delivered" },
    values: "0+9x40",
  },
  // The relay hub dead-letters webhook pushes at minute 6; alice's handler never does.
  {
    metric: "ifp_dead_letters_total",
    labels: { ...runtime("relay", "hub"), source: "relay-push" },
    values: "0x5 2x40",
  },
  { metric: "ifp_dead_letters_total", labels: { ...runtime("agent", "alice"), source: "handler" }, values: "0x45" },
  // alice's inbox: its oldest message ages a minute a minute and more keep coming (stuck);
  // bob's is old but not growing (a steady queue being worked off).
  { metric: "ifp_inbox_oldest_age_seconds", labels: runtime("agent", "alice"), values: "0+60x60" },
  { metric: "ifp_inbox_depth", labels: runtime("agent", "alice"), values: "0+2x60" },
  { metric: "ifp_inbox_oldest_age_seconds", labels: runtime("agent", "bob"), values: "2000x60" },
  { metric: "ifp_inbox_depth", labels: runtime("agent", "bob"), values: "40x60" },
  { metric: "ifp_outbox_oldest_age_seconds", labels: runtime("agent", "alice"), values: "0x60" },
  { metric: "ifp_outbox_depth", labels: runtime("agent", "alice"), values: "0x60" },
  // The relay hub's mailbox grows with old messages no subscriber takes.
  { metric: "ifp_relay_mailbox_oldest_age_seconds", labels: runtime("relay", "hub"), values: "600+60x60" },
  { metric: "ifp_relay_mailbox_depth", labels: runtime("relay", "hub"), values: "10+10x60" },
  // Both of carol's pods lose NATS at minute 6; of dave's two pods one does.
  { metric: "ifp_nats_connected", labels: runtime("agent", "carol", "team-b", "carol-1"), values: "1x5 0x20" },
  { metric: "ifp_nats_connected", labels: runtime("agent", "carol", "team-b", "carol-2"), values: "1x5 0x20" },
  { metric: "ifp_nats_connected", labels: runtime("agent", "dave", "team-b", "dave-1"), values: "1x5 0x20" },
  { metric: "ifp_nats_connected", labels: runtime("agent", "dave", "team-b", "dave-2"), values: "1x25" },
  // The relay hub's stream goes missing at minute 4 (the gauge has a series only while it is).
  {
    metric: "ifp_jetstream_stream_missing",
    labels: { ...runtime("relay", "hub"), stream: "IFP_RELAY_hub" },
    values: "_x3 1x30",
  },
  // alice's inbox stream has 1 replica where 3 were asked.
  {
    metric: "ifp_jetstream_replicas_unmet",
    labels: { ...runtime("agent", "alice"), stream: "IFP_INBOX_alice", asked: "3" },
    values: "1x60",
  },
  // Evaluation starts at the epoch: alice's certificate expires in 3 days, bob's in 12 hours, hub's in 100 days.
  {
    metric: "ifp_tls_certificate_expiry_timestamp_seconds",
    labels: runtime("agent", "alice"),
    values: `${3 * DAY}x180`,
  },
  { metric: "ifp_tls_certificate_expiry_timestamp_seconds", labels: runtime("agent", "bob"), values: `${DAY / 2}x180` },
  {
    metric: "ifp_tls_certificate_expiry_timestamp_seconds",
    labels: runtime("relay", "hub"),
    values: `${100 * DAY}x180`,
  },
  // The Agent controller fails a reconcile a minute; the Relay controller never.
  {
    metric: "controller_runtime_reconcile_errors_total",
    labels: { ...operator, controller: "agent" },
    values: "0+1x40",
  },
  { metric: "controller_runtime_reconcile_errors_total", labels: { ...operator, controller: "relay" }, values: "0x40" },
];

const alice = { namespace: "team-a", ifp_name: "alice" };
const aliceOf = { ...alice, ifp_kind: "agent" };
const hub = { namespace: "team-a", ifp_kind: "relay", ifp_name: "hub" };

export const ALERT_CASES: AlertCase[] = [
  { alertname: "IfpMessagesUndeliverable", at: 8, firing: [] },
  { alertname: "IfpMessagesUndeliverable", at: 15, firing: [{ ...alice, severity: "warning" }] },
  // The increase leaves the 15-minute window.
  { alertname: "IfpMessagesUndeliverable", at: 30, firing: [] },
  { alertname: "IfpMessagesDeadLettered", at: 3, firing: [] },
  { alertname: "IfpMessagesDeadLettered", at: 10, firing: [{ ...hub, source: "relay-push", severity: "warning" }] },
  // hub's mailbox is over 15 minutes old from minute 6, alice's inbox from minute 16; the alert
  // waits 15 minutes more.
  { alertname: "IfpBacklogGrowing", at: 15, firing: [] },
  { alertname: "IfpBacklogGrowing", at: 25, firing: [{ ...hub, queue: "relay_mailbox", severity: "warning" }] },
  {
    alertname: "IfpBacklogGrowing",
    at: 35,
    firing: [
      { ...aliceOf, queue: "inbox", severity: "warning" },
      { ...hub, queue: "relay_mailbox", severity: "warning" },
    ],
  },
  { alertname: "IfpNatsUnavailable", at: 6, firing: [] },
  {
    alertname: "IfpNatsUnavailable",
    at: 10,
    firing: [{ namespace: "team-b", ifp_kind: "agent", ifp_name: "carol", severity: "critical" }],
  },
  { alertname: "IfpStreamMissing", at: 2, firing: [] },
  { alertname: "IfpStreamMissing", at: 12, firing: [{ ...hub, stream: "IFP_RELAY_hub", severity: "critical" }] },
  { alertname: "IfpStreamReplicasUnmet", at: 20, firing: [] },
  {
    alertname: "IfpStreamReplicasUnmet",
    at: 40,
    firing: [{ ...aliceOf, stream: "IFP_INBOX_alice", asked: "3", severity: "warning" }],
  },
  // Within a day: critical at once; within 7 days: warning after an hour.
  {
    alertname: "IfpCertificateExpiresSoon",
    at: 5,
    firing: [{ namespace: "team-a", ifp_kind: "agent", ifp_name: "bob", severity: "critical" }],
  },
  {
    alertname: "IfpCertificateExpiresSoon",
    at: 90,
    firing: [
      { ...aliceOf, severity: "warning" },
      { namespace: "team-a", ifp_kind: "agent", ifp_name: "bob", severity: "warning" },
      { namespace: "team-a", ifp_kind: "agent", ifp_name: "bob", severity: "critical" },
    ],
  },
  { alertname: "IfpReconcileErrors", at: 10, firing: [] },
  {
    alertname: "IfpReconcileErrors",
    at: 30,
    firing: [{ namespace: "ifp-system", controller: "agent", severity: "warning" }],
  },
];

/** The promtool unit-test file of these cases for a rule file. */
export function promtoolTests(ruleFile: string): object {
  const fmt = (labels: Record<string, string>) =>
    `{${Object.entries(labels)
      .map(([k, v]) => `${k}=${JSON.stringify(v)}`)
      .join(", ")}}`;
  return {
    rule_files: [ruleFile],
    evaluation_interval: "1m",
    tests: [
      {
        interval: "1m",
        input_series: INPUT_SERIES.map((s) => ({ series: `${s.metric}${fmt(s.labels)}`, values: s.values })),
        alert_rule_test: ALERT_CASES.map((c) => ({
          eval_time: `${c.at}m`,
          alertname: c.alertname,
          exp_alerts: c.firing.map((labels) => ({ exp_labels: labels })),
        })),
      },
    ],
  };
}
