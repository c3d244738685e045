//! Cost limits of CRD validation rules, as upstream's `apiextensions-apiserver` applies them
//! (`validation.StaticEstimatedCostLimit`, `StaticEstimatedCRDCostLimit`, `celconfig.PerCallLimit`,
//! `celconfig.RuntimeCELCostBudget`).
//!
//! The `cel` crate has neither a type checker nor a cost tracker, so both halves are tandem's:
//!
//! - **Static estimate** ([`estimate`]), when a CRD is created or updated: a walk over the parsed
//!   expression that follows cel-go's `checker.CostEstimator` as Kubernetes configures it. What
//!   matches upstream: identifiers and field selections cost 1, O(1) calls 1 plus their
//!   arguments, `&&`/`||` the sum of their sides, `?:` the condition plus the dearer branch,
//!   list/map literals 10/30 plus their elements, a comprehension `range + init + size(range) ×
//!   (condition + step) + result`; string operations cost `ceil(size × 0.1)` (equality and
//!   ordering on the shorter side, `+` on both, `contains` the product of both sides' factors,
//!   `matches`/`find` `ceil((size + 1) × 0.1) × ceil(len(regex) × 0.25)`), `in` the size of the
//!   list. Sizes come from the schema like upstream's `DeclType`s: `maxLength × 4` bytes for
//!   strings (enum strings their longest value; `date`, `date-time` and `duration` strings are
//!   timestamps and durations to CEL, scalars), `maxItems`/`maxProperties`, and without them the
//!   worst case fitting in a 3 MiB request (`(3 MiB − 2) / (smallest item + 1)` items,
//!   `(3 MiB − 2) / (smallest value + 6)` properties, `3 MiB − 2` bytes of string). Timestamp
//!   and duration functions cost 1, as in cel-go. A rule's cost is multiplied by how many
//!   times it can run (the product of `maxItems`/`maxProperties` above it, or the 3 MiB worst
//!   case). Approximated: without a type checker, a value whose shape is unknown (under
//!   `x-kubernetes-preserve-unknown-fields`, or the result of most functions) has an unbounded
//!   size, as cel-go gives an unsized `dyn`; library functions use flat per-call estimates
//!   close to upstream's `library.CostEstimator` rather than its exact per-overload table.
//! - **Runtime meter** ([`metered`], [`charge`]): each rule runs with a per-call limit of
//!   1,000,000 and draws on a 10,000,000 budget per object. What is counted, honestly: one unit
//!   per identifier, selection and call outside loops; for every comprehension, its range's
//!   actual size times the identifiers, selections and calls of one iteration's condition and
//!   step (charged before the loop runs, through a call the rule is rewritten to make around
//!   the range); and what the Kubernetes library functions charge from the actual sizes of
//!   their arguments. The `cel` crate's own string functions (`matches`, `contains`, …) count
//!   one unit each whatever the string's length, so long-string work is under-counted compared
//!   with upstream's tracker.

use std::cell::Cell;
use std::collections::BTreeMap;

use cel::common::ast::{CallExpr, ComprehensionExpr, EntryExpr, Expr, IdedExpr, LiteralValue};
use cel::common::types::{CelInt, DYN_TYPE, INT_TYPE};
use cel::common::value::CowVal;
use cel::{DeclarationError, Env, ExecutionError};
use serde_json::Value;

/// upstream `StaticEstimatedCostLimit`: the largest estimated cost of one rule.
pub(crate) const STATIC_ESTIMATED_COST_LIMIT: u64 = 10_000_000;
/// upstream `StaticEstimatedCRDCostLimit`: the largest estimated total of a schema's rules.
pub(crate) const STATIC_ESTIMATED_CRD_COST_LIMIT: u64 = 100_000_000;
/// upstream `celconfig.PerCallLimit`: the runtime cost one rule evaluation may spend.
pub(crate) const PER_CALL_LIMIT: u64 = 1_000_000;
/// upstream `celconfig.RuntimeCELCostBudget`: the runtime cost all rules of one object may spend.
pub(crate) const RUNTIME_CEL_COST_BUDGET: i64 = 10_000_000;
/// upstream `celconfig.MaxRequestSizeBytes`, the bound of unbounded lists, maps and strings.
const MAX_REQUEST_SIZE_BYTES: u64 = 3 * 1024 * 1024;
/// cel-go's error when a call runs over its limit, quoted in upstream's field error.
pub(crate) const ACTUAL_COST_LIMIT_EXCEEDED: &str =
    "operation cancelled: actual cost limit exceeded";

/// The function a comprehension's range is wrapped in to charge the loop's cost.
const RANGE_COST_FUNCTION: &str = "@k8s_loop_cost";

