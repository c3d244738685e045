//! The part of an encoded object that label and field selectors read, decoded without the rest.
//!
//! A watch with a selector decides for every change whether the object matches, and the watch
//! cache works out each version's labels and selectable fields once. Decoding a whole pod into a
//! `serde_json::Value` for that (its containers, managedFields, conditions) was a twentieth of the
//! CPU of `tandem bench scheduler`, whose scheduler and bench watch pods by `spec.nodeName`.
//!
//! Every selectable field of every kind ([`super::selectable_fields`]) is `metadata.name`,
//! `metadata.namespace`, a scalar at the top level, a scalar field of a top-level object
//! (`spec.nodeName`, `involvedObject.kind`, `source.component`) or a scalar field of the first item
//! of a list in such an object (`status.podIPs[0].ip`). The outline keeps exactly those shapes,
//! plus `metadata.labels`; everything else is skipped by the parser without being built.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// The outline of the JSON object in `json`: what [`super::selectable_fields`] and
/// `metadata.labels` need, with everything else left out. `None` when `json` is not valid JSON.
pub fn selection_outline(json: &[u8]) -> Option<Value> {
    let mut de = serde_json::Deserializer::from_slice(json);
    let value = Outline::Root.deserialize(&mut de).ok()?;
    de.end().ok()?;
    Some(value)
}

/// Where in the object a value sits, which decides what of it the outline keeps.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Outline {
    /// The object itself: every member, `metadata` as [`Outline::Metadata`], the rest as
    /// [`Outline::Top`].
    Root,
    /// `metadata`: `name`, `namespace` and `labels`.
    Metadata,
    /// A top-level member: a scalar, or an object whose members are [`Outline::Field`]s.
    Top,
    /// A member of a top-level object: a scalar, or the first item of a list as
    /// [`Outline::Item`].
    Field,
    /// The first item of a list in a top-level object, or `metadata.labels`: its scalar members.
    Item,
    /// Only a scalar; objects and lists are skipped.
    Scalar,
}

impl Outline {
    /// How a member named `key` of an object at this place is kept.
    fn member(self, key: &str) -> Option<Outline> {
        match self {
            Outline::Root if key == "metadata" => Some(Outline::Metadata),
            Outline::Root => Some(Outline::Top),
            Outline::Metadata => match key {
                "name" | "namespace" => Some(Outline::Scalar),
                "labels" => Some(Outline::Item),
                _ => None,
            },
            Outline::Top => Some(Outline::Field),
            Outline::Item => Some(Outline::Scalar),
            Outline::Field | Outline::Scalar => None,
        }
    }

    /// Whether a value decoded at this place is kept: scalars always, objects where their
    /// members are wanted, lists only where their first item is.
    fn keeps(self, value: &Value) -> bool {
        match value {
            Value::Object(_) => !matches!(self, Outline::Field | Outline::Scalar),
            Value::Array(_) => self == Outline::Field,
            _ => true,
        }
    }

    /// How the first item of a list at this place is kept.
    fn first_item(self) -> Option<Outline> {
        (self == Outline::Field).then_some(Outline::Item)
    }
}

impl<'de> DeserializeSeed<'de> for Outline {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Outline {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        if let Some(item) = self.first_item()
            && let Some(first) = seq.next_element_seed(item)?
        {
            items.push(first);
        }
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(Key(key)) = map.next_key()? {
            let Some(place) = self.member(&key) else {
                map.next_value::<IgnoredAny>()?;
                continue;
            };
            let value = map.next_value_seed(place)?;
            // An object or list in a place that keeps none was skipped; leave out its husk.
            if !place.keeps(&value) {
                continue;
            }
            out.insert(key.into_owned(), value);
        }
        Ok(Value::Object(out))
    }
}

/// An object key, borrowed from the input unless it has escapes: most keys are skipped, and
/// only the kept ones are copied.
struct Key<'de>(Cow<'de, str>);

