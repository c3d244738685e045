//! Compiling an `openAPIV3Schema` into the tree [`super::Structural`] walks.
//!
//! Mirrors upstream `NewStructural` (`pkg/apiserver/schema/convert.go`) together with
//! `ConvertJSONSchemaPropsWithPostProcess` (`pkg/apiserver/validation`): the JSON is read once,
//! keywords are typed, patterns compiled with Go's RE2 semantics, formats kube-apiserver does not
//! check are dropped (`StripUnsupportedFormatsPostProcess`) and CEL rules compiled. What
//! upstream's `NewStructural` refuses (`$ref`, `items` as an array, …) fails compilation.

use std::collections::BTreeMap;

use regex::Regex;
use serde_json::{Map, Value};

use super::MAX_DEPTH;
use super::cel::{self, CompiledRule};
use super::formats::Format;
use crate::field::{FieldError, Path};

/// `additionalProperties`: a boolean or a schema.
#[derive(Debug)]
pub(crate) enum AdditionalProperties {
    Bool(bool),
    Schema(Box<Node>),
}

/// A `pattern` and its compiled form (or why it does not compile).
#[derive(Debug)]
pub(crate) struct Pattern {
    pub source: String,
    pub regex: Result<Regex, String>,
}

/// One schema node: everything upstream's `Structural` (generic, extensions, value validation)
/// and kube-openapi's `spec.Schema` hold, typed. Nested value validations (`allOf`, `anyOf`,
/// `oneOf`, `not`) are nodes too.
#[derive(Debug, Default)]
pub(crate) struct Node {
    /// `type`, empty when unset.
    pub ty: String,
    pub int_or_string: bool,
    pub nullable: bool,
    /// The format kube-apiserver checks, after upstream drops the ones it does not
    /// (`int32`, `int64`, `double`, …).
    pub format: Option<Format>,
    /// The `format` as the schema spells it, for messages.
    pub format_name: String,
    pub default: Option<Value>,
    pub enum_values: Option<Vec<Value>>,
    pub maximum: Option<f64>,
    pub exclusive_maximum: bool,
    pub minimum: Option<f64>,
    pub exclusive_minimum: bool,
    pub multiple_of: Option<f64>,
    pub max_length: Option<i64>,
    pub min_length: Option<i64>,
    pub pattern: Option<Pattern>,
    pub max_items: Option<i64>,
    pub min_items: Option<i64>,
    pub unique_items: bool,
    pub max_properties: Option<i64>,
    pub min_properties: Option<i64>,
    pub required: Vec<String>,
    pub all_of: Vec<Node>,
    pub any_of: Vec<Node>,
    pub one_of: Vec<Node>,
    pub not: Option<Box<Node>>,
    pub properties: BTreeMap<String, Node>,
    pub additional_properties: Option<AdditionalProperties>,
    pub items: Option<Box<Node>>,
    pub preserve_unknown_fields: bool,
    pub embedded_resource: bool,
    pub list_type: Option<String>,
    pub list_map_keys: Vec<String>,
    pub map_type: Option<String>,
    pub rules: Vec<CompiledRule>,
    /// Whether this node or one below it (through properties, items, additionalProperties)
    /// has CEL rules.
    pub has_cel: bool,
}

impl Node {
    /// The schema that applies to property `key` of an object this node describes, as
    /// upstream's pruning and defaulting pick it: the property, else `additionalProperties`.
    pub fn child(&self, key: &str) -> Option<&Node> {
        if let Some(p) = self.properties.get(key) {
            return Some(p);
        }
        match &self.additional_properties {
            Some(AdditionalProperties::Schema(s)) => Some(s),
            _ => None,
        }
    }

    /// The additionalProperties schema, if it is one.
    pub fn additional_schema(&self) -> Option<&Node> {
        match &self.additional_properties {
            Some(AdditionalProperties::Schema(s)) => Some(s),
            _ => None,
        }
    }

    /// The types a value may have, as kube-openapi sees them: `x-kubernetes-int-or-string`
    /// becomes `[integer, string]`.
    pub fn types(&self) -> Vec<&str> {
        if self.int_or_string {
            vec!["integer", "string"]
        } else if self.ty.is_empty() {
            Vec::new()
        } else {
            vec![self.ty.as_str()]
        }
    }
}

