//! The resource registry: every resource type the API server serves, with the facts discovery,
//! routing, storage keys and `kubectl` need (group, version, kind, plural, scope, short names,
//! categories, subresources).
//!
//! The table is data, not code paths: adding a resource (or, later, a custom resource definition)
//! is adding a `ResourceType` value. Mirrors the per-resource facts upstream keeps in each
//! `registry/<group>/<resource>/storage` package.

use std::sync::Arc;

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

    /// The verbs discovery advertises for the main resource.
    pub fn verbs(&self) -> &'static [&'static str] {
        &[
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch",
        ]
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

struct Spec {
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    namespaced: bool,
    short: &'static [&'static str],
    categories: &'static [&'static str],
    sub: &'static [&'static str],
}

const ALL: &[&str] = &["all"];

/// The built-in resources, in discovery order.
const BUILTIN: &[Spec] = &[
    Spec {
        group: "",
        version: "v1",
        kind: "Namespace",
        plural: "namespaces",
        namespaced: false,
        short: &["ns"],
        categories: &[],
        sub: &["status", "finalize"],
    },
    Spec {
        group: "",
        version: "v1",
        kind: "Pod",
        plural: "pods",
        namespaced: true,
        short: &["po"],
        categories: ALL,
        sub: &[
            "status",
            "binding",
            "ephemeralcontainers",
            "log",
            "exec",
            "attach",
            "portforward",
            "eviction",
        ],
    },
    Spec {
        group: "",
        version: "v1",
        kind: "Node",
        plural: "nodes",
        namespaced: false,
        short: &["no"],
        categories: &[],
        sub: &["status"],
    },
    Spec {
        group: "",
        version: "v1",
        kind: "Service",
        plural: "services",
        namespaced: true,
        short: &["svc"],
        categories: ALL,
        sub: &["status"],
    },
    Spec {
        group: "",
        version: "v1",
        kind: "Endpoints",
        plural: "endpoints",
        namespaced: true,
        short: &["ep"],
        categories: &[],
        sub: &[],
    },
    Spec {
        group: "",
        version: "v1",
        kind: "ConfigMap",
        plural: "configmaps",
        namespaced: true,
        short: &["cm"],
        categories: &[],
        sub: &[],
    },
    Spec {
        group: "",
        version: "v1",
        kind: "Secret",
        plural: "secrets",
        namespaced: true,
        short: &[],
        categories: &[],
        sub: &[],
    },
    Spec {
        group: "",
        version: "v1",
        kind: "ServiceAccount",
        plural: "serviceaccounts",
        namespaced: true,
        short: &["sa"],
        categories: &[],
        sub: &[],
    },
    Spec {
        group: "",
        version: "v1",
        kind: "Event",
        plural: "events",
        namespaced: true,
        short: &["ev"],
        categories: &[],
        sub: &[],
    },
    Spec {
        group: "",
        version: "v1",
        kind: "ReplicationController",
        plural: "replicationcontrollers",
        namespaced: true,
        short: &["rc"],
        categories: ALL,
        sub: &["status", "scale"],
    },
    Spec {
        group: "",
        version: "v1",
        kind: "PersistentVolumeClaim",
        plural: "persistentvolumeclaims",
        namespaced: true,
        short: &["pvc"],
        categories: &[],
        sub: &["status"],
    },
    Spec {
        group: "",
        version: "v1",
        kind: "PersistentVolume",
        plural: "persistentvolumes",
        namespaced: false,
        short: &["pv"],
        categories: &[],
        sub: &["status"],
    },
    Spec {
        group: "",
        version: "v1",
        kind: "LimitRange",
        plural: "limitranges",
        namespaced: true,
        short: &["limits"],
        categories: &[],
        sub: &[],
    },
    Spec {
        group: "",
        version: "v1",
        kind: "ResourceQuota",
        plural: "resourcequotas",
        namespaced: true,
        short: &["quota"],
        categories: &[],
        sub: &["status"],
    },
    Spec {
        group: "",
        version: "v1",
        kind: "PodTemplate",
        plural: "podtemplates",
        namespaced: true,
        short: &[],
        categories: &[],
        sub: &[],
    },
    Spec {
        group: "apps",
        version: "v1",
        kind: "Deployment",
        plural: "deployments",
        namespaced: true,
        short: &["deploy"],
        categories: ALL,
        sub: &["status", "scale"],
    },
    Spec {
        group: "apps",
        version: "v1",
        kind: "ReplicaSet",
        plural: "replicasets",
        namespaced: true,
        short: &["rs"],
        categories: ALL,
        sub: &["status", "scale"],
    },
    Spec {
        group: "apps",
        version: "v1",
        kind: "DaemonSet",
        plural: "daemonsets",
        namespaced: true,
        short: &["ds"],
        categories: ALL,
        sub: &["status"],
    },
    Spec {
        group: "apps",
        version: "v1",
        kind: "StatefulSet",
        plural: "statefulsets",
        namespaced: true,
        short: &["sts"],
        categories: ALL,
        sub: &["status", "scale"],
    },
    Spec {
        group: "apps",
        version: "v1",
        kind: "ControllerRevision",
        plural: "controllerrevisions",
        namespaced: true,
        short: &[],
        categories: &[],
        sub: &[],
    },
    Spec {
        group: "batch",
        version: "v1",
        kind: "Job",
        plural: "jobs",
        namespaced: true,
        short: &[],
        categories: ALL,
        sub: &["status"],
    },
    Spec {
        group: "batch",
        version: "v1",
        kind: "CronJob",
        plural: "cronjobs",
        namespaced: true,
        short: &["cj"],
        categories: ALL,
        sub: &["status"],
    },
    Spec {
        group: "node.k8s.io",
        version: "v1",
        kind: "RuntimeClass",
        plural: "runtimeclasses",
        namespaced: false,
        short: &[],
        categories: &[],
        sub: &[],
    },
    Spec {
        group: "coordination.k8s.io",
        version: "v1",
        kind: "Lease",
        plural: "leases",
        namespaced: true,
        short: &[],
        categories: &[],
        sub: &[],
    },
    Spec {
        group: "discovery.k8s.io",
        version: "v1",
        kind: "EndpointSlice",
        plural: "endpointslices",
        namespaced: true,
        short: &[],
        categories: &[],
        sub: &[],
    },
    Spec {
        group: "events.k8s.io",
        version: "v1",
        kind: "Event",
        plural: "events",
        namespaced: true,
        short: &["ev"],
        categories: &[],
        sub: &[],
    },
    Spec {
        group: "windows.k8s.io",
        version: "v1",
        kind: "GMSACredentialSpec",
        plural: "gmsacredentialspecs",
        namespaced: false,
        short: &[],
        categories: &[],
        sub: &[],
    },
];

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
                })
            })
            .collect();
        Registry { types }
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
    fn core_and_events_groups_do_not_collide() {
        let r = Registry::builtin();
        let core_ev = r.by_kind("v1", "Event").expect("core events");
        let ev = r
            .by_kind("events.k8s.io/v1", "Event")
            .expect("events.k8s.io events");
        assert_ne!(core_ev.key_prefix(), ev.key_prefix());
    }
}