/// upstream `getCostErrorMessage`.
pub(crate) fn cost_error_message(cost_name: &str, cost: u64, limit: u64) -> String {
    let factor = cost as f64 / limit as f64;
    let factor = if factor > 100.0 {
        "more than 100x".to_string()
    } else if factor < 1.5 {
        format!("{factor:.6}x")
    } else {
        format!("{factor:.1}x")
    };
    format!(
        "{cost_name} exceeds budget by factor of {factor} (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"
    )
}

/// cel-go's `StringTraversalCostFactor` (0.1) applied to `len`, rounded up.
pub(crate) fn string_traversal(len: u64) -> u64 {
    len.div_ceil(10)
}

// ---------------------------------------------------------------------------------------------
// Runtime meter

#[derive(Clone, Copy)]
struct Meter {
    used: u64,
    limit: u64,
    exceeded: bool,
}

thread_local! {
    static METER: Cell<Option<Meter>> = const { Cell::new(None) };
}

/// Adds `units` to the running rule's cost; fails once the per-call limit is passed. Outside
/// [`metered`] nothing is counted.
pub(crate) fn charge(units: u64) -> Result<(), ExecutionError> {
    METER.with(|m| {
        let Some(mut meter) = m.get() else {
            return Ok(());
        };
        meter.used = meter.used.saturating_add(units);
        let over = meter.used > meter.limit;
        meter.exceeded |= over;
        m.set(Some(meter));
        if over {
            Err(ExecutionError::function_error(
                "cost",
                ACTUAL_COST_LIMIT_EXCEEDED,
            ))
        } else {
            Ok(())
        }
    })
}

/// What one metered evaluation spent.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Spent {
    pub cost: u64,
    /// The per-call limit was passed (even if the expression swallowed the error).
    pub exceeded: bool,
}

/// Runs `f` with a fresh meter limited to `limit` units.
pub(crate) fn metered<T>(limit: u64, f: impl FnOnce() -> T) -> (T, Spent) {
    let outer = METER.with(|m| {
        m.replace(Some(Meter {
            used: 0,
            limit,
            exceeded: false,
        }))
    });
    let out = f();
    let meter = METER.with(|m| m.replace(outer));
    let spent = meter.map_or(
        Spent {
            cost: 0,
            exceeded: false,
        },
        |m| Spent {
            cost: m.used,
            exceeded: m.exceeded,
        },
    );
    (out, spent)
}

/// Registers the loop-cost function the instrumented expressions call.
pub(crate) fn register(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_overload(
        RANGE_COST_FUNCTION,
        "k8s_loop_cost",
        vec![DYN_TYPE, INT_TYPE],
        loop_cost,
    )
}

/// `@k8s_loop_cost(range, per_iteration)`: charges `size(range) × per_iteration` and yields the
/// range unchanged.
fn loop_cost<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [range, per]: [CowVal<'b, 'v>; 2] = args
        .try_into()
        .map_err(|a: Vec<_>| ExecutionError::invalid_argument_count(2, a.len()))?;
    let per = per
        .downcast_ref::<CelInt>()
        .map_or(1, |i| u64::try_from(*i.inner()).unwrap_or(1));
    let size = range
        .as_sizer()
        .map_or(0, |s| u64::try_from(*s.size().inner()).unwrap_or(0));
    charge(size.saturating_mul(per))?;
    Ok(range)
}

/// An expression rewritten to charge its comprehensions' costs, and the cost of its nodes
/// outside any loop.
#[derive(Debug)]
pub(crate) struct Instrumented {
    pub expr: IdedExpr,
    pub base_cost: u64,
}

/// Rewrites `root` so each comprehension's range passes through [`RANGE_COST_FUNCTION`].
pub(crate) fn instrument(root: &IdedExpr) -> Instrumented {
    let mut expr = root.clone();
    let base_cost = counted_nodes(&expr);
    wrap_ranges(&mut expr);
    Instrumented { expr, base_cost }
}

