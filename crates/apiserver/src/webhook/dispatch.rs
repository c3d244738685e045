//! Calling the webhooks that match a request, as upstream's mutating and validating dispatchers
//! do (`k8s.io/apiserver/pkg/admission/plugin/webhook/{mutating,validating}/dispatcher.go`):
//! mutating webhooks one after another, each seeing the previous one's patch, then once more
//! for those with `reinvocationPolicy: IfNeeded` whose output a later webhook changed;
//! validating webhooks all at once. A webhook that cannot be called (unreachable, timed out, a
//! malformed answer) fails the request with `Internal error occurred: failed calling webhook
//! "NAME": …` under `failurePolicy: Fail` and is skipped under `Ignore`; a denial is always
//! a denial.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use serde_json::{Map, Value, json};
use tandem_core::admission::matching::{self, Attributes, Gvr};
use tandem_core::admission::review::{self, GroupVersion, ReviewVersion};
use tandem_core::registry::ResourceType;

use super::config::Hook;
use crate::error::{ApiError, ApiResult};
use crate::metrics::WebhookOutcome;
use crate::state::State;

/// The request as admission sees it (upstream `admission.Attributes`).
pub(crate) struct Attempt<'a> {
    /// `CREATE`, `UPDATE`, `DELETE` or `CONNECT`.
    pub operation: &'static str,
    /// The type the client's request named.
    pub rt: &'a ResourceType,
    /// The subresource (`status`, `scale`, `exec`), empty for the object itself.
    pub subresource: &'a str,
    /// The kind of the objects sent (`Scale` for `deployments/scale`, `PodExecOptions` for
    /// `pods/exec`); the type's own kind otherwise.
    pub kind: &'a str,
    /// The group and version of `kind` when it is not the resource's own kind
    /// (`autoscaling`, `v1` for a Scale); `None` for the resource's kind, which is sent at the
    /// version the webhook's rules matched.
    pub kind_group_version: Option<(&'a str, &'a str)>,
    pub namespace: &'a str,
    pub name: &'a str,
    pub user: &'a crate::auth::UserInfo,
    pub dry_run: bool,
    /// The operation's options (`CreateOptions`, `DeleteOptions`, …).
    pub options: Value,
}

impl Attempt<'_> {
    /// The namespace rules and selectors see: a Namespace's own name for namespaces.
    fn admission_namespace(&self) -> &str {
        if self.rt.group.is_empty() && self.rt.plural == "namespaces" {
            self.name
        } else {
            self.namespace
        }
    }
}

/// What one webhook call came to.
enum Outcome {
    /// The webhook allowed the request, possibly with a patch (already applied to the object
    /// the caller passed).
    Allowed,
    Denied(ApiError),
    /// The call failed; `failurePolicy` decides.
    Failed(String),
}

impl State {
    /// Runs the matching mutating webhooks on `obj` (the new object; `None` for DELETE and
    /// CONNECT, which are sent but whose patches have nothing to apply to).
    pub(crate) async fn mutating_webhooks(
        &self,
        warnings: &mut Vec<String>,
        attempt: &Attempt<'_>,
        mut obj: Option<&mut Value>,
        old: Option<&Value>,
    ) -> ApiResult<()> {
        if matching::is_exempt(&attempt.rt.group, &attempt.rt.plural) {
            return Ok(());
        }
        let hooks = self.webhooks.load(&self.registry, &self.cache);
        if hooks.mutating.is_empty() {
            return Ok(());
        }
        // The IfNeeded webhooks called so far, with the object as each left it.
        let mut reinvocable: Vec<(Arc<Hook>, Value)> = Vec::new();
        for hook in &hooks.mutating {
            if !self.should_call(hook, attempt, obj.as_deref(), old) {
                continue;
            }
            self.call_one(hook, attempt, obj.as_deref_mut(), old, warnings, true)
                .await?;
            if hook.reinvoke_if_needed
                && let Some(o) = obj.as_deref()
            {
                reinvocable.push((hook.clone(), o.clone()));
            }
        }
        // Upstream calls an IfNeeded webhook once more when the object changed after it ran.
        for (hook, left) in reinvocable {
            let changed = obj.as_deref().is_some_and(|o| *o != left);
            if changed {
                self.call_one(&hook, attempt, obj.as_deref_mut(), old, warnings, true)
                    .await?;
            }
        }
        Ok(())
    }

