//! `/openapi/v3`: the index of group-version documents and the documents themselves, in the shape
//! kube-openapi's `builder3` publishes and client-go's `openapi3.Root` parses.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use serde_json::{Map, Value, json};

use crate::registry::Registry;

use super::routes::{Operation, Param, Response, Route, group_version_routes};
use super::schemas::{collect_refs, definitions, ref_target, schema_ref};
use super::{INFO_TITLE, INFO_VERSION, fnv1a64};

struct V3 {
    /// `api/v1`, `apis/apps/v1`, … → document.
    documents: BTreeMap<String, Value>,
    index: Value,
}

fn v3() -> &'static V3 {
    static V3_DOCS: OnceLock<V3> = OnceLock::new();
    V3_DOCS.get_or_init(build)
}

/// The `/openapi/v3` discovery document: `{"paths": {"api/v1": {"serverRelativeURL":
/// "/openapi/v3/api/v1?hash=<HASH>"}, "apis/apps/v1": …}}`, one entry per served group-version.
///
/// The hash is a hex FNV-1a digest of the serialized document, so it changes exactly when the
/// document does; client-go keys its cache on the URL (upstream answers a request carrying the
/// current hash with `Cache-Control: public, immutable`).
pub fn v3_index() -> Value {
    v3().index.clone()
}

/// The OpenAPI 3.0 document of one group-version, by its index key: `api/v1`, `apis/apps/v1`
/// (a leading `/` and a leading `openapi/v3/` are tolerated). `None` for unknown group-versions.
///
/// It holds every path of the group-version's resources (namespaced and cluster-wide collections,
/// items, deprecated watch paths, `status`/`scale`/`binding`/`eviction`/`ephemeralcontainers`/
/// `log`/`finalize` subresources), each operation with `x-kubernetes-action`,
/// `x-kubernetes-group-version-kind` and inline parameters (writes carry `dryRun`, `fieldManager`
/// and `fieldValidation`; patches also `force`), and in `components.schemas` the definitions those
/// operations reference, transitively.
pub fn v3_group_version(path: &str) -> Option<&'static Value> {
    v3().documents.get(normalize_key(path))
}

/// The index key a request path names: `/openapi/v3/apis/apps/v1?hash=…` → `apis/apps/v1`.
pub(super) fn normalize_key(path: &str) -> &str {
    let key = path.trim_start_matches('/');
    let key = key.strip_prefix("openapi/v3/").unwrap_or(key);
    key.split('?').next().unwrap_or(key).trim_end_matches('/')
}

/// The index entry of a group-version document: `{"serverRelativeURL":
/// "/openapi/v3/<key>?hash=<HASH>"}`, the hash a hex FNV-1a digest of the serialized document.
pub(super) fn index_entry(key: &str, document: &Value) -> Value {
    let bytes = serde_json::to_vec(document).expect("JSON values always serialize");
    json!({ "serverRelativeURL": format!("/openapi/v3/{key}?hash={:016X}", fnv1a64(&bytes)) })
}

/// The index key of a group-version: `api/v1` or `apis/<group>/<version>`.
pub(crate) fn index_key(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

fn build() -> V3 {
    let registry = Registry::builtin();
    let mut documents = BTreeMap::new();
    let mut index = Map::new();
    for (group, version) in registry.group_versions() {
        let routes = group_version_routes(&registry, &group, &version);
        let document = document(&routes);
        let key = index_key(&group, &version);
        index.insert(key.clone(), index_entry(&key, &document));
        documents.insert(key, document);
    }
    V3 {
        documents,
        index: json!({ "paths": index }),
    }
}

fn document(routes: &[Route]) -> Value {
    let paths = Value::Object(paths(routes));
    json!({
        "openapi": "3.0.0",
        "info": { "title": INFO_TITLE, "version": INFO_VERSION },
        "paths": paths,
        "components": {
            "schemas": closure(&paths),
            "securitySchemes": {
                "BearerToken": {
                    "type": "apiKey",
                    "description": "Bearer Token authentication",
                    "name": "authorization",
                    "in": "header",
                },
            },
        },
    })
}

/// The `paths` object of `routes`: path → path item.
pub(super) fn paths(routes: &[Route]) -> Map<String, Value> {
    routes
        .iter()
        .map(|route| (route.path.clone(), path_item(route)))
        .collect()
}

/// The definitions `root` references, and everything those reference.
pub(crate) fn closure(root: &Value) -> Map<String, Value> {
    let all = definitions();
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    let mut pending: Vec<&str> = Vec::new();
    collect_refs(root, &mut pending);
    while let Some(reference) = pending.pop() {
        let Some(name) = ref_target(reference) else {
            continue;
        };
        let Some((name, schema)) = all.get_key_value(name) else {
            continue;
        };
        if seen.insert(name.as_str()) {
            collect_refs(schema, &mut pending);
        }
    }
    seen.into_iter()
        .map(|name| (name.to_string(), all[name].clone()))
        .collect()
}

fn path_item(route: &Route) -> Value {
    let mut item = Map::new();
    for operation in &route.operations {
        item.insert(operation.method.to_string(), operation_object(operation));
    }
    item.insert(
        "parameters".to_string(),
        Value::Array(route.parameters.iter().map(parameter).collect()),
    );
    Value::Object(item)
}

fn parameter(param: &Param) -> Value {
    let mut value = json!({
        "name": param.name,
        "in": param.location,
        "description": param.description,
        "schema": { "type": param.ty, "uniqueItems": true },
    });
    if param.required {
        value["required"] = Value::Bool(true);
    }
    value
}

fn response_schema(response: &Response) -> Value {
    match response {
        Response::Definition(name) => schema_ref(name),
        Response::Text => json!({ "type": "string" }),
    }
}

fn operation_object(op: &Operation) -> Value {
    let content: Map<String, Value> = op
        .produces
        .iter()
        .map(|mt| {
            (
                mt.to_string(),
                json!({ "schema": response_schema(&op.response) }),
            )
        })
        .collect();
    let mut responses = Map::new();
    for code in op.codes {
        let description = match *code {
            "201" => "Created",
            "202" => "Accepted",
            _ => "OK",
        };
        responses.insert(
            code.to_string(),
            json!({ "description": description, "content": content.clone() }),
        );
    }
    responses.insert("401".to_string(), json!({ "description": "Unauthorized" }));

    let (group, version, kind) = &op.gvk;
    let mut value = json!({
        "tags": [op.tag],
        "description": op.description,
        "operationId": op.operation_id,
        "parameters": op.parameters.iter().map(parameter).collect::<Vec<_>>(),
        "responses": responses,
        "x-kubernetes-action": op.action,
        "x-kubernetes-group-version-kind": { "group": group, "kind": kind, "version": version },
    });
    if let Some(body) = &op.body {
        let content: Map<String, Value> = body
            .media_types
            .iter()
            .map(|mt| {
                (
                    mt.to_string(),
                    json!({ "schema": schema_ref(&body.definition) }),
                )
            })
            .collect();
        let mut request_body = json!({ "content": content });
        if op.method != "delete" {
            request_body["required"] = Value::Bool(true);
        }
        value["requestBody"] = request_body;
    }
    value
}
