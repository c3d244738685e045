//! ValidatingAdmissionPolicy and ValidatingAdmissionPolicyBinding: upstream
//! `validateValidatingAdmissionPolicySpec`, `ValidateValidatingAdmissionPolicyStatusUpdate` and
//! `validateValidatingAdmissionPolicyBindingSpec`.

use std::collections::HashSet;

use serde_json::{Value, json};

use super::super::json::{arr_at, present, str_at};
use super::super::names;
use super::super::policy::validate_conditions;
use super::rules::{
    Errors, FAILURE_POLICIES, enum_field, go_slice, invalid_rendered, label_selector,
    match_conditions, match_resources, texts,
};
use crate::field::{FieldError, Path};

/// Upstream `supportedValidationPolicyReason`. The API documentation also names
/// `Unauthorized`, which upstream's validation refuses.
const REASONS: &[&str] = &["Forbidden", "Invalid", "RequestEntityTooLarge"];
/// Upstream `validValidationActions`.
const VALIDATION_ACTIONS: &[&str] = &["Audit", "Deny", "Warn"];
/// The `parameterNotFoundAction` values, in upstream's order.
const PARAMETER_NOT_FOUND_ACTIONS: &[&str] = &["Deny", "Allow"];
/// Upstream `maxAuditAnnotations`.
const MAX_AUDIT_ANNOTATIONS: usize = 20;
/// Upstream `maxAuditAnnotationValueExpressionLength`.
const MAX_VALUE_EXPRESSION_BYTES: usize = 5 * 1024;
/// CEL's reserved words, which are not identifiers.
const CEL_RESERVED: &[&str] = &[
    "true",
    "false",
    "null",
    "in",
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
    "void",
    "while",
];

/// Upstream `ValidateValidatingAdmissionPolicy` (after metadata).
pub(super) fn validate_policy(obj: &Value) -> Vec<FieldError> {
    policy(obj, false)
}

/// Upstream `ValidateValidatingAdmissionPolicyUpdate`: match conditions are not compiled again
/// while they and `paramKind` are unchanged.
pub(super) fn validate_policy_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let spec = |o: &Value, key: &str| o.get("spec").and_then(|s| s.get(key)).cloned();
    let unchanged = ["paramKind", "matchConditions"]
        .iter()
        .all(|k| spec(new, k) == spec(old, k));
    policy(new, unchanged)
}

fn policy(obj: &Value, ignore_match_conditions: bool) -> Vec<FieldError> {
    let null = Value::Null;
    let spec = obj.get("spec").unwrap_or(&null);
    let name = obj
        .get("metadata")
        .and_then(|m| str_at(m, "name"))
        .unwrap_or_default();
    let path = Path::new("spec");
    let mut errs = Errors::default();
    if present(spec, "failurePolicy") {
        errs.extend(enum_field(spec, "failurePolicy", &path, FAILURE_POLICIES));
    } else {
        errs.push(FieldError::required(path.child("failurePolicy"), ""));
    }
    if let Some(kind) = spec.get("paramKind").filter(|k| !k.is_null()) {
        errs.extend(param_kind(kind, &path.child("paramKind")));
    }
    match spec.get("matchConstraints").filter(|m| !m.is_null()) {
        None => errs.push(FieldError::required(path.child("matchConstraints"), "")),
        Some(mc) => {
            let mc_path = path.child("matchConstraints");
            errs.extend(match_resources(mc, &mc_path));
            // At least one resource rule, to give the expressions a type.
            if arr_at(mc, "resourceRules").is_empty() {
                errs.push(FieldError::required(mc_path.child("resourceRules"), ""));
            }
        }
    }
    if !ignore_match_conditions {
        match_conditions(
            arr_at(spec, "matchConditions"),
            &path.child("matchConditions"),
            &mut errs,
        );
    }
    for (i, variable) in arr_at(spec, "variables").iter().enumerate() {
        validate_variable(variable, &path.child("variables").index(i), &mut errs);
    }
    let validations = arr_at(spec, "validations");
    let annotations = arr_at(spec, "auditAnnotations");
    if validations.is_empty() && annotations.is_empty() {
        for key in ["validations", "auditAnnotations"] {
            errs.push(FieldError::required(
                path.child(key),
                "validations or auditAnnotations must contain at least one item",
            ));
        }
        return errs.finish();
    }
    for (i, v) in validations.iter().enumerate() {
        validation(v, &path.child("validations").index(i), &mut errs);
    }
    let annotations_path = path.child("auditAnnotations");
    if annotations.len() > MAX_AUDIT_ANNOTATIONS {
        // Upstream prints the whole list (`%#v` of the Go structs); left out here.
        errs.push(FieldError::new(
            crate::field::ErrorKind::Invalid,
            &annotations_path,
            None,
            format!("must not have more than {MAX_AUDIT_ANNOTATIONS} auditAnnotations"),
        ));
    }
    let mut keys = HashSet::new();
    for (i, a) in annotations.iter().enumerate() {
        let p = annotations_path.index(i);
        audit_annotation(a, name, &p, &mut errs);
        let key = str_at(a, "key").unwrap_or_default();
        if !keys.insert(key) {
            errs.push(FieldError::duplicate(p.child("key"), &json!(key)));
        }
    }
    errs.finish()
}

