//! The OpenAPI of custom resources: what upstream's apiextensions-apiserver publishes for each
//! served version of an established CustomResourceDefinition, so `kubectl explain <kind>` and
//! `kubectl apply` of custom objects work as they do against kube-apiserver.
//!
//! Mirrors `k8s.io/apiextensions-apiserver` v1.33:
//! - `pkg/controller/openapi/builder/builder.go` (`BuildOpenAPIV3`, `BuildOpenAPIV2`): the kind's
//!   definition (its `openAPIV3Schema` with `apiVersion`, `kind` and `metadata` set, embedded
//!   resources completed, `x-kubernetes-group-version-kind` and `x-kubernetes-selectable-fields`),
//!   the `<Kind>List` definition, and the routes with their descriptions, parameters and media
//!   types;
//! - `pkg/apiserver/schema` (`NewStructural`, `Unfold`, `ToKubeOpenAPI`): only what a structural
//!   schema holds is published, and `x-kubernetes-int-or-string` gains its `anyOf`;
//! - `pkg/controller/openapi/v2/conversion.go` (`ToStructuralOpenAPIV2`) and the v2 controller's
//!   `PruneDefaults`: what Swagger 2.0 (and kubectl's v2 parser) cannot take is dropped;
//! - `pkg/controller/openapiv3` (`MergeSpecsV3`): one document per group-version, holding every
//!   CRD of it.
//!
//! Everything here is a pure function of the CRDs passed in; callers cache the results (the
//! documents are large) and rebuild them when a CRD changes.
//!
//! Only group-versions that no built-in kind serves are published: tandem refuses CRDs for
//! built-in groups, and where one would still collide, the built-in document wins.
//!
//! **Differences from upstream.** The CRD documents are built from tandem's own meta definitions
//! ([`super::definitions`]), so `DeleteOptions` lists tandem's group-versions; no definition is
//! renamed on conflict (`ObjectMeta_v2`), a conflicting custom kind is left out instead; and
//! `DELETE` carries the same query parameters as built-in kinds.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use crate::apiextensions::crd::{is_established, served_versions};
use crate::apiextensions::schema::structural_errors;
use crate::registry::Registry;

use super::params::{
    DELETE_QUERY, LIST_QUERY, PATCH_QUERY, WRITE_QUERY, namespace_param, path_param, queries, query,
};
use super::routes::{
    Body, JSON_YAML, Operation, PATCH_MEDIA_CUSTOM, Param, Response, Route, capitalize, id_stem,
    tag,
};
use super::schemas::{
    DELETE_OPTIONS, PATCH, STATUS, list_metadata_property, object_metadata_property, schema_ref,
    type_meta_properties,
};
use super::v2::{path_item as v2_path_item, to_v2_schema, v2};
use super::v3::{closure, index_entry, index_key, normalize_key, paths as v3_paths, v3_index};

/// `info` of every custom resource document, as upstream's builder sets it.
const CRD_INFO_TITLE: &str = "Kubernetes CRD Swagger";
const CRD_INFO_VERSION: &str = "v0.1.0";
/// The `/scale` subresource's body.
const SCALE: &str = "io.k8s.api.autoscaling.v1.Scale";
/// What `Unfold` gives an `x-kubernetes-int-or-string` node.
const INT_OR_STRING_ANY_OF: &str = r#"[{"type":"integer"},{"type":"string"}]"#;

/// The definition name of a custom kind, upstream's `friendlyName` of `<group>/<version>.<kind>`:
/// the group's labels reversed, then the version and the kind —
/// `("cert-manager.io", "v1", "Certificate")` → `io.cert-manager.v1.Certificate`.
pub fn crd_definition_name(group: &str, version: &str, kind: &str) -> String {
    let reversed: Vec<&str> = group.split('.').rev().collect();
    format!("{}.{version}.{kind}", reversed.join("."))
}

/// The OpenAPI v3 document of a group-version served only by CRDs
/// (`/openapi/v3/apis/<group>/<version>`), or `None` when no established CRD in `crds` serves
/// it, or a built-in kind does (that document is [`super::v3_group_version`]'s).
///
/// As upstream's openapiv3 controller merges its per-CRD documents: `info` is upstream's
/// "Kubernetes CRD Swagger", `paths` holds every route of every kind (collections, items,
/// cluster-wide lists of namespaced kinds, and `/status`, `/scale` where the version declares
/// them; no deprecated watch paths, which upstream never publishes for custom resources), and
/// `components.schemas` the kinds, their lists and the meta definitions they reference
/// (`ObjectMeta`, `ListMeta`, `Status`, `DeleteOptions`, `Patch`, `Scale`, …).
pub fn v3_document(crds: &[&Value], group: &str, version: &str) -> Option<Value> {
    let registry = Registry::builtin();
    if is_builtin(&registry, group, version) {
        return None;
    }
    let mut routes = Vec::new();
    let mut schemas = Map::new();
    for served in served(crds) {
        if served.group != group || served.version != version {
            continue;
        }
        let name = served.definition();
        // Upstream's naming controller keeps kinds unique within a group; first one wins.
        if schemas.contains_key(&name) {
            continue;
        }
        schemas.insert(served.list_definition(), served.list_schema(false));
        schemas.insert(name, served.kind_schema(false));
        routes.extend(served.routes());
    }
    if schemas.is_empty() {
        return None;
    }
    let paths = Value::Object(v3_paths(&routes));
    let mut all = closure(&paths);
    for schema in schemas.values() {
        all.extend(closure(schema));
    }
    all.extend(schemas);
    Some(json!({
        "openapi": "3.0.0",
        "info": { "title": CRD_INFO_TITLE, "version": CRD_INFO_VERSION },
        "paths": paths,
        "components": { "schemas": all },
    }))
}

/// [`v3_document`] for a request path of the `/openapi/v3` tree: `apis/<group>/<version>`, with
/// a leading `/` or `openapi/v3/` and a `?hash=` tolerated, as [`super::v3_group_version`] takes.
pub fn v3_document_for_path(crds: &[&Value], path: &str) -> Option<Value> {
    let key = normalize_key(path);
    let mut parts = key.split('/');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some("apis"), Some(group), Some(version), None) => v3_document(crds, group, version),
        _ => None,
    }
}

/// The `/openapi/v3` index entries of the group-versions [`v3_document`] publishes for `crds`,
/// sorted by key: `("apis/cert-manager.io/v1", {"serverRelativeURL":
/// "/openapi/v3/apis/cert-manager.io/v1?hash=<HASH>"})`.
///
/// The hash digests the document as the built-in entries' do, so it changes exactly when the
/// document does (a CRD's schema, names, scope, subresources or served versions change, or a CRD
/// of the group-version comes or goes) and clients refetch. Building it builds every document.
pub fn v3_index_entries(crds: &[&Value]) -> Vec<(String, Value)> {
    let group_versions: BTreeSet<(&str, &str)> =
        served(crds).iter().map(|s| (s.group, s.version)).collect();
    group_versions
        .into_iter()
        .filter_map(|(group, version)| {
            let document = v3_document(crds, group, version)?;
            let key = index_key(group, version);
            let entry = index_entry(&key, &document);
            Some((key, entry))
        })
        .collect()
}

