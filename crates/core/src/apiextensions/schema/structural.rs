//! The rules a CRD's `openAPIV3Schema` must follow to be structural, with upstream's messages.
//!
//! Two upstream passes, in upstream's order:
//! - `ValidateCustomResourceDefinitionOpenAPISchema` (`pkg/apis/apiextensions/validation`):
//!   unsupported keywords (`$ref`, `definitions`, `id`, …), `items` arrays, `additionalProperties`
//!   beside `properties`, `uniqueItems`, defaults in top-level metadata, list and map type
//!   extensions, `nullable` at the root. Its `x-kubernetes-validations` checks are in
//!   [`super::cel_rule_errors`].
//! - `ValidateStructural` (`pkg/apiserver/schema/validation.go`, `complete.go`): every node has a
//!   type (unless int-or-string or preserve-unknown-fields), value validations (`allOf`, `anyOf`,
//!   `oneOf`, `not`) only restrict values and only name fields the schema specifies, metadata at
//!   the root only restricts `name` and `generateName`, embedded resources are objects. Its errors
//!   are sorted by message, as upstream sorts them.

use serde_json::{Map, Value};

use super::compile::{go_regex, unsupported_fields};
use super::gofmt;
use crate::field::{ErrorKind, FieldError, Path};

const META_FIELDS: [&str; 3] = ["metadata", "kind", "apiVersion"];

/// Both passes over the schema at `path`.
pub(crate) fn structural_errors(schema: &Value, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Some(obj) = schema.as_object()
        && obj.get("nullable") == Some(&Value::Bool(true))
    {
        errs.push(FieldError::forbidden(
            path.child("nullable"),
            "nullable cannot be true at the root",
        ));
    }
    let ctx = SpecCtx {
        allow_defaults: true,
        forbidden_defaults_reason: String::new(),
        inside_resource_meta: false,
    };
    spec_standard(schema, path, &ctx, true, &mut errs, 0);
    if structural_convertible(schema, 0) {
        let mut s_errs = Vec::new();
        invariants(schema, Level::Root, path, &mut s_errs, 0);
        if let Some(obj) = schema.as_object() {
            completeness_value_validation(obj, Some(obj), path, path, &mut s_errs, 0);
        }
        s_errs.sort_by_key(|e| e.to_string());
        errs.extend(s_errs);
    } else if errs.is_empty() {
        errs.push(FieldError::new(
            ErrorKind::Invalid,
            path.clone(),
            Some("\"\"".to_string()),
            "OpenAPIV3Schema is not structural",
        ));
    }
    errs
}

/// What `specStandardValidatorV3` carries down the tree.
#[derive(Clone)]
struct SpecCtx {
    allow_defaults: bool,
    forbidden_defaults_reason: String,
    inside_resource_meta: bool,
}

impl SpecCtx {
    fn with_forbidden_defaults(&self, reason: &str) -> SpecCtx {
        SpecCtx {
            allow_defaults: false,
            forbidden_defaults_reason: reason.to_string(),
            ..self.clone()
        }
    }
    fn with_inside_resource_meta(&self) -> SpecCtx {
        SpecCtx {
            inside_resource_meta: true,
            ..self.clone()
        }
    }
}

fn str_of<'a>(obj: &'a Map<String, Value>, k: &str) -> &'a str {
    obj.get(k).and_then(Value::as_str).unwrap_or("")
}

fn is_true(obj: &Map<String, Value>, k: &str) -> bool {
    obj.get(k) == Some(&Value::Bool(true))
}

fn present(obj: &Map<String, Value>, k: &str) -> bool {
    obj.get(k).is_some_and(|v| !v.is_null())
}

fn invalid_q(path: Path, value: &str, detail: &str) -> FieldError {
    FieldError::new(ErrorKind::Invalid, path, Some(gofmt::quote(value)), detail)
}

fn too_deep(path: &Path) -> FieldError {
    FieldError::forbidden(
        path.clone(),
        format!(
            "must not be nested more than {} levels deep",
            super::MAX_DEPTH
        ),
    )
}

