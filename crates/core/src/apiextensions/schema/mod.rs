//! The custom-resource schema engine: a CRD version's `openAPIV3Schema` compiled once into a
//! [`Structural`] that prunes, defaults and validates custom resources the way kube-apiserver's
//! apiextensions-apiserver does, with its messages and field paths.
//!
//! The API server compiles each served version's schema with [`compile`] and caches the result
//! (it is `Send + Sync`; regexes and CEL programs are compiled inside it, so validating never
//! re-reads the schema). For a write it then calls, in upstream's order:
//!
//! 1. [`Structural::prune`]: drops unknown fields (returning their paths for the
//!    `unknown field "spec.foo"` warnings, or the strict field validation error) and `null`s the
//!    schema does not allow;
//! 2. [`Structural::default`]: applies defaults;
//! 3. [`Structural::validate`] (create) or [`Structural::validate_update`] (update): OpenAPI
//!    value validation, embedded resources, list-type uniqueness and `x-kubernetes-validations`.
//!
//! `metadata` at the root is the server's to validate (ObjectMeta rules); the schema only
//! restricts it if it says so (`name`/`generateName`). The CRD validator uses
//! [`structural_errors`] and [`cel_rule_errors`] on each version's schema.
//!
//! Upstream: `k8s.io/apiextensions-apiserver/pkg/apiserver/schema` (structural schemas, pruning,
//! defaulting, list types, embedded object meta, CEL), `pkg/apiserver/validation` and
//! `k8s.io/kube-openapi/pkg/validation` (value validation), v1.33.
//!
//! Nothing here panics on any input. Inputs nested deeper than [`MAX_DEPTH`] levels are
//! refused (schemas) or reported (objects) instead of recursed into.

pub(crate) mod cel;
pub(crate) mod cel_cost;
mod cel_library;
mod compile;
mod defaulting;
mod formats;
mod gofmt;
mod listtype;
mod objectmeta;
mod pruning;
mod structural;
mod validate;

#[cfg(test)]
mod cel_time_tests;
#[cfg(test)]
mod tests;

use serde_json::Value;

use crate::field::{ErrorKind, FieldError, Path};
pub(crate) use compile::{AdditionalProperties, Node};

/// How deeply schemas and objects may nest.
pub const MAX_DEPTH: usize = 100;

/// The detail upstream gives when it skips CEL rules because of earlier errors.
const RULES_NOT_CHECKED: &str = "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation";

/// A compiled CRD version schema (upstream's `structuralschema.Structural` together with the
/// kube-openapi validator and CEL validator built from it).
#[derive(Debug)]
pub struct Structural {
    root: Node,
    /// The deepest CEL expression, to pick a stack deep enough to evaluate it.
    max_rule_depth: usize,
}

/// Compiles `schema` (an `openAPIV3Schema`). Fails only where upstream's `NewStructural`
/// would (unsupported keywords such as `$ref`, `items` as an array, mistyped keywords) or the
/// schema nests deeper than [`MAX_DEPTH`]; whether the schema is structural is
/// [`structural_errors`]' question. Error paths are relative to the schema
/// (`properties[spec].$ref`).
pub fn compile(schema: &Value) -> Result<Structural, Vec<FieldError>> {
    // Parsing CEL recurses deeply for long expressions: compile on a thread with room for it.
    let compiled = on_big_stack(|| compile::compile_node(schema, &Path::new(""), 0));
    let root = match compiled {
        Some(r) => r?,
        None => {
            return Err(vec![FieldError::new(
                ErrorKind::Invalid,
                "",
                None,
                "schema could not be compiled",
            )]);
        }
    };
    let max_rule_depth = max_rule_depth(&root, 0);
    Ok(Structural {
        root,
        max_rule_depth,
    })
}

/// The structural-schema rules of a CRD version's `openAPIV3Schema` at `path` (for example
/// `spec.versions[0].schema.openAPIV3Schema`), as upstream's CRD validation reports them:
/// `spec.versions[0].schema.openAPIV3Schema.properties[spec].type: Required value: must not be
/// empty for specified object fields`.
pub fn structural_errors(schema: &Value, path: &str) -> Vec<FieldError> {
    structural::structural_errors(schema, &Path::new(path))
}

/// The CRD validator's checks of the `x-kubernetes-validations` rules in the schema at `path`:
/// required rule, message shape, reason, fieldPath, whether rules and messageExpressions
/// compile, `oldSelf` where old values cannot be correlated, `optionalOldSelf` without
/// `oldSelf`.
pub fn cel_rule_errors(schema: &Value, path: &str) -> Vec<FieldError> {
    on_big_stack(|| cel::rule_errors(schema, &Path::new(path))).unwrap_or_else(|| {
        vec![FieldError::new(
            ErrorKind::Invalid,
            path,
            None,
            "x-kubernetes-validations could not be checked",
        )]
    })
}

/// Compiles each CEL expression in the environment of CRD validation rules (the standard
/// library, the strings and lists extensions and Kubernetes' libraries), on one thread with a
/// stack deep enough for long expressions. Each result is `Err` with the compiler's message
/// (`ERROR: <input>:1:4: Syntax error: …`) when the expression does not compile. The `cel`
/// crate has no type checker: only syntax and nesting depth are checked, not the names an
/// expression refers to.
pub(crate) fn check_cel_expressions(sources: &[&str]) -> Vec<Result<(), String>> {
    on_big_stack(|| sources.iter().map(|s| cel::check_expression(s)).collect()).unwrap_or_else(
        || vec![Err("the expression could not be compiled".to_string()); sources.len()],
    )
}

