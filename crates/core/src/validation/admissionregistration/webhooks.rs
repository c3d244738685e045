//! ValidatingWebhookConfiguration and MutatingWebhookConfiguration: upstream
//! `validateValidatingWebhookConfiguration` / `validateMutatingWebhookConfiguration` and their
//! `…Update` forms, which relax a rule on update when the stored configuration already breaks
//! it (upstream's `validationOptions`).

use std::collections::HashSet;

use serde_json::{Value, json};

use super::super::json::{arr_at, i64_at, present, str_at};
use super::super::names;
use super::client_config::{webhook_service, webhook_url};
use super::rules::{
    Errors, FAILURE_POLICIES, MATCH_POLICIES, enum_field, go_slice, has_invalid_selector,
    invalid_rendered, label_selector, match_conditions, rule_with_operations, texts,
};
use crate::field::{FieldError, Path};

/// Upstream `AcceptedAdmissionReviewVersions`.
const ACCEPTED_REVIEW_VERSIONS: &[&str] = &["v1", "v1beta1"];
/// Upstream `supportedSideEffectClasses`.
const SIDE_EFFECTS: &[&str] = &["None", "NoneOnDryRun", "Some", "Unknown"];
/// Upstream `noSideEffectClasses`: all a new webhook may declare.
const NO_SIDE_EFFECTS: &[&str] = &["None", "NoneOnDryRun"];
/// Upstream `supportedReinvocationPolicies`.
const REINVOCATION_POLICIES: &[&str] = &["IfNeeded", "Never"];
const SELECTORS: &[&str] = &["namespaceSelector", "objectSelector"];

/// Upstream `validationOptions` as the webhook configurations use it. Create sets every
/// requirement; update keeps each one only if the stored configuration meets it.
#[derive(Debug, Clone, Copy)]
struct Options {
    ignore_match_conditions: bool,
    require_no_side_effects: bool,
    require_recognized_review_version: bool,
    require_unique_names: bool,
    allow_invalid_label_values: bool,
}

const CREATE: Options = Options {
    ignore_match_conditions: false,
    require_no_side_effects: true,
    require_recognized_review_version: true,
    require_unique_names: true,
    allow_invalid_label_values: false,
};

/// Upstream `ValidateValidatingWebhookConfiguration` / `ValidateMutatingWebhookConfiguration`
/// (after metadata).
pub(super) fn validate(obj: &Value, mutating: bool) -> Vec<FieldError> {
    configuration(obj, mutating, CREATE)
}

/// Upstream `Validate…WebhookConfigurationUpdate`: the create rules, except that a stored
/// configuration with side effects, unrecognised review versions, repeated names or selectors
/// with invalid values may keep them, and unchanged match conditions are not compiled again.
pub(super) fn validate_update(new: &Value, old: &Value, mutating: bool) -> Vec<FieldError> {
    let old_hooks = arr_at(old, "webhooks");
    let new_hooks = arr_at(new, "webhooks");
    let opts = Options {
        ignore_match_conditions: new_hooks.len() == old_hooks.len()
            && new_hooks
                .iter()
                .zip(old_hooks)
                .all(|(n, o)| n.get("matchConditions") == o.get("matchConditions")),
        require_no_side_effects: old_hooks
            .iter()
            .all(|h| str_at(h, "sideEffects").is_some_and(|s| NO_SIDE_EFFECTS.contains(&s))),
        require_recognized_review_version: old_hooks.iter().all(|h| {
            let versions = texts(h, "admissionReviewVersions");
            versions.is_empty()
                || versions
                    .iter()
                    .any(|v| ACCEPTED_REVIEW_VERSIONS.contains(v))
        }),
        require_unique_names: {
            let mut seen = HashSet::new();
            old_hooks
                .iter()
                .all(|h| seen.insert(str_at(h, "name").unwrap_or_default()))
        },
        allow_invalid_label_values: old_hooks.iter().any(|h| has_invalid_selector(h, SELECTORS)),
    };
    configuration(new, mutating, opts)
}

fn configuration(obj: &Value, mutating: bool, opts: Options) -> Vec<FieldError> {
    let mut errs = Errors::default();
    let mut names_seen = HashSet::new();
    for (i, hook) in arr_at(obj, "webhooks").iter().enumerate() {
        let path = Path::new("webhooks").index(i);
        webhook(hook, mutating, opts, &path, &mut errs);
        errs.extend(review_versions(
            hook,
            opts.require_recognized_review_version,
            &path.child("admissionReviewVersions"),
        ));
        let name = str_at(hook, "name").unwrap_or_default();
        if opts.require_unique_names && !name.is_empty() && !names_seen.insert(name) {
            errs.push(FieldError::duplicate(path.child("name"), &json!(name)));
        }
    }
    errs.finish()
}

