//! The `system:controller:*` roles of the controllers tandem runs: upstream's
//! `buildControllerRoles` / `ControllerRoleBindings`
//! (plugin/pkg/auth/authorizer/rbac/bootstrappolicy/controller_policy.go) and the
//! bootstrap-signer and token-cleaner Roles of namespace_policy.go, transcribed from upstream's
//! `testdata/controller-roles.yaml` (v1.33, default feature gates).
//!
//! Upstream binds each role to the service account `kube-system/<controller>` that
//! kube-controller-manager uses with `--use-service-account-credentials`. tandem runs every
//! controller in one process as the user `system:kube-controller-manager`, so each binding here
//! also names that user (see [`crate::rbac`]).

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};

use super::KUBE_CONTROLLER_MANAGER;
use super::builder::{READ, Rule, Who, cluster_binding, cluster_role, events_rule, rule};
use crate::rbac::GROUP_NAME;

/// The service-account names (upstream's controller names) of the controllers tandem runs, with
/// their rules. Node IPAM runs as `node-controller` upstream; the CSR approver, signer and
/// cleaner all run as `certificate-controller`.
fn controllers() -> Vec<(&'static str, Vec<Rule>)> {
    let apps_ext = ["apps", "extensions"];
    let update =
        |groups: &[&str], resources: &[&str]| rule(&["update"]).groups(groups).resources(resources);
    let pods_rw = || rule(&["list", "watch", "create", "delete", "patch"]).core(&["pods"]);
    let crud = [
        "get", "list", "watch", "create", "update", "patch", "delete",
    ];
    vec![
        (
            "certificate-controller",
            vec![
                rule(&["get", "list", "watch", "delete"])
                    .groups(&["certificates.k8s.io"])
                    .resources(&["certificatesigningrequests"]),
                update(
                    &["certificates.k8s.io"],
                    &[
                        "certificatesigningrequests/status",
                        "certificatesigningrequests/approval",
                    ],
                ),
                rule(&["approve"])
                    .groups(&["certificates.k8s.io"])
                    .resources(&["signers"])
                    .names(&["kubernetes.io/kube-apiserver-client-kubelet"]),
                rule(&["sign"])
                    .groups(&["certificates.k8s.io"])
                    .resources(&["signers"])
                    .names(&[
                        "kubernetes.io/legacy-unknown",
                        "kubernetes.io/kube-apiserver-client",
                        "kubernetes.io/kube-apiserver-client-kubelet",
                        "kubernetes.io/kubelet-serving",
                    ]),
                rule(&["create"])
                    .groups(&["authorization.k8s.io"])
                    .resources(&["subjectaccessreviews"]),
                events_rule(),
            ],
        ),
        (
            "clusterrole-aggregation-controller",
            vec![
                rule(&["escalate", "get", "list", "watch", "update", "patch"])
                    .groups(&[GROUP_NAME])
                    .resources(&["clusterroles"]),
            ],
        ),
        (
            "cronjob-controller",
            vec![
                rule(&["get", "list", "watch", "update"])
                    .groups(&["batch"])
                    .resources(&["cronjobs"]),
                rule(&crud).groups(&["batch"]).resources(&["jobs"]),
                update(&["batch"], &["cronjobs/status"]),
                update(&["batch"], &["cronjobs/finalizers"]),
                rule(&["list", "watch", "delete"]).core(&["pods"]),
                events_rule(),
            ],
        ),
        (
            "daemon-set-controller",
            vec![
                rule(READ).groups(&apps_ext).resources(&["daemonsets"]),
                update(&apps_ext, &["daemonsets/status"]),
                update(&apps_ext, &["daemonsets/finalizers"]),
                rule(&["list", "watch"]).core(&["nodes"]),
                pods_rw(),
                rule(&["create"]).core(&["pods/binding"]),
                rule(&crud)
                    .groups(&["apps"])
                    .resources(&["controllerrevisions"]),
                events_rule(),
            ],
        ),
        (
            "deployment-controller",
            vec![
                rule(&["get", "list", "watch", "update"])
                    .groups(&apps_ext)
                    .resources(&["deployments"]),
                update(&apps_ext, &["deployments/status"]),
                update(&apps_ext, &["deployments/finalizers"]),
                rule(&crud).groups(&apps_ext).resources(&["replicasets"]),
                rule(&["get", "list", "watch", "update"]).core(&["pods"]),
                events_rule(),
            ],
        ),
        (
            "endpointslice-controller",
            vec![
                rule(READ).core(&["services", "pods", "nodes"]),
                update(&[""], &["services/finalizers"]),
                rule(&["get", "list", "watch", "create", "update", "delete"])
                    .groups(&["discovery.k8s.io"])
                    .resources(&["endpointslices"]),
                events_rule(),
            ],
        ),
        (
            "generic-garbage-collector",
            vec![
                rule(&["get", "list", "watch", "patch", "update", "delete"])
                    .groups(&["*"])
                    .resources(&["*"]),
                events_rule(),
            ],
        ),
        (
            "horizontal-pod-autoscaler",
            vec![
                rule(&["get", "list", "watch"])
                    .groups(&["autoscaling"])
                    .resources(&["horizontalpodautoscalers"]),
                update(&["autoscaling"], &["horizontalpodautoscalers/status"]),
                rule(&["get", "update"])
                    .groups(&["*"])
                    .resources(&["*/scale"]),
                rule(&["list"]).core(&["pods"]),
                rule(&["list"])
                    .groups(&["metrics.k8s.io"])
                    .resources(&["pods"]),
                rule(&["get", "list"])
                    .groups(&["custom.metrics.k8s.io"])
                    .resources(&["*"]),
                rule(&["get", "list"])
                    .groups(&["external.metrics.k8s.io"])
                    .resources(&["*"]),
                events_rule(),
            ],
        ),
        (
            "job-controller",
            vec![
                rule(&["get", "list", "watch", "update", "patch"])
                    .groups(&["batch"])
                    .resources(&["jobs"]),
                update(&["batch"], &["jobs/status"]),
                update(&["batch"], &["jobs/finalizers"]),
                pods_rw(),
                events_rule(),
            ],
        ),
        (
            "namespace-controller",
            vec![
                rule(&["get", "list", "watch", "delete"]).core(&["namespaces"]),
                update(&[""], &["namespaces/finalize", "namespaces/status"]),
                rule(&["get", "list", "watch", "delete", "deletecollection"])
                    .groups(&["*"])
                    .resources(&["*"]),
            ],
        ),
        (
            "node-controller",
            vec![
                rule(&["get", "list", "update", "delete", "patch", "watch"]).core(&["nodes"]),
                rule(&["patch", "update"]).core(&["nodes/status"]),
                rule(&["patch", "update"]).core(&["pods/status"]),
                rule(&["list", "watch", "delete", "get"]).core(&["pods"]),
                events_rule(),
            ],
        ),
        (
            "persistent-volume-binder",
            vec![
                rule(&["get", "list", "watch", "update", "create", "delete"])
                    .core(&["persistentvolumes"]),
                update(&[""], &["persistentvolumes/status"]),
                rule(&["get", "list", "watch", "update"]).core(&["persistentvolumeclaims"]),
                update(&[""], &["persistentvolumeclaims/status"]),
                rule(&["list", "watch", "get", "create", "delete"]).core(&["pods"]),
                rule(READ)
                    .groups(&["storage.k8s.io"])
                    .resources(&["storageclasses"]),
                rule(&["list", "watch"]).core(&["nodes"]),
                events_rule(),
                rule(&["watch"]).core(&["events"]),
            ],
        ),
        (
            "replicaset-controller",
            vec![
                rule(&["get", "list", "watch", "update"])
                    .groups(&apps_ext)
                    .resources(&["replicasets"]),
                update(&apps_ext, &["replicasets/status"]),
                update(&apps_ext, &["replicasets/finalizers"]),
                pods_rw(),
                events_rule(),
            ],
        ),
        (
            "replication-controller",
            vec![
                rule(&["get", "list", "watch", "update"]).core(&["replicationcontrollers"]),
                update(&[""], &["replicationcontrollers/status"]),
                update(&[""], &["replicationcontrollers/finalizers"]),
                pods_rw(),
                events_rule(),
            ],
        ),
        (
            "root-ca-cert-publisher",
            vec![
                rule(&["create", "update"]).core(&["configmaps"]),
                events_rule(),
            ],
        ),
        (
            "service-account-controller",
            vec![rule(&["create"]).core(&["serviceaccounts"]), events_rule()],
        ),
        (
            "service-controller",
            vec![
                rule(READ).core(&["services"]),
                rule(&["patch", "update"]).core(&["services/status"]),
                rule(&["list", "watch"]).core(&["nodes"]),
                events_rule(),
            ],
        ),
        (
            "statefulset-controller",
            vec![
                rule(&["list", "watch"]).core(&["pods"]),
                rule(READ).groups(&["apps"]).resources(&["statefulsets"]),
                update(&["apps"], &["statefulsets/status"]),
                update(&["apps"], &["statefulsets/finalizers"]),
                rule(&["get", "create", "delete", "update", "patch"]).core(&["pods"]),
                rule(&crud)
                    .groups(&["apps"])
                    .resources(&["controllerrevisions"]),
                rule(&["get", "create", "list", "watch"]).core(&["persistentvolumeclaims"]),
                rule(&["update", "delete"]).core(&["persistentvolumeclaims"]),
                update(&[""], &["pods/finalizers"]),
                events_rule(),
            ],
        ),
        (
            "ttl-after-finished-controller",
            vec![
                rule(&["get", "list", "watch", "delete"])
                    .groups(&["batch"])
                    .resources(&["jobs"]),
                events_rule(),
            ],
        ),
    ]
}

