//! Sanity of the bootstrap policy: every binding points at a role that exists, every object
//! passes the API server's defaulting and validation, aggregation nests `view` in `edit` in
//! `admin`, and the components' users can do their jobs (and no more, for the controller
//! manager).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Subject};
use serde::Serialize;

use super::{
    KUBE_CONTROLLER_MANAGER, KUBE_SCHEDULER, cluster_role_bindings, cluster_roles, role_bindings,
    roles,
};
use crate::defaults::apply_defaults;
use crate::rbac::*;
use crate::registry::Registry;
use crate::validation::validate_create;

/// The cluster roles with every aggregated role filled, as the clusterrole-aggregation
/// controller leaves them once it has synced each role until nothing changes.
fn aggregated() -> BTreeMap<String, ClusterRole> {
    let mut roles: Vec<ClusterRole> = cluster_roles();
    for _ in 0..roles.len() {
        let snapshot = roles.clone();
        let mut changed = false;
        for role in &mut roles {
            let (Some(rule), Some(name)) = (&role.aggregation_rule, &role.metadata.name) else {
                continue;
            };
            let rules = aggregate_rules(name, rule, &snapshot);
            if role.rules.as_ref() != Some(&rules) {
                role.rules = Some(rules);
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    roles
        .into_iter()
        .map(|r| (r.metadata.name.clone().unwrap_or_default(), r))
        .collect()
}

fn rules_of<'a>(roles: &'a BTreeMap<String, ClusterRole>, name: &str) -> &'a [PolicyRule] {
    roles
        .get(name)
        .and_then(|r| r.rules.as_deref())
        .unwrap_or_else(|| panic!("{name} has rules"))
}

fn request(
    verb: &'static str,
    group: &'static str,
    resource: &'static str,
    sub: &'static str,
) -> RequestAttributes<'static> {
    RequestAttributes {
        verb,
        api_group: group,
        resource,
        subresource: sub,
        resource_request: true,
        ..RequestAttributes::default()
    }
}

fn names<T>(items: &[T], name: impl Fn(&T) -> String) -> Vec<String> {
    items.iter().map(name).collect()
}

#[test]
fn every_binding_refers_to_an_existing_role() {
    let cluster: BTreeSet<String> = names(&cluster_roles(), |r| {
        r.metadata.name.clone().unwrap_or_default()
    })
    .into_iter()
    .collect();
    for b in cluster_role_bindings() {
        assert_eq!(b.role_ref.kind, "ClusterRole");
        assert!(cluster.contains(&b.role_ref.name), "{}", b.role_ref.name);
    }
    let namespaced: BTreeSet<(String, String)> = roles()
        .iter()
        .map(|r| {
            (
                r.metadata.namespace.clone().unwrap_or_default(),
                r.metadata.name.clone().unwrap_or_default(),
            )
        })
        .collect();
    for b in role_bindings() {
        let ns = b.metadata.namespace.clone().unwrap_or_default();
        match b.role_ref.kind.as_str() {
            "Role" => assert!(
                namespaced.contains(&(ns, b.role_ref.name.clone())),
                "{}",
                b.role_ref.name
            ),
            _ => assert!(cluster.contains(&b.role_ref.name), "{}", b.role_ref.name),
        }
    }
}

/// Serializes, defaults and validates `obj` as the API server does on create.
fn validate<T: Serialize>(kind: &str, obj: &T) -> Vec<String> {
    let rt = Registry::builtin()
        .by_kind("rbac.authorization.k8s.io/v1", kind)
        .expect("registered");
    let mut value = serde_json::to_value(obj).expect("k8s-openapi types serialize");
    apply_defaults(&rt, &mut value);
    let labels = &value["metadata"]["labels"];
    assert_eq!(
        labels[BOOTSTRAPPING_LABEL.0], BOOTSTRAPPING_LABEL.1,
        "{value}"
    );
    assert_eq!(
        value["metadata"]["annotations"][AUTOUPDATE_ANNOTATION], "true",
        "{value}"
    );
    validate_create(&rt, &value)
        .iter()
        .map(|e| format!("{}: {e}", value["metadata"]["name"]))
        .collect()
}

