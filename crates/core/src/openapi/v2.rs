//! `/openapi/v2`: one Swagger 2.0 document for every served group-version, as the upstream API
//! server publishes it (kube-openapi's `builder`). kubectl fetches v2 only as protobuf; this JSON
//! rendering serves other clients.

use std::sync::OnceLock;

use serde_json::{Map, Value, json};

use crate::registry::Registry;

use super::routes::{Operation, Param, Response, Route, group_version_routes};
use super::schemas::{V3_REF_PREFIX, definitions};
use super::{INFO_TITLE, INFO_VERSION};

/// Where Swagger 2.0 documents keep their schemas.
pub const V2_REF_PREFIX: &str = "#/definitions/";

/// The Swagger 2.0 document: every path of every served group-version and every definition, refs
/// of the form `#/definitions/<name>` (a described ref is `{"$ref": …, "description": …}`, as
/// upstream's v2 writes it). Built once on first use.
pub fn v2() -> &'static Value {
    static V2_DOC: OnceLock<Value> = OnceLock::new();
    V2_DOC.get_or_init(build)
}

fn build() -> Value {
    let registry = Registry::builtin();
    let mut paths = Map::new();
    for (group, version) in registry.group_versions() {
        for route in group_version_routes(&registry, &group, &version) {
            paths.insert(route.path.clone(), path_item(&route));
        }
    }
    let defs: Map<String, Value> = definitions()
        .iter()
        .map(|(name, schema)| {
            let mut schema = schema.clone();
            to_v2_schema(&mut schema);
            (name.clone(), schema)
        })
        .collect();
    json!({
        "swagger": "2.0",
        "info": { "title": INFO_TITLE, "version": INFO_VERSION },
        "paths": paths,
        "definitions": defs,
        "securityDefinitions": {
            "BearerToken": {
                "type": "apiKey",
                "description": "Bearer Token authentication",
                "name": "authorization",
                "in": "header",
            },
        },
        "security": [{ "BearerToken": [] }],
    })
}

/// Turns `{"allOf": [{"$ref": r}], …}` back into `{"$ref": r, …}` and points refs at
/// `#/definitions/`.
pub(super) fn to_v2_schema(value: &mut Value) {
    match value {
        Value::Object(object) => {
            for child in object.values_mut() {
                to_v2_schema(child);
            }
            let single_ref = match object.get("allOf") {
                Some(Value::Array(all_of))
                    if all_of.len() == 1 && !object.contains_key("properties") =>
                {
                    all_of[0]
                        .as_object()
                        .filter(|o| o.len() == 1)
                        .and_then(|o| o.get("$ref"))
                        .cloned()
                }
                _ => None,
            };
            if let Some(reference) = single_ref {
                object.remove("allOf");
                object.insert("$ref".to_string(), reference);
            }
            if let Some(Value::String(reference)) = object.get_mut("$ref")
                && let Some(name) = reference.strip_prefix(V3_REF_PREFIX)
            {
                *reference = format!("{V2_REF_PREFIX}{name}");
            }
        }
        Value::Array(items) => items.iter_mut().for_each(to_v2_schema),
        _ => {}
    }
}

fn definition_ref(name: &str) -> Value {
    json!({ "$ref": format!("{V2_REF_PREFIX}{name}") })
}

/// The Swagger 2.0 path item of `route`.
pub(super) fn path_item(route: &Route) -> Value {
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
        "uniqueItems": true,
        "type": param.ty,
        "description": param.description,
        "name": param.name,
        "in": param.location,
    });
    if param.required {
        value["required"] = Value::Bool(true);
    }
    value
}

fn operation_object(op: &Operation) -> Value {
    let schema = match &op.response {
        Response::Definition(name) => definition_ref(name),
        Response::Text => json!({ "type": "string" }),
    };
    let mut responses = Map::new();
    for code in op.codes {
        let description = match *code {
            "201" => "Created",
            "202" => "Accepted",
            _ => "OK",
        };
        responses.insert(
            code.to_string(),
            json!({ "description": description, "schema": schema }),
        );
    }
    responses.insert("401".to_string(), json!({ "description": "Unauthorized" }));

    let mut parameters: Vec<Value> = Vec::new();
    let mut consumes = op.bodiless_consumes;
    if let Some(body) = &op.body {
        let mut body_param =
            json!({ "name": "body", "in": "body", "schema": definition_ref(&body.definition) });
        if op.method != "delete" {
            body_param["required"] = Value::Bool(true);
        }
        parameters.push(body_param);
        consumes = body.media_types;
    }
    parameters.extend(op.parameters.iter().map(parameter));
    let (group, version, kind) = &op.gvk;
    json!({
        "description": op.description,
        "consumes": consumes,
        "produces": op.produces,
        "schemes": ["https"],
        "tags": [op.tag],
        "operationId": op.operation_id,
        "parameters": parameters,
        "responses": responses,
        "x-kubernetes-action": op.action,
        "x-kubernetes-group-version-kind": { "group": group, "kind": kind, "version": version },
    })
}
