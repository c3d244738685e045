//! CEL validation rules (`x-kubernetes-validations`), as upstream's
//! `pkg/apiserver/schema/cel` evaluates them, on the `cel` crate.
//!
//! Each rule is compiled once, with `self` (and `oldSelf` for transition rules) bound to the
//! node's value when evaluated. Values are converted following the schema like upstream's
//! `UnstructuredToVal`: only declared properties are visible (with upstream's escaping of names
//! such as `foo-bar` to `foo__dash__bar`), `number` fields are doubles, `format: date-time` and
//! `date` strings are timestamps and `format: duration` strings durations, and at the resource
//! root (and in embedded resources) `apiVersion`, `kind` and `metadata.name`/`generateName`
//! are visible too.
//!
//! The environment has Kubernetes' CEL libraries ([`super::cel_library`]: lists, regex, URLs,
//! IPs and CIDRs, quantities, semver, `format`) besides the standard library (timestamps and
//! durations included, which tandem provides itself rather than through the `cel` crate's
//! `chrono` feature and its time-zone database) and the strings and lists extensions. Costs are
//! estimated when a CRD is validated and metered when rules run ([`super::cel_cost`], which says
//! what matches upstream and what is approximated).
//!
//! The `cel` crate has no type checker: a rule that is not boolean is caught
//! when it runs (it fails like a rule that evaluates to false), and undeclared names and overload
//! mismatches surface as evaluation errors. No rule is skipped: one that calls a function this
//! environment lacks fails with `undeclared reference`. To keep deep
//! expressions from exhausting the stack, expressions nested deeper than
//! [`MAX_EXPRESSION_DEPTH`] are refused when compiled, and schemas with rules deeper than
//! [`INLINE_EXPRESSION_DEPTH`] are evaluated on a thread with a large stack.

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, OnceLock};

use cel::common::ast::{EntryExpr, Expr, IdedExpr};
use cel::common::types::{
    CelBool, CelDouble, CelInt, CelList, CelMap, CelMapKey as Key, CelNull, CelOptional, CelString,
};
use cel::common::value::Val;
use cel::{Context, Env, ExecutionError, Program, Value as CelValue};
use serde_json::{Map, Value};

use super::cel_cost::{self, Instrumented, Shape};
use super::compile::Node;
use super::gofmt;
use super::validate::correlated_item;
use crate::field::{ErrorKind, FieldError, Path};

/// Expressions nested deeper than this (comprehensions count twice) are refused.
pub(crate) const MAX_EXPRESSION_DEPTH: usize = 64;
/// Rules at most this deep are evaluated on the caller's stack.
pub(crate) const INLINE_EXPRESSION_DEPTH: usize = 12;
/// Upstream `celconfig.MaxEvaluatedMessageExpressionSizeBytes`.
const MAX_MESSAGE_EXPRESSION_BYTES: usize = 5 * 1024;

/// One compiled `x-kubernetes-validations` entry.
#[derive(Debug)]
pub(crate) struct CompiledRule {
    pub rule: String,
    pub message: String,
    pub reason: Option<String>,
    pub field_path: String,
    pub optional_old_self: Option<bool>,
    /// `None` for an empty rule (upstream skips it); `Err` holds upstream's detail
    /// (`compilation failed: …`).
    pub program: Option<Result<Program, String>>,
    pub message_program: Option<Result<Program, String>>,
    pub message_expression: String,
    pub uses_old_self: bool,
    /// `fieldPath` normalised against the schema (`.spec['a']` → `spec[a]`), if valid.
    pub normalized_field_path: Option<String>,
    /// How deep the expression nests, for choosing the evaluation stack.
    pub depth: usize,
    /// The rule and message expression rewritten to meter their cost.
    pub metered: Option<Instrumented>,
    pub message_metered: Option<Instrumented>,
}

/// The environment every rule compiles and runs in: the standard library with its macros
/// (`has`, `all`, `exists`, `exists_one`, `map`, `filter`), optionals, the strings and
/// lists extensions Kubernetes enables too, and Kubernetes' own libraries.
pub(crate) fn rule_env() -> &'static Arc<Env> {
    static ENV: OnceLock<Arc<Env>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = Env::stdlib();
        // Failures only mean the extension's functions are missing; rules using them then
        // fail with an undeclared reference.
        let _ = env.add_extension(cel::extensions::strings);
        let _ = env.add_extension(cel::extensions::lists);
        let _ = env.add_extension(super::cel_library::register);
        let _ = env.add_extension(cel_cost::register);
        Arc::new(env)
    })
}

fn env() -> &'static Arc<Env> {
    rule_env()
}

/// Reads and compiles the `x-kubernetes-validations` of one schema node. Only a malformed list
/// is an error here; rules that do not compile are kept and reported when they run (upstream's
/// `rule compile error`) and by [`super::cel_rule_errors`].
pub(crate) fn compile_rules(
    obj: &Map<String, Value>,
    path: &Path,
) -> Result<Vec<CompiledRule>, Vec<FieldError>> {
    let (raw, mut errs) = read_rules(obj, path);
    if !errs.is_empty() {
        return Err(std::mem::take(&mut errs));
    }
    Ok(raw.into_iter().map(compile_rule).collect())
}