/// Upstream `validateParamKind`: a `group/version` (group a DNS subdomain, version a DNS-1035
/// label) and a kind that is a DNS-1035 label once lower-cased.
fn param_kind(kind: &Value, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let av_path = path.child("apiVersion");
    let api_version = str_at(kind, "apiVersion").unwrap_or_default();
    if api_version.is_empty() {
        errs.push(FieldError::required(&av_path, ""));
    } else if api_version.matches('/').count() > 1 {
        errs.push(FieldError::invalid(
            &av_path,
            &json!(api_version),
            format!("unexpected GroupVersion string: {api_version}"),
        ));
    } else {
        let (group, version) = match api_version {
            "/" => ("", ""),
            gv => gv.split_once('/').unwrap_or(("", gv)),
        };
        if !group.is_empty() {
            let msgs = names::dns1123_subdomain(group);
            if !msgs.is_empty() {
                errs.push(FieldError::invalid(&av_path, &json!(group), msgs.join(",")));
            }
        }
        if version.is_empty() {
            errs.push(FieldError::invalid(
                &av_path,
                &json!(api_version),
                "version must be specified",
            ));
        } else {
            let msgs = names::dns1035_label(version);
            if !msgs.is_empty() {
                errs.push(FieldError::invalid(
                    &av_path,
                    &json!(version),
                    msgs.join(","),
                ));
            }
        }
    }
    let kind_name = str_at(kind, "kind").unwrap_or_default();
    if kind_name.is_empty() {
        errs.push(FieldError::required(path.child("kind"), ""));
    } else {
        let msgs = names::dns1035_label(&kind_name.to_lowercase());
        if !msgs.is_empty() {
            errs.push(FieldError::invalid(
                path.child("kind"),
                &json!(kind_name),
                format!(
                    "may have mixed case, but should otherwise match: {}",
                    msgs.join(",")
                ),
            ));
        }
    }
    errs
}

/// Upstream `validateVariable`: a CEL identifier naming an expression that compiles.
fn validate_variable(variable: &Value, path: &Path, errs: &mut Errors) {
    let name = str_at(variable, "name").unwrap_or_default();
    if name.trim().is_empty() {
        errs.push(FieldError::required(
            path.child("name"),
            "name is not specified",
        ));
    } else if !is_cel_identifier(name) {
        errs.push(FieldError::invalid(
            path.child("name"),
            &json!(name),
            "name is not a valid CEL identifier",
        ));
    }
    let expression = str_at(variable, "expression").unwrap_or_default();
    if expression.trim().is_empty() {
        errs.push(FieldError::required(
            path.child("expression"),
            "expression is not specified",
        ));
    } else {
        errs.compiles(path.child("expression"), expression, expression);
    }
}

