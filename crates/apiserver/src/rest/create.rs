//! POST of a new object (upstream `registry.Store.Create` with `rest.BeforeCreate`): system
//! metadata (uid, creationTimestamp, generateName), the namespace's lifecycle, the write
//! pipeline, quota, and a create-if-absent in the store. A Service takes the Service lock and
//! claims its addresses and ports in the store first (`crate::service_claims`).

use std::ops::ControlFlow;
use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};
use tandem_core::field::FieldError;
use tandem_core::registry::ResourceType;
use tandem_store::{KeyValue, Revision, StoreError};

use super::write::{WebhookWrite, custom_prepare_for_create, run_admission};
use super::{Ctx, Reply, is_service, parse_stored, to_stored, with_rv};
use crate::error::{ApiError, ApiResult};
use crate::meta;
use crate::output::Format;
use crate::state::State;

impl State {
    async fn namespace_allows_create(&self, ns: &str) -> ApiResult<()> {
        let nsrt = self.resource("", "v1", "namespaces")?;
        let key = nsrt.key(None, ns);
        let terminating = |value: &Value| {
            meta::is_deleting(value)
                || value.pointer("/status/phase").and_then(Value::as_str) == Some("Terminating")
        };
        let is_terminating = match self.cache.get(&nsrt, &key) {
            Some(o) => terminating(&o.value()),
            None => match self.store.get(&key).await? {
                Some(kv) => terminating(&parse_stored(&nsrt, &kv)?),
                None => return Err(ApiError::not_found(&nsrt, ns)),
            },
        };
        if is_terminating {
            return Err(ApiError {
                details: Some(
                    json!({"causes": [{"reason": "NamespaceTerminating", "message": format!("namespace {ns} is being terminated"), "field": "metadata.namespace"}]}),
                ),
                ..ApiError::forbidden(format!(
                    "unable to create new content in namespace {ns} because it is being terminated"
                ))
            });
        }
        Ok(())
    }

    /// Create: decode, fill system metadata, default, validate, store; a Service under the
    /// Service lock (`create_service`).
    pub async fn create(
        &self,
        ctx: &mut Ctx,
        rt: &ResourceType,
        ns: Option<&str>,
        body: Value,
    ) -> ApiResult<Reply> {
        if is_service(rt) {
            let _service_guard = self.service_lock.lock().await;
            let result = self.create_service(ctx, rt, ns, &body).await;
            // The addresses and ports its attempts learnt to avoid apply to this create only.
            *self
                .service_alloc_avoid
                .lock()
                .unwrap_or_else(|p| p.into_inner()) = Default::default();
            return result;
        }
        let (mut obj, name, key) = match self.admit_create(ctx, rt, ns, body).await? {
            ControlFlow::Continue(admitted) => admitted,
            ControlFlow::Break(dry_run) => return Ok(dry_run),
        };
        // A custom resource written at another version is stored at its CRD's storage version
        // (validated at the request's version first, as upstream) and answered at the
        // request's.
        if let Some(mut storage) = self.storage_form(rt, &obj).await? {
            let stored = to_stored(&mut storage)?;
            let kv = self.store_new(rt, &key, &name, &stored).await?;
            return Ok(Reply::Value(201, with_rv(obj, kv.mod_revision)));
        }
        let stored = to_stored(&mut obj)?;
        let kv = self.store_new(rt, &key, &name, &stored).await?;
        Ok(self.created_reply(ctx, obj, &stored, kv.mod_revision))
    }

    /// What every create does before its write: [`Self::prepare_create`], then quota. Breaks
    /// with the 201 answer under `?dryRun=All` (nothing is written); otherwise continues with
    /// the object, its name and its store key.
    async fn admit_create(
        &self,
        ctx: &mut Ctx,
        rt: &ResourceType,
        ns: Option<&str>,
        body: Value,
    ) -> ApiResult<ControlFlow<Reply, (Value, String, String)>> {
        let obj = self.prepare_create(ctx, rt, ns, body).await?;
        let name = meta::name(&obj).unwrap_or_default().to_string();
        self.admit_quota(rt, &obj, None, ctx.dry_run()).await?;
        if ctx.dry_run() {
            return Ok(ControlFlow::Break(Reply::Value(201, obj)));
        }
        let key = rt.key(ns, &name);
        Ok(ControlFlow::Continue((obj, name, key)))
    }

    /// Writes a new object at `key` if it is absent: 409 AlreadyExists when it is present.
    async fn store_new(
        &self,
        rt: &ResourceType,
        key: &str,
        name: &str,
        stored: &Bytes,
    ) -> ApiResult<KeyValue> {
        self.store
            .create(key, stored.clone())
            .await
            .map_err(|e| match e {
                StoreError::AlreadyExists(_) => ApiError::already_exists(rt, name),
                other => other.into(),
            })
    }

    /// The 201 answer to a create: for a JSON client the stored encoding with the revision
    /// stamped in (no re-encoding); for the other formats the object itself, which a protobuf
    /// answer transcodes without parsing the stored JSON again.
    fn created_reply(&self, ctx: &Ctx, obj: Value, stored: &Bytes, rev: Revision) -> Reply {
        if matches!(ctx.format, Format::Json)
            && let Some(bytes) = crate::cache::stamp_resource_version(stored, rev)
        {
            return Reply::Raw(201, bytes, "application/json");
        }
        Reply::Value(201, with_rv(obj, rev))
    }

