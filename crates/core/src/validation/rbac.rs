//! RBAC validation: Role, ClusterRole, RoleBinding and ClusterRoleBinding
//! (`rbac.authorization.k8s.io/v1`).
//!
//! Mirrors upstream `pkg/apis/rbac/validation/validation.go` (`ValidateRole`,
//! `ValidateClusterRole`, `ValidatePolicyRule`, `ValidateRoleBinding`,
//! `ValidateClusterRoleBinding`, `ValidateRoleBindingSubject` and the `…Update` variants) with
//! its messages and field paths. Names of all four kinds are path segments
//! (`ValidateRBACName`), so `system:node` is valid; the name rule lives in
//! [`super::name_rule`]. Objects are validated after defaulting, which fills `roleRef.apiGroup`
//! and the `apiGroup` of `User` and `Group` subjects as upstream's `SetDefaults_*` do.

use serde_json::{Value, json};

use super::apps::validate_label_selector;
use super::json::{arr_at, str_at};
use super::names;
use crate::field::{ErrorKind, FieldError, Path};
use crate::rbac::GROUP_NAME;
use crate::selector::LabelSelector;

/// Upstream `ValidateRole`: every rule, namespaced (no non-resource URLs).
pub fn validate_role(obj: &Value) -> Vec<FieldError> {
    validate_rules(obj, true)
}

/// Upstream `ValidateClusterRole`: every rule, and the aggregation rule's selectors.
pub fn validate_cluster_role(obj: &Value) -> Vec<FieldError> {
    let mut errs = validate_rules(obj, false);
    let Some(aggregation) = obj.get("aggregationRule").filter(|a| !a.is_null()) else {
        return errs;
    };
    let path = Path::new("aggregationRule").child("clusterRoleSelectors");
    let selectors = arr_at(aggregation, "clusterRoleSelectors");
    if selectors.is_empty() {
        errs.push(FieldError::required(
            &path,
            "at least one clusterRoleSelector required if aggregationRule is non-nil",
        ));
    }
    for (i, selector) in selectors.iter().enumerate() {
        let p = path.index(i);
        errs.extend(validate_label_selector(selector, &p));
        if LabelSelector::from_json(selector).is_err() {
            errs.push(FieldError::invalid(
                &p,
                &Value::Null,
                "invalid label selector.",
            ));
        }
    }
    errs
}

fn validate_rules(obj: &Value, namespaced: bool) -> Vec<FieldError> {
    let path = Path::new("rules");
    arr_at(obj, "rules")
        .iter()
        .enumerate()
        .flat_map(|(i, rule)| validate_policy_rule(rule, namespaced, &path.index(i)))
        .collect()
}

/// Go's `%#v` of a `[]string`, as `field.Invalid` prints list values: `[]string{"/a", "/b"}`.
fn go_string_slice(items: &[Value]) -> String {
    let quoted: Vec<String> = items
        .iter()
        .map(|v| format!("{:?}", v.as_str().unwrap_or_default()))
        .collect();
    format!("[]string{{{}}}", quoted.join(", "))
}

/// Upstream `ValidatePolicyRule`: verbs are required; a rule is either about non-resource URLs
/// (cluster roles only, and then nothing else) or about resources (with API groups and
/// resources).
pub fn validate_policy_rule(rule: &Value, namespaced: bool, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if arr_at(rule, "verbs").is_empty() {
        errs.push(FieldError::required(
            path.child("verbs"),
            "verbs must contain at least one value",
        ));
    }
    let urls = arr_at(rule, "nonResourceURLs");
    if !urls.is_empty() {
        let invalid = |detail: &str| {
            FieldError::new(
                ErrorKind::Invalid,
                path.child("nonResourceURLs"),
                Some(go_string_slice(urls)),
                detail,
            )
        };
        if namespaced {
            errs.push(invalid(
                "namespaced rules cannot apply to non-resource URLs",
            ));
        }
        if ["apiGroups", "resources", "resourceNames"]
            .iter()
            .any(|k| !arr_at(rule, k).is_empty())
        {
            errs.push(invalid(
                "rules cannot apply to both regular resources and non-resource URLs",
            ));
        }
        return errs;
    }
    if arr_at(rule, "apiGroups").is_empty() {
        errs.push(FieldError::required(
            path.child("apiGroups"),
            "resource rules must supply at least one api group",
        ));
    }
    if arr_at(rule, "resources").is_empty() {
        errs.push(FieldError::required(
            path.child("resources"),
            "resource rules must supply at least one resource",
        ));
    }
    errs
}

