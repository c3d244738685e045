//! `x-kubernetes-list-type: set` and `map` uniqueness, as upstream
//! `pkg/apiserver/schema/listtype/validation.go` (`ValidateListSetsAndMaps`) checks it: a
//! repeated set item, or a repeated key tuple in a map list, is a `Duplicate` at the later
//! index (once per value); a map list item that is not an object is `Invalid`.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::MAX_DEPTH;
use super::cel::{child, key};
use super::compile::Node;
use super::gofmt;
use crate::field::{ErrorKind, FieldError};

/// Checks every list under `obj` (a resource) described by `root`.
pub(crate) fn validate(root: &Node, obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Value::Object(map) = obj {
        validate_map(None, root, map, &mut errs, 0);
    }
    errs
}

fn validate_map(
    path: Option<&str>,
    s: &Node,
    obj: &Map<String, Value>,
    errs: &mut Vec<FieldError>,
    depth: usize,
) {
    if depth > MAX_DEPTH {
        return;
    }
    if let Some(ap) = s.additional_schema() {
        for (k, v) in obj {
            validate_value(&key(path, k), ap, v, errs, depth + 1);
        }
    }
    for (k, v) in obj {
        if let Some(sub) = s.properties.get(k) {
            validate_value(&child(path, k), sub, v, errs, depth + 1);
        }
    }
}

fn validate_value(path: &str, s: &Node, v: &Value, errs: &mut Vec<FieldError>, depth: usize) {
    match v {
        Value::Array(items) => validate_array(path, s, items, errs, depth),
        Value::Object(map) => validate_map(Some(path), s, map, errs, depth),
        _ => {}
    }
}

fn validate_array(path: &str, s: &Node, items: &[Value], errs: &mut Vec<FieldError>, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    match s.list_type.as_deref() {
        Some("set") => {
            for i in non_unique(items) {
                errs.push(duplicate(format!("{path}[{i}]"), &items[i]));
            }
        }
        Some("map") => validate_list_map(path, s, items, errs),
        _ => {}
    }
    if let Some(item_schema) = s.items.as_deref() {
        for (i, item) in items.iter().enumerate() {
            validate_value(&format!("{path}[{i}]"), item_schema, item, errs, depth + 1);
        }
    }
}

fn duplicate(path: String, v: &Value) -> FieldError {
    FieldError::new(ErrorKind::Duplicate, path, Some(gofmt::error_value(v)), "")
}

/// The identity upstream uses: scalars by Go value (`1` and `1.0` differ), compounds by their
/// JSON encoding.
fn identity(v: &Value) -> String {
    match v {
        Value::Object(_) | Value::Array(_) => {
            format!(
                "c{}",
                serde_json::to_string(&canonical(v)).unwrap_or_default()
            )
        }
        other => format!("s{other}"),
    }
}

/// `v` with object keys sorted, as Go's `json.Marshal` writes maps.
fn canonical(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let mut out = Map::new();
            for k in keys {
                if let Some(x) = m.get(k) {
                    out.insert(k.clone(), canonical(x));
                }
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(canonical).collect()),
        other => other.clone(),
    }
}

/// upstream `validateListSet`: the indices where a value is seen for the second time.
fn non_unique(items: &[Value]) -> Vec<usize> {
    if items.len() <= 1 {
        return Vec::new();
    }
    let mut seen: HashMap<String, usize> = HashMap::with_capacity(items.len());
    let mut out = Vec::new();
    for (i, x) in items.iter().enumerate() {
        let times = seen.entry(identity(x)).or_insert(0);
        *times += 1;
        if *times == 2 {
            out.push(i);
        }
    }
    out
}

fn validate_list_map(path: &str, s: &Node, items: &[Value], errs: &mut Vec<FieldError>) {
    for (i, x) in items.iter().enumerate() {
        if !x.is_null() && !x.is_object() {
            errs.push(FieldError::new(
                ErrorKind::Invalid,
                format!("{path}[{i}]"),
                Some(gofmt::error_value(x)),
                "must be an object for an array of list-type map",
            ));
            return;
        }
    }
    if items.len() <= 1 {
        return;
    }
    // A key tuple of the fields present; a single key keeps "unspecified" apart from any value.
    let keys: Vec<Value> = items
        .iter()
        .map(|x| {
            let mut key = Map::new();
            if let Some(o) = x.as_object() {
                for k in &s.list_map_keys {
                    if let Some(v) = o.get(k) {
                        key.insert(k.clone(), v.clone());
                    }
                }
            }
            Value::Object(key)
        })
        .collect();
    let idents: Vec<Value> = if s.list_map_keys.len() == 1 {
        keys.iter()
            .map(|k| match k.as_object().and_then(|o| o.values().next()) {
                Some(v) => v.clone(),
                None => Value::String("\u{0}unspecified".to_string()),
            })
            .collect()
    } else {
        keys.clone()
    };
    for i in non_unique(&idents) {
        errs.push(duplicate(format!("{path}[{i}]"), &keys[i]));
    }
}