/// The whole `/openapi/v3` index: the built-in group-versions ([`super::v3_index`]) and those of
/// `crds` ([`v3_index_entries`]). With no CRDs it equals [`super::v3_index`].
pub fn v3_index_with_crds(crds: &[&Value]) -> Value {
    let mut index = v3_index();
    if let Some(Value::Object(paths)) = index.get_mut("paths") {
        for (key, entry) in v3_index_entries(crds) {
            paths.entry(key).or_insert(entry);
        }
    }
    index
}

/// The `/openapi/v2` document with the custom kinds merged in, as upstream's v2 controller
/// merges its CRD specs into the static one (`MergeSpecs`): every served version of every
/// established CRD adds its two definitions in their Swagger 2.0 form (see
/// `ToStructuralOpenAPIV2`: no `allOf`/`anyOf`/`oneOf`/`not`; `nullable` nodes lose their type,
/// items and properties and leave their parent's `required`; `x-kubernetes-preserve-unknown-fields`
/// nodes lose their items and properties, and their `object` type; arrays without items lose their
/// type; no `default`) and its paths, refs pointing at `#/definitions/`.
///
/// The static document has precedence: a path it already has is kept, and a CRD version whose
/// definitions it already has (or that is in a built-in group-version) is left out. With no CRDs
/// the result equals [`super::v2`].
pub fn v2_with_crds(crds: &[&Value]) -> Value {
    let mut document = v2().clone();
    let registry = Registry::builtin();
    let served: Vec<Served<'_>> = served(crds)
        .into_iter()
        .filter(|s| !is_builtin(&registry, s.group, s.version))
        .collect();
    let Some(Value::Object(definitions)) = document.get_mut("definitions") else {
        return document;
    };
    let mut added = Vec::new();
    for served in served {
        let (name, list_name) = (served.definition(), served.list_definition());
        if definitions.contains_key(&name) || definitions.contains_key(&list_name) {
            continue;
        }
        definitions.insert(name, served.kind_schema(true));
        definitions.insert(list_name, served.list_schema(true));
        added.push(served);
    }
    if let Some(Value::Object(paths)) = document.get_mut("paths") {
        for served in &added {
            for route in served.routes() {
                if !paths.contains_key(&route.path) {
                    paths.insert(route.path.clone(), v2_path_item(&route));
                }
            }
        }
    }
    document
}

fn is_builtin(registry: &Registry, group: &str, version: &str) -> bool {
    registry.in_group_version(group, version).next().is_some()
}

fn text<'a>(value: &'a Value, key: &str) -> &'a str {
    value.get(key).and_then(Value::as_str).unwrap_or_default()
}

fn is_true(value: &Value, key: &str) -> bool {
    value.get(key).and_then(Value::as_bool) == Some(true)
}

/// One served version of an established CRD, read as upstream's builder reads it: names from
/// `spec.names` (not `status.acceptedNames`), subresources from the version.
struct Served<'a> {
    group: &'a str,
    version: &'a str,
    kind: &'a str,
    list_kind: String,
    plural: &'a str,
    namespaced: bool,
    /// `spec.preserveUnknownFields` (only ever true for CRDs converted from v1beta1).
    preserve_unknown_fields: bool,
    /// The `spec.versions[]` entry.
    spec: &'a Value,
}

/// Every served version of every established CRD of `crds`, CRDs by name, versions in
/// discovery's order, so that conflicts resolve the same way whatever order the caller lists.
fn served<'a>(crds: &[&'a Value]) -> Vec<Served<'a>> {
    let mut crds: Vec<&Value> = crds.iter().copied().filter(|c| is_established(c)).collect();
    crds.sort_by_key(|c| c.pointer("/metadata/name").and_then(Value::as_str));
    let mut out = Vec::new();
    for crd in crds {
        let Some(spec) = crd.get("spec") else {
            continue;
        };
        let names = spec.get("names").unwrap_or(&Value::Null);
        let (group, kind, plural) = (
            text(spec, "group"),
            text(names, "kind"),
            text(names, "plural"),
        );
        if group.is_empty() || kind.is_empty() || plural.is_empty() {
            continue;
        }
        let list_kind = match text(names, "listKind") {
            "" => format!("{kind}List"),
            list_kind => list_kind.to_string(),
        };
        let versions = spec.get("versions").and_then(Value::as_array);
        for name in served_versions(crd) {
            let Some(version) = versions
                .into_iter()
                .flatten()
                .find(|v| text(v, "name") == name)
            else {
                continue;
            };
            out.push(Served {
                group,
                version: text(version, "name"),
                kind,
                list_kind: list_kind.clone(),
                plural,
                namespaced: text(spec, "scope") == "Namespaced",
                preserve_unknown_fields: is_true(spec, "preserveUnknownFields"),
                spec: version,
            });
        }
    }
    out
}

