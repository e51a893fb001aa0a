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
{{/*
The watermark key: auth.watermarkKey, else the one the release's Secret holds, else 13 random digits led by 1
(at most 2 x 10^12: times a token id it stays within torch's 64-bit seed). Args: (root, secret name).
*/}}
{{- define "guardrail.watermarkKey" -}}
{{- $root := index . 0 }}
{{- if not (kindIs "invalid" $root.Values.auth.watermarkKey) }}
{{- $root.Values.auth.watermarkKey | int64 | toString }}
{{- else }}
{{- $secret := lookup "v1" "Secret" $root.Release.Namespace (index . 1) }}
{{- if and $secret (hasKey $secret.data $root.Values.auth.watermarkKeyKey) }}
{{- index $secret.data $root.Values.auth.watermarkKeyKey | b64dec }}
{{- else }}
{{- printf "1%s" (randNumeric 12) }}
{{- end }}
{{- end }}
{{- end }}

{{- define "guardrail.persistentRandom" -}}
{{- $root := index . 0 }}
{{- $secret := lookup "v1" "Secret" $root.Release.Namespace (index . 1) }}
{{- if and $secret (hasKey $secret.data (index . 2)) }}
{{- index $secret.data (index . 2) | b64dec }}
{{- else }}
{{- randAlphaNum (index . 3) }}
{{- end }}
{{- end }}

{{/* The container's resources: `resources` when set, else the preset of the engine. */}}
{{- define "guardrail.resources" -}}
{{- if .Values.resources }}
{{- toYaml .Values.resources }}
{{- else }}
{{- toYaml (index .Values.resourcePresets .Values.guardrail.engine) }}
{{- end }}
{{- end }}

{{/*
The pod's grace period: the preStop sleep, then the longest a stream may still run after SIGTERM (the
request timeout bounds every generation, the drain timeout bounds the drain), then a margin for the last
error events and the exit. Kubernetes counts the preStop hook inside the grace period.
*/}}
{{- define "guardrail.terminationGracePeriodSeconds" -}}
{{- if not (kindIs "invalid" .Values.terminationGracePeriodSeconds) }}
{{- .Values.terminationGracePeriodSeconds | int64 }}
{{- else }}
{{- $longest := max (ceil .Values.guardrail.requestTimeoutS | int64) (ceil .Values.guardrail.drainTimeoutS | int64) }}
{{- add .Values.preStopSleepSeconds $longest .Values.drainMarginSeconds | int64 }}
{{- end }}
{{- end }}

{{/* GUARDRAIL_TOKENIZER for engine=remote: tokenizer.name, else where tokenizer.volume is mounted. */}}
{{- define "guardrail.tokenizer" -}}
{{- $tokenizer := .Values.guardrail.tokenizer }}
{{- if $tokenizer.name }}
{{- if and $tokenizer.volume (not (hasPrefix "/" $tokenizer.name)) }}
{{- fail "guardrail.tokenizer.name must be a directory (under guardrail.tokenizer.mountPath) when guardrail.tokenizer.volume is set" }}
{{- end }}
{{- $tokenizer.name }}
{{- else if $tokenizer.volume }}
{{- $tokenizer.mountPath }}
{{- end }}
{{- end }}

{{/*
The upstream's TCP port for engine=remote (from guardrail.upstream.url: its port, else 80 or 443 by
scheme), for the egress NetworkPolicy.
*/}}
{{- define "guardrail.upstreamPort" -}}
{{- $url := urlParse .Values.guardrail.upstream.url }}
{{- $hostPort := splitList ":" $url.host }}
{{- if gt (len $hostPort) 1 }}
{{- last $hostPort }}
{{- else if eq $url.scheme "https" }}443
{{- else }}80
{{- end }}
{{- end }}

