{{/* Chart name, truncated to the 63 characters a label allows. */}}
{{- define "ifp-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Fully qualified app name, as `helm create` writes it: fullnameOverride; else the release name when
it contains the name (nameOverride, else the chart's name); else <release>-<name>; cut to 63
characters and trimmed of "-". A release whose objects carry the full name of the chart's name
(chartFullname) where nameOverride names another keeps it: while its Deployment of that name, made
by this release, exists (`lookup`), that is the name, so an upgrade keeps its NATS volumes,
Secrets and ServiceAccount (docs/install.md, Names of the installed objects).
*/}}
{{- define "ifp-operator.fullname" -}}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- $full := "" }}
{{- if .Values.fullnameOverride }}
{{- $full = .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if contains $name .Release.Name }}
{{- $full = .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $full = printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- $kept := include "ifp-operator.chartFullname" . }}
{{- if and (ne $full $kept) (not .Values.fullnameOverride) }}
{{- $existing := lookup "apps/v1" "Deployment" .Release.Namespace $kept }}
{{- if and $existing (eq (dig "metadata" "annotations" "meta.helm.sh/release-name" "" $existing) .Release.Name) }}
{{- $full = $kept }}
{{- end }}
{{- end }}
{{- $full }}
{{- end }}

{{/* The full name by the chart's name, whatever nameOverride says. */}}
{{- define "ifp-operator.chartFullname" -}}
{{- if contains .Chart.Name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/*
The name of one of the release's objects: <fullname>-<suffix>, the full name cut (and trimmed of
"-") so that the whole fits in 63 characters, a DNS label as a Service's or a Job's name must be.
Takes (dict "root" $ "suffix" "…"), and optionally "max" (a shorter limit) and "keep" (a kind of
the core API, "Secret"): a Secret the operator made under the uncut <fullname>-<suffix> keeps that
name while it exists (`lookup`), so that an upgrade keeps the install's CA and NATS keys.
*/}}
{{- define "ifp-operator.suffixed" -}}
{{- $full := include "ifp-operator.fullname" .root }}
{{- $max := int (default 63 .max) }}
{{- $name := printf "%s-%s" ($full | trunc (int (sub $max (add1 (len .suffix)))) | trimSuffix "-") .suffix }}
{{- $uncut := printf "%s-%s" $full .suffix }}
{{- if and .keep (ne $name $uncut) (lookup "v1" .keep .root.Release.Namespace $uncut) }}
{{- $name = $uncut }}
{{- end }}
{{- $name }}
{{- end }}

{{/*
The chart's NATS: its StatefulSet, Services, ConfigMap, ServiceAccount, budget and policy. At most
52 characters: a StatefulSet's pods carry the label controller-revision-hash, <name>-<hash>, which
must fit in 63, and the headless Service is <name>-headless.
*/}}
{{- define "ifp-operator.natsName" -}}
{{- include "ifp-operator.suffixed" (dict "root" . "suffix" "nats" "max" 52) }}
{{- end }}