/// upstream `ValidateCustomResourceDefinitionOpenAPISchema` without the CEL part.
fn spec_standard(
    schema: &Value,
    path: &Path,
    ctx: &SpecCtx,
    is_root: bool,
    errs: &mut Vec<FieldError>,
    depth: usize,
) {
    let Some(obj) = schema.as_object() else {
        return;
    };
    if depth > super::MAX_DEPTH {
        errs.push(too_deep(path));
        return;
    }
    let ty = str_of(obj, "type");
    // specStandardValidatorV3.validate
    const TYPES: [&str; 6] = ["array", "boolean", "integer", "number", "object", "string"];
    if !ty.is_empty() && !TYPES.contains(&ty) && ty != "null" {
        let list: Vec<String> = TYPES.iter().map(|t| gofmt::quote(t)).collect();
        errs.push(FieldError::new(
            ErrorKind::NotSupported,
            path.child("type"),
            Some(gofmt::quote(ty)),
            format!("supported values: {}", list.join(", ")),
        ));
    }
    if present(obj, "default") && !ctx.allow_defaults {
        let mut detail = "must not be set".to_string();
        if !ctx.forbidden_defaults_reason.is_empty() {
            detail.push(' ');
            detail.push_str(&ctx.forbidden_defaults_reason);
        }
        errs.push(FieldError::forbidden(path.child("default"), detail));
    }
    unsupported_fields(obj, path, errs);
    if ty == "null" {
        errs.push(FieldError::forbidden(
            path.child("type"),
            "type cannot be set to null, use nullable as an alternative",
        ));
    }
    if matches!(obj.get("items"), Some(Value::Array(a)) if !a.is_empty()) {
        errs.push(FieldError::forbidden(
            path.child("items"),
            "items must be a schema object and not an array",
        ));
    }
    if ctx.inside_resource_meta && is_true(obj, "x-kubernetes-embedded-resource") {
        errs.push(FieldError::forbidden(
            path.child("x-kubernetes-embedded-resource"),
            "must not be used inside of resource meta",
        ));
    }
    if is_true(obj, "uniqueItems") {
        errs.push(FieldError::forbidden(
            path.child("uniqueItems"),
            "uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
        ));
    }
    let props = obj.get("properties").and_then(Value::as_object);
    let has_props = props.is_some_and(|p| !p.is_empty());
    if let Some(ap) = obj.get("additionalProperties").filter(|v| !v.is_null()) {
        if has_props && (ap == &Value::Bool(false) || ap.is_object()) {
            errs.push(FieldError::forbidden(
                path.child("additionalProperties"),
                "additionalProperties and properties are mutual exclusive",
            ));
        }
        let sub = if ctx.inside_resource_meta {
            ctx.with_forbidden_defaults("inside additionalProperties applying to object metadata")
        } else {
            ctx.clone()
        };
        spec_standard(
            ap,
            &path.child("additionalProperties"),
            &sub,
            false,
            errs,
            depth + 1,
        );
    }
    if let Some(props) = props {
        let embedded = is_true(obj, "x-kubernetes-embedded-resource");
        for (k, s) in props {
            let mut sub = ctx.clone();
            if (is_root || embedded) && META_FIELDS.contains(&k.as_str()) {
                sub = sub.with_inside_resource_meta();
                if is_root {
                    sub = sub.with_forbidden_defaults(&format!("in top-level {k}"));
                }
            }
            spec_standard(
                s,
                &path.child("properties").key(k),
                &sub,
                false,
                errs,
                depth + 1,
            );
        }
    }
    if let Some(not) = obj.get("not") {
        spec_standard(not, &path.child("not"), ctx, false, errs, depth + 1);
    }
    for kw in ["allOf", "oneOf", "anyOf"] {
        if let Some(Value::Array(list)) = obj.get(kw) {
            for (i, s) in list.iter().enumerate() {
                spec_standard(s, &path.child(kw).index(i), ctx, false, errs, depth + 1);
            }
        }
    }
    if let Some(Value::Object(defs)) = obj.get("definitions") {
        for (k, s) in defs {
            spec_standard(
                s,
                &path.child("definitions").key(k),
                ctx,
                false,
                errs,
                depth + 1,
            );
        }
    }
    match obj.get("items") {
        Some(s @ Value::Object(_)) => {
            spec_standard(s, &path.child("items"), ctx, false, errs, depth + 1)
        }
        Some(Value::Array(list)) => {
            for (i, s) in list.iter().enumerate() {
                spec_standard(
                    s,
                    &path.child("items").index(i),
                    ctx,
                    false,
                    errs,
                    depth + 1,
                );
            }
        }
        _ => {}
    }
    if let Some(Value::Object(deps)) = obj.get("dependencies") {
        for (k, s) in deps {
            if s.is_object() {
                spec_standard(
                    s,
                    &path.child("dependencies").key(k),
                    ctx,
                    false,
                    errs,
                    depth + 1,
                );
            }
        }
    }
    if obj.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(false)) {
        errs.push(FieldError::new(
            ErrorKind::Invalid,
            path.child("x-kubernetes-preserve-unknown-fields"),
            Some("false".to_string()),
            "must be true or undefined",
        ));
    }
    list_and_map_types(obj, ty, path, errs);
}

