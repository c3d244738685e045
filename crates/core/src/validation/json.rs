//! Small, total accessors over `serde_json::Value` shared by defaulting, strategies and validation.
//!
//! Every accessor tolerates any shape: a missing key, `null` or a value of the wrong type reads as
//! "absent", so callers never panic on odd input.

use serde_json::{Map, Value};

/// The string at `key`, if `v` is an object holding a string there.
pub fn str_at<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// The object at `key`, if any.
pub fn obj_at<'a>(v: &'a Value, key: &str) -> Option<&'a Map<String, Value>> {
    v.get(key).and_then(Value::as_object)
}

/// The array at `key`, or an empty slice.
pub fn arr_at<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    v.get(key)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// The integer at `key`, if any.
pub fn i64_at(v: &Value, key: &str) -> Option<i64> {
    v.get(key).and_then(Value::as_i64)
}

/// The boolean at `key`, if any.
pub fn bool_at(v: &Value, key: &str) -> Option<bool> {
    v.get(key).and_then(Value::as_bool)
}

/// Whether `key` holds something other than `null`.
pub fn present(v: &Value, key: &str) -> bool {
    !matches!(v.get(key), None | Some(Value::Null))
}

/// Follows a path of object keys.
pub fn path<'a>(v: &'a Value, keys: &[&str]) -> Option<&'a Value> {
    keys.iter().try_fold(v, |cur, k| cur.get(*k))
}

/// The object at `key` inside `v`, created (replacing `null`) when absent. `None` when `v` is not
/// an object or `key` holds a non-object value.
pub fn ensure_obj<'a>(v: &'a mut Value, key: &str) -> Option<&'a mut Value> {
    let map = v.as_object_mut()?;
    let slot = map.entry(key.to_string()).or_insert(Value::Null);
    if slot.is_null() {
        *slot = Value::Object(Map::new());
    }
    if slot.is_object() { Some(slot) } else { None }
}

/// Sets `key` to `default` when `v` is an object and `key` is absent or `null`.
pub fn set_default(v: &mut Value, key: &str, default: Value) {
    if let Some(map) = v.as_object_mut() {
        let slot = map.entry(key.to_string()).or_insert(Value::Null);
        if slot.is_null() {
            *slot = default;
        }
    }
}

/// Sets `key` to `default` when absent, `null` or the empty string (Go's zero value for strings).
pub fn set_default_str(v: &mut Value, key: &str, default: &str) {
    if let Some(map) = v.as_object_mut() {
        let slot = map.entry(key.to_string()).or_insert(Value::Null);
        if slot.is_null() || slot.as_str() == Some("") {
            *slot = Value::String(default.to_string());
        }
    }
}

/// Mutable iteration over the elements of the array at `key` (nothing when absent).
pub fn each_mut(v: &mut Value, key: &str, mut f: impl FnMut(&mut Value)) {
    if let Some(items) = v.get_mut(key).and_then(Value::as_array_mut) {
        items.iter_mut().for_each(&mut f);
    }
}

/// Renders a string map the way Go's `%#v` prints `map[string]string` in upstream messages:
/// `map[string]string{"app":"web"}` with keys sorted.
pub fn go_string_map(m: Option<&Map<String, Value>>) -> String {
    let Some(m) = m else {
        return "map[string]string(nil)".to_string();
    };
    let mut pairs: Vec<(&String, String)> = m
        .iter()
        .map(|(k, v)| {
            (
                k,
                v.as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| v.to_string()),
            )
        })
        .collect();
    pairs.sort();
    let body: Vec<String> = pairs.iter().map(|(k, v)| format!("{k:?}:{v:?}")).collect();
    format!("map[string]string{{{}}}", body.join(", "))
}
