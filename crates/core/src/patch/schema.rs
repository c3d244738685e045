//! Navigation of the type graph while patching: which definition a nested field has and how its
//! lists merge. Upstream walks Go struct types (`LookupPatchMetaForStruct`); tandem walks the
//! OpenAPI definitions of [`crate::openapi::definitions`] plus the struct-tag table of
//! [`super::strategy`].

use std::collections::HashMap;
use std::sync::OnceLock;

use serde_json::Value;

use super::strategy::{self, FieldStrategy};
use crate::openapi;

/// The type of a value being patched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ty {
    /// No schema known (custom resources, unknown fields): lists are replaced, maps merged.
    Unknown,
    /// An object of this OpenAPI definition.
    Def(&'static str),
    /// A map (`additionalProperties`) whose values are objects of this definition.
    MapOf(&'static str),
}

/// What the type graph says about one field of an object.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Field {
    /// The upstream patch strategy, if the field has one.
    pub strategy: Option<FieldStrategy>,
    /// The type of the value, or of its items for a list.
    pub ty: Ty,
    /// For server-side apply: the list-map keys (defaults to the merge key).
    pub list_keys: Option<&'static [&'static str]>,
}

impl Ty {
    /// The type of a root object named by its definition; `Unknown` for `None` or names that are
    /// not published.
    pub fn root(definition: Option<&str>) -> Ty {
        definition
            .and_then(|d| openapi::definitions().get_key_value(d))
            .map_or(Ty::Unknown, |(name, _)| Ty::Def(name.as_str()))
    }

    /// The definition name, for object types.
    pub fn definition(self) -> Option<&'static str> {
        match self {
            Ty::Def(d) => Some(d),
            _ => None,
        }
    }

    /// Facts about field `name` of a value of this type.
    pub fn field(self, name: &str) -> Field {
        match self {
            Ty::Unknown => Field {
                strategy: None,
                ty: Ty::Unknown,
                list_keys: None,
            },
            Ty::MapOf(d) => Field {
                strategy: None,
                ty: Ty::Def(d),
                list_keys: None,
            },
            Ty::Def(d) => field_table()
                .get(d)
                .and_then(|fields| fields.get(name))
                .copied()
                .unwrap_or_else(|| field_of(d, name, None)),
        }
    }
}

/// The fields of every published definition, worked out once. Tracking `managedFields` asks for
/// every field of every object written; searching the definitions by name for each took about a
/// third of that work in `tandem bench scheduler`'s pod creates.
fn field_table() -> &'static HashMap<&'static str, HashMap<&'static str, Field>> {
    static TABLE: OnceLock<HashMap<&'static str, HashMap<&'static str, Field>>> = OnceLock::new();
    TABLE.get_or_init(|| {
        openapi::definitions()
            .iter()
            .map(|(d, schema)| {
                let fields = schema
                    .get("properties")
                    .and_then(Value::as_object)
                    .into_iter()
                    .flatten()
                    .map(|(name, property)| (name.as_str(), field_of(d, name, Some(property))))
                    .collect();
                (d.as_str(), fields)
            })
            .collect()
    })
}

/// Field `name` of definition `d`, whose schema is `property` (`None` for a field the definition
/// does not publish).
fn field_of(d: &str, name: &str, property: Option<&'static Value>) -> Field {
    Field {
        strategy: strategy::lookup(d, name).or_else(|| property.and_then(extension)),
        ty: property.map_or(Ty::Unknown, value_type),
        list_keys: strategy::list_map_keys(d, name),
    }
}

/// The `x-kubernetes-patch-strategy`/`x-kubernetes-patch-merge-key` extensions of a property, for
/// definitions the strategy table does not list.
fn extension(property: &'static Value) -> Option<FieldStrategy> {
    let strategy = property.get("x-kubernetes-patch-strategy")?.as_str()?;
    let merge_key = property
        .get("x-kubernetes-patch-merge-key")
        .and_then(Value::as_str);
    Some(FieldStrategy {
        strategy,
        merge_key,
    })
}

/// The definition a `$ref` (possibly wrapped as `allOf: [{$ref}]`) points at.
fn referenced(schema: &'static Value) -> Option<&'static str> {
    let reference = schema.get("$ref").and_then(Value::as_str).or_else(|| {
        schema
            .get("allOf")
            .and_then(Value::as_array)
            .and_then(|all| all.first())
            .and_then(|first| first.get("$ref"))
            .and_then(Value::as_str)
    })?;
    let name = reference.rsplit('/').next()?;
    openapi::definitions()
        .get_key_value(name)
        .map(|(k, _)| k.as_str())
}

/// The type of a property's value (for arrays: of its items).
fn value_type(property: &'static Value) -> Ty {
    if let Some(d) = referenced(property) {
        return Ty::Def(d);
    }
    if let Some(items) = property.get("items") {
        return value_type(items);
    }
    if let Some(d) = property.get("additionalProperties").and_then(referenced) {
        return Ty::MapOf(d);
    }
    Ty::Unknown
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_walks_from_deployment_to_container() {
        let deployment = Ty::root(Some("io.k8s.api.apps.v1.Deployment"));
        let container = deployment
            .field("spec")
            .ty
            .field("template")
            .ty
            .field("spec")
            .ty
            .field("containers");
        assert_eq!(container.ty, Ty::Def("io.k8s.api.core.v1.Container"));
        assert_eq!(container.strategy.and_then(|s| s.merge_key), Some("name"));
        assert_eq!(
            deployment.field("metadata").ty,
            Ty::Def("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta")
        );
        assert_eq!(Ty::root(Some("no.such.Kind")), Ty::Unknown);
    }

    #[test]
    fn fields_keep_their_strategy_and_list_keys() {
        let pod_spec = Ty::Def("io.k8s.api.core.v1.PodSpec");
        let containers = pod_spec.field("containers");
        assert_eq!(containers.ty, Ty::Def("io.k8s.api.core.v1.Container"));
        assert_eq!(containers.strategy.and_then(|s| s.merge_key), Some("name"));
        assert_eq!(
            containers.ty.field("ports").list_keys,
            Some(&["containerPort", "protocol"][..])
        );
        assert_eq!(
            pod_spec.field("topologySpreadConstraints").list_keys,
            Some(&["topologyKey", "whenUnsatisfiable"][..])
        );
        let unknown = pod_spec.field("noSuchField");
        assert_eq!(unknown.ty, Ty::Unknown);
        assert!(unknown.strategy.is_none());
    }
}