/// Identifiers, selections and calls in `e`, not descending into comprehension bodies (a
/// comprehension's range, init and result count; its loop is charged by its wrapper).
fn counted_nodes(e: &IdedExpr) -> u64 {
    let mut n = 0u64;
    let mut stack = vec![e];
    while let Some(e) = stack.pop() {
        match &e.expr {
            Expr::Ident(_) => n += 1,
            Expr::Select(s) => {
                n += 1;
                stack.push(&s.operand);
            }
            Expr::Call(c) => {
                n += 1;
                if let Some(t) = &c.target {
                    stack.push(t);
                }
                stack.extend(c.args.iter());
            }
            Expr::Comprehension(c) => {
                stack.push(&c.iter_range);
                stack.push(&c.accu_init);
                stack.push(&c.result);
            }
            Expr::List(l) => stack.extend(l.elements.iter()),
            Expr::Map(m) => {
                for entry in &m.entries {
                    if let EntryExpr::MapEntry(me) = &entry.expr {
                        stack.push(&me.key);
                        stack.push(&me.value);
                    }
                }
            }
            Expr::Struct(s) => {
                for entry in &s.entries {
                    match &entry.expr {
                        EntryExpr::StructField(f) => stack.push(&f.value),
                        EntryExpr::MapEntry(me) => {
                            stack.push(&me.key);
                            stack.push(&me.value);
                        }
                    }
                }
            }
            Expr::Literal(_) | Expr::Unspecified => {}
        }
    }
    n
}

