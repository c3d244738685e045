//! `matchConditions`: CEL preconditions of a webhook or policy (upstream
//! `plugin/webhook/matchconditions.matcher.Match`). Every condition is evaluated; the request
//! matches unless one is `false`; with none `false`, an error in any is an error (the hook's
//! `failurePolicy` then decides: `Fail` refuses the request, `Ignore` skips the hook).

use std::sync::Arc;

use serde_json::Value;

use super::activation::{Activation, Frame, Inputs, on_big_stack};
use super::compile::{NamedExpression, str_field};
use super::expression::{Declared, Expression};
use super::values::Outcome;
use crate::apiextensions::schema::cel::INLINE_EXPRESSION_DEPTH;

/// upstream `celconfig.RuntimeCELCostBudgetMatchConditions`: what all the conditions of one
/// hook may spend.
pub const MATCH_CONDITIONS_COST_BUDGET: u64 = 2_500_000;

/// upstream's error when a budget runs out.
pub(super) const OUT_OF_BUDGET: &str =
    "validation failed due to running out of cost budget, no further validation rules will be run";

/// Why match conditions could not decide.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MatchConditionError {
    /// Conditions that did not evaluate (none evaluated to `false`). The message is upstream's
    /// aggregate: the one error, or `[first, second]`.
    #[error("{}", aggregate(.0))]
    Failed(Vec<ConditionFailure>),
    /// The conditions spent more than [`MATCH_CONDITIONS_COST_BUDGET`].
    #[error("{OUT_OF_BUDGET}")]
    OutOfBudget,
}

/// One condition's error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConditionFailure {
    /// The condition's `name`.
    pub name: String,
    /// upstream's message: `compilation error: …` or `expression '…' resulted in error: …`.
    pub message: String,
}

/// upstream `utilerrors.NewAggregate(...).Error()`: one message alone, several (duplicates
/// dropped) as `[a, b]`.
fn aggregate(failures: &[ConditionFailure]) -> String {
    let mut seen: Vec<&str> = Vec::new();
    for f in failures {
        if !seen.contains(&f.message.as_str()) {
            seen.push(&f.message);
        }
    }
    match seen.as_slice() {
        [one] => (*one).to_string(),
        many => format!("[{}]", many.join(", ")),
    }
}

/// A webhook's `matchConditions`, compiled once. They see `object`, `oldObject`, `request`,
/// `namespaceObject` and `authorizer` (no `params`, no `variables`).
#[derive(Debug)]
pub struct CompiledConditions {
    conditions: Vec<NamedExpression>,
    depth: usize,
}

impl CompiledConditions {
    /// Compiles `[{name, expression}]`. Never fails: a condition that does not compile is an
    /// error when evaluated. Runs on a thread with a large stack, as parsing recurses deeply
    /// for long expressions.
    pub fn compile(conditions: &[Value]) -> CompiledConditions {
        on_big_stack(|| Self::compile_here(conditions)).unwrap_or_else(|| CompiledConditions {
            conditions: vec![NamedExpression {
                name: String::new(),
                expression: Expression::broken(),
            }],
            depth: 0,
        })
    }

    fn compile_here(conditions: &[Value]) -> CompiledConditions {
        let declared = Declared {
            variables: None,
            params: false,
            authorizer: true,
        };
        let conditions: Vec<NamedExpression> = conditions
            .iter()
            .map(|c| NamedExpression {
                name: str_field(c, "name"),
                expression: Expression::compile(&str_field(c, "expression"), declared),
            })
            .collect();
        let depth = conditions
            .iter()
            .filter_map(|c| c.expression.compiled.as_ref().ok())
            .map(|p| p.depth)
            .max()
            .unwrap_or(0);
        CompiledConditions { conditions, depth }
    }

    pub fn is_empty(&self) -> bool {
        self.conditions.is_empty()
    }

    /// Whether the request matches; see [`MatchConditionError`] for when it cannot tell. No
    /// conditions always match.
    pub fn evaluate(&self, act: &Activation<'_>) -> Result<bool, MatchConditionError> {
        if self.conditions.is_empty() {
            return Ok(true);
        }
        let run = || {
            let frame = Frame::new(Inputs::new(act, None), true, None);
            evaluate_conditions(&frame, &self.conditions)
        };
        if self.depth <= INLINE_EXPRESSION_DEPTH {
            run()
        } else {
            on_big_stack(run).unwrap_or_else(|| {
                Err(MatchConditionError::Failed(vec![ConditionFailure {
                    name: String::new(),
                    message: "internal error: match conditions could not be evaluated".to_string(),
                }]))
            })
        }
    }
}

/// Compiles and evaluates webhook match conditions in one go; prefer [`CompiledConditions`]
/// when the same conditions serve many requests (compiling starts a thread).
pub fn match_conditions(
    conditions: &[Value],
    act: &Activation<'_>,
) -> Result<bool, MatchConditionError> {
    CompiledConditions::compile(conditions).evaluate(act)
}

/// Evaluates `conditions` in `frame` under the match-conditions budget.
pub(super) fn evaluate_conditions(
    frame: &Arc<Frame>,
    conditions: &[NamedExpression],
) -> Result<bool, MatchConditionError> {
    let mut budget = MATCH_CONDITIONS_COST_BUDGET;
    let mut failures = Vec::new();
    let mut any_false = false;
    for c in conditions {
        let evaluated = frame.evaluate(&c.expression);
        budget = budget
            .checked_sub(evaluated.cost)
            .ok_or(MatchConditionError::OutOfBudget)?;
        match evaluated.result {
            // Upstream only tests for `false`: another value (of a `dyn` expression) matches.
            Ok(Outcome::Bool(false)) => any_false = true,
            Ok(_) => {}
            Err(message) => failures.push(ConditionFailure {
                name: c.name.clone(),
                message,
            }),
        }
    }
    if any_false {
        Ok(false)
    } else if failures.is_empty() {
        Ok(true)
    } else {
        Err(MatchConditionError::Failed(failures))
    }
}
