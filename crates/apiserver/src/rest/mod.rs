//! Generic REST storage: create, get, list, update, patch, delete and deletecollection for every
//! registered type, with the subresources `status`, `scale`, `binding` and `finalize`. Mirrors
//! upstream's `k8s.io/apiserver/pkg/registry/generic/registry.Store` and the handlers in
//! `k8s.io/apiserver/pkg/endpoints/handlers`.
//!
//! One file per concern, each extending `crate::state::State`: `reads` (GET, LIST and paging,
//! with the selectors of `filter`), `create`, `update` (PUT, PATCH and server-side apply),
//! `delete` (DELETE and deletecollection) and `subresources` (scale and binding), over the write
//! pipeline they share in `write` (decoding, strategies, admission, validation, the
//! compare-and-swap of an update). The calls go one way: `update` → `subresources` (a scale
//! patch) and `create` (an apply that creates) → `write` → the admission layer
//! (`crate::admission`, `crate::quota`, `crate::service_alloc`, `crate::service_claims`), which
//! reads `crate::state` and never calls back into `rest`; `delete` → `reads` (the objects of a
//! collection).
//!
//! This file holds what every verb shares: the request context, the reply, body decoding and the
//! conversions between stored bytes and objects.

mod create;
mod delete;
mod filter;
mod reads;
mod subresources;
mod update;
mod write;

use std::sync::Arc;

use bytes::Bytes;
use serde_json::{Value, json};
use tandem_core::apiextensions::schema::Structural;
use tandem_core::patch::Schema;
use tandem_core::registry::ResourceType;
use tandem_store::{Revision, StoreError};

pub use filter::Filter;
pub use reads::Continue;
pub use update::PatchKind;
pub(crate) use write::WebhookWrite;

use crate::cache::set_resource_version;
use crate::error::{ApiError, ApiResult};
use crate::output::{Format, IncludeObject};
use crate::request::Query;
use crate::state::State;
// `State` and `Options` live in `crate::state`; `Options` stays reachable here for callers that
// name it `rest::Options`.
pub use crate::state::Options;

/// Largest request body accepted, as upstream's 3 MiB limit.
pub const MAX_BODY: usize = 3 * 1024 * 1024;

fn is_service(rt: &ResourceType) -> bool {
    rt.group.is_empty() && rt.kind == "Service"
}

/// Per-request context.
pub struct Ctx {
    pub query: Query,
    pub format: Format,
    pub content_type: Option<String>,
    pub warnings: Vec<String>,
    /// Who makes the request (after impersonation).
    pub user: Arc<crate::auth::UserInfo>,
    pub user_agent: Option<String>,
    /// Set while a server-side apply is being written: apply maintains managedFields itself.
    pub applying: bool,
    /// Set once admission webhooks have seen this request in another form (a Scale, before the
    /// scaled object's update), so the write does not call them again.
    pub webhooks_done: bool,
}

impl Ctx {
    /// A context for requests the server makes on its own behalf.
    pub fn internal(user: &str) -> Ctx {
        Ctx {
            query: Query::default(),
            format: Format::Json,
            content_type: None,
            warnings: Vec::new(),
            user: Arc::new(crate::auth::UserInfo::internal(user)),
            user_agent: None,
            applying: false,
            webhooks_done: false,
        }
    }

    /// The field manager of a write: `?fieldManager=`, else derived from the User-Agent as upstream.
    fn field_manager(&self) -> String {
        match (self.query.get("fieldManager"), &self.user_agent) {
            (Some(m), _) => m.to_string(),
            (None, Some(ua)) => tandem_core::patch::manager_from_user_agent(ua),
            (None, None) => "unknown".to_string(),
        }
    }

    /// Records the fields a non-apply write sets in `metadata.managedFields` (upstream's field
    /// manager `Update` entries).
    /// `schema` is a custom resource's structural schema (its lists and maps merge by it).
    fn track(
        &self,
        rt: &ResourceType,
        schema: Option<&Structural>,
        old: Option<&Value>,
        new: &mut Value,
    ) {
        if self.applying {
            return;
        }
        let schema = match schema {
            Some(s) => Schema::Structural(s),
            None => tandem_core::openapi::root_definition(&rt.api_version(), &rt.kind).into(),
        };
        let now = tandem_core::time::now_rfc3339();
        tandem_core::patch::track_update(
            old,
            new,
            &self.field_manager(),
            &rt.api_version(),
            schema,
            &now,
        );
    }

    fn dry_run(&self) -> bool {
        self.query.get("dryRun") == Some("All")
    }
    fn include(&self) -> IncludeObject {
        IncludeObject::parse(self.query.get("includeObject"))
    }
}

