{{/* The chart's name: nameOverride, or the chart's own (onepool); the
app.kubernetes.io/name label. */}}
{{- define "onepool.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The prefix of every name: fullnameOverride; else <release>-<name>, or
the release's name alone when it already contains <name> (release onepool:
onepool-controller-manager, onepool-scheduler). Cut to 40 characters, as
components add their own suffix. */}}
{{- define "onepool.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "onepool.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "onepool.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "onepool.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: onepool
{{- end -}}

{{/* Selector labels of one component: (dict "ctx" $ "component" "scheduler") */}}
{{- define "onepool.selectorLabels" -}}
app.kubernetes.io/name: {{ include "onepool.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "onepool.componentLabels" -}}
{{ include "onepool.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* A component's image: (dict "ctx" $ "component" "scheduler" "image"
.Values.scheduler.image). A field the component leaves empty is the global
image block's: <registry>/<repository>/<component>:<tag, or the chart's
appVersion>. A component's own repository is the whole repository (no
/<component> after it). */}}
{{- define "onepool.image" -}}
{{- $g := .ctx.Values.image -}}
{{- $c := .image | default dict -}}
{{- $repo := $c.repository | default (printf "%s/%s" $g.repository .component) -}}
{{- with $c.registry | default $g.registry -}}{{- $repo = printf "%s/%s" (trimSuffix "/" .) $repo -}}{{- end -}}
{{- printf "%s:%s" $repo ($c.tag | default $g.tag | default .ctx.Chart.AppVersion) -}}
{{- end -}}
{{/* Its pull policy: the component's, else the global one. Same argument. */}}
{{- define "onepool.imagePullPolicy" -}}
{{- (.image | default dict).pullPolicy | default .ctx.Values.image.pullPolicy -}}
{{- end -}}

{{/* The ServiceAccount a component runs as: (dict "ctx" $ "key"
"scheduler" "default" <the component's name>). With serviceAccount.create
the chart makes it, named serviceAccount.name or the default; without, it
is yours, named serviceAccount.name (required), and the chart binds its
roles to it. */}}
{{- define "onepool.serviceAccountName" -}}
{{- $sa := (index .ctx.Values .key).serviceAccount -}}
{{- if $sa.create -}}
{{- $sa.name | default .default -}}
{{- else if $sa.name -}}
{{- $sa.name -}}
{{- else -}}
{{- fail (printf "%s.serviceAccount.name is required when %s.serviceAccount.create is false: the ServiceAccount you made for it (the chart binds its roles to that name)" .key .key) -}}
{{- end -}}
{{- end -}}

{{- define "onepool.controllerManager.name" -}}{{ include "onepool.fullname" . }}-controller-manager{{- end -}}
{{- define "onepool.gpuWebhook.name" -}}{{ include "onepool.fullname" . }}-gpu-webhook{{- end -}}
{{/* The Secret of the webhook's serving certificate: kept by the controller
manager (made, rotated), or by cert-manager. Not the release's: a render
never makes a key. */}}
{{- define "onepool.gpuWebhook.certSecret" -}}{{ include "onepool.gpuWebhook.name" . }}-cert{{- end -}}
{{- define "onepool.scheduler.name" -}}{{ include "onepool.fullname" . }}-scheduler{{- end -}}
{{/* The Secret with the scheduler's metrics serving pair, signed by the
webhook's CA (its ca.crt verifies it): the Secret the controller manager
keeps (keys scheduler-metrics.crt/.key), or cert-manager's for the
scheduler; empty without the GPU webhook (kube-scheduler's self-signed
certificate then). */}}
{{- define "onepool.scheduler.metricsCertSecret" -}}
{{- if and .Values.gpuWebhook.enabled .Values.controllerManager.enabled .Values.scheduler.enabled -}}
{{- if .Values.gpuWebhook.certManager.enabled -}}
{{ include "onepool.scheduler.name" . }}-metrics-cert
{{- else -}}
{{ include "onepool.gpuWebhook.certSecret" . }}
{{- end -}}
{{- end -}}
{{- end -}}
{{- define "onepool.hostAgent.name" -}}{{ include "onepool.fullname" . }}-host-agent{{- end -}}
{{- define "onepool.hostAgent.serviceAccountName" -}}
{{- include "onepool.serviceAccountName" (dict "ctx" . "key" "hostAgent" "default" (include "onepool.hostAgent.name" .)) -}}
{{- end -}}
{{- define "onepool.controllerManager.serviceAccountName" -}}
{{- include "onepool.serviceAccountName" (dict "ctx" . "key" "controllerManager" "default" (include "onepool.controllerManager.name" .)) -}}
{{- end -}}
{{- define "onepool.scheduler.serviceAccountName" -}}
{{- include "onepool.serviceAccountName" (dict "ctx" . "key" "scheduler" "default" (include "onepool.scheduler.name" .)) -}}
{{- end -}}
{{/* The ServiceAccount object of a component whose serviceAccount.create is
set: (dict "ctx" $ "key" "scheduler" "component" "scheduler"). Ends with a
document separator when it renders anything. */}}
{{- define "onepool.serviceAccount" -}}
{{- $sa := (index .ctx.Values .key).serviceAccount -}}
{{- if $sa.create }}
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ include (printf "onepool.%s.serviceAccountName" .key) .ctx }}
  namespace: {{ .ctx.Release.Namespace }}
  labels:
    {{- include "onepool.componentLabels" (dict "ctx" .ctx "component" .component) | nindent 4 }}
  {{- with $sa.annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
---
{{- end }}
{{- end -}}

{{/* The release endpoint's URL as the Slurm nodes reach it. */}}
{{- define "onepool.releaseURL" -}}
{{- if .Values.scheduler.release.url -}}
{{- .Values.scheduler.release.url -}}
{{- else -}}
{{- printf "http://%s-release.%s.svc:%d" (include "onepool.scheduler.name" .) .Release.Namespace (int .Values.scheduler.release.port) -}}
{{- end -}}
{{- end -}}

{{/* The Slurm credential, mounted from the Secret the values name: the
cluster's JWT key (onepool mints its own short-lived tokens: "key"), or a
token made elsewhere ("token"). Exactly one. */}}
{{- define "onepool.slurmCredential" -}}
{{- $token := .Values.slurm.tokenSecret.name -}}
{{- $key := .Values.slurm.jwtKeySecret.name -}}
{{- if and $token $key -}}
{{- fail "slurm.tokenSecret.name and slurm.jwtKeySecret.name are both set: onepool either mints its tokens from the JWT key or reads one; set one" -}}
{{- else if $key -}}key
{{- else if $token -}}token
{{- else -}}
{{- fail "slurm.jwtKeySecret.name (the Secret with the cluster's jwt_hs256.key: onepool mints short-lived tokens) or slurm.tokenSecret.name (a token made elsewhere) is required" -}}
{{- end -}}
{{- end -}}
{{- define "onepool.tokenDir" -}}/var/run/secrets/onepool/slurm{{- end -}}
{{- define "onepool.caDir" -}}/var/run/secrets/onepool/slurm-ca{{- end -}}
{{/* The file the components read the credential from. */}}
{{- define "onepool.credentialFile" -}}
{{- include "onepool.tokenDir" . }}/{{ if eq (include "onepool.slurmCredential" .) "key" }}jwt_hs256.key{{ else }}token{{ end }}
{{- end -}}
{{- define "onepool.slurmCA" -}}
{{- $ca := .Values.slurm.caBundle -}}
{{- if and $ca.configMap $ca.secret -}}
{{- fail "slurm.caBundle: configMap and secret are both set; set one" -}}
{{- else if or $ca.configMap $ca.secret -}}
{{- include "onepool.caDir" . }}/ca.crt
{{- end -}}
{{- end -}}
{{- define "onepool.tokenVolume" -}}
- name: slurm-token
  secret:
    {{- if eq (include "onepool.slurmCredential" .) "key" }}
    secretName: {{ .Values.slurm.jwtKeySecret.name }}
    items:
    - key: {{ .Values.slurm.jwtKeySecret.key }}
      path: jwt_hs256.key
    {{- else }}
    secretName: {{ .Values.slurm.tokenSecret.name }}
    items:
    - key: {{ .Values.slurm.tokenSecret.key }}
      path: token
    {{- end }}
{{- with .Values.slurm.caBundle }}
{{- if .configMap }}
- name: slurm-ca
  configMap:
    name: {{ .configMap }}
    items:
    - {key: {{ .key }}, path: ca.crt}
{{- else if .secret }}
- name: slurm-ca
  secret:
    secretName: {{ .secret }}
    items:
    - {key: {{ .key }}, path: ca.crt}
{{- end }}
{{- end }}
- name: tmp
  emptyDir: {}
{{- end -}}
{{- define "onepool.tokenMount" -}}
- name: slurm-token
  mountPath: {{ include "onepool.tokenDir" . }}
  readOnly: true
{{- if include "onepool.slurmCA" . }}
- name: slurm-ca
  mountPath: {{ include "onepool.caDir" . }}
  readOnly: true
{{- end }}
- name: tmp
  mountPath: /tmp
{{- end -}}
{{/* The component's own pod, for the events it records about itself
(a Slurm token that expires, or that slurmrestd refuses). */}}
{{- define "onepool.podEnv" -}}
- name: POD_NAME
  valueFrom: {fieldRef: {fieldPath: metadata.name}}
- name: POD_NAMESPACE
  valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
{{- end -}}

{{/* Scheduling constraints and security of a component's pod: (dict "ctx" $ "v" .Values.scheduler) */}}
{{- define "onepool.podPlacement" -}}
{{- with .v.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .v.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .v.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .v.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .ctx.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .ctx.Values.podSecurityContext | nindent 2 }}
{{- end -}}

{{/* The ConfigMap the topology controller writes, namespace/name. */}}
{{- define "onepool.topologyConfigMap" -}}
{{- $t := .Values.topology.configMap -}}
{{- printf "%s/%s" (required "topology.configMap.namespace is required with topology.levels" $t.namespace) $t.name -}}
{{- end -}}
