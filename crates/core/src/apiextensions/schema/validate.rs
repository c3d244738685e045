//! OpenAPI value validation of a custom resource, as kube-openapi's `SchemaValidator`
//! (`pkg/validation/validate`) does it for kube-apiserver, with its messages, and upstream's
//! `kubeOpenAPIResultToFieldErrors` turning them into field errors.
//!
//! kube-openapi runs eight validators on every value in a fixed order (type, allOf/anyOf/oneOf/
//! not, string, format, number, array, enum, object), collects the errors of all of them,
//! drops repeated messages, and names paths by joining property names with `.` and indices as
//! `[i]`. For `anyOf`/`oneOf` it reports the failures of the branch that matched "best" (the
//! most validators passed); this keeps that count too.
//!
//! On update, upstream ratchets (`CRDValidationRatcheting`, on by default since v1.30): the
//! errors of a subtree that is unchanged from the old object (properties by name, items of
//! `x-kubernetes-list-type: map` lists by key) are dropped.

use serde_json::{Map, Value};

use super::compile::{AdditionalProperties, Node};
use super::gofmt;
use crate::field::{ErrorKind, FieldError};

/// kube-openapi's error codes, as far as the conversion to field errors cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Code {
    /// Not a `*errors.Validation`: the `allOf`/`anyOf`/`oneOf`/`not` summaries.
    Composite,
    InvalidType,
    Required,
    TooLong,
    Enum,
    MaxItems,
    TooManyProperties,
    Other,
}

/// One kube-openapi error.
#[derive(Debug, Clone)]
struct OErr {
    code: Code,
    /// The value path (`spec.groups[0].limit`), possibly with a leading `.`.
    name: String,
    message: String,
    /// `errors.Validation.Value`.
    value: Option<Value>,
    /// `errors.Validation.Valid`: the bound of a length or count error.
    valid: Option<i64>,
    /// The allowed values of an enum error.
    values: Vec<Value>,
}

impl OErr {
    fn new(code: Code, name: &str, message: String, value: Option<Value>) -> Self {
        OErr {
            code,
            name: name.to_string(),
            message,
            value,
            valid: None,
            values: Vec::new(),
        }
    }
    fn composite(message: String) -> Self {
        OErr::new(Code::Composite, "", message, None)
    }
}

/// kube-openapi's `Result`: errors without repeats, and how many validators matched.
#[derive(Debug, Default)]
struct Res {
    errors: Vec<OErr>,
    match_count: usize,
}

impl Res {
    fn err(e: OErr) -> Res {
        Res {
            errors: vec![e],
            match_count: 0,
        }
    }
    fn add(&mut self, e: OErr) {
        if !self.errors.iter().any(|x| x.message == e.message) {
            self.errors.push(e);
        }
    }
    fn merge(&mut self, other: Res) {
        for e in other.errors {
            self.add(e);
        }
        self.match_count += other.match_count;
    }
    fn is_valid(&self) -> bool {
        self.errors.is_empty()
    }
}

/// A field error together with whether upstream would have typed it `FieldValueTypeInvalid`
/// (tandem's [`ErrorKind`] has no such kind; it prints the same).
pub(crate) struct Classified {
    pub error: FieldError,
    pub type_invalid: bool,
}

/// Validates `data` against `root`, ratcheting against `old` when given. Errors carry paths
/// relative to the object root; errors with no path use upstream's `<nil>`.
pub(crate) fn validate(root: &Node, data: &Value, old: Option<&Value>) -> Vec<Classified> {
    let res = validate_node(root, data, old, "", 0, true);
    res.errors.into_iter().map(to_field_error).collect()
}