fn wrap_ranges(root: &mut IdedExpr) {
    let mut stack: Vec<&mut IdedExpr> = vec![root];
    while let Some(e) = stack.pop() {
        match &mut e.expr {
            Expr::Comprehension(c) => {
                let per_iteration =
                    counted_nodes(&c.loop_cond).saturating_add(counted_nodes(&c.loop_step));
                let range = std::mem::take(&mut c.iter_range);
                let id = range.id;
                c.iter_range = IdedExpr {
                    id,
                    expr: Expr::Call(CallExpr {
                        func_name: RANGE_COST_FUNCTION.to_string(),
                        target: None,
                        args: vec![
                            range,
                            IdedExpr {
                                id,
                                expr: Expr::Literal(LiteralValue::Int(CelInt::from(
                                    i64::try_from(per_iteration.max(1)).unwrap_or(i64::MAX),
                                ))),
                            },
                        ],
                    }),
                };
                let ComprehensionExpr {
                    iter_range,
                    accu_init,
                    loop_cond,
                    loop_step,
                    result,
                    ..
                } = c.as_mut();
                if let Expr::Call(call) = &mut iter_range.expr
                    && let Some(inner) = call.args.first_mut()
                {
                    stack.push(inner);
                }
                stack.push(accu_init);
                stack.push(loop_cond);
                stack.push(loop_step);
                stack.push(result);
            }
            Expr::Call(c) => {
                if let Some(t) = &mut c.target {
                    stack.push(t);
                }
                stack.extend(c.args.iter_mut());
            }
            Expr::Select(s) => stack.push(&mut s.operand),
            Expr::List(l) => stack.extend(l.elements.iter_mut()),
            Expr::Map(m) => {
                for entry in &mut m.entries {
                    if let EntryExpr::MapEntry(me) = &mut entry.expr {
                        stack.push(&mut me.key);
                        stack.push(&mut me.value);
                    }
                }
            }
            Expr::Struct(s) => {
                for entry in &mut s.entries {
                    match &mut entry.expr {
                        EntryExpr::StructField(f) => stack.push(&mut f.value),
                        EntryExpr::MapEntry(me) => {
                            stack.push(&mut me.key);
                            stack.push(&mut me.value);
                        }
                    }
                }
            }
            Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Static estimate

/// What the estimator knows of a value: its kind and size bound.
#[derive(Debug, Clone)]
pub(crate) enum Shape {
    /// A string (or bytes) of at most this many bytes.
    Str(u64),
    /// A list of at most this many elements.
    List(u64, Box<Shape>),
    /// A map with string keys and at most this many entries.
    Map(u64, Box<Shape>),
    /// An object with declared fields (CEL names).
    Object(BTreeMap<String, Shape>),
    /// A number or boolean.
    Scalar,
    /// A value of unknown shape and unbounded size.
    Unknown,
}

impl Shape {
    fn size(&self) -> u64 {
        match self {
            Shape::Str(n) | Shape::List(n, _) | Shape::Map(n, _) => *n,
            Shape::Object(fields) => fields.len() as u64,
            Shape::Scalar => 1,
            Shape::Unknown => u64::MAX,
        }
    }

    /// The shape of what iterating over this value yields.
    fn element(&self) -> Shape {
        match self {
            Shape::List(_, e) => (**e).clone(),
            Shape::Map(_, _) | Shape::Object(_) => Shape::Str(MAX_REQUEST_SIZE_BYTES - 2),
            _ => Shape::Unknown,
        }
    }

    fn index(&self, key: Option<&str>) -> Shape {
        match (self, key) {
            (Shape::List(_, e), _) | (Shape::Map(_, e), _) => (**e).clone(),
            (Shape::Object(fields), Some(k)) => fields.get(k).cloned().unwrap_or(Shape::Unknown),
            _ => Shape::Unknown,
        }
    }
}

fn schema_type(schema: &Value) -> &str {
    schema.get("type").and_then(Value::as_str).unwrap_or("")
}

fn bound(schema: &Value, key: &str) -> Option<u64> {
    schema
        .get(key)
        .and_then(Value::as_i64)
        .map(|n| u64::try_from(n).unwrap_or(0))
}

/// upstream `DeclType.MinSerializedSize`.
fn min_serialized_size(schema: &Value) -> u64 {
    if schema
        .get("x-kubernetes-int-or-string")
        .and_then(Value::as_bool)
        == Some(true)
    {
        return 1;
    }
    match schema_type(schema) {
        "string" => 2,
        "integer" | "number" => 1,
        "boolean" => 4,
        "array" | "object" => 2,
        _ => 1,
    }
}

/// The shape a schema gives its values (upstream `SchemaDeclType`); `root` for the resource
/// root and embedded resources, which also show `apiVersion`, `kind` and `metadata`.
pub(crate) fn shape_of(schema: &Value, root: bool, depth: usize) -> Shape {
    if depth > super::MAX_DEPTH {
        return Shape::Unknown;
    }
    let flag = |k: &str| schema.get(k).and_then(Value::as_bool) == Some(true);
    if flag("x-kubernetes-int-or-string") {
        return Shape::Str(MAX_REQUEST_SIZE_BYTES - 2);
    }
    let root = root || flag("x-kubernetes-embedded-resource");
    match schema_type(schema) {
        "string" => {
            // upstream `SchemaDeclType`: these formats are timestamps and durations to CEL.
            if matches!(
                schema.get("format").and_then(Value::as_str),
                Some("date-time" | "date" | "duration")
            ) {
                return Shape::Scalar;
            }
            if let Some(n) = bound(schema, "maxLength") {
                return Shape::Str(n.saturating_mul(4));
            }
            if let Some(Value::Array(values)) = schema.get("enum") {
                let longest = values
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::len)
                    .max()
                    .unwrap_or(0);
                return Shape::Str(longest as u64);
            }
            Shape::Str(MAX_REQUEST_SIZE_BYTES - 2)
        }
        "integer" | "number" | "boolean" => Shape::Scalar,
        "array" => {
            let items = schema.get("items").unwrap_or(&Value::Null);
            let max = bound(schema, "maxItems")
                .unwrap_or_else(|| (MAX_REQUEST_SIZE_BYTES - 2) / (min_serialized_size(items) + 1));
            Shape::List(max, Box::new(shape_of(items, false, depth + 1)))
        }
        "object" | "" => {
            let props = schema.get("properties").and_then(Value::as_object);
            if props.is_some_and(|p| !p.is_empty()) || root {
                let mut fields = BTreeMap::new();
                for (k, s) in props.into_iter().flatten() {
                    if root && k == "metadata" {
                        continue;
                    }
                    if let Some(name) = super::cel::escape(k) {
                        fields.insert(name, shape_of(s, false, depth + 1));
                    }
                }
                if root {
                    let unbounded = Shape::Str(MAX_REQUEST_SIZE_BYTES - 2);
                    fields.insert("apiVersion".to_string(), unbounded.clone());
                    fields.insert("kind".to_string(), unbounded.clone());
                    let meta = [
                        ("name".to_string(), unbounded.clone()),
                        ("generateName".to_string(), unbounded),
                    ];
                    fields.insert("metadata".to_string(), Shape::Object(meta.into()));
                }
                return Shape::Object(fields);
            }
            match schema.get("additionalProperties") {
                Some(ap @ Value::Object(_)) => {
                    let max = bound(schema, "maxProperties").unwrap_or_else(|| {
                        (MAX_REQUEST_SIZE_BYTES - 2) / (min_serialized_size(ap) + 6)
                    });
                    Shape::Map(max, Box::new(shape_of(ap, false, depth + 1)))
                }
                _ if flag("x-kubernetes-preserve-unknown-fields") => Shape::Unknown,
                Some(Value::Bool(true)) => Shape::Unknown,
                _ if schema_type(schema).is_empty() => Shape::Unknown,
                _ => Shape::Object(BTreeMap::new()),
            }
        }
        _ => Shape::Unknown,
    }
}

/// How many times a rule on `schema` can run when a schema above it is unbounded (upstream
/// `maxCardinality`): as many of its smallest serialization as fit in a request.
pub(crate) fn unbounded_cardinality(schema: &Value) -> u64 {
    MAX_REQUEST_SIZE_BYTES / (min_serialized_size(schema) + 1)
}

/// The factor by which `schema` multiplies the occurrences of its children (upstream
/// `extractMaxElements`): `None` when unbounded.
pub(crate) fn max_elements(schema: &Value) -> Option<u64> {
    match schema_type(schema) {
        "object" => {
            if schema.get("additionalProperties").is_some() {
                bound(schema, "maxProperties")
            } else {
                Some(1)
            }
        }
        "array" => bound(schema, "maxItems"),
        _ => Some(1),
    }
}

/// The estimated maximum cost of one evaluation of `expr` with `self` (and `oldSelf`) of
/// shape `this`.
pub(crate) fn estimate(expr: &IdedExpr, this: &Shape) -> u64 {
    let mut scope = vec![
        ("self".to_string(), this.clone()),
        ("oldSelf".to_string(), this.clone()),
    ];
    Estimator { depth: 0 }.cost(expr, &mut scope).0
}

struct Estimator {
    depth: usize,
}

type Scope = Vec<(String, Shape)>;

fn lookup(scope: &Scope, name: &str) -> Shape {
    scope
        .iter()
        .rev()
        .find(|(n, _)| n == name)
        .map_or(Shape::Unknown, |(_, s)| s.clone())
}

/// The `[x]` a `map`/`filter` step appends to its accumulator, if `step` is that shape.
fn appended_element<'a>(step: &'a IdedExpr, accu: &str) -> Option<&'a IdedExpr> {
    let Expr::Call(call) = &step.expr else {
        return None;
    };
    match (call.func_name.as_str(), call.args.as_slice()) {
        ("_+_", [lhs, rhs]) if matches!(&lhs.expr, Expr::Ident(n) if n == accu) => {
            match &rhs.expr {
                Expr::List(l) => l.elements.first(),
                _ => None,
            }
        }
        ("_?_:_", [_, then, _]) => appended_element(then, accu),
        _ => None,
    }
}