impl Served<'_> {
    fn definition(&self) -> String {
        crd_definition_name(self.group, self.version, self.kind)
    }

    fn list_definition(&self) -> String {
        crd_definition_name(self.group, self.version, &self.list_kind)
    }

    fn gvk(&self, kind: &str) -> Value {
        json!([{ "group": self.group, "kind": kind, "version": self.version }])
    }

    fn subresource(&self, name: &str) -> bool {
        self.spec
            .get("subresources")
            .and_then(|s| s.get(name))
            .is_some_and(|s| !s.is_null())
    }

    /// `x-kubernetes-selectable-fields`: each selectable field's JSONPath without its leading dot.
    fn selectable_fields(&self) -> Option<Value> {
        let fields = self.spec.get("selectableFields")?.as_array()?;
        let fields: Vec<Value> = fields
            .iter()
            .map(|f| {
                let path = text(f, "jsonPath");
                json!({ "fieldPath": path.strip_prefix('.').unwrap_or(path) })
            })
            .collect();
        (!fields.is_empty()).then_some(Value::Array(fields))
    }

    /// The version's schema as a structural schema, unfolded; `None` without one, or when it is
    /// not structural (upstream publishes a bare `object` then).
    fn structural_schema(&self) -> Option<Value> {
        let schema = self.spec.get("schema")?.get("openAPIV3Schema")?;
        if !schema.is_object() || !structural_errors(schema, "").is_empty() {
            return None;
        }
        let mut schema = structural(schema, false);
        visit_structural(&mut schema, &mut unfold_int_or_string);
        Some(schema)
    }

    /// The kind's definition (`buildKubeNative`), in v3 form or, when `v2`, in Swagger 2.0 form.
    fn kind_schema(&self, v2: bool) -> Value {
        let schema = self.structural_schema().filter(|s| {
            // kubectl's v2 validation would refuse every field a bare object does not list.
            !(v2 && (is_true(s, "x-kubernetes-preserve-unknown-fields")
                || self.preserve_unknown_fields))
        });
        let mut schema = match schema {
            Some(mut schema) => {
                if v2 {
                    visit_structural(&mut schema, &mut to_structural_v2);
                }
                if let Value::Object(object) = &mut schema {
                    let properties = object
                        .entry("properties")
                        .or_insert_with(|| Value::Object(Map::new()));
                    if let Value::Object(properties) = properties {
                        properties.insert("metadata".to_string(), object_metadata_property());
                        properties.extend(type_meta_properties());
                    }
                }
                add_embedded_properties(&mut schema, v2);
                schema
            }
            None => json!({ "type": "object" }),
        };
        schema["x-kubernetes-group-version-kind"] = self.gvk(self.kind);
        if let Some(fields) = self.selectable_fields() {
            schema["x-kubernetes-selectable-fields"] = fields;
        }
        if v2 {
            prune_defaults(&mut schema);
            to_v2_schema(&mut schema);
        }
        schema
    }

    /// The `<Kind>List` definition (`buildListSchema`).
    fn list_schema(&self, v2: bool) -> Value {
        let mut properties = type_meta_properties();
        properties.insert(
            "items".to_string(),
            json!({
                "description": format!(
                    "List of {}. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md",
                    self.plural
                ),
                "type": "array",
                "items": schema_ref(&self.definition()),
            }),
        );
        properties.insert("metadata".to_string(), list_metadata_property());
        let mut schema = json!({
            "description": format!("{} is a list of {}", self.list_kind, self.kind),
            "type": "object",
            "required": ["items"],
            "properties": properties,
            "x-kubernetes-group-version-kind": self.gvk(&self.list_kind),
        });
        if let Some(fields) = self.selectable_fields() {
            schema["x-kubernetes-selectable-fields"] = fields;
        }
        if v2 {
            to_v2_schema(&mut schema);
        }
        schema
    }

    /// The routes upstream's builder registers (`generateBuilder`): the cluster-wide list of a
    /// namespaced kind, the collection (list, create, deletecollection), the item (read,
    /// replace, delete, patch) and read/replace/patch of `/status` and `/scale` when the version
    /// has them. Every operation carries the kind's group-version-kind, `/scale`'s too.
    fn routes(&self) -> Vec<Route> {
        let definition = self.definition();
        let base = format!("/apis/{}/{}/{}", self.group, self.version, self.plural);
        let collection = if self.namespaced {
            format!(
                "/apis/{}/{}/namespaces/{{namespace}}/{}",
                self.group, self.version, self.plural
            )
        } else {
            base.clone()
        };
        let scope_params = |mut params: Vec<Param>| {
            if self.namespaced {
                params.push(namespace_param());
            }
            params
        };
        let name_param = path_param("name", format!("name of the {}", self.kind));
        let mut routes = Vec::new();

        if self.namespaced {
            let mut list_all = self.op("get", "list", "list", "", self.list_definition());
            list_all.operation_id = format!(
                "list{}{}ForAllNamespaces",
                id_stem(self.group, self.version),
                self.kind
            );
            routes.push(Route {
                path: base,
                parameters: [vec![query("pretty")], queries(LIST_QUERY)].concat(),
                operations: vec![list_all],
            });
        }

        let mut list = self.op("get", "list", "list", "", self.list_definition());
        list.parameters = queries(LIST_QUERY);
        let mut create = self.op("post", "post", "create", "", definition.clone());
        create.parameters = queries(WRITE_QUERY);
        create.body = Some(Body {
            definition: definition.clone(),
            media_types: JSON_YAML,
        });
        create.codes = &["200", "201", "202"];
        // Upstream's CRD builder gives deletecollection the list options only, and no body.
        let mut delete_collection = self.op(
            "delete",
            "deletecollection",
            "deletecollection",
            "",
            STATUS.to_string(),
        );
        delete_collection.parameters = queries(LIST_QUERY);
        routes.push(Route {
            path: collection.clone(),
            parameters: scope_params(vec![query("pretty")]),
            operations: vec![list, create, delete_collection],
        });

        let item = format!("{collection}/{{name}}");
        let mut delete = self.op("delete", "delete", "delete", "", STATUS.to_string());
        delete.parameters = queries(DELETE_QUERY);
        delete.body = Some(Body {
            definition: DELETE_OPTIONS.to_string(),
            media_types: JSON_YAML,
        });
        delete.codes = &["200", "202"];
        let mut item_ops = self.read_replace_patch("", &definition);
        item_ops.push(delete);
        routes.push(Route {
            path: item.clone(),
            parameters: scope_params(vec![name_param.clone(), query("pretty")]),
            operations: item_ops,
        });

        for (sub, body) in [("status", definition.as_str()), ("scale", SCALE)] {
            if self.subresource(sub) {
                routes.push(Route {
                    path: format!("{item}/{sub}"),
                    parameters: scope_params(vec![name_param.clone(), query("pretty")]),
                    operations: self.read_replace_patch(sub, body),
                });
            }
        }
        routes
    }

    /// read, replace and patch of the item (`sub` empty) or of a subresource, whose object is
    /// `definition`.
    fn read_replace_patch(&self, sub: &str, definition: &str) -> Vec<Operation> {
        let mut read = self.op("get", "get", "read", sub, definition.to_string());
        read.parameters = vec![query("resourceVersion")];
        let mut replace = self.op("put", "put", "replace", sub, definition.to_string());
        replace.parameters = queries(WRITE_QUERY);
        replace.body = Some(Body {
            definition: definition.to_string(),
            media_types: JSON_YAML,
        });
        replace.codes = &["200", "201"];
        // No strategic merge patch: kubectl's apply falls back to a JSON merge patch.
        let mut patch = self.op("patch", "patch", "patch", sub, definition.to_string());
        patch.parameters = queries(PATCH_QUERY);
        patch.body = Some(Body {
            definition: PATCH.to_string(),
            media_types: PATCH_MEDIA_CUSTOM,
        });
        vec![read, replace, patch]
    }

    /// An operation as `buildRoute` makes it: id `<verb><Group><Version>[Namespaced]<Kind>[Sub]`,
    /// upstream's description, JSON or YAML out (and in, but for patches), answering `200` with
    /// `response`.
    fn op(
        &self,
        method: &'static str,
        action: &'static str,
        verb: &str,
        sub: &str,
        response: String,
    ) -> Operation {
        let scope = if self.namespaced { "Namespaced" } else { "" };
        Operation {
            method,
            action,
            operation_id: format!(
                "{verb}{}{scope}{}{}",
                id_stem(self.group, self.version),
                self.kind,
                capitalize(sub)
            ),
            description: description(verb, sub, self.kind),
            tag: tag(self.group, self.version),
            gvk: (
                self.group.to_string(),
                self.version.to_string(),
                self.kind.to_string(),
            ),
            parameters: Vec::new(),
            body: None,
            response: Response::Definition(response),
            codes: &["200"],
            produces: JSON_YAML,
            bodiless_consumes: JSON_YAML,
        }
    }
}

