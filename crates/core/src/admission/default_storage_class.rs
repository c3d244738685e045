//! The DefaultStorageClass admission plugin: upstream
//! `plugin/pkg/admission/storage/storageclass/setdefault/admission.go` (`Admit`) with the class
//! choice of `pkg/volume/util/storageclass.go` (`GetDefaultClass`).
//!
//! On create, a PersistentVolumeClaim that says nothing about its class (no
//! `spec.storageClassName` key at all, and no legacy `volume.beta.kubernetes.io/storage-class`
//! annotation) gets the name of the default StorageClass. A claim that sets
//! `storageClassName: ""` asked for "no class" and is left alone, as upstream leaves it.
//!
//! The default class is one annotated `storageclass.kubernetes.io/is-default-class: "true"` (or
//! the beta annotation). When several are, upstream picks the newest (`creationTimestamp`), ties
//! broken by the smaller name; when none is, the claim is unchanged.

use serde_json::{Map, Value};

/// The annotation marking a StorageClass as the cluster default.
pub const IS_DEFAULT_CLASS: &str = "storageclass.kubernetes.io/is-default-class";
/// The beta spelling, still honoured upstream.
pub const BETA_IS_DEFAULT_CLASS: &str = "storageclass.beta.kubernetes.io/is-default-class";
/// The legacy annotation that named a claim's class before `spec.storageClassName`.
pub const BETA_STORAGE_CLASS: &str = "volume.beta.kubernetes.io/storage-class";

/// Whether `class` (a StorageClass object) is annotated as a default class (upstream
/// `IsDefaultAnnotation`: the value must be exactly `"true"`).
pub fn is_default(class: &Value) -> bool {
    let annotations = class.pointer("/metadata/annotations");
    [IS_DEFAULT_CLASS, BETA_IS_DEFAULT_CLASS]
        .iter()
        .any(|k| annotations.and_then(|a| a.get(*k)).and_then(Value::as_str) == Some("true"))
}

/// The name of the default class among `classes` (upstream `GetDefaultClass`): the newest of
/// the classes annotated as default, ties broken by name ascending; `None` when none is.
pub fn default_class(classes: &[Value]) -> Option<&str> {
    newest_marked(classes, is_default)
}

/// The name of the newest of `classes` that `marked` accepts, ties broken by name ascending:
/// how upstream picks a default among several (StorageClasses and IngressClasses alike).
pub(crate) fn newest_marked(classes: &[Value], marked: impl Fn(&Value) -> bool) -> Option<&str> {
    classes
        .iter()
        .filter(|c| marked(c) && name(c).is_some_and(|n| !n.is_empty()))
        .max_by(|a, b| {
            created(a)
                .cmp(&created(b))
                // The smaller name wins a tie: it must compare as the greater one here.
                .then_with(|| name(b).cmp(&name(a)))
        })
        .and_then(name)
}

/// `metadata.name` of an object.
fn name(c: &Value) -> Option<&str> {
    c.pointer("/metadata/name").and_then(Value::as_str)
}

/// `metadata.creationTimestamp` as written by the API server (`YYYY-MM-DDTHH:MM:SSZ`, which
/// sorts as text).
fn created(c: &Value) -> Option<&str> {
    c.pointer("/metadata/creationTimestamp")
        .and_then(Value::as_str)
}

/// Sets `spec.storageClassName` of a claim being created to the default class, when the claim
/// names none (see the module documentation). Returns the class set, if any.
pub fn admit<'a>(claim: &mut Value, classes: &'a [Value]) -> Option<&'a str> {
    if has_annotation(claim, BETA_STORAGE_CLASS) {
        return None;
    }
    let spec = claim.get_mut("spec")?.as_object_mut()?;
    name_class(spec, "storageClassName", || default_class(classes))
}

/// Whether `object` carries annotation `key` (whatever its value): the legacy class
/// annotations that make both default-class plugins leave an object alone.
pub(crate) fn has_annotation(object: &Value, key: &str) -> bool {
    object
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(key))
        .is_some()
}