/// upstream `kubeOpenAPIResultToFieldErrors` with a nil path prefix.
fn to_field_error(e: OErr) -> Classified {
    let path = if e.code == Code::Composite || e.name.is_empty() || e.name == "." {
        "<nil>".to_string()
    } else {
        e.name.strip_prefix('.').unwrap_or(&e.name).to_string()
    };
    let value_or_empty =
        || gofmt::error_value(e.value.as_ref().unwrap_or(&Value::String(String::new())));
    let (error, type_invalid) = match e.code {
        Code::Required => (FieldError::new(ErrorKind::Required, path, None, ""), false),
        Code::Enum => {
            let values: Vec<String> = e
                .values
                .iter()
                .map(|v| match v {
                    Value::String(s) => gofmt::quote(s),
                    other => gofmt::quote(&serde_json::to_string(other).unwrap_or_default()),
                })
                .collect();
            let detail = if values.is_empty() {
                String::new()
            } else {
                format!("supported values: {}", values.join(", "))
            };
            let value = gofmt::error_value(e.value.as_ref().unwrap_or(&Value::Null));
            (
                FieldError::new(ErrorKind::NotSupported, path, Some(value), detail),
                false,
            )
        }
        Code::TooLong => {
            let max = e.valid.unwrap_or(-1);
            let detail = if max >= 0 {
                format!("may not be more than {max} bytes")
            } else {
                "value is too long".to_string()
            };
            (
                FieldError::new(ErrorKind::TooLong, path, None, detail),
                false,
            )
        }
        Code::MaxItems | Code::TooManyProperties => {
            let actual = e.value.as_ref().and_then(Value::as_i64).unwrap_or(-1);
            let max = e.valid.unwrap_or(-1);
            let mut detail = if max >= 0 {
                format!("must have at most {max} items")
            } else {
                "has too many items".to_string()
            };
            // Upstream prints the actual count before the detail (`Too many: 5: must have at
            // most 3 items`); tandem's FieldError does not print a value for TooMany, so the
            // count goes into the detail.
            if actual >= 0 {
                detail = format!("{actual}: {detail}");
            }
            (
                FieldError::new(ErrorKind::TooMany, path, None, detail),
                false,
            )
        }
        Code::InvalidType => (
            FieldError::new(
                ErrorKind::Invalid,
                path,
                Some(value_or_empty()),
                e.message.clone(),
            ),
            true,
        ),
        Code::Other | Code::Composite => (
            FieldError::new(
                ErrorKind::Invalid,
                path,
                Some(value_or_empty()),
                e.message.clone(),
            ),
            false,
        ),
    };
    Classified {
        error,
        type_invalid,
    }
}

/// The kind of an unstructured value as kube-openapi's type validator names it.
fn schema_type_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::String(_) => "string",
        Value::Number(n) => {
            if n.is_i64() {
                "integer"
            } else {
                "number"
            }
        }
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// go-openapi swag `IsFloat64AJSONInteger`.
fn is_float_json_integer(f: f64) -> bool {
    const MAX_JSON_FLOAT: f64 = 9007199254740991.0;
    if !f.is_finite() || !(-MAX_JSON_FLOAT..=MAX_JSON_FLOAT).contains(&f) {
        return false;
    }
    let g = f.trunc();
    if f == g {
        return true;
    }
    let diff = (f - g).abs();
    diff / (f.abs() + g.abs()).min(f64::MAX) < 1e-9
}

