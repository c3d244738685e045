//! Navigation of the type graph while patching: which definition a nested field has and how its
//! lists merge. Upstream walks Go struct types (`LookupPatchMetaForStruct`); tandem walks the
//! OpenAPI definitions of [`crate::openapi::definitions`] plus the struct-tag table of
//! [`super::strategy`].

use std::collections::HashMap;
use std::sync::OnceLock;

use serde_json::Value;

use super::strategy::{self, FieldStrategy};
use crate::apiextensions::schema::{AdditionalProperties, Node, Structural};
use crate::openapi;

/// The type of a value being patched.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Ty<'s> {
    /// No schema known (unknown fields, custom resources without a schema): lists are
    /// replaced, maps merged.
    Unknown,
    /// An object of this OpenAPI definition.
    Def(&'static str),
    /// A map (`additionalProperties`) whose values are objects of this definition.
    MapOf(&'static str),
    /// A node of a CustomResourceDefinition's structural schema: its
    /// `x-kubernetes-list-type`, `x-kubernetes-list-map-keys` and `x-kubernetes-map-type` say
    /// how lists and maps merge, as upstream's structured-merge-diff reads them.
    Schema(&'s Node),
    /// A resource root (or an embedded resource) of a structural schema: `metadata` is an
    /// `ObjectMeta` whatever the schema says.
    Resource(&'s Node),
}

impl PartialEq for Ty<'_> {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Ty::Unknown, Ty::Unknown) => true,
            (Ty::Def(a), Ty::Def(b)) | (Ty::MapOf(a), Ty::MapOf(b)) => a == b,
            (Ty::Schema(a), Ty::Schema(b)) | (Ty::Resource(a), Ty::Resource(b)) => {
                std::ptr::eq(*a, *b)
            }
            _ => false,
        }
    }
}

/// Where the type of an object comes from: a built-in kind's OpenAPI definition or a custom
/// resource's structural schema.
#[derive(Debug, Clone, Copy, Default)]
pub enum Schema<'s> {
    #[default]
    Unknown,
    Definition(&'s str),
    Structural(&'s Structural),
}

impl<'s> From<Option<&'s str>> for Schema<'s> {
    fn from(definition: Option<&'s str>) -> Schema<'s> {
        definition.map_or(Schema::Unknown, Schema::Definition)
    }
}

impl<'s> From<&'s Structural> for Schema<'s> {
    fn from(schema: &'s Structural) -> Schema<'s> {
        Schema::Structural(schema)
    }
}

/// An associative list's key fields.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Keys<'s> {
    /// Upstream's `+listMapKey` tags of a built-in type.
    Static(&'static [&'static str]),
    /// `x-kubernetes-list-map-keys` of a custom resource's schema.
    Schema(&'s [String]),
}

impl<'s> Keys<'s> {
    pub fn to_vec(self) -> Vec<&'s str> {
        match self {
            Keys::Static(keys) => keys.to_vec(),
            Keys::Schema(keys) => keys.iter().map(String::as_str).collect(),
        }
    }
}

/// What the type graph says about one field of an object.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Field<'s> {
    /// The upstream patch strategy, if the field has one.
    pub strategy: Option<FieldStrategy>,
    /// The type of the value, or of its items for a list.
    pub ty: Ty<'s>,
    /// For server-side apply: the list-map keys (defaults to the merge key).
    pub list_keys: Option<Keys<'s>>,
}

/// `x-kubernetes-list-type: map|set` read as the strategy the built-in tables give such lists.
const MERGE: FieldStrategy = FieldStrategy {
    strategy: "merge",
    merge_key: None,
};

