//! The default RBAC policy the API server creates at start: upstream's bootstrap policy
//! (plugin/pkg/auth/authorizer/rbac/bootstrappolicy: `ClusterRoles`, `ClusterRoleBindings`,
//! `NamespaceRoles`, `NamespaceRoleBindings` in policy.go and namespace_policy.go, the
//! `system:controller:*` roles of controller_policy.go in `controller_policy.rs`), as
//! typed objects, for the components tandem runs. Rules are transcribed from upstream's
//! golden files (`testdata/*.yaml`, v1.33 with default feature gates), so they read sorted
//! exactly as `kubectl get clusterrole -o yaml` shows them on a kubeadm cluster.
//!
//! Every object carries the label `kubernetes.io/bootstrapping: rbac-defaults` and the annotation
//! `rbac.authorization.kubernetes.io/autoupdate: "true"`, as upstream's `addDefaultMetadata`.
//!
//! Beyond upstream's defaults, tandem binds what kubeadm would create for TLS bootstrapping:
//! `system:node-bootstrapper` and
//! `system:certificates.k8s.io:certificatesigningrequests:nodeclient` to the group
//! `system:bootstrappers`, and `…:selfnodeclient` to `system:nodes` (kubeadm's
//! `kubeadm:kubelet-bootstrap`, `kubeadm:node-autoapprove-bootstrap` and
//! `kubeadm:node-autoapprove-certificate-rotation`, under the role names here), and the
//! `system:coredns` role its CoreDNS addon binds to `kube-system/coredns`, the cluster DNS's
//! identity. tandem's own add-ons get roles of the same kind: `system:tandem:ingress-controller`
//! (the built-in ingress controller's ServiceAccount) and `system:tandem:network-policy-agent`
//! (the NetworkPolicy agent's ServiceAccount, and every node, which runs it under
//! `tandem agent`). How the
//! controller manager's user is granted the controller roles is described in [`crate::rbac`].

mod builder;
mod controller_policy;
mod system_roles;
#[cfg(test)]
mod tests;

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding, RoleRef};

use super::GROUP_NAME;
pub(in crate::rbac) use builder::rule;
use builder::{
    READ, READ_WRITE, Rule, Who, build, cluster_binding, cluster_role, events_rule, labelled_role,
    meta, subjects,
};
use system_roles::{
    aggregate_to_edit, aggregate_to_view, kube_controller_manager_rules, kube_scheduler_rules,
    node_rules,
};

const AGGREGATE_TO_ADMIN: &str = "rbac.authorization.k8s.io/aggregate-to-admin";
const AGGREGATE_TO_EDIT: &str = "rbac.authorization.k8s.io/aggregate-to-edit";
const AGGREGATE_TO_VIEW: &str = "rbac.authorization.k8s.io/aggregate-to-view";

/// The controller manager's user (upstream `user.KubeControllerManager`).
pub const KUBE_CONTROLLER_MANAGER: &str = "system:kube-controller-manager";
/// The scheduler's user (`user.KubeScheduler`).
pub const KUBE_SCHEDULER: &str = "system:kube-scheduler";
/// The service proxy's user (`user.KubeProxy`).
pub const KUBE_PROXY: &str = "system:kube-proxy";
/// The ClusterRole of tandem's built-in ingress controller.
pub const INGRESS_CONTROLLER_ROLE: &str = "system:tandem:ingress-controller";
/// The `kube-system` ServiceAccount the built-in ingress controller runs as.
pub const INGRESS_CONTROLLER_SA: &str = "tandem-ingress-controller";
/// The ClusterRole of tandem's NetworkPolicy agent.
pub const NETWORK_POLICY_AGENT_ROLE: &str = "system:tandem:network-policy-agent";
/// The `kube-system` ServiceAccount the NetworkPolicy agent runs as under `tandem up`.
pub const NETWORK_POLICY_AGENT_SA: &str = "tandem-network-policy-agent";
/// The group of every node (`user.NodesGroup`).
pub const NODES_GROUP: &str = "system:nodes";
/// The group of bootstrap-token users (`bootstrapapi.BootstrapDefaultGroup`).
pub const BOOTSTRAPPERS_GROUP: &str = "system:bootstrappers";
/// The superuser group (`user.SystemPrivilegedGroup`).
pub const MASTERS_GROUP: &str = "system:masters";
/// Every authenticated user (`user.AllAuthenticated`).
pub const AUTHENTICATED_GROUP: &str = "system:authenticated";
/// Every anonymous request (`user.AllUnauthenticated`).
pub const UNAUTHENTICATED_GROUP: &str = "system:unauthenticated";
/// Every service account (`serviceaccount.AllServiceAccountsGroup`).
pub const SERVICE_ACCOUNTS_GROUP: &str = "system:serviceaccounts";
/// The monitoring group (`user.MonitoringGroup`).
pub const MONITORING_GROUP: &str = "system:monitoring";

