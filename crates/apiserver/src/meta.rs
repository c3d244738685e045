//! Small helpers over `metadata` of JSON objects.

use serde_json::{Map, Value};

/// `metadata.name`.
pub fn name(v: &Value) -> Option<&str> {
    v.pointer("/metadata/name").and_then(Value::as_str)
}

/// `metadata.namespace`.
pub fn namespace(v: &Value) -> Option<&str> {
    v.pointer("/metadata/namespace").and_then(Value::as_str)
}

/// `metadata.uid`.
pub fn uid(v: &Value) -> Option<&str> {
    v.pointer("/metadata/uid").and_then(Value::as_str)
}

/// `metadata.resourceVersion`.
pub fn resource_version(v: &Value) -> Option<&str> {
    v.pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// `metadata.labels` as a map (empty when absent).
pub fn labels(v: &Value) -> Map<String, Value> {
    v.pointer("/metadata/labels")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

/// `metadata.finalizers`.
pub fn finalizers(v: &Value) -> Vec<String> {
    v.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Whether `metadata.deletionTimestamp` is set.
pub fn is_deleting(v: &Value) -> bool {
    v.pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null())
}

/// `metadata` as a mutable map, created when missing or not an object.
pub fn meta_mut(v: &mut Value) -> &mut Map<String, Value> {
    if !v.is_object() {
        *v = Value::Object(Map::new());
    }
    let obj = v.as_object_mut().expect("just made an object");
    let meta = obj
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    meta.as_object_mut().expect("just made an object")
}

/// A new random UID (RFC 4122 v4), as upstream's `uuid.NewUUID`.
pub fn new_uid() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// `generateName` + 5 random characters from upstream's alphabet (no vowels, no confusable digits),
/// with the prefix cut so the name stays within 63 characters (`names.SimpleNameGenerator`).
pub fn generate_name(prefix: &str) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut base: String = prefix.to_string();
    if base.len() > 58 {
        let mut cut = 58;
        while !base.is_char_boundary(cut) {
            cut -= 1;
        }
        base.truncate(cut);
    }
    let bytes = *uuid::Uuid::new_v4().as_bytes();
    for b in bytes.iter().take(5) {
        base.push(ALPHABET[usize::from(*b) % ALPHABET.len()] as char);
    }
    base
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_names_keep_the_prefix_and_add_five_characters() {
        let n = generate_name("web-");
        assert!(n.starts_with("web-") && n.len() == 9, "{n}");
        let long = "a".repeat(70);
        assert_eq!(generate_name(&long).len(), 63);
    }

    #[test]
    fn meta_mut_repairs_non_object_metadata() {
        let mut v = serde_json::json!({"metadata": 5});
        meta_mut(&mut v).insert("name".into(), "x".into());
        assert_eq!(name(&v), Some("x"));
    }
}
