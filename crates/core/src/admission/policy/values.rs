//! Stored objects as CEL values, without a schema: upstream's unstructured conversion
//! (`common.UnstructuredToVal` with a `nil` schema, as admission's `object`, `oldObject`,
//! `params` and `request` are typed `dyn`): objects are maps, numbers are `int` when they fit
//! an int64 and `double` otherwise, then strings, bools, lists and `null`.
//!
//! Values are converted once per evaluation and shared by every expression that reads them:
//! [`Shared`] is a handle whose clone is a reference count, so binding `object` in each
//! expression's context copies nothing.

use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;

use cel::common::traits::{
    Adder, Comparer, Container, Divider, Indexer, Iterable, Modder, Multiplier, Negator, Sizer,
    Subtractor, Zeroer,
};
use cel::common::types::{
    CelBool, CelDouble, CelInt, CelList, CelMap, CelMapKey, CelNull, CelString, DYN_TYPE, Type,
};
use cel::common::value::{Builtin, BuiltinRef, CowVal, Val};
use serde_json::{Map, Value};

use crate::apiextensions::schema::MAX_DEPTH;

/// Converts `v` to a CEL value. Values nested deeper than [`MAX_DEPTH`] become `null` (the API
/// server never stores such objects; this only keeps the conversion from recursing without
/// bound).
pub(super) fn to_val(v: &Value) -> Box<dyn Val> {
    convert(v, 0)
}

fn convert(v: &Value, depth: usize) -> Box<dyn Val> {
    if depth > MAX_DEPTH {
        return Box::new(CelNull);
    }
    match v {
        Value::Null => Box::new(CelNull),
        Value::Bool(b) => Box::new(CelBool::from(*b)),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Box::new(CelInt::from(i)),
            None => Box::new(CelDouble::from(n.as_f64().unwrap_or(0.0))),
        },
        Value::String(s) => Box::new(CelString::from(s.clone())),
        Value::Array(items) => Box::new(CelList::from(
            items
                .iter()
                .map(|i| convert(i, depth + 1))
                .collect::<Vec<_>>(),
        )),
        Value::Object(map) => Box::new(CelMap::from(convert_map(map, depth))),
    }
}

fn convert_map(
    map: &Map<String, Value>,
    depth: usize,
) -> HashMap<CelMapKey<'static>, Box<dyn Val>> {
    map.iter()
        .map(|(k, v)| (CelMapKey::from(k.clone()), convert(v, depth + 1)))
        .collect()
}

/// A CEL value shared between contexts: cloning it clones an `Arc`. It behaves exactly as the
/// value it wraps (type, operators, equality, and downcasts to the built-in types), so
/// functions and operators cannot tell them apart.
#[derive(Debug, Clone)]
pub(super) struct Shared(Arc<dyn Val>);

impl Shared {
    pub(super) fn new(v: Box<dyn Val>) -> Shared {
        Shared(Arc::from(v))
    }

    pub(super) fn from_json(v: &Value) -> Shared {
        Shared::new(to_val(v))
    }

    pub(super) fn null() -> Shared {
        Shared::new(Box::new(CelNull))
    }

    pub(super) fn boxed(&self) -> Box<dyn Val> {
        Box::new(self.clone())
    }
}

/// The type `Shared` reports when asked statically (never, in practice: values are asked
/// through [`Val::get_type`], which answers the wrapped value's type).
static SHARED_TYPE: Type = DYN_TYPE;

impl Val for Shared {
    fn get_type(&self) -> &Type {
        self.0.get_type()
    }

