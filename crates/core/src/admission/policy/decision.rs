//! What a policy's evaluations mean for the request (upstream `validating.dispatcher.Dispatch`):
//! each failure goes through the binding's `validationActions` (`Deny` refuses, `Warn` warns,
//! `Audit` annotates the audit event), evaluation errors only under `failurePolicy: Fail`.
//!
//! ```no_run
//! # use tandem_core::admission::policy::*;
//! # fn demo(policy: &serde_json::Value, bindings: &[serde_json::Value], act: &Activation<'_>) {
//! let compiled = compile(policy);
//! let mut decisions = Decisions::new(&compiled);
//! for binding in bindings {
//!     match resolve_params(binding, &compiled, &[], ParamScope::Cluster, None) {
//!         Err(e) => decisions.add_config_error(Some(binding), &e.to_string()),
//!         Ok(params) => {
//!             for p in params {
//!                 let act = Activation { params: p, ..act.clone() };
//!                 decisions.add_evaluation(binding, &evaluate(&compiled, &act));
//!             }
//!         }
//!     }
//! }
//! let verdict = decisions.finish();
//! # }
//! ```

use serde_json::Value;

use super::compile::{CompiledPolicy, FailurePolicy, str_field};
use super::evaluate::{Evaluation, Failure, FailureKind};
use crate::field::go_quote;

/// The audit annotation key of `Audit` failures.
pub const VALIDATION_FAILURE_ANNOTATION: &str =
    "validation.policy.admission.k8s.io/validation_failure";

/// upstream `maxAuditAnnotationValueLength`: longer `auditAnnotations` values are cut.
const MAX_AUDIT_ANNOTATION_BYTES: usize = 10 * 1024;

/// A refusal: the first failure a `Deny` action (or `failurePolicy: Fail`) turned into one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    /// `ValidatingAdmissionPolicy 'P' with binding 'B' denied request: …`; upstream also
    /// puts it in the Status's `details.causes` as the one cause's message.
    pub message: String,
    /// The Status reason (`Invalid`, `Forbidden`, `Unauthorized`, `RequestEntityTooLarge`).
    pub reason: String,
    /// The HTTP code of the reason ([`reason_code`]).
    pub code: u16,
}

impl Denial {
    /// The Status message upstream sends (`admission.NewForbidden` with the reason and code
    /// replaced): `deployments.apps "web" is forbidden: <message>`, without the quoted name
    /// when it is not known yet.
    pub fn status_message(&self, group_resource: &str, name: &str) -> String {
        if name.is_empty() {
            format!("{group_resource} is forbidden: {}", self.message)
        } else {
            format!(
                "{group_resource} {} is forbidden: {}",
                go_quote(name),
                self.message
            )
        }
    }
}

/// upstream `reasonToCode`: 403 `Forbidden`, 401 `Unauthorized`, 413 `RequestEntityTooLarge`,
/// otherwise 422 (`Invalid`).
pub fn reason_code(reason: &str) -> u16 {
    match reason {
        "Forbidden" => 403,
        "Unauthorized" => 401,
        "RequestEntityTooLarge" => 413,
        _ => 422,
    }
}

/// What one policy decided for the request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict {
    /// The first denial, if any: the request is refused with it.
    pub denial: Option<Denial>,
    /// `Warning` headers (`Warn` actions).
    pub warnings: Vec<String>,
    /// Audit annotations: `validation.policy.admission.k8s.io/validation_failure` (`Audit`
    /// actions) and `<policy>/<key>` (`auditAnnotations`). Merging several policies', keep the
    /// first value of a key, as upstream's `AddAnnotation` refuses to override one.
    pub audit_annotations: Vec<(String, String)>,
}

/// Collects the decisions of one policy over its matching bindings and their params.
#[derive(Debug)]
pub struct Decisions<'p> {
    policy: &'p CompiledPolicy,
    denial: Option<Denial>,
    warnings: Vec<String>,
    annotations: Vec<(String, String)>,
    /// `auditAnnotations` values by key, distinct ones joined with `, ` when published.
    policy_annotations: Vec<(String, Vec<String>)>,
}

