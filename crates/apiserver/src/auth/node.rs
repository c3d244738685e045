//! The Node authorizer and the NodeRestriction admission plugin (upstream's
//! `plugin/pkg/auth/authorizer/node` and `plugin/pkg/admission/noderestriction`).
//!
//! A node agent (`system:node:NAME` in `system:nodes`) may do what the `system:node` role's
//! rules allow, except that Secrets, ConfigMaps, PersistentVolumeClaims, PersistentVolumes and
//! ServiceAccount tokens are readable only when a pod bound to the node uses them, and its Lease
//! is its own. Upstream keeps a graph of these relationships; tandem asks the watch cache for the
//! node's pods in the object's namespace when a node asks, which is the same answer.
//!
//! NodeRestriction then limits what a node writes: its own Node object (without
//! `node-restriction.kubernetes.io/` labels), the status of and evictions for its own pods,
//! mirror pods bound to itself, and tokens bound to its own pods.

use std::sync::OnceLock;

use k8s_openapi::api::rbac::v1::PolicyRule;
use serde_json::Value;
use tandem_core::rbac::rule_allows;

use super::UserInfo;
use super::authz::{Attributes, Decision};
use super::rbac::request_attributes;
use crate::error::ApiError;
use crate::state::State;

/// The label prefix nodes may not set on themselves.
const RESTRICTED_LABEL_PREFIX: &str = "node-restriction.kubernetes.io/";

/// The rules of the bootstrap `system:node` ClusterRole (upstream's `NodeRules()`).
fn node_rules() -> &'static [PolicyRule] {
    static RULES: OnceLock<Vec<PolicyRule>> = OnceLock::new();
    RULES.get_or_init(|| {
        tandem_core::rbac::bootstrap::cluster_roles()
            .into_iter()
            .find(|r| r.metadata.name.as_deref() == Some("system:node"))
            .and_then(|r| r.rules)
            .unwrap_or_default()
    })
}

fn no_relationship(node: &str) -> Decision {
    Decision::NoOpinion(format!(
        "no relationship found between node '{node}' and this object"
    ))
}

/// Upstream's `NodeAuthorizer.Authorize`.
pub fn authorize(state: &State, user: &UserInfo, a: &Attributes) -> Decision {
    let Some(node) = user.node_name() else {
        return Decision::NoOpinion(String::new());
    };
    if !a.resource_request {
        return rules_decision(a);
    }
    match (
        a.api_group.as_str(),
        a.resource.as_str(),
        a.subresource.as_str(),
    ) {
        ("", "secrets" | "configmaps" | "persistentvolumeclaims", "") => {
            if !matches!(a.verb.as_str(), "get" | "list" | "watch") || a.name.is_empty() {
                return Decision::NoOpinion(format!(
                    "can only read individual {} referenced by pods bound to node '{node}'",
                    a.resource
                ));
            }
            let field = match a.resource.as_str() {
                "secrets" => Reference::Secret,
                "configmaps" => Reference::ConfigMap,
                _ => Reference::Claim,
            };
            if pods_on_node_reference(state, node, &a.namespace, field, &a.name) {
                Decision::Allow
            } else {
                no_relationship(node)
            }
        }
        ("", "persistentvolumes", "") => {
            if a.verb == "get" && pv_used_on_node(state, node, &a.name) {
                Decision::Allow
            } else {
                no_relationship(node)
            }
        }
        ("", "serviceaccounts", "token") => {
            if a.verb == "create"
                && pods_on_node_reference(
                    state,
                    node,
                    &a.namespace,
                    Reference::ServiceAccount,
                    &a.name,
                )
            {
                Decision::Allow
            } else {
                no_relationship(node)
            }
        }
        ("coordination.k8s.io", "leases", _) => {
            let verb_ok = matches!(
                a.verb.as_str(),
                "get" | "create" | "update" | "patch" | "delete"
            );
            if a.namespace == "kube-node-lease" && verb_ok && (a.name == node || a.verb == "create")
            {
                Decision::Allow
            } else {
                Decision::NoOpinion(
                    "can only access node lease with the same name as the requesting node"
                        .to_string(),
                )
            }
        }
        _ => rules_decision(a),
    }
}

