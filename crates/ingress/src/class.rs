//! Which Ingresses this controller serves: the IngressClass selection of the Kubernetes Ingress
//! documentation ("Ingress class" and "Default IngressClass"), as ingress-nginx's
//! `IsValid`/ingress-class filter applies it.
//!
//! An Ingress is ours when
//! 1. `spec.ingressClassName` names an IngressClass whose `spec.controller` is ours;
//! 2. otherwise, when the deprecated `kubernetes.io/ingress.class` annotation is set, it names our
//!    class (`tandem`) or an IngressClass whose controller is ours;
//! 3. otherwise (no class named at all), the cluster's default IngressClass — the one annotated
//!    `ingressclass.kubernetes.io/is-default-class: "true"`, the newest when several are, as
//!    upstream's `DefaultIngressClass` admission plugin picks — is ours.

use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The name of tandem's IngressClass.
pub const CLASS_NAME: &str = "tandem";
/// `spec.controller` of tandem's IngressClass.
pub const CONTROLLER_NAME: &str = "tandem.io/ingress";
/// The annotation that makes an IngressClass the cluster's default.
pub const DEFAULT_CLASS_ANNOTATION: &str = "ingressclass.kubernetes.io/is-default-class";
/// The deprecated annotation that named an Ingress's class before `spec.ingressClassName`.
pub const LEGACY_CLASS_ANNOTATION: &str = "kubernetes.io/ingress.class";

/// Who this controller is: the class it creates and the controller name classes point at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub class_name: String,
    pub controller: String,
}

impl Default for Identity {
    fn default() -> Self {
        Identity {
            class_name: CLASS_NAME.to_string(),
            controller: CONTROLLER_NAME.to_string(),
        }
    }
}

impl Identity {
    /// Whether `ingress` is ours, given every IngressClass of the cluster.
    pub fn owns(&self, ingress: &Ingress, classes: &[&IngressClass]) -> bool {
        let controller_of = |name: &str| {
            classes
                .iter()
                .find(|c| c.metadata.name.as_deref() == Some(name))
                .and_then(|c| c.spec.as_ref())
                .and_then(|s| s.controller.as_deref())
        };
        if let Some(name) = ingress
            .spec
            .as_ref()
            .and_then(|s| s.ingress_class_name.as_deref())
        {
            return controller_of(name) == Some(self.controller.as_str());
        }
        if let Some(name) = annotation(&ingress.metadata, LEGACY_CLASS_ANNOTATION) {
            return name == self.class_name || controller_of(name) == Some(&self.controller);
        }
        default_class(classes)
            .and_then(|c| c.spec.as_ref())
            .and_then(|s| s.controller.as_deref())
            == Some(self.controller.as_str())
    }

    /// The IngressClass this controller creates when it is missing: ours, marked as the
    /// cluster's default (k3s marks its Traefik class the same way).
    pub fn default_class_object(&self) -> IngressClass {
        IngressClass {
            metadata: ObjectMeta {
                name: Some(self.class_name.clone()),
                annotations: Some(
                    [(DEFAULT_CLASS_ANNOTATION.to_string(), "true".to_string())].into(),
                ),
                ..Default::default()
            },
            spec: Some(k8s_openapi::api::networking::v1::IngressClassSpec {
                controller: Some(self.controller.clone()),
                parameters: None,
            }),
        }
    }
}

/// The cluster's default IngressClass: among those annotated as default (value `true`, compared
/// case-insensitively as upstream's `strconv.ParseBool`-like check accepts `true`/`True`), the
/// newest; equal creation times are ordered by name so every reader picks the same one.
pub fn default_class<'a>(classes: &[&'a IngressClass]) -> Option<&'a IngressClass> {
    classes
        .iter()
        .copied()
        .filter(|c| {
            annotation(&c.metadata, DEFAULT_CLASS_ANNOTATION)
                .is_some_and(|v| v.eq_ignore_ascii_case("true"))
        })
        .max_by(|a, b| {
            let key = |c: &IngressClass| {
                (
                    c.metadata.creation_timestamp.as_ref().map(|t| t.0),
                    std::cmp::Reverse(c.metadata.name.clone()),
                )
            };
            key(a).cmp(&key(b))
        })
}

