//! Rule matching, coverage and aggregation, after upstream's cases in
//! plugin/pkg/auth/authorizer/rbac/rbac_test.go (`TestRuleMatches`),
//! pkg/registry/rbac/validation/policy_comparator_test.go (`TestCoversExactMatch`, …),
//! policy_compact_test.go and clusterroleaggregation_controller_test.go.

use std::collections::BTreeMap;

use k8s_openapi::api::rbac::v1::{AggregationRule, ClusterRole, PolicyRule, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta,
};

use super::bootstrap::rule;
use super::*;

fn resource(
    verb: &'static str,
    group: &'static str,
    res: &'static str,
) -> RequestAttributes<'static> {
    RequestAttributes {
        verb,
        api_group: group,
        resource: res,
        resource_request: true,
        ..RequestAttributes::default()
    }
}

fn sub(
    verb: &'static str,
    group: &'static str,
    res: &'static str,
    subresource: &'static str,
) -> RequestAttributes<'static> {
    RequestAttributes {
        subresource,
        ..resource(verb, group, res)
    }
}

fn url(verb: &'static str, path: &'static str) -> RequestAttributes<'static> {
    RequestAttributes {
        verb,
        path,
        ..RequestAttributes::default()
    }
}

/// Checks every request of `cases` against `rule`, naming the failing one.
fn check(name: &str, rule: &PolicyRule, cases: &[(RequestAttributes<'_>, bool)]) {
    for (request, want) in cases {
        assert_eq!(rule_allows(rule, request), *want, "{name}: {request:?}");
    }
}

#[test]
fn star_verb_group_and_resource_each_match_anything_in_their_place() {
    let star_verb = rule(&["*"])
        .groups(&["group1"])
        .resources(&["resource1"])
        .build();
    check(
        "star verb",
        &star_verb,
        &[
            (resource("verb1", "group1", "resource1"), true),
            (resource("verb2", "group1", "resource1"), true),
            (resource("verb1", "group2", "resource1"), false),
            (resource("verb1", "group1", "resource2"), false),
        ],
    );
    let star_group = rule(&["verb1"])
        .groups(&["*"])
        .resources(&["resource1"])
        .build();
    check(
        "star group",
        &star_group,
        &[
            (resource("verb1", "group1", "resource1"), true),
            (resource("verb1", "group2", "resource1"), true),
            (resource("verb1", "group1", "resource2"), false),
            (resource("verb2", "group1", "resource1"), false),
        ],
    );
    let star_resource = rule(&["verb1"])
        .groups(&["group1"])
        .resources(&["*"])
        .build();
    check(
        "star resource",
        &star_resource,
        &[
            (resource("verb1", "group1", "resource1"), true),
            (resource("verb1", "group1", "resource2"), true),
            (sub("verb1", "group1", "pods", "status"), true),
            (resource("verb1", "group2", "resource1"), false),
            (resource("verb2", "group1", "resource1"), false),
        ],
    );
}

#[test]
fn tuple_expansion_allows_every_combination() {
    let r = rule(&["verb1", "verb2"])
        .groups(&["group1", "group2"])
        .resources(&["resource1", "resource2"])
        .build();
    for verb in ["verb1", "verb2"] {
        for group in ["group1", "group2"] {
            for res in ["resource1", "resource2"] {
                assert!(rule_allows(&r, &resource(verb, group, res)));
            }
        }
    }
    assert!(!rule_allows(&r, &resource("verb3", "group1", "resource1")));
}

#[test]
fn subresources_match_in_combined_form_or_through_star_slash() {
    let combined = rule(&["*"])
        .groups(&["*"])
        .resources(&["resource1/subresource1"])
        .build();
    check(
        "subresource expansion",
        &combined,
        &[
            (sub("verb1", "group1", "resource1", "subresource1"), true),
            (sub("verb2", "group1", "resource1", "subresource1"), true),
            (sub("verb1", "group2", "resource1", "subresource2"), false),
            (sub("verb1", "group1", "resource2", "subresource1"), false),
            (resource("verb1", "group1", "resource1"), false),
        ],
    );
    // `pods` alone does not reach `pods/status`, and `pods/status` not `pods`.
    let pods = rule(&["get"]).core(&["pods"]).build();
    assert!(rule_allows(&pods, &resource("get", "", "pods")));
    assert!(!rule_allows(&pods, &sub("get", "", "pods", "status")));
    // The disruption controller's `*/scale`: any resource's scale, never the resource itself.
    let scale = rule(&["get"])
        .groups(&["*"])
        .resources(&["*/scale"])
        .build();
    assert!(rule_allows(
        &scale,
        &sub("get", "apps", "deployments", "scale")
    ));
    assert!(rule_allows(
        &scale,
        &sub("get", "", "replicationcontrollers", "scale")
    ));
    assert!(!rule_allows(
        &scale,
        &resource("get", "apps", "deployments")
    ));
    assert!(!rule_allows(
        &scale,
        &sub("get", "apps", "deployments", "status")
    ));
    assert!(!rule_allows(
        &scale,
        &sub("get", "apps", "deployments", "scalez")
    ));
}

#[test]
fn resource_names_restrict_to_named_requests() {
    let named = rule(&["get", "update", "list", "create"])
        .groups(&["coordination.k8s.io"])
        .resources(&["leases"])
        .names(&["kube-scheduler"])
        .build();
    let mut req = resource("get", "coordination.k8s.io", "leases");
    req.name = "kube-scheduler";
    assert!(rule_allows(&named, &req));
    req.name = "other";
    assert!(!rule_allows(&named, &req));
    // Collections and creates carry no name, so a named rule never allows them.
    for verb in ["list", "create"] {
        assert!(!rule_allows(
            &named,
            &resource(verb, "coordination.k8s.io", "leases")
        ));
    }
    // Without names, any name (or none) matches.
    let any = rule(&["get"])
        .groups(&["coordination.k8s.io"])
        .resources(&["leases"])
        .build();
    req.name = "other";
    assert!(rule_allows(&any, &req));
}

#[test]
fn non_resource_urls_match_exactly_or_by_star_prefix() {
    let star = rule(&["verb1"]).urls(&["*"]).build();
    check(
        "star nonresource",
        &star,
        &[
            (url("verb1", "/foo"), true),
            (url("verb1", "/foo/bar/one"), true),
            (url("verb2", "/foo"), false),
        ],
    );
    let subpath = rule(&["verb1"]).urls(&["/foo/*"]).build();
    check(
        "star nonresource subpath",
        &subpath,
        &[
            (url("verb1", "/foo"), false),
            (url("verb1", "/foo/bar"), true),
            (url("verb1", "/foo/baz/one"), true),
            (url("verb1", "/notfoo"), false),
            (url("verb1", "/notfoo/bar"), false),
        ],
    );
    let exact = rule(&["*"]).urls(&["/foo", "/foo/bar/one"]).build();
    check(
        "star verb, exact nonresource",
        &exact,
        &[
            (url("verb1", "/foo"), true),
            (url("verb2", "/foo/bar/one"), true),
            (url("verb1", "/foo/bar"), false),
            (url("verb1", "/foo/baz/one"), false),
        ],
    );
    // URL rules never match resource requests, and resource rules never match URLs.
    assert!(!rule_allows(&star, &resource("verb1", "", "pods")));
    let pods = rule(&["*"]).groups(&["*"]).resources(&["*"]).build();
    assert!(!rule_allows(&pods, &url("get", "/healthz")));
}

#[test]
fn rules_allow_when_any_rule_does() {
    let rules = [
        rule(&["get"]).core(&["pods"]).build(),
        rule(&["get"]).urls(&["/healthz"]).build(),
    ];
    assert!(rules_allow(&rules, &url("get", "/healthz")));
    assert!(rules_allow(&rules, &resource("get", "", "pods")));
    assert!(!rules_allow(&rules, &resource("list", "", "pods")));
    assert!(!rules_allow(&[], &resource("get", "", "pods")));
}

#[test]
fn subjects_name_users_groups_and_service_accounts() {
    let subject = |kind: &str, name: &str, namespace: Option<&str>| Subject {
        kind: kind.to_string(),
        name: name.to_string(),
        namespace: namespace.map(str::to_string),
        api_group: None,
    };
    let groups = ["system:authenticated".to_string(), "devs".to_string()];
    assert!(subject_applies(
        &subject("User", "alice", None),
        "alice",
        &groups,
        ""
    ));
    assert!(!subject_applies(
        &subject("User", "alice", None),
        "bob",
        &groups,
        ""
    ));
    assert!(subject_applies(
        &subject("Group", "devs", None),
        "bob",
        &groups,
        ""
    ));
    assert!(!subject_applies(
        &subject("Group", "ops", None),
        "bob",
        &groups,
        ""
    ));
    let sa_user = "system:serviceaccount:ci:builder";
    assert!(subject_applies(
        &subject("ServiceAccount", "builder", Some("ci")),
        sa_user,
        &[],
        ""
    ));
    assert!(!subject_applies(
        &subject("ServiceAccount", "builder", Some("prod")),
        sa_user,
        &[],
        ""
    ));
    // Without a namespace, the RoleBinding's own; in a ClusterRoleBinding, nobody.
    assert!(subject_applies(
        &subject("ServiceAccount", "builder", None),
        sa_user,
        &[],
        "ci"
    ));
    assert!(!subject_applies(
        &subject("ServiceAccount", "builder", None),
        sa_user,
        &[],
        ""
    ));
    assert!(!subject_applies(
        &subject("ServiceAccount", "build", Some("ci")),
        sa_user,
        &[],
        ""
    ));
    assert!(!subject_applies(
        &subject("Robot", "alice", None),
        "alice",
        &groups,
        ""
    ));
}

fn atoms(rules: &[PolicyRule]) -> Vec<String> {
    rules.iter().map(compact_string).collect()
}

#[test]
fn covers_exact_and_star_owners() {
    let requested = [rule(&["get", "list"])
        .groups(&["apps"])
        .resources(&["deployments"])
        .build()];
    let exact = [rule(&["list", "get"])
        .groups(&["apps"])
        .resources(&["deployments"])
        .build()];
    assert_eq!(covers(&exact, &requested), (true, vec![]));
    let admin = [rule(&["*"]).groups(&["*"]).resources(&["*"]).build()];
    assert!(covers(&admin, &requested).0);
    // Star owners cover star requests; exact owners do not.
    let star_request = [rule(&["*"]).groups(&["*"]).resources(&["*"]).build()];
    assert!(covers(&admin, &star_request).0);
    assert!(!covers(&exact, &star_request).0);
}

#[test]
fn covers_reports_the_uncovered_atoms() {
    let owner = [
        rule(&["get"])
            .groups(&["apps"])
            .resources(&["deployments", "replicasets"])
            .build(),
        rule(&["list"])
            .groups(&["apps"])
            .resources(&["deployments"])
            .build(),
    ];
    let requested = [rule(&["get", "list", "delete"])
        .groups(&["apps"])
        .resources(&["deployments", "replicasets"])
        .build()];
    let (ok, missing) = covers(&owner, &requested);
    assert!(!ok);
    assert_eq!(
        atoms(&missing),
        [
            r#"{APIGroups:["apps"], Resources:["deployments"], Verbs:["delete"]}"#,
            r#"{APIGroups:["apps"], Resources:["replicasets"], Verbs:["delete"]}"#,
            r#"{APIGroups:["apps"], Resources:["replicasets"], Verbs:["list"]}"#,
        ]
    );
    // Several owner rules together cover what none covers alone.
    let requested = [rule(&["get", "list"])
        .groups(&["apps"])
        .resources(&["deployments"])
        .build()];
    assert!(covers(&owner, &requested).0);
}

#[test]
fn covers_subresources_through_star_slash_but_not_the_other_way() {
    let owner = [rule(&["get"])
        .groups(&["*"])
        .resources(&["*/scale"])
        .build()];
    let scale = [rule(&["get"])
        .groups(&["apps"])
        .resources(&["deployments/scale"])
        .build()];
    assert!(covers(&owner, &scale).0);
    let deployments = [rule(&["get"])
        .groups(&["apps"])
        .resources(&["deployments"])
        .build()];
    assert!(!covers(&owner, &deployments).0);
    let owner = [rule(&["get"])
        .groups(&["apps"])
        .resources(&["deployments/scale"])
        .build()];
    let star_scale = [rule(&["get"])
        .groups(&["apps"])
        .resources(&["*/scale"])
        .build()];
    assert!(!covers(&owner, &star_scale).0);
}

#[test]
fn covers_resource_names_and_urls() {
    let named_owner = [rule(&["get"])
        .core(&["configmaps"])
        .names(&["a", "b"])
        .build()];
    let named = [rule(&["get"]).core(&["configmaps"]).names(&["a"]).build()];
    assert!(covers(&named_owner, &named).0);
    // A named owner does not cover every name.
    let unnamed = [rule(&["get"]).core(&["configmaps"]).build()];
    let (ok, missing) = covers(&named_owner, &unnamed);
    assert!(!ok);
    assert_eq!(
        atoms(&missing),
        [r#"{APIGroups:[""], Resources:["configmaps"], Verbs:["get"]}"#]
    );
    // An unnamed owner covers any names.
    assert!(covers(&unnamed, &named).0);
    let other_name = [rule(&["get"]).core(&["configmaps"]).names(&["c"]).build()];
    assert_eq!(
        atoms(&covers(&named_owner, &other_name).1),
        [r#"{APIGroups:[""], Resources:["configmaps"], ResourceNames:["c"], Verbs:["get"]}"#]
    );

    let url_owner = [rule(&["get"]).urls(&["/apis/*", "/healthz"]).build()];
    assert!(
        covers(
            &url_owner,
            &[rule(&["get"]).urls(&["/apis/apps/v1", "/healthz"]).build()]
        )
        .0
    );
    assert!(!covers(&url_owner, &[rule(&["get"]).urls(&["/apis"]).build()]).0);
    assert!(covers(&[rule(&["*"]).urls(&["*"]).build()], &url_owner).0);
    // URL owners never cover resources, and resource owners never cover URLs.
    assert!(!covers(&url_owner, &unnamed).0);
    assert!(
        !covers(
            &[rule(&["*"]).groups(&["*"]).resources(&["*"]).build()],
            &url_owner
        )
        .0
    );
}

#[test]
fn compact_rules_merges_verbs_of_simple_rules() {
    let missing = [
        rule(&["get"]).core(&["pods"]).build(),
        rule(&["get"]).urls(&["/metrics"]).build(),
        rule(&["list"]).core(&["pods"]).build(),
        rule(&["get"]).core(&["secrets"]).names(&["x"]).build(),
        rule(&["watch"]).core(&["pods"]).build(),
        rule(&["update"]).core(&["secrets"]).names(&["x"]).build(),
    ];
    assert_eq!(
        atoms(&compact_rules(&missing)),
        [
            r#"{NonResourceURLs:["/metrics"], Verbs:["get"]}"#,
            r#"{APIGroups:[""], Resources:["pods"], Verbs:["get" "list" "watch"]}"#,
            r#"{APIGroups:[""], Resources:["secrets"], ResourceNames:["x"], Verbs:["get" "update"]}"#,
        ]
    );
    let breakdown = breakdown_rule(&rule(&["get", "list"]).core(&["pods"]).build());
    assert_eq!(compact_rules(&breakdown).len(), 1);
}

fn selector(label: &str) -> LabelSelector {
    LabelSelector {
        match_labels: Some(BTreeMap::from([(label.to_string(), "true".to_string())])),
        match_expressions: None,
    }
}

fn labelled(name: &str, labels: &[&str], rules: Vec<PolicyRule>) -> ClusterRole {
    ClusterRole {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: Some(
                labels
                    .iter()
                    .map(|l| (l.to_string(), "true".to_string()))
                    .collect(),
            ),
            ..ObjectMeta::default()
        },
        rules: Some(rules),
        aggregation_rule: None,
    }
}

#[test]
fn aggregation_unions_selected_roles_sorted_by_name_without_duplicates() {
    let get_pods = rule(&["get"]).core(&["pods"]).build();
    let list_pods = rule(&["list"]).core(&["pods"]).build();
    let get_nodes = rule(&["get"]).core(&["nodes"]).build();
    let aggregation = AggregationRule {
        cluster_role_selectors: Some(vec![selector("a"), selector("b")]),
    };
    let mut me = labelled(
        "me",
        &["a"],
        vec![rule(&["*"]).groups(&["*"]).resources(&["*"]).build()],
    );
    me.aggregation_rule = Some(aggregation.clone());
    let candidates = [
        labelled("zeta", &["a"], vec![list_pods.clone(), get_pods.clone()]),
        me,
        labelled("alpha", &["a", "b"], vec![get_pods.clone()]),
        labelled("beta", &["b"], vec![get_nodes.clone(), list_pods.clone()]),
        labelled(
            "unselected",
            &["c"],
            vec![rule(&["delete"]).core(&["pods"]).build()],
        ),
    ];
    // Selector `a` first (alpha, zeta; "me" skipped), then `b` (alpha again, beta).
    assert_eq!(
        aggregate_rules("me", &aggregation, &candidates),
        [get_pods, list_pods, get_nodes]
    );
}

#[test]
fn aggregation_treats_absent_and_empty_lists_alike_and_skips_bad_selectors() {
    let mut a = rule(&["get"]).core(&["pods"]).build();
    a.resource_names = Some(vec![]);
    let b = rule(&["get"]).core(&["pods"]).build();
    let bad = LabelSelector {
        match_labels: None,
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: "x".to_string(),
            operator: "Sideways".to_string(),
            values: None,
        }]),
    };
    let aggregation = AggregationRule {
        cluster_role_selectors: Some(vec![bad, selector("x")]),
    };
    let candidates = [
        labelled("one", &["x"], vec![a.clone()]),
        labelled("two", &["x"], vec![b]),
    ];
    assert_eq!(aggregate_rules("agg", &aggregation, &candidates), [a]);
    let none = AggregationRule {
        cluster_role_selectors: None,
    };
    assert!(aggregate_rules("agg", &none, &candidates).is_empty());
}