impl Estimator {
    fn cost(&mut self, e: &IdedExpr, scope: &mut Scope) -> (u64, Shape) {
        if self.depth > 2 * super::cel::MAX_EXPRESSION_DEPTH {
            return (u64::MAX, Shape::Unknown);
        }
        self.depth += 1;
        let out = self.cost_inner(e, scope);
        self.depth -= 1;
        out
    }

    fn cost_inner(&mut self, e: &IdedExpr, scope: &mut Scope) -> (u64, Shape) {
        match &e.expr {
            Expr::Literal(LiteralValue::String(s)) => (0, Shape::Str(s.inner().len() as u64)),
            Expr::Literal(LiteralValue::Bytes(b)) => (0, Shape::Str(b.inner().len() as u64)),
            Expr::Literal(_) => (0, Shape::Scalar),
            Expr::Ident(name) => (1, lookup(scope, name)),
            Expr::Select(s) => {
                let (c, operand) = self.cost(&s.operand, scope);
                let shape = if s.test {
                    Shape::Scalar
                } else {
                    operand.index(Some(&s.field))
                };
                (c.saturating_add(1), shape)
            }
            Expr::List(l) => {
                let mut total = 10u64;
                let mut elem = Shape::Unknown;
                for (i, item) in l.elements.iter().enumerate() {
                    let (c, s) = self.cost(item, scope);
                    total = total.saturating_add(c);
                    if i == 0 {
                        elem = s;
                    }
                }
                (total, Shape::List(l.elements.len() as u64, Box::new(elem)))
            }
            Expr::Map(m) => {
                let mut total = 30u64;
                for entry in &m.entries {
                    if let EntryExpr::MapEntry(me) = &entry.expr {
                        total = total
                            .saturating_add(self.cost(&me.key, scope).0)
                            .saturating_add(self.cost(&me.value, scope).0);
                    }
                }
                (
                    total,
                    Shape::Map(m.entries.len() as u64, Box::new(Shape::Unknown)),
                )
            }
            Expr::Struct(s) => {
                let mut total = 40u64;
                for entry in &s.entries {
                    if let EntryExpr::StructField(f) = &entry.expr {
                        total = total.saturating_add(self.cost(&f.value, scope).0);
                    }
                }
                (total, Shape::Unknown)
            }
            Expr::Comprehension(c) => self.comprehension(c, scope),
            Expr::Call(call) => self.call(call, scope),
            Expr::Unspecified => (0, Shape::Unknown),
        }
    }