impl Structural {
    /// The compiled root schema (for server-side apply's list and map types).
    pub(crate) fn root(&self) -> &Node {
        &self.root
    }

    /// Applies the schema's defaults to `obj` (upstream `structuraldefaulting.Default`).
    pub fn default(&self, obj: &mut Value) {
        defaulting::default(obj, &self.root, 0);
    }

    /// Drops the fields the schema does not specify, keeping `apiVersion`, `kind` and
    /// `metadata` at the root and in embedded resources, and everything below
    /// `x-kubernetes-preserve-unknown-fields`; then drops `null`s the schema neither allows
    /// nor defaults. Returns the sorted paths of the unknown fields dropped (`spec.foo`,
    /// `spec.items[0].bar`), for upstream's `unknown field "spec.foo"` warnings or strict
    /// field validation errors.
    pub fn prune(&self, obj: &mut Value) -> Vec<String> {
        pruning::prune(&self.root, obj)
    }

    /// Validates a new object (after pruning and defaulting) as kube-apiserver's custom
    /// resource strategy does, ObjectMeta aside.
    pub fn validate(&self, obj: &Value) -> Vec<FieldError> {
        self.validate_inner(obj, None)
    }

    /// Validates an update: the same checks as [`Structural::validate`], with upstream's
    /// ratcheting (errors in parts unchanged from `old` are dropped, list-type errors only
    /// count if `old` had none) and CEL transition rules (`oldSelf`).
    pub fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        self.validate_inner(new, Some(old))
    }

    fn validate_inner(&self, obj: &Value, old: Option<&Value>) -> Vec<FieldError> {
        if nesting_depth(obj) > MAX_DEPTH || old.is_some_and(|o| nesting_depth(o) > MAX_DEPTH) {
            return vec![FieldError::new(
                ErrorKind::Invalid,
                "<nil>",
                None,
                format!("must not be nested more than {MAX_DEPTH} levels deep"),
            )];
        }
        let classified = validate::validate(&self.root, obj, old);
        let mut blocking = classified.iter().any(|c| c.type_invalid);
        let mut errs: Vec<FieldError> = classified.into_iter().map(|c| c.error).collect();
        errs.extend(objectmeta::validate(&self.root, obj));
        let list_errs = match old {
            Some(o) if !listtype::validate(&self.root, o).is_empty() => Vec::new(),
            _ => listtype::validate(&self.root, obj),
        };
        errs.extend(list_errs);
        if !self.root.has_cel {
            return errs;
        }
        blocking |= errs.iter().any(|e| {
            matches!(
                e.kind,
                ErrorKind::NotSupported
                    | ErrorKind::Required
                    | ErrorKind::TooLong
                    | ErrorKind::TooMany
            )
        });
        if blocking {
            errs.push(FieldError::new(
                ErrorKind::Invalid,
                "<nil>",
                Some("\"null\"".to_string()),
                RULES_NOT_CHECKED,
            ));
            return errs;
        }
        let run = || {
            let mut cel_errs = Vec::new();
            let mut eval = cel::Eval {
                errors: &mut cel_errs,
                ratchet: old.is_some(),
                budget: cel_cost::RUNTIME_CEL_COST_BUDGET,
            };
            cel::validate_tree(&self.root, obj, old, None, true, &mut eval, 0);
            cel_errs
        };
        let cel_errs = if self.max_rule_depth <= cel::INLINE_EXPRESSION_DEPTH {
            run()
        } else {
            on_big_stack(run).unwrap_or_else(|| {
                vec![FieldError::new(
                    ErrorKind::Invalid,
                    "<nil>",
                    None,
                    "validation rules could not be evaluated",
                )]
            })
        };
        errs.extend(cel_errs);
        errs
    }
}

/// Runs `f` on a thread with a 64 MiB stack (scoped, so it may borrow); `None` if the thread
/// could not be started or `f` panicked.
fn on_big_stack<T: Send>(f: impl FnOnce() -> T + Send) -> Option<T> {
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("crd-schema".to_string())
            .stack_size(64 << 20)
            .spawn_scoped(scope, f)
            .ok()?
            .join()
            .ok()
    })
}

fn max_rule_depth(node: &Node, depth: usize) -> usize {
    if !node.has_cel || depth > MAX_DEPTH {
        return 0;
    }
    let mut max = node.rules.iter().map(|r| r.depth).max().unwrap_or(0);
    for p in node.properties.values() {
        max = max.max(max_rule_depth(p, depth + 1));
    }
    if let Some(i) = &node.items {
        max = max.max(max_rule_depth(i, depth + 1));
    }
    if let Some(a) = node.additional_schema() {
        max = max.max(max_rule_depth(a, depth + 1));
    }
    max
}

/// How deeply `v` nests, counted without recursion.
fn nesting_depth(v: &Value) -> usize {
    let mut max = 0;
    let mut stack = vec![(v, 1usize)];
    while let Some((v, d)) = stack.pop() {
        max = max.max(d);
        if d > MAX_DEPTH + 1 {
            break;
        }
        match v {
            Value::Array(a) => stack.extend(a.iter().map(|x| (x, d + 1))),
            Value::Object(m) => stack.extend(m.values().map(|x| (x, d + 1))),
            _ => {}
        }
    }
    max
}
