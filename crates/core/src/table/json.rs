//! Forgiving accessors over `serde_json::Value`: a missing or oddly typed field reads as the Go
//! zero value, the way a decoded upstream struct would, so printers never panic. Also the
//! formatting helpers several printers share (`labels.FormatLabels`,
//! `metav1.FormatLabelSelector`, the load balancer ingress list), and the cell constructors.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use crate::selector::LabelSelector;

/// The value at a path of object keys.
pub fn get<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(v, |cur, key| cur.get(key))
}

/// A string field, `""` when absent or not a string.
pub fn str_at<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    get(v, path).and_then(Value::as_str).unwrap_or("")
}

/// An integer field, `None` when absent or not an integer.
pub fn opt_int_at(v: &Value, path: &[&str]) -> Option<i64> {
    let x = get(v, path)?;
    x.as_i64()
        .or_else(|| x.as_u64().map(|u| i64::try_from(u).unwrap_or(i64::MAX)))
}

/// An integer field, `0` when absent.
pub fn int_at(v: &Value, path: &[&str]) -> i64 {
    opt_int_at(v, path).unwrap_or(0)
}

/// A boolean field, `None` when absent or not a boolean.
pub fn opt_bool_at(v: &Value, path: &[&str]) -> Option<bool> {
    get(v, path).and_then(Value::as_bool)
}

/// An array field, empty when absent or not an array.
pub fn arr_at<'a>(v: &'a Value, path: &[&str]) -> &'a [Value] {
    get(v, path)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// An object field, `None` when absent or not an object.
pub fn obj_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Map<String, Value>> {
    get(v, path).and_then(Value::as_object)
}

/// The number of entries of a map field (`len(obj.Data)`).
pub fn map_len(v: &Value, path: &[&str]) -> i64 {
    obj_at(v, path).map_or(0, |m| i64::try_from(m.len()).unwrap_or(i64::MAX))
}

/// The number of items of an array field.
pub fn arr_len(v: &Value, path: &[&str]) -> i64 {
    i64::try_from(arr_at(v, path).len()).unwrap_or(i64::MAX)
}

/// `metadata.name`.
pub fn name(v: &Value) -> &str {
    str_at(v, &["metadata", "name"])
}

/// Port of `labels.FormatLabels`: `k1=v1,k2=v2` sorted by key, `<none>` when empty.
pub fn format_labels(m: Option<&Map<String, Value>>) -> String {
    let mut pairs: Vec<(&str, &str)> = m
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.as_str(), v.as_str().unwrap_or("")))
                .collect()
        })
        .unwrap_or_default();
    pairs.sort_unstable();
    let s = pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    if s.is_empty() {
        "<none>".to_string()
    } else {
        s
    }
}

/// `metav1.FormatLabelSelector`: `<none>` for an empty (or nil) selector, `<error>` for an
/// invalid one.
pub fn format_label_selector(sel: Option<&Value>) -> String {
    match LabelSelector::from_json(sel.unwrap_or(&Value::Null)) {
        Ok(sel) => {
            let text = sel.to_string();
            if text.is_empty() {
                "<none>".to_string()
            } else {
                text
            }
        }
        Err(_) => "<error>".to_string(),
    }
}

/// The addresses of `status.loadBalancer.ingress`, sorted and unique: each entry's IP, else its
/// hostname (entries with neither are skipped), as upstream's `loadBalancerStatusStringer` (a
/// Service) and `ingressLoadBalancerStatusStringer` (an Ingress) collect them.
pub fn load_balancer_ingress(obj: &Value) -> Vec<&str> {
    let set: BTreeSet<&str> = arr_at(obj, &["status", "loadBalancer", "ingress"])
        .iter()
        .filter_map(|i| {
            let ip = str_at(i, &["ip"]);
            let host = str_at(i, &["hostname"]);
            if !ip.is_empty() {
                Some(ip)
            } else if !host.is_empty() {
                Some(host)
            } else {
                None
            }
        })
        .collect();
    set.into_iter().collect()
}

/// A JSON string cell.
pub fn s(x: impl Into<String>) -> Value {
    Value::String(x.into())
}

/// A JSON integer cell (upstream's `int64(...)` cells).
pub fn n(x: i64) -> Value {
    Value::from(x)
}
