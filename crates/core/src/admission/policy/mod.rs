//! ValidatingAdmissionPolicy, and the CEL `matchConditions` of webhooks: a pure evaluator over
//! the stored objects as JSON (upstream `k8s.io/apiserver/pkg/admission/plugin/policy/validating`,
//! `plugin/cel` and `plugin/webhook/matchconditions`).
//!
//! For each policy (compiled once with [`compile()`]) whose match constraints and binding match
//! a request, the API server:
//!
//! 1. collects the binding's params with [`resolve_params`];
//! 2. [`evaluate()`]s the policy once per param, with an [`Activation`] holding the request's
//!    variables: matchConditions, validations with their messages, auditAnnotations;
//! 3. feeds each [`Evaluation`] (and any configuration error) to [`Decisions`], whose
//!    [`Verdict`] holds the denial, warnings and audit annotations the binding's
//!    `validationActions` and the policy's `failurePolicy` make of them.
//!
//! Webhooks use [`CompiledConditions`] for their `matchConditions`.
//!
//! | file | job |
//! |---|---|
//! | [`compile`](mod@compile) | the policy's expressions, parsed once |
//! | `expression` | one expression: parse, the checks standing in for upstream's type checker, metered run |
//! | `activation` | the variables expressions see; composited `variables`, evaluated lazily |
//! | `values` | JSON to CEL values, without a schema |
//! | [`authz`] | the `authorizer` library |
//! | [`conditions`] | matchConditions |
//! | [`evaluate`](mod@evaluate) | one evaluation of a policy |
//! | [`params`] | a binding's params |
//! | [`decision`] | validationActions and failurePolicy |
//!
//! Evaluation runs in the CRD engine's CEL environment (Kubernetes' libraries, cost metering:
//! a per-expression limit of 1,000,000 and budgets of 10,000,000 per policy evaluation and
//! 2,500,000 for matchConditions). Nothing here panics on any input: evaluation catches
//! panics, expressions nested deeper than 64 levels (their variables' depth included) are
//! refused when compiled, and deep ones run on a thread with a large stack.

pub mod authz;
pub mod compile;
pub mod conditions;
pub mod decision;
pub mod evaluate;
pub mod params;

mod activation;
mod expression;
mod values;

#[cfg(test)]
mod tests;

pub use activation::Activation;
pub use authz::{
    Authorizer, AuthzAttributes, AuthzDecision, AuthzResponse, AuthzTarget, AuthzUser,
    ResourceAttributes,
};
pub use compile::{CompiledPolicy, FailurePolicy, ParamKind, compile};
pub use conditions::{
    CompiledConditions, ConditionFailure, MATCH_CONDITIONS_COST_BUDGET, MatchConditionError,
    match_conditions,
};
pub use decision::{Decisions, Denial, VALIDATION_FAILURE_ANNOTATION, Verdict, reason_code};
pub use evaluate::{Evaluation, Failure, FailureKind, RUNTIME_COST_BUDGET, evaluate};
pub use params::{ParamScope, ParamsError, resolve_params};