/// The `x-kubernetes-map-type`, `x-kubernetes-list-type` and `x-kubernetes-list-map-keys`
/// rules, including `requireAtomicSetType` and `requireMapListKeysMapSetValidation`.
fn list_and_map_types(obj: &Map<String, Value>, ty: &str, path: &Path, errs: &mut Vec<FieldError>) {
    let map_type = obj.get("x-kubernetes-map-type").and_then(Value::as_str);
    if let Some(mt) = map_type {
        if ty != "object" {
            if ty.is_empty() {
                errs.push(FieldError::required(
                    path.child("type"),
                    "must be object if x-kubernetes-map-type is specified",
                ));
            } else {
                errs.push(invalid_q(
                    path.child("type"),
                    ty,
                    "must be object if x-kubernetes-map-type is specified",
                ));
            }
        }
        if mt != "atomic" && mt != "granular" {
            errs.push(FieldError::new(
                ErrorKind::NotSupported,
                path.child("x-kubernetes-map-type"),
                Some(gofmt::quote(mt)),
                "supported values: \"atomic\", \"granular\"",
            ));
        }
    }
    let list_type = obj.get("x-kubernetes-list-type").and_then(Value::as_str);
    let items = obj.get("items").and_then(Value::as_object);
    if let Some(lt) = list_type {
        if ty != "array" {
            if ty.is_empty() {
                errs.push(FieldError::required(
                    path.child("type"),
                    "must be array if x-kubernetes-list-type is specified",
                ));
            } else {
                errs.push(invalid_q(
                    path.child("type"),
                    ty,
                    "must be array if x-kubernetes-list-type is specified",
                ));
            }
        } else if lt == "set"
            && let Some(is) = items
        {
            match str_of(is, "type") {
                "array" => {
                    if let Some(ilt) = is.get("x-kubernetes-list-type").and_then(Value::as_str)
                        && ilt != "atomic"
                    {
                        errs.push(invalid_q(
                            path.child("items").child("x-kubernetes-list-type"),
                            ilt,
                            "must be atomic as item of a list with x-kubernetes-list-type=set",
                        ));
                    }
                }
                "object" => {
                    let imt = is.get("x-kubernetes-map-type").and_then(Value::as_str);
                    if imt != Some("atomic") {
                        // Upstream passes the list type as the bad value here.
                        errs.push(FieldError::new(
                            ErrorKind::Invalid,
                            path.child("items").child("x-kubernetes-map-type"),
                            Some("null".to_string()),
                            "must be atomic as item of a list with x-kubernetes-list-type=set",
                        ));
                    }
                }
                _ => {}
            }
        }
        if !matches!(lt, "atomic" | "set" | "map") {
            errs.push(FieldError::new(
                ErrorKind::NotSupported,
                path.child("x-kubernetes-list-type"),
                Some(gofmt::quote(lt)),
                "supported values: \"atomic\", \"set\", \"map\"",
            ));
        }
    }
    let keys: Vec<&str> = obj
        .get("x-kubernetes-list-map-keys")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let keys_value = || {
        let quoted: Vec<String> = keys.iter().map(|k| gofmt::quote(k)).collect();
        format!("[]string{{{}}}", quoted.join(", "))
    };
    if !keys.is_empty() {
        match list_type {
            None => errs.push(FieldError::required(
                path.child("x-kubernetes-list-type"),
                "must be map if x-kubernetes-list-map-keys is non-empty",
            )),
            Some(lt) if lt != "map" => errs.push(invalid_q(
                path.child("x-kubernetes-list-type"),
                lt,
                "must be map if x-kubernetes-list-map-keys is non-empty",
            )),
            _ => {}
        }
    }
    if list_type == Some("map") {
        if keys.is_empty() {
            errs.push(FieldError::required(
                path.child("x-kubernetes-list-map-keys"),
                "must not be empty if x-kubernetes-list-type is map",
            ));
        }
        match obj.get("items") {
            None | Some(Value::Null) => errs.push(FieldError::required(
                path.child("items"),
                "must have a schema if x-kubernetes-list-type is map",
            )),
            Some(Value::Array(_)) => errs.push(FieldError::new(
                ErrorKind::Invalid,
                path.child("items"),
                None,
                "must only have a single schema if x-kubernetes-list-type is map",
            )),
            _ => {}
        }
        if let Some(is) = items {
            let ity = str_of(is, "type");
            if ity != "object" {
                errs.push(invalid_q(
                    path.child("items").child("type"),
                    ity,
                    "must be object if parent array's x-kubernetes-list-type is map",
                ));
            } else {
                let iprops = is.get("properties").and_then(Value::as_object);
                let mut seen: Vec<&str> = Vec::new();
                for k in &keys {
                    match iprops.and_then(|p| p.get(*k)).and_then(Value::as_object) {
                        Some(p) => {
                            let pt = str_of(p, "type");
                            if pt == "array" || pt == "object" {
                                // Upstream prints the items' type here, not the key's.
                                errs.push(invalid_q(
                                    path.child("items").child("properties").key(k).child("type"),
                                    ity,
                                    "must be a scalar type if parent array's x-kubernetes-list-type is map",
                                ));
                            }
                        }
                        None => errs.push(FieldError::new(
                            ErrorKind::Invalid,
                            path.child("x-kubernetes-list-map-keys"),
                            Some(keys_value()),
                            "entries must all be names of item properties",
                        )),
                    }
                    if seen.contains(k) {
                        errs.push(FieldError::new(
                            ErrorKind::Invalid,
                            path.child("x-kubernetes-list-map-keys"),
                            Some(keys_value()),
                            "must not contain duplicate entries",
                        ));
                    }
                    seen.push(k);
                }
            }
        }
    }
    // requireMapListKeysMapSetValidation
    if let (Some(lt @ ("set" | "map")), Some(is)) = (list_type, items) {
        if is_true(is, "nullable") {
            errs.push(FieldError::forbidden(
                path.child("items").child("nullable"),
                format!("cannot be nullable when x-kubernetes-list-type is {lt}"),
            ));
        }
        if lt == "map" {
            let required: Vec<&str> = is
                .get("required")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let iprops = is.get("properties").and_then(Value::as_object);
            for k in &keys {
                let Some(p) = iprops.and_then(|p| p.get(*k)).and_then(Value::as_object) else {
                    continue;
                };
                if !required.contains(k) && !present(p, "default") {
                    errs.push(FieldError::required(
                        path.child("items").child("properties").key(k).child("default"),
                        "this property is in x-kubernetes-list-map-keys, so it must have a default or be a required property",
                    ));
                }
                if is_true(p, "nullable") {
                    errs.push(FieldError::forbidden(
                        path.child("items")
                            .child("properties")
                            .key(k)
                            .child("nullable"),
                        "this property is in x-kubernetes-list-map-keys, so it cannot be nullable",
                    ));
                }
            }
        }
    }
}

