{{/*
The chart name, truncated to 63 characters.
*/}}
{{- define "ipvs-guard.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The full name of the release's resources, truncated to 63 characters.
*/}}
{{- define "ipvs-guard.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Chart name and version for the chart label.
*/}}
{{- define "ipvs-guard.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Common labels.
*/}}
{{- define "ipvs-guard.labels" -}}
helm.sh/chart: {{ include "ipvs-guard.chart" . }}
{{ include "ipvs-guard.selectorLabels" . }}
app.kubernetes.io/version: {{ include "ipvs-guard.imageTag" . | quote }}
app.kubernetes.io/component: node-agent
app.kubernetes.io/part-of: ipvs-guard
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
Selector labels.
*/}}
{{- define "ipvs-guard.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ipvs-guard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
The ServiceAccount's name.
*/}}
{{- define "ipvs-guard.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "ipvs-guard.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The image tag: image.tag, else the chart's appVersion.
*/}}
{{- define "ipvs-guard.imageTag" -}}
{{- .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/*
The modules-load.d directories systemd-modules-load reads besides
/etc/modules-load.d, as volume name: host path (mounted read-only).
*/}}
{{- define "ipvs-guard.modulesLoadDirs" -}}
run-modules-load-d: /run/modules-load.d
usr-local-lib-modules-load-d: /usr/local/lib/modules-load.d
usr-lib-modules-load-d: /usr/lib/modules-load.d
lib-modules-load-d: /lib/modules-load.d
{{- end }}

{{/*
The modprobe.d directories kmod reads (pkg/modules.ModprobeDirs), mounted
read-only with remediation: the blacklists and install commands that keep a
module from loading (the modules check, nftables-prerequisites). Report-only
sees them under its read-only /etc, /lib, /usr/lib and /usr/local/lib.
*/}}
{{- define "ipvs-guard.modprobeDirs" -}}
etc-modprobe-d: /etc/modprobe.d
run-modprobe-d: /run/modprobe.d
usr-local-lib-modprobe-d: /usr/local/lib/modprobe.d
usr-lib-modprobe-d: /usr/lib/modprobe.d
lib-modprobe-d: /lib/modprobe.d
{{- end }}

{{/*
A listen address host:port for the agent's flags: the given IP, else the
node's IP ($(HOST_IP), expanded by the kubelet from status.hostIP; the
binary brackets an IPv6 one). Call with (list bindAddress port).
*/}}
{{- define "ipvs-guard.listenAddress" -}}
{{- $ip := index . 0 }}{{ $port := index . 1 }}
{{- if not $ip }}$(HOST_IP):{{ $port }}
{{- else if contains ":" $ip }}[{{ $ip }}]:{{ $port }}
{{- else }}{{ $ip }}:{{ $port }}
{{- end }}
{{- end }}

{{/*
The namespace of every namespaced resource: namespace.name, else the release
namespace. With namespace.create the chart creates it (namespace.yaml); Helm
keeps its release record in the release namespace, which must then be another,
existing one.
*/}}
{{- define "ipvs-guard.namespace" -}}
{{- default .Release.Namespace .Values.namespace.name }}
{{- end }}

{{/*
The Pod Security Admission labels of the agents' namespace (namespace.podSecurity).
*/}}
{{- define "ipvs-guard.podSecurityLabels" -}}
{{- range $mode := list "enforce" "audit" "warn" }}
{{- with index $.Values.namespace.podSecurity $mode }}
pod-security.kubernetes.io/{{ $mode }}: {{ . }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Whether the agents serve HTTPS metrics authorized by the API server.
*/}}
{{- define "ipvs-guard.metricsSecure" -}}
{{- if and .Values.metrics.enabled .Values.metrics.secure }}true{{ end }}
{{- end }}

{{/*
The tolerations `tolerate` gives, as a YAML list.
*/}}
{{- define "ipvs-guard.tolerations" -}}
{{- if eq .Values.tolerate "all" }}
- operator: Exists
{{- else if eq .Values.tolerate "control-plane" }}
- key: node-role.kubernetes.io/control-plane
  operator: Exists
- key: node-role.kubernetes.io/master
  operator: Exists
- key: node-role.kubernetes.io/etcd
  operator: Exists
- key: CriticalAddonsOnly
  operator: Exists
{{- else if eq .Values.tolerate "none" }}
[]
{{- else }}
{{- fail (printf "tolerate: %q is not all, control-plane or none" .Values.tolerate) }}
{{- end }}
{{- end }}

{{/*
The host directories a report-only agent mounts read-only at their own paths,
as volume name: host path: they hold /lib/modules, /etc/modules and every
persistent modules-load.d directory, and every host has them (FHS), so no
hostPath is created.
*/}}
{{- define "ipvs-guard.reportOnlyDirs" -}}
host-etc: /etc
host-lib: /lib
host-usr-lib: /usr/lib
host-usr-local-lib: /usr/local/lib
{{- end }}