/// CEL's `IDENT`: `[_a-zA-Z][_a-zA-Z0-9]*` and not a reserved word.
fn is_cel_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
        && !CEL_RESERVED.contains(&name)
}

/// Upstream `validateValidation`: an expression that compiles, a message expression that
/// compiles if set, a one-line message and a supported reason.
fn validation(v: &Value, path: &Path, errs: &mut Errors) {
    let expression = str_at(v, "expression").unwrap_or_default();
    if expression.trim().is_empty() {
        errs.push(FieldError::required(
            path.child("expression"),
            "expression is not specified",
        ));
    } else {
        errs.compiles(path.child("expression"), expression, expression);
    }
    let message_expression = str_at(v, "messageExpression").unwrap_or_default();
    if !message_expression.is_empty() && message_expression.trim().is_empty() {
        errs.push(FieldError::invalid(
            path.child("messageExpression"),
            &json!(message_expression),
            "must be non-empty if specified",
        ));
    } else if !message_expression.trim().is_empty() {
        errs.compiles(
            path.child("messageExpression"),
            message_expression,
            message_expression,
        );
    }
    let message = str_at(v, "message").unwrap_or_default();
    if !message.is_empty() && message.trim().is_empty() {
        errs.push(FieldError::invalid(
            path.child("message"),
            &json!(message),
            "message must be non-empty if specified",
        ));
    } else if message.trim().contains(['\n', '\r']) {
        errs.push(invalid_rendered(
            path.child("message"),
            crate::field::go_quote(message),
            "message must not contain line breaks",
        ));
    }
    errs.extend(enum_field(v, "reason", path, REASONS));
}

/// Upstream `validateAuditAnnotation`: `<policy name>/<key>` is a qualified name and the value
/// expression (at most 5 KiB) compiles.
fn audit_annotation(a: &Value, policy_name: &str, path: &Path, errs: &mut Errors) {
    let key = str_at(a, "key").unwrap_or_default();
    if policy_name.is_empty() {
        errs.push(FieldError::invalid(
            path.child("key"),
            &json!(key),
            "requires metadata.name be non-empty",
        ));
    } else {
        let qualified = format!("{policy_name}/{key}");
        for msg in names::qualified_name(&qualified) {
            errs.push(FieldError::invalid(
                path.child("key"),
                &json!(qualified),
                msg,
            ));
        }
    }
    let value_expression = str_at(a, "valueExpression").unwrap_or_default();
    let trimmed = value_expression.trim();
    if trimmed.is_empty() {
        errs.push(FieldError::required(
            path.child("valueExpression"),
            "valueExpression is not specified",
        ));
    } else if trimmed.len() > MAX_VALUE_EXPRESSION_BYTES {
        errs.push(FieldError::required(
            path.child("valueExpression"),
            format!("must not exceed {MAX_VALUE_EXPRESSION_BYTES} bytes in length"),
        ));
    } else {
        errs.compiles(path.child("valueExpression"), value_expression, trimmed);
    }
}

/// Upstream `validateValidatingAdmissionPolicyStatus`: expression warnings name a field and
/// say something; conditions follow `metav1validation.ValidateConditions`.
pub(super) fn validate_policy_status(obj: &Value) -> Vec<FieldError> {
    let null = Value::Null;
    let status = obj.get("status").unwrap_or(&null);
    let path = Path::new("status");
    let mut errs = Vec::new();
    let warnings_path = path.child("typeChecking").child("expressionWarnings");
    let warnings = status
        .get("typeChecking")
        .map(|t| arr_at(t, "expressionWarnings"))
        .unwrap_or_default();
    for (i, w) in warnings.iter().enumerate() {
        let p = warnings_path.index(i);
        if str_at(w, "warning").unwrap_or_default().is_empty() {
            errs.push(FieldError::required(p.child("warning"), ""));
        }
        // Upstream also parses the reference as a JSONPath; only emptiness is checked here.
        if str_at(w, "fieldRef").unwrap_or_default().trim().is_empty() {
            errs.push(FieldError::required(p.child("fieldRef"), ""));
        }
    }
    errs.extend(validate_conditions(
        arr_at(status, "conditions"),
        &path.child("conditions"),
    ));
    errs
}