/// Whether upstream's `NewStructural` accepts the schema (no unsupported keyword, no `items`
/// array, no `x-kubernetes-preserve-unknown-fields: false`), so `ValidateStructural` runs.
fn structural_convertible(schema: &Value, depth: usize) -> bool {
    let Some(obj) = schema.as_object() else {
        return true;
    };
    if depth > super::MAX_DEPTH {
        return false;
    }
    let mut errs = Vec::new();
    unsupported_fields(obj, &Path::new(""), &mut errs);
    if !errs.is_empty()
        || matches!(obj.get("items"), Some(Value::Array(_)))
        || obj.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(false))
    {
        return false;
    }
    let mut subs: Vec<&Value> = Vec::new();
    if let Some(Value::Object(p)) = obj.get("properties") {
        subs.extend(p.values());
    }
    for kw in ["items", "additionalProperties", "not"] {
        if let Some(v) = obj.get(kw) {
            subs.push(v);
        }
    }
    for kw in ["allOf", "anyOf", "oneOf"] {
        if let Some(Value::Array(a)) = obj.get(kw) {
            subs.extend(a.iter());
        }
    }
    subs.into_iter()
        .all(|s| structural_convertible(s, depth + 1))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    Root,
    Item,
    Field,
}

fn is_int_or_string_any_of(list: Option<&Value>) -> bool {
    let Some(Value::Array(a)) = list else {
        return false;
    };
    let only_type = |v: &Value, t: &str| {
        v.as_object()
            .is_some_and(|o| o.len() == 1 && o.get("type").and_then(Value::as_str) == Some(t))
    };
    a.len() == 2 && only_type(&a[0], "integer") && only_type(&a[1], "string")
}

