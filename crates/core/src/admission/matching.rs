//! Which admission requests a webhook or a ValidatingAdmissionPolicy applies to: the rules
//! (operations, API groups, versions, resources with subresources, scope), `matchPolicy`
//! (Exact, or Equivalent: the same resource reached through another served version), and the
//! label selectors on the request's namespace and object. Pure functions over the request's
//! attributes; the API server supplies the namespace's labels and the equivalent versions.
//!
//! Mirrors upstream's `k8s.io/apiserver/pkg/admission/plugin/webhook/predicates/rules`
//! (`Matcher`), `.../predicates/namespace` and `.../predicates/object`, and the exemption of
//! the admission configuration kinds (`webhook.IsExemptAdmissionConfigurationResource`).

use serde_json::{Map, Value};

use crate::selector::LabelSelector;

/// The request attributes rules are matched against (upstream `admission.Attributes`).
#[derive(Debug, Clone, Copy)]
pub struct Attributes<'a> {
    /// `CREATE`, `UPDATE`, `DELETE` or `CONNECT`.
    pub operation: &'a str,
    pub resource: Gvr<'a>,
    /// The subresource (`status`, `scale`, `exec`), empty for the object itself.
    pub subresource: &'a str,
    /// The request's namespace: empty for cluster-scoped objects; for a Namespace (and its
    /// subresources) its own name, as upstream's request info sets it.
    pub namespace: &'a str,
}

/// A group, version and resource (plural).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gvr<'a> {
    pub group: &'a str,
    pub version: &'a str,
    pub resource: &'a str,
}

/// One rule of a webhook (`RuleWithOperations`) or of a policy's `resourceRules`
/// (`NamedRuleWithOperations`, whose `resourceNames` the caller checks), as JSON.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rule {
    pub operations: Vec<String>,
    pub api_groups: Vec<String>,
    pub api_versions: Vec<String>,
    pub resources: Vec<String>,
    /// `*`, `Cluster` or `Namespaced`; `None` matches every scope.
    pub scope: Option<String>,
    /// Names the rule is limited to (policies only; empty: every name).
    pub resource_names: Vec<String>,
}

impl Rule {
    /// Reads a rule from its JSON form; missing lists are empty (matching nothing).
    pub fn from_json(v: &Value) -> Rule {
        let list = |key: &str| -> Vec<String> {
            v.get(key)
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default()
        };
        Rule {
            operations: list("operations"),
            api_groups: list("apiGroups"),
            api_versions: list("apiVersions"),
            resources: list("resources"),
            scope: v.get("scope").and_then(Value::as_str).map(str::to_string),
            resource_names: list("resourceNames"),
        }
    }

    /// Whether the rule covers the request (upstream `Matcher.Matches`: scope, operation,
    /// group, version and resource all match). `resourceNames` are not checked here.
    pub fn matches(&self, attrs: &Attributes<'_>, gvr: Gvr<'_>) -> bool {
        self.scope_matches(attrs, gvr)
            && contains_or_star(&self.operations, attrs.operation)
            && contains_or_star(&self.api_groups, gvr.group)
            && contains_or_star(&self.api_versions, gvr.version)
            && self.resource_matches(gvr.resource, attrs.subresource)
    }

    fn scope_matches(&self, attrs: &Attributes<'_>, gvr: Gvr<'_>) -> bool {
        let is_namespace = gvr.group.is_empty() && gvr.resource == "namespaces";
        match self.scope.as_deref() {
            None | Some("*") => true,
            // A Namespace carries its own name as namespace, yet it is cluster-scoped.
            Some("Cluster") => attrs.namespace.is_empty() || is_namespace,
            Some("Namespaced") => !is_namespace && !attrs.namespace.is_empty(),
            Some(_) => false,
        }
    }

    /// `pods` matches the object only, `pods/status` that subresource, `pods/*` the object and
    /// every subresource, `*` every object, `*/status` every status, `*/*` everything.
    fn resource_matches(&self, resource: &str, subresource: &str) -> bool {
        self.resources.iter().any(|r| {
            let (res, sub) = r.split_once('/').unwrap_or((r.as_str(), ""));
            (res == "*" || res == resource) && (sub == "*" || sub == subresource)
        })
    }
}

fn contains_or_star(list: &[String], value: &str) -> bool {
    list.iter().any(|x| x == "*" || x == value)
}

/// How a rule list meets a request: `Exact` only through the request's own version;
/// `Equivalent` (upstream's default) also through another served version of the same resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MatchPolicy {
    Exact,
    #[default]
    Equivalent,
}

impl MatchPolicy {
    /// `matchPolicy` as written; anything but `Exact` is Equivalent (validation refuses others).
    pub fn parse(s: Option<&str>) -> MatchPolicy {
        match s {
            Some("Exact") => MatchPolicy::Exact,
            _ => MatchPolicy::Equivalent,
        }
    }
}