/// Every bootstrap ClusterRole, the `system:controller:*` roles included, sorted by name.
/// `admin`, `edit` and `view` carry only an `aggregationRule` (no rules): the
/// clusterrole-aggregation controller fills them from the `aggregate-to-*` roles, see
/// [`crate::rbac::aggregate_rules`].
pub fn cluster_roles() -> Vec<ClusterRole> {
    let certificates = |verbs: &[&str], resources: &[&str]| {
        rule(verbs)
            .groups(&["certificates.k8s.io"])
            .resources(resources)
    };
    let mut roles = vec![
        labelled_role("admin", &[], Some(AGGREGATE_TO_ADMIN), vec![]),
        cluster_role(
            "cluster-admin",
            vec![
                rule(&["*"]).groups(&["*"]).resources(&["*"]),
                rule(&["*"]).urls(&["*"]),
            ],
        ),
        labelled_role(
            "edit",
            &[AGGREGATE_TO_ADMIN],
            Some(AGGREGATE_TO_EDIT),
            vec![],
        ),
        labelled_role(
            "system:aggregate-to-admin",
            &[AGGREGATE_TO_ADMIN],
            None,
            vec![
                rule(&["create"])
                    .groups(&["authorization.k8s.io"])
                    .resources(&["localsubjectaccessreviews"]),
                rule(READ_WRITE)
                    .groups(&[GROUP_NAME])
                    .resources(&["roles", "rolebindings"]),
            ],
        ),
        labelled_role(
            "system:aggregate-to-edit",
            &[AGGREGATE_TO_EDIT],
            None,
            aggregate_to_edit(),
        ),
        // metrics-server's manifest ships this role; tandem serves metrics.k8s.io itself.
        labelled_role(
            "system:aggregated-metrics-reader",
            &[AGGREGATE_TO_VIEW, AGGREGATE_TO_EDIT, AGGREGATE_TO_ADMIN],
            None,
            vec![
                rule(&["get", "list", "watch"])
                    .groups(&["metrics.k8s.io"])
                    .resources(&["pods", "nodes"]),
            ],
        ),
        labelled_role(
            "system:aggregate-to-view",
            &[AGGREGATE_TO_VIEW],
            None,
            aggregate_to_view(),
        ),
        cluster_role(
            "system:auth-delegator",
            vec![
                rule(&["create"])
                    .groups(&["authentication.k8s.io"])
                    .resources(&["tokenreviews"]),
                rule(&["create"])
                    .groups(&["authorization.k8s.io"])
                    .resources(&["subjectaccessreviews"]),
            ],
        ),
        cluster_role(
            "system:basic-user",
            vec![
                rule(&["create"])
                    .groups(&["authorization.k8s.io"])
                    .resources(&["selfsubjectaccessreviews", "selfsubjectrulesreviews"]),
                rule(&["create"])
                    .groups(&["authentication.k8s.io"])
                    .resources(&["selfsubjectreviews"]),
            ],
        ),
        cluster_role(
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
            vec![certificates(
                &["create"],
                &["certificatesigningrequests/nodeclient"],
            )],
        ),
        cluster_role(
            "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
            vec![certificates(
                &["create"],
                &["certificatesigningrequests/selfnodeclient"],
            )],
        ),
        cluster_role(
            "system:certificates.k8s.io:kube-apiserver-client-kubelet-approver",
            vec![
                certificates(&["approve"], &["signers"])
                    .names(&["kubernetes.io/kube-apiserver-client-kubelet"]),
            ],
        ),
        cluster_role(
            "system:discovery",
            vec![rule(&["get"]).urls(&[
                "/livez",
                "/readyz",
                "/healthz",
                "/version",
                "/version/",
                "/openapi",
                "/openapi/*",
                "/api",
                "/api/*",
                "/apis",
                "/apis/*",
            ])],
        ),
        cluster_role(
            "system:heapster",
            vec![
                rule(READ).core(&["events", "pods", "nodes", "namespaces"]),
                rule(READ)
                    .groups(&["extensions"])
                    .resources(&["deployments"]),
            ],
        ),
        cluster_role(
            "system:kube-controller-manager",
            kube_controller_manager_rules(),
        ),
        cluster_role(
            "system:kube-dns",
            vec![rule(&["list", "watch"]).core(&["endpoints", "services"])],
        ),
        // What kubeadm's CoreDNS addon installs for the cluster DNS (tandem's DNS server
        // follows namespaces and EndpointSlices as CoreDNS does).
        cluster_role(
            "system:coredns",
            vec![
                rule(&["list", "watch"]).core(&["endpoints", "namespaces", "pods", "services"]),
                rule(&["list", "watch"])
                    .groups(&["discovery.k8s.io"])
                    .resources(&["endpointslices"]),
            ],
        ),
        // tandem's built-in ingress controller, as ingress-nginx's chart grants its controller:
        // it reads Ingresses, IngressClasses, Services, EndpointSlices, TLS Secrets and its own
        // Node, writes the Ingresses' status and its events; creating the IngressClass is the
        // installer's job.
        cluster_role(
            INGRESS_CONTROLLER_ROLE,
            vec![
                rule(READ).core(&["nodes", "secrets", "services"]),
                rule(READ)
                    .groups(&["networking.k8s.io"])
                    .resources(&["ingressclasses", "ingresses"]),
                rule(&["patch", "update"])
                    .groups(&["networking.k8s.io"])
                    .resources(&["ingresses/status"]),
                rule(READ)
                    .groups(&["discovery.k8s.io"])
                    .resources(&["endpointslices"]),
                events_rule(),
            ],
        ),
        // tandem's NetworkPolicy agent, as a node-level policy agent's (kube-router's,
        // Calico's) role: it follows policies, pods, namespaces and nodes and reports events.
        cluster_role(
            NETWORK_POLICY_AGENT_ROLE,
            vec![
                rule(&["list", "watch"]).core(&["namespaces", "nodes", "pods"]),
                rule(&["list", "watch"])
                    .groups(&["networking.k8s.io"])
                    .resources(&["networkpolicies"]),
                events_rule(),
            ],
        ),
        cluster_role("system:kube-scheduler", kube_scheduler_rules()),
        cluster_role(
            "system:kubelet-api-admin",
            vec![
                rule(READ).core(&["nodes"]),
                rule(&["proxy"]).core(&["nodes"]),
                rule(&["*"]).core(&["nodes/proxy", "nodes/metrics", "nodes/stats", "nodes/log"]),
            ],
        ),
        cluster_role(
            "system:monitoring",
            vec![rule(&["get"]).urls(&[
                "/healthz",
                "/healthz/*",
                "/livez",
                "/livez/*",
                "/metrics",
                "/metrics/slis",
                "/readyz",
                "/readyz/*",
            ])],
        ),
        cluster_role("system:node", node_rules()),
        cluster_role(
            "system:node-bootstrapper",
            vec![certificates(
                &["create", "get", "list", "watch"],
                &["certificatesigningrequests"],
            )],
        ),
        cluster_role(
            "system:node-proxier",
            vec![
                rule(&["list", "watch"]).core(&["services", "endpoints"]),
                rule(READ).core(&["nodes"]),
                events_rule(),
                rule(&["list", "watch"])
                    .groups(&["discovery.k8s.io"])
                    .resources(&["endpointslices"]),
            ],
        ),
        cluster_role(
            "system:public-info-viewer",
            vec![rule(&["get"]).urls(&["/livez", "/readyz", "/healthz", "/version", "/version/"])],
        ),
        cluster_role(
            "system:service-account-issuer-discovery",
            vec![rule(&["get"]).urls(&["/.well-known/openid-configuration", "/openid/v1/jwks"])],
        ),
        cluster_role(
            "system:volume-scheduler",
            vec![
                rule(&["get", "list", "watch", "patch", "update"]).core(&["persistentvolumes"]),
                rule(READ)
                    .groups(&["storage.k8s.io"])
                    .resources(&["storageclasses"]),
                rule(&["get", "list", "watch", "patch", "update"])
                    .core(&["persistentvolumeclaims"]),
            ],
        ),
        labelled_role(
            "view",
            &[AGGREGATE_TO_EDIT],
            Some(AGGREGATE_TO_VIEW),
            vec![],
        ),
    ];
    roles.extend(controller_policy::controller_roles());
    roles.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    roles
}

