{{- /*
What every pod of the chart may carry beyond the plain YAML: the image pull Secrets (imagePullSecrets) and
the component's priorityClassName; nothing with the defaults, so the default render stays deploy/.
Call with (dict "root" $ "component" .Values.<component>).
*/}}
{{- define "kubenexus.podExtras" -}}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .component.priorityClassName }}
priorityClassName: {{ . | quote }}
{{- end }}
{{- end }}

{{- /* The component's podAnnotations, after the annotations the chart sets itself. */}}
{{- define "kubenexus.podAnnotations" -}}
{{- with .podAnnotations }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- /* The component's extraArgs, after the arguments the chart passes. */}}
{{- define "kubenexus.extraArgs" -}}
{{- range .extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end }}
