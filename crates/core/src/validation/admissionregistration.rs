//! admissionregistration.k8s.io/v1 defaulting and validation: ValidatingWebhookConfiguration,
//! MutatingWebhookConfiguration, ValidatingAdmissionPolicy and ValidatingAdmissionPolicyBinding.
//!
//! Mirrors upstream `pkg/apis/admissionregistration/v1/defaults.go` (with the generated
//! `SetObjectDefaults_*` walking the nested types) and
//! `pkg/apis/admissionregistration/validation/validation.go`, split by concept:
//! [`webhooks`] (the two webhook configurations), [`policies`] (the policy, its status and
//! its binding), [`rules`] (rules, match resources, match conditions, selectors and the CEL
//! compilation checks they share) and [`client_config`] (webhook URLs and services).
//! The names are DNS subdomains, checked with the metadata.
//!
//! CEL expressions are compiled with the CRD validation rules' environment
//! ([`crate::apiextensions::schema`]); it has no type checker, so an expression is refused for
//! its syntax or nesting, not for naming a variable the policy does not declare.

mod client_config;
mod policies;
mod rules;
mod webhooks;

#[cfg(test)]
mod tests;

/// The `clientConfig` rules webhooks share: CRD conversion webhooks are checked by them too,
/// as upstream's `k8s.io/apiserver/pkg/util/webhook` serves both.
pub(crate) use client_config::{webhook_service, webhook_url};

use serde_json::{Value, json};

use super::json::{each_mut, ensure_obj, set_default};
use crate::field::FieldError;

/// Upstream `SetObjectDefaults_ValidatingWebhookConfiguration` /
/// `SetObjectDefaults_MutatingWebhookConfiguration`: each webhook fails closed
/// (`failurePolicy: Fail`), matches equivalent requests, selects everything and times out
/// after 10 seconds; mutating webhooks are not reinvoked; rules cover every scope; a service
/// is called on port 443. `sideEffects` and `admissionReviewVersions` have no v1 default.
pub fn default_webhook_configuration(obj: &mut Value, mutating: bool) {
    each_mut(obj, "webhooks", |hook| {
        set_default(hook, "failurePolicy", json!("Fail"));
        set_default(hook, "matchPolicy", json!("Equivalent"));
        set_default(hook, "namespaceSelector", json!({}));
        set_default(hook, "objectSelector", json!({}));
        set_default(hook, "timeoutSeconds", json!(10));
        if mutating {
            set_default(hook, "reinvocationPolicy", json!("Never"));
        }
        if let Some(service) = hook
            .get_mut("clientConfig")
            .and_then(|c| c.get_mut("service"))
            .filter(|s| s.is_object())
        {
            set_default(service, "port", json!(443));
        }
        each_mut(hook, "rules", default_rule);
    });
}

/// Upstream `SetObjectDefaults_ValidatingAdmissionPolicy`: the spec fails closed and its match
/// constraints, when given, are defaulted like a binding's match resources.
pub fn default_validating_admission_policy(obj: &mut Value) {
    let Some(spec) = ensure_obj(obj, "spec") else {
        return;
    };
    set_default(spec, "failurePolicy", json!("Fail"));
    if let Some(mc) = spec.get_mut("matchConstraints") {
        default_match_resources(mc);
    }
}

/// Upstream `SetObjectDefaults_ValidatingAdmissionPolicyBinding`: match resources, when given,
/// match equivalent requests and select everything. `paramRef.parameterNotFoundAction` has no
/// default in v1.
pub fn default_validating_admission_policy_binding(obj: &mut Value) {
    if let Some(mr) = obj
        .get_mut("spec")
        .and_then(|s| s.get_mut("matchResources"))
    {
        default_match_resources(mr);
    }
}

/// Upstream `SetDefaults_MatchResources`, then `SetDefaults_Rule` on every (excluded) rule.
fn default_match_resources(mr: &mut Value) {
    if !mr.is_object() {
        return;
    }
    set_default(mr, "matchPolicy", json!("Equivalent"));
    set_default(mr, "namespaceSelector", json!({}));
    set_default(mr, "objectSelector", json!({}));
    each_mut(mr, "resourceRules", default_rule);
    each_mut(mr, "excludeResourceRules", default_rule);
}

/// Upstream `SetDefaults_Rule`: a rule without a scope covers every scope.
fn default_rule(rule: &mut Value) {
    set_default(rule, "scope", json!("*"));
}

/// Upstream `ValidateValidatingWebhookConfiguration` / `ValidateMutatingWebhookConfiguration`
/// (after metadata): fully qualified unique webhook names, rules, enum fields, side effects
/// (`None` or `NoneOnDryRun`), review versions (`v1` or `v1beta1`), timeouts of 1 to 30
/// seconds, selectors, exactly one of an https URL or a service, and match conditions.
pub fn validate_webhook_configuration(obj: &Value, mutating: bool) -> Vec<FieldError> {
    webhooks::validate(obj, mutating)
}

/// Upstream `ValidateValidatingWebhookConfigurationUpdate` /
/// `ValidateMutatingWebhookConfigurationUpdate`: as on create, except that what the stored
/// configuration already had (side effects, review versions this server does not know,
/// repeated names, selectors with invalid values) may stay.
pub fn validate_webhook_configuration_update(
    new: &Value,
    old: &Value,
    mutating: bool,
) -> Vec<FieldError> {
    webhooks::validate_update(new, old, mutating)
}

/// Upstream `ValidateValidatingAdmissionPolicy` (after metadata): failure policy, param kind,
/// match constraints with at least one resource rule, match conditions, variables,
/// validations and audit annotations (at least one of the two), with their expressions
/// compiled.
pub fn validate_validating_admission_policy(obj: &Value) -> Vec<FieldError> {
    policies::validate_policy(obj)
}

/// Upstream `ValidateValidatingAdmissionPolicyUpdate`.
pub fn validate_validating_admission_policy_update(new: &Value, old: &Value) -> Vec<FieldError> {
    policies::validate_policy_update(new, old)
}

/// Upstream `ValidateValidatingAdmissionPolicyStatusUpdate`.
pub fn validate_validating_admission_policy_status(obj: &Value) -> Vec<FieldError> {
    policies::validate_policy_status(obj)
}

/// Upstream `ValidateValidatingAdmissionPolicyBinding` (after metadata; updates are validated
/// the same way): policy name, param reference, match resources and validation actions.
pub fn validate_validating_admission_policy_binding(obj: &Value) -> Vec<FieldError> {
    policies::validate_binding(obj)
}