/// Every bootstrap ClusterRoleBinding, the controllers' included, sorted by name. Each is named
/// after the ClusterRole it binds. `system:node` has no subjects: upstream keeps the binding
/// empty since v1.7, nodes being authorized by the Node authorizer.
pub fn cluster_role_bindings() -> Vec<ClusterRoleBinding> {
    use Who::{Group, ServiceAccount, User};
    let mut bindings = vec![
        cluster_binding("cluster-admin", &[Group(MASTERS_GROUP)]),
        cluster_binding("system:basic-user", &[Group(AUTHENTICATED_GROUP)]),
        cluster_binding(
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
            &[Group(BOOTSTRAPPERS_GROUP)],
        ),
        cluster_binding(
            "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
            &[Group(NODES_GROUP)],
        ),
        cluster_binding("system:discovery", &[Group(AUTHENTICATED_GROUP)]),
        cluster_binding(
            "system:kube-controller-manager",
            &[User(KUBE_CONTROLLER_MANAGER)],
        ),
        cluster_binding(
            "system:kube-dns",
            &[ServiceAccount("kube-system", "kube-dns")],
        ),
        cluster_binding(
            "system:coredns",
            &[ServiceAccount("kube-system", "coredns")],
        ),
        cluster_binding(
            INGRESS_CONTROLLER_ROLE,
            &[ServiceAccount("kube-system", INGRESS_CONTROLLER_SA)],
        ),
        // Under `tandem agent` the policy agent runs with the node's own identity.
        cluster_binding(
            NETWORK_POLICY_AGENT_ROLE,
            &[
                ServiceAccount("kube-system", NETWORK_POLICY_AGENT_SA),
                Group(NODES_GROUP),
            ],
        ),
        cluster_binding("system:kube-scheduler", &[User(KUBE_SCHEDULER)]),
        cluster_binding("system:monitoring", &[Group(MONITORING_GROUP)]),
        cluster_binding("system:node", &[]),
        cluster_binding("system:node-bootstrapper", &[Group(BOOTSTRAPPERS_GROUP)]),
        cluster_binding("system:node-proxier", &[User(KUBE_PROXY)]),
        cluster_binding(
            "system:public-info-viewer",
            &[Group(AUTHENTICATED_GROUP), Group(UNAUTHENTICATED_GROUP)],
        ),
        cluster_binding(
            "system:service-account-issuer-discovery",
            &[Group(SERVICE_ACCOUNTS_GROUP)],
        ),
        cluster_binding("system:volume-scheduler", &[User(KUBE_SCHEDULER)]),
    ];
    bindings.extend(controller_policy::controller_role_bindings());
    bindings.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    bindings
}