/// upstream `validateStructuralInvariants`.
fn invariants(schema: &Value, lvl: Level, path: &Path, errs: &mut Vec<FieldError>, depth: usize) {
    let Some(obj) = schema.as_object() else {
        return;
    };
    if depth > super::MAX_DEPTH {
        errs.push(too_deep(path));
        return;
    }
    let ty = str_of(obj, "type");
    let items = obj.get("items").filter(|v| v.is_object());
    if ty == "array" && items.is_none() {
        errs.push(FieldError::required(
            path.child("items"),
            "must be specified",
        ));
    }
    if let Some(i) = items {
        invariants(i, Level::Item, &path.child("items"), errs, depth + 1);
    }
    let props = obj.get("properties").and_then(Value::as_object);
    if let Some(p) = props {
        for (k, s) in p {
            invariants(
                s,
                Level::Field,
                &path.child("properties").key(k),
                errs,
                depth + 1,
            );
        }
    }
    let ap = obj.get("additionalProperties").filter(|v| !v.is_null());
    if let Some(ap) = ap {
        if lvl == Level::Root {
            errs.push(FieldError::forbidden(
                path.child("additionalProperties"),
                "must not be used at the root",
            ));
        }
        if ap.is_object() {
            invariants(
                ap,
                Level::Field,
                &path.child("additionalProperties"),
                errs,
                depth + 1,
            );
        }
    }
    let int_or_string = is_true(obj, "x-kubernetes-int-or-string");
    let preserve = is_true(obj, "x-kubernetes-preserve-unknown-fields");
    let embedded = is_true(obj, "x-kubernetes-embedded-resource");
    if int_or_string && preserve {
        errs.push(FieldError::new(
            ErrorKind::Invalid,
            path.child("x-kubernetes-preserve-unknown-fields"),
            Some("true".to_string()),
            "must be false if x-kubernetes-int-or-string is true",
        ));
    }
    if int_or_string && embedded {
        errs.push(FieldError::new(
            ErrorKind::Invalid,
            path.child("x-kubernetes-embedded-resource"),
            Some("true".to_string()),
            "must be false if x-kubernetes-int-or-string is true",
        ));
    }
    let skip_any_of = is_int_or_string_any_of(obj.get("anyOf"));
    let skip_first_all_of_any_of = obj
        .get("allOf")
        .and_then(Value::as_array)
        .and_then(|a| a.first())
        .and_then(Value::as_object)
        .is_some_and(|o| is_int_or_string_any_of(o.get("anyOf")));
    value_validation(
        obj,
        skip_any_of,
        skip_first_all_of_any_of,
        lvl,
        path,
        errs,
        depth,
    );

    let check_metadata = lvl == Level::Root || embedded;
    if embedded && ty != "object" {
        if ty.is_empty() {
            errs.push(FieldError::required(
                path.child("type"),
                "must be object if x-kubernetes-embedded-resource is true",
            ));
        } else {
            errs.push(invalid_q(
                path.child("type"),
                ty,
                "must be object if x-kubernetes-embedded-resource is true",
            ));
        }
    } else if ty.is_empty() && !int_or_string && !preserve {
        let detail = match lvl {
            Level::Root => "must not be empty at the root",
            Level::Item => "must not be empty for specified array items",
            Level::Field => "must not be empty for specified object fields",
        };
        errs.push(FieldError::required(path.child("type"), detail));
    }
    if embedded && ap.is_some() {
        errs.push(FieldError::forbidden(
            path.child("additionalProperties"),
            "must not be used if x-kubernetes-embedded-resource is set",
        ));
    }
    if lvl == Level::Root && !ty.is_empty() && ty != "object" {
        errs.push(invalid_q(
            path.child("type"),
            ty,
            "must be object at the root",
        ));
    }
    if let Some(p) = props {
        if check_metadata {
            for k in ["kind", "apiVersion"] {
                if let Some(s) = p.get(k).and_then(Value::as_object) {
                    let t = str_of(s, "type");
                    if t != "string" {
                        errs.push(invalid_q(
                            path.child("properties").key(k).child("type"),
                            t,
                            "must be string",
                        ));
                    }
                }
            }
        }
        if let Some(meta) = p.get("metadata").and_then(Value::as_object) {
            metadata_invariants(
                meta,
                check_metadata,
                lvl,
                &path.child("properties").key("metadata"),
                errs,
            );
        }
    }
    if embedded && !preserve && props.is_none_or(Map::is_empty) {
        errs.push(FieldError::required(
            path.child("properties"),
            "must not be empty if x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields",
        ));
    }
}

