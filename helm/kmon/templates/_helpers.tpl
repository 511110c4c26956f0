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

{{/* A client certificate is presented (mutual TLS): asked for, or a user Secret given. */}}
{{- define "kmon.kafka.tls.client" -}}
{{- or .Values.kafka.tls.clientCertificate (ne .Values.kafka.tls.userSecret "") }}
{{- end }}

{{/* SASL credentials as container environment, for each variable name prefix in .names
(e.g. KMON_SASL_ -> KMON_SASL_USERNAME, KMON_SASL_PASSWORD). The chart's own Secret has keys
username/password; an existing one has the keys usernameKey/passwordKey name, and the user
name may be a value instead (Strimzi's KafkaUser Secret holds only the password: the user name
is the KafkaUser's name). */}}
{{- define "kmon.kafka.saslEnv" -}}
{{- $sasl := .root.Values.kafka.sasl }}
{{- $secret := include "kmon.kafka.secretName" .root }}
{{- $userKey := ternary $sasl.usernameKey "username" (ne $sasl.existingSecret "") }}
{{- $passKey := ternary $sasl.passwordKey "password" (ne $sasl.existingSecret "") }}
{{- range .names }}
- name: {{ . }}USERNAME
{{- if and $sasl.existingSecret $sasl.username }}
  value: {{ $sasl.username | quote }}
{{- else }}
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ $userKey }}
{{- end }}
- name: {{ . }}PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ $passKey }}
{{- end }}
{{- end }}

{{/* librdkafka security settings (probe clients, the monitor's driver producer, `kmon
investigate`), as a YAML mapping: callers `fromYaml` it. Credentials are never in it. */}}
{{- define "kmon.kafka.librdkafka" -}}
{{- $c := dict "security.protocol" .Values.kafka.securityProtocol }}
{{- if eq (include "kmon.kafka.sasl" .) "true" }}
{{- $_ := set $c "sasl.mechanism" .Values.kafka.sasl.mechanism }}
{{- end }}
{{- if eq (include "kmon.kafka.tls" .) "true" }}
{{- $_ := set $c "ssl.ca.location" "/etc/kmon/kafka-tls/ca.crt" }}
{{- $_ := set $c "ssl.endpoint.identification.algorithm" (ternary "https" "none" .Values.kafka.tls.verifyHostname) }}
{{- if eq (include "kmon.kafka.tls.client" .) "true" }}
{{- $_ := set $c "ssl.certificate.location" "/etc/kmon/kafka-tls/tls.crt" }}
{{- $_ := set $c "ssl.key.location" "/etc/kmon/kafka-tls/tls.key" }}
{{- end }}
{{- end }}
{{- range $key, $value := .Values.kafka.extraConfig }}
{{- $_ := set $c $key $value }}
{{- end }}
{{- toYaml $c }}
{{- end }}

{{/* The same security for the Java Kafka client of the monitor's Spark Kafka source, as
monitor settings (`source.kafka.*`). The credentials are `${env:...}` references the monitor
resolves from the Secret-fed environment; PEM files (KIP-651) stand in for keystores. */}}
{{- define "kmon.kafka.javaSource" -}}
{{- $c := dict "source.kafka.security.protocol" .Values.kafka.securityProtocol }}
{{- if eq (include "kmon.kafka.sasl" .) "true" }}
{{- $mech := .Values.kafka.sasl.mechanism }}
{{- $module := ternary "org.apache.kafka.common.security.plain.PlainLoginModule" "org.apache.kafka.common.security.scram.ScramLoginModule" (eq $mech "PLAIN") }}
{{- $_ := set $c "source.kafka.sasl.mechanism" $mech }}
{{- $_ := set $c "source.kafka.sasl.jaas.config" (printf "%s required username=\"${env:KMON_SASL_USERNAME}\" password=\"${env:KMON_SASL_PASSWORD}\";" $module) }}
{{- end }}
{{- if eq (include "kmon.kafka.tls" .) "true" }}
{{- $_ := set $c "source.kafka.ssl.truststore.type" "PEM" }}
{{- $_ := set $c "source.kafka.ssl.truststore.location" "/etc/kmon/kafka-tls/ca.crt" }}
{{- /* Java disables host name checks with an empty algorithm, librdkafka with "none". */}}
{{- $_ := set $c "source.kafka.ssl.endpoint.identification.algorithm" (ternary "https" "" .Values.kafka.tls.verifyHostname) }}
{{- if eq (include "kmon.kafka.tls.client" .) "true" }}
{{- $_ := set $c "source.kafka.ssl.keystore.type" "PEM" }}
{{- $_ := set $c "source.kafka.ssl.keystore.certificate.chain" "${file:/etc/kmon/kafka-tls/tls.crt}" }}
{{- $_ := set $c "source.kafka.ssl.keystore.key" "${file:/etc/kmon/kafka-tls/tls.key}" }}
{{- end }}
{{- end }}
{{- toYaml $c }}
{{- end }}

