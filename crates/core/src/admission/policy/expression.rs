//! One admission CEL expression: compiled once (parsed in Kubernetes' CEL environment, checked
//! against the variables its field declares, rewritten to meter its cost) and run under the
//! per-call cost limit with panics caught (upstream `plugin/cel.CompileCELExpression` and
//! `activation.Evaluate`).
//!
//! The `cel` crate has no type checker. What upstream's checker rejects and this module can
//! see without types is rejected here as a compile error: references to `params` or
//! `authorizer` where the field does not declare them, and to `variables.x` for a variable not
//! declared (before this one, for a variable). Result types are checked when the expression
//! runs, as upstream does for `dyn`-typed expressions.

use std::collections::BTreeSet;
use std::panic::{AssertUnwindSafe, catch_unwind};

use cel::common::ast::{EntryExpr, Expr, IdedExpr, LiteralValue, operators};
use cel::common::value::CowVal;
use cel::{Context, ExecutionError, Value as CelValue};

use crate::apiextensions::schema::cel::{MAX_EXPRESSION_DEPTH, rule_env};
use crate::apiextensions::schema::cel_cost::{self, Instrumented};

/// The variables an expression's field declares (upstream `OptionalVariableDeclarations`,
/// plus composition's `variables`).
#[derive(Debug, Clone, Copy)]
pub(super) struct Declared<'a> {
    /// The names `variables.<name>` may read; `None` when the field has no composition (a
    /// webhook's matchConditions), so `variables` itself is undeclared.
    pub variables: Option<&'a [String]>,
    pub params: bool,
    pub authorizer: bool,
}

/// An expression as written, and its program or upstream's compile error detail.
#[derive(Debug)]
pub(super) struct Expression {
    pub source: String,
    /// `Err` holds the detail upstream reports after `compilation error: `.
    pub compiled: Result<Program, String>,
}

#[derive(Debug)]
pub(super) struct Program {
    pub metered: Instrumented,
    /// How deep the expression nests (comprehensions count twice).
    pub depth: usize,
    /// The composited variables it reads.
    pub variables: VariableRefs,
}

/// Which composited variables an expression reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum VariableRefs {
    /// These, by index.
    Named(Vec<usize>),
    /// Any of those declared (`variables` is used other than as `variables.name`).
    Any,
}

impl Expression {
    /// Compiles `source`. Parsing recurses deeply for long expressions: callers run this on a
    /// large stack ([`super::activation::on_big_stack`]).
    pub(super) fn compile(source: &str, declared: Declared<'_>) -> Expression {
        Expression {
            source: source.to_string(),
            compiled: compile_program(source, declared),
        }
    }

    /// The stand-in for expressions that could not be compiled at all (the compiling thread
    /// could not start).
    pub(super) fn broken() -> Expression {
        Expression {
            source: String::new(),
            compiled: Err("compilation failed: the expressions could not be compiled".to_string()),
        }
    }
}

fn compile_program(source: &str, declared: Declared<'_>) -> Result<Program, String> {
    let env = rule_env();
    let program = catch_unwind(AssertUnwindSafe(|| env.compile(source)))
        .map_err(|_| {
            "compilation failed: ERROR: <input>: the parser failed on this expression".to_string()
        })?
        .map_err(|e| format!("compilation failed: {e}"))?;
    let root = program.expression();
    let depth = expression_depth(root);
    if depth > MAX_EXPRESSION_DEPTH {
        return Err(format!(
            "compilation failed: ERROR: <input>: expression nested too deeply (more than {MAX_EXPRESSION_DEPTH} levels)"
        ));
    }
    let refs = references(root);
    for (name, allowed) in [
        ("params", declared.params),
        ("authorizer", declared.authorizer),
        ("variables", declared.variables.is_some()),
    ] {
        if refs.free.contains(name) && !allowed {
            return Err(format!(
                "compilation failed: ERROR: <input>: undeclared reference to '{name}' (in container '')"
            ));
        }
    }
    let variables = match declared.variables {
        None => VariableRefs::Named(Vec::new()),
        Some(_) if refs.any_variable => VariableRefs::Any,
        Some(names) => {
            let mut indices = Vec::new();
            for field in &refs.variables {
                match names.iter().position(|n| n == field) {
                    Some(i) => indices.push(i),
                    None => {
                        return Err(format!(
                            "compilation failed: ERROR: <input>: undefined field '{field}'"
                        ));
                    }
                }
            }
            VariableRefs::Named(indices)
        }
    };
    Ok(Program {
        metered: cel_cost::instrument(root),
        depth,
        variables,
    })
}