/// Upstream `validateValidatingWebhook` / `validateMutatingWebhook` (one function here: they
/// differ only in the mutating webhook's `reinvocationPolicy`).
fn webhook(hook: &Value, mutating: bool, opts: Options, path: &Path, errs: &mut Errors) {
    errs.extend(fully_qualified_name(
        &path.child("name"),
        str_at(hook, "name").unwrap_or_default(),
    ));
    for (i, rule) in arr_at(hook, "rules").iter().enumerate() {
        errs.extend(rule_with_operations(rule, &path.child("rules").index(i)));
    }
    errs.extend(enum_field(hook, "failurePolicy", path, FAILURE_POLICIES));
    errs.extend(enum_field(hook, "matchPolicy", path, MATCH_POLICIES));
    let allowed = if opts.require_no_side_effects {
        NO_SIDE_EFFECTS
    } else {
        SIDE_EFFECTS
    };
    // The typed decoder turns a missing `sideEffects` into "": both read as unset.
    match str_at(hook, "sideEffects").filter(|s| !s.is_empty()) {
        None => errs.push(FieldError::required(
            path.child("sideEffects"),
            format!("must specify one of {}", allowed.join(", ")),
        )),
        Some(s) if !allowed.contains(&s) => errs.push(FieldError::not_supported(
            path.child("sideEffects"),
            &json!(s),
            allowed,
        )),
        Some(_) => {}
    }
    if let Some(t) = i64_at(hook, "timeoutSeconds")
        && !(1..=30).contains(&t)
    {
        errs.push(FieldError::invalid(
            path.child("timeoutSeconds"),
            &json!(t),
            "the timeout value must be between 1 and 30 seconds",
        ));
    }
    for key in SELECTORS {
        if let Some(sel) = hook.get(*key).filter(|s| !s.is_null()) {
            errs.extend(label_selector(
                sel,
                &path.child(key),
                opts.allow_invalid_label_values,
            ));
        }
    }
    if mutating {
        errs.extend(enum_field(
            hook,
            "reinvocationPolicy",
            path,
            REINVOCATION_POLICIES,
        ));
    }
    let null = Value::Null;
    let cc = hook.get("clientConfig").unwrap_or(&null);
    let cc_path = path.child("clientConfig");
    match (
        present(cc, "url"),
        cc.get("service").filter(|s| !s.is_null()),
    ) {
        (true, None) => errs.extend(webhook_url(
            &cc_path.child("url"),
            str_at(cc, "url").unwrap_or_default(),
        )),
        (false, Some(service)) => errs.extend(webhook_service(service, &cc_path.child("service"))),
        _ => errs.push(FieldError::required(
            &cc_path,
            "exactly one of url or service is required",
        )),
    }
    if !opts.ignore_match_conditions {
        match_conditions(
            arr_at(hook, "matchConditions"),
            &path.child("matchConditions"),
            errs,
        );
    }
}

/// Upstream `utilvalidation.IsFullyQualifiedName`: a DNS subdomain of at least three labels.
fn fully_qualified_name(path: &Path, name: &str) -> Vec<FieldError> {
    if name.is_empty() {
        return vec![FieldError::required(path, "")];
    }
    let msgs = names::dns1123_subdomain(name);
    if !msgs.is_empty() {
        return vec![FieldError::invalid(path, &json!(name), msgs.join(","))];
    }
    if name.split('.').count() < 3 {
        return vec![FieldError::invalid(
            path,
            &json!(name),
            "should be a domain with at least three segments separated by dots",
        )];
    }
    Vec::new()
}

/// Upstream `validateAdmissionReviewVersions`: required, unique DNS-1035 labels, one of them
/// understood by this server (unless the stored configuration already lacked one).
fn review_versions(hook: &Value, require_recognized: bool, path: &Path) -> Vec<FieldError> {
    let versions = texts(hook, "admissionReviewVersions");
    if versions.is_empty() {
        return vec![FieldError::required(
            path,
            format!(
                "must specify one of {}",
                ACCEPTED_REVIEW_VERSIONS.join(", ")
            ),
        )];
    }
    let mut errs = Vec::new();
    let mut seen = HashSet::new();
    for (i, v) in versions.iter().enumerate() {
        if !seen.insert(*v) {
            errs.push(FieldError::invalid(
                path.index(i),
                &json!(v),
                "duplicate version",
            ));
            continue;
        }
        for msg in names::dns1035_label(v) {
            errs.push(FieldError::invalid(path.index(i), &json!(v), msg));
        }
    }
    if require_recognized
        && !versions
            .iter()
            .any(|v| ACCEPTED_REVIEW_VERSIONS.contains(v))
    {
        errs.push(invalid_rendered(
            path,
            go_slice("string", &versions),
            format!(
                "must include at least one of {}",
                ACCEPTED_REVIEW_VERSIONS.join(", ")
            ),
        ));
    }
    errs
}
