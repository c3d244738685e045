//! The resource registry: every resource type the API server serves, with the facts discovery,
//! routing, storage keys and `kubectl` need (group, version, kind, plural, scope, short names,
//! categories, subresources, verbs).
//!
//! The table is data, not code paths: adding a resource (or, later, a custom resource definition)
//! is adding a `ResourceType` value. Mirrors the per-resource facts upstream keeps in each
//! `registry/<group>/<resource>/storage` package.

use std::sync::Arc;

use builtin::BUILTIN;

mod builtin;

/// One served resource type at one group-version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceType {
    /// API group; empty for the legacy core group (`/api/v1`).
    pub group: String,
    pub version: String,
    pub kind: String,
    /// Lower-case plural used in URLs (`pods`).
    pub plural: String,
    /// Lower-case singular (`pod`).
    pub singular: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    /// Subresources served under `<plural>/<sub>`: `status`, `scale`, `binding`, `log`, …
    pub subresources: Vec<String>,
    /// The verbs the main resource serves, sorted, as discovery lists them: all eight for stored
    /// resources, only `create` for the review kinds (`SubjectAccessReview`, `TokenReview`, …),
    /// which are answered and never stored.
    pub verbs: Vec<String>,
}

impl ResourceType {
    /// `v1` for the core group, `apps/v1` otherwise: the `apiVersion` of objects of this type.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `pods` or `deployments.apps`: how upstream names a group-resource in messages.
    pub fn group_resource(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// `PodList`.
    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    /// Whether the named subresource is served.
    pub fn has_subresource(&self, name: &str) -> bool {
        self.subresources.iter().any(|s| s == name)
    }

    /// The verbs discovery advertises for the main resource, sorted.
    pub fn verbs(&self) -> &[String] {
        &self.verbs
    }

    /// Whether the main resource serves `verb` (`list`, `watch`, `delete`, …). Clients that walk
    /// every type, as upstream's namespace deleter and garbage collector walk discovery, should
    /// skip types that do not serve the verbs they need.
    pub fn supports(&self, verb: &str) -> bool {
        self.verbs.iter().any(|v| v == verb)
    }

    /// The storage key prefix for this type: `/registry/<group-resource>/`.
    /// Objects live at `<prefix><namespace>/<name>` or `<prefix><name>` when cluster-scoped.
    pub fn key_prefix(&self) -> String {
        format!("/registry/{}/", self.group_resource())
    }

    /// The storage key of one object.
    pub fn key(&self, namespace: Option<&str>, name: &str) -> String {
        match (self.namespaced, namespace) {
            (true, Some(ns)) => format!("{}{ns}/{name}", self.key_prefix()),
            _ => format!("{}{name}", self.key_prefix()),
        }
    }

    /// The storage prefix covering every object of a namespace (or all of them).
    pub fn namespace_prefix(&self, namespace: Option<&str>) -> String {
        match (self.namespaced, namespace) {
            (true, Some(ns)) => format!("{}{ns}/", self.key_prefix()),
            _ => self.key_prefix(),
        }
    }
}

/// Every resource type the server knows, with lookups by URL segment, kind and short name.
#[derive(Debug, Clone)]
pub struct Registry {
    types: Vec<Arc<ResourceType>>,
}

impl Default for Registry {
    fn default() -> Self {
        Self::builtin()
    }
}

impl Registry {
    /// The built-in resources of tandem.
    pub fn builtin() -> Self {
        let types = BUILTIN
            .iter()
            .map(|s| {
                Arc::new(ResourceType {
                    group: s.group.to_string(),
                    version: s.version.to_string(),
                    kind: s.kind.to_string(),
                    plural: s.plural.to_string(),
                    singular: s.kind.to_ascii_lowercase(),
                    namespaced: s.namespaced,
                    short_names: s.short.iter().map(|x| x.to_string()).collect(),
                    categories: s.categories.iter().map(|x| x.to_string()).collect(),
                    subresources: s.sub.iter().map(|x| x.to_string()).collect(),
                    verbs: s.verbs.iter().map(|x| x.to_string()).collect(),
                })
            })
            .collect();
        Registry { types }
    }

    /// This registry with `extra` types served after the built-in ones (the custom resources
    /// of established CustomResourceDefinitions).
    pub fn with_extra(&self, extra: impl IntoIterator<Item = ResourceType>) -> Registry {
        let mut types = self.types.clone();
        types.extend(extra.into_iter().map(Arc::new));
        Registry { types }
    }