    fn cel_type() -> &'static Type {
        &SHARED_TYPE
    }

    fn as_adder<'b, 'v>(&'b self) -> Option<&'b (dyn Adder + 'v)>
    where
        Self: 'v,
    {
        self.0.as_adder()
    }

    fn as_comparer(&self) -> Option<&dyn Comparer> {
        self.0.as_comparer()
    }

    fn as_container(&self) -> Option<&dyn Container> {
        self.0.as_container()
    }

    fn as_divider<'b, 'v>(&'b self) -> Option<&'b (dyn Divider + 'v)>
    where
        Self: 'v,
    {
        self.0.as_divider()
    }

    fn as_indexer<'b, 'v>(&'b self) -> Option<&'b (dyn Indexer + 'v)>
    where
        Self: 'v,
    {
        self.0.as_indexer()
    }

    fn into_indexer<'v>(self: Box<Self>) -> Option<Box<dyn Indexer + 'v>>
    where
        Self: 'v,
    {
        // The wrapped value is shared: a copy gives up its elements instead.
        self.0.clone_as_boxed().into_indexer()
    }

    fn as_iterable<'b, 'v>(&'b self) -> Option<&'b (dyn Iterable + 'v)>
    where
        Self: 'v,
    {
        self.0.as_iterable()
    }

    fn as_modder<'b, 'v>(&'b self) -> Option<&'b (dyn Modder + 'v)>
    where
        Self: 'v,
    {
        self.0.as_modder()
    }

    fn as_multiplier<'b, 'v>(&'b self) -> Option<&'b (dyn Multiplier + 'v)>
    where
        Self: 'v,
    {
        self.0.as_multiplier()
    }

    fn as_negator<'b, 'v>(&'b self) -> Option<&'b (dyn Negator + 'v)>
    where
        Self: 'v,
    {
        self.0.as_negator()
    }

    fn as_sizer(&self) -> Option<&dyn Sizer> {
        self.0.as_sizer()
    }

    fn as_subtractor<'b, 'v>(&'b self) -> Option<&'b (dyn Subtractor + 'v)>
    where
        Self: 'v,
    {
        self.0.as_subtractor()
    }

    fn as_zeroer(&self) -> Option<&dyn Zeroer> {
        self.0.as_zeroer()
    }

    fn equals(&self, other: &dyn Val) -> bool {
        self.0.equals(other)
    }

    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v>
    where
        Self: 'v,
    {
        Box::new(self.clone())
    }

    fn as_any(&self) -> Option<&dyn Any> {
        self.0.as_any()
    }

    fn as_builtin<'b, 'v>(&'b self) -> BuiltinRef<'b, 'v>
    where
        Self: 'v,
    {
        self.0.as_builtin()
    }

    fn into_builtin<'v>(self: Box<Self>) -> Option<Builtin<'v>>
    where
        Self: 'v,
    {
        // The interpreter moves built-ins out of owned boxes; `as_builtin` answered for the
        // wrapped value, so this must answer too: with a copy of it.
        self.0.clone_as_boxed().into_builtin()
    }
}

/// What an expression evaluated to, as much as admission reads of it.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Outcome {
    Bool(bool),
    Str(String),
    Null,
    /// Any other value, by its CEL type name (`int`, `map`, …).
    Other(String),
}

impl Outcome {
    pub(super) fn of(v: &CowVal<'_, '_>) -> Outcome {
        if let Some(b) = v.downcast_ref::<CelBool>() {
            Outcome::Bool(*b.inner())
        } else if let Some(s) = v.downcast_ref::<CelString>() {
            Outcome::Str(s.inner().to_string())
        } else if v.downcast_ref::<CelNull>().is_some() {
            Outcome::Null
        } else {
            Outcome::Other(v.get_type().name().to_string())
        }
    }

    /// The CEL type name, for upstream's "must evaluate to" messages.
    pub(super) fn type_name(&self) -> &str {
        match self {
            Outcome::Bool(_) => "bool",
            Outcome::Str(_) => "string",
            Outcome::Null => "null_type",
            Outcome::Other(t) => t,
        }
    }
}

/// The `namespaceObject` variable: upstream `CreateNamespaceObject` keeps the namespace's
/// `spec`, `status` and these metadata fields only.
pub(super) fn namespace_object(ns: &Value) -> Value {
    const META: [&str; 12] = [
        "name",
        "generateName",
        "namespace",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "labels",
        "annotations",
        "finalizers",
    ];
    let Some(obj) = ns.as_object() else {
        return Value::Null;
    };
    let mut out = Map::new();
    for key in ["apiVersion", "kind", "spec", "status"] {
        if let Some(v) = obj.get(key) {
            out.insert(key.to_string(), v.clone());
        }
    }
    if let Some(meta) = obj.get("metadata").and_then(Value::as_object) {
        let kept: Map<String, Value> = META
            .iter()
            .filter_map(|k| meta.get(*k).map(|v| ((*k).to_string(), v.clone())))
            .collect();
        out.insert("metadata".to_string(), Value::Object(kept));
    }
    Value::Object(out)
}

/// The `request` variable: the AdmissionRequest without `object` and `oldObject` (upstream
/// leaves them unset; they are the root variables).
pub(super) fn request_object(request: &Value) -> Shared {
    match request.as_object() {
        Some(map) if map.contains_key("object") || map.contains_key("oldObject") => {
            let mut m = map.clone();
            m.remove("object");
            m.remove("oldObject");
            Shared::from_json(&Value::Object(m))
        }
        _ => Shared::from_json(request),
    }
}
