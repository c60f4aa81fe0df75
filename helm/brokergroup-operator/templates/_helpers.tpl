{{/* Names, labels and the RBAC rules shared by the templates. */}}

{{- define "brokergroup-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "brokergroup-operator.fullname" -}}
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

{{/* Cluster-scoped objects carry the release namespace too: two releases never collide. */}}
{{- define "brokergroup-operator.clusterName" -}}
{{- printf "%s-%s" (include "brokergroup-operator.fullname" .) .Release.Namespace | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* replicaCount > 1: kopf peering on (one active replica); the peering object's name. */}}
{{- define "brokergroup-operator.peering" -}}
{{- if gt (int .Values.replicaCount) 1 }}true{{ end }}
{{- end }}

{{- define "brokergroup-operator.peeringName" -}}
{{- include "brokergroup-operator.clusterName" . }}
{{- end }}

{{- define "brokergroup-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "brokergroup-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "brokergroup-operator.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "brokergroup-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "brokergroup-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "brokergroup-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "brokergroup-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The namespaces a namespaced operator watches: the list, or the release namespace. */}}
{{- define "brokergroup-operator.watchNamespaces" -}}
{{- if .Values.watch.namespaces }}
{{- join "," (uniq .Values.watch.namespaces) }}
{{- else }}
{{- .Release.Namespace }}
{{- end }}
{{- end }}

{{/*
Exactly what the operator uses (docs/operator.md "RBAC"; operator/deploy/rbac.yaml is the same
list and tests/helm checks they agree). Nothing reads Secrets, nodes, CRDs or namespaces;
children are deleted by the garbage collector, never by the operator.
*/}}
{{- define "brokergroup-operator.rules" -}}
# kopf watches the groups and patches their finalizer and annotations
- apiGroups: [brokergroup.io]
  resources: [brokergroups]
  verbs: [get, list, watch, patch]
- apiGroups: [brokergroup.io]
  resources: [brokergroups/status]
  verbs: [get, patch]
# ownerReferences with blockOwnerDeletion on children
- apiGroups: [brokergroup.io]
  resources: [brokergroups/finalizers]
  verbs: [update]
# children, by server-side apply, and watched (ours only) so drift is repaired
- apiGroups: [""]
  resources: [configmaps]
  verbs: [list, watch, create, patch]
# Services also deleted: a removed slave's external Service (spec.externalAccess)
- apiGroups: [""]
  resources: [services]
  verbs: [list, watch, create, patch, delete]
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [list, watch, create, patch]
- apiGroups: [apps]
  resources: [statefulsets]
  verbs: [list, watch, create, patch]
# broker pods: watched (IPs, readiness, revision), deleted one at a time by rolling restarts
# (and an unfenceable old master after a failover), patched with their role label
- apiGroups: [""]
  resources: [pods]
  verbs: [list, watch, delete, patch]
# volume claims: watched, patched to a grown spec.storage.size
- apiGroups: [""]
  resources: [persistentvolumeclaims]
  verbs: [list, watch, patch]
- apiGroups: [""]
  resources: [events]
  verbs: [create]
# each group's admin token and HA secret Secrets: written (server-side apply), never read
- apiGroups: [""]
  resources: [secrets]
  verbs: [create, patch]
{{- if include "brokergroup-operator.peering" . }}
# kopf peering (replicaCount > 1): each replica keeps its record in the peering object fresh
- apiGroups: [kopf.dev]
  resources: [{{ if eq .Values.watch.mode "cluster" }}clusterkopfpeerings{{ else }}kopfpeerings{{ end }}]
  verbs: [get, list, watch, patch]
{{- end }}
{{- if .Values.networkPolicy.enabled }}
# one NetworkPolicy per group (BROKERGROUP_NETWORK_POLICY)
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [list, watch, create, patch]
{{- end }}
{{- end }}

{{/* The operator key Secret (every group's admin token and HA secret derive from it) */}}
{{- define "brokergroup-operator.keyName" -}}
{{ include "brokergroup-operator.fullname" . }}-key
{{- end }}