fn rules_decision(a: &Attributes) -> Decision {
    let req = request_attributes(a);
    if node_rules().iter().any(|r| rule_allows(r, &req)) {
        Decision::Allow
    } else {
        Decision::NoOpinion(String::new())
    }
}

/// What a pod may reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reference {
    Secret,
    ConfigMap,
    Claim,
    ServiceAccount,
}

/// The pods bound to `node` in `namespace`, parsed.
fn pods_on_node(state: &State, node: &str, namespace: &str) -> Vec<Value> {
    let Some(rt) = state.registry.by_plural("", "v1", "pods") else {
        return Vec::new();
    };
    let prefix = rt.namespace_prefix(Some(namespace));
    state
        .cache
        .snapshot(&rt, &prefix, |o| {
            o.attrs(&rt).fields.get("spec.nodeName") == Some(node)
        })
        .items
        .iter()
        .filter_map(|o| o.to_value())
        .collect()
}

fn pods_on_node_reference(
    state: &State,
    node: &str,
    namespace: &str,
    what: Reference,
    name: &str,
) -> bool {
    if namespace.is_empty() {
        return false;
    }
    pods_on_node(state, node, namespace)
        .iter()
        .any(|pod| pod_references(pod, what).iter().any(|n| n == name))
}

fn pv_used_on_node(state: &State, node: &str, pv: &str) -> bool {
    let Some(rt) = state.registry.by_plural("", "v1", "persistentvolumeclaims") else {
        return false;
    };
    // The claims bound to this volume, then whether a pod on the node uses one of them.
    let claims = state.cache.snapshot(&rt, &rt.key_prefix(), |_| true).items;
    claims.iter().filter_map(|o| o.to_value()).any(|claim| {
        claim.pointer("/spec/volumeName").and_then(Value::as_str) == Some(pv)
            && match (
                claim.pointer("/metadata/namespace").and_then(Value::as_str),
                claim.pointer("/metadata/name").and_then(Value::as_str),
            ) {
                (Some(ns), Some(name)) => {
                    pods_on_node_reference(state, node, ns, Reference::Claim, name)
                }
                _ => false,
            }
    })
}

/// The names of the objects of one kind a pod references (upstream's graph edges: volumes,
/// projected sources, env and envFrom of every container, image pull secrets).
fn pod_references(pod: &Value, what: Reference) -> Vec<String> {
    let mut out = Vec::new();
    let Some(spec) = pod.get("spec") else {
        return out;
    };
    let push = |v: Option<&Value>, out: &mut Vec<String>| {
        if let Some(s) = v.and_then(Value::as_str).filter(|s| !s.is_empty()) {
            out.push(s.to_string());
        }
    };
    let items = |v: Option<&Value>| -> Vec<Value> {
        v.and_then(Value::as_array).cloned().unwrap_or_default()
    };
    match what {
        Reference::ServiceAccount => {
            let sa = spec
                .get("serviceAccountName")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .unwrap_or("default");
            out.push(sa.to_string());
        }
        Reference::Claim => {
            for v in items(spec.get("volumes")) {
                push(v.pointer("/persistentVolumeClaim/claimName"), &mut out);
                // A generic ephemeral volume's claim is named `<pod>-<volume>`.
                if v.get("ephemeral").is_some()
                    && let (Some(pod), Some(vol)) = (
                        pod.pointer("/metadata/name").and_then(Value::as_str),
                        v.get("name").and_then(Value::as_str),
                    )
                {
                    out.push(format!("{pod}-{vol}"));
                }
            }
        }
        Reference::Secret | Reference::ConfigMap => {
            let (volume_key, name_key, env_key) = if what == Reference::Secret {
                ("secret", "secretName", "secretKeyRef")
            } else {
                ("configMap", "name", "configMapKeyRef")
            };
            let ref_key = if what == Reference::Secret {
                "secretRef"
            } else {
                "configMapRef"
            };
            if what == Reference::Secret {
                for s in items(spec.get("imagePullSecrets")) {
                    push(s.get("name"), &mut out);
                }
            }
            for v in items(spec.get("volumes")) {
                push(v.get(volume_key).and_then(|s| s.get(name_key)), &mut out);
                for source in items(v.pointer("/projected/sources")) {
                    push(source.get(volume_key).and_then(|s| s.get("name")), &mut out);
                }
                if what == Reference::Secret {
                    for key in ["csi", "cephfs", "azureFile", "flexVolume", "iscsi", "rbd"] {
                        push(
                            v.get(key)
                                .and_then(|s| {
                                    s.get("secretRef").or_else(|| s.get("nodePublishSecretRef"))
                                })
                                .and_then(|s| s.get("name")),
                            &mut out,
                        );
                    }
                    push(v.pointer("/azureFile/secretName"), &mut out);
                }
            }
            for list in ["containers", "initContainers", "ephemeralContainers"] {
                for c in items(spec.get(list)) {
                    for e in items(c.get("env")) {
                        push(e.pointer(&format!("/valueFrom/{env_key}/name")), &mut out);
                    }
                    for e in items(c.get("envFrom")) {
                        push(e.get(ref_key).and_then(|r| r.get("name")), &mut out);
                    }
                }
            }
        }
    }
    out
}

