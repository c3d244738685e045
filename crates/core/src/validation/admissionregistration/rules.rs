//! The parts webhooks and policies share: rules (`validateRuleWithOperations`, `validateRule`,
//! `validateResources`), match resources (`validateMatchResources`,
//! `validateNamedRuleWithOperations`), match conditions (`validateMatchConditions`), label
//! selectors with upstream's `AllowInvalidLabelValueInSelector` option, and the CEL
//! compilation checks, gathered in [`Errors`] so every expression of an object is compiled on
//! one deep-stacked thread.

use std::collections::HashSet;

use serde_json::{Value, json};

use super::super::apps::validate_label_selector;
use super::super::json::{arr_at, present, str_at};
use super::super::names;
use crate::apiextensions::schema::check_cel_expressions;
use crate::field::{ErrorKind, FieldError, Path};

/// Upstream `supportedFailurePolicies`, sorted as `sets.List` returns them.
pub(super) const FAILURE_POLICIES: &[&str] = &["Fail", "Ignore"];
/// Upstream `supportedMatchPolicies`.
pub(super) const MATCH_POLICIES: &[&str] = &["Equivalent", "Exact"];
/// Upstream `supportedOperations`.
const OPERATIONS: &[&str] = &["*", "CONNECT", "CREATE", "DELETE", "UPDATE"];
/// Upstream `validScopes`.
const SCOPES: &[&str] = &["*", "Cluster", "Namespaced"];
/// Upstream's limit on match conditions.
const MAX_MATCH_CONDITIONS: usize = 64;

/// Field errors in upstream's order, with CEL expressions compiled when the list is finished:
/// a check stands where upstream reports it and becomes an error only if its expression does
/// not compile.
#[derive(Default)]
pub(super) struct Errors {
    items: Vec<Item>,
}

enum Item {
    Error(FieldError),
    /// `Invalid` at `path` showing `shown`, unless `source` compiles.
    Cel {
        path: Path,
        shown: String,
        source: String,
    },
}

impl Errors {
    pub fn push(&mut self, e: FieldError) {
        self.items.push(Item::Error(e));
    }

    pub fn extend(&mut self, errs: impl IntoIterator<Item = FieldError>) {
        self.items.extend(errs.into_iter().map(Item::Error));
    }

    /// Upstream `validateCELCondition`: `Invalid` at `path` with the value `shown` and
    /// `compilation failed: …` when `source` does not compile.
    pub fn compiles(&mut self, path: Path, shown: &str, source: &str) {
        self.items.push(Item::Cel {
            path,
            shown: shown.to_string(),
            source: source.to_string(),
        });
    }

    /// The errors, after compiling every expression recorded with [`Errors::compiles`].
    pub fn finish(self) -> Vec<FieldError> {
        let sources: Vec<&str> = self
            .items
            .iter()
            .filter_map(|i| match i {
                Item::Cel { source, .. } => Some(source.as_str()),
                Item::Error(_) => None,
            })
            .collect();
        let mut results = if sources.is_empty() {
            Vec::new()
        } else {
            check_cel_expressions(&sources)
        }
        .into_iter();
        let mut out = Vec::new();
        for item in self.items {
            match item {
                Item::Error(e) => out.push(e),
                Item::Cel { path, shown, .. } => {
                    if let Some(Err(msg)) = results.next() {
                        out.push(FieldError::invalid(
                            path,
                            &json!(shown),
                            format!("compilation failed: {msg}"),
                        ));
                    }
                }
            }
        }
        out
    }
}

/// The strings of the array at `key` (a non-string item reads as `""`).
pub(super) fn texts<'a>(v: &'a Value, key: &str) -> Vec<&'a str> {
    arr_at(v, key)
        .iter()
        .map(|x| x.as_str().unwrap_or_default())
        .collect()
}

/// Go's `%#v` of a slice of a string type, as `field.Invalid` prints list values:
/// `[]string{"a", "b"}` or `[]admissionregistration.OperationType{"*", "CREATE"}`.
pub(super) fn go_slice(type_name: &str, items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| crate::field::go_quote(s)).collect();
    format!("[]{type_name}{{{}}}", quoted.join(", "))
}

/// `field.Invalid` with a value already rendered the Go way.
pub(super) fn invalid_rendered(
    path: impl Into<String>,
    shown: String,
    detail: impl Into<String>,
) -> FieldError {
    FieldError::new(ErrorKind::Invalid, path, Some(shown), detail)
}