/// upstream `validateStructuralMetadataInvariants`.
fn metadata_invariants(
    meta: &Map<String, Value>,
    check_metadata: bool,
    lvl: Level,
    path: &Path,
    errs: &mut Vec<FieldError>,
) {
    let ty = str_of(meta, "type");
    if check_metadata && ty != "object" {
        errs.push(invalid_q(path.child("type"), ty, "must be object"));
    }
    if lvl != Level::Root {
        return;
    }
    // Only `type`, `default` (checked elsewhere) and properties restricting name and
    // generateName may be there.
    let mut extra = false;
    for (k, v) in meta {
        match k.as_str() {
            "type" | "default" => {}
            "properties" => {
                let only_names = v.as_object().is_some_and(|p| {
                    !p.is_empty() && p.keys().all(|k| k == "name" || k == "generateName")
                });
                if !only_names && !v.as_object().is_some_and(Map::is_empty) {
                    extra = true;
                }
            }
            _ if v.is_null() => {}
            "nullable"
            | "x-kubernetes-int-or-string"
            | "x-kubernetes-embedded-resource"
            | "x-kubernetes-preserve-unknown-fields"
            | "exclusiveMaximum"
            | "exclusiveMinimum"
            | "uniqueItems"
                if v == &Value::Bool(false) => {}
            "description" | "title" | "format" | "pattern" if v.as_str() == Some("") => {}
            "externalDocs" | "example" => {}
            _ => extra = true,
        }
    }
    if extra {
        errs.push(FieldError::forbidden(
            path.clone(),
            "must not specify anything other than name and generateName, but metadata is implicitly specified",
        ));
    }
}

