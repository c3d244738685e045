//! A ValidatingAdmissionPolicy compiled once (upstream `validating.compilePolicy`): every
//! expression parsed, with the variables its field declares, and the stack its deepest
//! evaluation needs.

use std::sync::Arc;

use serde_json::{Value, json};

use super::activation::{Variable, on_big_stack};
use super::expression::{Declared, Expression, Program, VariableRefs};
use crate::apiextensions::schema::cel::MAX_EXPRESSION_DEPTH;

/// `spec.failurePolicy`: what evaluation errors (and binding misconfiguration) do. Upstream
/// defaults it to `Fail`, and treats any value but `Ignore` as failing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailurePolicy {
    Fail,
    Ignore,
}

/// `spec.paramKind`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamKind {
    pub api_version: String,
    pub kind: String,
}

/// A ValidatingAdmissionPolicy ready to evaluate. Compile it once per `resourceVersion`:
/// [`compile`] parses every expression.
#[derive(Debug)]
pub struct CompiledPolicy {
    pub(super) name: String,
    pub(super) failure_policy: FailurePolicy,
    pub(super) param_kind: Option<ParamKind>,
    pub(super) match_conditions: Vec<NamedExpression>,
    pub(super) variables: Arc<[Variable]>,
    pub(super) validations: Vec<Validation>,
    pub(super) audit_annotations: Vec<AuditAnnotation>,
    /// The deepest evaluation an expression can start, its variables' included.
    pub(super) depth: usize,
}

impl CompiledPolicy {
    /// `metadata.name`.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn failure_policy(&self) -> FailurePolicy {
        self.failure_policy
    }

    /// `spec.paramKind`, whose objects the caller lists for [`super::resolve_params`].
    pub fn param_kind(&self) -> Option<&ParamKind> {
        self.param_kind.as_ref()
    }

    /// The compile errors of the policy's expressions, as `field: detail` (upstream reports
    /// them as type-checking warnings in the policy's status); empty when all compile.
    pub fn compile_errors(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut push = |field: String, e: &Expression| {
            if let Err(detail) = &e.compiled {
                out.push(format!("{field}: {detail}"));
            }
        };
        for (i, c) in self.match_conditions.iter().enumerate() {
            push(
                format!("spec.matchConditions[{i}].expression"),
                &c.expression,
            );
        }
        for (i, v) in self.variables.iter().enumerate() {
            push(format!("spec.variables[{i}].expression"), &v.expression);
        }
        for (i, v) in self.validations.iter().enumerate() {
            push(format!("spec.validations[{i}].expression"), &v.expression);
            if let Some(m) = &v.message_expression {
                push(format!("spec.validations[{i}].messageExpression"), m);
            }
        }
        for (i, a) in self.audit_annotations.iter().enumerate() {
            push(
                format!("spec.auditAnnotations[{i}].valueExpression"),
                &a.value,
            );
        }
        out
    }
}

/// A `matchConditions` entry.
#[derive(Debug)]
pub(super) struct NamedExpression {
    pub name: String,
    pub expression: Expression,
}

/// A `validations` entry.
#[derive(Debug)]
pub(super) struct Validation {
    pub expression: Expression,
    pub message: String,
    pub message_expression: Option<Expression>,
    pub reason: Option<String>,
}

/// An `auditAnnotations` entry.
#[derive(Debug)]
pub(super) struct AuditAnnotation {
    pub key: String,
    pub value: Expression,
}

/// Compiles a ValidatingAdmissionPolicy given as JSON. Never fails: an expression that does
/// not compile is kept with its error, which counts as an evaluation error when it would run
/// (its policy's `failurePolicy` decides), and a malformed field reads as absent.
///
/// Parsing recurses deeply for long expressions, so this runs on a thread of its own with a
/// large stack.
pub fn compile(policy: &Value) -> CompiledPolicy {
    on_big_stack(|| compile_here(policy)).unwrap_or_else(|| CompiledPolicy {
        validations: vec![Validation {
            expression: Expression::broken(),
            message: String::new(),
            message_expression: None,
            reason: None,
        }],
        ..compile_here(&json!({"metadata": policy.get("metadata"), "spec": {
            "failurePolicy": policy.get("spec").and_then(|s| s.get("failurePolicy")),
            "paramKind": policy.get("spec").and_then(|s| s.get("paramKind")),
        }}))
    })
}