impl<'de> de::Deserialize<'de> for Key<'de> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object key")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_string())))
            }
            fn visit_string<E>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::registry::ResourceType;
    use crate::selector::selectable_fields;

    fn rt(group: &str, plural: &str, namespaced: bool) -> ResourceType {
        ResourceType {
            group: group.into(),
            version: "v1".into(),
            kind: String::new(),
            plural: plural.into(),
            singular: String::new(),
            namespaced,
            short_names: Vec::new(),
            categories: Vec::new(),
            subresources: Vec::new(),
            verbs: Vec::new(),
        }
    }

    /// The outline gives every kind the same labels and selectable fields as the whole object.
    #[test]
    fn selectable_fields_and_labels_are_those_of_the_whole_object() {
        let cases = [
            (
                rt("", "pods", true),
                json!({
                    "metadata": {"name": "web-1", "namespace": "shop", "labels": {"app": "web", "tier": "front"},
                        "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {"f:containers": {}}}}]},
                    "spec": {"nodeName": "win-2022", "restartPolicy": "Always", "schedulerName": "default-scheduler",
                        "serviceAccountName": "default", "hostNetwork": true,
                        "containers": [{"name": "iis", "image": "iis:ltsc2022", "resources": {"requests": {"cpu": "1"}}}]},
                    "status": {"phase": "Running", "podIP": "10.0.0.9", "nominatedNodeName": "n2",
                        "podIPs": [{"ip": "10.0.0.7"}, {"ip": "fd00::7"}],
                        "conditions": [{"type": "Ready", "status": "True"}]}
                }),
            ),
            (
                rt("", "events", true),
                json!({
                    "metadata": {"name": "e1", "namespace": "shop"},
                    "involvedObject": {"kind": "Pod", "namespace": "shop", "name": "web-1", "uid": "u1",
                        "apiVersion": "v1", "resourceVersion": "7", "fieldPath": "spec.containers{iis}"},
                    "reason": "Scheduled", "source": {"component": "default-scheduler"}, "type": "Normal"
                }),
            ),
            (
                rt("events.k8s.io", "events", true),
                json!({"metadata": {"name": "e2", "namespace": "shop"}, "reason": "Pulled",
                    "regarding": {"kind": "Pod", "name": "web-1"}, "reportingController": "kubelet", "type": "Normal"}),
            ),
            (
                rt("", "nodes", false),
                json!({"metadata": {"name": "n1", "labels": {"kubernetes.io/os": "windows"}}, "spec": {"unschedulable": true},
                    "status": {"images": [{"names": ["a", "b"]}]}}),
            ),
            (
                rt("batch", "jobs", true),
                json!({"metadata": {"name": "j", "namespace": "d"}, "status": {"succeeded": 3}}),
            ),
            (
                rt("", "secrets", true),
                json!({"metadata": {"name": "s", "namespace": "d"}, "type": "Opaque", "data": {"k": "dg=="}}),
            ),
            (
                rt("", "replicationcontrollers", true),
                json!({"metadata": {"name": "rc", "namespace": "d"}, "status": {"replicas": 2}}),
            ),
        ];
        for (rt, obj) in cases {
            let encoded = serde_json::to_vec(&obj).expect("encodes");
            let outline = selection_outline(&encoded).expect("outline of valid JSON");
            assert_eq!(
                selectable_fields(&rt, &outline),
                selectable_fields(&rt, &obj),
                "{}",
                rt.plural
            );
            assert_eq!(
                outline.pointer("/metadata/labels"),
                obj.pointer("/metadata/labels")
            );
        }
    }

    #[test]
    fn deep_values_and_later_list_items_are_left_out() {
        let obj = json!({
            "metadata": {"name": "a", "uid": "u", "managedFields": [{"manager": "m"}], "labels": {"x": "y"}},
            "spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}, {"name": "b"}],
                "affinity": {"nodeAffinity": {}}}
        });
        let outline =
            selection_outline(&serde_json::to_vec(&obj).expect("encodes")).expect("valid");
        assert_eq!(
            outline,
            json!({"metadata": {"name": "a", "labels": {"x": "y"}}, "spec": {"containers": [{"name": "a"}]}})
        );
    }

    #[test]
    fn invalid_json_has_no_outline() {
        assert_eq!(selection_outline(b"{\"a\": "), None);
        assert_eq!(selection_outline(b"{} trailing"), None);
        assert_eq!(selection_outline(b"[1, 2]"), Some(json!([])));
    }
}