#[test]
fn every_bootstrap_object_is_valid_labelled_and_uniquely_named() {
    let mut errs = Vec::new();
    cluster_roles()
        .iter()
        .for_each(|o| errs.extend(validate("ClusterRole", o)));
    cluster_role_bindings()
        .iter()
        .for_each(|o| errs.extend(validate("ClusterRoleBinding", o)));
    roles()
        .iter()
        .for_each(|o| errs.extend(validate("Role", o)));
    role_bindings()
        .iter()
        .for_each(|o| errs.extend(validate("RoleBinding", o)));
    assert_eq!(errs, Vec::<String>::new());

    let key = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        format!(
            "{}/{}",
            m.namespace.as_deref().unwrap_or(""),
            m.name.as_deref().unwrap_or("")
        )
    };
    for keys in [
        names(&cluster_roles(), |r| key(&r.metadata)),
        names(&cluster_role_bindings(), |r| key(&r.metadata)),
        names(&roles(), |r| key(&r.metadata)),
        names(&role_bindings(), |r| key(&r.metadata)),
    ] {
        let mut sorted = keys.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(keys, sorted, "sorted and unique");
    }
}

#[test]
fn view_is_within_edit_within_admin_after_aggregation() {
    let roles = aggregated();
    let (view, edit, admin) = (
        rules_of(&roles, "view"),
        rules_of(&roles, "edit"),
        rules_of(&roles, "admin"),
    );
    assert!(!view.is_empty());
    assert_eq!(covers(edit, view), (true, vec![]));
    assert_eq!(covers(admin, edit), (true, vec![]));
    // Strictly: edit writes what view only reads; admin manages roles, edit does not.
    assert!(!covers(view, edit).0);
    assert!(!covers(edit, admin).0);
    let create_role = request("create", GROUP_NAME, "rolebindings", "");
    assert!(rules_allow(admin, &create_role) && !rules_allow(edit, &create_role));
    assert!(rules_allow(edit, &request("create", "", "pods", "exec")));
    assert!(!rules_allow(view, &request("get", "", "secrets", "")));
    assert!(rules_allow(
        view,
        &request("list", "apps", "deployments", "")
    ));
    // Aggregated roles start empty; only aggregation fills them.
    let raw = cluster_roles();
    let admin_raw = raw
        .iter()
        .find(|r| r.metadata.name.as_deref() == Some("admin"));
    assert_eq!(admin_raw.and_then(|r| r.rules.clone()), None);
}

/// The names of the ClusterRoles a binding grants to `subject`.
fn bound_to(
    bindings: &[ClusterRoleBinding],
    subject: impl Fn(&Subject) -> bool,
) -> BTreeSet<String> {
    bindings
        .iter()
        .filter(|b| b.subjects.iter().flatten().any(&subject))
        .map(|b| b.role_ref.name.clone())
        .collect()
}

fn user(name: &'static str) -> impl Fn(&Subject) -> bool {
    move |s: &Subject| s.kind == "User" && s.name == name
}

#[test]
fn components_can_do_their_jobs() {
    let roles = aggregated();
    let bindings = cluster_role_bindings();
    let scheduler: Vec<PolicyRule> = bound_to(&bindings, user(KUBE_SCHEDULER))
        .iter()
        .flat_map(|r| rules_of(&roles, r).to_vec())
        .collect();
    assert!(rules_allow(
        &scheduler,
        &request("create", "", "pods", "binding")
    ));
    assert!(rules_allow(
        &scheduler,
        &request("patch", "", "persistentvolumes", "")
    ));
    assert!(!rules_allow(&scheduler, &request("create", "", "pods", "")));

    let node = rules_of(&roles, "system:node");
    assert!(rules_allow(node, &request("patch", "", "nodes", "status")));
    assert!(rules_allow(
        node,
        &request("create", "", "serviceaccounts", "token")
    ));
    let node_binding = bindings
        .iter()
        .find(|b| b.metadata.name.as_deref() == Some("system:node"));
    assert_eq!(node_binding.map(|b| b.subjects.clone()), Some(None));

    let everyone =
        |group: &'static str| bound_to(&bindings, move |s| s.kind == "Group" && s.name == group);
    assert!(everyone("system:unauthenticated").contains("system:public-info-viewer"));
    assert!(!everyone("system:unauthenticated").contains("system:discovery"));
    assert!(everyone("system:authenticated").contains("system:discovery"));
    assert!(everyone("system:bootstrappers").contains("system:node-bootstrapper"));
    assert!(everyone("system:masters").contains("cluster-admin"));
    let discovery = rules_of(&roles, "system:discovery");
    let apis = RequestAttributes {
        verb: "get",
        path: "/apis/apps/v1",
        ..RequestAttributes::default()
    };
    assert!(rules_allow(discovery, &apis));
}