    fn comprehension(&mut self, c: &ComprehensionExpr, scope: &mut Scope) -> (u64, Shape) {
        let (range_cost, range) = self.cost(&c.iter_range, scope);
        let (init_cost, init) = self.cost(&c.accu_init, scope);
        let size = range.size();
        let elem = range.element();
        let empty_list_accu = matches!(&c.accu_init.expr, Expr::List(l) if l.elements.is_empty());
        scope.push((c.iter_var.clone(), elem));
        if let Some(v2) = &c.iter_var2 {
            scope.push((v2.clone(), Shape::Unknown));
        }
        let accu_shape = if empty_list_accu {
            let elem = appended_element(&c.loop_step, &c.accu_var)
                .map_or(Shape::Unknown, |x| self.cost(x, scope).1);
            Shape::List(size, Box::new(elem))
        } else {
            init
        };
        scope.push((c.accu_var.clone(), accu_shape));
        let cond = self.cost(&c.loop_cond, scope).0;
        let step = self.cost(&c.loop_step, scope).0;
        // The result sees the accumulator only.
        let iter_vars = if c.iter_var2.is_some() { 2 } else { 1 };
        let accu = scope.pop();
        scope.truncate(scope.len() - iter_vars);
        if let Some(a) = accu {
            scope.push(a);
        }
        let (result_cost, result) = self.cost(&c.result, scope);
        scope.pop();
        let total = range_cost
            .saturating_add(init_cost)
            .saturating_add(size.saturating_mul(cond.saturating_add(step)))
            .saturating_add(result_cost);
        (total, result)
    }