/// The bootstrap Roles of `kube-system` and `kube-public` (upstream `NamespaceRoles`), sorted by
/// namespace and name.
pub fn roles() -> Vec<Role> {
    let role = |namespace: &str, name: &str, rules: Vec<Rule>| Role {
        metadata: meta(name, Some(namespace), &[]),
        rules: build(rules),
    };
    let leader_locking = || {
        ["leases", "leasecandidates"]
            .iter()
            .map(|r| {
                rule(&["watch", "list", "get", "create", "update"])
                    .groups(&["coordination.k8s.io"])
                    .resources(&[r])
            })
            .collect::<Vec<_>>()
    };
    vec![
        role(
            "kube-public",
            "system:controller:bootstrap-signer",
            controller_policy::bootstrap_signer_public_rules(),
        ),
        role(
            "kube-system",
            "extension-apiserver-authentication-reader",
            vec![
                rule(READ)
                    .core(&["configmaps"])
                    .names(&["extension-apiserver-authentication"]),
            ],
        ),
        role(
            "kube-system",
            "system::leader-locking-kube-controller-manager",
            leader_locking(),
        ),
        role(
            "kube-system",
            "system::leader-locking-kube-scheduler",
            leader_locking(),
        ),
        role(
            "kube-system",
            "system:controller:bootstrap-signer",
            vec![rule(READ).core(&["secrets"])],
        ),
        role(
            "kube-system",
            "system:controller:token-cleaner",
            controller_policy::token_cleaner_rules(),
        ),
    ]
}

