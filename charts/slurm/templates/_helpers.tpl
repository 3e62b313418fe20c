{{/* Names: <release>-slurm unless the release is already called slurm-something. */}}
{{- define "slurm.fullname" -}}
{{- if contains "slurm" .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-slurm" .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "slurm.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: slurm
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: onepool
{{- end -}}

{{/* (dict "ctx" $ "component" "slurmctld") */}}
{{- define "slurm.selectorLabels" -}}
app.kubernetes.io/name: slurm
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "slurm.componentLabels" -}}
{{ include "slurm.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* (dict "ctx" $ "component" "slurmctld") */}}
{{- define "slurm.image" -}}
{{- $i := .ctx.Values.image -}}
{{- $repo := printf "%s/%s" $i.repository .component -}}
{{- if $i.registry -}}{{- $repo = printf "%s/%s" (trimSuffix "/" $i.registry) $repo -}}{{- end -}}
{{- printf "%s:%s" $repo $i.tag -}}
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
that munge owns it 0400. */}}
{{- define "slurm.mungeSidecar" -}}
- name: munged
  restartPolicy: Always
  image: {{ include "slurm.image" (dict "ctx" . "component" "slurmctld") }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
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