/// A rule as written.
#[derive(Debug, Default, Clone)]
pub(crate) struct RawRule {
    pub rule: String,
    pub message: String,
    pub message_expression: String,
    pub reason: Option<String>,
    pub field_path: String,
    pub optional_old_self: Option<bool>,
}

impl RawRule {
    /// Go's `%#v` of upstream's internal `apiextensions.ValidationRule`, the bad value of the
    /// CRD validator's rule errors. Pointers print as their value here, not an address.
    fn sharp_v(&self) -> String {
        let reason = match &self.reason {
            None => "(*apiextensions.FieldValueErrorReason)(nil)".to_string(),
            Some(r) => format!(
                "(*apiextensions.FieldValueErrorReason)({})",
                gofmt::quote(r)
            ),
        };
        let optional = match self.optional_old_self {
            None => "(*bool)(nil)".to_string(),
            Some(b) => format!("(*bool)({b})"),
        };
        format!(
            "apiextensions.ValidationRule{{Rule:{}, Message:{}, MessageExpression:{}, Reason:{reason}, FieldPath:{}, OptionalOldSelf:{optional}}}",
            gofmt::quote(&self.rule),
            gofmt::quote(&self.message),
            gofmt::quote(&self.message_expression),
            gofmt::quote(&self.field_path),
        )
    }
}

fn read_rules(obj: &Map<String, Value>, path: &Path) -> (Vec<RawRule>, Vec<FieldError>) {
    let mut errs = Vec::new();
    let mut out = Vec::new();
    let kw = "x-kubernetes-validations";
    let list = match obj.get(kw) {
        None | Some(Value::Null) => return (out, errs),
        Some(Value::Array(a)) => a,
        Some(other) => {
            errs.push(FieldError::invalid(
                path.child(kw),
                other,
                "must be an array",
            ));
            return (out, errs);
        }
    };
    for (i, item) in list.iter().enumerate() {
        let p = path.child(kw).index(i);
        let Some(o) = item.as_object() else {
            errs.push(FieldError::invalid(p, item, "must be an object"));
            continue;
        };
        let mut raw = RawRule::default();
        for (name, slot) in [
            ("rule", &mut raw.rule),
            ("message", &mut raw.message),
            ("messageExpression", &mut raw.message_expression),
            ("fieldPath", &mut raw.field_path),
        ] {
            match o.get(name) {
                None | Some(Value::Null) => {}
                Some(Value::String(s)) => *slot = s.clone(),
                Some(other) => errs.push(FieldError::invalid(
                    p.child(name),
                    other,
                    "must be a string",
                )),
            }
        }
        match o.get("reason") {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) => raw.reason = Some(s.clone()),
            Some(other) => errs.push(FieldError::invalid(
                p.child("reason"),
                other,
                "must be a string",
            )),
        }
        match o.get("optionalOldSelf") {
            None | Some(Value::Null) => {}
            Some(Value::Bool(b)) => raw.optional_old_self = Some(*b),
            Some(other) => errs.push(FieldError::invalid(
                p.child("optionalOldSelf"),
                other,
                "must be a boolean",
            )),
        }
        out.push(raw);
    }
    (out, errs)
}

fn compile_rule(raw: RawRule) -> CompiledRule {
    let (program, uses_old_self, depth) = if raw.rule.trim().is_empty() {
        (None, false, 0)
    } else {
        match compile_expression(&raw.rule) {
            Ok((p, depth)) => {
                let uses = p.references().has_variable("oldSelf");
                (Some(Ok(p)), uses, depth)
            }
            Err(e) => (Some(Err(format!("compilation failed: {e}"))), false, 0),
        }
    };
    let message_program = (!raw.message_expression.is_empty()).then(|| {
        compile_expression(&raw.message_expression)
            .map(|(p, _)| p)
            .map_err(|e| format!("messageExpression compilation failed: {e}"))
    });
    let depth = depth.max(match &message_program {
        Some(Ok(p)) => expression_depth(p.expression()),
        _ => 0,
    });
    let metered = match &program {
        Some(Ok(p)) => Some(cel_cost::instrument(p.expression())),
        _ => None,
    };
    let message_metered = match &message_program {
        Some(Ok(p)) => Some(cel_cost::instrument(p.expression())),
        _ => None,
    };
    CompiledRule {
        rule: raw.rule,
        message: raw.message,
        reason: raw.reason,
        field_path: raw.field_path,
        optional_old_self: raw.optional_old_self,
        program,
        message_program,
        message_expression: raw.message_expression,
        uses_old_self,
        normalized_field_path: None,
        depth,
        metered,
        message_metered,
    }
}

/// Whether `source` compiles in [`rule_env`], with the compiler's message when it does not
/// (without the `compilation failed: ` prefix callers add).
pub(crate) fn check_expression(source: &str) -> Result<(), String> {
    compile_expression(source).map(|_| ())
}

