//! Applying schema defaults, as upstream `pkg/apiserver/schema/defaulting/algorithm.go`
//! (`Default`) does: a property missing from an object, or `null` where the property is not
//! nullable, takes a deep copy of its default, and defaulting continues inside it; array items
//! and additionalProperties values that are `null` where not nullable take the items' or
//! values' default. Defaults never apply at the root of a resource (upstream forbids them there
//! and in top-level metadata when the CRD is validated).

use serde_json::Value;

use super::MAX_DEPTH;
use super::compile::Node;

fn is_non_nullable_null(x: Option<&Value>, s: Option<&Node>) -> bool {
    x.is_some_and(Value::is_null) && s.is_some_and(|s| !s.nullable)
}

/// upstream `Default`.
pub(crate) fn default(x: &mut Value, s: &Node, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    match x {
        Value::Object(map) => {
            for (k, prop) in &s.properties {
                let Some(d) = &prop.default else { continue };
                let missing = !map.contains_key(k);
                if missing || is_non_nullable_null(map.get(k), Some(prop)) {
                    map.insert(k.clone(), d.clone());
                }
            }
            let ap = s.additional_schema();
            for (k, v) in map.iter_mut() {
                if let Some(prop) = s.properties.get(k) {
                    default(v, prop, depth + 1);
                } else if let Some(ap) = ap {
                    if is_non_nullable_null(Some(v), Some(ap))
                        && let Some(d) = &ap.default
                    {
                        *v = d.clone();
                    }
                    default(v, ap, depth + 1);
                }
            }
        }
        Value::Array(items) => {
            let Some(item_schema) = s.items.as_deref() else {
                return;
            };
            for v in items.iter_mut() {
                if is_non_nullable_null(Some(v), Some(item_schema))
                    && let Some(d) = &item_schema.default
                {
                    *v = d.clone();
                }
                default(v, item_schema, depth + 1);
            }
        }
        _ => {}
    }
}
