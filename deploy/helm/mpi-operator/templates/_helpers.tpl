{{- define "mpi-operator.lockNamespace" -}}
{{- .Values.lockNamespace | default .Release.Namespace -}}
{{- end -}}
{{- define "mpi-operator.probePort" -}}
{{- if eq (int .Values.monitoring.port) 0 -}}8080{{- else -}}{{ int .Values.monitoring.port }}{{- end -}}
{{- end -}}