/// Parses `source`, refusing expressions nested too deeply to evaluate safely.
fn compile_expression(source: &str) -> Result<(Program, usize), String> {
    let env = env();
    let compiled = catch_unwind(AssertUnwindSafe(|| env.compile(source)))
        .map_err(|_| "ERROR: <input>: the parser failed on this expression".to_string())?;
    let program = compiled.map_err(|e| e.to_string())?;
    let depth = expression_depth(program.expression());
    if depth > MAX_EXPRESSION_DEPTH {
        return Err(format!(
            "ERROR: <input>: expression nested too deeply (more than {MAX_EXPRESSION_DEPTH} levels)"
        ));
    }
    Ok((program, depth))
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

/// Normalises each rule's `fieldPath` against `node` (upstream `ValidFieldPath`).
pub(crate) fn normalize_field_paths(node: &mut Node) {
    let mut normalized = Vec::with_capacity(node.rules.len());
    for rule in &node.rules {
        normalized.push(if rule.field_path.is_empty() {
            None
        } else {
            valid_field_path(&rule.field_path, node).ok()
        });
    }
    for (rule, n) in node.rules.iter_mut().zip(normalized) {
        rule.normalized_field_path = n;
    }
}

/// upstream `ValidFieldPath`: a relative JSON path of `.name` and `['name']` steps through
/// properties and additionalProperties, normalised to a field path string.
pub(crate) fn valid_field_path(json_path: &str, node: &Node) -> Result<String, String> {
    let tokens = tokenize_field_path(json_path);
    let mut out: Option<String> = None;
    let mut schema = node;
    let mut i = 0;
    while i < tokens.len() {
        let tok = tokens[i].as_str();
        i += 1;
        let name = match tok {
            "[" => {
                let Some(t) = tokens.get(i) else {
                    return Err("unexpected end of JSON path".to_string());
                };
                i += 1;
                if t.len() < 2 || !t.starts_with('\'') || !t.ends_with('\'') {
                    return Err(format!("expected single quoted string but got {t}"));
                }
                let name = unescape_single_quote(&t[1..t.len() - 1])
                    .map_err(|e| format!("invalid string literal: {e}"))?;
                match tokens.get(i).map(String::as_str) {
                    Some("]") => i += 1,
                    Some(other) => return Err(format!("expected ] but got {other}")),
                    None => return Err("unexpected end of JSON path".to_string()),
                }
                name
            }
            "." => {
                let Some(t) = tokens.get(i) else {
                    return Err("unexpected end of JSON path".to_string());
                };
                i += 1;
                t.clone()
            }
            other => return Err(format!("expected [ or . but got: {other}")),
        };
        if !schema.properties.is_empty() {
            let Some(p) = schema.properties.get(&name) else {
                return Err("does not refer to a valid field".to_string());
            };
            out = Some(child(out.as_deref(), &name));
            schema = p;
        } else if let Some(ap) = schema.additional_schema() {
            out = Some(key(out.as_deref(), &name));
            schema = ap;
        } else {
            return Err("does not refer to a valid field".to_string());
        }
    }
    out.ok_or_else(|| "does not refer to a valid field".to_string())
}

/// Splits a JSON path into `.`, `[`, `]` and the names and quoted strings between them.
fn tokenize_field_path(s: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let chars: Vec<char> = s.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\'' {
            let start = i;
            i += 1;
            while i < chars.len() && !(chars[i] == '\'' && chars[i - 1] != '\\') {
                i += 1;
            }
            let end = (i + 1).min(chars.len());
            tokens.push(chars[start..end].iter().collect());
            i = end;
        } else if matches!(c, '.' | '[' | ']') {
            tokens.push(c.to_string());
            i += 1;
        } else {
            let start = i;
            while i < chars.len() && !matches!(chars[i], '.' | '[' | ']') {
                i += 1;
            }
            tokens.push(chars[start..i].iter().collect());
        }
    }
    tokens
}

fn unescape_single_quote(s: &str) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let Some(d) = chars.next() else {
            out.push('\\');
            break;
        };
        out.push(match d {
            'a' => '\u{7}',
            'b' => '\u{8}',
            'f' => '\u{c}',
            'n' => '\n',
            'r' => '\r',
            't' => '\t',
            'v' => '\u{b}',
            '\'' => '\'',
            '\\' => '\\',
            other => return Err(format!("invalid escape char \\{other}")),
        });
    }
    Ok(out)
}

/// A field path with upstream's `nil` root: `None` prints as `<nil>`.
pub(crate) fn child(path: Option<&str>, name: &str) -> String {
    match path {
        None | Some("") => name.to_string(),
        Some(p) => format!("{p}.{name}"),
    }
}

pub(crate) fn key(path: Option<&str>, k: &str) -> String {
    format!("{}[{k}]", path.unwrap_or(""))
}

fn index(path: Option<&str>, i: usize) -> String {
    format!("{}[{i}]", path.unwrap_or(""))
}

fn nil_path(path: Option<&str>) -> String {
    path.unwrap_or("<nil>").to_string()
}

/// upstream `cel.Escape`: how a property name is spelt in CEL, or `None` if it cannot be.
pub(crate) fn escape(ident: &str) -> Option<String> {
    const RESERVED: [&str; 21] = [
        "true",
        "false",
        "null",
        "in",
        "as",
        "break",
        "const",
        "continue",
        "else",
        "for",
        "function",
        "if",
        "import",
        "let",
        "loop",
        "package",
        "namespace",
        "return",
        "var",
        "void",
        "while",
    ];
    let first = ident.chars().next()?;
    if first.is_ascii_digit() {
        return None;
    }
    if RESERVED.contains(&ident) {
        return Some(format!("__{ident}__"));
    }
    let mut out = String::with_capacity(ident.len());
    let mut chars = ident.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '_' if chars.peek() == Some(&'_') => {
                chars.next();
                out.push_str("__underscores__");
            }
            c if c.is_ascii_alphanumeric() || c == '_' => out.push(c),
            '.' => out.push_str("__dot__"),
            '-' => out.push_str("__dash__"),
            '/' => out.push_str("__slash__"),
            _ => return None,
        }
    }
    Some(out)
}