{{/*
The service's settings as GUARDRAIL_* variables (service/settings.py), one per value under `guardrail`.
Integers go through int64 so that large ones are not written in float notation (16777216, not 1.6777216e+07).
The embedded engines' own settings are left out with engine=remote, which has no model in the pod.
*/}}
{{- define "guardrail.settingsEnv" -}}
{{- $g := .Values.guardrail }}
{{- $remote := eq $g.engine "remote" }}
{{- $settings := list
  (list "GUARDRAIL_MODEL" $g.model)
  (list "GUARDRAIL_ENGINE" $g.engine)
  (list "GUARDRAIL_WORDLISTS" (join "," $g.defaultWordlists))
  (list "GUARDRAIL_MAX_CONCURRENT" ($g.maxConcurrent | int64))
  (list "GUARDRAIL_MAX_QUEUE" ($g.maxQueue | int64))
  (list "GUARDRAIL_RETRY_AFTER_S" ($g.retryAfterS | int64))
  (list "GUARDRAIL_REQUEST_TIMEOUT_S" $g.requestTimeoutS)
  (list "GUARDRAIL_DRAIN_TIMEOUT_S" $g.drainTimeoutS)
  (list "GUARDRAIL_READY_QUEUE_FRACTION" $g.readyQueueFraction)
  (list "GUARDRAIL_TOOL_CALL_PARSER" $g.toolCallParser)
  (list "GUARDRAIL_SSE_KEEPALIVE_S" $g.sseKeepaliveS)
  (list "GUARDRAIL_ALLOW_ANONYMOUS" $g.allowAnonymous)
  (list "GUARDRAIL_ANONYMOUS_REQUESTS_PER_MINUTE" ($g.anonymousRequestsPerMinute | int64))
  (list "GUARDRAIL_ANONYMOUS_TOKENS_PER_MINUTE" ($g.anonymousTokensPerMinute | int64))
  (list "GUARDRAIL_ANONYMOUS_REQUIRED_WORDLISTS" (join "," $g.anonymousRequiredWordlists))
  (list "GUARDRAIL_ANONYMOUS_EVASION_GUARD_OFF" $g.anonymousEvasionGuardOff)
  (list "GUARDRAIL_ANONYMOUS_REQUEST_TERMS" $g.anonymousRequestTerms)
  (list "GUARDRAIL_ADMIN_FAILURES_PER_MINUTE" ($g.adminFailuresPerMinute | int64))
  (list "GUARDRAIL_TENANT_METRIC_LABELS" ($g.tenantMetricLabels | int64))
  (list "GUARDRAIL_DEFAULT_MAX_TOKENS" ($g.defaultMaxTokens | int64))
  (list "GUARDRAIL_MAX_TOKENS_LIMIT" ($g.maxTokensLimit | int64))
  (list "GUARDRAIL_MAX_N" ($g.maxN | int64))
  (list "GUARDRAIL_MAX_REQUEST_TERMS" ($g.maxRequestTerms | int64))
  (list "GUARDRAIL_MAX_REQUEST_REGEX_TERMS" ($g.maxRequestRegexTerms | int64))
  (list "GUARDRAIL_REQUEST_COMPILE_WORKERS" ($g.requestCompileWorkers | int64))
  (list "GUARDRAIL_REQUEST_COMPILE_QUEUE" ($g.requestCompileQueue | int64))
  (list "GUARDRAIL_REQUEST_COMPILE_TIME_S" $g.requestCompileTimeS)
  (list "GUARDRAIL_REQUEST_COMPILE_MAX_STATES" ($g.requestCompileMaxStates | int64))
  (list "GUARDRAIL_COMPILE_REFUSAL_TTL_S" $g.compileRefusalTtlS)
  (list "GUARDRAIL_COMPILE_REFUSAL_CACHE_BYTES" ($g.compileRefusalCacheBytes | int64))
  (list "GUARDRAIL_MAX_SCHEMA_BYTES" ($g.maxSchemaBytes | int64))
  (list "GUARDRAIL_MAX_SCHEMA_DEPTH" ($g.maxSchemaDepth | int64))
  (list "GUARDRAIL_MAX_SCHEMA_PROPERTIES" ($g.maxSchemaProperties | int64))
  (list "GUARDRAIL_GRAMMAR_CACHE_BYTES" ($g.grammarCacheBytes | int64))
  (list "GUARDRAIL_ARTEFACT_CACHE_BYTES" ($g.artefactCacheBytes | int64))
  (list "GUARDRAIL_TEXT_MATCHER_CACHE_BYTES" ($g.textMatcherCacheBytes | int64))
  (list "GUARDRAIL_ESCALATION_CACHE_BYTES" ($g.escalationCacheBytes | int64))
  (list "GUARDRAIL_MAX_LIST_TERMS" ($g.maxListTerms | int64))
  (list "GUARDRAIL_MAX_BODY_BYTES" ($g.maxBodyBytes | int64))
  (list "GUARDRAIL_MAX_ROLLBACKS" ($g.maxRollbacks | int64))
  (list "GUARDRAIL_MAX_ROLLBACKS_PER_POSITION" ($g.maxRollbacksPerPosition | int64))
  (list "GUARDRAIL_EVASION_GUARD" $g.evasionGuard)
  (list "GUARDRAIL_OBFUSCATION" $g.obfuscation)
  (list "GUARDRAIL_REDIS_PREFIX" $g.redisPrefix)
  (list "GUARDRAIL_REDIS_TIMEOUT_S" $g.redisTimeoutS)
  (list "GUARDRAIL_VERSION_POLL_INTERVAL_S" $g.versionPollIntervalS)
  (list "GUARDRAIL_AUDIT_MAX_RECORDS" ($g.auditMaxRecords | int64))
  (list "GUARDRAIL_WORDLIST_HISTORY" ($g.wordlistHistory | int64))
  (list "GUARDRAIL_CONSOLE" $g.console)
  (list "GUARDRAIL_LOG_LEVEL" $g.logLevel)
  (list "GUARDRAIL_DEBUG_LOG_PROMPTS" $g.debugLogPrompts)
}}
{{- if $g.chatTemplate }}
{{- $settings = append $settings (list "GUARDRAIL_CHAT_TEMPLATE" $g.chatTemplate) }}
{{- end }}
{{- if $g.anonymousMinObfuscation }}
{{- $settings = append $settings (list "GUARDRAIL_ANONYMOUS_MIN_OBFUSCATION" $g.anonymousMinObfuscation) }}
{{- end }}
{{- if not (kindIs "invalid" $g.workerStallTimeoutS) }}
{{- $settings = append $settings (list "GUARDRAIL_WORKER_STALL_TIMEOUT_S" $g.workerStallTimeoutS) }}
{{- end }}
{{- if $remote }}
{{- $settings = concat $settings (list
  (list "GUARDRAIL_UPSTREAM_URL" $g.upstream.url)
  (list "GUARDRAIL_UPSTREAM_API" $g.upstream.api)
  (list "GUARDRAIL_UPSTREAM_LOGITS_PROCESSOR" $g.upstream.logitsProcessor)
  (list "GUARDRAIL_UPSTREAM_MAX_STREAMS" ($g.upstream.maxStreams | int64))
  (list "GUARDRAIL_UPSTREAM_CONNECT_TIMEOUT_S" $g.upstream.connectTimeoutS)
  (list "GUARDRAIL_UPSTREAM_READ_TIMEOUT_S" $g.upstream.readTimeoutS)
  (list "GUARDRAIL_UPSTREAM_RETRIES" ($g.upstream.retries | int64))
  (list "GUARDRAIL_UPSTREAM_HEALTH_INTERVAL_S" $g.upstream.healthIntervalS)
  (list "GUARDRAIL_TOKENIZER" (include "guardrail.tokenizer" .))
) }}
{{- if $g.upstream.model }}
{{- $settings = append $settings (list "GUARDRAIL_UPSTREAM_MODEL" $g.upstream.model) }}
{{- end }}
{{- else }}
{{- $settings = concat $settings (list
  (list "GUARDRAIL_MAX_BATCH" ($g.maxBatch | int64))
  (list "GUARDRAIL_PREFILL_CHUNK" ($g.prefillChunk | int64))
  (list "GUARDRAIL_PREFIX_CACHE_MB" ($g.prefixCacheMb | int64))
  (list "GUARDRAIL_SPECULATIVE_TOKENS" ($g.speculativeTokens | int64))
  (list "GUARDRAIL_VLLM_KV_CACHE_GIB" ($g.vllmKvCacheGib | int64))
) }}
{{- if $g.vllmEngineArgs }}
{{- $settings = append $settings (list "GUARDRAIL_VLLM_ENGINE_ARGS" (toJson $g.vllmEngineArgs)) }}
{{- end }}
{{- end }}
{{- range $settings }}
- name: {{ index . 0 }}
  value: {{ index . 1 | toString | quote }}
{{- end }}
{{- end }}

{{/* Selector of the `helm test` pod (admitted by the guardrail NetworkPolicy). */}}
{{- define "guardrail.tests.selectorLabels" -}}
app.kubernetes.io/name: {{ include "guardrail.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: test
{{- end }}