/// `field.NotSupported` for an optional enum field that is set to something outside
/// `supported` (`None` when it is unset or supported).
pub(super) fn enum_field(
    obj: &Value,
    key: &str,
    path: &Path,
    supported: &[&str],
) -> Option<FieldError> {
    if !present(obj, key) {
        return None;
    }
    let value = str_at(obj, key).unwrap_or_default();
    (!supported.contains(&value))
        .then(|| FieldError::not_supported(path.child(key), &json!(value), supported))
}

/// Upstream `metav1validation.ValidateLabelSelector`; with `allow_invalid_values` (upstream's
/// `AllowInvalidLabelValueInSelector`, granted on update when the stored object already had
/// such a selector) the values of `matchExpressions` are not checked.
pub(super) fn label_selector(
    sel: &Value,
    path: &Path,
    allow_invalid_values: bool,
) -> Vec<FieldError> {
    let mut errs = validate_label_selector(sel, path);
    if allow_invalid_values {
        let prefix = format!("{}.matchExpressions[", path.as_str());
        errs.retain(|e| !(e.field.starts_with(&prefix) && e.field.contains("].values[")));
    }
    errs
}

/// Whether any selector at `keys` of `hook` fails strict validation (upstream
/// `…WebhookHasInvalidLabelValueInSelector`).
pub(super) fn has_invalid_selector(hook: &Value, keys: &[&str]) -> bool {
    keys.iter().any(|k| {
        hook.get(*k)
            .filter(|s| !s.is_null())
            .is_some_and(|s| !validate_label_selector(s, &Path::new(k)).is_empty())
    })
}

/// Upstream `validateRuleWithOperations`.
pub(super) fn rule_with_operations(rule: &Value, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let ops = texts(rule, "operations");
    let ops_path = path.child("operations");
    if ops.is_empty() {
        errs.push(FieldError::required(&ops_path, ""));
    }
    if ops.len() > 1 && ops.contains(&"*") {
        errs.push(invalid_rendered(
            &ops_path,
            go_slice("admissionregistration.OperationType", &ops),
            "if '*' is present, must not specify other operations",
        ));
    }
    for (i, op) in ops.iter().enumerate() {
        if !OPERATIONS.contains(op) {
            errs.push(FieldError::not_supported(
                ops_path.index(i),
                &json!(op),
                OPERATIONS,
            ));
        }
    }
    errs.extend(validate_rule(rule, path));
    errs
}

/// Upstream `validateRule` with subresources allowed (the only form webhooks and policies use).
fn validate_rule(rule: &Value, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let groups = texts(rule, "apiGroups");
    if groups.is_empty() {
        errs.push(FieldError::required(path.child("apiGroups"), ""));
    }
    if groups.len() > 1 && groups.contains(&"*") {
        errs.push(invalid_rendered(
            path.child("apiGroups"),
            go_slice("string", &groups),
            "if '*' is present, must not specify other API groups",
        ));
    }
    let versions = texts(rule, "apiVersions");
    if versions.is_empty() {
        errs.push(FieldError::required(path.child("apiVersions"), ""));
    }
    if versions.len() > 1 && versions.contains(&"*") {
        errs.push(invalid_rendered(
            path.child("apiVersions"),
            go_slice("string", &versions),
            "if '*' is present, must not specify other API versions",
        ));
    }
    for (i, v) in versions.iter().enumerate() {
        if v.is_empty() {
            errs.push(FieldError::required(path.child("apiVersions").index(i), ""));
        }
    }
    errs.extend(resources(
        &texts(rule, "resources"),
        &path.child("resources"),
    ));
    errs.extend(enum_field(rule, "scope", path, SCOPES));
    errs
}