fn cel_map<'a>(entries: HashMap<Key<'a>, Box<dyn Val + 'a>>) -> Box<dyn Val + 'a> {
    Box::new(CelMap::from(entries))
}

/// Converts an unstructured value to CEL following `node` (upstream `UnstructuredToVal`),
/// borrowing its strings. Strings of `format: date-time`, `date` and `duration` schemas become
/// timestamps and durations ([`super::cel_library::time_from_schema_string`]).
fn to_cel<'a>(
    node: Option<&Node>,
    v: &'a Value,
    resource_root: bool,
    depth: usize,
) -> Box<dyn Val + 'a> {
    if depth > super::MAX_DEPTH {
        return Box::new(CelNull);
    }
    match v {
        Value::Null => Box::new(CelNull),
        Value::Bool(b) => Box::new(CelBool::from(*b)),
        Value::String(s) => {
            let formatted = node
                .filter(|n| n.ty == "string" && !n.int_or_string)
                .and_then(|n| super::cel_library::time_from_schema_string(&n.format_name, s));
            formatted.unwrap_or_else(|| Box::new(CelString::from(s.as_str())))
        }
        Value::Number(n) => {
            let ty = node.map_or("", |n| n.ty.as_str());
            if ty == "number" {
                Box::new(CelDouble::from(n.as_f64().unwrap_or(0.0)))
            } else if let Some(i) = n.as_i64() {
                Box::new(CelInt::from(i))
            } else {
                let f = n.as_f64().unwrap_or(0.0);
                if ty == "integer" && f.fract() == 0.0 && f.abs() < 9.2e18 {
                    Box::new(CelInt::from(f as i64))
                } else {
                    Box::new(CelDouble::from(f))
                }
            }
        }
        Value::Array(items) => {
            let item_node = node.and_then(|n| n.items.as_deref());
            let embedded = item_node.is_some_and(|n| n.embedded_resource);
            Box::new(CelList::from(
                items
                    .iter()
                    .map(|i| to_cel(item_node, i, embedded, depth + 1))
                    .collect::<Vec<_>>(),
            ))
        }
        Value::Object(map) => {
            let mut out: HashMap<Key<'a>, Box<dyn Val + 'a>> = HashMap::new();
            match node {
                Some(n) if !n.properties.is_empty() || resource_root => {
                    for (k, child_node) in &n.properties {
                        if resource_root && k == "metadata" {
                            continue;
                        }
                        let (Some(val), Some(name)) = (map.get(k), escape(k)) else {
                            continue;
                        };
                        out.insert(
                            Key::from(name),
                            to_cel(
                                Some(child_node),
                                val,
                                child_node.embedded_resource,
                                depth + 1,
                            ),
                        );
                    }
                    if resource_root {
                        for k in ["apiVersion", "kind"] {
                            if let Some(val) = map.get(k) {
                                out.insert(Key::from(k), to_cel(None, val, false, depth + 1));
                            }
                        }
                        if let Some(Value::Object(meta)) = map.get("metadata") {
                            let mut m: HashMap<Key<'a>, Box<dyn Val + 'a>> = HashMap::new();
                            for k in ["name", "generateName"] {
                                if let Some(Value::String(s)) = meta.get(k) {
                                    m.insert(Key::from(k), Box::new(CelString::from(s.as_str())));
                                }
                            }
                            out.insert(Key::from("metadata"), cel_map(m));
                        }
                    }
                }
                Some(n) if n.additional_schema().is_some() => {
                    let ap = n.additional_schema();
                    let embedded = ap.is_some_and(|a| a.embedded_resource);
                    for (k, val) in map {
                        out.insert(Key::from(k.as_str()), to_cel(ap, val, embedded, depth + 1));
                    }
                }
                _ => {
                    for (k, val) in map {
                        out.insert(Key::from(k.as_str()), to_cel(None, val, false, depth + 1));
                    }
                }
            }
            cel_map(out)
        }
    }
}