/// The `system:controller:<name>` ClusterRoles of [`controllers`].
pub(super) fn controller_roles() -> Vec<ClusterRole> {
    controllers()
        .into_iter()
        .map(|(name, rules)| cluster_role(&format!("system:controller:{name}"), rules))
        .collect()
}

/// One `system:controller:<name>` ClusterRoleBinding per controller role: upstream's subject
/// (the service account `kube-system/<name>`) and the controller manager's user.
pub(super) fn controller_role_bindings() -> Vec<ClusterRoleBinding> {
    controllers()
        .into_iter()
        .map(|(name, _)| {
            cluster_binding(
                &format!("system:controller:{name}"),
                &[
                    Who::ServiceAccount("kube-system", name),
                    Who::User(KUBE_CONTROLLER_MANAGER),
                ],
            )
        })
        .collect()
}

/// `system:controller:bootstrap-signer` in `kube-public`: keep the signed `cluster-info`
/// ConfigMap up to date.
pub(super) fn bootstrap_signer_public_rules() -> Vec<Rule> {
    vec![
        rule(READ).core(&["configmaps"]),
        rule(&["update"])
            .core(&["configmaps"])
            .names(&["cluster-info"]),
        events_rule(),
    ]
}

/// `system:controller:token-cleaner` in `kube-system`: delete expired bootstrap tokens.
pub(super) fn token_cleaner_rules() -> Vec<Rule> {
    vec![
        rule(&["delete", "get", "list", "watch"]).core(&["secrets"]),
        events_rule(),
    ]
}