    fn call(&mut self, call: &CallExpr, scope: &mut Scope) -> (u64, Shape) {
        let target = call.target.as_ref().map(|t| self.cost(t, scope));
        let args: Vec<(u64, Shape)> = call.args.iter().map(|a| self.cost(a, scope)).collect();
        let arg_cost = args
            .iter()
            .map(|(c, _)| *c)
            .chain(target.as_ref().map(|(c, _)| *c))
            .fold(0u64, u64::saturating_add);
        let shape = |i: usize| args.get(i).map_or(Shape::Unknown, |(_, s)| s.clone());
        let size = |i: usize| args.get(i).map_or(u64::MAX, |(_, s)| s.size());
        let target_shape = target.as_ref().map_or(Shape::Unknown, |(_, s)| s.clone());
        let target_size = target_shape.size();
        let is_str = |s: &Shape| matches!(s, Shape::Str(_));
        let (own, result) = match call.func_name.as_str() {
            "_&&_" | "_||_" => (0, Shape::Scalar),
            "_?_:_" => {
                let (c, _) = &args[0];
                let (a, sa) = args.get(1).cloned().unwrap_or((0, Shape::Unknown));
                let (b, sb) = args.get(2).cloned().unwrap_or((0, Shape::Unknown));
                let bigger = if sa.size() >= sb.size() { sa } else { sb };
                return (c.saturating_add(a.max(b)), bigger);
            }
            "_==_" | "_!=_" | "_<_" | "_<=_" | "_>_" | "_>=_" => {
                if is_str(&shape(0)) || is_str(&shape(1)) {
                    (string_traversal(size(0).min(size(1))), Shape::Scalar)
                } else {
                    (1, Shape::Scalar)
                }
            }
            "_+_" => match (shape(0), shape(1)) {
                (Shape::Str(a), Shape::Str(b)) => {
                    let n = a.saturating_add(b);
                    (string_traversal(n), Shape::Str(n))
                }
                (Shape::List(a, e), Shape::List(b, _)) => (1, Shape::List(a.saturating_add(b), e)),
                _ => (1, Shape::Unknown),
            },
            "@in" => (size(1), Shape::Scalar),
            "_[_]" | "_[?_]" => {
                let key = match call.args.get(1).map(|a| &a.expr) {
                    Some(Expr::Literal(LiteralValue::String(s))) => Some(s.inner().to_string()),
                    _ => None,
                };
                (1, shape(0).index(key.as_deref()))
            }
            "contains" if is_str(&target_shape) => (
                string_traversal(target_size).saturating_mul(string_traversal(size(0))),
                Shape::Scalar,
            ),
            "startsWith" | "endsWith" => (string_traversal(size(0)), Shape::Scalar),
            "matches" | "find" | "findAll" => {
                let (s, re) = if target.is_some() {
                    (target_size, size(0))
                } else {
                    (size(0), size(1))
                };
                let cost = string_traversal(s.saturating_add(1)).saturating_mul(re.div_ceil(4));
                let result = match call.func_name.as_str() {
                    "findAll" => Shape::List(s, Box::new(Shape::Str(s))),
                    "find" => Shape::Str(s),
                    _ => Shape::Scalar,
                };
                (cost, result)
            }
            "lowerAscii" | "upperAscii" | "trim" | "replace" | "substring" | "charAt"
            | "format" | "quote" => (string_traversal(target_size), Shape::Str(target_size)),
            "split" => (
                string_traversal(target_size),
                Shape::List(target_size, Box::new(Shape::Str(target_size))),
            ),
            "join" => {
                let n = target_size.saturating_mul(target_shape.element().size());
                (string_traversal(n), Shape::Str(n))
            }
            "indexOf" | "lastIndexOf" | "reverse" if is_str(&target_shape) => {
                (string_traversal(target_size), Shape::Scalar)
            }
            "isSorted" | "sum" | "min" | "max" | "indexOf" | "lastIndexOf" => {
                let per = match target_shape.element() {
                    Shape::Str(n) => string_traversal(n).max(1),
                    _ => 1,
                };
                (target_size.saturating_mul(per), target_shape.element())
            }
            "sort" | "distinct" | "reverse" | "slice" | "flatten" => {
                (target_size, target_shape.clone())
            }
            "url" | "isURL" | "ip" | "isIP" | "cidr" | "isCIDR" | "quantity" | "isQuantity"
            | "semver" | "isSemver" | "ip.isCanonical" => (
                1u64.saturating_add(string_traversal(size(0))),
                Shape::Unknown,
            ),
            "validate" => (
                1u64.saturating_add(string_traversal(size(0))),
                Shape::Unknown,
            ),
            "size" | "has" => (1, Shape::Scalar),
            // Timestamps and durations: constant cost, as cel-go's estimator gives them.
            "timestamp" | "duration" | "getFullYear" | "getMonth" | "getDayOfYear"
            | "getDayOfMonth" | "getDate" | "getDayOfWeek" | "getHours" | "getMinutes"
            | "getSeconds" | "getMilliseconds" => (1, Shape::Scalar),
            _ => (1, Shape::Unknown),
        };
        (own.saturating_add(arg_cost), result)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn cost(rule: &str, schema: Value) -> u64 {
        let program = super::super::cel::rule_env()
            .compile(rule)
            .unwrap_or_else(|e| panic!("{rule}: {e}"));
        estimate(program.expression(), &shape_of(&schema, false, 0))
    }

    #[test]
    fn contains_over_bounded_strings_costs_as_upstream_measures() {
        // Measured against kube-apiserver: 10,000,000 / largest accepted maxItems for
        // `self.all(x, x.contains('gpu'))` is 11 per item at maxLength 16, 30 at 63, 106 at 253
        // and 414 at 1024.
        for (max_length, per_item) in [(16, 11), (63, 30), (253, 106), (1024, 414)] {
            let schema = json!({"type": "array", "maxItems": 1000,
                "items": {"type": "string", "maxLength": max_length}});
            let c = cost("self.all(x, x.contains('gpu'))", schema);
            assert_eq!(c, 1000 * per_item + 2, "maxLength {max_length}");
        }
    }

    #[test]
    fn unbounded_lists_use_the_request_size_worst_case() {
        let schema = json!({"type": "array", "items": {"type": "string"}});
        let c = cost("self.all(x, x.contains('a'))", schema);
        assert!(c > 100 * STATIC_ESTIMATED_COST_LIMIT, "{c}");
        let bounded = json!({"type": "array", "maxItems": 10,
            "items": {"type": "string", "maxLength": 64}});
        assert!(cost("self.all(x, x.contains('a'))", bounded) < 1000);
    }

    #[test]
    fn cost_messages_format_the_factor_as_go_does() {
        assert_eq!(
            cost_error_message("estimated rule cost", 11_000_000, 10_000_000),
            "estimated rule cost exceeds budget by factor of 1.100000x (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"
        );
        assert!(cost_error_message("x", 25_000_000, 10_000_000).contains("factor of 2.5x"));
        assert!(cost_error_message("x", u64::MAX, 10_000_000).contains("more than 100x"));
    }

    fn rule_on_tags(tags: Value) -> Value {
        json!({"type": "object", "properties": {"tags": {
            "x-kubernetes-validations": [{"rule": "self.all(x, x.contains('a'))"}],
            "type": "array", "items": tags}}})
    }

    #[test]
    fn crd_with_a_rule_over_an_unbounded_list_is_refused_with_upstream_messages() {
        let schema = rule_on_tags(json!({"type": "string"}));
        let mut schema = schema;
        schema["properties"]["tags"]["items"] = json!({"type": "string"});
        let errs: Vec<String> = crate::apiextensions::schema::cel_rule_errors(&schema, "s")
            .iter()
            .map(ToString::to_string)
            .collect();
        let rule = "s.properties[tags].x-kubernetes-validations[0].rule";
        assert_eq!(
            errs,
            vec![
                format!("{rule}: Forbidden: estimated rule cost exceeds budget by factor of more than 100x (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"),
                format!("{rule}: Forbidden: contributed to estimated rule cost total exceeding cost limit for entire OpenAPIv3 schema"),
                "s: Forbidden: x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema exceeds budget by factor of more than 100x (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)".to_string(),
            ]
        );
    }

    #[test]
    fn the_same_rule_with_max_items_and_max_length_is_accepted() {
        let mut schema = rule_on_tags(json!({"type": "string", "maxLength": 64}));
        schema["properties"]["tags"]["maxItems"] = json!(100);
        assert!(crate::apiextensions::schema::cel_rule_errors(&schema, "s").is_empty());
    }

    #[test]
    fn rules_under_unbounded_lists_are_multiplied_by_the_worst_case_count() {
        // A cheap rule on each item of an unbounded list of large objects is fine; the same on
        // items of an unbounded list nested in another is refused.
        let item = json!({"type": "object", "properties": {"name": {"type": "string", "maxLength": 8}},
            "x-kubernetes-validations": [{"rule": "self.name.startsWith('x')"}]});
        let one = json!({"type": "object", "properties": {"l": {"type": "array", "items": item}}});
        assert!(crate::apiextensions::schema::cel_rule_errors(&one, "s").is_empty());
        let item = json!({"type": "object",
            "properties": {"name": {"type": "string", "maxLength": 8}},
            "x-kubernetes-validations": [{"rule": "self.name.matches('^[a-z]+(-[a-z]+)*$') && self.name.size() < 8"}]});
        let many =
            json!({"type": "array", "maxItems": 2000, "items": {"type": "array", "items": item}});
        let errs = crate::apiextensions::schema::cel_rule_errors(
            &json!({"type": "object", "properties": {"l": many}}),
            "s",
        );
        assert!(
            errs.iter()
                .any(|e| e.to_string().contains("estimated rule cost exceeds budget")),
            "{errs:?}"
        );
    }

    fn structural(schema: Value) -> crate::apiextensions::schema::Structural {
        crate::apiextensions::schema::compile(&schema).unwrap_or_else(|e| panic!("{e:?}"))
    }

    #[test]
    fn a_rule_over_its_per_call_limit_stops_validation_with_upstream_message() {
        // Quadratic over 1,100 items: about 6 million units at runtime, over the 1,000,000
        // per-call limit (the schema is compiled directly, skipping the CRD's static check).
        let s = structural(json!({"type": "object", "properties": {"l": {
            "type": "array", "items": {"type": "integer"},
            "x-kubernetes-validations": [{"rule": "self.all(x, self.all(y, x >= 0))"}]}}}));
        let items: Vec<i64> = (0..1100).collect();
        let errs: Vec<String> = s
            .validate(&json!({"l": items}))
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            errs,
            vec!["l: Invalid value: \"array\": 'operation cancelled: actual cost limit exceeded': no further validation rules will be run due to call cost exceeds limit for rule: self.all(x, self.all(y, x >= 0))".to_string()]
        );
        // A small list is well within the limit.
        assert!(s.validate(&json!({"l": [1, 2, 3]})).is_empty());
    }