{{- define "ifp-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The recommended labels. */}}
{{- define "ifp-operator.labels" -}}
helm.sh/chart: {{ include "ifp-operator.chart" . }}
{{ include "ifp-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: ifp-operator
{{- end }}

{{- define "ifp-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ifp-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "ifp-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "ifp-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
An image reference from an image value (.image) of the chart (.root): global.imageRegistry in
place of the repository's registry (prepended to one without a registry, such as nats), then
@digest when the digest is set, else :tag (the chart's appVersion when empty).
*/}}
{{- define "ifp-operator.image" -}}
{{- $repo := .image.repository }}
{{- with dig "imageRegistry" "" (default (dict) .root.Values.global) }}
{{- $parts := splitList "/" $repo }}
{{- $first := first $parts }}
{{- if and (gt (len $parts) 1) (or (contains "." $first) (contains ":" $first) (eq $first "localhost")) }}
{{- $repo = join "/" (rest $parts) }}
{{- end }}
{{- $repo = printf "%s/%s" (trimSuffix "/" .) $repo }}
{{- end }}
{{- if .image.digest }}
{{- printf "%s@%s" $repo .image.digest }}
{{- else }}
{{- printf "%s:%s" $repo (default .root.Chart.AppVersion .image.tag) }}
{{- end }}
{{- end }}

{{/* The NATS URL the operator and the runtimes use. */}}
{{- define "ifp-operator.natsAccountSecret" -}}
{{- .Values.nats.auth.accountSecret | default (include "ifp-operator.suffixed" (dict "root" . "suffix" "nats-account" "keep" "Secret")) }}
{{- end }}

{{/* The Secret with the installed NATS's server certificate (issued by the operator from the install CA). */}}
{{- define "ifp-operator.natsTlsSecret" -}}
{{- include "ifp-operator.suffixed" (dict "root" . "suffix" "nats-tls" "keep" "Secret") }}
{{- end }}

{{/* The names in that certificate: the client Service's, and each server's under the headless Service (routes). */}}
{{- define "ifp-operator.natsTlsDnsNames" -}}
{{- $n := include "ifp-operator.natsName" . }}
{{- $ns := .Release.Namespace }}
{{- list (printf "%s.%s.svc" $n $ns) $n (printf "%s.%s" $n $ns) (printf "%s.%s.svc.cluster.local" $n $ns) (printf "*.%s-headless.%s.svc" $n $ns) (printf "*.%s-headless.%s.svc.cluster.local" $n $ns) | join "," }}
{{- end }}

{{- define "ifp-operator.natsUrl" -}}
{{- if .Values.nats.install }}
{{- printf "nats://%s.%s.svc:4222" (include "ifp-operator.natsName" .) .Release.Namespace }}
{{- else }}
{{- required "nats.url is required unless nats.install is true" .Values.nats.url }}
{{- end }}
{{- end }}

{{/* The labels that select one component's pods: the selector labels and app.kubernetes.io/component. Takes (dict "root" $ "component" "…"). */}}
{{- define "ifp-operator.componentSelectorLabels" -}}
{{ include "ifp-operator.selectorLabels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Every pod's pull secrets: imagePullSecrets, then a parent chart's global.imagePullSecrets. */}}
{{- define "ifp-operator.imagePullSecrets" -}}
{{- $global := dig "imagePullSecrets" (list) (default (dict) .Values.global) }}
{{- with concat .Values.imagePullSecrets $global | uniq }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
A pod's scheduling fields from a values map with the keys of `scheduling` in values.schema.ts
(.values), for pods with the labels .labels: a topology spread constraint without a
labelSelector gets one that selects those pods.
*/}}
{{- define "ifp-operator.scheduling" -}}
{{- with .values.priorityClassName }}
priorityClassName: {{ . | quote }}
{{- end }}
{{- with .values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.topologySpreadConstraints }}
{{- $constraints := list }}
{{- range . }}
{{- $constraints = append $constraints (merge (deepCopy .) (dict "labelSelector" (dict "matchLabels" ($.labels | fromYaml)))) }}
{{- end }}
topologySpreadConstraints:
  {{- toYaml $constraints | nindent 2 }}
{{- end }}
{{- end }}


{{/* The install CA's Secret, in the release's namespace. */}}
{{- define "ifp-operator.caSecretName" -}}
{{- default (include "ifp-operator.suffixed" (dict "root" . "suffix" "ca" "keep" "Secret")) .Values.trust.caSecretName }}
{{- end }}

{{/*
The namespaces the operator watches unless clusterWide, comma-separated: the release's own,
then watchNamespaces.
*/}}
{{- define "ifp-operator.watchNamespaces" -}}
{{- prepend .Values.watchNamespaces .Release.Namespace | uniq | join "," -}}
{{- end }}