/// The resource version through which `rules` cover the request, if any: the request's own
/// first, then (under `Equivalent`) each of `equivalents`, the same resource served at other
/// versions (upstream `Matcher` with `EquivalentResourceMapper`). The object sent to the
/// webhook is converted to the returned version.
pub fn matching_resource<'a>(
    rules: &[Rule],
    attrs: &Attributes<'a>,
    policy: MatchPolicy,
    equivalents: &[Gvr<'a>],
) -> Option<Gvr<'a>> {
    if rules.iter().any(|r| r.matches(attrs, attrs.resource)) {
        return Some(attrs.resource);
    }
    if policy == MatchPolicy::Exact {
        return None;
    }
    equivalents
        .iter()
        .copied()
        .filter(|gvr| *gvr != attrs.resource)
        .find(|gvr| rules.iter().any(|r| r.matches(attrs, *gvr)))
}

/// Requests on the admission configuration kinds are never sent to webhooks or policies, so a
/// broken webhook can always be removed (upstream
/// `IsExemptAdmissionConfigurationResource`).
pub fn is_exempt(group: &str, resource: &str) -> bool {
    group == "admissionregistration.k8s.io"
        && matches!(
            resource,
            "validatingwebhookconfigurations"
                | "mutatingwebhookconfigurations"
                | "validatingadmissionpolicies"
                | "validatingadmissionpolicybindings"
                | "mutatingadmissionpolicies"
                | "mutatingadmissionpolicybindings"
        )
}

/// A `namespaceSelector` or `objectSelector`, compiled.
#[derive(Debug, Clone)]
pub struct Selector(LabelSelector);

impl Selector {
    /// Compiles a `metav1.LabelSelector`; absent (or null) selects everything, as the defaulted
    /// `{}` does. An invalid selector is an error (validation keeps them out of storage).
    pub fn from_json(sel: Option<&Value>) -> Result<Selector, String> {
        match sel {
            None | Some(Value::Null) => Ok(Selector(LabelSelector::everything())),
            Some(v) => LabelSelector::from_json(v)
                .map(Selector)
                .map_err(|e| e.to_string()),
        }
    }

    /// The selector that matches no object (the stand-in for one that does not compile).
    pub fn nothing() -> Selector {
        Selector(LabelSelector::nothing())
    }

    /// Whether the selector is `{}` (every object).
    pub fn is_everything(&self) -> bool {
        self.0.is_empty()
    }

    /// Upstream's `namespace.Matcher.MatchNamespaceSelector`: a cluster-scoped object other
    /// than a Namespace always matches; otherwise the labels of its namespace (for a Namespace,
    /// its own labels) must match. `namespace_labels` is `None` when the namespace is not found
    /// (upstream then fails the request; the caller decides).
    pub fn matches_namespace(
        &self,
        attrs: &Attributes<'_>,
        namespace_labels: Option<&Map<String, Value>>,
    ) -> Option<bool> {
        if self.is_everything() {
            return Some(true);
        }
        let is_namespace =
            attrs.resource.group.is_empty() && attrs.resource.resource == "namespaces";
        if attrs.namespace.is_empty() && !is_namespace {
            return Some(true);
        }
        namespace_labels.map(|labels| self.0.matches_labels(labels))
    }

    /// Upstream's `object.Matcher.MatchObjectSelector`: the new object's or the old object's
    /// labels match (a missing object matches nothing, an object without labels as an empty
    /// set).
    pub fn matches_objects(&self, object: Option<&Value>, old: Option<&Value>) -> bool {
        if self.is_everything() {
            return true;
        }
        let matches = |o: Option<&Value>| {
            o.filter(|o| !o.is_null()).is_some_and(|o| {
                let empty = Map::new();
                let labels = o
                    .pointer("/metadata/labels")
                    .and_then(Value::as_object)
                    .unwrap_or(&empty);
                self.0.matches_labels(labels)
            })
        };
        matches(object) || matches(old)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn attrs<'a>(
        op: &'a str,
        gvr: (&'a str, &'a str, &'a str),
        sub: &'a str,
        ns: &'a str,
    ) -> Attributes<'a> {
        Attributes {
            operation: op,
            resource: Gvr {
                group: gvr.0,
                version: gvr.1,
                resource: gvr.2,
            },
            subresource: sub,
            namespace: ns,
        }
    }

    fn rule(v: Value) -> Rule {
        Rule::from_json(&v)
    }