/// A successful response.
pub enum Reply {
    /// One object (or Status) to encode in the negotiated format.
    Value(u16, Value),
    /// Already-encoded bytes.
    Raw(u16, Bytes, &'static str),
}

/// Parses a request body as JSON, or YAML when the content type says so.
pub fn decode_body(body: &[u8], content_type: Option<&str>) -> ApiResult<Value> {
    let ct = content_type
        .unwrap_or("application/json")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let value: Value = match ct.as_str() {
        "application/yaml" | "application/apply-patch+yaml" | "text/yaml" => {
            serde_yaml::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("error decoding YAML body: {e}")))?
        }
        "application/json"
        | ""
        | "*/*"
        | "application/json-patch+json"
        | "application/merge-patch+json"
        | "application/strategic-merge-patch+json" => serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding JSON body: {e}")))?,
        crate::protobuf::MEDIA_TYPE => crate::protobuf::decode(body)?,
        other => return Err(ApiError::unsupported_media_type(other)),
    };
    Ok(value)
}

fn parse_stored(rt: &ResourceType, kv: &tandem_store::KeyValue) -> ApiResult<Value> {
    let mut v: Value = serde_json::from_slice(&kv.value).map_err(|e| {
        ApiError::internal(format!("stored {} {} is corrupt: {e}", rt.kind, kv.key))
    })?;
    set_resource_version(&mut v, kv.mod_revision);
    Ok(v)
}

impl State {
    /// The stored key-value of `rt`'s object `name` at `key`; 404 when there is none.
    async fn stored_kv(
        &self,
        rt: &ResourceType,
        key: &str,
        name: &str,
    ) -> ApiResult<tandem_store::KeyValue> {
        self.store
            .get(key)
            .await?
            .ok_or_else(|| ApiError::not_found(rt, name))
    }
}

/// The stored encoding of an object: its JSON without `metadata.resourceVersion` (the revision
/// is stamped on the way out). Removes `resourceVersion` from `obj` rather than encoding a copy
/// without it; callers stamp the new revision back with [`with_rv`] when they answer.
fn to_stored(obj: &mut Value) -> ApiResult<Bytes> {
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
    }
    serde_json::to_vec(obj)
        .map(Bytes::from)
        .map_err(|e| ApiError::internal(format!("cannot encode object: {e}")))
}

/// Whether two objects are the same apart from `metadata.resourceVersion`: an update that
/// changes nothing is not written.
fn same_ignoring_resource_version(a: &Value, b: &Value) -> bool {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return a == b;
    };
    if a.len() != b.len() {
        return false;
    }
    a.iter().all(|(k, va)| match (k.as_str(), b.get(k)) {
        ("metadata", Some(vb)) => match (va.as_object(), vb.as_object()) {
            (Some(ma), Some(mb)) => {
                let count = |m: &serde_json::Map<String, Value>| {
                    m.keys().filter(|k| *k != "resourceVersion").count()
                };
                count(ma) == count(mb)
                    && ma
                        .iter()
                        .filter(|(k, _)| *k != "resourceVersion")
                        .all(|(k, v)| mb.get(k) == Some(v))
            }
            _ => va == vb,
        },
        (_, Some(vb)) => va == vb,
        (_, None) => false,
    })
}

fn with_rv(mut v: Value, rv: Revision) -> Value {
    set_resource_version(&mut v, rv);
    v
}

fn int_param(q: &Query, key: &str) -> ApiResult<Option<i64>> {
    q.int(key).map_err(ApiError::bad_request)
}

fn parse_rv(s: &str) -> ApiResult<Revision> {
    s.parse::<Revision>()
        .map_err(|_| ApiError::bad_request(format!("invalid resource version: {s:?}")))
}

fn has_spec_finalizers(rt: &ResourceType, obj: &Value) -> bool {
    rt.group.is_empty()
        && rt.kind == "Namespace"
        && obj
            .pointer("/spec/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty())
}

fn map_write_err(rt: &ResourceType, name: &str, e: StoreError) -> ApiError {
    match e {
        StoreError::Conflict { .. } => ApiError::conflict(rt, name),
        StoreError::NotFound(_) => ApiError::not_found(rt, name),
        StoreError::AlreadyExists(_) => ApiError::already_exists(rt, name),
        other => other.into(),
    }
}

/// A `Status` of success, as binding and some deletes return.
pub fn success_status() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})
}

/// Where an object lives: its namespace (for namespaced types) and name.
#[derive(Debug, Clone, Copy)]
struct ObjectKey<'a> {
    ns: Option<&'a str>,
    name: &'a str,
}

/// An object as read from the store, with the revision a conditional write must match.
#[derive(Debug, Clone, Copy)]
struct Stored<'a> {
    value: &'a Value,
    rev: Revision,
}

impl<'a> Stored<'a> {
    /// `value`, parsed from `kv`: a write must find the key still at `kv`'s revision.
    fn of(value: &'a Value, kv: &tandem_store::KeyValue) -> Self {
        Stored {
            value,
            rev: kv.mod_revision,
        }
    }
}
