//! The `scale` and `binding` subresources: a workload's `autoscaling/v1` Scale (upstream's
//! `ScaleREST` of each workload, and `scaleFromCustomResource` for custom resources with a scale
//! subresource), and `POST pods/<name>/binding` (upstream `BindingREST.Create`). `status`,
//! `finalize`, `approval` and `ephemeralcontainers` are updates with their own strategy, in
//! `write`; `eviction` is in `crate::eviction`.

use serde_json::{Value, json};
use tandem_core::field::FieldError;
use tandem_core::registry::ResourceType;
use tandem_store::StoreError;

use super::{Ctx, ObjectKey, Reply, Stored, map_write_err, parse_rv, parse_stored, success_status};
use crate::binding::{self, Assignment};
use crate::error::{ApiError, ApiResult};
use crate::meta;
use crate::state::State;

impl State {
    /// The `autoscaling/v1` Scale of a workload.
    pub fn scale_of(&self, rt: &ResourceType, obj: &Value) -> Value {
        if let Some(paths) = self.registry.custom(rt).and_then(|c| c.scale.clone()) {
            return custom_scale(obj, &paths);
        }
        let replicas_at = |pointer: &str| obj.pointer(pointer).and_then(Value::as_i64).unwrap_or(0);
        let selector =
            obj.pointer("/spec/selector")
                .map(|s| match s.get("matchLabels").or(Some(s)) {
                    Some(Value::Object(m))
                        if rt.kind != "ReplicationController" || !m.is_empty() =>
                    {
                        let mut parts: Vec<String> = m
                            .iter()
                            .filter_map(|(k, v)| v.as_str().map(|v| format!("{k}={v}")))
                            .collect();
                        parts.sort();
                        parts.join(",")
                    }
                    _ => String::new(),
                });
        scale_object(
            obj,
            replicas_at("/spec/replicas"),
            replicas_at("/status/replicas"),
            &selector.unwrap_or_default(),
        )
    }

    /// PUT of a Scale.
    pub async fn update_scale(
        &self,
        ctx: &mut Ctx,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
        body: Value,
    ) -> ApiResult<Reply> {
        let key = rt.key(ns, name);
        let kv = self.stored_kv(rt, &key, name).await?;
        let mut old = parse_stored(rt, &kv)?;
        // The scale paths are the request's version's.
        self.to_request_version(rt, &mut old).await?;
        if let Some(rv) = meta::resource_version(&body)
            && parse_rv(rv)? != kv.mod_revision
        {
            return Err(ApiError::conflict(rt, name));
        }
        let stored = Stored::of(&old, &kv);
        self.write_scale(ctx, rt, ObjectKey { ns, name }, stored, &body)
            .await
    }

    pub(super) async fn write_scale(
        &self,
        ctx: &mut Ctx,
        rt: &ResourceType,
        at: ObjectKey<'_>,
        stored: Stored<'_>,
        scale: &Value,
    ) -> ApiResult<Reply> {
        let name = at.name;
        let old = stored.value;
        let replicas = match scale.pointer("/spec/replicas") {
            None | Some(Value::Null) => 0,
            Some(v) => v
                .as_i64()
                .ok_or_else(|| ApiError::bad_request("Scale spec.replicas must be an integer"))?,
        };
        if replicas < 0 {
            let scale_rt = ResourceType {
                kind: "Scale".into(),
                ..rt.clone()
            };
            return Err(ApiError::invalid(
                &scale_rt,
                name,
                &[FieldError::invalid(
                    "spec.replicas",
                    &json!(replicas),
                    "must be greater than or equal to 0",
                )],
            ));
        }
        // Admission webhooks see the Scale (upstream's scale REST admits the Scale object, and
        // the update of the scaled object is not admitted again).
        let old_scale = self.scale_of(rt, old);
        let mut new_scale = old_scale.clone();
        new_scale["spec"]["replicas"] = json!(replicas);
        let hooks = super::write::WebhookWrite {
            op: "UPDATE",
            rt,
            sub: "scale",
            kind: "Scale",
            kind_group_version: Some(("autoscaling", "v1")),
            ns: at.ns,
            name,
            options: Value::Null,
        };
        self.webhooks_mutate(ctx, &hooks, Some(&mut new_scale), Some(&old_scale))
            .await?;
        let replicas = new_scale
            .pointer("/spec/replicas")
            .and_then(Value::as_i64)
            .unwrap_or(replicas);
        self.webhooks_validate(ctx, &hooks, Some(&new_scale), Some(&old_scale))
            .await?;
        let mut new = old.clone();
        match self.registry.custom(rt).and_then(|c| c.scale.clone()) {
            Some(paths) => set_at_pointer(
                &mut new,
                &crate::crds::json_pointer(&paths.spec_replicas),
                json!(replicas),
            ),
            None => new["spec"]["replicas"] = json!(replicas),
        }
        let webhooks_done = std::mem::replace(&mut ctx.webhooks_done, true);
        let result = self.commit_update(ctx, rt, at, new, stored, None).await;
        ctx.webhooks_done = webhooks_done;
        match result? {
            Reply::Value(code, v) => Ok(Reply::Value(code, self.scale_of(rt, &v))),
            other => Ok(other),
        }
    }