/// Upstream `validateResources`: `*/*` alone, `res/*` and `*/sub` excluding what they cover,
/// `*` only beside subresources. Like upstream, whether a plain resource sits beside `*` is
/// decided by the last plain entry.
fn resources(resources: &[&str], path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if resources.is_empty() {
        errs.push(FieldError::required(path, ""));
    }
    let mut wildcard_subresources: HashSet<&str> = HashSet::new();
    let mut wildcard_resources: HashSet<&str> = HashSet::new();
    let mut double_wildcard = false;
    let mut single_wildcard = false;
    let mut plain_resource = false;
    for (i, item) in resources.iter().enumerate() {
        if item.is_empty() {
            errs.push(FieldError::required(path.index(i), ""));
            continue;
        }
        double_wildcard |= *item == "*/*";
        single_wildcard |= *item == "*";
        let Some((res, sub)) = item.split_once('/') else {
            plain_resource = *item != "*";
            continue;
        };
        if wildcard_subresources.contains(res) {
            errs.push(FieldError::invalid(
                path.index(i),
                &json!(item),
                format!("if '{res}/*' is present, must not specify {item}"),
            ));
        }
        if wildcard_resources.contains(sub) {
            errs.push(FieldError::invalid(
                path.index(i),
                &json!(item),
                format!("if '*/{sub}' is present, must not specify {item}"),
            ));
        }
        if sub == "*" {
            wildcard_subresources.insert(res);
        }
        if res == "*" {
            wildcard_resources.insert(sub);
        }
    }
    if resources.len() > 1 && double_wildcard {
        errs.push(invalid_rendered(
            path,
            go_slice("string", resources),
            "if '*/*' is present, must not specify other resources",
        ));
    }
    if single_wildcard && plain_resource {
        errs.push(invalid_rendered(
            path,
            go_slice("string", resources),
            "if '*' is present, must not specify other resources without subresources",
        ));
    }
    errs
}

/// Upstream `validateMatchResources` (for a present `MatchResources`): policy and selectors are
/// required (the defaults fill them), selectors are validated strictly, and each resource rule
/// is a `NamedRuleWithOperations`.
pub(super) fn match_resources(mc: &Value, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if present(mc, "matchPolicy") {
        errs.extend(enum_field(mc, "matchPolicy", path, MATCH_POLICIES));
    } else {
        errs.push(FieldError::required(path.child("matchPolicy"), ""));
    }
    for key in ["namespaceSelector", "objectSelector"] {
        match mc.get(key).filter(|s| !s.is_null()) {
            None => errs.push(FieldError::required(path.child(key), "")),
            Some(sel) => errs.extend(label_selector(sel, &path.child(key), false)),
        }
    }
    for key in ["resourceRules", "excludeResourceRules"] {
        for (i, rule) in arr_at(mc, key).iter().enumerate() {
            errs.extend(named_rule_with_operations(rule, &path.child(key).index(i)));
        }
    }
    errs
}

/// Upstream `validateNamedRuleWithOperations`: resource names are unique path segments.
fn named_rule_with_operations(rule: &Value, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut seen = HashSet::new();
    for (i, name) in texts(rule, "resourceNames").into_iter().enumerate() {
        let p = path.child("resourceNames").index(i);
        for msg in names::path_segment_name(name) {
            errs.push(FieldError::invalid(&p, &json!(name), msg));
        }
        if !seen.insert(name) {
            errs.push(FieldError::duplicate(&p, &json!(name)));
        }
    }
    errs.extend(rule_with_operations(rule, path));
    errs
}

/// Upstream `validateMatchConditions`: at most 64, each with a qualified name (unique) and an
/// expression that compiles.
pub(super) fn match_conditions(conditions: &[Value], path: &Path, errs: &mut Errors) {
    if conditions.len() > MAX_MATCH_CONDITIONS {
        errs.push(FieldError::new(
            ErrorKind::TooMany,
            path,
            Some(conditions.len().to_string()),
            format!("must have at most {MAX_MATCH_CONDITIONS} items"),
        ));
    }
    let mut seen = HashSet::new();
    for (i, condition) in conditions.iter().enumerate() {
        let p = path.index(i);
        let expression = str_at(condition, "expression").unwrap_or_default().trim();
        if expression.is_empty() {
            errs.push(FieldError::required(p.child("expression"), ""));
        } else {
            errs.compiles(p.child("expression"), expression, expression);
        }
        let name = str_at(condition, "name").unwrap_or_default();
        if name.is_empty() {
            errs.push(FieldError::required(p.child("name"), ""));
        } else {
            for msg in names::qualified_name(name) {
                errs.push(FieldError::invalid(p.child("name"), &json!(name), msg));
            }
            if !seen.insert(name) {
                errs.push(FieldError::duplicate(p.child("name"), &json!(name)));
            }
        }
    }
}
