//! The write pipeline every create and update goes through after its verb's own checks, in
//! upstream's order (`registry.Store.Create`/`Update` with `rest.BeforeCreate`/`BeforeUpdate`):
//! typed decoding with `fieldValidation`, the strategy's `PrepareFor*`, admission (the layer in
//! `crate::admission`, called from here and never calling back), validation with admission's
//! field errors in one 422, managedFields, then the store's compare-and-swap.

use serde_json::{Value, json};
use tandem_core::field::FieldError;
use tandem_core::registry::ResourceType;

use super::{
    Ctx, ObjectKey, Reply, Stored, has_spec_finalizers, is_service, map_write_err,
    same_ignoring_resource_version, to_stored, with_rv,
};
use crate::error::{ApiError, ApiResult};
use crate::meta;
use crate::state::State;

/// Unknown fields of a body (`spec.foo`) under `?fieldValidation=`: a 400 when `Strict`,
/// nothing when `Ignore`, a `Warning` header each otherwise (upstream's default, `Warn`).
fn report_unknown_fields(ctx: &mut Ctx, fields: &[String]) -> ApiResult<()> {
    if fields.is_empty() {
        return Ok(());
    }
    let msgs: Vec<String> = fields
        .iter()
        .map(|f| format!("unknown field \"{f}\""))
        .collect();
    match ctx.query.get("fieldValidation").unwrap_or("Warn") {
        "Strict" => Err(ApiError::bad_request(format!(
            "strict decoding error: {}",
            msgs.join(", ")
        ))),
        "Ignore" => Ok(()),
        _ => {
            ctx.warnings.extend(msgs);
            Ok(())
        }
    }
}

/// Upstream `customResourceStrategy.PrepareForCreate`: with a status subresource the status is
/// dropped (only `/status` writes it); `metadata.generation` starts at 1.
pub(super) fn custom_prepare_for_create(rt: &ResourceType, obj: &mut Value) {
    if let Some(map) = obj.as_object_mut() {
        if rt.has_subresource("status") {
            map.remove("status");
        }
        if let Some(meta) = map.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("generation".into(), json!(1));
        }
    }
}

/// Upstream `customResourceStrategy.PrepareForUpdate`: `metadata.generation` grows when
/// anything but metadata (and status, with a status subresource) changed.
fn custom_prepare_for_update(rt: &ResourceType, new: &mut Value, old: &Value) {
    let status_owned = rt.has_subresource("status");
    let changed = |v: &Value| -> Value {
        let mut v = v.clone();
        if let Some(map) = v.as_object_mut() {
            map.remove("metadata");
            if status_owned {
                map.remove("status");
            }
        }
        v
    };
    let old_generation = old
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    let generation = if changed(new) != changed(old) {
        old_generation + 1
    } else {
        old_generation
    };
    if let Some(meta) = new.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("generation".into(), json!(generation));
    }
}

/// Runs admission and collects its field errors into `errors` and its warnings into `ctx`.
pub(super) async fn run_admission(
    state: &State,
    ctx: &mut Ctx,
    op: tandem_core::admission::Operation,
    rt: &ResourceType,
    obj: &mut Value,
    old: Option<&Value>,
    errors: &mut Vec<FieldError>,
) -> ApiResult<()> {
    match state.admit(op, rt, obj, old).await {
        Ok(warnings) => ctx.warnings.extend(warnings),
        Err(tandem_core::admission::AdmissionError::Invalid(e)) => errors.extend(e),
        Err(other) => return Err(crate::admission::admission_error(rt, obj, other)),
    }
    Ok(())
}

/// A write as the admission webhooks see it: the operation, the type and subresource the
/// request named, the kind of the objects sent, where the object lives and the operation's
/// options.
pub(crate) struct WebhookWrite<'a> {
    pub op: &'static str,
    pub rt: &'a ResourceType,
    pub sub: &'a str,
    pub kind: &'a str,
    /// See `crate::webhook::Attempt::kind_group_version`.
    pub kind_group_version: Option<(&'a str, &'a str)>,
    pub ns: Option<&'a str>,
    pub name: &'a str,
    /// `CreateOptions`, `UpdateOptions` or `DeleteOptions` (without `kind`/`apiVersion`).
    pub options: Value,
}

