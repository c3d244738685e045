//! Evaluating a compiled policy for one request and param (upstream `validating.validator.Validate`):
//! matchConditions first, then every validation, their messageExpressions, and the
//! auditAnnotations. The result is raw: [`super::Decisions`] applies the binding's
//! `validationActions` and the policy's `failurePolicy`.

use std::sync::Arc;

use super::activation::{Activation, Frame, Inputs, on_big_stack};
use super::compile::CompiledPolicy;
use super::conditions::{OUT_OF_BUDGET, evaluate_conditions};
use super::values::Outcome;
use crate::apiextensions::schema::cel::INLINE_EXPRESSION_DEPTH;

/// upstream `celconfig.RuntimeCELCostBudget`: what a policy's validations and their messages
/// may spend for one binding and param; its auditAnnotations have a budget of their own.
pub const RUNTIME_COST_BUDGET: u64 = 10_000_000;

/// upstream `celconfig.MaxEvaluatedMessageExpressionSizeBytes`.
const MAX_MESSAGE_BYTES: usize = 5 * 1024;

/// What evaluating a policy found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Evaluation {
    /// A match condition was `false`: the policy does not apply, nothing else was evaluated.
    pub skipped_by_match_conditions: bool,
    /// Failed validations, in order; a match-condition error or an exhausted budget is one
    /// failure (expression index 0) standing for all.
    pub failures: Vec<Failure>,
    /// `auditAnnotations` with a value: `(key, value)`, the key as written (the policy name is
    /// prefixed when published).
    pub audit_annotations: Vec<(String, String)>,
    /// `auditAnnotations` that failed: an evaluation error (kind
    /// [`FailureKind::EvaluationError`], refusing the request under `failurePolicy: Fail`) or a
    /// value neither string nor null (kind [`FailureKind::Violation`], always refusing, as
    /// upstream).
    pub audit_annotation_errors: Vec<Failure>,
}

/// A validation that did not pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The index of the validation in `spec.validations` (0 for a failure standing for all).
    pub expression_index: usize,
    /// The message: the messageExpression's, the `message`, or `failed expression: …`; for an
    /// evaluation error, upstream's error text.
    pub message: String,
    /// The Status reason: the validation's `reason`, `Invalid` by default.
    pub reason: String,
    pub kind: FailureKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// The expression evaluated to something other than `true`.
    Violation,
    /// The expression (or a match condition, or the budget) failed; the policy's
    /// `failurePolicy` decides whether it counts.
    EvaluationError,
}

const INVALID: &str = "Invalid";

impl Failure {
    fn error(message: String) -> Failure {
        Failure {
            expression_index: 0,
            message,
            reason: INVALID.to_string(),
            kind: FailureKind::EvaluationError,
        }
    }
}

/// Evaluates `policy` for one request and param. Expressions nested too deeply for the
/// caller's stack run on a thread of their own.
pub fn evaluate(policy: &CompiledPolicy, act: &Activation<'_>) -> Evaluation {
    let run = || evaluate_here(policy, act);
    if policy.depth <= INLINE_EXPRESSION_DEPTH {
        run()
    } else {
        on_big_stack(run).unwrap_or_else(|| Evaluation {
            failures: vec![Failure::error(
                "internal error: the policy's expressions could not be evaluated".to_string(),
            )],
            ..Evaluation::default()
        })
    }
}