/// Upstream `ValidateRoleBinding`: a roleRef to a Role or ClusterRole, and valid subjects.
pub fn validate_role_binding(obj: &Value) -> Vec<FieldError> {
    validate_binding(obj, true)
}

/// Upstream `ValidateClusterRoleBinding`: a roleRef to a ClusterRole, and valid subjects
/// (service accounts with a namespace).
pub fn validate_cluster_role_binding(obj: &Value) -> Vec<FieldError> {
    validate_binding(obj, false)
}

fn validate_binding(obj: &Value, namespaced: bool) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let null = Value::Null;
    let role_ref = obj.get("roleRef").unwrap_or(&null);
    let path = Path::new("roleRef");
    let api_group = str_at(role_ref, "apiGroup").unwrap_or_default();
    if api_group != GROUP_NAME {
        errs.push(FieldError::not_supported(
            path.child("apiGroup"),
            &json!(api_group),
            &[GROUP_NAME],
        ));
    }
    let kinds: &[&str] = if namespaced {
        &["Role", "ClusterRole"]
    } else {
        &["ClusterRole"]
    };
    let kind = str_at(role_ref, "kind").unwrap_or_default();
    if !kinds.contains(&kind) {
        errs.push(FieldError::not_supported(
            path.child("kind"),
            &json!(kind),
            kinds,
        ));
    }
    let name = str_at(role_ref, "name").unwrap_or_default();
    if name.is_empty() {
        errs.push(FieldError::required(path.child("name"), ""));
    }
    for msg in names::path_segment_name(name) {
        errs.push(FieldError::invalid(path.child("name"), &json!(name), msg));
    }
    let subjects = Path::new("subjects");
    for (i, subject) in arr_at(obj, "subjects").iter().enumerate() {
        errs.extend(validate_subject(subject, namespaced, &subjects.index(i)));
    }
    errs
}

/// Upstream `ValidateRoleBindingSubject`.
pub fn validate_subject(subject: &Value, namespaced: bool, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let name = str_at(subject, "name").unwrap_or_default();
    if name.is_empty() {
        errs.push(FieldError::required(path.child("name"), ""));
    }
    let api_group = str_at(subject, "apiGroup").unwrap_or_default();
    match str_at(subject, "kind").unwrap_or_default() {
        "ServiceAccount" => {
            if !name.is_empty() {
                for msg in names::dns1123_subdomain(name) {
                    errs.push(FieldError::invalid(path.child("name"), &json!(name), msg));
                }
            }
            if !api_group.is_empty() {
                errs.push(FieldError::not_supported(
                    path.child("apiGroup"),
                    &json!(api_group),
                    &[""],
                ));
            }
            if !namespaced && str_at(subject, "namespace").unwrap_or_default().is_empty() {
                errs.push(FieldError::required(path.child("namespace"), ""));
            }
        }
        "User" | "Group" => {
            if api_group != GROUP_NAME {
                errs.push(FieldError::not_supported(
                    path.child("apiGroup"),
                    &json!(api_group),
                    &[GROUP_NAME],
                ));
            }
        }
        other => errs.push(FieldError::not_supported(
            path.child("kind"),
            &json!(other),
            &["ServiceAccount", "User", "Group"],
        )),
    }
    errs
}