/// How deep an expression nests, comprehensions counting twice (their evaluation takes more
/// stack). Walks with an explicit stack so a deep tree cannot overflow it.
fn expression_depth(root: &IdedExpr) -> usize {
    let mut max = 0;
    let mut stack: Vec<(&IdedExpr, usize)> = vec![(root, 1)];
    while let Some((e, d)) = stack.pop() {
        max = max.max(d);
        match &e.expr {
            Expr::Call(c) => {
                if let Some(t) = &c.target {
                    stack.push((t, d + 1));
                }
                stack.extend(c.args.iter().map(|a| (a, d + 1)));
            }
            Expr::Comprehension(c) => {
                for sub in [
                    &c.iter_range,
                    &c.accu_init,
                    &c.loop_cond,
                    &c.loop_step,
                    &c.result,
                ] {
                    stack.push((sub, d + 2));
                }
            }
            Expr::List(l) => stack.extend(l.elements.iter().map(|a| (a, d + 1))),
            Expr::Map(m) => {
                for entry in &m.entries {
                    if let EntryExpr::MapEntry(me) = &entry.expr {
                        stack.push((&me.key, d + 1));
                        stack.push((&me.value, d + 1));
                    }
                }
            }
            Expr::Struct(s) => {
                for entry in &s.entries {
                    match &entry.expr {
                        EntryExpr::StructField(f) => stack.push((&f.value, d + 1)),
                        EntryExpr::MapEntry(me) => {
                            stack.push((&me.key, d + 1));
                            stack.push((&me.value, d + 1));
                        }
                    }
                }
            }
            Expr::Select(s) => stack.push((&s.operand, d + 1)),
            Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
        }
    }
    max
}

/// The admission variables an expression reads, outside the comprehensions that rebind them.
#[derive(Debug, Default)]
struct References {
    /// `params`, `authorizer` and `variables` when read.
    free: BTreeSet<&'static str>,
    /// Fields read as `variables.name` or `variables['name']`, in order.
    variables: Vec<String>,
    /// `variables` read any other way.
    any_variable: bool,
}

