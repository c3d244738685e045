//! Builders for the bootstrap objects: upstream's `rbacv1helpers` (pkg/apis/rbac/v1/helpers.go:
//! `NewRule`, `NewClusterBinding`, …) and `addDefaultMetadata` (bootstrappolicy/policy.go).

use std::collections::BTreeMap;

use k8s_openapi::api::rbac::v1::{
    AggregationRule, ClusterRole, ClusterRoleBinding, PolicyRule, RoleRef, Subject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

use crate::rbac::{AUTOUPDATE_ANNOTATION, BOOTSTRAPPING_LABEL, GROUP_NAME};

/// `bootstrappolicy.Read`.
pub(in crate::rbac) const READ: &[&str] = &["get", "list", "watch"];
/// `bootstrappolicy.ReadWrite`.
pub(in crate::rbac) const READ_WRITE: &[&str] = &[
    "get",
    "list",
    "watch",
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
];
/// `bootstrappolicy.Write`.
pub(super) const WRITE: &[&str] = &["create", "update", "patch", "delete", "deletecollection"];

/// Upstream's `rbacv1helpers.NewRule(verbs...)…RuleOrDie()`: a rule built field by field, whose
/// verbs, resources, names and URLs are sorted (groups keep their order), as `RuleOrDie` does.
pub(in crate::rbac) struct Rule(PolicyRule);

pub(in crate::rbac) fn rule(verbs: &[&str]) -> Rule {
    Rule(PolicyRule {
        verbs: strings(verbs),
        ..PolicyRule::default()
    })
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

impl Rule {
    pub(in crate::rbac) fn groups(mut self, groups: &[&str]) -> Self {
        self.0.api_groups = Some(strings(groups));
        self
    }
    pub(in crate::rbac) fn resources(mut self, resources: &[&str]) -> Self {
        self.0.resources = Some(strings(resources));
        self
    }
    /// The core group's resources.
    pub(in crate::rbac) fn core(self, resources: &[&str]) -> Self {
        self.groups(&[""]).resources(resources)
    }
    pub(in crate::rbac) fn names(mut self, names: &[&str]) -> Self {
        self.0.resource_names = Some(strings(names));
        self
    }
    pub(in crate::rbac) fn urls(mut self, urls: &[&str]) -> Self {
        self.0.non_resource_urls = Some(strings(urls));
        self
    }
    pub(in crate::rbac) fn build(mut self) -> PolicyRule {
        self.0.verbs.sort();
        for list in [
            &mut self.0.resources,
            &mut self.0.resource_names,
            &mut self.0.non_resource_urls,
        ]
        .into_iter()
        .flatten()
        {
            list.sort();
        }
        self.0
    }
}

/// Upstream `eventsRule()`: record events through either events API.
pub(in crate::rbac) fn events_rule() -> Rule {
    rule(&["create", "update", "patch"])
        .groups(&["", "events.k8s.io"])
        .resources(&["events"])
}

pub(super) fn build(rules: Vec<Rule>) -> Option<Vec<PolicyRule>> {
    Some(rules.into_iter().map(Rule::build).collect())
}

/// Metadata with upstream's bootstrap label and annotation, plus `labels`.
pub(in crate::rbac) fn meta(name: &str, namespace: Option<&str>, labels: &[&str]) -> ObjectMeta {
    let mut all = BTreeMap::from([(
        BOOTSTRAPPING_LABEL.0.to_string(),
        BOOTSTRAPPING_LABEL.1.to_string(),
    )]);
    all.extend(labels.iter().map(|l| (l.to_string(), "true".to_string())));
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: namespace.map(str::to_string),
        labels: Some(all),
        annotations: Some(BTreeMap::from([(
            AUTOUPDATE_ANNOTATION.to_string(),
            "true".to_string(),
        )])),
        ..ObjectMeta::default()
    }
}

pub(in crate::rbac) fn cluster_role(name: &str, rules: Vec<Rule>) -> ClusterRole {
    ClusterRole {
        metadata: meta(name, None, &[]),
        rules: build(rules),
        aggregation_rule: None,
    }
}

/// A ClusterRole labelled `labels` (each set to `"true"`), aggregated or not.
pub(super) fn labelled_role(
    name: &str,
    labels: &[&str],
    aggregate_from: Option<&str>,
    rules: Vec<Rule>,
) -> ClusterRole {
    ClusterRole {
        metadata: meta(name, None, labels),
        rules: if aggregate_from.is_some() {
            None
        } else {
            build(rules)
        },
        aggregation_rule: aggregate_from.map(|label| AggregationRule {
            cluster_role_selectors: Some(vec![LabelSelector {
                match_labels: Some(BTreeMap::from([(label.to_string(), "true".to_string())])),
                match_expressions: None,
            }]),
        }),
    }
}

/// A subject of a binding (upstream's `NewClusterBinding(...).Users/Groups/SAs`).
#[derive(Debug, Clone, Copy)]
pub(in crate::rbac) enum Who<'a> {
    User(&'a str),
    Group(&'a str),
    /// (namespace, name).
    ServiceAccount(&'a str, &'a str),
}

pub(in crate::rbac) fn subjects(who: &[Who<'_>]) -> Option<Vec<Subject>> {
    if who.is_empty() {
        return None;
    }
    let subject =
        |kind: &str, name: &str, api_group: Option<&str>, namespace: Option<&str>| Subject {
            kind: kind.to_string(),
            name: name.to_string(),
            api_group: api_group.map(str::to_string),
            namespace: namespace.map(str::to_string),
        };
    Some(
        who.iter()
            .map(|w| match *w {
                Who::User(name) => subject("User", name, Some(GROUP_NAME), None),
                Who::Group(name) => subject("Group", name, Some(GROUP_NAME), None),
                Who::ServiceAccount(ns, name) => subject("ServiceAccount", name, None, Some(ns)),
            })
            .collect(),
    )
}

/// A ClusterRoleBinding named after the ClusterRole it binds.
pub(in crate::rbac) fn cluster_binding(role: &str, who: &[Who<'_>]) -> ClusterRoleBinding {
    ClusterRoleBinding {
        metadata: meta(role, None, &[]),
        role_ref: RoleRef {
            api_group: GROUP_NAME.to_string(),
            kind: "ClusterRole".to_string(),
            name: role.to_string(),
        },
        subjects: subjects(who),
    }
}