fn compile_here(policy: &Value) -> CompiledPolicy {
    let spec = policy.get("spec");
    let list = |key: &str| -> &[Value] {
        spec.and_then(|s| s.get(key))
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice)
    };
    let param_kind = spec
        .and_then(|s| s.get("paramKind"))
        .filter(|p| p.is_object())
        .map(|p| ParamKind {
            api_version: str_field(p, "apiVersion"),
            kind: str_field(p, "kind"),
        });
    let params = param_kind.is_some();

    // Variables see those declared before them.
    let names: Vec<String> = list("variables")
        .iter()
        .map(|v| str_field(v, "name"))
        .collect();
    let mut chains: Vec<Option<usize>> = Vec::with_capacity(names.len());
    let mut variables = Vec::with_capacity(names.len());
    for (i, v) in list("variables").iter().enumerate() {
        let declared = Declared {
            variables: Some(&names[..i]),
            params,
            authorizer: true,
        };
        let mut expression = Expression::compile(&str_field(v, "expression"), declared);
        chains.push(limit_depth(&mut expression, &chains));
        variables.push(Variable {
            name: names[i].clone(),
            expression,
        });
    }

    let declared = |authorizer| Declared {
        variables: Some(&names),
        params,
        authorizer,
    };
    let mut depth = chains.iter().flatten().copied().max().unwrap_or(0);
    let mut compile_top = |source: String, authorizer| {
        let mut e = Expression::compile(&source, declared(authorizer));
        depth = depth.max(limit_depth(&mut e, &chains).unwrap_or(0));
        e
    };
    let match_conditions = list("matchConditions")
        .iter()
        .map(|c| NamedExpression {
            name: str_field(c, "name"),
            expression: compile_top(str_field(c, "expression"), true),
        })
        .collect();
    let validations = list("validations")
        .iter()
        .map(|v| Validation {
            expression: compile_top(str_field(v, "expression"), true),
            message: str_field(v, "message"),
            message_expression: v
                .get("messageExpression")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(|s| compile_top(s.to_string(), false)),
            reason: v
                .get("reason")
                .and_then(Value::as_str)
                .filter(|r| !r.is_empty())
                .map(str::to_string),
        })
        .collect();
    let audit_annotations = list("auditAnnotations")
        .iter()
        .map(|a| AuditAnnotation {
            key: str_field(a, "key"),
            value: compile_top(str_field(a, "valueExpression"), true),
        })
        .collect();

    CompiledPolicy {
        name: policy
            .get("metadata")
            .map(|m| str_field(m, "name"))
            .unwrap_or_default(),
        failure_policy: match spec
            .and_then(|s| s.get("failurePolicy"))
            .and_then(Value::as_str)
        {
            Some("Ignore") => FailurePolicy::Ignore,
            _ => FailurePolicy::Fail,
        },
        param_kind,
        match_conditions,
        variables: variables.into(),
        validations,
        audit_annotations,
        depth,
    }
}

pub(super) fn str_field(v: &Value, key: &str) -> String {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// The deepest evaluation `e` can start: its own depth plus that of the deepest variable it
/// reads (`chains[i]`, `None` for a variable that did not compile). Past
/// [`MAX_EXPRESSION_DEPTH`] the expression is refused like one nested too deeply.
fn limit_depth(e: &mut Expression, chains: &[Option<usize>]) -> Option<usize> {
    let Ok(program) = &e.compiled else {
        return None;
    };
    let chain = chain_depth(program, chains);
    if chain > MAX_EXPRESSION_DEPTH {
        e.compiled = Err(format!(
            "compilation failed: ERROR: <input>: expression nested too deeply with the variables it reads (more than {MAX_EXPRESSION_DEPTH} levels)"
        ));
        return None;
    }
    Some(chain)
}

fn chain_depth(program: &Program, chains: &[Option<usize>]) -> usize {
    let deepest = match &program.variables {
        VariableRefs::Named(indices) => indices
            .iter()
            .filter_map(|i| chains.get(*i).copied().flatten())
            .max(),
        VariableRefs::Any => chains.iter().flatten().copied().max(),
    };
    program.depth + deepest.unwrap_or(0)
}