/// The value path of property `key` under `path`, as kube-openapi builds it.
fn child_name(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn validate_node(
    node: &Node,
    data: &Value,
    old: Option<&Value>,
    path: &str,
    depth: usize,
    ratchet: bool,
) -> Res {
    let mut result = Res::default();
    if depth > super::MAX_DEPTH {
        result.add(OErr::new(
            Code::Other,
            path,
            format!(
                "{path} in body must not be nested more than {} levels deep",
                super::MAX_DEPTH
            ),
            None,
        ));
        return result;
    }
    if data.is_null() {
        result.merge(type_validator(node, data, path));
        result.merge(enum_validator(node, data, path));
        return ratcheted(result, data, old, ratchet);
    }
    // type
    if !node.types().is_empty() || node.format.is_some() {
        result.merge(type_validator(node, data, path));
        result.match_count += 1;
    }
    // allOf, anyOf, oneOf, not
    result.merge(schema_props_validator(node, data, old, path, depth));
    result.match_count += 1;
    if let Value::String(s) = data {
        result.merge(string_validator(node, s, path));
        result.match_count += 1;
        if let Some(f) = node.format {
            if !f.validates(s) {
                result.add(OErr::new(
                    Code::InvalidType,
                    path,
                    format!(
                        "{path} in body must be of type {}: {}",
                        node.format_name,
                        gofmt::quote(s)
                    ),
                    Some(data.clone()),
                ));
            }
            result.match_count += 1;
        }
    }
    if data.is_number() {
        result.merge(number_validator(node, data, path));
        result.match_count += 1;
    }
    if let Value::Array(items) = data {
        result.merge(slice_validator(node, items, old, path, depth));
        result.match_count += 1;
    }
    result.merge(enum_validator(node, data, path));
    result.match_count += 1;
    if let Value::Object(map) = data {
        result.merge(object_validator(node, map, old, path, depth));
        result.match_count += 1;
    }
    result.match_count += 1;
    ratcheted(result, data, old, ratchet)
}

/// upstream `ratchetingValueValidator.Validate`: errors of a value equal to its correlated old
/// value are dropped.
fn ratcheted(mut result: Res, data: &Value, old: Option<&Value>, ratchet: bool) -> Res {
    if ratchet && !result.is_valid() && old.is_some_and(|o| o == data) {
        result.errors.clear();
    }
    result
}

/// kube-openapi `typeValidator`.
fn type_validator(node: &Node, data: &Value, path: &str) -> Res {
    let types = node.types();
    let ok = Res {
        errors: Vec::new(),
        match_count: 1,
    };
    let type_err = |expected: &str, actual: &str| {
        Res::err(OErr::new(
            Code::InvalidType,
            path,
            format!(
                "{path} in body must be of type {expected}: {}",
                gofmt::quote(actual)
            ),
            Some(Value::String(actual.to_string())),
        ))
    };
    if data.is_null() {
        if !types.is_empty() && !types.contains(&"null") && !node.nullable {
            return type_err(&types.join(","), "null");
        }
        return ok;
    }
    let sch_type = schema_type_of(data);
    let contains = |t: &str| types.contains(&t);
    let is_float_int = sch_type == "number"
        && data.as_f64().is_some_and(is_float_json_integer)
        && contains("integer");
    let is_int_float = sch_type == "integer" && contains("number");
    let is_str_or_slice = data.is_string() || data.is_array();
    if node.format.is_some() {
        // A format on a non-string: kube-openapi compares it with the data's own format
        // (int64 for integers, float64 for numbers); the checked formats never match those.
        if !(is_str_or_slice || contains(sch_type) || is_float_int || is_int_float) {
            let data_format = match sch_type {
                "integer" => "int64",
                "number" => "float64",
                _ => "",
            };
            return type_err(&node.format_name, data_format);
        }
        if !(contains("number") || contains("integer")) && is_str_or_slice {
            return ok;
        }
    }
    if !(contains(sch_type) || is_float_int || is_int_float) {
        return type_err(&types.join(","), sch_type);
    }
    ok
}

/// kube-openapi `schemaPropsValidator`: anyOf, oneOf, allOf, not.
fn schema_props_validator(
    node: &Node,
    data: &Value,
    old: Option<&Value>,
    path: &str,
    depth: usize,
) -> Res {
    let mut main = Res::default();
    if !node.any_of.is_empty() {
        let mut best: Option<Res> = None;
        let mut first_success: Option<Res> = None;
        let mut succeeded = false;
        for branch in &node.any_of {
            let r = validate_node(branch, data, old, path, depth + 1, false);
            if r.is_valid() {
                best = None;
                succeeded = true;
                first_success = Some(r);
                break;
            }
            if best.as_ref().is_none_or(|b| r.match_count > b.match_count) {
                best = Some(r);
            }
        }
        if !succeeded {
            main.add(OErr::composite(format!(
                "{} must validate at least one schema (anyOf)",
                gofmt::quote(path)
            )));
        }
        if let Some(b) = best {
            main.merge(b);
        } else if let Some(s) = first_success {
            main.merge(s);
        }
    }
    if !node.one_of.is_empty() {
        let mut best: Option<Res> = None;
        let mut first_success: Option<Res> = None;
        let mut validated = 0;
        for branch in &node.one_of {
            let r = validate_node(branch, data, old, path, depth + 1, false);
            if r.is_valid() {
                validated += 1;
                best = None;
                if first_success.is_none() {
                    first_success = Some(r);
                }
                continue;
            }
            if validated == 0 && best.as_ref().is_none_or(|b| r.match_count > b.match_count) {
                best = Some(r);
            }
        }
        if validated != 1 {
            let additional = if validated == 0 {
                "Found none valid".to_string()
            } else {
                format!("Found {validated} valid alternatives")
            };
            main.add(OErr::composite(format!(
                "{} must validate one and only one schema (oneOf). {additional}",
                gofmt::quote(path)
            )));
            if let Some(b) = best {
                main.merge(b);
            }
        } else if let Some(s) = first_success {
            main.merge(s);
        }
    }
    if !node.all_of.is_empty() {
        let mut validated = 0;
        for branch in &node.all_of {
            let r = validate_node(branch, data, old, path, depth + 1, false);
            if r.is_valid() {
                validated += 1;
            }
            main.merge(r);
        }
        if validated != node.all_of.len() {
            let additional = if validated == 0 {
                ". None validated"
            } else {
                ""
            };
            main.add(OErr::composite(format!(
                "{} must validate all the schemas (allOf){additional}",
                gofmt::quote(path)
            )));
        }
    }
    if let Some(not) = &node.not {
        let r = validate_node(not, data, old, path, depth + 1, false);
        if r.is_valid() {
            main.add(OErr::composite(format!(
                "{} must not validate the schema (not)",
                gofmt::quote(path)
            )));
        }
    }
    main.match_count += 1;
    main
}

/// kube-openapi `stringValidator`: the first of maxLength, minLength, pattern that fails.
fn string_validator(node: &Node, s: &str, path: &str) -> Res {
    let len = s.chars().count() as i64;
    let data = || Some(Value::String(s.to_string()));
    if let Some(max) = node.max_length
        && len > max
    {
        let mut e = OErr::new(
            Code::TooLong,
            path,
            format!("{path} in body should be at most {max} chars long"),
            data(),
        );
        e.valid = Some(max);
        return Res::err(e);
    }
    if let Some(min) = node.min_length
        && len < min
    {
        return Res::err(OErr::new(
            Code::Other,
            path,
            format!("{path} in body should be at least {min} chars long"),
            data(),
        ));
    }
    if let Some(p) = &node.pattern {
        match &p.regex {
            Ok(re) => {
                if !re.is_match(s) {
                    return Res::err(OErr::new(
                        Code::Other,
                        path,
                        format!("{path} in body should match '{}'", p.source),
                        data(),
                    ));
                }
            }
            Err(err) => {
                return Res::err(OErr::new(
                    Code::Other,
                    path,
                    format!(
                        "{path} in body should match '{}, but pattern is invalid: {err}'",
                        p.source
                    ),
                    data(),
                ));
            }
        }
    }
    Res::default()
}

/// A bound or factor as kube-openapi prints it: an `int64` for integer data (truncated, as
/// upstream converts it), a `float64` otherwise.
fn bound(v: f64, int_data: bool) -> String {
    if int_data {
        ((v as i64) as i128).to_string()
    } else {
        gofmt::float(v)
    }
}

/// kube-openapi `numberValidator`: multipleOf, minimum, maximum (errors in that order).
fn number_validator(node: &Node, data: &Value, path: &str) -> Res {
    let mut res = Res::default();
    let int_val = data.as_i64();
    let float_val = data.as_f64().unwrap_or(0.0);
    let int_data = int_val.is_some();
    let value = || Some(data.clone());
    if let Some(factor) = node.multiple_of {
        let fail = match int_val {
            Some(i) => {
                let f = factor as i64;
                if f <= 0 {
                    Some(format!(
                        "factor MultipleOf declared for {path} must be positive: {f}"
                    ))
                } else if i % f != 0 {
                    Some(format!("{path} in body should be a multiple of {f}"))
                } else {
                    None
                }
            }
            None => {
                if factor <= 0.0 {
                    Some(format!(
                        "factor MultipleOf declared for {path} must be positive: {}",
                        gofmt::float(factor)
                    ))
                } else {
                    let mult = if factor < 1.0 {
                        1.0 / factor * float_val
                    } else {
                        float_val / factor
                    };
                    (!is_float_json_integer(mult)).then(|| {
                        format!(
                            "{path} in body should be a multiple of {}",
                            gofmt::float(factor)
                        )
                    })
                }
            }
        };
        if let Some(msg) = fail {
            res.add(OErr::new(Code::Other, path, msg, value()));
        }
    }
    if let Some(min) = node.minimum {
        let below = match int_val {
            Some(i) => {
                let m = min as i64;
                (!node.exclusive_minimum && i < m) || (node.exclusive_minimum && i <= m)
            }
            None => {
                (!node.exclusive_minimum && float_val < min)
                    || (node.exclusive_minimum && float_val <= min)
            }
        };
        if below {
            let op = if node.exclusive_minimum {
                "greater than"
            } else {
                "greater than or equal to"
            };
            res.add(OErr::new(
                Code::Other,
                path,
                format!("{path} in body should be {op} {}", bound(min, int_data)),
                value(),
            ));
        }
    }
    if let Some(max) = node.maximum {
        let above = match int_val {
            Some(i) => {
                let m = max as i64;
                (!node.exclusive_maximum && i > m) || (node.exclusive_maximum && i >= m)
            }
            None => {
                (!node.exclusive_maximum && float_val > max)
                    || (node.exclusive_maximum && float_val >= max)
            }
        };
        if above {
            let op = if node.exclusive_maximum {
                "less than"
            } else {
                "less than or equal to"
            };
            res.add(OErr::new(
                Code::Other,
                path,
                format!("{path} in body should be {op} {}", bound(max, int_data)),
                value(),
            ));
        }
    }
    res.match_count += 1;
    res
}

/// The old item a new item of a `x-kubernetes-list-type: map` list correlates with: the one
/// with the same key values (upstream `makeMapList`). Other lists do not correlate.
pub(crate) fn correlated_item<'a>(
    node: &Node,
    new_item: &Value,
    old: Option<&'a Value>,
) -> Option<&'a Value> {
    if node.list_type.as_deref() != Some("map") || node.list_map_keys.is_empty() {
        return None;
    }
    let old_items = old?.as_array()?;
    let new_obj = new_item.as_object()?;
    let key_of = |o: &Map<String, Value>| -> Vec<Option<Value>> {
        node.list_map_keys
            .iter()
            .map(|k| o.get(k).cloned())
            .collect()
    };
    let want = key_of(new_obj);
    old_items
        .iter()
        .find(|o| o.as_object().is_some_and(|o| key_of(o) == want))
}