impl<'a> WebhookWrite<'a> {
    /// The request as admission sees it, made by `user`.
    fn attempt<'b>(
        &'b self,
        ctx: &Ctx,
        user: &'b crate::auth::UserInfo,
    ) -> crate::webhook::Attempt<'b>
    where
        'a: 'b,
    {
        crate::webhook::Attempt {
            operation: self.op,
            rt: self.rt,
            subresource: self.sub,
            kind: self.kind,
            kind_group_version: self.kind_group_version,
            namespace: self.ns.unwrap_or_default(),
            name: self.name,
            user,
            dry_run: ctx.dry_run(),
            options: self.options_json(ctx),
        }
    }

    fn options_json(&self, ctx: &Ctx) -> Value {
        let kind = match self.op {
            "CREATE" => "CreateOptions",
            "UPDATE" => "UpdateOptions",
            "DELETE" => "DeleteOptions",
            _ => "",
        };
        let mut o = match &self.options {
            Value::Object(m) => m.clone(),
            _ => Default::default(),
        };
        if !kind.is_empty() {
            o.insert("kind".into(), json!(kind));
            o.insert("apiVersion".into(), json!("meta.k8s.io/v1"));
        }
        if ctx.dry_run() {
            o.insert("dryRun".into(), json!(["All"]));
        }
        if let Some(m) = ctx
            .query
            .get("fieldManager")
            .filter(|_| self.op != "DELETE")
        {
            o.insert("fieldManager".into(), json!(m));
        }
        Value::Object(o)
    }
}

impl State {
    /// Calls the mutating admission webhooks that match `w` (see `crate::webhook`), with the
    /// warnings they return added to the answer's.
    pub(crate) async fn webhooks_mutate(
        &self,
        ctx: &mut Ctx,
        w: &WebhookWrite<'_>,
        obj: Option<&mut Value>,
        old: Option<&Value>,
    ) -> ApiResult<()> {
        if ctx.webhooks_done {
            return Ok(());
        }
        let user = ctx.user.clone();
        let attempt = w.attempt(ctx, &user);
        let mut warnings = Vec::new();
        let result = self
            .mutating_webhooks(&mut warnings, &attempt, obj, old)
            .await;
        ctx.warnings.extend(warnings);
        result
    }

    /// The validating phase of admission for `w`: the ValidatingAdmissionPolicies, then the
    /// validating webhooks.
    pub(crate) async fn webhooks_validate(
        &self,
        ctx: &mut Ctx,
        w: &WebhookWrite<'_>,
        obj: Option<&Value>,
        old: Option<&Value>,
    ) -> ApiResult<()> {
        if ctx.webhooks_done {
            return Ok(());
        }
        let user = ctx.user.clone();
        let attempt = w.attempt(ctx, &user);
        let mut warnings = Vec::new();
        // ValidatingAdmissionPolicies run before the validating webhooks, as upstream's
        // plugins are ordered.
        let result = match self.validating_policies(&mut warnings, &attempt, obj, old) {
            Ok(()) => {
                self.validating_webhooks(&mut warnings, &attempt, obj, old)
                    .await
            }
            Err(e) => Err(e),
        };
        ctx.warnings.extend(warnings);
        result
    }
}

/// The update through a subresource that changes one list only (`approval`, `finalize`): the
/// stored object with `/<parent>/<field>` taken from the request (empty when the request has
/// none); the rest of the object stays as stored.
fn only_list_changes(new: &Value, old: &Value, parent: &str, field: &str) -> Value {
    let list = new
        .pointer(&format!("/{parent}/{field}"))
        .cloned()
        .unwrap_or_else(|| json!([]));
    let mut updated = old.clone();
    updated[parent][field] = list;
    updated
}

/// Upstream's ObjectMeta fields are `omitempty`: an empty labels or annotations map (or finalizer,
/// owner reference or managed field list) is not stored, so `kubectl label x key-` leaves no `{}`.
fn drop_empty_metadata(obj: &mut Value) {
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        for key in [
            "labels",
            "annotations",
            "finalizers",
            "ownerReferences",
            "managedFields",
        ] {
            let empty = match m.get(key) {
                Some(Value::Object(o)) => o.is_empty(),
                Some(Value::Array(a)) => a.is_empty(),
                Some(Value::Null) => true,
                _ => false,
            };
            if empty {
                m.remove(key);
            }
        }
    }
}