/// The controller manager holds exactly upstream's `system:kube-controller-manager` role and the
/// `system:controller:*` roles of tandem's controllers.
#[test]
fn controller_manager_holds_exactly_its_role_and_the_controller_roles() {
    let roles = aggregated();
    let bindings = cluster_role_bindings();
    let held = bound_to(&bindings, user(KUBE_CONTROLLER_MANAGER));
    let controllers: BTreeSet<String> = roles
        .keys()
        .filter(|n| n.starts_with("system:controller:"))
        .cloned()
        .collect();
    let mut expected = controllers.clone();
    expected.insert("system:kube-controller-manager".to_string());
    assert_eq!(held, expected);
    assert_eq!(controllers.len(), 19, "{controllers:#?}");
    // Every controller role is also bound to upstream's service account.
    for name in &controllers {
        let sa = name.trim_start_matches("system:controller:").to_string();
        let has_sa = bound_to(&bindings, |s| {
            s.kind == "ServiceAccount"
                && s.name == sa
                && s.namespace.as_deref() == Some("kube-system")
        });
        assert!(has_sa.contains(name), "{name}");
    }
    for rb in role_bindings()
        .iter()
        .filter(|b| b.role_ref.name.starts_with("system:controller:"))
    {
        assert!(
            rb.subjects
                .iter()
                .flatten()
                .any(user(KUBE_CONTROLLER_MANAGER)),
            "{:?}",
            rb.metadata.name
        );
    }

    let rules: Vec<PolicyRule> = held
        .iter()
        .flat_map(|r| rules_of(&roles, r).to_vec())
        .collect();
    for allowed in [
        request("create", "", "pods", ""),
        request("update", "", "namespaces", "finalize"),
        request("escalate", GROUP_NAME, "clusterroles", ""),
        request(
            "update",
            "certificates.k8s.io",
            "certificatesigningrequests",
            "approval",
        ),
        request("create", "", "serviceaccounts", "token"),
        request("create", "discovery.k8s.io", "endpointslices", ""),
        request("patch", "", "services", "status"),
        request("delete", "batch", "jobs", ""),
    ] {
        assert!(rules_allow(&rules, &allowed), "{allowed:?}");
    }
    let mut approve = request("approve", "certificates.k8s.io", "signers", "");
    approve.name = "kubernetes.io/kube-apiserver-client-kubelet";
    assert!(rules_allow(&rules, &approve));
    approve.name = "kubernetes.io/kube-apiserver-client";
    assert!(!rules_allow(&rules, &approve));
    for denied in [
        request("create", GROUP_NAME, "clusterrolebindings", ""),
        request("impersonate", "", "users", ""),
        request("create", "", "nodes", ""),
        request("bind", GROUP_NAME, "clusterroles", ""),
    ] {
        assert!(!rules_allow(&rules, &denied), "{denied:?}");
    }
}

/// The add-ons' ServiceAccounts get what their controllers use and nothing more: the ingress
/// controller reads TLS Secrets and writes Ingress status but cannot create IngressClasses or
/// change Ingresses; the policy agent (and every node) follows NetworkPolicies but reads no
/// Secrets through this role.
#[test]
fn add_on_service_accounts_hold_least_privilege() {
    let roles = aggregated();
    let bindings = cluster_role_bindings();
    let held = |subject: &dyn Fn(&Subject) -> bool| -> Vec<PolicyRule> {
        bound_to(&bindings, subject)
            .iter()
            .flat_map(|r| rules_of(&roles, r).to_vec())
            .collect()
    };
    let sa = |name: &'static str| {
        move |s: &Subject| {
            s.kind == "ServiceAccount"
                && s.name == name
                && s.namespace.as_deref() == Some("kube-system")
        }
    };
    let ingress = held(&sa(super::INGRESS_CONTROLLER_SA));
    assert!(rules_allow(&ingress, &request("watch", "", "secrets", "")));
    assert!(rules_allow(
        &ingress,
        &request("patch", "networking.k8s.io", "ingresses", "status")
    ));
    assert!(rules_allow(
        &ingress,
        &request("list", "discovery.k8s.io", "endpointslices", "")
    ));
    assert!(!rules_allow(
        &ingress,
        &request("update", "networking.k8s.io", "ingresses", "")
    ));
    assert!(!rules_allow(
        &ingress,
        &request("create", "networking.k8s.io", "ingressclasses", "")
    ));
    assert!(!rules_allow(&ingress, &request("create", "", "pods", "")));

    let policy = held(&sa(super::NETWORK_POLICY_AGENT_SA));
    let nodes = held(&|s: &Subject| s.kind == "Group" && s.name == super::NODES_GROUP);
    for rules in [&policy, &nodes] {
        assert!(rules_allow(
            rules,
            &request("watch", "networking.k8s.io", "networkpolicies", "")
        ));
        assert!(rules_allow(rules, &request("list", "", "namespaces", "")));
        assert!(!rules_allow(rules, &request("list", "", "secrets", "")));
        assert!(!rules_allow(
            rules,
            &request("create", "networking.k8s.io", "networkpolicies", "")
        ));
    }
}