/// upstream `validateValueValidation` for a node's allOf/anyOf/oneOf/not and pattern.
fn value_validation(
    obj: &Map<String, Value>,
    skip_any_of: bool,
    skip_first_all_of_any_of: bool,
    lvl: Level,
    path: &Path,
    errs: &mut Vec<FieldError>,
    depth: usize,
) {
    if depth > super::MAX_DEPTH {
        errs.push(too_deep(path));
        return;
    }
    if !skip_any_of && let Some(Value::Array(a)) = obj.get("anyOf") {
        for (i, s) in a.iter().enumerate() {
            nested_value_validation(
                s,
                false,
                lvl,
                &path.child("anyOf").index(i),
                errs,
                depth + 1,
            );
        }
    }
    if let Some(Value::Array(a)) = obj.get("allOf") {
        for (i, s) in a.iter().enumerate() {
            let skip = skip_first_all_of_any_of && i == 0;
            nested_value_validation(s, skip, lvl, &path.child("allOf").index(i), errs, depth + 1);
        }
    }
    if let Some(Value::Array(a)) = obj.get("oneOf") {
        for (i, s) in a.iter().enumerate() {
            nested_value_validation(
                s,
                false,
                lvl,
                &path.child("oneOf").index(i),
                errs,
                depth + 1,
            );
        }
    }
    if let Some(not) = obj.get("not").filter(|v| v.is_object()) {
        nested_value_validation(not, false, lvl, &path.child("not"), errs, depth + 1);
    }
    if let Some(p) = obj
        .get("pattern")
        .and_then(Value::as_str)
        .filter(|p| !p.is_empty())
        && let Err(e) = go_regex(p)
    {
        errs.push(invalid_q(
            path.child("pattern"),
            p,
            &format!("must be a valid regular expression, but isn't: {e}"),
        ));
    }
}