/// Upstream's `descriptionFor`: `list objects of kind Certificate`, `create an Issuer`, `read
/// status of the specified Certificate`, `partially update the specified Certificate`, …
fn description(verb: &str, sub: &str, kind: &str) -> String {
    let of = if sub.is_empty() {
        String::new()
    } else {
        format!(" {sub} of")
    };
    match verb {
        "list" => format!("list{of} objects of kind {kind}"),
        "read" | "replace" => format!("{verb}{of} the specified {kind}"),
        "patch" => format!("partially update{of} the specified {kind}"),
        "create" | "delete" => format!("{verb}{of}{}{kind}", article(kind)),
        "deletecollection" if sub.is_empty() => format!("delete collection of {kind}"),
        "deletecollection" => format!("delete collection of{of} a {kind}"),
        _ => format!("{verb}{of}{kind}"),
    }
}

/// Upstream's `GetArticleForNoun(noun, " ")`: none for plurals, `an` before a vowel.
fn article(noun: &str) -> &'static str {
    if !noun.ends_with("ss") && noun.ends_with('s') {
        " "
    } else if noun
        .chars()
        .next()
        .is_some_and(|c| "aeiou".contains(c.to_ascii_lowercase()))
    {
        " an "
    } else {
        " a "
    }
}

/// What `NewStructural` keeps of a schema node and `ToKubeOpenAPI` writes back: the generic,
/// value-validation and `x-kubernetes-*` keywords (flags only when true, lists only when
/// non-empty), recursively through `properties`, `items`, `additionalProperties` and the
/// junctors. `example`, `externalDocs` and the like are dropped. `nested` is true inside
/// junctors, where `additionalProperties` is not written and empty `properties` are.
fn structural(schema: &Value, nested: bool) -> Value {
    let Some(object) = schema.as_object() else {
        return Value::Object(Map::new());
    };
    let mut out = Map::new();
    for (key, value) in object {
        let keep = match key.as_str() {
            "type" | "description" | "title" | "format" | "pattern" => {
                value.as_str().is_some_and(|s| !s.is_empty())
            }
            "nullable"
            | "exclusiveMaximum"
            | "exclusiveMinimum"
            | "uniqueItems"
            | "x-kubernetes-preserve-unknown-fields"
            | "x-kubernetes-embedded-resource"
            | "x-kubernetes-int-or-string" => value.as_bool() == Some(true),
            "default" => !value.is_null(),
            "maximum" | "minimum" | "multipleOf" | "maxLength" | "minLength" | "maxItems"
            | "minItems" | "maxProperties" | "minProperties" => value.is_number(),
            "enum" | "required" | "x-kubernetes-list-map-keys" | "x-kubernetes-validations" => {
                value.as_array().is_some_and(|a| !a.is_empty())
            }
            "x-kubernetes-list-type" | "x-kubernetes-map-type" => value.is_string(),
            _ => false,
        };
        if keep {
            out.insert(key.clone(), value.clone());
        }
    }
    if let Some(properties) = object.get("properties").and_then(Value::as_object)
        && (nested || !properties.is_empty())
    {
        let properties = properties
            .iter()
            .map(|(name, property)| (name.clone(), structural(property, nested)))
            .collect();
        out.insert("properties".to_string(), Value::Object(properties));
    }
    if let Some(items) = object.get("items").filter(|i| i.is_object()) {
        out.insert("items".to_string(), structural(items, nested));
    }
    match object.get("additionalProperties") {
        Some(Value::Bool(allows)) if !nested => {
            out.insert("additionalProperties".to_string(), Value::Bool(*allows));
        }
        Some(additional @ Value::Object(_)) if !nested => {
            out.insert(
                "additionalProperties".to_string(),
                structural(additional, false),
            );
        }
        _ => {}
    }
    for junctor in ["allOf", "anyOf", "oneOf"] {
        if let Some(clauses) = object.get(junctor).and_then(Value::as_array)
            && !clauses.is_empty()
        {
            let clauses = clauses.iter().map(|c| structural(c, true)).collect();
            out.insert(junctor.to_string(), Value::Array(clauses));
        }
    }
    if let Some(not) = object.get("not").filter(|n| n.is_object()) {
        out.insert("not".to_string(), structural(not, true));
    }
    Value::Object(out)
}

/// Calls `f` on every structural node (not inside junctors), each before its `items`,
/// `properties` and `additionalProperties`, as upstream's `schema.Visitor` does.
fn visit_structural(node: &mut Value, f: &mut impl FnMut(&mut Value)) {
    f(node);
    let Some(object) = node.as_object_mut() else {
        return;
    };
    if let Some(items) = object.get_mut("items") {
        visit_structural(items, f);
    }
    if let Some(Value::Object(properties)) = object.get_mut("properties") {
        for property in properties.values_mut() {
            visit_structural(property, f);
        }
    }
    if let Some(additional @ Value::Object(_)) = object.get_mut("additionalProperties") {
        visit_structural(additional, f);
    }
}

/// Upstream's `Unfold` on one node: `x-kubernetes-int-or-string` gains
/// `anyOf: [{type: integer}, {type: string}]`, or, when it has another `anyOf`, an `allOf`
/// clause holding that one first; nothing when either is already there.
fn unfold_int_or_string(node: &mut Value) {
    let Some(object) = node.as_object_mut() else {
        return;
    };
    if object.get("x-kubernetes-int-or-string") != Some(&Value::Bool(true)) {
        return;
    }
    let pattern: Value =
        serde_json::from_str(INT_OR_STRING_ANY_OF).expect("the int-or-string pattern is JSON");
    let first_all_of_any_of = object
        .get("allOf")
        .and_then(|a| a.get(0))
        .and_then(|c| c.get("anyOf"));
    if object.get("anyOf") == Some(&pattern) || first_all_of_any_of == Some(&pattern) {
        return;
    }
    if !object.contains_key("anyOf") {
        object.insert("anyOf".to_string(), pattern);
        return;
    }
    let mut all_of = vec![json!({ "anyOf": pattern })];
    if let Some(Value::Array(existing)) = object.remove("allOf") {
        all_of.extend(existing);
    }
    object.insert("allOf".to_string(), Value::Array(all_of));
}

/// Upstream's `ToStructuralOpenAPIV2` on one node (called before its children, so it still
/// sees which properties are `nullable`).
fn to_structural_v2(node: &mut Value) {
    let Some(object) = node.as_object_mut() else {
        return;
    };
    for junctor in ["allOf", "anyOf", "oneOf", "not"] {
        object.remove(junctor);
    }
    let preserve = object.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    if object.get("nullable") == Some(&Value::Bool(true)) {
        // Swagger 2.0 has no nullable; an untyped value with items or properties breaks kubectl.
        for key in ["type", "nullable", "items", "properties"] {
            object.remove(key);
        }
    }
    if preserve {
        object.remove("items");
        object.remove("properties");
    }
    let array_without_items = !object.contains_key("items")
        && object.get("type").and_then(Value::as_str) == Some("array");
    let open_object = preserve && object.get("type").and_then(Value::as_str) == Some("object");
    if array_without_items || open_object {
        object.remove("type");
    }
    let nullable: Vec<String> = object
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter(|(_, p)| is_true(p, "nullable"))
        .map(|(name, _)| name.clone())
        .collect();
    if let Some(Value::Array(required)) = object.get_mut("required") {
        required.retain(|r| r.as_str().is_none_or(|r| !nullable.iter().any(|n| n == r)));
    }
    let nullable_values = object
        .get("additionalProperties")
        .is_some_and(|a| is_true(a, "nullable"));
    let no_required = object
        .get("required")
        .and_then(Value::as_array)
        .is_some_and(Vec::is_empty);
    if nullable_values || no_required {
        object.remove("required");
    }
}