    #[test]
    fn resource_rules_with_subresources_and_stars() {
        let pods = rule(
            json!({"operations":["CREATE"],"apiGroups":[""],"apiVersions":["v1"],"resources":["pods"]}),
        );
        let create = attrs("CREATE", ("", "v1", "pods"), "", "ns");
        assert!(pods.matches(&create, create.resource));
        let status = attrs("CREATE", ("", "v1", "pods"), "status", "ns");
        assert!(
            !pods.matches(&status, status.resource),
            "pods does not cover pods/status"
        );
        let all_subs = rule(
            json!({"operations":["*"],"apiGroups":["*"],"apiVersions":["*"],"resources":["pods/*"]}),
        );
        assert!(all_subs.matches(&status, status.resource));
        assert!(all_subs.matches(&create, create.resource));
        let any_status = rule(
            json!({"operations":["*"],"apiGroups":["*"],"apiVersions":["*"],"resources":["*/status"]}),
        );
        assert!(any_status.matches(&status, status.resource));
        assert!(!any_status.matches(&create, create.resource));
        let exec = attrs("CONNECT", ("", "v1", "pods"), "exec", "ns");
        let connect = rule(
            json!({"operations":["CONNECT"],"apiGroups":[""],"apiVersions":["v1"],"resources":["pods/exec"]}),
        );
        assert!(connect.matches(&exec, exec.resource));
        assert!(
            !pods.matches(&exec, exec.resource),
            "operation CONNECT not listed"
        );
        let deploy = attrs("CREATE", ("apps", "v1", "deployments"), "", "ns");
        assert!(!pods.matches(&deploy, deploy.resource), "group differs");
    }

    #[test]
    fn scopes_treat_namespaces_as_cluster_scoped() {
        let cluster = rule(
            json!({"operations":["*"],"apiGroups":["*"],"apiVersions":["*"],"resources":["*"],"scope":"Cluster"}),
        );
        let namespaced = rule(
            json!({"operations":["*"],"apiGroups":["*"],"apiVersions":["*"],"resources":["*"],"scope":"Namespaced"}),
        );
        let pod = attrs("CREATE", ("", "v1", "pods"), "", "ns");
        let node = attrs("CREATE", ("", "v1", "nodes"), "", "");
        let namespace = attrs("CREATE", ("", "v1", "namespaces"), "", "team");
        assert!(namespaced.matches(&pod, pod.resource) && !cluster.matches(&pod, pod.resource));
        assert!(cluster.matches(&node, node.resource) && !namespaced.matches(&node, node.resource));
        assert!(cluster.matches(&namespace, namespace.resource));
        assert!(!namespaced.matches(&namespace, namespace.resource));
    }

    #[test]
    fn equivalent_versions_match_only_under_equivalent() {
        let v2 = rule(
            json!({"operations":["*"],"apiGroups":["autoscaling"],"apiVersions":["v2"],"resources":["horizontalpodautoscalers"]}),
        );
        let req = attrs(
            "CREATE",
            ("autoscaling", "v1", "horizontalpodautoscalers"),
            "",
            "ns",
        );
        let equivalents = [Gvr {
            group: "autoscaling",
            version: "v2",
            resource: "horizontalpodautoscalers",
        }];
        let rules = [v2];
        assert_eq!(
            matching_resource(&rules, &req, MatchPolicy::Equivalent, &equivalents),
            Some(equivalents[0])
        );
        assert_eq!(
            matching_resource(&rules, &req, MatchPolicy::Exact, &equivalents),
            None
        );
    }

    #[test]
    fn selectors_on_namespace_and_object() {
        let sel = Selector::from_json(Some(&json!({"matchLabels":{"team":"a"}}))).expect("valid");
        let pod = attrs("CREATE", ("", "v1", "pods"), "", "ns");
        let labels_a = json!({"team":"a"});
        let labels_b = json!({"team":"b"});
        assert_eq!(
            sel.matches_namespace(&pod, labels_a.as_object()),
            Some(true)
        );
        assert_eq!(
            sel.matches_namespace(&pod, labels_b.as_object()),
            Some(false)
        );
        assert_eq!(sel.matches_namespace(&pod, None), None);
        let node = attrs("CREATE", ("", "v1", "nodes"), "", "");
        assert_eq!(sel.matches_namespace(&node, None), Some(true));
        let with = json!({"metadata":{"labels":{"team":"a"}}});
        let without = json!({"metadata":{}});
        assert!(sel.matches_objects(Some(&with), None));
        assert!(
            sel.matches_objects(Some(&without), Some(&with)),
            "old object counts"
        );
        assert!(!sel.matches_objects(Some(&without), None));
        assert!(!sel.matches_objects(None, None));
        let all = Selector::from_json(Some(&json!({}))).expect("valid");
        assert!(all.matches_objects(None, None));
        assert!(
            Selector::from_json(Some(
                &json!({"matchExpressions":[{"key":"a","operator":"Bogus"}]})
            ))
            .is_err()
        );
    }

    #[test]
    fn admission_configuration_kinds_are_exempt() {
        assert!(is_exempt(
            "admissionregistration.k8s.io",
            "validatingwebhookconfigurations"
        ));
        assert!(!is_exempt("", "pods"));
    }
}