/// Compiles the schema at `path` (relative to the schema root, for error paths).
pub(crate) fn compile_node(
    schema: &Value,
    path: &Path,
    depth: usize,
) -> Result<Node, Vec<FieldError>> {
    if depth > MAX_DEPTH {
        return Err(vec![FieldError::forbidden(
            path.clone(),
            format!("must not be nested more than {MAX_DEPTH} levels deep"),
        )]);
    }
    let obj = match schema {
        Value::Object(o) => o,
        other => {
            return Err(vec![FieldError::invalid(
                path.clone(),
                other,
                "must be a JSON schema object",
            )]);
        }
    };
    let mut errs = Vec::new();
    unsupported_fields(obj, path, &mut errs);

    let mut node = Node {
        ty: string_kw(obj, "type", path, &mut errs).unwrap_or_default(),
        int_or_string: bool_kw(obj, "x-kubernetes-int-or-string", path, &mut errs),
        nullable: bool_kw(obj, "nullable", path, &mut errs),
        default: obj.get("default").cloned(),
        exclusive_maximum: bool_kw(obj, "exclusiveMaximum", path, &mut errs),
        exclusive_minimum: bool_kw(obj, "exclusiveMinimum", path, &mut errs),
        unique_items: bool_kw(obj, "uniqueItems", path, &mut errs),
        embedded_resource: bool_kw(obj, "x-kubernetes-embedded-resource", path, &mut errs),
        maximum: number_kw(obj, "maximum", path, &mut errs),
        minimum: number_kw(obj, "minimum", path, &mut errs),
        multiple_of: number_kw(obj, "multipleOf", path, &mut errs),
        max_length: int_kw(obj, "maxLength", path, &mut errs),
        min_length: int_kw(obj, "minLength", path, &mut errs),
        max_items: int_kw(obj, "maxItems", path, &mut errs),
        min_items: int_kw(obj, "minItems", path, &mut errs),
        max_properties: int_kw(obj, "maxProperties", path, &mut errs),
        min_properties: int_kw(obj, "minProperties", path, &mut errs),
        list_type: string_kw(obj, "x-kubernetes-list-type", path, &mut errs),
        map_type: string_kw(obj, "x-kubernetes-map-type", path, &mut errs),
        ..Node::default()
    };
    if let Some(f) = string_kw(obj, "format", path, &mut errs) {
        node.format = Format::supported(&f);
        if node.format.is_some() {
            node.format_name = f;
        }
    }
    match obj.get("x-kubernetes-preserve-unknown-fields") {
        None | Some(Value::Null) => {}
        Some(Value::Bool(true)) => node.preserve_unknown_fields = true,
        // Upstream: "internal error: 'x-kubernetes-preserve-unknown-fields' must be true or
        // undefined".
        Some(other) => errs.push(FieldError::invalid(
            path.child("x-kubernetes-preserve-unknown-fields"),
            other,
            "must be true or undefined",
        )),
    }
    if let Some(v) = obj.get("enum") {
        match v {
            Value::Array(a) => node.enum_values = Some(a.clone()),
            Value::Null => {}
            other => errs.push(FieldError::invalid(
                path.child("enum"),
                other,
                "must be an array",
            )),
        }
    }
    if let Some(p) = string_kw(obj, "pattern", path, &mut errs)
        && !p.is_empty()
    {
        node.pattern = Some(Pattern {
            regex: go_regex(&p),
            source: p,
        });
    }
    node.required = string_list_kw(obj, "required", path, &mut errs);
    node.list_map_keys = string_list_kw(obj, "x-kubernetes-list-map-keys", path, &mut errs);

    for (kw, target) in [("allOf", 0), ("anyOf", 1), ("oneOf", 2)] {
        let Some(v) = obj.get(kw) else { continue };
        let list = match v {
            Value::Array(a) => a,
            Value::Null => continue,
            other => {
                errs.push(FieldError::invalid(
                    path.child(kw),
                    other,
                    "must be an array",
                ));
                continue;
            }
        };
        let mut nodes = Vec::with_capacity(list.len());
        for (i, s) in list.iter().enumerate() {
            match compile_node(s, &path.child(kw).index(i), depth + 1) {
                Ok(n) => nodes.push(n),
                Err(e) => errs.extend(e),
            }
        }
        match target {
            0 => node.all_of = nodes,
            1 => node.any_of = nodes,
            _ => node.one_of = nodes,
        }
    }
    if let Some(v) = obj.get("not").filter(|v| !v.is_null()) {
        match compile_node(v, &path.child("not"), depth + 1) {
            Ok(n) => node.not = Some(Box::new(n)),
            Err(e) => errs.extend(e),
        }
    }
    match obj.get("properties") {
        None | Some(Value::Null) => {}
        Some(Value::Object(props)) => {
            for (k, s) in props {
                match compile_node(s, &path.child("properties").key(k), depth + 1) {
                    Ok(n) => {
                        node.properties.insert(k.clone(), n);
                    }
                    Err(e) => errs.extend(e),
                }
            }
        }
        Some(other) => errs.push(FieldError::invalid(
            path.child("properties"),
            other,
            "must be an object",
        )),
    }
    match obj.get("additionalProperties") {
        None | Some(Value::Null) => {}
        Some(Value::Bool(b)) => node.additional_properties = Some(AdditionalProperties::Bool(*b)),
        Some(s @ Value::Object(_)) => {
            match compile_node(s, &path.child("additionalProperties"), depth + 1) {
                Ok(n) => {
                    node.additional_properties = Some(AdditionalProperties::Schema(Box::new(n)))
                }
                Err(e) => errs.extend(e),
            }
        }
        Some(other) => errs.push(FieldError::invalid(
            path.child("additionalProperties"),
            other,
            "must be a boolean or a schema",
        )),
    }
    match obj.get("items") {
        None | Some(Value::Null) => {}
        Some(s @ Value::Object(_)) => match compile_node(s, &path.child("items"), depth + 1) {
            Ok(n) => node.items = Some(Box::new(n)),
            Err(e) => errs.extend(e),
        },
        Some(Value::Array(_)) => errs.push(FieldError::forbidden(
            path.child("items"),
            "items must be a schema object and not an array",
        )),
        Some(other) => errs.push(FieldError::invalid(
            path.child("items"),
            other,
            "must be a schema",
        )),
    }
    match cel::compile_rules(obj, path) {
        Ok(rules) => node.rules = rules,
        Err(e) => errs.extend(e),
    }
    if !errs.is_empty() {
        return Err(errs);
    }
    cel::normalize_field_paths(&mut node);
    node.has_cel = !node.rules.is_empty()
        || node.properties.values().any(|p| p.has_cel)
        || node.items.as_ref().is_some_and(|i| i.has_cel)
        || node.additional_schema().is_some_and(|a| a.has_cel);
    Ok(node)
}

