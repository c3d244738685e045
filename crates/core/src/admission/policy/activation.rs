//! What an admission expression sees (upstream `plugin/cel/activation.go` and
//! `composition.go`): the request's variables, converted once per evaluation, and the
//! composited `variables`, each evaluated lazily the first time an expression reads it and then
//! remembered for the rest of the phase.
//!
//! A phase is one of upstream's `ForInput` calls: the policy's matchConditions, its
//! validations, their messageExpressions, its auditAnnotations. Each starts with no variable
//! evaluated, as upstream's lazy map is made per call.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, OnceLock, Weak};

use cel::common::traits::Indexer;
use cel::common::types::{CelString, Type};
use cel::common::value::{CowVal, Val};
use cel::{Context, ExecutionError};
use serde_json::Value;

use super::authz::{self, Authorizer};
use super::compile::ParamKind;
use super::expression::{Expression, INTERNAL, run};
use super::values::{Outcome, Shared, namespace_object, request_object};
use crate::apiextensions::schema::cel::rule_env;
use crate::field::go_quote;

/// The variables of one admission request, as the API server gives them.
///
/// `request` is the `admission.k8s.io/v1` AdmissionRequest as JSON (`uid`, `kind`, `resource`,
/// `subResource`, `requestKind`, `requestResource`, `requestSubResource`, `name`, `namespace`,
/// `operation`, `userInfo`, `dryRun`, `options`); its `object` and `oldObject`, if present, are
/// ignored in favour of the fields below. The kind and resource should be those the policy
/// matched (upstream gives the equivalent ones `matchPolicy: Equivalent` chose), the
/// `request*` ones those of the request itself.
///
/// `namespace_object` is the request's Namespace, `None` for cluster-scoped requests and (as
/// upstream special-cases) for requests on a Namespace itself.
#[derive(Clone)]
pub struct Activation<'a> {
    /// The object; `None` (`null`) for DELETE.
    pub object: Option<&'a Value>,
    /// The old object; `None` (`null`) for CREATE.
    pub old_object: Option<&'a Value>,
    pub request: &'a Value,
    /// The binding's param; `None` (`null`) when the binding has none.
    pub params: Option<&'a Value>,
    pub namespace_object: Option<&'a Value>,
    /// Answers `authorizer` checks; without one, expressions reading `authorizer` fail.
    pub authorizer: Option<Arc<dyn Authorizer>>,
}

impl<'a> Activation<'a> {
    /// An activation with only the request, every other variable `null`.
    pub fn new(request: &'a Value) -> Activation<'a> {
        Activation {
            object: None,
            old_object: None,
            request,
            params: None,
            namespace_object: None,
            authorizer: None,
        }
    }
}

/// The variables converted to CEL, once per evaluation.
#[derive(Debug, Clone)]
pub(super) struct Inputs {
    object: Shared,
    old_object: Shared,
    request: Shared,
    /// `None` when `params` is not declared (no paramKind).
    params: Option<Shared>,
    namespace: Shared,
    authz: Option<authz::Binding>,
}

impl Inputs {
    /// `param_kind` is the policy's (`None`: `params` undeclared). A param without
    /// `apiVersion`/`kind` gets the paramKind's, as upstream's `wrappedParam` does.
    pub(super) fn new(act: &Activation<'_>, param_kind: Option<&ParamKind>) -> Inputs {
        let shared = |v: Option<&Value>| v.map_or_else(Shared::null, Shared::from_json);
        let params = param_kind.map(|kind| match act.params {
            Some(Value::Object(p)) if !p.contains_key("apiVersion") || !p.contains_key("kind") => {
                let mut p = p.clone();
                p.entry("apiVersion")
                    .or_insert_with(|| Value::String(kind.api_version.clone()));
                p.entry("kind")
                    .or_insert_with(|| Value::String(kind.kind.clone()));
                Shared::from_json(&Value::Object(p))
            }
            other => shared(other),
        });
        Inputs {
            object: shared(act.object),
            old_object: shared(act.old_object),
            request: request_object(act.request),
            params,
            namespace: act
                .namespace_object
                .map_or_else(Shared::null, |ns| Shared::from_json(&namespace_object(ns))),
            authz: act
                .authorizer
                .as_ref()
                .map(|a| authz::Binding::new(Arc::clone(a), act.request)),
        }
    }
}

/// A composited variable (`spec.variables[i]`).
#[derive(Debug)]
pub(super) struct Variable {
    pub name: String,
    pub expression: Expression,
}

/// One phase's evaluation state: the inputs, whether `authorizer` is bound, and the variables
/// evaluated so far.
pub(super) struct Frame {
    inputs: Inputs,
    authorizer: bool,
    /// `None` without composition (a webhook's matchConditions).
    variables: Option<Arc<[Variable]>>,
    cache: Vec<OnceLock<Result<Shared, String>>>,
    /// The cost variables spent since last taken (upstream `compositionContext.accumulatedCost`).
    variable_cost: AtomicU64,
}

impl std::fmt::Debug for Frame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Frame").finish_non_exhaustive()
    }
}

/// An expression's result and the cost it spent, its variables' included.
pub(super) struct Evaluated {
    /// `Err` holds upstream's message: `compilation error: …` or
    /// `expression '…' resulted in error: …`.
    pub result: Result<Outcome, String>,
    pub cost: u64,
}

impl Frame {
    pub(super) fn new(
        inputs: Inputs,
        authorizer: bool,
        variables: Option<Arc<[Variable]>>,
    ) -> Arc<Frame> {
        let n = variables.as_ref().map_or(0, |v| v.len());
        Arc::new(Frame {
            inputs,
            authorizer,
            variables,
            cache: (0..n).map(|_| OnceLock::new()).collect(),
            variable_cost: AtomicU64::new(0),
        })
    }

