//! The DefaultIngressClass admission plugin: upstream
//! `plugin/pkg/admission/network/defaultingressclass/admission.go`.
//!
//! On create, an Ingress that names no class (no `spec.ingressClassName`, and no legacy
//! `kubernetes.io/ingress.class` annotation, which controllers still honour) gets the name of
//! the default IngressClass: one annotated `ingressclass.kubernetes.io/is-default-class: "true"`.
//! When several are, the newest wins (ties broken by the smaller name), as upstream picks since
//! it stopped refusing such Ingresses; when none is, the Ingress is unchanged. Updates are never
//! touched.

use serde_json::Value;

use super::default_storage_class::{has_annotation, name_class, newest_marked};

/// The annotation marking an IngressClass as the cluster default.
pub const IS_DEFAULT_CLASS: &str = "ingressclass.kubernetes.io/is-default-class";
/// The legacy annotation naming an Ingress's class before `spec.ingressClassName`.
pub const LEGACY_CLASS_ANNOTATION: &str = "kubernetes.io/ingress.class";

/// Whether `class` (an IngressClass object) is annotated as the default (the value must be
/// exactly `"true"`).
pub fn is_default(class: &Value) -> bool {
    class
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(IS_DEFAULT_CLASS))
        .and_then(Value::as_str)
        == Some("true")
}

/// Sets `spec.ingressClassName` of an Ingress being created to the default class when it
/// names none (see the module documentation). Returns the class set, if any.
pub fn admit<'a>(ingress: &mut Value, classes: &'a [Value]) -> Option<&'a str> {
    if has_annotation(ingress, LEGACY_CLASS_ANNOTATION) {
        return None;
    }
    let class = newest_marked(classes, is_default)?;
    let spec = ingress
        .as_object_mut()?
        .entry("spec")
        .or_insert_with(|| Value::Object(Default::default()))
        .as_object_mut()?;
    name_class(spec, "ingressClassName", || Some(class))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::default_storage_class::class_fixture;
    use super::*;

    fn class(name: &str, default: Option<&str>, created: &str) -> Value {
        class_fixture(name, IS_DEFAULT_CLASS, default, created)
    }

    fn ingress(spec: Value) -> Value {
        json!({"metadata": {"name": "web", "namespace": "default"}, "spec": spec})
    }

    #[test]
    fn ingress_without_class_gets_the_default_class() {
        let classes = [
            class("nginx", None, "2026-01-01T00:00:00Z"),
            class("tandem", Some("true"), "2026-01-01T00:00:00Z"),
        ];
        let mut i = ingress(json!({"defaultBackend": {"service": {"name": "web"}}}));
        assert_eq!(admit(&mut i, &classes), Some("tandem"));
        assert_eq!(i["spec"]["ingressClassName"], "tandem");
    }

    #[test]
    fn named_class_and_legacy_annotation_are_kept() {
        let classes = [class("tandem", Some("true"), "2026-01-01T00:00:00Z")];
        let mut named = ingress(json!({"ingressClassName": "nginx"}));
        assert_eq!(admit(&mut named, &classes), None);
        assert_eq!(named["spec"]["ingressClassName"], "nginx");

        let mut legacy = ingress(json!({}));
        legacy["metadata"]["annotations"] = json!({LEGACY_CLASS_ANNOTATION: "nginx"});
        assert_eq!(admit(&mut legacy, &classes), None);
        assert!(legacy["spec"].get("ingressClassName").is_none());
    }

    #[test]
    fn newest_default_wins_and_ties_go_to_the_smaller_name() {
        let classes = [
            class("old", Some("true"), "2026-01-01T00:00:00Z"),
            class("new-b", Some("true"), "2026-02-01T00:00:00Z"),
            class("new-a", Some("true"), "2026-02-01T00:00:00Z"),
            class(
                "newest-but-not-default",
                Some("TRUE"),
                "2026-03-01T00:00:00Z",
            ),
        ];
        let mut i = ingress(json!({}));
        assert_eq!(admit(&mut i, &classes), Some("new-a"));
    }

    #[test]
    fn no_default_class_leaves_the_ingress_unchanged() {
        let classes = [class("nginx", Some("false"), "2026-01-01T00:00:00Z")];
        let mut i = ingress(json!({"rules": []}));
        let before = i.clone();
        assert_eq!(admit(&mut i, &classes), None);
        assert_eq!(i, before);
        // No spec at all: still nothing to set without a default.
        let mut bare = json!({"metadata": {"name": "x"}});
        assert_eq!(admit(&mut bare, &classes), None);
    }
}
