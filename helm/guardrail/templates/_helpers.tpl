{{/* Names, labels and the few decisions several templates share. */}}

{{- define "guardrail.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "guardrail.fullname" -}}
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

{{- define "guardrail.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels every object carries. */}}
{{- define "guardrail.labels" -}}
helm.sh/chart: {{ include "guardrail.chart" . }}
app.kubernetes.io/name: {{ include "guardrail.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: guardrail
{{- end }}

{{/* Selector of the guardrail server pods (also the only peers the Redis NetworkPolicy admits). */}}
{{- define "guardrail.selectorLabels" -}}
app.kubernetes.io/name: {{ include "guardrail.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: server
{{- end }}

{{- define "guardrail.redis.fullname" -}}
{{- printf "%s-redis" (include "guardrail.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "guardrail.redis.selectorLabels" -}}
app.kubernetes.io/name: {{ include "guardrail.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: redis
{{- end }}

{{- define "guardrail.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "guardrail.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "guardrail.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* The Secret holding the admin token and API keys. */}}
{{- define "guardrail.authSecretName" -}}
{{- default (printf "%s-auth" (include "guardrail.fullname" .)) .Values.auth.existingSecret }}
{{- end }}

{{- define "guardrail.redis.secretName" -}}
{{- default (printf "%s-auth" (include "guardrail.redis.fullname" .)) .Values.redis.auth.existingSecret }}
{{- end }}

{{/* "chart", "external" or "none": where the shared store lives. */}}
{{- define "guardrail.redisMode" -}}
{{- if and .Values.redis.enabled (or .Values.externalRedis.url .Values.externalRedis.existingSecret) }}
{{- fail "redis.enabled and externalRedis are exclusive: set one of them" }}
{{- else if .Values.redis.enabled }}chart
{{- else if or .Values.externalRedis.url .Values.externalRedis.existingSecret }}external
{{- else }}none
{{- end }}
{{- end }}

{{/*
A value of an existing Secret of this release, so that generated credentials survive `helm upgrade`;
otherwise a fresh random one. lookup answers nothing under `helm template`, which is fine there.
Arguments: (list $ secretName key length).
*/}}
{{- define "guardrail.persistentRandom" -}}
{{- $root := index . 0 }}
{{- $secret := lookup "v1" "Secret" $root.Release.Namespace (index . 1) }}
{{- if and $secret (hasKey $secret.data (index . 2)) }}
{{- index $secret.data (index . 2) | b64dec }}
{{- else }}
{{- randAlphaNum (index . 3) }}
{{- end }}
{{- end }}