    /// Create of a Service, under the Service lock the caller holds: addresses and ports chosen
    /// from the cache and claimed in the store before the write (`service_claims`); one another
    /// server claimed meanwhile is avoided and the choice made again, unless the request asked
    /// for it.
    async fn create_service(
        &self,
        ctx: &mut Ctx,
        rt: &ResourceType,
        ns: Option<&str>,
        body: &Value,
    ) -> ApiResult<Reply> {
        const ATTEMPTS: usize = 8;
        for attempt in 1..=ATTEMPTS {
            let (mut obj, name, key) = match self.admit_create(ctx, rt, ns, body.clone()).await? {
                ControlFlow::Continue(admitted) => admitted,
                ControlFlow::Break(dry_run) => return Ok(dry_run),
            };
            let made = match crate::service_claims::claim(self, &key, &obj, None).await? {
                Ok(made) => made,
                Err(crate::service_claims::Taken(r)) => {
                    if attempt == ATTEMPTS || crate::service_claims::asked_for(body, r) {
                        let error = crate::service_claims::taken_error(&obj, r);
                        return Err(ApiError::invalid(rt, &name, &[error]));
                    }
                    let mut avoid = self
                        .service_alloc_avoid
                        .lock()
                        .unwrap_or_else(|p| p.into_inner());
                    match r {
                        crate::service_claims::Resource::Ip(ip) => avoid.0.insert(ip),
                        crate::service_claims::Resource::NodePort(p) => avoid.1.insert(p),
                    };
                    continue;
                }
            };
            let stored = to_stored(&mut obj)?;
            let kv = match self.store_new(rt, &key, &name, &stored).await {
                Ok(kv) => kv,
                Err(e) => {
                    crate::service_claims::release_made(self, made).await;
                    return Err(e);
                }
            };
            self.cache
                .wait_for(kv.mod_revision, Duration::from_secs(3))
                .await;
            return Ok(self.created_reply(ctx, obj, &stored, kv.mod_revision));
        }
        Err(ApiError::internal(
            "no free service address or port could be claimed",
        ))
    }

    async fn prepare_create(
        &self,
        ctx: &mut Ctx,
        rt: &ResourceType,
        ns: Option<&str>,
        body: Value,
    ) -> ApiResult<Value> {
        if let (Some(body_ns), Some(url_ns)) = (meta::namespace(&body), ns)
            && !body_ns.is_empty()
            && body_ns != url_ns
        {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        let mut obj = self.decode_typed(ctx, rt, body)?;
        let m = meta::meta_mut(&mut obj);
        if rt.namespaced {
            if let Some(ns) = ns {
                m.insert("namespace".into(), json!(ns));
            }
        } else {
            m.remove("namespace");
        }
        let has_name = m
            .get("name")
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty());
        if !has_name {
            match m
                .get("generateName")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
            {
                Some(prefix) => {
                    let n = meta::generate_name(prefix);
                    m.insert("name".into(), json!(n));
                }
                None => {
                    return Err(ApiError::invalid(
                        rt,
                        "",
                        &[FieldError::required(
                            "metadata.name",
                            "name or generateName is required",
                        )],
                    ));
                }
            }
        }
        if let Some(rv) = m
            .get("resourceVersion")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
        {
            let name = m
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            return Err(ApiError::invalid(
                rt,
                &name,
                &[FieldError::invalid(
                    "metadata.resourceVersion",
                    &json!(rv),
                    "resourceVersion should not be set on objects to be created",
                )],
            ));
        }
        let uid = meta::new_uid();
        m.insert("uid".into(), json!(uid));
        m.insert(
            "creationTimestamp".into(),
            json!(tandem_core::time::now_rfc3339()),
        );
        m.remove("deletionTimestamp");
        m.remove("deletionGracePeriodSeconds");
        m.remove("selfLink");
        let name = m
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if rt.namespaced {
            match ns {
                Some(ns) => self.namespace_allows_create(ns).await?,
                None => {
                    return Err(ApiError::bad_request(
                        "the namespace of the object must be set for a namespaced resource",
                    ));
                }
            }
        }
        crate::pipeline::apply_defaults(rt, &mut obj);
        crate::pipeline::prepare_for_create(rt, &mut obj, &uid);
        if self.registry.custom(rt).is_some() {
            custom_prepare_for_create(rt, &mut obj);
        }
        let mut errors = Vec::new();
        run_admission(
            self,
            ctx,
            tandem_core::admission::Operation::Create,
            rt,
            &mut obj,
            None,
            &mut errors,
        )
        .await?;
        crate::auth::set_requester(&ctx.user, rt, &mut obj);
        crate::auth::admit_write(self, &ctx.user, "create", rt, None, Some(&obj), None)?;
        let hooks = WebhookWrite {
            op: "CREATE",
            rt,
            sub: "",
            kind: &rt.kind,
            kind_group_version: None,
            ns,
            name: &name,
            options: Value::Null,
        };
        self.webhooks_mutate(ctx, &hooks, Some(&mut obj), None)
            .await?;
        if is_service(rt) {
            errors.extend(crate::service_alloc::allocate(self, rt, &mut obj, None));
        }
        errors.extend(crate::pipeline::validate_create(rt, &obj));
        let schema = self.custom_schema(rt);
        if let Some(schema) = &schema {
            errors.extend(schema.validate(&obj));
        }
        if !errors.is_empty() {
            return Err(ApiError::invalid(rt, &name, &errors));
        }
        self.pod_security(
            ctx,
            tandem_core::admission::Operation::Create,
            rt,
            None,
            &obj,
            None,
        )?;
        self.webhooks_validate(ctx, &hooks, Some(&obj), None)
            .await?;
        ctx.track(rt, schema.as_deref(), None, &mut obj);
        Ok(obj)
    }
}