impl State {
    /// Decodes a body into the type of `rt`, applying `fieldValidation` to unknown fields.
    pub(super) fn decode_typed(
        &self,
        ctx: &mut Ctx,
        rt: &ResourceType,
        body: Value,
    ) -> ApiResult<Value> {
        if let Some(av) = body.get("apiVersion").and_then(Value::as_str)
            && av != rt.api_version()
        {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({av}) does not match the expected API version ({})",
                rt.api_version()
            )));
        }
        if let Some(kind) = body.get("kind").and_then(Value::as_str)
            && kind != rt.kind
        {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({kind}) does not match the expected kind ({})",
                rt.kind
            )));
        }
        let decoded = tandem_core::typed::roundtrip(rt, body)
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        report_unknown_fields(ctx, &decoded.unknown_fields)?;
        let mut object = decoded.object;
        // A built-in kind written at another served version is stored converted.
        tandem_core::conversion::to_storage(rt, &mut object);
        drop_empty_metadata(&mut object);
        if let Some(schema) = self.custom_schema(rt) {
            // Upstream prunes unknown fields of custom resources (reported like unknown fields
            // of built-in kinds under `fieldValidation`), then applies the schema's defaults.
            report_unknown_fields(ctx, &schema.prune(&mut object))?;
            schema.default(&mut object);
        }
        Ok(object)
    }

    /// Finishes an update of `old` (stored at `old_rev`) to `new`: system fields, strategy,
    /// defaults, validation, then a compare-and-swap write. Removing the last finalizer of an
    /// object being deleted deletes it, as upstream's store does.
    pub(super) async fn commit_update(
        &self,
        ctx: &mut Ctx,
        rt: &ResourceType,
        at: ObjectKey<'_>,
        mut new: Value,
        stored: Stored<'_>,
        sub: Option<&str>,
    ) -> ApiResult<Reply> {
        let ObjectKey { ns, name } = at;
        let Stored {
            value: old,
            rev: old_rev,
        } = stored;
        {
            let m = meta::meta_mut(&mut new);
            for f in [
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
            ] {
                match old.pointer(&format!("/metadata/{f}")) {
                    Some(v) => m.insert(f.into(), v.clone()),
                    None => m.remove(f),
                };
            }
            m.insert("name".into(), json!(name));
            if let Some(ns) = ns {
                m.insert("namespace".into(), json!(ns));
            }
            m.remove("selfLink");
        }
        crate::pipeline::apply_defaults(rt, &mut new);
        match sub {
            Some("status") => crate::pipeline::prepare_for_status_update(rt, &mut new, old),
            Some("ephemeralcontainers") => {
                tandem_core::strategy::prepare_for_ephemeral_containers_update(&mut new, old)
            }
            // Only the Approved/Denied conditions change through `approval` (upstream's
            // `csrApprovalStrategy`).
            Some("approval") => new = only_list_changes(&new, old, "status", "conditions"),
            // Only spec.finalizers of a Namespace changes through `finalize`
            // (upstream `namespaceFinalizeStrategy`).
            Some("finalize") => new = only_list_changes(&new, old, "spec", "finalizers"),
            _ => {
                crate::pipeline::prepare_for_update(rt, &mut new, old);
                if self.registry.custom(rt).is_some() {
                    custom_prepare_for_update(rt, &mut new, old);
                }
            }
        }
        crate::auth::admit_write(self, &ctx.user, "update", rt, sub, Some(&new), Some(old))?;
        let hooks = WebhookWrite {
            op: "UPDATE",
            rt,
            sub: sub.unwrap_or_default(),
            kind: &rt.kind,
            kind_group_version: None,
            ns,
            name,
            options: Value::Null,
        };
        let mut errors = Vec::new();
        if sub.is_none() {
            run_admission(
                self,
                ctx,
                tandem_core::admission::Operation::Update,
                rt,
                &mut new,
                Some(old),
                &mut errors,
            )
            .await?;
            if is_service(rt) {
                errors.extend(crate::service_alloc::allocate(
                    self,
                    rt,
                    &mut new,
                    Some(old),
                ));
            }
        }
        self.webhooks_mutate(ctx, &hooks, Some(&mut new), Some(old))
            .await?;
        errors.extend(match sub {
            Some("status" | "finalize" | "approval") => {
                crate::pipeline::validate_status_update(rt, &new, old)
            }
            Some("ephemeralcontainers") => {
                let mut errs =
                    tandem_core::validation::ephemeral::validate_ephemeral_containers_update(
                        &new, old,
                    );
                errs.extend(self.ephemeral_container_os_errors(&new));
                errs
            }
            _ => crate::pipeline::validate_update(rt, &new, old),
        });
        let schema = self.custom_schema(rt);
        if let Some(schema) = &schema {
            errors.extend(schema.validate_update(&new, old));
        }
        if !errors.is_empty() {
            return Err(ApiError::invalid(rt, name, &errors));
        }
        self.pod_security(
            ctx,
            tandem_core::admission::Operation::Update,
            rt,
            sub,
            &new,
            Some(old),
        )?;
        self.webhooks_validate(ctx, &hooks, Some(&new), Some(old))
            .await?;
        if sub.is_none() {
            ctx.track(rt, schema.as_deref(), Some(old), &mut new);
            self.admit_quota(rt, &new, Some(old), ctx.dry_run()).await?;
        }
        let key = rt.key(ns, name);
        // An update that leaves an object being deleted with nothing to wait for deletes it
        // (upstream `Store.shouldDeleteDuringUpdate`) — unless a grace period still runs: a
        // pod being deleted gracefully keeps taking status writes (its containers stopping, then
        // stopped) until its node agent deletes it with a grace period of 0.
        let grace_running = new
            .pointer("/metadata/deletionGracePeriodSeconds")
            .and_then(Value::as_i64)
            .is_some_and(|g| g > 0);
        let finished = meta::is_deleting(&new)
            && !grace_running
            && meta::finalizers(&new).is_empty()
            && !has_spec_finalizers(rt, &new);
        if ctx.dry_run() {
            return Ok(Reply::Value(200, new));
        }
        let service = is_service(rt) && sub.is_none();
        if finished {
            let kv = self
                .store
                .delete(&key, Some(old_rev))
                .await
                .map_err(|e| map_write_err(rt, name, e))?;
            if service {
                crate::service_claims::release_dropped(self, &key, old, None).await;
            }
            return Ok(Reply::Value(200, with_rv(new, kv.mod_revision)));
        }
        if same_ignoring_resource_version(&new, old) {
            // Nothing changed: upstream skips the write and keeps the resourceVersion.
            return Ok(Reply::Value(200, with_rv(new, old_rev)));
        }
        let made = if service {
            match crate::service_claims::claim(self, &key, &new, Some(old)).await? {
                Ok(made) => Some(made),
                Err(crate::service_claims::Taken(r)) => {
                    let error = crate::service_claims::taken_error(&new, r);
                    return Err(ApiError::invalid(rt, name, &[error]));
                }
            }
        } else {
            None
        };
        // A custom resource is stored at its CRD's storage version and answered at the
        // request's (a conversion that fails writes nothing).
        let mut storage = match self.storage_form(rt, &new).await {
            Ok(storage) => storage,
            Err(e) => {
                if let Some(made) = made {
                    crate::service_claims::release_made(self, made).await;
                }
                return Err(e);
            }
        };
        let bytes = to_stored(storage.as_mut().unwrap_or(&mut new))?;
        let kv = match self.store.update(&key, bytes, Some(old_rev)).await {
            Ok(kv) => kv,
            Err(e) => {
                if let Some(made) = made {
                    crate::service_claims::release_made(self, made).await;
                }
                return Err(map_write_err(rt, name, e));
            }
        };
        if service {
            crate::service_claims::release_dropped(self, &key, old, Some(&new)).await;
        }
        Ok(Reply::Value(200, with_rv(new, kv.mod_revision)))
    }
}
