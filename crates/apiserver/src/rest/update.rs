//! PUT and PATCH of an object or its status (upstream's `UpdateResource` and `PatchResource`
//! handlers): JSON, merge and strategic merge patches and server-side apply are applied to the
//! stored object, and the result goes through the write pipeline; a patch that states no
//! resourceVersion is applied again after a conflict, as upstream's patcher retries.

use serde_json::{Value, json};
use tandem_core::field::FieldError;
use tandem_core::patch::Schema;
use tandem_core::registry::ResourceType;

use super::{Ctx, ObjectKey, Reply, Stored, decode_body, is_service, parse_rv, parse_stored};
use crate::error::{ApiError, ApiResult};
use crate::meta;
use crate::state::State;

impl State {
    /// PUT of an object or its status.
    pub async fn update(
        &self,
        ctx: &mut Ctx,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
        body: Value,
        sub: Option<&str>,
    ) -> ApiResult<Reply> {
        if let Some(body_name) = meta::name(&body)
            && body_name != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        if let (Some(body_ns), Some(url_ns)) = (meta::namespace(&body), ns)
            && !body_ns.is_empty()
            && body_ns != url_ns
        {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        let new = self.decode_typed(ctx, rt, body)?;
        let _service_guard = if is_service(rt) {
            Some(self.service_lock.lock().await)
        } else {
            None
        };
        let precondition = meta::resource_version(&new).map(parse_rv).transpose()?;
        let key = rt.key(ns, name);
        let kv = self.stored_kv(rt, &key, name).await?;
        if precondition.is_some_and(|p| p != kv.mod_revision) {
            return Err(ApiError::conflict(rt, name));
        }
        let mut old = parse_stored(rt, &kv)?;
        // The update works on the stored object at the request's version.
        self.to_request_version(rt, &mut old).await?;
        let stored = Stored::of(&old, &kv);
        self.commit_update(ctx, rt, ObjectKey { ns, name }, new, stored, sub)
            .await
    }

    /// PATCH (JSON, merge, strategic merge) and server-side apply.
    pub async fn patch(
        &self,
        ctx: &mut Ctx,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
        body: &[u8],
        sub: Option<&str>,
    ) -> ApiResult<Reply> {
        let ct = ctx.content_type.clone().unwrap_or_default();
        let ct = ct
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        let kind = match ct.as_str() {
            "application/json-patch+json" => PatchKind::Json,
            "application/merge-patch+json" => PatchKind::Merge,
            "application/strategic-merge-patch+json" => PatchKind::Strategic,
            "application/apply-patch+yaml" | "application/apply-patch+cbor" => PatchKind::Apply,
            other => return Err(ApiError::unsupported_media_type(other)),
        };
        let patch = decode_body(
            body,
            Some(if kind == PatchKind::Apply {
                "application/yaml"
            } else {
                "application/json"
            }),
        )?;
        let key = rt.key(ns, name);
        let mut service_guard = if is_service(rt) {
            Some(self.service_lock.lock().await)
        } else {
            None
        };
        for _attempt in 0..8 {
            let current = self.store.get(&key).await?;
            let Some(kv) = current else {
                if kind == PatchKind::Apply {
                    let manager = ctx
                        .query
                        .get("fieldManager")
                        .unwrap_or("unknown")
                        .to_string();
                    let force = ctx.query.bool("force");
                    let now = tandem_core::time::now_rfc3339();
                    let def = tandem_core::openapi::root_definition(&rt.api_version(), &rt.kind);
                    let schema = self.custom_schema(rt);
                    let schema = schema.as_deref().map_or(def.into(), Schema::Structural);
                    let obj = tandem_core::patch::server_side_apply(
                        None, &patch, &manager, force, schema, &now,
                    )
                    .map_err(|e| apply_error(rt, name, e))?;
                    ctx.applying = true;
                    // `create` takes the Service lock itself.
                    drop(service_guard.take());
                    return self.create(ctx, rt, ns, obj).await;
                }
                return Err(ApiError::not_found(rt, name));
            };
            let mut old = parse_stored(rt, &kv)?;
            // The patch applies to the stored object at the request's version (a custom
            // resource's conversion webhook converts it), then goes back to the storage
            // version when it is written.
            self.to_request_version(rt, &mut old).await?;
            // A scale patch applies to the Scale view of the object.
            let base = if sub == Some("scale") {
                self.scale_of(rt, &old)
            } else if tandem_core::conversion::converts(rt) {
                // The patch speaks the requested version: apply it to the object at it.
                let mut view = old.clone();
                tandem_core::conversion::convert_object(&mut view, &rt.api_version());
                view
            } else {
                old.clone()
            };
            let patched = self.apply_patch(ctx, rt, name, kind, &base, &patch)?;
            if let Some(rv) = meta::resource_version(&patched)
                && parse_rv(rv)? != kv.mod_revision
            {
                return Err(ApiError::conflict(rt, name));
            }
            if let (Some(pn), true) = (meta::name(&patched), kind != PatchKind::Apply)
                && pn != name
            {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({pn}) does not match the name on the URL ({name})"
                )));
            }
            let (at, stored) = (ObjectKey { ns, name }, Stored::of(&old, &kv));
            let committed = if sub == Some("scale") {
                self.write_scale(ctx, rt, at, stored, &patched).await
            } else {
                let new = self.decode_typed(ctx, rt, patched)?;
                ctx.applying = kind == PatchKind::Apply;
                self.commit_update(ctx, rt, at, new, stored, sub).await
            };
            match committed {
                // A patch without its own resourceVersion precondition is re-applied to the new
                // state, as upstream's patcher retries on conflict.
                Err(e)
                    if e.code == 409
                        && e.reason == "Conflict"
                        && !patch_sets_resource_version(kind, &patch) =>
                {
                    continue;
                }
                other => return other,
            }
        }
        Err(ApiError::conflict(rt, name))
    }

    fn apply_patch(
        &self,
        ctx: &Ctx,
        rt: &ResourceType,
        name: &str,
        kind: PatchKind,
        old: &Value,
        patch: &Value,
    ) -> ApiResult<Value> {
        let patch_error = |e: tandem_core::patch::PatchError| match e.status_code() {
            422 => ApiError::invalid(
                rt,
                name,
                &[FieldError::invalid(
                    "patch",
                    &json!(patch.to_string()),
                    e.to_string(),
                )],
            ),
            413 => ApiError::new(413, "RequestEntityTooLarge", e.to_string()),
            _ => ApiError::bad_request(e.to_string()),
        };
        let def = if old.get("kind").and_then(Value::as_str) == Some("Scale") {
            None
        } else {
            tandem_core::openapi::root_definition(&rt.api_version(), &rt.kind)
        };
        match kind {
            PatchKind::Json => tandem_core::patch::json_patch(old, patch).map_err(patch_error),
            PatchKind::Merge => {
                if !patch.is_object() {
                    return Err(ApiError::bad_request("merge patch must be a JSON object"));
                }
                Ok(tandem_core::patch::merge_patch(old, patch))
            }
            PatchKind::Strategic => {
                if !patch.is_object() {
                    return Err(ApiError::bad_request(
                        "strategic merge patch must be a JSON object",
                    ));
                }
                tandem_core::patch::strategic_merge_patch(old, patch, def).map_err(patch_error)
            }
            PatchKind::Apply => {
                let manager = ctx.query.get("fieldManager").ok_or_else(|| ApiError::bad_request("PATCH requests of type application/apply-patch+yaml require a fieldManager query parameter"))?;
                let now = tandem_core::time::now_rfc3339();
                // A custom resource merges by its structural schema (not the Scale view's).
                let custom =
                    def.is_none() && old.get("kind").and_then(Value::as_str) != Some("Scale");
                let schema = custom.then(|| self.custom_schema(rt)).flatten();
                tandem_core::patch::server_side_apply(
                    Some(old),
                    patch,
                    manager,
                    ctx.query.bool("force"),
                    schema.as_deref().map_or(def.into(), Schema::Structural),
                    &now,
                )
                .map_err(|e| apply_error(rt, name, e))
            }
        }
    }
}