/// What upstream's `validateUnsupportedFields` refuses, with the CRD validator's messages
/// (`specStandardValidatorV3.validate`).
pub(crate) fn unsupported_fields(
    obj: &Map<String, Value>,
    path: &Path,
    errs: &mut Vec<FieldError>,
) {
    let present = |k: &str| obj.get(k).is_some_and(|v| !v.is_null());
    let nonempty = |k: &str| match obj.get(k) {
        None | Some(Value::Null) => false,
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Object(m)) => !m.is_empty(),
        Some(_) => true,
    };
    if nonempty("id") {
        errs.push(FieldError::forbidden(
            path.child("id"),
            "id is not supported",
        ));
    }
    if nonempty("$schema") {
        errs.push(FieldError::forbidden(
            path.child("$schema"),
            "$schema is not supported",
        ));
    }
    if present("additionalItems") {
        errs.push(FieldError::forbidden(
            path.child("additionalItems"),
            "additionalItems is not supported",
        ));
    }
    if nonempty("patternProperties") {
        errs.push(FieldError::forbidden(
            path.child("patternProperties"),
            "patternProperties is not supported",
        ));
    }
    if nonempty("definitions") {
        errs.push(FieldError::forbidden(
            path.child("definitions"),
            "definitions is not supported",
        ));
    }
    if present("dependencies") {
        errs.push(FieldError::forbidden(
            path.child("dependencies"),
            "dependencies is not supported",
        ));
    }
    if present("$ref") {
        errs.push(FieldError::forbidden(
            path.child("$ref"),
            "$ref is not supported",
        ));
    }
}

fn kw_type_error(path: &Path, key: &str, v: &Value, want: &str) -> FieldError {
    FieldError::invalid(path.child(key), v, format!("must be {want}"))
}

fn string_kw(
    obj: &Map<String, Value>,
    key: &str,
    path: &Path,
    errs: &mut Vec<FieldError>,
) -> Option<String> {
    match obj.get(key)? {
        Value::String(s) => Some(s.clone()),
        Value::Null => None,
        other => {
            errs.push(kw_type_error(path, key, other, "a string"));
            None
        }
    }
}

fn bool_kw(obj: &Map<String, Value>, key: &str, path: &Path, errs: &mut Vec<FieldError>) -> bool {
    match obj.get(key) {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            errs.push(kw_type_error(path, key, other, "a boolean"));
            false
        }
    }
}

fn number_kw(
    obj: &Map<String, Value>,
    key: &str,
    path: &Path,
    errs: &mut Vec<FieldError>,
) -> Option<f64> {
    match obj.get(key)? {
        Value::Number(n) => n.as_f64(),
        Value::Null => None,
        other => {
            errs.push(kw_type_error(path, key, other, "a number"));
            None
        }
    }
}