    /// The same registry without the types of `group` (a built-in API switched off, as
    /// `tandem up --disable metrics-server` does to the metrics API).
    pub fn without_group(&self, group: &str) -> Registry {
        Registry {
            types: self
                .types
                .iter()
                .filter(|t| t.group != group)
                .cloned()
                .collect(),
        }
    }

    /// All resource types in registration order.
    pub fn all(&self) -> &[Arc<ResourceType>] {
        &self.types
    }

    /// The type served at `/<prefix>/<group>/<version>/<plural>`.
    pub fn by_plural(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceType>> {
        self.types
            .iter()
            .find(|t| t.group == group && t.version == version && t.plural == plural)
            .cloned()
    }

    /// The type for an object's `apiVersion` and `kind`.
    pub fn by_kind(&self, api_version: &str, kind: &str) -> Option<Arc<ResourceType>> {
        let (group, version) = split_api_version(api_version);
        self.types
            .iter()
            .find(|t| t.group == group && t.version == version && t.kind == kind)
            .cloned()
    }

    /// The group-versions served, core (`v1`) first, in registration order.
    pub fn group_versions(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = Vec::new();
        for t in &self.types {
            let gv = (t.group.clone(), t.version.clone());
            if !out.contains(&gv) {
                out.push(gv);
            }
        }
        out
    }

    /// The types of one group-version.
    pub fn in_group_version<'a>(
        &'a self,
        group: &'a str,
        version: &'a str,
    ) -> impl Iterator<Item = &'a Arc<ResourceType>> + 'a {
        self.types
            .iter()
            .filter(move |t| t.group == group && t.version == version)
    }
}

/// Splits `apps/v1` into (`apps`, `v1`) and `v1` into (``, `v1`).
pub fn split_api_version(api_version: &str) -> (&str, &str) {
    match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_are_found_by_plural_and_kind_and_keyed_by_namespace() {
        let r = Registry::builtin();
        let pods = r.by_plural("", "v1", "pods").expect("pods registered");
        assert_eq!(pods.kind, "Pod");
        assert_eq!(r.by_kind("v1", "Pod").as_deref(), Some(&*pods));
        assert_eq!(
            pods.key(Some("default"), "web"),
            "/registry/pods/default/web"
        );
        let deploy = r
            .by_kind("apps/v1", "Deployment")
            .expect("deployments registered");
        assert_eq!(
            deploy.key(Some("ns"), "d"),
            "/registry/deployments.apps/ns/d"
        );
        let nodes = r.by_plural("", "v1", "nodes").expect("nodes registered");
        assert_eq!(nodes.key(None, "n1"), "/registry/nodes/n1");
    }

    #[test]
    fn review_kinds_serve_only_create_and_stored_kinds_every_verb() {
        let r = Registry::builtin();
        for (api_version, kind) in [
            ("authentication.k8s.io/v1", "TokenReview"),
            ("authentication.k8s.io/v1", "SelfSubjectReview"),
            ("authorization.k8s.io/v1", "SubjectAccessReview"),
            ("authorization.k8s.io/v1", "SelfSubjectAccessReview"),
            ("authorization.k8s.io/v1", "LocalSubjectAccessReview"),
            ("authorization.k8s.io/v1", "SelfSubjectRulesReview"),
        ] {
            let t = r
                .by_kind(api_version, kind)
                .expect("review kind registered");
            assert_eq!(t.verbs(), ["create"], "{kind}");
            assert!(!t.supports("list"), "{kind}");
        }
        let local = r
            .by_kind("authorization.k8s.io/v1", "LocalSubjectAccessReview")
            .expect("registered");
        assert!(local.namespaced);
        let roles = r
            .by_plural("rbac.authorization.k8s.io", "v1", "roles")
            .expect("roles registered");
        assert!(roles.namespaced && roles.supports("watch") && roles.verbs().len() == 8);
        let csr = r
            .by_kind("certificates.k8s.io/v1", "CertificateSigningRequest")
            .expect("csr registered");
        assert_eq!(csr.short_names, ["csr"]);
        assert!(
            !csr.namespaced && csr.has_subresource("approval") && csr.has_subresource("status")
        );
        let sa = r.by_plural("", "v1", "serviceaccounts").expect("sa");
        assert!(sa.has_subresource("token"));
        assert_eq!(
            r.by_plural("", "v1", "pods").expect("pods").verbs(),
            builtin::READ_WRITE
        );
    }

    #[test]
    fn core_and_events_groups_do_not_collide() {
        let r = Registry::builtin();
        let core_ev = r.by_kind("v1", "Event").expect("core events");
        let ev = r
            .by_kind("events.k8s.io/v1", "Event")
            .expect("events.k8s.io events");
        assert_ne!(core_ev.key_prefix(), ev.key_prefix());
    }
}
