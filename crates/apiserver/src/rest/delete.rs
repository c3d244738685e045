//! DELETE of one object and of a collection (upstream `registry.Store.Delete` with
//! `rest.BeforeDelete`, and `DeleteCollection`): preconditions, grace periods (pods bound to a
//! node wait for their node agent), finalizers and the propagation policy.

use serde_json::{Value, json};
use tandem_core::field::FieldError;
use tandem_core::registry::ResourceType;
use tandem_store::StoreError;

use super::{
    Ctx, Filter, Reply, has_spec_finalizers, int_param, is_service, map_write_err, parse_rv,
    parse_stored, same_ignoring_resource_version, to_stored, with_rv,
};
use crate::error::{ApiError, ApiResult};
use crate::meta;
use crate::state::State;

impl State {
    /// DELETE of one object, honouring preconditions, grace periods, finalizers and the
    /// propagation policy (upstream `Store.Delete` with `BeforeDelete`).
    pub async fn delete(
        &self,
        ctx: &mut Ctx,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
        opts: &Value,
    ) -> ApiResult<Reply> {
        let key = rt.key(ns, name);
        let grace_param = int_param(&ctx.query, "gracePeriodSeconds")?
            .or_else(|| opts.get("gracePeriodSeconds").and_then(Value::as_i64));
        let propagation = ctx
            .query
            .get("propagationPolicy")
            .map(str::to_string)
            .or_else(|| {
                opts.get("propagationPolicy")
                    .and_then(Value::as_str)
                    .map(str::to_string)
            })
            .or_else(
                || match opts.get("orphanDependents").and_then(Value::as_bool) {
                    Some(true) => Some("Orphan".to_string()),
                    _ => None,
                },
            );
        if let Some(p) = &propagation
            && !matches!(p.as_str(), "Orphan" | "Background" | "Foreground")
        {
            return Err(ApiError::invalid(
                rt,
                name,
                &[FieldError::not_supported(
                    "propagationPolicy",
                    &json!(p),
                    &["Foreground", "Background", "Orphan"],
                )],
            ));
        }
        if ctx.query.get("dryRun").is_some_and(|d| d != "All") {
            return Err(ApiError::bad_request(
                "unsupported dryRun value: only All is supported",
            ));
        }
        // DeleteOptions may carry the dry run in the body (kube-rs does) instead of the query.
        let body_dry_run = opts
            .get("dryRun")
            .and_then(Value::as_array)
            .is_some_and(|a| a.iter().any(|v| v.as_str() == Some("All")));
        let dry_run = ctx.dry_run() || body_dry_run;
        for _ in 0..8 {
            let kv = self.stored_kv(rt, &key, name).await?;
            let old = parse_stored(rt, &kv)?;
            crate::auth::admit_write(self, &ctx.user, "delete", rt, None, None, Some(&old))?;
            if let Some(uid) = opts.pointer("/preconditions/uid").and_then(Value::as_str)
                && Some(uid) != meta::uid(&old)
            {
                return Err(ApiError::conflict_msg(
                    rt,
                    name,
                    &format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                        meta::uid(&old).unwrap_or("")
                    ),
                ));
            }
            if let Some(rv) = opts
                .pointer("/preconditions/resourceVersion")
                .and_then(Value::as_str)
                && parse_rv(rv)? != kv.mod_revision
            {
                return Err(ApiError::conflict_msg(
                    rt,
                    name,
                    &format!(
                        "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                        kv.mod_revision
                    ),
                ));
            }
            let hooks = super::write::WebhookWrite {
                op: "DELETE",
                rt,
                sub: "",
                kind: &rt.kind,
                kind_group_version: None,
                ns,
                name,
                options: opts.clone(),
            };
            self.webhooks_mutate(ctx, &hooks, None, Some(&old)).await?;
            self.webhooks_validate(ctx, &hooks, None, Some(&old))
                .await?;
            let grace = self.grace_period(rt, &old, grace_param);
            let mut finalizers = meta::finalizers(&old);
            match propagation.as_deref() {
                Some("Foreground") if !finalizers.iter().any(|f| f == "foregroundDeletion") => {
                    finalizers.retain(|f| f != "orphan");
                    finalizers.push("foregroundDeletion".into());
                }
                Some("Orphan") if !finalizers.iter().any(|f| f == "orphan") => {
                    finalizers.retain(|f| f != "foregroundDeletion");
                    finalizers.push("orphan".into());
                }
                Some("Background") => {
                    finalizers.retain(|f| f != "orphan" && f != "foregroundDeletion")
                }
                _ => {}
            }
            let pending_spec = has_spec_finalizers(rt, &old);
            if finalizers.is_empty() && grace == 0 && !pending_spec {
                if dry_run {
                    return Ok(Reply::Value(200, old));
                }
                match self.store.delete(&key, Some(kv.mod_revision)).await {
                    Ok(d) => {
                        if is_service(rt) {
                            crate::service_claims::release_dropped(self, &key, &old, None).await;
                        }
                        return Ok(Reply::Value(200, with_rv(old, d.mod_revision)));
                    }
                    Err(StoreError::Conflict { .. }) => continue,
                    Err(StoreError::NotFound(_)) => return Err(ApiError::not_found(rt, name)),
                    Err(e) => return Err(e.into()),
                }
            }
            // Graceful or finalized deletion: mark, and let the owner of the finalizer (or the
            // node agent, for pods) finish it.
            let mut new = old.clone();
            let now = tandem_core::time::unix(std::time::SystemTime::now()).0;
            let m = meta::meta_mut(&mut new);
            let existing_grace = m.get("deletionGracePeriodSeconds").and_then(Value::as_i64);
            if m.get("deletionTimestamp").is_none_or(Value::is_null)
                || existing_grace.is_some_and(|g| grace < g)
            {
                m.insert(
                    "deletionTimestamp".into(),
                    json!(tandem_core::time::format_rfc3339(now + grace)),
                );
                m.insert("deletionGracePeriodSeconds".into(), json!(grace));
            }
            if finalizers.is_empty() {
                m.remove("finalizers");
            } else {
                m.insert("finalizers".into(), json!(finalizers));
            }
            if rt.kind == "Namespace" && rt.group.is_empty() {
                new["status"]["phase"] = json!("Terminating");
            }
            if dry_run {
                return Ok(Reply::Value(200, new));
            }
            if same_ignoring_resource_version(&new, &old) {
                return Ok(Reply::Value(200, old));
            }
            let bytes = to_stored(&mut new)?;
            match self.store.update(&key, bytes, Some(kv.mod_revision)).await {
                Ok(u) => return Ok(Reply::Value(200, with_rv(new, u.mod_revision))),
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(map_write_err(rt, name, e)),
            }
        }
        Err(ApiError::conflict(rt, name))
    }

    /// The grace period a deletion gets: pods on a node that are not finished get their
    /// `terminationGracePeriodSeconds` (or the request's), everything else is immediate.
    fn grace_period(&self, rt: &ResourceType, obj: &Value, requested: Option<i64>) -> i64 {
        if !(rt.group.is_empty() && rt.kind == "Pod") {
            return 0;
        }
        let scheduled = obj
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .is_some_and(|n| !n.is_empty());
        let finished = matches!(
            obj.pointer("/status/phase").and_then(Value::as_str),
            Some("Succeeded" | "Failed")
        );
        if !scheduled || finished {
            return 0;
        }
        let grace = requested.unwrap_or_else(|| {
            obj.pointer("/spec/terminationGracePeriodSeconds")
                .and_then(Value::as_i64)
                .unwrap_or(30)
        });
        // Upstream turns a requested 0 into 1 for pods unless forced; a 0 from the client after
        // the node agent has stopped the containers is the agent's final delete.
        grace.max(0)
    }

    /// DELETE of a collection: every object matching the selectors.
    pub async fn delete_collection(
        &self,
        ctx: &mut Ctx,
        rt: &ResourceType,
        ns: Option<&str>,
        opts: &Value,
    ) -> ApiResult<Reply> {
        let filter = Filter::for_request(self, rt, &ctx.query)?;
        let prefix = rt.namespace_prefix(ns);
        let items = if crate::cache::caches(rt) {
            self.cache
                .snapshot(rt, &prefix, |o| filter.accepts(rt, o))
                .items
        } else {
            let rev = self.store.current_revision();
            self.list_from_store(rt, &prefix, None, None, rev, &filter)
                .await?
                .0
        };
        let mut deleted = Vec::new();
        for obj in items {
            let name = meta::name(&obj.value()).unwrap_or_default().to_string();
            let ns = obj.namespace();
            match self.delete(ctx, rt, ns.as_deref(), &name, opts).await {
                Ok(Reply::Value(_, v)) => deleted.push(v),
                Ok(_) => {}
                Err(e) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        Ok(Reply::Value(
            200,
            json!({"kind": rt.list_kind(), "apiVersion": rt.api_version(), "metadata": {"resourceVersion": self.store.current_revision().to_string()}, "items": deleted}),
        ))
    }
}