fn int_kw(
    obj: &Map<String, Value>,
    key: &str,
    path: &Path,
    errs: &mut Vec<FieldError>,
) -> Option<i64> {
    match obj.get(key)? {
        Value::Number(n) => match n.as_i64() {
            Some(i) => Some(i),
            None => match n.as_f64() {
                Some(f) if f.fract() == 0.0 && f.abs() < 9.2e18 => Some(f as i64),
                _ => {
                    errs.push(kw_type_error(
                        path,
                        key,
                        &Value::Number(n.clone()),
                        "an integer",
                    ));
                    None
                }
            },
        },
        Value::Null => None,
        other => {
            errs.push(kw_type_error(path, key, other, "an integer"));
            None
        }
    }
}

fn string_list_kw(
    obj: &Map<String, Value>,
    key: &str,
    path: &Path,
    errs: &mut Vec<FieldError>,
) -> Vec<String> {
    match obj.get(key) {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => {
            let mut out = Vec::with_capacity(a.len());
            for (i, v) in a.iter().enumerate() {
                match v {
                    Value::String(s) => out.push(s.clone()),
                    other => errs.push(FieldError::invalid(
                        path.child(key).index(i),
                        other,
                        "must be a string",
                    )),
                }
            }
            out
        }
        Some(other) => {
            errs.push(kw_type_error(path, key, other, "an array of strings"));
            Vec::new()
        }
    }
}

/// Compiles a Go (RE2) regular expression with the `regex` crate. The syntax is the same bar a
/// few details this smooths over: Go's Perl classes `\d`, `\w`, `\s` and the word boundary
/// `\b` are ASCII-only while the crate's are Unicode-aware, and Go limits a counted repetition
/// to 1000.
pub(crate) fn go_regex(pattern: &str) -> Result<Regex, String> {
    let translated = ascii_perl_classes(pattern);
    regex::RegexBuilder::new(&translated)
        .size_limit(4 << 20)
        .dfa_size_limit(4 << 20)
        .nest_limit(250)
        .build()
        .map_err(|e| match e {
            regex::Error::Syntax(s) => {
                // The crate's message spans several lines with a caret diagram; keep the
                // last line, which names the problem.
                s.lines()
                    .rev()
                    .find(|l| l.trim_start().starts_with("error:"))
                    .map(|l| {
                        l.trim_start()
                            .trim_start_matches("error:")
                            .trim()
                            .to_string()
                    })
                    .unwrap_or(s)
            }
            regex::Error::CompiledTooBig(_) => "expression too large".to_string(),
            other => other.to_string(),
        })
}

/// Rewrites `\d`, `\D`, `\w`, `\W`, `\s`, `\S` (inside and outside classes) and `\b`, `\B` to
/// their ASCII meaning in Go.
fn ascii_perl_classes(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len() + 16);
    let mut chars = pattern.chars().peekable();
    let mut in_class = false;
    while let Some(c) = chars.next() {
        if c == '\\' {
            let Some(&n) = chars.peek() else {
                out.push(c);
                break;
            };
            chars.next();
            let (inner, negated) = match n {
                'd' => ("0-9", false),
                'D' => ("0-9", true),
                'w' => ("0-9A-Za-z_", false),
                'W' => ("0-9A-Za-z_", true),
                's' => ("\\t\\n\\f\\r ", false),
                'S' => ("\\t\\n\\f\\r ", true),
                'b' if !in_class => {
                    out.push_str("(?-u:\\b)");
                    continue;
                }
                'B' if !in_class => {
                    out.push_str("(?-u:\\B)");
                    continue;
                }
                other => {
                    out.push('\\');
                    out.push(other);
                    continue;
                }
            };
            if in_class {
                if negated {
                    // A negated class inside a class: Rust's nested class syntax.
                    out.push_str(&format!("[^{inner}]"));
                } else {
                    out.push_str(inner);
                }
            } else if negated {
                out.push_str(&format!("[^{inner}]"));
            } else {
                out.push_str(&format!("[{inner}]"));
            }
            continue;
        }
        if in_class {
            if c == ']' {
                in_class = false;
            } else if c == '[' && chars.peek() == Some(&':') {
                // POSIX class `[:alpha:]`: copy through its closing `:]`.
                out.push(c);
                for p in chars.by_ref() {
                    out.push(p);
                    if p == ']' {
                        break;
                    }
                }
                continue;
            }
            out.push(c);
            continue;
        }
        if c == '[' {
            in_class = true;
            out.push(c);
            // A `]` or `^]` right after the opening bracket is literal.
            if chars.peek() == Some(&'^') {
                chars.next();
                out.push('^');
            }
            if chars.peek() == Some(&']') {
                chars.next();
                out.push_str("\\]");
            }
            continue;
        }
        out.push(c);
    }
    out
}