{{/* `kmon probe --config /etc/kmon/config/probe.yaml`: its settings (kmon.probes.config). */}}
{{/* The watched cluster's name: every metric's, target's and alert's `cluster` label. */}}
{{- define "kmon.cluster" -}}
{{- required "cluster is required: the name of the watched Kafka cluster (the cluster label of every metric and alert)" .Values.cluster }}
{{- end }}

{{- define "kmon.probe.config" -}}
{{- $sec := include "kmon.kafka.librdkafka" . | fromYaml }}
{{- $c := dict "kafka.bootstrap.servers" (required "kafka.bootstrapServers is required" .Values.kafka.bootstrapServers) }}
{{- range $key, $value := $sec }}
{{- $_ := set $c (printf "kafka.%s" $key) $value }}
{{- end }}
{{- with .Values.kafka.eventsBootstrapServers }}
{{- /* A separate events cluster: the probe takes none of kafka.* for it, so repeat them. */}}
{{- $_ := set $c "events.kafka.bootstrap.servers" . }}
{{- range $key, $value := $sec }}
{{- $_ := set $c (printf "events.kafka.%s" $key) $value }}
{{- end }}
{{- end }}
{{- $_ := set $c "events.topic" .Values.kafka.eventsTopic }}
{{- $_ := set $c "consumer.isolation.level" .Values.isolation }}
{{- $_ := set $c "cluster" (include "kmon.cluster" .) }}
{{- $_ := set $c "metrics.port" .Values.probe.metricsPort }}
{{- toYaml $c }}
{{- end }}

{{/* `kmon monitor --config /etc/kmon/config/monitor.yaml`: its settings (kmon.streaming.config).
It only touches kmon's own topics, so it connects to the events cluster. */}}
{{- define "kmon.monitor.config" -}}
{{- $c := include "kmon.kafka.javaSource" . | fromYaml }}
{{- range $key, $value := include "kmon.kafka.librdkafka" . | fromYaml }}
{{- $_ := set $c (printf "producer.%s" $key) $value }}
{{- end }}
{{- if eq (include "kmon.kafka.sasl" .) "true" }}
{{- $_ := set $c "producer.sasl.username" "${env:KMON_SASL_USERNAME}" }}
{{- $_ := set $c "producer.sasl.password" "${env:KMON_SASL_PASSWORD}" }}
{{- end }}
{{- $_ := set $c "kafka.bootstrap.servers" (default (required "kafka.bootstrapServers is required" .Values.kafka.bootstrapServers) .Values.kafka.eventsBootstrapServers) }}
{{- $_ := set $c "topics.events" .Values.kafka.eventsTopic }}
{{- $_ := set $c "cluster" (include "kmon.cluster" .) }}
{{- $_ := set $c "topics.anomalies" .Values.kafka.anomaliesTopic }}
{{- $_ := set $c "topics.dead-letters" .Values.kafka.deadLetterTopic }}
{{- $_ := set $c "checkpoint" (include "kmon.monitor.checkpoint" .) }}
{{- $_ := set $c "metrics.port" .Values.monitor.metricsPort }}
{{- $_ := set $c "share.lock" .Values.share.lock }}
{{- $_ := set $c "share.delivery.limit" .Values.share.deliveryLimit }}
{{- $_ := set $c "share.skew" .Values.share.skew }}
{{- range $key, $value := include "kmon.monitor.s3aConf" . | fromYaml }}
{{- $_ := set $c $key $value }}
{{- end }}
{{- if eq .Values.monitor.mode "client" }}
{{- /* In operator mode spark-submit sets the master. */}}
{{- $_ := set $c "spark.master" (ternary "k8s://https://kubernetes.default.svc:443" .Values.monitor.spark.master (eq (include "kmon.monitor.k8sExecutors" .) "true")) }}
{{- end }}
{{- toYaml $c }}
{{- end }}

{{/* Environment of probe and driver containers. The SASL credentials feed the probe
(KMON_PROBE_*) and the monitor (its config's ${env:KMON_SASL_*}); the rest is what
`kmon investigate`, run in the pod, reads by default. */}}
{{- define "kmon.kafka.env" -}}
- name: KMON_EVENTS_BOOTSTRAP
  value: {{ default .Values.kafka.bootstrapServers .Values.kafka.eventsBootstrapServers | quote }}
- name: KMON_EVENTS_TOPIC
  value: {{ .Values.kafka.eventsTopic | quote }}
- name: KMON_ANOMALIES_TOPIC
  value: {{ .Values.kafka.anomaliesTopic | quote }}
- name: KMON_ISOLATION
  value: {{ .Values.isolation | quote }}
- name: KMON_KAFKA_CONFIG
  value: /etc/kmon/config/client.properties
{{- if eq (include "kmon.kafka.sasl" .) "true" }}
{{- $names := list "KMON_SASL_" "KMON_PROBE_KAFKA_SASL_" }}
{{- if $.Values.kafka.eventsBootstrapServers }}
{{- $names = append $names "KMON_PROBE_EVENTS_KAFKA_SASL_" }}
{{- end }}
{{- include "kmon.kafka.saslEnv" (dict "root" . "names" $names) }}
{{- end }}
{{- end }}

