//! The rules of upstream's component and user-facing ClusterRoles
//! (plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go: `NodeRules`, the
//! `system:aggregate-to-*` roles, `system:kube-scheduler`, `system:kube-controller-manager`),
//! as v1.33 builds them with default feature gates.

use super::builder::{READ, READ_WRITE, Rule, WRITE, events_rule, rule};

/// Upstream `NodeRules()` with v1.33's default feature gates.
pub(super) fn node_rules() -> Vec<Rule> {
    vec![
        rule(&["create"])
            .groups(&["authentication.k8s.io"])
            .resources(&["tokenreviews"]),
        rule(&["create"])
            .groups(&["authorization.k8s.io"])
            .resources(&["subjectaccessreviews", "localsubjectaccessreviews"]),
        rule(READ).core(&["services"]),
        rule(&["create", "get", "list", "watch"]).core(&["nodes"]),
        rule(&["update", "patch"]).core(&["nodes/status"]),
        rule(&["update", "patch"]).core(&["nodes"]),
        rule(&["create", "update", "patch"]).core(&["events"]),
        rule(READ).core(&["pods"]),
        rule(&["create", "delete"]).core(&["pods"]),
        rule(&["update", "patch"]).core(&["pods/status"]),
        rule(&["create"]).core(&["pods/eviction"]),
        rule(READ).core(&["secrets", "configmaps"]),
        rule(&["get"]).core(&["persistentvolumeclaims", "persistentvolumes"]),
        rule(&["get"]).core(&["endpoints"]),
        rule(&["create", "get", "list", "watch"])
            .groups(&["certificates.k8s.io"])
            .resources(&["certificatesigningrequests"]),
        rule(&["get", "create", "update", "patch", "delete"])
            .groups(&["coordination.k8s.io"])
            .resources(&["leases"]),
        rule(&["get"])
            .groups(&["storage.k8s.io"])
            .resources(&["volumeattachments"]),
        rule(&["create"]).core(&["serviceaccounts/token"]),
        rule(&["get", "update", "patch"]).core(&["persistentvolumeclaims/status"]),
        rule(READ)
            .groups(&["storage.k8s.io"])
            .resources(&["csidrivers"]),
        rule(&["get", "create", "update", "patch", "delete"])
            .groups(&["storage.k8s.io"])
            .resources(&["csinodes"]),
        rule(READ)
            .groups(&["node.k8s.io"])
            .resources(&["runtimeclasses"]),
    ]
}

pub(super) fn aggregate_to_edit() -> Vec<Rule> {
    let core_write = [
        "replicationcontrollers",
        "replicationcontrollers/scale",
        "serviceaccounts",
        "services",
        "services/proxy",
        "persistentvolumeclaims",
        "configmaps",
        "secrets",
        "events",
    ];
    let pod_access = ["pods/attach", "pods/proxy", "pods/exec", "pods/portforward"];
    vec![
        rule(READ).core(&[&pod_access[..], &["secrets", "services/proxy"]].concat()),
        rule(&["impersonate"]).core(&["serviceaccounts"]),
        rule(WRITE).core(&[&["pods"], &pod_access[..]].concat()),
        rule(&["create"]).core(&["pods/eviction"]),
        rule(WRITE).core(&core_write),
        rule(&["create"]).core(&["serviceaccounts/token"]),
        rule(WRITE).groups(&["apps"]).resources(&[
            "statefulsets",
            "statefulsets/scale",
            "daemonsets",
            "deployments",
            "deployments/scale",
            "deployments/rollback",
            "replicasets",
            "replicasets/scale",
        ]),
        rule(WRITE)
            .groups(&["autoscaling"])
            .resources(&["horizontalpodautoscalers"]),
        rule(WRITE)
            .groups(&["batch"])
            .resources(&["jobs", "cronjobs"]),
        rule(WRITE).groups(&["extensions"]).resources(&[
            "daemonsets",
            "deployments",
            "deployments/scale",
            "deployments/rollback",
            "ingresses",
            "replicasets",
            "replicasets/scale",
            "replicationcontrollers/scale",
            "networkpolicies",
        ]),
        rule(WRITE)
            .groups(&["policy"])
            .resources(&["poddisruptionbudgets"]),
        rule(WRITE)
            .groups(&["networking.k8s.io"])
            .resources(&["networkpolicies", "ingresses"]),
        rule(READ_WRITE)
            .groups(&["coordination.k8s.io"])
            .resources(&["leases"]),
    ]
}