/// The bootstrap RoleBindings of `kube-system` and `kube-public` (upstream
/// `NamespaceRoleBindings`), sorted by namespace and name; the token-cleaner and
/// bootstrap-signer bindings also name the controller manager's user (see [`crate::rbac`]).
pub fn role_bindings() -> Vec<RoleBinding> {
    use Who::{ServiceAccount, User};
    let binding = |namespace: &str, name: &str, role: &str, who: &[Who<'_>]| RoleBinding {
        metadata: meta(name, Some(namespace), &[]),
        role_ref: RoleRef {
            api_group: GROUP_NAME.to_string(),
            kind: "Role".to_string(),
            name: role.to_string(),
        },
        subjects: subjects(who),
    };
    let controller = |namespace: &str, name: &str| {
        let role = format!("system:controller:{name}");
        binding(
            namespace,
            &role,
            &role,
            &[
                ServiceAccount("kube-system", name),
                User(KUBE_CONTROLLER_MANAGER),
            ],
        )
    };
    vec![
        controller("kube-public", "bootstrap-signer"),
        binding(
            "kube-system",
            "system::extension-apiserver-authentication-reader",
            "extension-apiserver-authentication-reader",
            &[User(KUBE_CONTROLLER_MANAGER), User(KUBE_SCHEDULER)],
        ),
        binding(
            "kube-system",
            "system::leader-locking-kube-controller-manager",
            "system::leader-locking-kube-controller-manager",
            &[
                User(KUBE_CONTROLLER_MANAGER),
                ServiceAccount("kube-system", "kube-controller-manager"),
                ServiceAccount("kube-system", "leader-election-controller"),
            ],
        ),
        binding(
            "kube-system",
            "system::leader-locking-kube-scheduler",
            "system::leader-locking-kube-scheduler",
            &[
                User(KUBE_SCHEDULER),
                ServiceAccount("kube-system", "kube-scheduler"),
            ],
        ),
        controller("kube-system", "bootstrap-signer"),
        controller("kube-system", "token-cleaner"),
    ]
}
