//! Checks of embedded resources (`x-kubernetes-embedded-resource: true`), as upstream
//! `pkg/apiserver/schema/objectmeta/validation.go` (`Validate` with `isResourceRoot` false)
//! does: `apiVersion` and `kind` are required strings of the right shape, and `metadata` is
//! valid ObjectMeta (names as path segments, a placeholder name when none is given).

use serde_json::{Map, Value, json};

use super::MAX_DEPTH;
use super::cel::{child, key};
use super::compile::Node;
use super::gofmt;
use crate::field::{ErrorKind, FieldError};
use crate::validation::meta::{NameRule, validate_object_meta};
use crate::validation::names::dns1035_label;

/// Checks every embedded resource under `obj` (a resource) described by `root`.
pub(crate) fn validate(root: &Node, obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    walk(None, obj, root, &mut errs, 0);
    errs
}

fn walk(path: Option<&str>, x: &Value, s: &Node, errs: &mut Vec<FieldError>, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    match x {
        Value::Object(map) => {
            if s.embedded_resource {
                embedded_resource(path, map, errs);
            }
            for (k, v) in map {
                if let Some(prop) = s.properties.get(k) {
                    walk(Some(&child(path, k)), v, prop, errs, depth + 1);
                } else if let Some(ap) = s.additional_schema() {
                    walk(Some(&key(path, k)), v, ap, errs, depth + 1);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = s.items.as_deref() {
                for (i, v) in items.iter().enumerate() {
                    walk(
                        Some(&format!("{}[{i}]", path.unwrap_or(""))),
                        v,
                        item_schema,
                        errs,
                        depth + 1,
                    );
                }
            }
        }
        _ => {}
    }
}

/// upstream `validateEmbeddedResource`.
fn embedded_resource(path: Option<&str>, x: &Map<String, Value>, errs: &mut Vec<FieldError>) {
    let api_version_path = child(path, "apiVersion");
    let kind_path = child(path, "kind");
    if !x.contains_key("apiVersion") {
        errs.push(FieldError::required(
            api_version_path.clone(),
            "must not be empty",
        ));
    }
    if !x.contains_key("kind") {
        errs.push(FieldError::required(kind_path.clone(), "must not be empty"));
    }
    let invalid = |p: &str, v: &Value, detail: &str| {
        FieldError::new(ErrorKind::Invalid, p, Some(gofmt::error_value(v)), detail)
    };
    for (k, v) in x {
        match k.as_str() {
            "apiVersion" => match v.as_str() {
                None => errs.push(invalid(&api_version_path, v, "must be a string")),
                Some("") => errs.push(invalid(&api_version_path, v, "must not be empty")),
                Some(s) => {
                    if s != "/" && s.split('/').count() > 2 {
                        errs.push(invalid(
                            &api_version_path,
                            v,
                            &format!("unexpected GroupVersion string: {s}"),
                        ));
                    }
                }
            },
            "kind" => match v.as_str() {
                None => errs.push(invalid(&kind_path, v, "must be a string")),
                Some("") => errs.push(invalid(&kind_path, v, "must not be empty")),
                Some(s) => {
                    let msgs = dns1035_label(&s.to_lowercase());
                    if !msgs.is_empty() {
                        errs.push(invalid(
                            &kind_path,
                            v,
                            &format!(
                                "may have mixed case, but should otherwise match: {}",
                                msgs.join(",")
                            ),
                        ));
                    }
                }
            },
            "metadata" => {
                let Some(meta) = v.as_object() else {
                    errs.push(invalid(
                        &child(path, "metadata"),
                        v,
                        "json: cannot unmarshal into Go value of type v1.ObjectMeta",
                    ));
                    continue;
                };
                let mut meta = meta.clone();
                if meta
                    .get("name")
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
                {
                    meta.insert("name".to_string(), json!("fakename"));
                }
                let namespaced = meta
                    .get("namespace")
                    .and_then(Value::as_str)
                    .is_some_and(|n| !n.is_empty());
                let wrapped = json!({ "metadata": Value::Object(meta) });
                for mut e in validate_object_meta(&wrapped, namespaced, NameRule::PathSegment) {
                    e.field = match path {
                        None => e.field,
                        Some(p) => format!("{p}.{}", e.field),
                    };
                    errs.push(e);
                }
            }
            _ => {}
        }
    }
}