impl<'p> Decisions<'p> {
    pub fn new(policy: &'p CompiledPolicy) -> Decisions<'p> {
        Decisions {
            policy,
            denial: None,
            warnings: Vec::new(),
            annotations: Vec::new(),
            policy_annotations: Vec::new(),
        }
    }

    /// A binding (or, with `None`, the policy itself) could not be set up: its params could
    /// not be collected ([`super::ParamsError`]), its paramKind is unknown, … Under
    /// `failurePolicy: Fail` this refuses the request with `failed to configure binding: …`.
    pub fn add_config_error(&mut self, binding: Option<&Value>, error: &str) {
        if self.policy.failure_policy == FailurePolicy::Ignore {
            return;
        }
        let message = match binding {
            Some(_) => format!("failed to configure binding: {error}"),
            None => format!("failed to configure policy: {error}"),
        };
        self.deny(binding.map(binding_name).as_deref(), &message, "");
    }

    /// The evaluation of the policy for `binding` (once per param).
    pub fn add_evaluation(&mut self, binding: &Value, evaluation: &Evaluation) {
        let ignore_errors = self.policy.failure_policy == FailurePolicy::Ignore;
        let binding_name = binding_name(binding);
        let actions = validation_actions(binding);
        for failure in &evaluation.failures {
            if failure.kind == FailureKind::EvaluationError && ignore_errors {
                continue;
            }
            for action in &actions {
                match action.as_str() {
                    "Deny" => self.deny(Some(&binding_name), &failure.message, &failure.reason),
                    "Warn" => self.warnings.push(format!(
                        "Validation failed for ValidatingAdmissionPolicy '{}' with binding '{binding_name}': {}",
                        self.policy.name, failure.message
                    )),
                    "Audit" => {
                        let value = failure_annotation(binding, &binding_name, &actions, failure);
                        self.annotate(VALIDATION_FAILURE_ANNOTATION.to_string(), value);
                    }
                    _ => {}
                }
            }
        }
        for (key, value) in &evaluation.audit_annotations {
            let value = truncate(value, MAX_AUDIT_ANNOTATION_BYTES);
            match self.policy_annotations.iter_mut().find(|(k, _)| k == key) {
                Some((_, values)) if values.iter().any(|v| v == value) => {}
                Some((_, values)) => values.push(value.to_string()),
                None => self
                    .policy_annotations
                    .push((key.clone(), vec![value.to_string()])),
            }
        }
        for error in &evaluation.audit_annotation_errors {
            if error.kind == FailureKind::EvaluationError && ignore_errors {
                continue;
            }
            self.deny(Some(&binding_name), &error.message, &error.reason);
        }
    }

    pub fn finish(mut self) -> Verdict {
        let policy = self.policy.name.clone();
        for (key, values) in std::mem::take(&mut self.policy_annotations) {
            self.annotate(format!("{policy}/{key}"), values.join(", "));
        }
        Verdict {
            denial: self.denial,
            warnings: self.warnings,
            audit_annotations: self.annotations,
        }
    }

    fn deny(&mut self, binding: Option<&str>, message: &str, reason: &str) {
        if self.denial.is_some() {
            return;
        }
        let reason = if reason.is_empty() { "Invalid" } else { reason };
        let message = match binding {
            Some(b) => format!(
                "ValidatingAdmissionPolicy '{}' with binding '{b}' denied request: {message}",
                self.policy.name
            ),
            None => format!(
                "ValidatingAdmissionPolicy '{}' denied request: {message}",
                self.policy.name
            ),
        };
        self.denial = Some(Denial {
            message,
            reason: reason.to_string(),
            code: reason_code(reason),
        });
    }

    /// upstream `Attributes.AddAnnotation`: a key keeps its first value.
    fn annotate(&mut self, key: String, value: String) {
        if !self.annotations.iter().any(|(k, _)| *k == key) {
            self.annotations.push((key, value));
        }
    }
}

fn binding_name(binding: &Value) -> String {
    binding
        .get("metadata")
        .map(|m| str_field(m, "name"))
        .unwrap_or_default()
}

fn validation_actions(binding: &Value) -> Vec<String> {
    binding
        .get("spec")
        .and_then(|s| s.get("validationActions"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// upstream `publishValidationFailureAnnotation`'s value: a one-element JSON list, as Go's
/// `json.Marshal` writes it (fields in declaration order, `<`, `>`, `&` escaped).
fn failure_annotation(
    binding: &Value,
    binding_name: &str,
    actions: &[String],
    failure: &Failure,
) -> String {
    let policy_name = binding
        .get("spec")
        .map(|s| str_field(s, "policyName"))
        .unwrap_or_default();
    let quote = |s: &str| go_json_string(s);
    let actions: Vec<String> = actions.iter().map(|a| quote(a)).collect();
    format!(
        "[{{\"message\":{},\"policy\":{},\"binding\":{},\"expressionIndex\":{},\"validationActions\":[{}]}}]",
        quote(&failure.message),
        quote(&policy_name),
        quote(binding_name),
        failure.expression_index,
        actions.join(",")
    )
}

/// A JSON string as Go's `encoding/json` writes it (HTML-safe).
fn go_json_string(s: &str) -> String {
    let json = Value::String(s.to_string()).to_string();
    json.replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029")
}

/// `s` cut to at most `max` bytes, on a character boundary.
fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}