/// Upstream `validateValidatingAdmissionPolicyBindingSpec` (create and update alike).
pub(super) fn validate_binding(obj: &Value) -> Vec<FieldError> {
    let null = Value::Null;
    let spec = obj.get("spec").unwrap_or(&null);
    let path = Path::new("spec");
    let mut errs = Vec::new();
    let policy_name = str_at(spec, "policyName").unwrap_or_default();
    if policy_name.is_empty() {
        errs.push(FieldError::required(path.child("policyName"), ""));
    } else {
        for msg in names::dns1123_subdomain(policy_name) {
            errs.push(FieldError::invalid(
                path.child("policyName"),
                &json!(policy_name),
                msg,
            ));
        }
    }
    if let Some(param_ref) = spec.get("paramRef").filter(|p| !p.is_null()) {
        errs.extend(validate_param_ref(param_ref, &path.child("paramRef")));
    }
    if let Some(mr) = spec.get("matchResources").filter(|m| !m.is_null()) {
        errs.extend(match_resources(mr, &path.child("matchResources")));
    }
    errs.extend(validation_actions(
        &texts(spec, "validationActions"),
        &path.child("validationActions"),
    ));
    errs
}

/// Upstream `validateParamRef`: a name (a path segment) or a selector, not both, and what to do
/// when no parameter is found.
fn validate_param_ref(pr: &Value, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let name = str_at(pr, "name").unwrap_or_default();
    let selector = pr.get("selector").filter(|s| !s.is_null());
    const EXCLUSIVE: &str = "name and selector are mutually exclusive";
    if !name.is_empty() {
        for msg in names::path_segment_name(name) {
            errs.push(FieldError::invalid(path.child("name"), &json!(name), msg));
        }
        if selector.is_some() {
            errs.push(FieldError::forbidden(path.child("name"), EXCLUSIVE));
        }
    }
    if let Some(sel) = selector {
        errs.extend(label_selector(sel, &path.child("selector"), false));
        if !name.is_empty() {
            errs.push(FieldError::forbidden(path.child("selector"), EXCLUSIVE));
        }
    }
    if name.is_empty() && selector.is_none() {
        errs.push(FieldError::required(
            path,
            "one of name or selector must be specified",
        ));
    }
    let action = str_at(pr, "parameterNotFoundAction").unwrap_or_default();
    let action_path = path.child("parameterNotFoundAction");
    if action.is_empty() {
        errs.push(FieldError::required(action_path, ""));
    } else if !PARAMETER_NOT_FOUND_ACTIONS.contains(&action) {
        errs.push(FieldError::not_supported(
            action_path,
            &json!(action),
            PARAMETER_NOT_FOUND_ACTIONS,
        ));
    }
    errs
}

/// Upstream `validateValidationActions`: at least one, each known and listed once, and not
/// both `Deny` and `Warn`.
fn validation_actions(actions: &[&str], path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut seen = HashSet::new();
    for (i, action) in actions.iter().enumerate() {
        if !VALIDATION_ACTIONS.contains(action) {
            errs.push(FieldError::not_supported(
                path.index(i),
                &json!(action),
                VALIDATION_ACTIONS,
            ));
        }
        if !seen.insert(*action) {
            errs.push(FieldError::duplicate(path.index(i), &json!(action)));
        }
    }
    if seen.contains("Deny") && seen.contains("Warn") {
        errs.push(invalid_rendered(
            path,
            go_slice("admissionregistration.ValidationAction", actions),
            "must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)",
        ));
    }
    if seen.is_empty() {
        errs.push(FieldError::required(
            path,
            "at least one validation action is required",
        ));
    }
    errs
}