fn evaluate_here(policy: &CompiledPolicy, act: &Activation<'_>) -> Evaluation {
    let inputs = Inputs::new(act, policy.param_kind.as_ref());
    let variables = Some(Arc::clone(&policy.variables));
    let only = |failure: Failure| Evaluation {
        failures: vec![failure],
        ..Evaluation::default()
    };

    if !policy.match_conditions.is_empty() {
        let frame = Frame::new(inputs.clone(), true, variables.clone());
        match evaluate_conditions(&frame, &policy.match_conditions) {
            Ok(true) => {}
            Ok(false) => {
                return Evaluation {
                    skipped_by_match_conditions: true,
                    ..Evaluation::default()
                };
            }
            Err(e) => return only(Failure::error(e.to_string())),
        }
    }

    // Validations, then every messageExpression on what budget is left.
    let frame = Frame::new(inputs.clone(), true, variables.clone());
    let mut budget = RUNTIME_COST_BUDGET;
    let mut results = Vec::with_capacity(policy.validations.len());
    for v in &policy.validations {
        let evaluated = frame.evaluate(&v.expression);
        let Some(left) = budget.checked_sub(evaluated.cost) else {
            return only(Failure::error(OUT_OF_BUDGET.to_string()));
        };
        budget = left;
        results.push(evaluated.result);
    }
    let frame = Frame::new(inputs.clone(), false, variables.clone());
    let mut messages: Vec<Option<Outcome>> = vec![None; policy.validations.len()];
    let mut messages_out_of_budget = false;
    for (slot, v) in messages.iter_mut().zip(&policy.validations) {
        let Some(m) = &v.message_expression else {
            continue;
        };
        let evaluated = frame.evaluate(m);
        match budget.checked_sub(evaluated.cost) {
            Some(left) => budget = left,
            None => {
                messages_out_of_budget = true;
                break;
            }
        }
        // An error (logged upstream) falls back to the message.
        *slot = evaluated.result.ok();
    }

    let mut failures = Vec::new();
    for (i, (result, v)) in results.into_iter().zip(&policy.validations).enumerate() {
        let failure = match result {
            Err(message) => Failure {
                expression_index: i,
                ..Failure::error(message)
            },
            Ok(_) if messages_out_of_budget => Failure {
                expression_index: i,
                ..Failure::error(format!("failed messageExpression: {OUT_OF_BUDGET}"))
            },
            Ok(Outcome::Bool(true)) => continue,
            Ok(_) => Failure {
                expression_index: i,
                message: failure_message(messages[i].as_ref(), &v.message, &v.expression.source),
                reason: v.reason.clone().unwrap_or_else(|| INVALID.to_string()),
                kind: FailureKind::Violation,
            },
        };
        failures.push(failure);
    }

    // Audit annotations, on a budget of their own.
    let frame = Frame::new(inputs, false, variables);
    let mut budget = RUNTIME_COST_BUDGET;
    let mut annotations = Vec::new();
    let mut annotation_errors = Vec::new();
    for (i, a) in policy.audit_annotations.iter().enumerate() {
        let evaluated = frame.evaluate(&a.value);
        let Some(left) = budget.checked_sub(evaluated.cost) else {
            return only(Failure::error(OUT_OF_BUDGET.to_string()));
        };
        budget = left;
        match evaluated.result {
            Err(message) => annotation_errors.push(Failure {
                expression_index: i,
                ..Failure::error(message)
            }),
            Ok(Outcome::Str(s)) if !s.trim().is_empty() => {
                annotations.push((a.key.clone(), s.trim().to_string()));
            }
            Ok(Outcome::Str(_) | Outcome::Null) => {}
            Ok(other) => annotation_errors.push(Failure {
                expression_index: i,
                message: format!(
                    "valueExpression '{}' resulted in unsupported return type: {}. Return type must be either string or null.",
                    a.value.source,
                    other.type_name()
                ),
                reason: INVALID.to_string(),
                kind: FailureKind::Violation,
            }),
        }
    }

    Evaluation {
        skipped_by_match_conditions: false,
        failures,
        audit_annotations: annotations,
        audit_annotation_errors: annotation_errors,
    }
}

/// upstream's choice of message: the messageExpression's string (trimmed; refused when empty,
/// over 5 KiB or multi-line), else the `message`, else `failed expression: <expression>`.
fn failure_message(evaluated: Option<&Outcome>, message: &str, expression: &str) -> String {
    if let Some(Outcome::Str(s)) = evaluated {
        let s = s.trim();
        if !s.is_empty() && s.len() <= MAX_MESSAGE_BYTES && !s.contains('\n') {
            return s.to_string();
        }
    }
    let message = message.trim();
    if !message.is_empty() {
        return message.to_string();
    }
    format!("failed expression: {}", expression.trim())
}