fn annotation<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn class(name: &str, controller: &str, default: bool, created: &str) -> IngressClass {
        let mut c: IngressClass = serde_json::from_value(json!({
            "metadata": {"name": name, "creationTimestamp": created},
            "spec": {"controller": controller}
        }))
        .expect("class");
        if default {
            c.metadata.annotations =
                Some([(DEFAULT_CLASS_ANNOTATION.to_string(), "true".to_string())].into());
        }
        c
    }

    fn ingress(class_name: Option<&str>, annotation: Option<&str>) -> Ingress {
        let mut i: Ingress =
            serde_json::from_value(json!({"metadata": {"name": "i", "namespace": "default"}}))
                .expect("ingress");
        if let Some(c) = class_name {
            i.spec = Some(k8s_openapi::api::networking::v1::IngressSpec {
                ingress_class_name: Some(c.to_string()),
                ..Default::default()
            });
        }
        if let Some(a) = annotation {
            i.metadata.annotations =
                Some([(LEGACY_CLASS_ANNOTATION.to_string(), a.to_string())].into());
        }
        i
    }

    const T0: &str = "2026-01-01T00:00:00Z";
    const T1: &str = "2026-01-02T00:00:00Z";

    #[test]
    fn ingress_class_name_of_a_class_with_our_controller_is_ours() {
        let ours = class("tandem", CONTROLLER_NAME, false, T0);
        let nginx = class("nginx", "k8s.io/ingress-nginx", false, T0);
        let me = Identity::default();
        assert!(me.owns(&ingress(Some("tandem"), None), &[&ours, &nginx]));
        assert!(!me.owns(&ingress(Some("nginx"), None), &[&ours, &nginx]));
    }

    #[test]
    fn ingress_class_name_of_a_missing_class_is_not_ours() {
        let me = Identity::default();
        assert!(!me.owns(&ingress(Some("tandem"), None), &[]));
    }

    #[test]
    fn class_name_wins_over_the_legacy_annotation() {
        let ours = class("tandem", CONTROLLER_NAME, true, T0);
        let nginx = class("nginx", "k8s.io/ingress-nginx", false, T0);
        let me = Identity::default();
        assert!(!me.owns(&ingress(Some("nginx"), Some("tandem")), &[&ours, &nginx]));
        assert!(me.owns(&ingress(Some("tandem"), Some("nginx")), &[&ours, &nginx]));
    }

    #[test]
    fn legacy_annotation_naming_our_class_is_ours_even_without_the_class_object() {
        let me = Identity::default();
        assert!(me.owns(&ingress(None, Some("tandem")), &[]));
        assert!(!me.owns(&ingress(None, Some("nginx")), &[]));
    }

    #[test]
    fn legacy_annotation_naming_another_class_of_our_controller_is_ours() {
        let other = class("internal", CONTROLLER_NAME, false, T0);
        let me = Identity::default();
        assert!(me.owns(&ingress(None, Some("internal")), &[&other]));
    }

    #[test]
    fn legacy_annotation_of_another_controller_is_not_ours_even_when_we_are_default() {
        let ours = class("tandem", CONTROLLER_NAME, true, T0);
        let me = Identity::default();
        assert!(!me.owns(&ingress(None, Some("nginx")), &[&ours]));
    }

    #[test]
    fn ingress_without_a_class_is_ours_when_our_class_is_the_default() {
        let ours = class("tandem", CONTROLLER_NAME, true, T0);
        let me = Identity::default();
        assert!(me.owns(&ingress(None, None), &[&ours]));
    }

    #[test]
    fn ingress_without_a_class_is_not_ours_without_a_default_class() {
        let ours = class("tandem", CONTROLLER_NAME, false, T0);
        let me = Identity::default();
        assert!(!me.owns(&ingress(None, None), &[&ours]));
    }

    #[test]
    fn the_newest_default_class_decides_when_several_are_default() {
        let ours = class("tandem", CONTROLLER_NAME, true, T0);
        let nginx = class("nginx", "k8s.io/ingress-nginx", true, T1);
        let me = Identity::default();
        assert!(!me.owns(&ingress(None, None), &[&ours, &nginx]));
        let ours_newer = class("tandem", CONTROLLER_NAME, true, T1);
        let nginx_older = class("nginx", "k8s.io/ingress-nginx", true, T0);
        assert!(me.owns(&ingress(None, None), &[&ours_newer, &nginx_older]));
    }

    #[test]
    fn default_annotation_must_say_true() {
        let mut ours = class("tandem", CONTROLLER_NAME, false, T0);
        ours.metadata.annotations =
            Some([(DEFAULT_CLASS_ANNOTATION.to_string(), "false".to_string())].into());
        assert!(default_class(&[&ours]).is_none());
        ours.metadata.annotations =
            Some([(DEFAULT_CLASS_ANNOTATION.to_string(), "True".to_string())].into());
        assert!(default_class(&[&ours]).is_some());
    }

    #[test]
    fn the_class_we_create_is_the_default_for_our_controller() {
        let c = Identity::default().default_class_object();
        assert_eq!(c.metadata.name.as_deref(), Some("tandem"));
        assert_eq!(
            c.spec.and_then(|s| s.controller).as_deref(),
            Some("tandem.io/ingress")
        );
        assert_eq!(
            c.metadata
                .annotations
                .and_then(|a| a.get(DEFAULT_CLASS_ANNOTATION).cloned())
                .as_deref(),
            Some("true")
        );
    }
}