/// cel-go's wording for the evaluation errors CRD authors meet most.
fn execution_error_text(e: &ExecutionError) -> String {
    match e {
        ExecutionError::NoSuchKey(k) => format!("no such key: {k}"),
        ExecutionError::NoSuchOverload(_) => "no such overload".to_string(),
        ExecutionError::UndeclaredReference(r) => format!("undeclared reference to '{r}'"),
        ExecutionError::DivisionByZero(_) => "division by zero".to_string(),
        ExecutionError::RemainderByZero(_) => "modulus by zero".to_string(),
        // A library function's own error reads as cel-go's error value does: its message alone
        // (`timestamp overflow`, `type conversion error from …`).
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

/// upstream `ruleErrorString`.
fn rule_error_string(rule: &CompiledRule) -> String {
    if !rule.message.is_empty() {
        rule.message.trim().to_string()
    } else {
        rule.rule.trim().to_string()
    }
}

/// upstream `ruleMessageOrDefault`.
fn rule_message_or_default(rule: &CompiledRule) -> String {
    if rule.message.is_empty() {
        format!("failed rule: {}", rule_error_string(rule))
    } else {
        rule.message.trim().to_string()
    }
}

/// What evaluating rules needs besides the node and values.
pub(crate) struct Eval<'a> {
    pub errors: &'a mut Vec<FieldError>,
    /// On update: errors of non-transition rules on values unchanged from the old object are
    /// dropped (upstream ratcheting).
    pub ratchet: bool,
    /// What is left of the object's runtime cost budget (upstream `RuntimeCELCostBudget`);
    /// negative once it ran out and validation stopped.
    pub budget: i64,
}

/// upstream's error when the object's runtime budget runs out.
const OUT_OF_BUDGET: &str =
    "validation failed due to running out of cost budget, no further validation rules will be run";

/// The outcome of one metered evaluation.
enum Outcome {
    Bool(bool),
    Str(String),
    Other,
    Error(ExecutionError),
    Panicked,
}

/// Evaluates `m` in `ctx` under the per-call limit.
fn run_metered(m: &Instrumented, ctx: &Context<'_, '_>) -> (Outcome, cel_cost::Spent) {
    cel_cost::metered(cel_cost::PER_CALL_LIMIT, || {
        if let Err(e) = cel_cost::charge(m.base_cost) {
            return Outcome::Error(e);
        }
        let run = catch_unwind(AssertUnwindSafe(|| {
            match CelValue::resolve_val(&m.expr, ctx) {
                Ok(v) => {
                    if let Some(b) = v.downcast_ref::<CelBool>() {
                        Outcome::Bool(*b.inner())
                    } else if let Some(s) = v.downcast_ref::<CelString>() {
                        Outcome::Str(s.inner().to_string())
                    } else {
                        Outcome::Other
                    }
                }
                Err(e) => Outcome::Error(e),
            }
        }));
        run.unwrap_or(Outcome::Panicked)
    })
}

/// Takes `spent` from the budget; false (with upstream's error recorded) when the call limit
/// was passed or the budget ran out, after which no further rule runs.
fn spend(
    eval: &mut Eval<'_>,
    spent: cel_cost::Spent,
    here: &str,
    ty: &str,
    over_limit: String,
    out_of_budget: &str,
) -> bool {
    let cost = i64::try_from(spent.cost).unwrap_or(i64::MAX);
    let detail = if spent.exceeded {
        over_limit
    } else if cost > eval.budget {
        out_of_budget.to_string()
    } else {
        eval.budget -= cost;
        return true;
    };
    eval.errors.push(FieldError::new(
        ErrorKind::Invalid,
        here,
        Some(ty.to_string()),
        detail,
    ));
    eval.budget = -1;
    false
}

/// Evaluates every rule in the tree under `node` against `obj` (upstream `Validator.validate`).
pub(crate) fn validate_tree(
    node: &Node,
    obj: &Value,
    old: Option<&Value>,
    path: Option<&str>,
    resource_root: bool,
    eval: &mut Eval<'_>,
    depth: usize,
) {
    if !node.has_cel || obj.is_null() || depth > super::MAX_DEPTH || eval.budget < 0 {
        return;
    }
    let old = old.filter(|o| !o.is_null());
    if !node.rules.is_empty() {
        validate_expressions(node, obj, old, path, resource_root, eval);
    }
    match obj {
        Value::Array(items) => {
            if let Some(item_node) = node.items.as_deref().filter(|n| n.has_cel) {
                for (i, item) in items.iter().enumerate() {
                    if eval.budget < 0 {
                        return;
                    }
                    let old_item = correlated_item(node, item, old);
                    validate_tree(
                        item_node,
                        item,
                        old_item,
                        Some(&index(path, i)),
                        item_node.embedded_resource,
                        eval,
                        depth + 1,
                    );
                }
            }
        }
        Value::Object(map) => {
            // upstream `MapIsCorrelatable`: only the known map types correlate old values.
            let correlatable =
                matches!(node.map_type.as_deref(), None | Some("granular" | "atomic"));
            let old_map = old.and_then(Value::as_object).filter(|_| correlatable);
            if let Some(ap) = node.additional_schema().filter(|n| n.has_cel) {
                for (k, v) in map {
                    if eval.budget < 0 {
                        return;
                    }
                    validate_tree(
                        ap,
                        v,
                        old_map.and_then(|m| m.get(k)),
                        Some(&key(path, k)),
                        ap.embedded_resource,
                        eval,
                        depth + 1,
                    );
                }
            }
            for (k, v) in map {
                if eval.budget < 0 {
                    return;
                }
                let Some(prop) = node.properties.get(k).filter(|n| n.has_cel) else {
                    continue;
                };
                let correlated = if path.is_none() && (k == "apiVersion" || k == "kind") {
                    None
                } else {
                    old_map.and_then(|m| m.get(k))
                };
                validate_tree(
                    prop,
                    v,
                    correlated,
                    Some(&child(path, k)),
                    prop.embedded_resource,
                    eval,
                    depth + 1,
                );
            }
        }
        _ => {}
    }
}

/// upstream `validateExpressions`.
fn validate_expressions(
    node: &Node,
    obj: &Value,
    old: Option<&Value>,
    path: Option<&str>,
    resource_root: bool,
    eval: &mut Eval<'_>,
) {
    let ty = gofmt::quote(&node.ty);
    let here = nil_path(path);
    if eval.budget <= 0 {
        eval.errors.push(FieldError::new(
            ErrorKind::Invalid,
            here,
            Some(ty),
            OUT_OF_BUDGET,
        ));
        eval.budget = -1;
        return;
    }
    let self_val = to_cel(Some(node), obj, resource_root, 0);
    let old_val = old.map(|o| to_cel(Some(node), o, resource_root, 0));
    let unchanged = old.is_some_and(|o| o == obj);
    for rule in &node.rules {
        let program = match &rule.program {
            None => continue,
            Some(Err(detail)) => {
                eval.errors.push(FieldError::new(
                    ErrorKind::Invalid,
                    here.clone(),
                    Some(ty.clone()),
                    format!("rule compile error: {detail}"),
                ));
                continue;
            }
            Some(Ok(_)) => match &rule.metered {
                Some(m) => m,
                None => continue,
            },
        };
        let optional = rule.optional_old_self == Some(true);
        if rule.uses_old_self && old_val.is_none() && !optional {
            continue;
        }
        let env = env();
        let mut ctx = Context::with_env(Arc::clone(env));
        ctx.add_variable_as_val("self", self_val.clone_as_boxed());
        if optional {
            let opt = match &old_val {
                Some(v) => CelOptional::of(v.clone_as_boxed()),
                None => CelOptional::none(),
            };
            ctx.add_variable_as_val("oldSelf", Box::new(opt));
        } else if let Some(v) = &old_val {
            ctx.add_variable_as_val("oldSelf", v.clone_as_boxed());
        }
        let (result, spent) = run_metered(program, &ctx);
        let over_limit = format!(
            "'{}': no further validation rules will be run due to call cost exceeds limit for rule: {}",
            cel_cost::ACTUAL_COST_LIMIT_EXCEEDED,
            rule_error_string(rule)
        );
        if !spend(eval, spent, &here, &ty, over_limit, OUT_OF_BUDGET) {
            return;
        }
        let failed = match result {
            Outcome::Bool(true) => false,
            Outcome::Bool(false) | Outcome::Str(_) | Outcome::Other => true,
            Outcome::Error(e) => {
                let detail = match &e {
                    ExecutionError::NoSuchOverload(_) => format!(
                        "'{}': call arguments did not match a supported operator, function or macro signature for rule: {}",
                        execution_error_text(&e),
                        rule_error_string(rule)
                    ),
                    _ => format!(
                        "{} evaluating rule: {}",
                        execution_error_text(&e),
                        rule_error_string(rule)
                    ),
                };
                eval.errors.push(FieldError::new(
                    ErrorKind::Invalid,
                    here.clone(),
                    Some(ty.clone()),
                    detail,
                ));
                continue;
            }
            Outcome::Panicked => {
                eval.errors.push(FieldError::new(
                    ErrorKind::Invalid,
                    here.clone(),
                    Some(ty.clone()),
                    format!(
                        "internal error evaluating rule: {}",
                        rule_error_string(rule)
                    ),
                ));
                continue;
            }
        };
        if !failed {
            continue;
        }
        if eval.ratchet && !rule.uses_old_self && unchanged {
            continue;
        }
        let err_path = match &rule.normalized_field_path {
            Some(fp) => child(path, fp),
            None => here.clone(),
        };
        let message = match (&rule.message_program, &rule.message_metered) {
            (Some(Ok(_)), Some(mp)) => {
                // The message expression sees `oldSelf` as a plain value, like upstream's
                // non-optional activation.
                let mut mctx = Context::with_env(Arc::clone(env));
                mctx.add_variable_as_val("self", self_val.clone_as_boxed());
                if let Some(v) = &old_val {
                    mctx.add_variable_as_val("oldSelf", v.clone_as_boxed());
                }
                let (outcome, spent) = run_metered(mp, &mctx);
                let over_limit = format!(
                    "no further validation rules will be run due to call cost exceeds limit for messageExpression: {}",
                    gofmt::quote(&rule.message_expression)
                );
                if !spend(
                    eval,
                    spent,
                    &here,
                    &ty,
                    over_limit,
                    "messageExpression evaluation failed due to running out of cost budget, no further validation rules will be run",
                ) {
                    return;
                }
                match outcome {
                    Outcome::Str(s) => {
                        let t = s.trim();
                        if t.is_empty()
                            || t.len() > MAX_MESSAGE_EXPRESSION_BYTES
                            || t.contains('\n')
                        {
                            rule_message_or_default(rule)
                        } else {
                            t.to_string()
                        }
                    }
                    _ => rule_message_or_default(rule),
                }
            }
            _ => rule_message_or_default(rule),
        };
        eval.errors.push(match rule.reason.as_deref() {
            Some("FieldValueForbidden") => {
                FieldError::new(ErrorKind::Forbidden, err_path, None, message)
            }
            Some("FieldValueRequired") => {
                FieldError::new(ErrorKind::Required, err_path, None, message)
            }
            Some("FieldValueDuplicate") => {
                FieldError::new(ErrorKind::Duplicate, err_path, Some(ty.clone()), "")
            }
            _ => FieldError::new(ErrorKind::Invalid, err_path, Some(ty.clone()), message),
        });
    }
}

/// The CRD validator's checks of `x-kubernetes-validations` (upstream
/// `ValidateCustomResourceDefinitionOpenAPISchema`): rule and message shape, reason, fieldPath,
/// compilation of rule and messageExpression, `oldSelf` where old values cannot be correlated,
/// and `optionalOldSelf` without `oldSelf`.
pub(crate) fn rule_errors(schema: &Value, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut total = CostTotal::default();
    walk_rules(schema, path, None, &mut errs, 0, &mut total, Some(1));
    if total.total > cel_cost::STATIC_ESTIMATED_CRD_COST_LIMIT {
        for (p, _) in &total.most_expensive {
            errs.push(FieldError::forbidden(
                p.clone(),
                "contributed to estimated rule cost total exceeding cost limit for entire OpenAPIv3 schema",
            ));
        }
        errs.push(FieldError::forbidden(
            path.to_string(),
            cel_cost::cost_error_message(
                "x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema",
                total.total,
                cel_cost::STATIC_ESTIMATED_CRD_COST_LIMIT,
            ),
        ));
    }
    errs
}

/// upstream `TotalCost`: the estimated cost of all rules of a schema, and the (at most four)
/// dearest rules costing at least 1% of the limit.
#[derive(Default)]
struct CostTotal {
    total: u64,
    most_expensive: Vec<(String, u64)>,
}

impl CostTotal {
    fn observe(&mut self, path: String, cost: u64) {
        self.total = self.total.saturating_add(cost);
        if cost < cel_cost::STATIC_ESTIMATED_CRD_COST_LIMIT / 100 {
            return;
        }
        self.most_expensive.push((path, cost));
        self.most_expensive.sort_by_key(|e| std::cmp::Reverse(e.1));
        self.most_expensive.truncate(4);
    }
}

fn walk_rules(
    schema: &Value,
    path: &Path,
    uncorrelatable: Option<&str>,
    errs: &mut Vec<FieldError>,
    depth: usize,
    total: &mut CostTotal,
    cardinality: Option<u64>,
) {
    let Some(obj) = schema.as_object() else {
        return;
    };
    if depth > super::MAX_DEPTH {
        return;
    }
    let (raw, shape_errs) = read_rules(obj, path);
    errs.extend(shape_errs);
    if !raw.is_empty() {
        let cost = RuleCost {
            total,
            cardinality,
            shape: cel_cost::shape_of(schema, depth == 0, 0),
            schema,
        };
        check_rules(obj, &raw, path, uncorrelatable, errs, depth, cost);
    }
    let map_type_ok = matches!(
        obj.get("x-kubernetes-map-type").and_then(Value::as_str),
        None | Some("granular") | Some("atomic")
    );
    // upstream `CELSchemaContext.childContext`: how many times a child's rules can run.
    let child_cardinality =
        cardinality.and_then(|c| cel_cost::max_elements(schema).map(|m| c.saturating_mul(m)));
    let below_map = if map_type_ok {
        uncorrelatable.map(str::to_string)
    } else {
        Some(path.to_string())
    };
    if let Some(Value::Object(props)) = obj.get("properties") {
        for (k, s) in props {
            walk_rules(
                s,
                &path.child("properties").key(k),
                below_map.as_deref(),
                errs,
                depth + 1,
                total,
                child_cardinality,
            );
        }
    }
    if let Some(s @ Value::Object(_)) = obj.get("additionalProperties") {
        walk_rules(
            s,
            &path.child("additionalProperties"),
            below_map.as_deref(),
            errs,
            depth + 1,
            total,
            child_cardinality,
        );
    }
    if let Some(s @ Value::Object(_)) = obj.get("items") {
        let is_map_list = obj.get("x-kubernetes-list-type").and_then(Value::as_str) == Some("map");
        let under = if is_map_list {
            uncorrelatable.map(str::to_string)
        } else {
            Some(path.to_string())
        };
        walk_rules(
            s,
            &path.child("items"),
            under.as_deref(),
            errs,
            depth + 1,
            total,
            child_cardinality,
        );
    }
}

/// What the static cost check of one node's rules needs.
struct RuleCost<'a> {
    total: &'a mut CostTotal,
    /// How many times the node's rules can run; `None` under an unbounded list or map.
    cardinality: Option<u64>,
    shape: Shape,
    schema: &'a Value,
}