    /// Runs the matching validating webhooks, all at once; the first refusal (in the
    /// webhooks' order) is the answer.
    pub(crate) async fn validating_webhooks(
        &self,
        warnings: &mut Vec<String>,
        attempt: &Attempt<'_>,
        obj: Option<&Value>,
        old: Option<&Value>,
    ) -> ApiResult<()> {
        if matching::is_exempt(&attempt.rt.group, &attempt.rt.plural) {
            return Ok(());
        }
        let hooks = self.webhooks.load(&self.registry, &self.cache);
        let matched: Vec<&Arc<Hook>> = hooks
            .validating
            .iter()
            .filter(|h| self.should_call(h, attempt, obj, old))
            .collect();
        if matched.is_empty() {
            return Ok(());
        }
        let calls = matched.iter().map(|hook| async move {
            let mut own_warnings = Vec::new();
            let mut copy = obj.cloned();
            let result = self
                .call_one(hook, attempt, copy.as_mut(), old, &mut own_warnings, false)
                .await;
            (result, own_warnings)
        });
        let results = futures::future::join_all(calls).await;
        let mut first_error = None;
        for (result, own_warnings) in results {
            warnings.extend(own_warnings);
            if let Err(e) = result
                && first_error.is_none()
            {
                first_error = Some(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Whether `hook` applies to the request: rules (with `matchPolicy`), the namespace and
    /// object selectors. `matchConditions` are checked when it is called.
    fn should_call(
        &self,
        hook: &Hook,
        attempt: &Attempt<'_>,
        obj: Option<&Value>,
        old: Option<&Value>,
    ) -> bool {
        self.matched_version(hook, attempt).is_some()
            && self.namespace_matches(hook, attempt, obj, old)
            && hook.object_selector.matches_objects(obj, old)
    }

    /// The version of the request's resource `hook`'s rules cover it through.
    fn matched_version(&self, hook: &Hook, attempt: &Attempt<'_>) -> Option<(String, String)> {
        self.rules_match(&hook.rules, hook.match_policy, attempt)
    }

    /// The group and version through which `rules` cover the request, under `policy`.
    pub(crate) fn rules_match(
        &self,
        rules: &[matching::Rule],
        policy: matching::MatchPolicy,
        attempt: &Attempt<'_>,
    ) -> Option<(String, String)> {
        let attrs = self.attributes(attempt);
        let registry = self.registry.load();
        let equivalents: Vec<Gvr<'_>> = registry
            .all()
            .iter()
            .filter(|rt| {
                rt.group == attempt.rt.group
                    && rt.plural == attempt.rt.plural
                    && rt.version != attempt.rt.version
            })
            .map(|rt| Gvr {
                group: rt.group.as_str(),
                version: rt.version.as_str(),
                resource: rt.plural.as_str(),
            })
            .collect();
        matching::matching_resource(rules, &attrs, policy, &equivalents)
            .map(|gvr| (gvr.group.to_string(), gvr.version.to_string()))
    }

    pub(crate) fn attributes<'a>(&self, attempt: &'a Attempt<'a>) -> Attributes<'a> {
        Attributes {
            operation: attempt.operation,
            resource: Gvr {
                group: &attempt.rt.group,
                version: &attempt.rt.version,
                resource: &attempt.rt.plural,
            },
            subresource: attempt.subresource,
            namespace: attempt.admission_namespace(),
        }
    }

    fn namespace_matches(
        &self,
        hook: &Hook,
        attempt: &Attempt<'_>,
        obj: Option<&Value>,
        old: Option<&Value>,
    ) -> bool {
        if hook.namespace_selector.is_everything() {
            return true;
        }
        let labels = self.admission_namespace_labels(attempt, obj, old);
        hook.namespace_selector
            .matches_namespace(&self.attributes(attempt), Some(&labels))
            .unwrap_or(false)
    }

    /// The labels a `namespaceSelector` is matched against: a Namespace's own (the new
    /// object's, else the stored one's), else those of the request's namespace from the cache
    /// (none when it is not cached yet, or the request is cluster-scoped).
    pub(crate) fn admission_namespace_labels(
        &self,
        attempt: &Attempt<'_>,
        obj: Option<&Value>,
        old: Option<&Value>,
    ) -> Map<String, Value> {
        let is_namespace = attempt.rt.group.is_empty() && attempt.rt.plural == "namespaces";
        if is_namespace {
            return obj
                .or(old)
                .and_then(|o| o.pointer("/metadata/labels"))
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
        }
        if attempt.namespace.is_empty() {
            return Map::new();
        }
        self.registry
            .by_plural("", "v1", "namespaces")
            .and_then(|rt| {
                let o = self.cache.get(&rt, &rt.key(None, attempt.namespace))?;
                Some(o.attrs(&rt).labels.clone())
            })
            .unwrap_or_default()
    }

    /// The namespace a request is in, from the cache (for `namespaceObject`).
    pub(crate) fn namespace_object(&self, namespace: &str) -> Option<Value> {
        if namespace.is_empty() {
            return None;
        }
        let rt = self.registry.by_plural("", "v1", "namespaces")?;
        self.cache.get(&rt, &rt.key(None, namespace))?.to_value()
    }

    /// Calls one webhook and applies its answer; a failed call follows `failurePolicy`.
    async fn call_one(
        &self,
        hook: &Hook,
        attempt: &Attempt<'_>,
        obj: Option<&mut Value>,
        old: Option<&Value>,
        warnings: &mut Vec<String>,
        mutating: bool,
    ) -> ApiResult<()> {
        let started = Instant::now();
        let outcome = self
            .invoke(hook, attempt, obj, old, warnings, mutating)
            .await;
        let kind = if mutating { "admit" } else { "validating" };
        if let Some(m) = &self.options.server_metrics {
            let reported = match &outcome {
                Ok(Outcome::Allowed) => WebhookOutcome::Allowed,
                Ok(Outcome::Denied(e)) => WebhookOutcome::Denied(e.code),
                Ok(Outcome::Failed(_)) | Err(_) => WebhookOutcome::CallFailed,
            };
            m.api.observe_webhook(
                &hook.name,
                kind,
                attempt.operation,
                reported,
                started.elapsed(),
            );
        }
        match outcome? {
            Outcome::Allowed => Ok(()),
            Outcome::Denied(e) => Err(e),
            Outcome::Failed(detail) if hook.ignore_failures => {
                tracing::warn!(webhook = %hook.name, configuration = %hook.configuration, %detail, "failed calling webhook, failing open (failurePolicy: Ignore)");
                Ok(())
            }
            Outcome::Failed(detail) => Err(ApiError::internal(format!(
                "Internal error occurred: failed calling webhook {:?}: {detail}",
                hook.name
            ))),
        }
    }

    async fn invoke(
        &self,
        hook: &Hook,
        attempt: &Attempt<'_>,
        obj: Option<&mut Value>,
        old: Option<&Value>,
        warnings: &mut Vec<String>,
        mutating: bool,
    ) -> ApiResult<Outcome> {
        let Some((group, version)) = self.matched_version(hook, attempt) else {
            return Ok(Outcome::Allowed);
        };
        let Some(review_version) = ReviewVersion::choose(&hook.review_versions) else {
            return Ok(Outcome::Failed(format!(
                "webhook does not accept known AdmissionReview versions {:?}",
                hook.review_versions
            )));
        };
        let request = review_request(attempt, &group, &version, obj.as_deref(), old);
        let uid = request.uid.clone();
        if !hook.match_conditions.is_empty() {
            let namespace_object = self.namespace_object(attempt.namespace);
            match super::conditions::matches(hook, &request, namespace_object.as_ref()) {
                Ok(true) => {}
                Ok(false) => return Ok(Outcome::Allowed),
                Err(detail) => return Ok(Outcome::Failed(detail)),
            }
        }
        if attempt.dry_run && !hook.dry_run_safe() {
            return Ok(Outcome::Denied(ApiError::bad_request(format!(
                "admission webhook {:?} does not support dry run",
                hook.name
            ))));
        }
        let client = match &hook.client {
            Ok(c) => c,
            Err(e) => return Ok(Outcome::Failed(format!("failed to call webhook: {e}"))),
        };
        let target =
            match super::resolve::target(&hook.endpoint, hook.timeout, &self.registry, &self.cache)
            {
                Ok(t) => t,
                Err(e) => return Ok(Outcome::Failed(format!("failed to call webhook: {e}"))),
            };
        let body = match serde_json::to_vec(&request.review(review_version)) {
            Ok(b) => Bytes::from(b),
            Err(e) => return Ok(Outcome::Failed(format!("failed to encode the review: {e}"))),
        };
        let answer = match client.post(&target, body, hook.timeout).await {
            Ok(a) => a,
            Err(e) => return Ok(Outcome::Failed(format!("failed to call webhook: {e}"))),
        };
        let response = match review::parse_response(review_version, &uid, mutating, &answer) {
            Ok(r) => r,
            Err(e) => return Ok(Outcome::Failed(e)),
        };
        warnings.extend(response.warnings.iter().cloned());
        if !response.allowed {
            return Ok(Outcome::Denied(status_error(&review::denial_status(
                &hook.name,
                response.status.as_ref(),
            ))));
        }
        // The patch applies to the object as the webhook was sent it (at the matched version),
        // and the result goes back to the version the pipeline holds.
        if let (Some(patch), Some(obj), Some(sent)) = (&response.patch, obj, &request.object) {
            let stored_version = obj.get("apiVersion").cloned();
            let own_kind = attempt.kind_group_version.is_none();
            let mut patched = review::apply_patch(sent, patch).map_err(|e| {
                ApiError::internal(format!(
                    "Internal error occurred: admission webhook {:?} returned an invalid patch: {e}",
                    hook.name
                ))
            })?;
            if let Some(v) = stored_version.as_ref().and_then(Value::as_str)
                && own_kind
            {
                tandem_core::conversion::convert_object(&mut patched, v);
                if let Some(m) = patched.as_object_mut() {
                    m.insert("apiVersion".into(), json!(v));
                }
            }
            *obj = patched;
        }
        Ok(Outcome::Allowed)
    }
}

/// `o` as sent to a webhook or policy matched at `api_version`: converted when it is the
/// resource's own kind, as it is otherwise (a Scale, an Eviction, exec options).
fn object_at_version(o: &Value, own_kind: bool, api_version: &str) -> Value {
    let mut o = o.clone();
    if own_kind {
        tandem_core::conversion::convert_object(&mut o, api_version);
        if let Some(m) = o.as_object_mut() {
            m.insert("apiVersion".into(), json!(api_version));
        }
    }
    o
}

/// The admission request of `attempt` as seen through `group`/`version` (the version the
/// webhook's or policy's rules matched), with its objects converted to it.
pub(crate) fn review_request(
    attempt: &Attempt<'_>,
    group: &str,
    version: &str,
    obj: Option<&Value>,
    old: Option<&Value>,
) -> review::Request {
    let own_kind = attempt.kind_group_version.is_none();
    let api_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    let (kind_group, kind_version) = attempt
        .kind_group_version
        .map(|(g, v)| (g.to_string(), v.to_string()))
        .unwrap_or_else(|| (group.to_string(), version.to_string()));
    let (request_kind_group, request_kind_version) = attempt
        .kind_group_version
        .map(|(g, v)| (g.to_string(), v.to_string()))
        .unwrap_or_else(|| (attempt.rt.group.clone(), attempt.rt.version.clone()));
    review::Request {
        uid: crate::meta::new_uid(),
        kind: GroupVersion {
            group: kind_group,
            version: kind_version,
            name: attempt.kind.to_string(),
        },
        resource: GroupVersion {
            group: group.to_string(),
            version: version.to_string(),
            name: attempt.rt.plural.clone(),
        },
        sub_resource: attempt.subresource.to_string(),
        request_kind: GroupVersion {
            group: request_kind_group,
            version: request_kind_version,
            name: attempt.kind.to_string(),
        },
        request_resource: GroupVersion {
            group: attempt.rt.group.clone(),
            version: attempt.rt.version.clone(),
            name: attempt.rt.plural.clone(),
        },
        name: attempt.name.to_string(),
        namespace: attempt.namespace.to_string(),
        operation: attempt.operation.to_string(),
        user_info: serde_json::to_value(attempt.user).unwrap_or(Value::Null),
        object: obj.map(|o| object_at_version(o, own_kind, &api_version)),
        old_object: old.map(|o| object_at_version(o, own_kind, &api_version)),
        dry_run: attempt.dry_run,
        options: attempt.options.clone(),
    }
}

/// The API error of a webhook's denial Status.
fn status_error(status: &Value) -> ApiError {
    let code = status
        .get("code")
        .and_then(Value::as_u64)
        .and_then(|c| u16::try_from(c).ok())
        .unwrap_or(403);
    let message = status
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let reason = crate::error::reason_for(status.get("reason").and_then(Value::as_str), code);
    let mut e = ApiError::new(code, reason, message);
    e.details = status.get("details").cloned();
    e
}
