//! Dropping what the schema does not specify, as upstream's decoder does for CRDs with
//! `preserveUnknownFields: false` (all of `apiextensions.k8s.io/v1`).
//!
//! Mirrors `pkg/apiserver/schema/pruning/algorithm.go` (`PruneWithOptions` with the resource
//! root treated as an embedded resource, so `apiVersion`, `kind` and `metadata` stay) and then
//! `defaulting.PruneNonNullableNullsWithoutDefaults`: a `null` where the schema neither allows
//! null nor has a default is removed, silently, as upstream does before defaulting.

use serde_json::Value;

use super::MAX_DEPTH;
use super::compile::{AdditionalProperties, Node};

const META_FIELDS: [&str; 3] = ["apiVersion", "kind", "metadata"];

/// The ObjectMeta fields upstream's decoder keeps in an embedded resource's `metadata`
/// (unknown ones are dropped and reported like other unknown fields).
const OBJECT_META_FIELDS: [&str; 16] = [
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
    "clusterName",
];

/// A path being walked, as upstream's `UnknownFieldPathOptions` prints it: `spec.foo`,
/// `spec.items[0].bar`.
struct Walk {
    parent: Vec<String>,
    unknown: Vec<String>,
}

impl Walk {
    fn record(&mut self, key: &str) {
        let mut p = String::new();
        for seg in &self.parent {
            if seg.starts_with('[') || p.is_empty() {
                p.push_str(seg);
            } else {
                p.push('.');
                p.push_str(seg);
            }
        }
        if p.is_empty() {
            self.unknown.push(key.to_string());
        } else {
            self.unknown.push(format!("{p}.{key}"));
        }
    }
}

/// Prunes `obj` (a resource) and returns the sorted paths of the fields dropped.
pub(crate) fn prune(root: &Node, obj: &mut Value) -> Vec<String> {
    let mut walk = Walk {
        parent: Vec::new(),
        unknown: Vec::new(),
    };
    prune_value(obj, Some(root), true, &mut walk, 0);
    prune_nulls(obj, Some(root), 0);
    walk.unknown.sort();
    walk.unknown
}

/// upstream `prune`; `embedded` is `s.XEmbeddedResource` (forced at the resource root).
fn prune_value(x: &mut Value, s: Option<&Node>, embedded: bool, walk: &mut Walk, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    if let Some(s) = s
        && s.preserve_unknown_fields
    {
        skip_prune(x, s, embedded, walk, depth);
        return;
    }
    match x {
        Value::Object(map) => {
            let Some(s) = s else {
                let keys: Vec<String> = map.keys().cloned().collect();
                for k in keys {
                    walk.record(&k);
                }
                map.clear();
                return;
            };
            let keys: Vec<String> = map.keys().cloned().collect();
            for k in keys {
                if embedded && META_FIELDS.contains(&k.as_str()) {
                    if k == "metadata" && depth > 0 {
                        prune_embedded_metadata(map.get_mut("metadata"), walk);
                    }
                    continue;
                }
                if let Some(prop) = s.properties.get(&k) {
                    walk.parent.push(k.clone());
                    if let Some(v) = map.get_mut(&k) {
                        prune_value(v, Some(prop), prop.embedded_resource, walk, depth + 1);
                    }
                    walk.parent.pop();
                } else if let Some(ap) = &s.additional_properties {
                    walk.parent.push(k.clone());
                    let sub = match ap {
                        AdditionalProperties::Schema(n) => Some(n.as_ref()),
                        AdditionalProperties::Bool(_) => None,
                    };
                    if let Some(v) = map.get_mut(&k) {
                        prune_value(
                            v,
                            sub,
                            sub.is_some_and(|n| n.embedded_resource),
                            walk,
                            depth + 1,
                        );
                    }
                    walk.parent.pop();
                } else {
                    if !META_FIELDS.contains(&k.as_str()) || !walk.parent.is_empty() {
                        walk.record(&k);
                    }
                    map.remove(&k);
                }
            }
        }
        Value::Array(items) => {
            let item_schema = s.and_then(|s| s.items.as_deref());
            for (i, v) in items.iter_mut().enumerate() {
                walk.parent.push(format!("[{i}]"));
                prune_value(
                    v,
                    item_schema,
                    item_schema.is_some_and(|n| n.embedded_resource),
                    walk,
                    depth + 1,
                );
                walk.parent.pop();
            }
        }
        _ => {}
    }
}

/// upstream `skipPrune`: below `x-kubernetes-preserve-unknown-fields`, unknown fields stay but
/// specified ones are still pruned inside.
fn skip_prune(x: &mut Value, s: &Node, embedded: bool, walk: &mut Walk, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    match x {
        Value::Object(map) => {
            let keys: Vec<String> = map.keys().cloned().collect();
            for k in keys {
                if embedded && META_FIELDS.contains(&k.as_str()) {
                    continue;
                }
                let sub: Option<&Node> = if let Some(prop) = s.properties.get(&k) {
                    Some(prop)
                } else if let Some(ap) = &s.additional_properties {
                    match ap {
                        AdditionalProperties::Schema(n) => Some(n.as_ref()),
                        AdditionalProperties::Bool(_) => None,
                    }
                } else {
                    continue;
                };
                // An `additionalProperties: true` next to preserve-unknown-fields prunes the
                // value with no schema, as upstream's `prune(v, nil)` does.
                walk.parent.push(k.clone());
                if let Some(v) = map.get_mut(&k) {
                    prune_value(
                        v,
                        sub,
                        sub.is_some_and(|n| n.embedded_resource),
                        walk,
                        depth + 1,
                    );
                }
                walk.parent.pop();
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = s.items.as_deref() {
                for (i, v) in items.iter_mut().enumerate() {
                    walk.parent.push(format!("[{i}]"));
                    skip_prune(
                        v,
                        item_schema,
                        item_schema.embedded_resource,
                        walk,
                        depth + 1,
                    );
                    walk.parent.pop();
                }
            }
        }
        _ => {}
    }
}

/// An embedded resource's `metadata` keeps only ObjectMeta's fields (upstream decodes it into
/// ObjectMeta, `objectmeta.Coerce`).
fn prune_embedded_metadata(meta: Option<&mut Value>, walk: &mut Walk) {
    let Some(Value::Object(m)) = meta else { return };
    let unknown: Vec<String> = m
        .keys()
        .filter(|k| !OBJECT_META_FIELDS.contains(&k.as_str()))
        .cloned()
        .collect();
    walk.parent.push("metadata".to_string());
    for k in unknown {
        walk.record(&k);
        m.remove(&k);
    }
    walk.parent.pop();
}

/// upstream `PruneNonNullableNullsWithoutDefaults`.
fn prune_nulls(x: &mut Value, s: Option<&Node>, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    match x {
        Value::Object(map) => {
            let keys: Vec<String> = map.keys().cloned().collect();
            for k in keys {
                let schema = s.and_then(|s| s.child(&k));
                let drop = map.get(&k).is_some_and(Value::is_null)
                    && schema.is_some_and(|n| !n.nullable && n.default.is_none());
                if drop {
                    map.remove(&k);
                } else if let Some(v) = map.get_mut(&k) {
                    prune_nulls(v, schema, depth + 1);
                }
            }
        }
        Value::Array(items) => {
            let schema = s.and_then(|s| s.items.as_deref());
            for v in items {
                prune_nulls(v, schema, depth + 1);
            }
        }
        _ => {}
    }
}