/// Upstream's `addEmbeddedProperties`: every `x-kubernetes-embedded-resource` node gets
/// `apiVersion`, `kind` and `metadata` properties and requires `kind` and `apiVersion` — except,
/// in v2, those that also preserve unknown fields (kubectl would then refuse unknown fields).
fn add_embedded_properties(node: &mut Value, v2: bool) {
    let Some(object) = node.as_object_mut() else {
        return;
    };
    if let Some(Value::Object(properties)) = object.get_mut("properties") {
        for property in properties.values_mut() {
            add_embedded_properties(property, v2);
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(child @ Value::Object(_)) = object.get_mut(key) {
            add_embedded_properties(child, v2);
        }
    }
    let preserve = object.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    if (v2 && preserve) || object.get("x-kubernetes-embedded-resource") != Some(&Value::Bool(true))
    {
        return;
    }
    let properties = object
        .entry("properties")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(properties) = properties {
        properties.insert(
            "apiVersion".to_string(),
            json!({
                "description": "apiVersion defines the versioned schema of this representation of an object. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources",
                "type": "string",
            }),
        );
        properties.insert(
            "kind".to_string(),
            json!({
                "description": "kind is a string value representing the type of this object. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds",
                "type": "string",
            }),
        );
        properties.insert("metadata".to_string(), object_metadata_property());
    }
    let required = object
        .entry("required")
        .or_insert_with(|| Value::Array(Vec::new()));
    if let Value::Array(required) = required {
        for field in ["kind", "apiVersion"] {
            if !required.iter().any(|r| r == field) {
                required.push(Value::from(field));
            }
        }
    }
}

/// The v2 controller's `PruneDefaults`: no `default` anywhere in the schema (the static v2
/// document has none either).
fn prune_defaults(node: &mut Value) {
    let Some(object) = node.as_object_mut() else {
        return;
    };
    object.remove("default");
    if let Some(Value::Object(properties)) = object.get_mut("properties") {
        properties.values_mut().for_each(prune_defaults);
    }
    for key in ["items", "additionalProperties", "not"] {
        if let Some(child) = object.get_mut(key) {
            prune_defaults(child);
        }
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        if let Some(Value::Array(clauses)) = object.get_mut(key) {
            clauses.iter_mut().for_each(prune_defaults);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::schemas::collect_refs;
    use super::super::{V2_REF_PREFIX, V3_REF_PREFIX, v3_group_version};
    use super::*;

    /// The fixture CRDs (`/work/shared/fixtures/crds`), established.
    fn fixtures() -> Vec<Value> {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures/crds");
        let mut crds: Vec<Value> = std::fs::read_dir(&dir)
            .expect("fixture directory")
            .map(|e| e.expect("test invariant").path())
            .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
            .map(|p| {
                let text = std::fs::read_to_string(&p).expect("test invariant");
                serde_yaml::from_str::<Value>(&text).expect("fixture CRDs are YAML")
            })
            .collect();
        crds.iter_mut().for_each(establish);
        crds.sort_by_key(|c| c["metadata"]["name"].as_str().map(str::to_string));
        assert_eq!(crds.len(), 5);
        crds
    }

    fn establish(crd: &mut Value) {
        crd["status"] = json!({
            "conditions": [
                { "type": "NamesAccepted", "status": "True" },
                { "type": "Established", "status": "True" },
            ],
        });
    }

    fn refs(crds: &[Value]) -> Vec<&Value> {
        crds.iter().collect()
    }

    /// A namespaced `example.com/v1` `Widget` CRD with `schema` and the given subresources.
    fn widget(schema: Value, subresources: Value) -> Value {
        let mut crd = json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": { "name": "widgets.example.com" },
            "spec": {
                "group": "example.com",
                "names": { "kind": "Widget", "plural": "widgets", "listKind": "WidgetList" },
                "scope": "Namespaced",
                "versions": [{
                    "name": "v1",
                    "served": true,
                    "storage": true,
                    "schema": { "openAPIV3Schema": schema },
                    "subresources": subresources,
                }],
            },
        });
        establish(&mut crd);
        crd
    }

    fn resolve<'a>(doc: &'a Value, reference: &str) -> Option<&'a Value> {
        reference
            .strip_prefix('#')?
            .split('/')
            .filter(|s| !s.is_empty())
            .try_fold(doc, |cur, k| cur.get(k))
    }

    fn assert_refs_resolve(doc: &Value, prefix: &str) {
        let mut found = Vec::new();
        collect_refs(doc, &mut found);
        assert!(!found.is_empty());
        for r in found {
            assert!(r.starts_with(prefix), "{r}");
            assert!(resolve(doc, r).is_some(), "dangling {r}");
        }
    }

    /// What `kubectl explain <plural>.<fields>` does: the GVK of the item path's GET, the schema
    /// carrying it, then `properties` (through `allOf`/`$ref`) per field.
    fn explain<'a>(doc: &'a Value, item_path: &str, fields: &[&str]) -> Option<&'a Value> {
        let gvk = doc["paths"].get(item_path)?["get"].get("x-kubernetes-group-version-kind")?;
        let mut schema = doc["components"]["schemas"]
            .as_object()?
            .values()
            .find(|s| {
                s["x-kubernetes-group-version-kind"]
                    .as_array()
                    .is_some_and(|l| l.contains(gvk))
            })?;
        for field in fields {
            // Through described refs, plain refs and array items, as explain's template walks.
            let mut resolved = schema;
            loop {
                let reference = resolved["allOf"][0]["$ref"]
                    .as_str()
                    .or(resolved["$ref"].as_str());
                if let Some(target) = reference.and_then(|r| resolve(doc, r)) {
                    resolved = target;
                } else if let Some(items) = resolved.get("items") {
                    resolved = items;
                } else {
                    break;
                }
            }
            schema = resolved["properties"].get(*field)?;
        }
        Some(schema)
    }

    #[test]
    fn definition_names_reverse_the_group() {
        assert_eq!(
            crd_definition_name("cert-manager.io", "v1", "Certificate"),
            "io.cert-manager.v1.Certificate"
        );
        assert_eq!(
            crd_definition_name("monitoring.coreos.com", "v1", "ServiceMonitorList"),
            "com.coreos.monitoring.v1.ServiceMonitorList"
        );
        assert_eq!(
            crd_definition_name("windows.k8s.io", "v1alpha1", "GMSACredentialSpec"),
            "io.k8s.windows.v1alpha1.GMSACredentialSpec"
        );
    }

    #[test]
    fn certificate_spec_fields_are_explainable_in_v3() {
        let crds = fixtures();
        let doc = v3_document(&refs(&crds), "cert-manager.io", "v1").expect("cert-manager.io/v1");
        assert_eq!(doc["openapi"], "3.0.0");
        assert_refs_resolve(&doc, V3_REF_PREFIX);
        let item = "/apis/cert-manager.io/v1/namespaces/{namespace}/certificates/{name}";
        let secret_name = explain(&doc, item, &["spec", "secretName"]).expect("spec.secretName");
        assert_eq!(secret_name["type"], "string");
        assert!(
            secret_name["description"]
                .as_str()
                .is_some_and(|d| d.starts_with("Name of the Secret resource that will be")),
            "{secret_name}"
        );
        // metadata is ObjectMeta, apiVersion and kind are TypeMeta's.
        assert!(explain(&doc, item, &["metadata", "managedFields", "manager"]).is_some());
        let kind = explain(&doc, item, &["kind"]).expect("kind");
        assert!(
            kind["description"]
                .as_str()
                .is_some_and(|d| d.starts_with("Kind is a string"))
        );
        let certificate = &doc["components"]["schemas"]["io.cert-manager.v1.Certificate"];
        assert_eq!(
            certificate["x-kubernetes-group-version-kind"],
            json!([{ "group": "cert-manager.io", "kind": "Certificate", "version": "v1" }])
        );
        assert_eq!(
            certificate["x-kubernetes-selectable-fields"][0],
            json!({ "fieldPath": "spec.issuerRef.group" })
        );
        let list = &doc["components"]["schemas"]["io.cert-manager.v1.CertificateList"];
        assert_eq!(list["required"], json!(["items"]));
        assert_eq!(
            list["properties"]["items"]["items"]["$ref"],
            "#/components/schemas/io.cert-manager.v1.Certificate"
        );
        // Both CRDs of the group-version are in one document.
        assert!(
            explain(
                &doc,
                "/apis/cert-manager.io/v1/namespaces/{namespace}/issuers/{name}",
                &["spec", "acme", "server"]
            )
            .is_some()
        );
        for meta in ["ObjectMeta", "ListMeta", "Status", "DeleteOptions", "Patch"] {
            let name = format!("io.k8s.apimachinery.pkg.apis.meta.v1.{meta}");
            assert!(doc["components"]["schemas"].get(&name).is_some(), "{name}");
        }
        // Certificates have no scale subresource.
        assert!(
            !doc["components"]["schemas"]
                .as_object()
                .expect("test invariant")
                .contains_key(SCALE)
        );
    }

    #[test]
    fn namespaced_kinds_publish_upstreams_routes() {
        let crds = fixtures();
        let doc = v3_document(&refs(&crds), "cert-manager.io", "v1").expect("test invariant");
        let paths = doc["paths"].as_object().expect("test invariant");
        let base = "/apis/cert-manager.io/v1";
        let mut certificate_paths: Vec<&str> = paths
            .keys()
            .map(String::as_str)
            .filter(|p| p.contains("/certificates"))
            .collect();
        certificate_paths.sort();
        assert_eq!(
            certificate_paths,
            [
                format!("{base}/certificates"),
                format!("{base}/namespaces/{{namespace}}/certificates"),
                format!("{base}/namespaces/{{namespace}}/certificates/{{name}}"),
                format!("{base}/namespaces/{{namespace}}/certificates/{{name}}/status"),
            ]
        );
        let ids = |path: &str| -> Vec<(String, String)> {
            let item = paths[path].as_object().expect("test invariant");
            let mut ids: Vec<(String, String)> = item
                .iter()
                .filter(|(method, _)| *method != "parameters")
                .map(|(_, op)| {
                    (
                        op["x-kubernetes-action"]
                            .as_str()
                            .unwrap_or_default()
                            .to_string(),
                        op["operationId"].as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect();
            ids.sort();
            ids
        };
        let pairs = |list: &[(&str, &str)]| -> Vec<(String, String)> {
            list.iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect()
        };
        assert_eq!(
            ids(&format!("{base}/certificates")),
            pairs(&[("list", "listCertManagerIoV1CertificateForAllNamespaces")])
        );
        assert_eq!(
            ids(&format!("{base}/namespaces/{{namespace}}/certificates")),
            pairs(&[
                (
                    "deletecollection",
                    "deletecollectionCertManagerIoV1NamespacedCertificate"
                ),
                ("list", "listCertManagerIoV1NamespacedCertificate"),
                ("post", "createCertManagerIoV1NamespacedCertificate"),
            ])
        );
        assert_eq!(
            ids(&format!(
                "{base}/namespaces/{{namespace}}/certificates/{{name}}/status"
            )),
            pairs(&[
                ("get", "readCertManagerIoV1NamespacedCertificateStatus"),
                ("patch", "patchCertManagerIoV1NamespacedCertificateStatus"),
                ("put", "replaceCertManagerIoV1NamespacedCertificateStatus"),
            ])
        );
        let item = &paths[&format!("{base}/namespaces/{{namespace}}/certificates/{{name}}")];
        let patch = &item["patch"];
        assert_eq!(
            patch["description"],
            "partially update the specified Certificate"
        );
        assert_eq!(patch["tags"], json!(["certManagerIo_v1"]));
        let media: Vec<&String> = patch["requestBody"]["content"]
            .as_object()
            .expect("test invariant")
            .keys()
            .collect();
        assert_eq!(
            media,
            [
                "application/apply-patch+yaml",
                "application/json-patch+json",
                "application/merge-patch+json"
            ]
        );
        let names: Vec<&str> = patch["parameters"]
            .as_array()
            .expect("test invariant")
            .iter()
            .filter_map(|p| p["name"].as_str())
            .collect();
        assert_eq!(
            names,
            ["dryRun", "fieldManager", "fieldValidation", "force"]
        );
        let path_params: Vec<&str> = item["parameters"]
            .as_array()
            .expect("test invariant")
            .iter()
            .filter_map(|p| p["name"].as_str())
            .collect();
        assert_eq!(path_params, ["name", "pretty", "namespace"]);
        assert_eq!(
            item["put"]["requestBody"]["content"]["application/json"]["schema"]["$ref"],
            "#/components/schemas/io.cert-manager.v1.Certificate"
        );
        assert_eq!(item["delete"]["description"], "delete a Certificate");
        assert!(item["delete"]["requestBody"].get("required").is_none());
        assert_eq!(
            item["get"]["responses"]["200"]["content"]
                .as_object()
                .expect("test invariant")
                .keys()
                .collect::<Vec<_>>(),
            ["application/json", "application/yaml"]
        );
        let issuers = &paths[&format!("{base}/namespaces/{{namespace}}/issuers")];
        assert_eq!(issuers["post"]["description"], "create an Issuer");
    }

    #[test]
    fn cluster_scoped_kinds_have_no_namespaced_paths() {
        let crds = fixtures();
        let doc =
            v3_document(&refs(&crds), "windows.k8s.io", "v1alpha1").expect("windows v1alpha1");
        let mut paths: Vec<&String> = doc["paths"]
            .as_object()
            .expect("test invariant")
            .keys()
            .collect();
        paths.sort();
        assert_eq!(
            paths,
            [
                "/apis/windows.k8s.io/v1alpha1/gmsacredentialspecs",
                "/apis/windows.k8s.io/v1alpha1/gmsacredentialspecs/{name}",
            ]
        );
        let item = &doc["paths"]["/apis/windows.k8s.io/v1alpha1/gmsacredentialspecs/{name}"];
        assert_eq!(
            item["get"]["operationId"],
            "readWindowsV1alpha1GMSACredentialSpec"
        );
        assert_eq!(item["parameters"].as_array().map(Vec::len), Some(2));
        let credspec = explain(
            &doc,
            "/apis/windows.k8s.io/v1alpha1/gmsacredentialspecs/{name}",
            &["credspec", "DomainJoinConfig", "Guid"],
        );
        assert_eq!(credspec, Some(&json!({ "type": "string" })));
        // windows.k8s.io/v1 is served by tandem's built-in kind: its document wins.
        assert!(v3_document(&refs(&crds), "windows.k8s.io", "v1").is_none());
        assert!(v3_group_version("apis/windows.k8s.io/v1").is_some());
        assert!(v3_document(&refs(&crds), "example.com", "v1").is_none());
        assert_eq!(
            v3_document_for_path(
                &refs(&crds),
                "/openapi/v3/apis/windows.k8s.io/v1alpha1?hash=0"
            ),
            Some(doc)
        );
    }

    #[test]
    fn crds_not_established_are_not_published() {
        let mut crds = fixtures();
        for crd in &mut crds {
            crd["status"]["conditions"][1]["status"] = json!("False");
        }
        assert!(v3_document(&refs(&crds), "cert-manager.io", "v1").is_none());
        assert!(v3_index_entries(&refs(&crds)).is_empty());
        assert_eq!(&v2_with_crds(&refs(&crds)), v2());
    }

    #[test]
    fn index_lists_crd_group_versions_with_a_hash_of_their_document() {
        let mut crds = fixtures();
        let entries = v3_index_entries(&refs(&crds));
        let keys: Vec<&str> = entries.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "apis/cert-manager.io/v1",
                "apis/monitoring.coreos.com/v1",
                "apis/windows.k8s.io/v1alpha1",
            ]
        );
        let url = |entries: &[(String, Value)], key: &str| -> String {
            let (_, entry) = entries
                .iter()
                .find(|(k, _)| k == key)
                .expect("test invariant");
            entry["serverRelativeURL"]
                .as_str()
                .expect("test invariant")
                .to_string()
        };
        let before = url(&entries, "apis/cert-manager.io/v1");
        assert!(before.starts_with("/openapi/v3/apis/cert-manager.io/v1?hash="));
        let monitoring = url(&entries, "apis/monitoring.coreos.com/v1");

        // A changed description changes that group-version's hash, and only that one.
        let certificates = crds
            .iter_mut()
            .find(|c| c["metadata"]["name"] == "certificates.cert-manager.io")
            .expect("test invariant");
        certificates["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["description"] =
            json!("changed");
        let after = v3_index_entries(&refs(&crds));
        assert_ne!(url(&after, "apis/cert-manager.io/v1"), before);
        assert_eq!(url(&after, "apis/monitoring.coreos.com/v1"), monitoring);

        let index = v3_index_with_crds(&refs(&crds));
        let paths = index["paths"].as_object().expect("test invariant");
        assert!(paths.contains_key("api/v1"));
        assert!(paths.contains_key("apis/cert-manager.io/v1"));
        assert_eq!(
            paths["apis/windows.k8s.io/v1"],
            v3_index()["paths"]["apis/windows.k8s.io/v1"]
        );
        assert_eq!(v3_index_with_crds(&[]), v3_index());
    }

    #[test]
    fn v2_without_crds_is_the_static_document() {
        assert_eq!(&v2_with_crds(&[]), v2());
    }

    #[test]
    fn v2_merges_custom_kinds_and_their_paths() {
        let crds = fixtures();
        let doc = v2_with_crds(&refs(&crds));
        assert_refs_resolve(&doc, V2_REF_PREFIX);
        let definitions = doc["definitions"].as_object().expect("test invariant");
        for name in [
            "io.cert-manager.v1.Certificate",
            "io.cert-manager.v1.CertificateList",
            "io.cert-manager.v1.Issuer",
            "com.coreos.monitoring.v1.ServiceMonitor",
            "com.coreos.monitoring.v1.PrometheusRuleList",
            "io.k8s.windows.v1alpha1.GMSACredentialSpec",
        ] {
            assert!(definitions.contains_key(name), "{name}");
        }
        // The built-in GMSACredentialSpec is kept, not replaced by the CRD's.
        assert_eq!(
            definitions["io.k8s.windows.v1.GMSACredentialSpec"],
            v2()["definitions"]["io.k8s.windows.v1.GMSACredentialSpec"]
        );
        let certificate = &definitions["io.cert-manager.v1.Certificate"];
        assert_eq!(
            certificate["properties"]["metadata"]["$ref"],
            "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
        );
        assert!(
            certificate["properties"]["spec"]["properties"]["secretName"]["description"]
                .is_string()
        );
        let item =
            &doc["paths"]["/apis/cert-manager.io/v1/namespaces/{namespace}/certificates/{name}"];
        assert_eq!(
            item["patch"]["consumes"],
            json!([
                "application/apply-patch+yaml",
                "application/json-patch+json",
                "application/merge-patch+json"
            ])
        );
        assert_eq!(
            item["get"]["consumes"],
            json!(["application/json", "application/yaml"])
        );
        assert_eq!(
            item["get"]["produces"],
            json!(["application/json", "application/yaml"])
        );
        assert_eq!(
            item["put"]["parameters"][0],
            json!({
                "name": "body",
                "in": "body",
                "required": true,
                "schema": { "$ref": "#/definitions/io.cert-manager.v1.Certificate" },
            })
        );
        // Everything static is still there, unchanged.
        for (path, value) in v2()["paths"].as_object().expect("test invariant") {
            assert_eq!(&doc["paths"][path], value, "{path}");
        }
        // Swagger 2.0 has no anyOf: ServiceMonitor's int-or-string targetPort has no type at all.
        let target_port = &definitions["com.coreos.monitoring.v1.ServiceMonitor"]["properties"]["spec"]
            ["properties"]["endpoints"]["items"]["properties"]["targetPort"];
        assert_eq!(target_port["x-kubernetes-int-or-string"], true);
        assert!(target_port.get("anyOf").is_none() && target_port.get("type").is_none());
    }

    #[test]
    fn int_or_string_and_nullable_convert_as_upstream() {
        let schema = json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "required": ["port", "note", "tags"],
                    "properties": {
                        "port": { "x-kubernetes-int-or-string": true, "description": "a port" },
                        "range": {
                            "x-kubernetes-int-or-string": true,
                            "anyOf": [{ "minimum": 1 }],
                        },
                        "note": { "type": "string", "nullable": true, "default": "none" },
                        "tags": {
                            "type": "array",
                            "nullable": true,
                            "items": { "type": "string" },
                        },
                        "replicas": {
                            "type": "integer",
                            "default": 1,
                            "oneOf": [{ "minimum": 0 }],
                            "example": 3,
                        },
                        "raw": { "type": "object", "x-kubernetes-preserve-unknown-fields": true },
                    },
                },
            },
        });
        let crd = widget(
            schema,
            json!({ "status": {}, "scale": {
            "specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas" } }),
        );
        let v3 = v3_document(&[&crd], "example.com", "v1").expect("test invariant");
        let spec = &v3["components"]["schemas"]["com.example.v1.Widget"]["properties"]["spec"];
        let int_or_string = json!([{ "type": "integer" }, { "type": "string" }]);
        assert_eq!(
            spec["properties"]["port"],
            json!({ "x-kubernetes-int-or-string": true, "description": "a port", "anyOf": int_or_string })
        );
        assert_eq!(
            spec["properties"]["range"]["allOf"],
            json!([{ "anyOf": int_or_string }])
        );
        assert_eq!(
            spec["properties"]["note"],
            json!({ "type": "string", "nullable": true, "default": "none" })
        );
        assert_eq!(spec["required"], json!(["port", "note", "tags"]));
        // `example` is not part of a structural schema.
        assert_eq!(
            spec["properties"]["replicas"],
            json!({ "type": "integer", "default": 1, "oneOf": [{ "minimum": 0 }] })
        );

        let v2 = v2_with_crds(&[&crd]);
        let spec = &v2["definitions"]["com.example.v1.Widget"]["properties"]["spec"];
        assert_eq!(
            spec["properties"],
            json!({
                "port": { "x-kubernetes-int-or-string": true, "description": "a port" },
                "range": { "x-kubernetes-int-or-string": true },
                "note": {},
                "tags": {},
                "replicas": { "type": "integer" },
                "raw": { "x-kubernetes-preserve-unknown-fields": true },
            })
        );
        assert_eq!(spec["required"], json!(["port"]));

        // The scale subresource speaks autoscaling/v1 Scale, under the kind's GVK.
        let scale =
            &v3["paths"]["/apis/example.com/v1/namespaces/{namespace}/widgets/{name}/scale"];
        assert_eq!(
            scale["put"]["requestBody"]["content"]["application/json"]["schema"]["$ref"],
            format!("{V3_REF_PREFIX}{SCALE}")
        );
        assert_eq!(
            scale["get"]["x-kubernetes-group-version-kind"]["kind"],
            "Widget"
        );
        assert_eq!(
            scale["get"]["description"],
            "read scale of the specified Widget"
        );
        assert!(v3["components"]["schemas"].get(SCALE).is_some());
        assert_refs_resolve(&v3, V3_REF_PREFIX);
    }

    #[test]
    fn embedded_resources_get_type_and_object_meta() {
        let schema = json!({
            "type": "object",
            "properties": {
                "template": {
                    "type": "object",
                    "x-kubernetes-embedded-resource": true,
                    "properties": { "spec": { "type": "object" } },
                },
                "anything": {
                    "type": "object",
                    "x-kubernetes-embedded-resource": true,
                    "x-kubernetes-preserve-unknown-fields": true,
                },
            },
        });
        let crd = widget(schema, json!(null));
        let v3 = v3_document(&[&crd], "example.com", "v1").expect("test invariant");
        let widget = &v3["components"]["schemas"]["com.example.v1.Widget"];
        let template = &widget["properties"]["template"];
        let mut fields: Vec<&String> = template["properties"]
            .as_object()
            .expect("test invariant")
            .keys()
            .collect();
        fields.sort();
        assert_eq!(fields, ["apiVersion", "kind", "metadata", "spec"]);
        assert_eq!(template["required"], json!(["kind", "apiVersion"]));
        assert!(widget["properties"]["anything"]["properties"]["metadata"].is_object());
        assert!(
            v3["paths"]
                .as_object()
                .expect("test invariant")
                .keys()
                .all(|p| !p.ends_with("/status") && !p.ends_with("/scale"))
        );

        // In v2, an embedded resource that preserves unknown fields is left open.
        let v2 = v2_with_crds(&[&crd]);
        let widget = &v2["definitions"]["com.example.v1.Widget"];
        assert_eq!(
            widget["properties"]["anything"],
            json!({ "x-kubernetes-embedded-resource": true, "x-kubernetes-preserve-unknown-fields": true })
        );
        assert_eq!(
            widget["properties"]["template"]["properties"]["metadata"]["$ref"],
            "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
        );
    }

    #[test]
    fn open_or_missing_schemas_publish_a_bare_object() {
        let open = widget(
            json!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true }),
            json!(null),
        );
        let gvk = json!([{ "group": "example.com", "kind": "Widget", "version": "v1" }]);
        let v2 = v2_with_crds(&[&open]);
        assert_eq!(
            v2["definitions"]["com.example.v1.Widget"],
            json!({ "type": "object", "x-kubernetes-group-version-kind": gvk })
        );
        // v3 keeps the root open and still describes the object's metadata.
        let v3 = v3_document(&[&open], "example.com", "v1").expect("test invariant");
        let open_widget = &v3["components"]["schemas"]["com.example.v1.Widget"];
        assert_eq!(open_widget["x-kubernetes-preserve-unknown-fields"], true);
        assert!(open_widget["properties"]["metadata"].is_object());

        // A schema that is not structural (an untyped property) is not published either.
        let loose = widget(
            json!({ "type": "object", "properties": { "a": {} } }),
            json!(null),
        );
        let v3 = v3_document(&[&loose], "example.com", "v1").expect("test invariant");
        assert_eq!(
            v3["components"]["schemas"]["com.example.v1.Widget"],
            json!({ "type": "object", "x-kubernetes-group-version-kind": gvk })
        );
    }

    #[test]
    fn building_every_crd_document_takes_reasonable_time() {
        // Reported, never asserted.
        let crds = fixtures();
        let start = std::time::Instant::now();
        let entries = v3_index_entries(&refs(&crds));
        let v3_took = start.elapsed();
        let start = std::time::Instant::now();
        let v2 = v2_with_crds(&refs(&crds));
        println!(
            "crd openapi: {} v3 documents in {v3_took:?}; v2 ({} definitions) in {:?}",
            entries.len(),
            v2["definitions"].as_object().map_or(0, |d| d.len()),
            start.elapsed()
        );
    }
}