{{- define "kmon.kafka.volumes" -}}
- name: config
  configMap:
    name: {{ include "kmon.fullname" . }}-config
{{- if eq (include "kmon.kafka.tls" .) "true" }}
{{- $tls := .Values.kafka.tls }}
{{- if not (or $tls.caSecret $tls.userSecret) }}
- name: kafka-tls
  secret:
    secretName: {{ required "kafka.tls.existingSecret is required with SSL and SASL_SSL (or kafka.tls.caSecret)" $tls.existingSecret }}
{{- else }}
{{- /* One directory, fixed file names (ca.crt, tls.crt, tls.key) whatever Secrets and keys
they come from: the CA and the user certificate may live apart (Strimzi: the cluster CA in
<cluster>-cluster-ca-cert, the KafkaUser's user.crt/user.key in its own Secret). */}}
- name: kafka-tls
  projected:
    sources:
      - secret:
          name: {{ required "kafka.tls.existingSecret is required with SSL and SASL_SSL (or kafka.tls.caSecret)" (default $tls.existingSecret $tls.caSecret) }}
          items:
            - key: {{ ternary $tls.caKey "ca.crt" (ne $tls.caSecret "") }}
              path: ca.crt
      {{- if eq (include "kmon.kafka.tls.client" .) "true" }}
      - secret:
          name: {{ required "kafka.tls.userSecret (or kafka.tls.existingSecret) is required with a client certificate" (default $tls.existingSecret $tls.userSecret) }}
          items:
            - key: {{ ternary $tls.certKey "tls.crt" (ne $tls.userSecret "") }}
              path: tls.crt
            - key: {{ ternary $tls.keyKey "tls.key" (ne $tls.userSecret "") }}
              path: tls.key
      {{- end }}
{{- end }}
{{- end }}
- name: tmp
  emptyDir: {}
{{- end }}

{{- define "kmon.kafka.volumeMounts" -}}
- name: config
  mountPath: /etc/kmon/config
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

{{/* The checkpoint volume's access modes: as given, else what the Spark mode needs. Executors
in other pods (the k8s master, operator mode) mount it too, which needs ReadWriteMany; a driver
running everything itself (local[N]) needs ReadWriteOnce, which every cluster's default storage
provides. */}}
{{- define "kmon.monitor.accessModes" -}}
{{- $p := .Values.monitor.checkpoint.persistence }}
{{- if $p.accessModes }}
{{- toYaml $p.accessModes }}
{{- else if or (eq .Values.monitor.mode "operator") (eq (include "kmon.monitor.k8sExecutors" .) "true") }}
- ReadWriteMany
{{- else }}
- ReadWriteOnce
{{- end }}
{{- end }}

{{/* S3A, for an s3a:// checkpoint: Spark settings (spark.hadoop.fs.s3a.*) for monitor.yaml,
read by driver and executors alike. Credentials: a Secret's access and secret keys as the AWS
SDK's environment variables, or else the SDK's default chain (web identity from IRSA or EKS Pod
Identity, then instance profiles...): S3A's own default list has no web identity. */}}
{{- define "kmon.monitor.s3a" -}}
{{- hasPrefix "s3a://" .Values.monitor.checkpoint.location }}
{{- end }}

{{- define "kmon.monitor.s3aConf" -}}
{{- $c := dict }}
{{- if eq (include "kmon.monitor.s3a" .) "true" }}
{{- $s3 := .Values.monitor.checkpoint.s3a }}
{{- $sdk := "software.amazon.awssdk.auth.credentials." }}
{{- $provider := ternary "EnvironmentVariableCredentialsProvider" "DefaultCredentialsProvider" (ne $s3.credentials.existingSecret "") }}
{{- $_ := set $c "spark.hadoop.fs.s3a.aws.credentials.provider" (print $sdk $provider) }}
{{- with $s3.endpoint }}
{{- $_ := set $c "spark.hadoop.fs.s3a.endpoint" . }}
{{- end }}
{{- with $s3.region }}
{{- $_ := set $c "spark.hadoop.fs.s3a.endpoint.region" . }}
{{- end }}
{{- if $s3.pathStyleAccess }}
{{- $_ := set $c "spark.hadoop.fs.s3a.path.style.access" "true" }}
{{- end }}
{{- end }}
{{- toYaml $c }}
{{- end }}

{{/* The S3A credentials of driver and executors, from the Secret (none: the default chain). */}}
{{- define "kmon.monitor.s3aEnv" -}}
{{- $creds := .Values.monitor.checkpoint.s3a.credentials }}
{{- if and (eq (include "kmon.monitor.s3a" .) "true") $creds.existingSecret }}
{{- range $var, $key := dict "AWS_ACCESS_KEY_ID" $creds.accessKeyKey "AWS_SECRET_ACCESS_KEY" $creds.secretKeyKey }}
- name: {{ $var }}
  valueFrom:
    secretKeyRef:
      name: {{ $creds.existingSecret }}
      key: {{ $key }}
{{- end }}
{{- end }}
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
- --config
- /etc/kmon/config/monitor.yaml
{{- range .Values.monitor.extraArgs }}
- {{ . | quote }}
{{- end }}
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