/// kube-openapi `schemaSliceValidator`: items, then minItems, maxItems, uniqueItems.
fn slice_validator(
    node: &Node,
    items: &[Value],
    old: Option<&Value>,
    path: &str,
    depth: usize,
) -> Res {
    let mut result = Res::default();
    if let Some(item_schema) = &node.items {
        for (i, item) in items.iter().enumerate() {
            let old_item = correlated_item(node, item, old);
            result.merge(validate_node(
                item_schema,
                item,
                old_item,
                &format!("{path}[{i}]"),
                depth + 1,
                old_item.is_some(),
            ));
        }
    }
    let size = items.len() as i64;
    if let Some(min) = node.min_items
        && size < min
    {
        result.add(OErr::new(
            Code::Other,
            path,
            format!("{path} in body should have at least {min} items"),
            Some(Value::from(size)),
        ));
    }
    if let Some(max) = node.max_items
        && size > max
    {
        let mut e = OErr::new(
            Code::MaxItems,
            path,
            format!("{path} in body should have at most {max} items"),
            Some(Value::from(size)),
        );
        e.valid = Some(max);
        result.add(e);
    }
    if node.unique_items {
        let dup = items
            .iter()
            .enumerate()
            .any(|(i, v)| items[..i].iter().any(|u| json_equal(u, v)));
        if dup {
            result.add(OErr::new(
                Code::Other,
                path,
                format!("{path} in body shouldn't contain duplicates"),
                None,
            ));
        }
    }
    result.match_count += 1;
    result
}