/// upstream `validateNestedValueValidation`.
fn nested_value_validation(
    schema: &Value,
    skip_any_of: bool,
    lvl: Level,
    path: &Path,
    errs: &mut Vec<FieldError>,
    depth: usize,
) {
    let Some(obj) = schema.as_object() else {
        return;
    };
    value_validation(obj, skip_any_of, false, lvl, path, errs, depth);
    if let Some(items) = obj.get("items").filter(|v| v.is_object()) {
        nested_value_validation(items, false, lvl, &path.child("items"), errs, depth + 1);
    }
    if let Some(Value::Object(p)) = obj.get("properties") {
        for (k, s) in p {
            nested_value_validation(
                s,
                false,
                Level::Field,
                &path.child("properties").key(k),
                errs,
                depth + 1,
            );
        }
    }
    let nonempty_str = |k: &str| {
        obj.get(k)
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty())
    };
    if nonempty_str("type") {
        errs.push(FieldError::forbidden(
            path.child("type"),
            "must be empty to be structural",
        ));
    }
    if present(obj, "additionalProperties") {
        errs.push(FieldError::forbidden(
            path.child("additionalProperties"),
            "must be undefined to be structural",
        ));
    }
    if present(obj, "default") {
        errs.push(FieldError::forbidden(
            path.child("default"),
            "must be undefined to be structural",
        ));
    }
    if nonempty_str("title") {
        errs.push(FieldError::forbidden(
            path.child("title"),
            "must be empty to be structural",
        ));
    }
    if nonempty_str("description") {
        errs.push(FieldError::forbidden(
            path.child("description"),
            "must be empty to be structural",
        ));
    }
    if is_true(obj, "nullable") {
        errs.push(FieldError::forbidden(
            path.child("nullable"),
            "must be false to be structural",
        ));
    }
    for (k, detail) in [
        (
            "x-kubernetes-preserve-unknown-fields",
            "must be false to be structural",
        ),
        (
            "x-kubernetes-embedded-resource",
            "must be false to be structural",
        ),
        (
            "x-kubernetes-int-or-string",
            "must be false to be structural",
        ),
    ] {
        if is_true(obj, k) {
            errs.push(FieldError::forbidden(path.child(k), detail));
        }
    }
    if obj
        .get("x-kubernetes-list-map-keys")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty())
    {
        errs.push(FieldError::forbidden(
            path.child("x-kubernetes-list-map-keys"),
            "must be empty to be structural",
        ));
    }
    for k in ["x-kubernetes-list-type", "x-kubernetes-map-type"] {
        if present(obj, k) {
            errs.push(FieldError::forbidden(
                path.child(k),
                "must be undefined to be structural",
            ));
        }
    }
    if obj
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty())
    {
        errs.push(FieldError::forbidden(
            path.child("x-kubernetes-validations"),
            "must be empty to be structural",
        ));
    }
    if obj
        .get("properties")
        .and_then(Value::as_object)
        .is_some_and(|p| p.contains_key("metadata"))
    {
        errs.push(FieldError::forbidden(
            path.child("properties").key("metadata"),
            "must not be specified in a nested context",
        ));
    }
}

/// upstream `validateValueValidationCompleteness`: `v`'s junctors only name what `s` specifies.
fn completeness_value_validation(
    v: &Map<String, Value>,
    s: Option<&Map<String, Value>>,
    s_path: &Path,
    v_path: &Path,
    errs: &mut Vec<FieldError>,
    depth: usize,
) {
    if depth > super::MAX_DEPTH {
        return;
    }
    if let Some(not) = v.get("not").and_then(Value::as_object) {
        completeness_nested(not, s, s_path, &v_path.child("not"), errs, depth + 1);
    }
    for kw in ["allOf", "anyOf", "oneOf"] {
        if let Some(Value::Array(a)) = v.get(kw) {
            for (i, n) in a.iter().enumerate() {
                if let Some(n) = n.as_object() {
                    completeness_nested(n, s, s_path, &v_path.child(kw).index(i), errs, depth + 1);
                }
            }
        }
    }
}

fn completeness_nested(
    v: &Map<String, Value>,
    s: Option<&Map<String, Value>>,
    s_path: &Path,
    v_path: &Path,
    errs: &mut Vec<FieldError>,
    depth: usize,
) {
    let Some(s) = s else {
        errs.push(FieldError::required(
            s_path.clone(),
            format!("because it is defined in {v_path}"),
        ));
        return;
    };
    completeness_value_validation(v, Some(s), s_path, v_path, errs, depth);
    if let Some(items) = v.get("items").and_then(Value::as_object) {
        completeness_nested(
            items,
            s.get("items").and_then(Value::as_object),
            &s_path.child("items"),
            &v_path.child("items"),
            errs,
            depth + 1,
        );
    }
    if let Some(Value::Object(props)) = v.get("properties") {
        let s_props = s.get("properties").and_then(Value::as_object);
        for (k, vf) in props {
            let Some(vf) = vf.as_object() else { continue };
            match s_props.and_then(|p| p.get(k)) {
                None => errs.push(FieldError::required(
                    s_path.child("properties").key(k),
                    format!(
                        "because it is defined in {}",
                        v_path.child("properties").key(k)
                    ),
                )),
                Some(sf) => completeness_nested(
                    vf,
                    sf.as_object(),
                    &s_path.child("properties").key(k),
                    &v_path.child("properties").key(k),
                    errs,
                    depth + 1,
                ),
            }
        }
    }
}
