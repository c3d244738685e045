//! Whether one policy rule allows one request: upstream's `RuleAllows`
//! (plugin/pkg/auth/authorizer/rbac/rbac.go) over the matchers of
//! pkg/apis/rbac/v1/evaluation_helpers.go (`VerbMatches`, `APIGroupMatches`, `ResourceMatches`,
//! `ResourceNameMatches`, `NonResourceURLMatches`); and whether a binding's subject names a
//! user (`appliesToUser`, pkg/registry/rbac/validation/rule.go).

use k8s_openapi::api::rbac::v1::{PolicyRule, Subject};

use super::{API_GROUP_ALL, NON_RESOURCE_ALL, RESOURCE_ALL, VERB_ALL};

/// The request facts RBAC looks at (upstream's `authorizer.Attributes`, minus the user). An empty
/// string means absent: the core group is `""`, a collection request has no `name`, a
/// cluster-scoped request no `namespace`.
///
/// `verb` is the authorizer verb, not the HTTP method: `get`, `list`, `watch`, `create`,
/// `update`, `patch`, `delete`, `deletecollection`, or a special verb (`impersonate`, `bind`,
/// `escalate`, `approve`, `sign`, `use`, …). For non-resource requests (`resource_request` false)
/// only `verb` and `path` count.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestAttributes<'a> {
    pub verb: &'a str,
    pub api_group: &'a str,
    pub resource: &'a str,
    pub subresource: &'a str,
    pub name: &'a str,
    pub namespace: &'a str,
    /// True for requests about API objects (`/api/...`, `/apis/...` with a resource), false for
    /// non-resource URLs (`/healthz`, `/version`, `/apis`, ...).
    pub resource_request: bool,
    /// The request path, consulted for non-resource requests only.
    pub path: &'a str,
}

/// Whether `rule` allows the request, exactly as upstream's `RuleAllows`:
///
/// - resource requests need the verb, the API group, the resource and the name to match.
///   `*` matches any verb, group or resource; a subresource is matched as `<resource>/<sub>`
///   (`pods/status`), and `*/<sub>` matches that subresource of any resource (`*/scale`).
///   An empty `resourceNames` matches any name; a non-empty one matches only requests naming one
///   of them, so such a rule never allows `list`, `watch`, `create` or `deletecollection` of a
///   collection (those requests carry no name).
/// - non-resource requests need the verb and the path to match: `*` matches any path, and a URL
///   ending in `*` matches every path with that prefix (`/apis/*` matches `/apis/apps/v1`, not
///   `/apis`).
///
/// A rule holding both resources and non-resource URLs (which validation refuses) matches each
/// kind of request on its own part.
pub fn rule_allows(rule: &PolicyRule, a: &RequestAttributes<'_>) -> bool {
    if !verb_matches(rule, a.verb) {
        return false;
    }
    if !a.resource_request {
        return non_resource_url_matches(rule, a.path);
    }
    let combined = if a.subresource.is_empty() {
        a.resource.to_string()
    } else {
        format!("{}/{}", a.resource, a.subresource)
    };
    api_group_matches(rule, a.api_group)
        && resource_matches(rule, &combined, a.subresource)
        && resource_name_matches(rule, a.name)
}

/// Whether any of `rules` allows the request (what an authorizer asks of one role).
pub fn rules_allow(rules: &[PolicyRule], a: &RequestAttributes<'_>) -> bool {
    rules.iter().any(|r| rule_allows(r, a))
}

fn list(v: &Option<Vec<String>>) -> &[String] {
    v.as_deref().unwrap_or(&[])
}

/// Upstream `VerbMatches`.
pub(crate) fn verb_matches(rule: &PolicyRule, verb: &str) -> bool {
    rule.verbs.iter().any(|v| v == VERB_ALL || v == verb)
}

/// Upstream `APIGroupMatches`.
pub(crate) fn api_group_matches(rule: &PolicyRule, group: &str) -> bool {
    list(&rule.api_groups)
        .iter()
        .any(|g| g == API_GROUP_ALL || g == group)
}

/// Upstream `ResourceMatches`: `combined` is `resource` or `resource/subresource`.
pub(crate) fn resource_matches(rule: &PolicyRule, combined: &str, subresource: &str) -> bool {
    list(&rule.resources).iter().any(|r| {
        r == RESOURCE_ALL
            || r == combined
            || (!subresource.is_empty()
                && r.strip_prefix("*/").is_some_and(|sub| sub == subresource))
    })
}

/// Upstream `ResourceNameMatches`.
pub(crate) fn resource_name_matches(rule: &PolicyRule, name: &str) -> bool {
    let names = list(&rule.resource_names);
    names.is_empty() || names.iter().any(|n| n == name)
}

/// Upstream `NonResourceURLMatches`.
pub(crate) fn non_resource_url_matches(rule: &PolicyRule, path: &str) -> bool {
    list(&rule.non_resource_urls)
        .iter()
        .any(|u| u == NON_RESOURCE_ALL || u == path || url_prefix_covers(u, path))
}

/// `strings.HasSuffix(rule, "*") && strings.HasPrefix(path, strings.TrimRight(rule, "*"))`.
pub(crate) fn url_prefix_covers(rule_url: &str, path: &str) -> bool {
    rule_url.ends_with('*') && path.starts_with(rule_url.trim_end_matches('*'))
}

/// Whether a binding `subject` names the user `user` in `groups` (upstream `appliesToUser`):
/// `User` by name, `Group` by membership, `ServiceAccount` as the user
/// `system:serviceaccount:<namespace>:<name>`, where a subject without a namespace takes
/// `binding_namespace` (a RoleBinding's own; empty for a ClusterRoleBinding, where such a
/// subject matches nobody). Other kinds match nobody.
pub fn subject_applies(
    subject: &Subject,
    user: &str,
    groups: &[String],
    binding_namespace: &str,
) -> bool {
    match subject.kind.as_str() {
        "User" => subject.name == user,
        "Group" => groups.contains(&subject.name),
        "ServiceAccount" => {
            let namespace = subject
                .namespace
                .as_deref()
                .filter(|ns| !ns.is_empty())
                .unwrap_or(binding_namespace);
            !namespace.is_empty()
                && user
                    .strip_prefix("system:serviceaccount:")
                    .and_then(|rest| rest.split_once(':'))
                    == Some((namespace, subject.name.as_str()))
        }
        _ => false,
    }
}