impl<'s> Ty<'s> {
    /// The type of a root object named by its definition; `Unknown` for `None` or names that are
    /// not published.
    pub fn root(definition: Option<&str>) -> Ty<'static> {
        definition
            .and_then(|d| openapi::definitions().get_key_value(d))
            .map_or(Ty::Unknown, |(name, _)| Ty::Def(name.as_str()))
    }

    /// The type of a root object of either source.
    pub fn of(schema: Schema<'s>) -> Ty<'s> {
        match schema {
            Schema::Unknown => Ty::Unknown,
            Schema::Definition(d) => Ty::root(Some(d)),
            Schema::Structural(s) => Ty::Resource(s.root()),
        }
    }

    /// Whether an object of this type is replaced as a whole (`+structType=atomic`,
    /// `x-kubernetes-map-type: atomic`).
    pub fn is_atomic(self) -> bool {
        match self {
            Ty::Def(d) => strategy::is_atomic_struct(d),
            Ty::Schema(node) | Ty::Resource(node) => node.map_type.as_deref() == Some("atomic"),
            Ty::Unknown | Ty::MapOf(_) => false,
        }
    }

    /// Facts about field `name` of a value of this type.
    pub fn field(self, name: &str) -> Field<'s> {
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
            Ty::Resource(_) if name == "metadata" => Field {
                strategy: None,
                ty: Ty::root(Some("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta")),
                list_keys: None,
            },
            Ty::Schema(node) | Ty::Resource(node) => {
                let child = node
                    .properties
                    .get(name)
                    .or(match &node.additional_properties {
                        Some(AdditionalProperties::Schema(s)) => Some(&**s),
                        _ => None,
                    });
                child.map_or(
                    Field {
                        strategy: None,
                        ty: Ty::Unknown,
                        list_keys: None,
                    },
                    schema_field,
                )
            }
        }
    }
}

/// A structural schema node as a field: lists merge by their `x-kubernetes-list-type` (atomic
/// unless it says `map` or `set`, as upstream defaults custom resources' lists).
fn schema_field(node: &Node) -> Field<'_> {
    fn node_ty(n: &Node) -> Ty<'_> {
        if n.embedded_resource {
            Ty::Resource(n)
        } else {
            Ty::Schema(n)
        }
    }
    if node.ty != "array" {
        return Field {
            strategy: None,
            ty: node_ty(node),
            list_keys: None,
        };
    }
    let items = node.items.as_deref().map_or(Ty::Unknown, node_ty);
    match node.list_type.as_deref() {
        Some("map") => Field {
            strategy: Some(MERGE),
            ty: items,
            list_keys: Some(Keys::Schema(&node.list_map_keys)),
        },
        Some("set") => Field {
            strategy: Some(MERGE),
            ty: items,
            list_keys: None,
        },
        _ => Field {
            strategy: None,
            ty: items,
            list_keys: None,
        },
    }
}

/// The fields of every published definition, worked out once. Tracking `managedFields` asks for
/// every field of every object written; searching the definitions by name for each took about a
/// third of that work in `tandem bench scheduler`'s pod creates.
type FieldTable = HashMap<&'static str, HashMap<&'static str, Field<'static>>>;

fn field_table() -> &'static FieldTable {
    static TABLE: OnceLock<FieldTable> = OnceLock::new();
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
fn field_of(d: &str, name: &str, property: Option<&'static Value>) -> Field<'static> {
    Field {
        strategy: strategy::lookup(d, name).or_else(|| property.and_then(extension)),
        ty: property.map_or(Ty::Unknown, value_type),
        list_keys: strategy::list_map_keys(d, name).map(Keys::Static),
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
fn value_type(property: &'static Value) -> Ty<'static> {
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
            containers.ty.field("ports").list_keys.map(Keys::to_vec),
            Some(vec!["containerPort", "protocol"])
        );
        assert_eq!(
            pod_spec
                .field("topologySpreadConstraints")
                .list_keys
                .map(Keys::to_vec),
            Some(vec!["topologyKey", "whenUnsatisfiable"])
        );
        let unknown = pod_spec.field("noSuchField");
        assert_eq!(unknown.ty, Ty::Unknown);
        assert!(unknown.strategy.is_none());
    }
}