/// The update rule of both binding kinds (`ValidateRoleBindingUpdate`,
/// `ValidateClusterRoleBindingUpdate`): `roleRef` may not change, since a binding's meaning
/// would change under the subjects' feet (delete and re-create it instead).
pub fn validate_binding_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let role_ref = |v: &Value| {
        let r = v.get("roleRef").unwrap_or(&Value::Null);
        ["apiGroup", "kind", "name"].map(|k| str_at(r, k).unwrap_or_default().to_string())
    };
    if role_ref(new) == role_ref(old) {
        return Vec::new();
    }
    let [api_group, kind, name] = role_ref(new);
    vec![FieldError::new(
        ErrorKind::Invalid,
        "roleRef",
        Some(format!(
            "rbac.RoleRef{{APIGroup:{api_group:?}, Kind:{kind:?}, Name:{name:?}}}"
        )),
        "cannot change roleRef",
    )]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;
    use crate::validation::{validate_create, validate_update};

    fn errors(kind: &str, obj: Value) -> Vec<String> {
        let rt = Registry::builtin()
            .by_kind("rbac.authorization.k8s.io/v1", kind)
            .expect("registered");
        validate_create(&rt, &obj)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    fn role(kind: &str, name: &str, rules: Value) -> Value {
        json!({"metadata": {"name": name, "namespace": "ns"}, "rules": rules, "kind": kind})
    }

    #[test]
    fn policy_rules_follow_upstream_messages() {
        let rules = json!([
            {"apiGroups": [""], "resources": ["pods"]},
            {"verbs": ["get"]},
            {"verbs": ["get"], "nonResourceURLs": ["/healthz", "/version"]},
            {"verbs": ["get"], "nonResourceURLs": ["/healthz"], "resources": ["pods"]},
            {"verbs": ["get"], "apiGroups": [""], "resources": ["pods"], "resourceNames": ["a"]},
        ]);
        assert_eq!(
            errors("Role", role("Role", "r", rules.clone())),
            [
                "rules[0].verbs: Required value: verbs must contain at least one value",
                "rules[1].apiGroups: Required value: resource rules must supply at least one api group",
                "rules[1].resources: Required value: resource rules must supply at least one resource",
                r#"rules[2].nonResourceURLs: Invalid value: []string{"/healthz", "/version"}: namespaced rules cannot apply to non-resource URLs"#,
                r#"rules[3].nonResourceURLs: Invalid value: []string{"/healthz"}: namespaced rules cannot apply to non-resource URLs"#,
                r#"rules[3].nonResourceURLs: Invalid value: []string{"/healthz"}: rules cannot apply to both regular resources and non-resource URLs"#,
            ]
        );
        let mut cluster = role("ClusterRole", "c", rules);
        cluster["metadata"]
            .as_object_mut()
            .expect("object")
            .remove("namespace");
        assert_eq!(
            errors("ClusterRole", cluster),
            [
                "rules[0].verbs: Required value: verbs must contain at least one value",
                "rules[1].apiGroups: Required value: resource rules must supply at least one api group",
                "rules[1].resources: Required value: resource rules must supply at least one resource",
                r#"rules[3].nonResourceURLs: Invalid value: []string{"/healthz"}: rules cannot apply to both regular resources and non-resource URLs"#,
            ]
        );
    }

    #[test]
    fn role_names_are_path_segments() {
        assert!(errors("ClusterRole", json!({"metadata": {"name": "system:node"}})).is_empty());
        assert!(errors("ClusterRole", json!({"metadata": {"name": "Upper_Case"}})).is_empty());
        assert_eq!(
            errors("ClusterRole", json!({"metadata": {"name": "a/b"}})),
            [r#"metadata.name: Invalid value: "a/b": may not contain '/'"#]
        );
    }

    #[test]
    fn aggregation_rule_needs_valid_selectors() {
        assert_eq!(
            errors(
                "ClusterRole",
                json!({"metadata": {"name": "a"}, "aggregationRule": {}})
            ),
            [
                "aggregationRule.clusterRoleSelectors: Required value: at least one clusterRoleSelector required if aggregationRule is non-nil"
            ]
        );
        let bad = json!({"metadata": {"name": "a"}, "aggregationRule": {"clusterRoleSelectors": [
            {"matchLabels": {"ok": "true"}},
            {"matchExpressions": [{"key": "k", "operator": "Sideways"}]},
        ]}});
        assert_eq!(
            errors("ClusterRole", bad),
            [
                r#"aggregationRule.clusterRoleSelectors[1].matchExpressions[0].operator: Invalid value: "Sideways": not a valid selector operator"#,
                "aggregationRule.clusterRoleSelectors[1]: Invalid value: null: invalid label selector.",
            ]
        );
    }

    fn binding(kind: &str, role_ref: Value, subjects: Value) -> Value {
        let mut b = json!({"metadata": {"name": "b"}, "roleRef": role_ref, "subjects": subjects});
        if kind == "RoleBinding" {
            b["metadata"]["namespace"] = json!("ns");
        }
        b
    }

    #[test]
    fn role_refs_follow_upstream_messages() {
        let good = json!({"apiGroup": GROUP_NAME, "kind": "Role", "name": "system:r"});
        assert!(
            errors(
                "RoleBinding",
                binding("RoleBinding", good.clone(), json!([]))
            )
            .is_empty()
        );
        assert_eq!(
            errors(
                "ClusterRoleBinding",
                binding("ClusterRoleBinding", good, json!([]))
            ),
            [r#"roleRef.kind: Unsupported value: "Role": supported values: "ClusterRole""#]
        );
        let bad = json!({"apiGroup": "rbac", "kind": "Pod", "name": ".."});
        assert_eq!(
            errors("RoleBinding", binding("RoleBinding", bad, json!([]))),
            [
                r#"roleRef.apiGroup: Unsupported value: "rbac": supported values: "rbac.authorization.k8s.io""#,
                r#"roleRef.kind: Unsupported value: "Pod": supported values: "Role", "ClusterRole""#,
                r#"roleRef.name: Invalid value: "..": may not be '..'"#,
            ]
        );
        let unnamed = json!({"apiGroup": GROUP_NAME, "kind": "ClusterRole"});
        assert_eq!(
            errors("RoleBinding", binding("RoleBinding", unnamed, json!([]))),
            ["roleRef.name: Required value"]
        );
    }

    #[test]
    fn subjects_follow_upstream_messages() {
        let role_ref = json!({"apiGroup": GROUP_NAME, "kind": "ClusterRole", "name": "view"});
        let subjects = json!([
            {"kind": "ServiceAccount", "name": "Bad_Name", "apiGroup": GROUP_NAME},
            {"kind": "User", "name": "alice"},
            {"kind": "Group", "apiGroup": GROUP_NAME},
            {"kind": "Robot", "name": "r2"},
            {"kind": "ServiceAccount", "name": "builder", "namespace": "ci"},
        ]);
        let errs = errors(
            "ClusterRoleBinding",
            binding("ClusterRoleBinding", role_ref.clone(), subjects.clone()),
        );
        assert_eq!(errs.len(), 6, "{errs:#?}");
        assert!(errs[0].starts_with(
            r#"subjects[0].name: Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain"#
        ));
        assert_eq!(
            errs[1..],
            [
                r#"subjects[0].apiGroup: Unsupported value: "rbac.authorization.k8s.io": supported values: """#,
                "subjects[0].namespace: Required value",
                r#"subjects[1].apiGroup: Unsupported value: "": supported values: "rbac.authorization.k8s.io""#,
                "subjects[2].name: Required value",
                r#"subjects[3].kind: Unsupported value: "Robot": supported values: "ServiceAccount", "User", "Group""#,
            ]
        );
        // A RoleBinding's service accounts default to the binding's namespace.
        let errs = errors("RoleBinding", binding("RoleBinding", role_ref, subjects));
        assert!(!errs.iter().any(|e| e.contains("namespace")), "{errs:#?}");
    }

    #[test]
    fn role_ref_cannot_change() {
        let rt = Registry::builtin()
            .by_kind("rbac.authorization.k8s.io/v1", "ClusterRoleBinding")
            .expect("registered");
        let role_ref = json!({"apiGroup": GROUP_NAME, "kind": "ClusterRole", "name": "view"});
        let old = json!({"metadata": {"name": "b", "resourceVersion": "1"}, "roleRef": role_ref});
        let mut new = old.clone();
        new["subjects"] = json!([{"kind": "Group", "name": "devs", "apiGroup": GROUP_NAME}]);
        assert!(validate_update(&rt, &new, &old).is_empty());
        new["roleRef"]["name"] = json!("edit");
        let errs: Vec<String> = validate_update(&rt, &new, &old)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            errs,
            [
                r#"roleRef: Invalid value: rbac.RoleRef{APIGroup:"rbac.authorization.k8s.io", Kind:"ClusterRole", Name:"edit"}: cannot change roleRef"#
            ]
        );
    }
}