fn check_rules(
    obj: &Map<String, Value>,
    raw: &[RawRule],
    path: &Path,
    uncorrelatable: Option<&str>,
    errs: &mut Vec<FieldError>,
    depth: usize,
    cost: RuleCost<'_>,
) {
    let base = path.child("x-kubernetes-validations");
    let before = errs.len();
    for (i, r) in raw.iter().enumerate() {
        let p = base.index(i);
        let trimmed_rule = r.rule.trim();
        let trimmed_msg = r.message.trim();
        if trimmed_rule.is_empty() {
            errs.push(FieldError::required(
                p.child("rule"),
                "rule is not specified",
            ));
        } else if !r.message.is_empty() && trimmed_msg.is_empty() {
            errs.push(invalid_str(
                p.child("message"),
                &r.message,
                "message must be non-empty if specified",
            ));
        } else if trimmed_msg.contains(['\n', '\r']) {
            errs.push(invalid_str(
                p.child("message"),
                &r.message,
                "message must not contain line breaks",
            ));
        } else if trimmed_rule.contains(['\n', '\r']) && trimmed_msg.is_empty() {
            errs.push(FieldError::required(
                p.child("message"),
                "message must be specified if rule contains line breaks",
            ));
        }
        if !r.message_expression.is_empty() && r.message_expression.trim().is_empty() {
            errs.push(FieldError::required(
                p.child("messageExpression"),
                "messageExpression must be non-empty if specified",
            ));
        }
        if let Some(reason) = &r.reason {
            const REASONS: [&str; 4] = [
                "FieldValueDuplicate",
                "FieldValueForbidden",
                "FieldValueInvalid",
                "FieldValueRequired",
            ];
            if !REASONS.contains(&reason.as_str()) {
                let list: Vec<String> = REASONS.iter().map(|s| gofmt::quote(s)).collect();
                errs.push(FieldError::new(
                    ErrorKind::NotSupported,
                    p.child("reason"),
                    Some(gofmt::quote(reason)),
                    format!("supported values: {}", list.join(", ")),
                ));
            }
        }
        if !r.field_path.is_empty() && r.field_path.trim().is_empty() {
            errs.push(invalid_str(
                p.child("fieldPath"),
                &r.field_path,
                "fieldPath must be non-empty if specified",
            ));
        }
        if r.field_path.contains('\n') {
            errs.push(invalid_str(
                p.child("fieldPath"),
                &r.field_path,
                "fieldPath must not contain line breaks",
            ));
        }
        if !r.field_path.is_empty() {
            let valid = match super::compile::compile_node(&Value::Object(obj.clone()), path, depth)
            {
                Ok(node) => valid_field_path(&r.field_path, &node).is_ok(),
                Err(_) => true,
            };
            if !valid {
                errs.push(invalid_str(
                    p.child("fieldPath"),
                    &r.field_path,
                    "fieldPath must be a valid path",
                ));
            }
        }
    }
    // Upstream skips compiling when the rules are malformed.
    if errs.len() > before {
        return;
    }
    for (i, r) in raw.iter().enumerate() {
        let p = base.index(i);
        let compiled = compile_rule(r.clone());
        // upstream `getExpressionCost`: the rule's cost times how often it can run.
        if let Some(Ok(program)) = &compiled.program {
            let raw_cost = cel_cost::estimate(program.expression(), &cost.shape);
            let times = cost
                .cardinality
                .unwrap_or_else(|| cel_cost::unbounded_cardinality(cost.schema));
            let expression_cost = if raw_cost == 0 {
                0
            } else {
                raw_cost.saturating_mul(times)
            };
            let rule_path = p.child("rule").to_string();
            if expression_cost > cel_cost::STATIC_ESTIMATED_COST_LIMIT {
                errs.push(FieldError::forbidden(
                    rule_path.clone(),
                    cel_cost::cost_error_message(
                        "estimated rule cost",
                        expression_cost,
                        cel_cost::STATIC_ESTIMATED_COST_LIMIT,
                    ),
                ));
            }
            cost.total.observe(rule_path, expression_cost);
        }
        if let Some(Ok(mp)) = &compiled.message_program {
            let message_cost = cel_cost::estimate(mp.expression(), &cost.shape);
            let message_path = p.child("messageExpression").to_string();
            if message_cost > cel_cost::STATIC_ESTIMATED_COST_LIMIT {
                errs.push(FieldError::forbidden(
                    message_path.clone(),
                    cel_cost::cost_error_message(
                        "estimated messageExpression cost",
                        message_cost,
                        cel_cost::STATIC_ESTIMATED_COST_LIMIT,
                    ),
                ));
            }
            cost.total.observe(message_path, message_cost);
        }
        if let Some(Err(detail)) = &compiled.program {
            errs.push(FieldError::new(
                ErrorKind::Invalid,
                p.child("rule"),
                Some(r.sharp_v()),
                detail.clone(),
            ));
        }
        if let Some(Err(detail)) = &compiled.message_program {
            errs.push(FieldError::new(
                ErrorKind::Invalid,
                p.child("messageExpression"),
                Some(r.sharp_v()),
                detail.clone(),
            ));
        }
        if compiled.uses_old_self {
            if let Some(u) = uncorrelatable {
                errs.push(invalid_str(
                    p.child("rule"),
                    &r.rule,
                    &format!("oldSelf cannot be used on the uncorrelatable portion of the schema within {u}"),
                ));
            }
        } else if let Some(b) = r.optional_old_self
            && matches!(compiled.program, Some(Ok(_)))
        {
            errs.push(FieldError::new(
                ErrorKind::Invalid,
                p.child("optionalOldSelf"),
                Some(b.to_string()),
                "may not be set if oldSelf is not used in rule",
            ));
        }
    }
}

fn invalid_str(path: Path, value: &str, detail: &str) -> FieldError {
    FieldError::new(ErrorKind::Invalid, path, Some(gofmt::quote(value)), detail)
}
