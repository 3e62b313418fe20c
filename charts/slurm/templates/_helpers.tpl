{{/* The chart's name: nameOverride, or the chart's own (slurm); the
app.kubernetes.io/name label. */}}
{{- define "slurm.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The prefix of every name: fullnameOverride; else <release>-<name>, or
the release's name alone when it already contains <name> (release slurm:
slurm-controller, slurm-restapi). Cut to 40 characters, as components add
their own suffix. */}}
{{- define "slurm.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "slurm.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "slurm.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "slurm.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: onepool
{{- end -}}

{{/* (dict "ctx" $ "component" "slurmctld") */}}
{{- define "slurm.selectorLabels" -}}
app.kubernetes.io/name: {{ include "slurm.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "slurm.componentLabels" -}}
{{ include "slurm.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* A component's image: (dict "ctx" $ "component" "slurmctld" "image"
.Values.slurmctld.image). A field the component leaves empty is the global
image block's: <registry>/<repository>/<component>:<tag>. A component's own
repository is the whole repository (no /<component> after it). */}}
{{- define "slurm.image" -}}
{{- $g := .ctx.Values.image -}}
{{- $c := .image | default dict -}}
{{- $repo := $c.repository | default (printf "%s/%s" $g.repository .component) -}}
{{- with $c.registry | default $g.registry -}}{{- $repo = printf "%s/%s" (trimSuffix "/" .) $repo -}}{{- end -}}
{{- printf "%s:%s" $repo ($c.tag | default $g.tag) -}}
{{- end -}}
{{/* Its pull policy: the component's, else the global one. Same argument. */}}
{{- define "slurm.imagePullPolicy" -}}
{{- (.image | default dict).pullPolicy | default .ctx.Values.image.pullPolicy -}}
{{- end -}}

{{/* The ServiceAccount of a part of the chart: (dict "sa"
.Values.keys.serviceAccount "key" "keys" "default" <its name>). With
create the chart makes it, named name or the default; without, it is
yours, named name (required), and the chart binds its roles to it. */}}
{{- define "slurm.serviceAccountName" -}}
{{- if .sa.create -}}
{{- .sa.name | default .default -}}
{{- else if .sa.name -}}
{{- .sa.name -}}
{{- else -}}
{{- fail (printf "%s.serviceAccount.name is required when %s.serviceAccount.create is false: the ServiceAccount you made for it (the chart binds its roles to that name)" .key .key) -}}
{{- end -}}
{{- end -}}
{{/* The keys Job's ServiceAccount, and the DRA driver's (slurmd pods). */}}
{{- define "slurm.keys.serviceAccountName" -}}
{{- include "slurm.serviceAccountName" (dict "sa" .Values.keys.serviceAccount "key" "keys" "default" (printf "%s-keys" (include "slurm.fullname" .))) -}}
{{- end -}}
{{- define "slurm.slurmd.serviceAccountName" -}}
{{- include "slurm.serviceAccountName" (dict "sa" .Values.dra.serviceAccount "key" "dra" "default" (printf "%s-slurmd" (include "slurm.fullname" .))) -}}
{{- end -}}

{{/* slurmctld's pod (StatefulSet ordinal 0) and its stable DNS name. */}}
{{- define "slurm.controller" -}}{{ include "slurm.fullname" . }}-controller{{- end -}}
{{- define "slurm.controllerHost" -}}{{ include "slurm.controller" . }}-0{{- end -}}
{{- define "slurm.controllerAddr" -}}
{{- printf "%s.%s.%s.svc" (include "slurm.controllerHost" .) (include "slurm.controller" .) .Release.Namespace -}}
{{- end -}}
{{- define "slurm.dbd" -}}{{ include "slurm.fullname" . }}-accounting{{- end -}}
{{- define "slurm.db" -}}{{ include "slurm.fullname" . }}-mariadb{{- end -}}
{{- define "slurm.restapi" -}}{{ include "slurm.fullname" . }}-restapi{{- end -}}
{{- define "slurm.configName" -}}{{ include "slurm.fullname" . }}-config{{- end -}}

{{/* Secrets: the one the values name, or the chart's. */}}
{{- define "slurm.mungeSecret" -}}{{ default (printf "%s-munge" (include "slurm.fullname" .)) .Values.secrets.mungeKey }}{{- end -}}
{{- define "slurm.jwtSecret" -}}{{ default (printf "%s-jwt" (include "slurm.fullname" .)) .Values.secrets.jwtKey }}{{- end -}}
{{- define "slurm.dbSecret" -}}{{ default (printf "%s-db" (include "slurm.fullname" .)) .Values.accounting.mariadb.existingSecret }}{{- end -}}

{{/* Volumes every Slurm daemon mounts: config, munge key. */}}
{{- define "slurm.commonVolumes" -}}
- name: slurm-config
  projected:
    sources:
    - configMap:
        name: {{ include "slurm.configName" . }}
    {{- if .Values.topology.enabled }}
    # topology.conf beside slurm.conf, kept by onepool's topology controller.
    - configMap:
        name: {{ include "slurm.topologyName" . }}
        items: [{key: topology.conf, path: topology.conf}]
    {{- end }}
- name: munge-key
  secret:
    secretName: {{ include "slurm.mungeSecret" . }}
    defaultMode: 0400
- name: munge-run
  emptyDir: {}
{{- end -}}
{{- define "slurm.commonMounts" -}}
- name: slurm-config
  mountPath: /etc/slurm
  readOnly: true
- name: munge-key
  mountPath: /etc/munge/keys
  readOnly: true
- name: munge-run
  mountPath: /run/munge
{{- end -}}

{{/* munged beside a daemon, as a native sidecar (an init container that
keeps running): it is up before the daemon starts. It copies the key so
that munge owns it 0400. Its image is slurmctld's (slurmctld.image). */}}
{{- define "slurm.mungeSidecar" -}}
- name: munged
  restartPolicy: Always
  image: {{ include "slurm.image" (dict "ctx" . "component" "slurmctld" "image" .Values.slurmctld.image) }}
  imagePullPolicy: {{ include "slurm.imagePullPolicy" (dict "ctx" . "image" .Values.slurmctld.image) }}
  command: [/usr/local/bin/onepool-munged]
  volumeMounts:
    {{- include "slurm.commonMounts" . | nindent 4 }}
  resources:
    requests: {cpu: 10m, memory: 16Mi}
    limits: {memory: 128Mi}
{{- end -}}

{{/* The login users as name:uid,... */}}
{{- define "slurm.loginUsers" -}}
{{- $users := list }}
{{- range .Values.login.users }}{{ $users = append $users (printf "%s:%d" .name (int .uid)) }}{{ end }}
{{- join "," $users }}
{{- end -}}

{{- define "slurm.placement" -}}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The ConfigMap onepool's topology controller writes topology.conf to. */}}
{{- define "slurm.topologyName" -}}
{{- .Values.topology.configMapName | default (printf "%s-topology" (include "slurm.fullname" .)) -}}
{{- end -}}