/// Equality of unstructured values as Go's `reflect.DeepEqual` sees them after kube-openapi
/// converted the data to the enum value's type: numbers compare by value.
pub(crate) fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(i), Some(j)) => i == j,
            _ => x.as_f64() == y.as_f64(),
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_equal(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_equal(v, w)))
        }
        _ => a == b,
    }
}

/// kube-openapi `basicCommonValidator`: enum.
fn enum_validator(node: &Node, data: &Value, path: &str) -> Res {
    let Some(values) = &node.enum_values else {
        return Res::default();
    };
    if values.is_empty() || values.iter().any(|v| json_equal(v, data)) {
        return Res::default();
    }
    let mut e = OErr::new(
        Code::Enum,
        path,
        format!(
            "{path} in body should be one of {}",
            gofmt::plain_list(values)
        ),
        Some(data.clone()),
    );
    e.values = values.clone();
    Res::err(e)
}

/// kube-openapi `objectValidator`.
fn object_validator(
    node: &Node,
    map: &Map<String, Value>,
    old: Option<&Value>,
    path: &str,
    depth: usize,
) -> Res {
    let mut res = Res::default();
    let n = map.len() as i64;
    let size = || Some(Value::from(n));
    if let Some(min) = node.min_properties
        && n < min
    {
        res.add(OErr::new(
            Code::Other,
            path,
            format!("{path} in body should have at least {min} properties"),
            size(),
        ));
    }
    if let Some(max) = node.max_properties
        && n > max
    {
        let mut e = OErr::new(
            Code::TooManyProperties,
            path,
            format!("{path} in body should have at most {max} properties"),
            size(),
        );
        e.valid = Some(max);
        res.add(e);
    }
    let old_map = old.and_then(Value::as_object);
    let old_child = |k: &str| {
        // At the root, kind and apiVersion are not correlated (upstream `isTypeMetaField`).
        if path.is_empty() && (k == "kind" || k == "apiVersion") {
            None
        } else {
            old_map.and_then(|m| m.get(k))
        }
    };
    match &node.additional_properties {
        Some(AdditionalProperties::Bool(false)) => {
            for k in map.keys() {
                if !node.properties.contains_key(k) {
                    res.add(OErr::new(
                        Code::Other,
                        path,
                        format!("{path}.{k} in body is a forbidden property"),
                        Some(Value::String(k.clone())),
                    ));
                }
            }
        }
        Some(AdditionalProperties::Schema(schema)) => {
            for (k, v) in map {
                if !node.properties.contains_key(k) {
                    let oc = old_child(k);
                    res.merge(validate_node(
                        schema,
                        v,
                        oc,
                        &format!("{path}.{k}"),
                        depth + 1,
                        oc.is_some(),
                    ));
                }
            }
        }
        _ => {}
    }
    for (name, schema) in &node.properties {
        if let Some(v) = map.get(name) {
            let oc = old_child(name);
            res.merge(validate_node(
                schema,
                v,
                oc,
                &child_name(path, name),
                depth + 1,
                oc.is_some(),
            ));
        }
    }
    for k in &node.required {
        if !map.contains_key(k) {
            let name = format!("{path}.{k}");
            res.add(OErr::new(
                Code::Required,
                &name,
                format!("{name} in body is required"),
                None,
            ));
        }
    }
    res
}