    #[test]
    fn rules_stop_once_the_object_budget_runs_out() {
        // Each item's rule costs about 800,000 units (under the per-call limit); thirteen of
        // them pass the 10,000,000 budget of one object.
        let s = structural(json!({"type": "object", "properties": {"l": {
            "type": "array", "items": {
                "type": "array", "items": {"type": "integer"},
                "x-kubernetes-validations": [{"rule": "self.all(x, self.all(y, x >= 0))"}]}}}}));
        let inner: Vec<i64> = (0..400).collect();
        let outer: Vec<Vec<i64>> = (0..14).map(|_| inner.clone()).collect();
        let errs: Vec<String> = s
            .validate(&json!({"l": outer}))
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(
            errs[0].ends_with("Invalid value: \"array\": validation failed due to running out of cost budget, no further validation rules will be run"),
            "{errs:?}"
        );
        let few: Vec<Vec<i64>> = (0..3).map(|_| inner.clone()).collect();
        assert!(s.validate(&json!({"l": few})).is_empty());
    }

    #[test]
    fn runtime_meter_stops_at_the_limit() {
        let ((), spent) = metered(10, || {
            assert!(charge(6).is_ok());
            assert!(charge(6).is_err());
        });
        assert!(spent.exceeded);
        assert_eq!(spent.cost, 12);
        // Outside a meter nothing is counted or refused.
        assert!(charge(u64::MAX).is_ok());
    }
}