    /// Evaluates `expr` (upstream `evaluationActivation.Evaluate`).
    pub(super) fn evaluate(self: &Arc<Self>, expr: &Expression) -> Evaluated {
        let program = match &expr.compiled {
            Ok(p) => p,
            Err(detail) => {
                return Evaluated {
                    result: Err(format!("compilation error: {detail}")),
                    cost: 0,
                };
            }
        };
        let ctx = self.context(usize::MAX);
        let (result, cost) = run(program, &ctx, |v| Outcome::of(&v));
        let cost = cost.saturating_add(self.variable_cost.swap(0, Ordering::Relaxed));
        Evaluated {
            result: result
                .map_err(|e| format!("expression '{}' resulted in error: {e}", expr.source)),
            cost,
        }
    }

    /// A context binding every variable; `variables` shows the first `visible` of them.
    fn context(self: &Arc<Self>, visible: usize) -> Context<'static, 'static> {
        let mut ctx = Context::with_env(Arc::clone(rule_env()));
        let inputs = &self.inputs;
        ctx.add_variable_as_val("object", inputs.object.boxed());
        ctx.add_variable_as_val("oldObject", inputs.old_object.boxed());
        ctx.add_variable_as_val("request", inputs.request.boxed());
        ctx.add_variable_as_val("namespaceObject", inputs.namespace.boxed());
        if let Some(p) = &inputs.params {
            ctx.add_variable_as_val("params", p.boxed());
        }
        if self.variables.is_some() {
            ctx.add_variable_as_val(
                "variables",
                Box::new(VariablesVal {
                    frame: Arc::downgrade(self),
                    visible,
                }),
            );
        }
        if self.authorizer
            && let Some(a) = &inputs.authz
        {
            a.bind(&mut ctx);
        }
        ctx
    }

    /// The index of the variable `name` among the first `visible`.
    fn variable_index(&self, name: &str, visible: usize) -> Option<usize> {
        self.variables
            .as_ref()?
            .iter()
            .take(visible)
            .position(|v| v.name == name)
    }

    /// The value of variable `i`, evaluated on first use (upstream `variableAccessor.Callback`).
    /// A variable can only read those declared before it, so this recursion ends.
    fn variable(self: &Arc<Self>, i: usize) -> Result<Shared, String> {
        if let Some(v) = self.cache.get(i).and_then(OnceLock::get) {
            return v.clone();
        }
        let Some(var) = self.variables.as_ref().and_then(|v| v.get(i)) else {
            return Err("no such variable".to_string());
        };
        let result = match &var.expression.compiled {
            Err(detail) => Err(format!(
                "composited variable {} fails to compile: {detail}",
                go_quote(&var.name)
            )),
            Ok(program) => {
                let ctx = self.context(i);
                let (result, cost) = run(program, &ctx, |v| Shared::new(v.into_owned()));
                self.variable_cost.fetch_add(cost, Ordering::Relaxed);
                result.map_err(|e| {
                    format!(
                        "composited variable {} fails to evaluate: {e}",
                        go_quote(&var.name)
                    )
                })
            }
        };
        if let Some(cell) = self.cache.get(i) {
            let _ = cell.set(result.clone());
        }
        result
    }
}

/// The `variables` value: reading `variables.name` evaluates the variable (once per phase).
/// It holds its frame weakly, so a variable whose value holds `variables` makes no cycle.
#[derive(Debug, Clone)]
struct VariablesVal {
    frame: Weak<Frame>,
    visible: usize,
}

static VARIABLES_TYPE: LazyLock<Type> =
    LazyLock::new(|| Type::new_opaque_type("kubernetes.variables"));

impl Val for VariablesVal {
    fn get_type(&self) -> &Type {
        &VARIABLES_TYPE
    }

    fn cel_type() -> &'static Type {
        &VARIABLES_TYPE
    }

    fn as_indexer<'b, 'v>(&'b self) -> Option<&'b (dyn Indexer + 'v)>
    where
        Self: 'v,
    {
        Some(self)
    }

    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v>
    where
        Self: 'v,
    {
        Box::new(self.clone())
    }
}

impl Indexer for VariablesVal {
    fn get<'b, 'v>(&'b self, idx: &dyn Val) -> Result<CowVal<'b, 'v>, ExecutionError>
    where
        Self: 'v,
    {
        let Some(name) = idx.downcast_ref::<CelString>() else {
            return Err(ExecutionError::UnexpectedType {
                got: idx.get_type().name().to_string(),
                want: "string".to_string(),
            });
        };
        let frame = self.frame.upgrade().ok_or_else(|| {
            ExecutionError::function_error(INTERNAL, "variables are no longer available")
        })?;
        let i = frame
            .variable_index(name.inner(), self.visible)
            .ok_or_else(|| ExecutionError::no_such_key(name.inner()))?;
        match frame.variable(i) {
            Ok(v) => Ok(CowVal::owned(v)),
            Err(message) => Err(ExecutionError::function_error(INTERNAL, message)),
        }
    }

    fn steal<'v>(self: Box<Self>, idx: &dyn Val) -> Result<Box<dyn Val + 'v>, ExecutionError>
    where
        Self: 'v,
    {
        self.get(idx).map(CowVal::into_owned)
    }
}

/// Runs `f` on a thread with a 64 MiB stack (scoped, so it may borrow), for expressions nested
/// too deeply for the caller's stack; `None` if the thread could not be started or `f`
/// panicked.
pub(super) fn on_big_stack<T: Send>(f: impl FnOnce() -> T + Send) -> Option<T> {
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("admission-cel".to_string())
            .stack_size(64 << 20)
            .spawn_scoped(scope, f)
            .ok()?
            .join()
            .ok()
    })
}