/// Maps a server-side apply failure: conflicts are 409 Conflict with upstream's message and one
/// cause per conflicting field, as upstream's `fieldmanager.NewConflictError` builds them.
fn apply_error(rt: &ResourceType, name: &str, e: tandem_core::patch::ApplyError) -> ApiError {
    use tandem_core::patch::ApplyError;
    match e {
        ApplyError::Conflict(conflicts) => {
            let causes: Vec<Value> = conflicts.iter().map(|c| json!({"reason": "FieldManagerConflict", "message": c.cause_message(), "field": c.path})).collect();
            let message = ApplyError::Conflict(conflicts).to_string();
            let mut d = json!({"name": name, "kind": rt.plural, "causes": causes});
            if !rt.group.is_empty() {
                d["group"] = json!(rt.group);
            }
            ApiError {
                details: Some(d),
                ..ApiError::new(409, "Conflict", message)
            }
        }
        ApplyError::Invalid(msg) => ApiError::bad_request(msg),
        ApplyError::Patch(p) => match p.status_code() {
            422 => ApiError::invalid(
                rt,
                name,
                &[FieldError::invalid("patch", &json!(""), p.to_string())],
            ),
            _ => ApiError::bad_request(p.to_string()),
        },
    }
}

/// Whether a patch body states a resourceVersion (an optimistic-concurrency precondition).
fn patch_sets_resource_version(kind: PatchKind, patch: &Value) -> bool {
    match kind {
        PatchKind::Json => patch.as_array().is_some_and(|ops| {
            ops.iter().any(|op| {
                op.get("path").and_then(Value::as_str) == Some("/metadata/resourceVersion")
                    && op.get("op").and_then(Value::as_str) != Some("test")
            })
        }),
        _ => patch
            .pointer("/metadata/resourceVersion")
            .is_some_and(|v| !v.is_null()),
    }
}

/// The kinds of PATCH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    Json,
    Merge,
    Strategic,
    Apply,
}