/// Sets `spec[field]` to the class `default` picks, unless the spec already names one (a null
/// value counts as unset). Returns the class set, if any.
pub(crate) fn name_class<'a>(
    spec: &mut Map<String, Value>,
    field: &str,
    default: impl FnOnce() -> Option<&'a str>,
) -> Option<&'a str> {
    if spec.get(field).is_some_and(|v| !v.is_null()) {
        return None;
    }
    let class = default()?;
    spec.insert(field.to_string(), Value::String(class.to_string()));
    Some(class)
}

/// A class object named `name`, created at `created`, with `annotation` set to `default`
/// when given: the fixture of both default-class plugins' tests.
#[cfg(test)]
pub(crate) fn class_fixture(
    name: &str,
    annotation: &str,
    default: Option<&str>,
    created: &str,
) -> Value {
    let mut c = serde_json::json!({"metadata": {"name": name, "creationTimestamp": created}});
    if let Some(v) = default {
        c["metadata"]["annotations"] = serde_json::json!({ annotation: v });
    }
    c
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn class(name: &str, default: Option<&str>, created: &str) -> Value {
        class_fixture(name, IS_DEFAULT_CLASS, default, created)
    }

    fn claim(spec: Value) -> Value {
        json!({"metadata": {"name": "data", "namespace": "default"}, "spec": spec})
    }

    #[test]
    fn claim_without_class_gets_the_default_class() {
        let classes = [
            class("slow", None, "2026-01-01T00:00:00Z"),
            class("local-path", Some("true"), "2026-01-01T00:00:00Z"),
        ];
        let mut c = claim(json!({"accessModes": ["ReadWriteOnce"]}));
        assert_eq!(admit(&mut c, &classes), Some("local-path"));
        assert_eq!(c["spec"]["storageClassName"], "local-path");
    }

    #[test]
    fn explicit_class_and_explicit_empty_class_are_kept() {
        let classes = [class("local-path", Some("true"), "2026-01-01T00:00:00Z")];
        let mut named = claim(json!({"storageClassName": "manual"}));
        assert_eq!(admit(&mut named, &classes), None);
        assert_eq!(named["spec"]["storageClassName"], "manual");
        let mut empty = claim(json!({"storageClassName": ""}));
        assert_eq!(admit(&mut empty, &classes), None);
        assert_eq!(empty["spec"]["storageClassName"], "");
    }

    #[test]
    fn legacy_beta_class_annotation_is_respected() {
        let classes = [class("local-path", Some("true"), "2026-01-01T00:00:00Z")];
        let mut c = claim(json!({}));
        c["metadata"]["annotations"] = json!({ BETA_STORAGE_CLASS: "gold" });
        assert_eq!(admit(&mut c, &classes), None);
        assert!(c["spec"].get("storageClassName").is_none());
    }

    #[test]
    fn no_default_class_leaves_the_claim_alone() {
        let classes = [
            class("a", None, "2026-01-01T00:00:00Z"),
            class("b", Some("True"), "2026-01-01T00:00:00Z"),
        ];
        let mut c = claim(json!({}));
        assert_eq!(admit(&mut c, &classes), None);
        assert!(c["spec"].get("storageClassName").is_none());
    }

    #[test]
    fn newest_default_wins_and_ties_go_to_the_smaller_name() {
        let older = class("zeta", Some("true"), "2026-01-01T00:00:00Z");
        let newer = class("alpha", Some("true"), "2026-02-01T00:00:00Z");
        assert_eq!(default_class(&[older.clone(), newer]), Some("alpha"));
        let twin = class("beta", Some("true"), "2026-01-01T00:00:00Z");
        assert_eq!(default_class(&[older, twin]), Some("beta"));
    }

    #[test]
    fn beta_default_annotation_counts() {
        let mut c = class("old", None, "2026-01-01T00:00:00Z");
        c["metadata"]["annotations"] = json!({ BETA_IS_DEFAULT_CLASS: "true" });
        assert!(is_default(&c));
    }
}