    // ----- binding -----

    /// POST pods/<name>/binding: assigns the pod to a node, once (upstream `BindingREST.Create`).
    pub async fn bind(
        &self,
        ctx: &mut Ctx,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
        body: Value,
    ) -> ApiResult<Reply> {
        let node = body
            .pointer("/target/name")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string);
        let Some(node) = node else {
            let binding = ResourceType {
                kind: "Binding".into(),
                ..rt.clone()
            };
            return Err(ApiError::invalid(
                &binding,
                name,
                &[FieldError::required("target.name", "")],
            ));
        };
        let key = rt.key(ns, name);
        // Upstream names the resource `pods/binding` in these conflicts.
        let binding_rt = ResourceType {
            plural: "pods/binding".into(),
            ..rt.clone()
        };
        // The first attempt starts from the watch cache, as upstream's `GuaranteedUpdate` starts
        // from a cached object: the compare-and-swap on its revision catches a stale copy, and any
        // refusal based on the cached copy is re-checked against the store before it is returned.
        // Binding a pod the scheduler saw on a watch almost always finds it cached, which saves a
        // store read per binding.
        let mut from_cache = true;
        for _ in 0..5 {
            let cached = if from_cache {
                self.cache.get(rt, &key)
            } else {
                None
            };
            let (stored, rev, cached) = match cached {
                Some(o) => (o.json.clone(), o.rv, true),
                None => {
                    let kv = self.stored_kv(rt, &key, name).await?;
                    (kv.value, kv.mod_revision, false)
                }
            };
            from_cache = false;
            let now = tandem_core::time::now_rfc3339();
            let bytes = match binding::assign(&stored, name, &node, &now) {
                Ok(Assignment::Assigned(bytes)) => bytes,
                // A refusal based on the cached copy is checked again against the store.
                Ok(Assignment::Refused(_)) if cached => continue,
                Ok(Assignment::Refused(message)) => {
                    return Err(ApiError::conflict_msg(&binding_rt, name, &message));
                }
                Err(e) => {
                    return Err(ApiError::internal(format!(
                        "stored {} {key} is corrupt: {e}",
                        rt.kind
                    )));
                }
            };
            if ctx.dry_run() {
                return Ok(Reply::Value(201, success_status()));
            }
            match self.store.update(&key, bytes, Some(rev)).await {
                Ok(_) => return Ok(Reply::Value(201, success_status())),
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(map_write_err(rt, name, e)),
            }
        }
        Err(ApiError::conflict(rt, name))
    }
}

/// The `Scale` of a custom resource, read at its CRD's paths (upstream's
/// `apiextensions-apiserver/pkg/registry/customresource` `scaleFromCustomResource`): replicas
/// missing or not integers count as 0, the selector is the string at `labelSelectorPath`.
fn custom_scale(obj: &Value, paths: &crate::crds::ScalePaths) -> Value {
    let at = |path: &str| tandem_core::apiextensions::crd::evaluate_json_path(obj, path);
    let int_at = |path: &str| at(path).and_then(|v| v.as_i64()).unwrap_or(0);
    let selector = paths
        .label_selector
        .as_deref()
        .and_then(at)
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    scale_object(
        obj,
        int_at(&paths.spec_replicas),
        int_at(&paths.status_replicas),
        &selector,
    )
}

/// An `autoscaling/v1` `Scale` of `obj` with these figures.
fn scale_object(obj: &Value, spec_replicas: i64, status_replicas: i64, selector: &str) -> Value {
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": meta::name(obj),
            "namespace": meta::namespace(obj),
            "uid": meta::uid(obj),
            "resourceVersion": meta::resource_version(obj),
            "creationTimestamp": obj.pointer("/metadata/creationTimestamp"),
        },
        "spec": {"replicas": spec_replicas},
        "status": {"replicas": status_replicas, "selector": selector},
    })
}

/// Sets `value` at JSON pointer `pointer`, creating the objects on the way.
fn set_at_pointer(target: &mut Value, pointer: &str, value: Value) {
    let mut at = target;
    let parts: Vec<String> = pointer
        .split('/')
        .skip(1)
        .map(|p| p.replace("~1", "/").replace("~0", "~"))
        .collect();
    let Some((last, path)) = parts.split_last() else {
        return;
    };
    for part in path {
        if !at.get(part.as_str()).is_some_and(Value::is_object) {
            at[part.as_str()] = json!({});
        }
        at = &mut at[part.as_str()];
    }
    at[last.as_str()] = value;
}
