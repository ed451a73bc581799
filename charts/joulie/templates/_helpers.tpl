{{/*
The selector labels of one role's objects, the same as in manifests/: a role's pods are selected by
these two alone, so they never change between chart versions (a Deployment's selector is
immutable).
*/}}
{{- define "joulie.selectorLabels" -}}
app.kubernetes.io/name: joulie
app.kubernetes.io/component: {{ . }}
{{- end }}

{{/*
What Helm adds to every object's own labels, beside the role's. Not on pod templates or
selectors, so that the pods are labelled as the kustomize manifests label them.
*/}}
{{- define "joulie.chartLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{/* metadata.labels of a role's object: call with (list $ "manager"). */}}
{{- define "joulie.labels" -}}
{{ include "joulie.selectorLabels" (index . 1) }}
{{ include "joulie.chartLabels" (index . 0) }}
{{- end }}

{{/* The image of every role: repository@digest when a digest is set, else repository:tag. */}}
{{- define "joulie.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end }}

{{/* The image lines of a container. */}}
{{- define "joulie.imageLines" -}}
image: {{ include "joulie.image" . }}
{{- with .Values.image.pullPolicy }}
imagePullPolicy: {{ . }}
{{- end }}
{{- end }}

{{/*
env entries from a map of settings (name: value), sorted by name: call with the map.
*/}}
{{- define "joulie.env" -}}
{{- range $name, $value := . }}
- name: {{ $name }}
  value: {{ $value | toString | quote }}
{{- end }}
{{- end }}

{{/* The securityContext of every non-root role's pod. */}}
{{- define "joulie.podSecurityNonRoot" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile: {type: RuntimeDefault}
{{- end }}

{{/* The securityContext of every container. */}}
{{- define "joulie.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities: {drop: [ALL]}
{{- end }}

{{/* The probes of every role, on its http-metrics port: call with the readiness period. */}}
{{- define "joulie.probes" -}}
livenessProbe:
  httpGet: {path: /healthz, port: http-metrics}
  periodSeconds: 20
readinessProbe:
  httpGet: {path: /readyz, port: http-metrics}
  periodSeconds: {{ . }}
{{- end }}

{{/*
The pod spec fields every role has in common: call with (list $ .Values.<role>).
*/}}
{{- define "joulie.podPlacement" -}}
{{- $root := index . 0 -}}
{{- $role := index . 1 -}}
{{- with $role.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets:
{{- toYaml . | nindent 2 }}
{{- end }}
{{- with $role.nodeSelector }}
nodeSelector:
{{- toYaml . | nindent 2 }}
{{- end }}
{{- with $role.tolerations }}
tolerations:
{{- toYaml . | nindent 2 }}
{{- end }}
{{- with $role.affinity }}
affinity:
{{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* The simulator's in-cluster URL (its Service). */}}
{{- define "joulie.simulatorURL" -}}
http://joulie-simulator.{{ .Release.Namespace }}.svc:{{ .Values.simulator.servicePort }}
{{- end }}