fn references(root: &IdedExpr) -> References {
    // Scopes of comprehension variables: (enclosing scope, names bound).
    let mut scopes: Vec<(Option<usize>, Vec<&str>)> = vec![(None, Vec::new())];
    let bound = |scopes: &[(Option<usize>, Vec<&str>)], mut scope: usize, name: &str| loop {
        let Some((parent, names)) = scopes.get(scope) else {
            return false;
        };
        if names.contains(&name) {
            return true;
        }
        match parent {
            Some(p) => scope = *p,
            None => return false,
        }
    };
    let mut refs = References::default();
    let mut stack: Vec<(&IdedExpr, usize)> = vec![(root, 0)];
    while let Some((e, scope)) = stack.pop() {
        match &e.expr {
            Expr::Ident(name) => {
                if !bound(&scopes, scope, name) {
                    match name.as_str() {
                        "params" => {
                            refs.free.insert("params");
                        }
                        "authorizer" => {
                            refs.free.insert("authorizer");
                        }
                        "variables" => {
                            refs.free.insert("variables");
                            refs.any_variable = true;
                        }
                        _ => {}
                    }
                }
            }
            Expr::Select(s) => match &s.operand.expr {
                Expr::Ident(name) if name == "variables" && !bound(&scopes, scope, name) => {
                    refs.free.insert("variables");
                    refs.variables.push(s.field.clone());
                }
                _ => stack.push((&s.operand, scope)),
            },
            Expr::Call(c) => {
                if c.func_name == operators::INDEX
                    && c.target.is_none()
                    && let [target, key] = c.args.as_slice()
                    && let Expr::Ident(name) = &target.expr
                    && name == "variables"
                    && !bound(&scopes, scope, name)
                    && let Expr::Literal(LiteralValue::String(field)) = &key.expr
                {
                    refs.free.insert("variables");
                    refs.variables.push(field.inner().to_string());
                    continue;
                }
                if let Some(t) = &c.target {
                    stack.push((t, scope));
                }
                stack.extend(c.args.iter().map(|a| (a, scope)));
            }
            Expr::Comprehension(c) => {
                stack.push((&c.iter_range, scope));
                stack.push((&c.accu_init, scope));
                let mut names = vec![c.iter_var.as_str(), c.accu_var.as_str()];
                if let Some(v) = &c.iter_var2 {
                    names.push(v.as_str());
                }
                scopes.push((Some(scope), names));
                let inner = scopes.len() - 1;
                for sub in [&c.loop_cond, &c.loop_step, &c.result] {
                    stack.push((sub, inner));
                }
            }
            Expr::List(l) => stack.extend(l.elements.iter().map(|a| (a, scope))),
            Expr::Map(m) => {
                for entry in &m.entries {
                    if let EntryExpr::MapEntry(me) = &entry.expr {
                        stack.push((&me.key, scope));
                        stack.push((&me.value, scope));
                    }
                }
            }
            Expr::Struct(s) => {
                for entry in &s.entries {
                    match &entry.expr {
                        EntryExpr::StructField(f) => stack.push((&f.value, scope)),
                        EntryExpr::MapEntry(me) => {
                            stack.push((&me.key, scope));
                            stack.push((&me.value, scope));
                        }
                    }
                }
            }
            Expr::Literal(_) | Expr::Unspecified => {}
        }
    }
    refs
}

/// Runs `program` in `ctx` under upstream's per-call cost limit, reading the result with
/// `read`. Returns the result (or cel-go's wording of the error) and the cost it spent.
pub(super) fn run<'v, T>(
    program: &Program,
    ctx: &Context<'_, 'v>,
    read: impl for<'b> FnOnce(CowVal<'b, 'v>) -> T,
) -> (Result<T, String>, u64) {
    let (outcome, spent) = cel_cost::metered(cel_cost::PER_CALL_LIMIT, || {
        cel_cost::charge(program.metered.base_cost)?;
        catch_unwind(AssertUnwindSafe(|| {
            CelValue::resolve_val(&program.metered.expr, ctx).map(read)
        }))
        .unwrap_or_else(|_| {
            Err(ExecutionError::function_error(
                INTERNAL,
                "internal error evaluating expression",
            ))
        })
    });
    if spent.exceeded {
        // cel-go stops an expression as soon as it passes the limit, having spent about that
        // much; the meter here may charge a whole loop at once.
        let cost = spent.cost.min(cel_cost::PER_CALL_LIMIT);
        return (Err(cel_cost::ACTUAL_COST_LIMIT_EXCEEDED.to_string()), cost);
    }
    (outcome.map_err(|e| error_text(&e)), spent.cost)
}

/// The function name of errors whose message is already worded for the user.
pub(super) const INTERNAL: &str = "@admission";

/// cel-go's wording for the evaluation errors policy authors meet most.
pub(super) fn error_text(e: &ExecutionError) -> String {
    match e {
        ExecutionError::NoSuchKey(k) => format!("no such key: {k}"),
        ExecutionError::NoSuchOverload(_) => "no such overload".to_string(),
        ExecutionError::UndeclaredReference(r) => format!("undeclared reference to '{r}'"),
        ExecutionError::DivisionByZero(_) => "division by zero".to_string(),
        ExecutionError::RemainderByZero(_) => "modulus by zero".to_string(),
        ExecutionError::Overflow(..) => "integer overflow".to_string(),
        ExecutionError::FunctionError { message, .. } => message.clone(),
        other => {
            let s = other.to_string();
            let mut c = s.chars();
            match c.next() {
                Some(f) => f.to_lowercase().chain(c).collect(),
                None => s,
            }
        }
    }
}