pub(super) fn aggregate_to_view() -> Vec<Rule> {
    vec![
        rule(READ).core(&[
            "pods",
            "replicationcontrollers",
            "replicationcontrollers/scale",
            "serviceaccounts",
            "services",
            "services/status",
            "endpoints",
            "persistentvolumeclaims",
            "persistentvolumeclaims/status",
            "configmaps",
        ]),
        rule(READ).core(&[
            "limitranges",
            "resourcequotas",
            "bindings",
            "events",
            "pods/status",
            "resourcequotas/status",
            "namespaces/status",
            "replicationcontrollers/status",
            "pods/log",
        ]),
        rule(READ).core(&["namespaces"]),
        rule(READ)
            .groups(&["discovery.k8s.io"])
            .resources(&["endpointslices"]),
        rule(READ).groups(&["apps"]).resources(&[
            "controllerrevisions",
            "statefulsets",
            "statefulsets/status",
            "statefulsets/scale",
            "daemonsets",
            "daemonsets/status",
            "deployments",
            "deployments/status",
            "deployments/scale",
            "replicasets",
            "replicasets/status",
            "replicasets/scale",
        ]),
        rule(READ).groups(&["autoscaling"]).resources(&[
            "horizontalpodautoscalers",
            "horizontalpodautoscalers/status",
        ]),
        rule(READ).groups(&["batch"]).resources(&[
            "jobs",
            "jobs/status",
            "cronjobs",
            "cronjobs/status",
        ]),
        rule(READ).groups(&["extensions"]).resources(&[
            "daemonsets",
            "daemonsets/status",
            "deployments",
            "deployments/scale",
            "deployments/status",
            "ingresses",
            "ingresses/status",
            "replicasets",
            "replicasets/scale",
            "replicasets/status",
            "replicationcontrollers/scale",
            "networkpolicies",
        ]),
        rule(READ)
            .groups(&["policy"])
            .resources(&["poddisruptionbudgets", "poddisruptionbudgets/status"]),
        rule(READ).groups(&["networking.k8s.io"]).resources(&[
            "ingresses",
            "ingresses/status",
            "networkpolicies",
        ]),
    ]
}

pub(super) fn kube_scheduler_rules() -> Vec<Rule> {
    vec![
        events_rule(),
        rule(&["create"])
            .groups(&["coordination.k8s.io"])
            .resources(&["leases"]),
        rule(&["get", "update"])
            .groups(&["coordination.k8s.io"])
            .resources(&["leases"])
            .names(&["kube-scheduler"]),
        rule(READ).core(&["nodes"]),
        rule(&["get", "list", "watch", "delete"]).core(&["pods"]),
        rule(&["create"]).core(&["pods/binding", "bindings"]),
        rule(&["patch", "update"]).core(&["pods/status"]),
        rule(READ).core(&["replicationcontrollers", "services"]),
        rule(READ)
            .groups(&["apps", "extensions"])
            .resources(&["replicasets"]),
        rule(READ).groups(&["apps"]).resources(&["statefulsets"]),
        rule(READ)
            .groups(&["policy"])
            .resources(&["poddisruptionbudgets"]),
        rule(READ).core(&["persistentvolumeclaims", "persistentvolumes"]),
        rule(&["create"])
            .groups(&["authentication.k8s.io"])
            .resources(&["tokenreviews"]),
        rule(&["create"])
            .groups(&["authorization.k8s.io"])
            .resources(&["subjectaccessreviews"]),
        rule(READ)
            .groups(&["storage.k8s.io"])
            .resources(&["csinodes"]),
        rule(READ).core(&["namespaces"]),
        rule(READ)
            .groups(&["storage.k8s.io"])
            .resources(&["csidrivers"]),
        rule(READ)
            .groups(&["storage.k8s.io"])
            .resources(&["csistoragecapacities"]),
    ]
}

pub(super) fn kube_controller_manager_rules() -> Vec<Rule> {
    vec![
        events_rule(),
        rule(&["create"])
            .groups(&["coordination.k8s.io"])
            .resources(&["leases"]),
        rule(&["get", "update"])
            .groups(&["coordination.k8s.io"])
            .resources(&["leases"])
            .names(&["kube-controller-manager"]),
        rule(&["create"]).core(&["secrets", "serviceaccounts"]),
        rule(&["delete"]).core(&["secrets"]),
        rule(&["get"]).core(&["configmaps", "namespaces", "secrets", "serviceaccounts"]),
        rule(&["update"]).core(&["secrets", "serviceaccounts"]),
        rule(&["create"])
            .groups(&["authentication.k8s.io"])
            .resources(&["tokenreviews"]),
        rule(&["create"])
            .groups(&["authorization.k8s.io"])
            .resources(&["subjectaccessreviews"]),
        rule(&["list", "watch"]).groups(&["*"]).resources(&["*"]),
        rule(&["create"]).core(&["serviceaccounts/token"]),
    ]
}
