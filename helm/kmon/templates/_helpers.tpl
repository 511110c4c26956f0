{{/* Names: every named template is prefixed with the chart name. */}}

{{- define "kmon.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kmon.fullname" -}}
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

{{- define "kmon.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every object; "component" is passed as .component. */}}
{{- define "kmon.labels" -}}
helm.sh/chart: {{ include "kmon.chart" .root }}
{{ include "kmon.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: kmon
{{- end }}

{{- define "kmon.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kmon.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- with .component }}
app.kubernetes.io/component: {{ . }}
{{- end }}
{{- end }}

{{- define "kmon.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "kmon.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "kmon.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* Kafka connection ------------------------------------------------------------------ */}}

{{- define "kmon.kafka.sasl" -}}
{{- hasPrefix "SASL_" .Values.kafka.securityProtocol }}
{{- end }}

{{- define "kmon.kafka.tls" -}}
{{- or (eq .Values.kafka.securityProtocol "SSL") (eq .Values.kafka.securityProtocol "SASL_SSL") }}
{{- end }}

{{- define "kmon.kafka.secretName" -}}
{{- default (printf "%s-kafka" (include "kmon.fullname" .)) .Values.kafka.sasl.existingSecret }}
{{- end }}

{{/* Environment both probe and monitor read: the connection, the topics, the isolation. */}}
{{- define "kmon.kafka.env" -}}
- name: KMON_BOOTSTRAP
  value: {{ required "kafka.bootstrapServers is required" .Values.kafka.bootstrapServers | quote }}
- name: KMON_EVENTS_BOOTSTRAP
  value: {{ default .Values.kafka.bootstrapServers .Values.kafka.eventsBootstrapServers | quote }}
- name: KMON_EVENTS_TOPIC
  value: {{ .Values.kafka.eventsTopic | quote }}
- name: KMON_ANOMALIES_TOPIC
  value: {{ .Values.kafka.anomaliesTopic | quote }}
- name: KMON_DEAD_LETTER_TOPIC
  value: {{ .Values.kafka.deadLetterTopic | quote }}
- name: KMON_ISOLATION
  value: {{ .Values.isolation | quote }}
- name: KMON_KAFKA_CONFIG
  value: /etc/kmon/kafka/client.properties
{{- if eq (include "kmon.kafka.sasl" .) "true" }}
- name: KMON_SASL_USERNAME
  valueFrom:
    secretKeyRef:
      name: {{ include "kmon.kafka.secretName" . }}
      key: username
- name: KMON_SASL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "kmon.kafka.secretName" . }}
      key: password
{{- end }}
{{- end }}

{{- define "kmon.kafka.volumes" -}}
- name: kafka-config
  configMap:
    name: {{ include "kmon.fullname" . }}-kafka
{{- if eq (include "kmon.kafka.tls" .) "true" }}
- name: kafka-tls
  secret:
    secretName: {{ required "kafka.tls.existingSecret is required with SSL and SASL_SSL" .Values.kafka.tls.existingSecret }}
{{- end }}
- name: tmp
  emptyDir: {}
{{- end }}

{{- define "kmon.kafka.volumeMounts" -}}
- name: kafka-config
  mountPath: /etc/kmon/kafka
  readOnly: true
{{- if eq (include "kmon.kafka.tls" .) "true" }}
- name: kafka-tls
  mountPath: /etc/kmon/kafka-tls
  readOnly: true
{{- end }}
- name: tmp
  mountPath: /tmp
{{- end }}

{{/* Monitor ------------------------------------------------------------------------------ */}}

{{- define "kmon.monitor.k8sExecutors" -}}
{{- and (eq .Values.monitor.mode "client") (eq .Values.monitor.spark.master "k8s") }}
{{- end }}

{{- define "kmon.monitor.checkpoint" -}}
{{- default .Values.monitor.checkpoint.mountPath .Values.monitor.checkpoint.location }}
{{- end }}

{{- define "kmon.monitor.checkpointVolume" -}}
{{- if not .Values.monitor.checkpoint.location }}
- name: checkpoint
{{- if .Values.monitor.checkpoint.persistence.enabled }}
  persistentVolumeClaim:
    claimName: {{ include "kmon.fullname" . }}-checkpoint
{{- else }}
  emptyDir: {}
{{- end }}
{{- end }}
{{- end }}

{{- define "kmon.monitor.checkpointMount" -}}
{{- if not .Values.monitor.checkpoint.location }}
- name: checkpoint
  mountPath: {{ .Values.monitor.checkpoint.mountPath }}
{{- end }}
{{- end }}

{{- define "kmon.monitor.args" -}}
- monitor
{{- range .Values.monitor.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end }}

{{/* The monitor's own settings, beyond the Kafka connection. */}}
{{- define "kmon.monitor.env" -}}
- name: KMON_METRICS_PORT
  value: {{ .Values.monitor.metricsPort | quote }}
- name: KMON_CHECKPOINT
  value: {{ include "kmon.monitor.checkpoint" . | quote }}
{{- end }}

{{/* Pod-level scheduling settings of driver and executors. */}}
{{- define "kmon.monitor.scheduling" -}}
{{- with .Values.monitor.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.monitor.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
