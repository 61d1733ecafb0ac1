{{/*
What the operator may do, and no more: read and write its own resources and their status,
manage the children it creates (ConfigMaps, Secrets, Services, Deployments, ServiceAccounts,
Roles and RoleBindings for the runtimes' Events, NetworkPolicies and PodDisruptionBudgets of
the runtimes' pods,
cert-manager Certificates, the Ingresses and Gateway API routes of spec.expose), and record
Events. The Gateway API routes are not watched (their CRDs may be absent): read, applied and
deleted by name, and listed (one item) to learn which versions are served.
*/}}
{{- define "ifp-operator.rules" -}}
- apiGroups: [ifp.dev]
  resources: [agents, relays]
  verbs: [get, list, watch, update, patch]
- apiGroups: [ifp.dev]
  resources: [agents/status, relays/status]
  verbs: [get, update, patch]
- apiGroups: [ifp.dev]
  resources: [agents/finalizers, relays/finalizers]
  verbs: [update]
- apiGroups: [""]
  resources: [configmaps, services, serviceaccounts]
  verbs: [get, list, watch, create, update, patch, delete]
# Secrets: never deleted (what the operator made goes with its owner). list and watch feed the
# cache of the Secrets it labelled, which RBAC cannot narrow to a label.
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, list, watch, create, update, patch]
- apiGroups: [apps]
  resources: [deployments]
  verbs: [get, list, watch, create, update, patch, delete]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles, rolebindings]
  verbs: [get, list, watch, create, update, patch, delete]
- apiGroups: [cert-manager.io]
  resources: [certificates]
  verbs: [get, list, watch, create, update, patch, delete]
- apiGroups: [networking.k8s.io]
  resources: [ingresses]
  verbs: [get, list, watch, create, patch, delete]
# The runtimes' NetworkPolicies (networkPolicy.runtimes.enabled), watched so that one deleted is made again.
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [get, list, watch, create, patch, delete]
# The PodDisruptionBudgets of runtimes of more than one replica (spec.disruption), watched so that one deleted is made again.
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [gateway.networking.k8s.io]
  resources: [tlsroutes, httproutes, backendtlspolicies]
  verbs: [get, list, create, patch, delete]
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch]
- apiGroups: [events.k8s.io]
  resources: [events]
  verbs: [create, patch]
{{- end }}