/// NodeRestriction: what a node may write, checked after decoding and before storing. `obj` is
/// the new object (none for deletes), `old` the stored one.
pub fn admit(
    state: &State,
    user: &UserInfo,
    verb: &str,
    rt: &tandem_core::registry::ResourceType,
    sub: Option<&str>,
    obj: Option<&Value>,
    old: Option<&Value>,
) -> Result<(), ApiError> {
    let Some(node) = user.node_name() else {
        return Ok(());
    };
    let forbidden = |msg: String| Err(ApiError::forbidden(msg));
    let node_of = |v: Option<&Value>| {
        v.and_then(|v| v.pointer("/spec/nodeName"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    match (rt.group.as_str(), rt.plural.as_str(), sub) {
        ("", "pods", None) => match verb {
            "create" => {
                let mirror = obj
                    .and_then(|o| o.pointer("/metadata/annotations/kubernetes.io~1config.mirror"))
                    .is_some();
                if !mirror {
                    return forbidden(format!(
                        "pod does not have \"kubernetes.io/config.mirror\" annotation, node \"{node}\" can only create mirror pods"
                    ));
                }
                if node_of(obj) != node {
                    return forbidden(format!(
                        "node \"{node}\" can only create pods with spec.nodeName set to itself"
                    ));
                }
                Ok(())
            }
            "delete" if node_of(old) != node => forbidden(format!(
                "node \"{node}\" can only delete pods with spec.nodeName set to itself"
            )),
            _ => Ok(()),
        },
        ("", "pods", Some("status")) if node_of(old) != node => forbidden(format!(
            "node \"{node}\" can only update pod status for pods with spec.nodeName set to itself"
        )),
        ("", "pods", Some("eviction")) if node_of(old) != node => forbidden(format!(
            "node \"{node}\" can only evict pods with spec.nodeName set to itself"
        )),
        ("storage.k8s.io", "csinodes", _) => {
            let name = obj
                .or(old)
                .and_then(|o| o.pointer("/metadata/name"))
                .and_then(Value::as_str)
                .unwrap_or_default();
            if name != node {
                return forbidden(
                    "can only access CSINode with the same name as the requesting node".to_string(),
                );
            }
            Ok(())
        }
        ("", "nodes", _) => {
            let name = obj
                .or(old)
                .and_then(|o| o.pointer("/metadata/name"))
                .and_then(Value::as_str)
                .unwrap_or_default();
            if verb == "delete" {
                return forbidden(format!("node \"{node}\" is not allowed to delete nodes"));
            }
            if name != node {
                return forbidden(format!(
                    "node \"{node}\" is not allowed to modify node \"{name}\""
                ));
            }
            let restricted = |v: Option<&Value>| -> Vec<(String, Value)> {
                v.and_then(|v| v.pointer("/metadata/labels"))
                    .and_then(Value::as_object)
                    .map(|m| {
                        m.iter()
                            .filter(|(k, _)| is_restricted_label(k))
                            .map(|(k, v)| (k.clone(), v.clone()))
                            .collect()
                    })
                    .unwrap_or_default()
            };
            let new_labels = restricted(obj);
            if verb == "create" {
                if !new_labels.is_empty() {
                    let keys: Vec<&str> = new_labels.iter().map(|(k, _)| k.as_str()).collect();
                    return forbidden(format!(
                        "node \"{node}\" is not allowed to set the following labels: {}",
                        keys.join(", ")
                    ));
                }
                return Ok(());
            }
            let old_labels = restricted(old);
            let mut changed: Vec<&str> = new_labels
                .iter()
                .filter(|l| !old_labels.contains(l))
                .map(|(k, _)| k.as_str())
                .collect();
            changed.extend(
                old_labels
                    .iter()
                    .filter(|(k, _)| !new_labels.iter().any(|(n, _)| n == k))
                    .map(|(k, _)| k.as_str()),
            );
            if !changed.is_empty() {
                return forbidden(format!(
                    "node \"{node}\" is not allowed to modify labels: {}",
                    changed.join(", ")
                ));
            }
            Ok(())
        }
        ("", "serviceaccounts", Some("token")) => {
            let bound = obj.and_then(|o| o.pointer("/spec/boundObjectRef"));
            let kind = bound
                .and_then(|b| b.get("kind"))
                .and_then(Value::as_str)
                .unwrap_or_default();
            if kind != "Pod" {
                return forbidden(format!(
                    "node \"{node}\" requested token not bound to a pod"
                ));
            }
            let pod_name = bound
                .and_then(|b| b.get("name"))
                .and_then(Value::as_str)
                .unwrap_or_default();
            let ns = old
                .and_then(|o| o.pointer("/metadata/namespace"))
                .and_then(Value::as_str)
                .unwrap_or_default();
            let pod = super::authn::cached_value(state, "pods", Some(ns), pod_name);
            if node_of(pod.as_ref()) != node {
                return forbidden(format!(
                    "node \"{node}\" requested token bound to a pod scheduled on a different node"
                ));
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

fn is_restricted_label(key: &str) -> bool {
    let prefix = key.split_once('/').map(|(p, _)| p).unwrap_or("");
    key.starts_with(RESTRICTED_LABEL_PREFIX) || prefix.ends_with(".node-restriction.kubernetes.io")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pods_reference_their_secrets_config_maps_claims_and_account() {
        let pod = json!({"metadata": {"name": "p"}, "spec": {
            "imagePullSecrets": [{"name": "pull"}],
            "volumes": [
                {"name": "a", "secret": {"secretName": "vol"}},
                {"name": "b", "configMap": {"name": "cm"}},
                {"name": "c", "projected": {"sources": [{"secret": {"name": "proj"}}, {"configMap": {"name": "pcm"}}]}},
                {"name": "d", "persistentVolumeClaim": {"claimName": "data"}},
                {"name": "e", "ephemeral": {"volumeClaimTemplate": {}}}
            ],
            "containers": [{"name": "c", "env": [
                {"name": "X", "valueFrom": {"secretKeyRef": {"name": "env", "key": "k"}}},
                {"name": "Y", "valueFrom": {"configMapKeyRef": {"name": "envcm", "key": "k"}}}
            ], "envFrom": [{"secretRef": {"name": "from"}}]}]
        }});
        let mut secrets = pod_references(&pod, Reference::Secret);
        secrets.sort();
        assert_eq!(secrets, ["env", "from", "proj", "pull", "vol"]);
        let mut cms = pod_references(&pod, Reference::ConfigMap);
        cms.sort();
        assert_eq!(cms, ["cm", "envcm", "pcm"]);
        assert_eq!(pod_references(&pod, Reference::Claim), ["data", "p-e"]);
        assert_eq!(pod_references(&pod, Reference::ServiceAccount), ["default"]);
    }

    #[test]
    fn restricted_labels() {
        assert!(is_restricted_label("node-restriction.kubernetes.io/pool"));
        assert!(is_restricted_label("a.node-restriction.kubernetes.io/x"));
        assert!(!is_restricted_label("kubernetes.io/os"));
    }
}
