//! `POST pods/<name>/eviction`: deleting a pod only when its PodDisruptionBudget allows it, as
//! upstream's `EvictionREST.Create` (`pkg/registry/core/pod/storage/eviction.go`) does:
//!
//! - the body is a policy/v1 or policy/v1beta1 `Eviction` naming the pod; its `deleteOptions`
//!   are honoured, and a dry run in the query and in the options must agree;
//! - a pod that has finished, is pending or is already being deleted is deleted without looking
//!   at budgets (a running pod's deletion is pinned to the resourceVersion that was checked);
//! - a pod selected by more than one budget is refused with a 500 Status;
//! - a budget whose status the disruption controller has not caught up with
//!   (`observedGeneration < generation`) answers 429 with `retryAfterSeconds: 10`;
//! - a budget with no disruptions left answers 429 with a `DisruptionBudget` cause saying how
//!   many healthy pods it needs and has;
//! - otherwise the budget's `disruptionsAllowed` is decremented and the pod recorded in
//!   `status.disruptedPods` with a compare-and-swap status write, retried on conflict;
//! - a pod that is not Ready is deleted without spending the budget when the budget is met
//!   (`unhealthyPodEvictionPolicy: IfHealthyBudget`, the default) or always (`AlwaysAllow`),
//!   its deletion pinned to the resourceVersion that was judged;
//! - before the deletion the pod gets the `DisruptionTarget` condition (reason
//!   `EvictionByEvictionAPI`), as upstream's `addConditionAndDeletePod`.

use std::time::Duration;

use serde_json::{Value, json};
use tandem_core::registry::ResourceType;
use tandem_core::selector::LabelSelector;

use crate::error::{ApiError, ApiResult};
use crate::meta;
use crate::output::Format;
use crate::request::Query;
use crate::rest::{Ctx, Reply, decode_body, success_status};
use crate::state::State;

/// Upstream's `MaxDisruptedPodSize`: a budget with more unconfirmed evictions refuses more.
pub const MAX_DISRUPTED_POD_SIZE: usize = 2000;

/// Upstream's `EvictionsRetry` has 20 steps.
const RETRIES: usize = 20;

/// The pause between conflict retries (upstream waits about 500 ms; a short pause is enough for
/// one process).
const RETRY_PAUSE: Duration = Duration::from_millis(20);

const BUDGET_MESSAGE: &str = "Cannot evict pod as it would violate the pod's disruption budget.";

/// Handles `POST pods/<name>/eviction` for `rt` (pods).
pub async fn evict(
    state: &State,
    ctx: &mut Ctx,
    rt: &ResourceType,
    ns: Option<&str>,
    name: &str,
    body: &[u8],
) -> ApiResult<Reply> {
    let eviction = decode_body(body, ctx.content_type.as_deref())?;
    let mut options = eviction_delete_options(&eviction, name)?;
    let query_dry_run = match ctx.query.get("dryRun") {
        None | Some("") => None,
        Some("All") => Some("All"),
        Some(_) => {
            return Err(ApiError::bad_request(
                "unsupported dryRun value: only All is supported",
            ));
        }
    };
    propagate_dry_run(&mut options, query_dry_run)?;
    let dry_run = is_dry_run(&options);
    // Admission webhooks see the Eviction (a CREATE of pods/eviction); the deletion it leads
    // to is not admitted again, as upstream's eviction REST deletes through the store.
    let mut admitted = eviction.clone();
    if let Some(m) = admitted.as_object_mut() {
        m.insert("apiVersion".into(), json!("policy/v1"));
        m.insert("kind".into(), json!("Eviction"));
    }
    {
        let m = meta::meta_mut(&mut admitted);
        m.insert("name".into(), json!(name));
        if let Some(ns) = ns {
            m.insert("namespace".into(), json!(ns));
        }
    }
    let hooks = crate::rest::WebhookWrite {
        op: "CREATE",
        rt,
        sub: "eviction",
        kind: "Eviction",
        kind_group_version: Some(("policy", "v1")),
        ns,
        name,
        options: Value::Null,
    };
    state
        .webhooks_mutate(ctx, &hooks, Some(&mut admitted), None)
        .await?;
    state
        .webhooks_validate(ctx, &hooks, Some(&admitted), None)
        .await?;
    let client_rv_set = precondition_rv(&options).is_some();

    // Terminal, pending and deleting pods go without a budget check.
    let mut pod = Value::Null;
    let mut deleted = false;
    for attempt in 0..RETRIES {
        pod = state.get(rt, ns, name).await?;
        crate::auth::admit_write(
            state,
            &ctx.user,
            "create",
            rt,
            Some("eviction"),
            None,
            Some(&pod),
        )?;
        if !can_ignore_pdb(&pod) {
            break;
        }
        let mut opts = options.clone();
        if should_enforce_resource_version(&pod) && !client_rv_set {
            set_precondition_rv(&mut opts, meta::resource_version(&pod).unwrap_or_default());
        }
        match add_condition_and_delete(state, ctx, rt, ns, name, opts).await {
            Ok(()) => {
                deleted = true;
                break;
            }
            Err(e) if e.code == 409 && !client_rv_set && attempt + 1 < RETRIES => {
                tokio::time::sleep(RETRY_PAUSE).await;
            }
            Err(e) => return Err(e),
        }
    }
    if deleted {
        return Ok(Reply::Value(201, success_status()));
    }

    let pdbs = budgets_for_pod(state, &pod).await?;
    let mut pin_resource_version = false;
    let mut pdb_name = String::new();
    match pdbs.as_slice() {
        [] => {}
        [_, _, ..] => return Ok(multiple_budgets_reply()),
        [pdb] => {
            pdb_name = meta::name(pdb).unwrap_or_default().to_string();
            if !pod_is_ready(&pod) && unready_pod_may_go(pdb) {
                // The pod does not count as healthy, so deleting it costs the budget nothing; the
                // deletion is pinned to the version judged, in case it turns Ready meanwhile.
                pin_resource_version = true;
            } else {
                decrement_budget(state, pdb.clone(), &pod, dry_run).await?;
            }
        }
    }

    let mut opts = options.clone();
    if pin_resource_version {
        set_precondition_rv(&mut opts, meta::resource_version(&pod).unwrap_or_default());
    }
    match add_condition_and_delete(state, ctx, rt, ns, name, opts).await {
        Ok(()) => Ok(Reply::Value(201, success_status())),
        Err(e) if e.code == 409 && pin_resource_version && !client_rv_set => {
            Err(budget_still_processing(&pdb_name))
        }
        Err(e) => Err(e),
    }
}

/// The `deleteOptions` of an Eviction body (an empty object when absent), after checking that
/// the body is an Eviction of policy/v1 or policy/v1beta1 naming the pod of the URL.
pub fn eviction_delete_options(eviction: &Value, url_name: &str) -> ApiResult<Value> {
    if !eviction.is_object() {
        return Err(ApiError::bad_request("not a Eviction object"));
    }
    let api_version = eviction
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    let kind = eviction.get("kind").and_then(Value::as_str).unwrap_or("");
    if !matches!(api_version, "" | "policy/v1" | "policy/v1beta1") {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({api_version}) does not match the expected API version (policy/v1)"
        )));
    }
    if !matches!(kind, "" | "Eviction") {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({kind}) does not match the expected kind (Eviction)"
        )));
    }
    if meta::name(eviction).unwrap_or("") != url_name {
        return Err(ApiError::bad_request(
            "name in URL does not match name in Eviction object",
        ));
    }
    match eviction.get("deleteOptions") {
        None | Some(Value::Null) => Ok(json!({})),
        Some(o @ Value::Object(_)) => Ok(o.clone()),
        Some(_) => Err(ApiError::bad_request(
            "deleteOptions of an Eviction must be an object",
        )),
    }
}

/// Upstream's `propagateDryRun`: the query's dry run fills in for the options', and the two must
/// agree when both are given.
pub fn propagate_dry_run(options: &mut Value, query: Option<&str>) -> ApiResult<()> {
    let body: Vec<String> = options
        .get("dryRun")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let query: Vec<String> = query.map(|q| vec![q.to_string()]).unwrap_or_default();
    if body.is_empty() {
        if !query.is_empty()
            && let Some(o) = options.as_object_mut()
        {
            o.insert("dryRun".into(), json!(query));
        }
        return Ok(());
    }
    if query.is_empty() || query == body {
        return Ok(());
    }
    Err(ApiError::internal(format!(
        "Non-matching dry-run options in request and content: [{}] and [{}]",
        query.join(" "),
        body.join(" ")
    )))
}

fn is_dry_run(options: &Value) -> bool {
    options
        .get("dryRun")
        .and_then(Value::as_array)
        .is_some_and(|a| a.iter().any(|v| v.as_str() == Some("All")))
}

fn precondition_rv(options: &Value) -> Option<&str> {
    options
        .pointer("/preconditions/resourceVersion")
        .and_then(Value::as_str)
}

fn set_precondition_rv(options: &mut Value, rv: &str) {
    if !options.is_object() {
        *options = json!({});
    }
    if !options.get("preconditions").is_some_and(Value::is_object) {
        options["preconditions"] = json!({});
    }
    options["preconditions"]["resourceVersion"] = json!(rv);
}

fn phase(pod: &Value) -> &str {
    pod.pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// Upstream's `canIgnorePDB`: finished, pending and deleting pods are not guarded.
pub fn can_ignore_pdb(pod: &Value) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed" | "Pending") || meta::is_deleting(pod)
}

/// Upstream's `shouldEnforceResourceVersion`: only a live pod's deletion is pinned to the version
/// that was checked (a pending pod could start meanwhile).
pub fn should_enforce_resource_version(pod: &Value) -> bool {
    !(matches!(phase(pod), "Succeeded" | "Failed") || meta::is_deleting(pod))
}

/// `podutil.IsPodReady`.
pub fn pod_is_ready(pod: &Value) -> bool {
    pod.pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| {
            c.get("type").and_then(Value::as_str) == Some("Ready")
                && c.get("status").and_then(Value::as_str) == Some("True")
        })
}

/// Whether an unready pod may be deleted without spending `pdb`'s budget: always under
/// `unhealthyPodEvictionPolicy: AlwaysAllow`, otherwise (`IfHealthyBudget`, the default) while
/// the budget is met.
pub fn unready_pod_may_go(pdb: &Value) -> bool {
    if pdb
        .pointer("/spec/unhealthyPodEvictionPolicy")
        .and_then(Value::as_str)
        == Some("AlwaysAllow")
    {
        return true;
    }
    let current = status_int(pdb, "currentHealthy");
    let desired = status_int(pdb, "desiredHealthy");
    current >= desired && desired > 0
}

fn status_int(pdb: &Value, field: &str) -> i64 {
    pdb.get("status")
        .and_then(|s| s.get(field))
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

/// Whether `pdb` guards `pod`, as upstream's `getPodDisruptionBudgets` decides: an invalid,
/// missing or empty selector guards nothing.
pub fn pdb_selects(pdb: &Value, pod: &Value) -> bool {
    let selector = pdb.pointer("/spec/selector").unwrap_or(&Value::Null);
    match LabelSelector::from_json(selector) {
        Ok(sel) => !sel.is_empty() && sel.matches_object(pod),
        Err(_) => false,
    }
}

/// The policy/v1 PodDisruptionBudgets of the pod's namespace that select it, read from the
/// store. None while the API server does not serve the kind.
async fn budgets_for_pod(state: &State, pod: &Value) -> ApiResult<Vec<Value>> {
    let Ok(pdb_rt) = state.resource("policy", "v1", "poddisruptionbudgets") else {
        return Ok(Vec::new());
    };
    let ns = meta::namespace(pod).unwrap_or_default();
    let listed = state
        .store
        .list(&pdb_rt.namespace_prefix(Some(ns)), None, None, None)
        .await?;
    let mut selected = Vec::new();
    for kv in &listed.items {
        let Ok(mut pdb) = serde_json::from_slice::<Value>(&kv.value) else {
            tracing::warn!(key = %kv.key, "stored PodDisruptionBudget is corrupt; skipped");
            continue;
        };
        crate::cache::set_resource_version(&mut pdb, kv.mod_revision);
        if pdb_selects(&pdb, pod) {
            selected.push(pdb);
        }
    }
    Ok(selected)
}

/// Upstream's verify-and-decrement loop: re-reads the budget after a conflict, up to
/// [`RETRIES`] times, then gives up with a 504.
async fn decrement_budget(
    state: &State,
    mut pdb: Value,
    pod: &Value,
    dry_run: bool,
) -> ApiResult<()> {
    let pdb_rt = state.resource("policy", "v1", "poddisruptionbudgets")?;
    let ns = meta::namespace(&pdb).unwrap_or_default().to_string();
    let name = meta::name(&pdb).unwrap_or_default().to_string();
    let pod_name = meta::name(pod).unwrap_or_default();
    for attempt in 0..RETRIES {
        if attempt > 0 {
            tokio::time::sleep(RETRY_PAUSE).await;
            pdb = state.get(&pdb_rt, Some(&ns), &name).await?;
        }
        let now = tandem_core::time::now_rfc3339();
        let Some(updated) = check_and_decrement(&pdb, pod_name, &now)? else {
            return Ok(());
        };
        if dry_run {
            return Ok(());
        }
        let mut internal = Ctx::internal("system:apiserver");
        match state
            .update(
                &mut internal,
                &pdb_rt,
                Some(&ns),
                &name,
                updated,
                Some("status"),
            )
            .await
        {
            Ok(_) => return Ok(()),
            Err(e) if e.code == 409 => continue,
            Err(e) => return Err(e),
        }
    }
    Err(ApiError {
        details: Some(json!({"retryAfterSeconds": 10})),
        ..ApiError::timeout(format!(
            "Timeout: couldn't update PodDisruptionBudget \"{name}\" due to conflicts"
        ))
    })
}

/// Upstream's `checkAndDecrement`: the budget with one disruption spent and the pod recorded in
/// `disruptedPods` at `now`, or the refusal. `Ok(None)` never happens for a budget that allows
/// the disruption; it is kept for symmetry with a budget needing no write.
pub fn check_and_decrement(pdb: &Value, pod_name: &str, now: &str) -> ApiResult<Option<Value>> {
    let name = meta::name(pdb).unwrap_or_default();
    let generation = pdb
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let observed = status_int(pdb, "observedGeneration");
    if observed < generation {
        return Err(budget_still_processing(name));
    }
    let allowed = status_int(pdb, "disruptionsAllowed");
    if allowed < 0 {
        return Err(budget_forbidden(
            name,
            "pdb disruptions allowed is negative",
        ));
    }
    let disrupted = pdb
        .pointer("/status/disruptedPods")
        .and_then(Value::as_object)
        .map_or(0, |m| m.len());
    if disrupted > MAX_DISRUPTED_POD_SIZE {
        return Err(budget_forbidden(
            name,
            "DisruptedPods map too big - too many evictions not confirmed by PDB controller",
        ));
    }
    if allowed == 0 {
        return Err(budget_exhausted(
            name,
            status_int(pdb, "desiredHealthy"),
            status_int(pdb, "currentHealthy"),
        ));
    }
    let mut new = pdb.clone();
    if !new.get("status").is_some_and(Value::is_object) {
        new["status"] = json!({});
    }
    let status = &mut new["status"];
    status["disruptionsAllowed"] = json!(allowed - 1);
    if allowed - 1 == 0 {
        insufficient_pods_condition(status, now);
    }
    if !status.get("disruptedPods").is_some_and(Value::is_object) {
        status["disruptedPods"] = json!({});
    }
    status["disruptedPods"][pod_name] = json!(now);
    Ok(Some(new))
}

/// `pdbhelper.UpdateDisruptionAllowedCondition` for a budget with no disruptions left:
/// `DisruptionAllowed` is `False` with reason `InsufficientPods`; the transition time moves only
/// when the status does.
fn insufficient_pods_condition(status: &mut Value, now: &str) {
    let observed = status
        .get("observedGeneration")
        .cloned()
        .unwrap_or(json!(0));
    if !status.get("conditions").is_some_and(Value::is_array) {
        status["conditions"] = json!([]);
    }
    let Some(conditions) = status["conditions"].as_array_mut() else {
        return;
    };
    let existing = conditions
        .iter_mut()
        .find(|c| c.get("type").and_then(Value::as_str) == Some("DisruptionAllowed"));
    match existing {
        Some(c) => {
            if c.get("status").and_then(Value::as_str) != Some("False") {
                c["status"] = json!("False");
                c["lastTransitionTime"] = json!(now);
            }
            c["reason"] = json!("InsufficientPods");
            c["message"] = json!("");
            c["observedGeneration"] = observed;
        }
        None => conditions.push(json!({
            "type": "DisruptionAllowed",
            "status": "False",
            "reason": "InsufficientPods",
            "message": "",
            "observedGeneration": observed,
            "lastTransitionTime": now,
        })),
    }
}

/// The 429 of a budget with no disruptions left.
pub fn budget_exhausted(name: &str, desired: i64, current: i64) -> ApiError {
    ApiError {
        details: Some(json!({"causes": [{
            "reason": "DisruptionBudget",
            "message": format!(
                "The disruption budget {name} needs {desired} healthy pods and has {current} currently"
            ),
        }]})),
        ..ApiError::new(429, "TooManyRequests", BUDGET_MESSAGE)
    }
}

/// Upstream's `createTooManyRequestsError`: the budget's status is not current yet; try again in
/// ten seconds.
pub fn budget_still_processing(name: &str) -> ApiError {
    ApiError {
        details: Some(json!({
            "causes": [{
                "reason": "DisruptionBudget",
                "message": format!("The disruption budget {name} is still being processed by the server."),
            }],
            "retryAfterSeconds": 10,
        })),
        ..ApiError::new(429, "TooManyRequests", BUDGET_MESSAGE)
    }
}

/// Upstream's `errors.NewForbidden(policy.Resource("poddisruptionbudget"), name, why)`.
fn budget_forbidden(name: &str, why: &str) -> ApiError {
    ApiError {
        details: Some(json!({"name": name, "group": "policy", "kind": "poddisruptionbudget"})),
        ..ApiError::forbidden(format!(
            "poddisruptionbudget.policy \"{name}\" is forbidden: {why}"
        ))
    }
}

/// The answer for a pod guarded by several budgets: upstream returns this Status (code 500, no
/// reason) as the result of the create.
fn multiple_budgets_reply() -> Reply {
    let body = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
        "code": 500,
    });
    Reply::Raw(
        500,
        bytes::Bytes::from(serde_json::to_vec(&body).unwrap_or_default()),
        "application/json",
    )
}

/// The pod with the `DisruptionTarget` condition upstream's eviction adds (`UpdatePodCondition`:
/// the transition time is kept when the status is unchanged), or `None` when it already has it.
pub fn with_disruption_target(pod: &Value, now: &str) -> Option<Value> {
    let mut new = pod.clone();
    if !new.get("status").is_some_and(Value::is_object) {
        new["status"] = json!({});
    }
    if !new["status"].get("conditions").is_some_and(Value::is_array) {
        new["status"]["conditions"] = json!([]);
    }
    let conditions = new["status"]["conditions"].as_array_mut()?;
    let mut condition = json!({
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "EvictionByEvictionAPI",
        "message": "Eviction API: evicting",
        "lastTransitionTime": now,
    });
    let existing = conditions
        .iter_mut()
        .find(|c| c.get("type").and_then(Value::as_str) == Some("DisruptionTarget"));
    match existing {
        Some(old) => {
            if old.get("status") == condition.get("status") {
                condition["lastTransitionTime"] = old
                    .get("lastTransitionTime")
                    .cloned()
                    .unwrap_or(Value::Null);
            }
            let same = ["status", "reason", "message", "lastTransitionTime"]
                .iter()
                .all(|k| old.get(*k) == condition.get(*k))
                && old.get("lastProbeTime").is_none_or(Value::is_null);
            if same {
                return None;
            }
            *old = condition;
        }
        None => conditions.push(condition),
    }
    Some(new)
}

/// Upstream's `addConditionAndDeletePod`: unless this is a dry run, the pod gets the
/// `DisruptionTarget` condition (checked against the options' preconditions, retried on
/// conflict), then it is deleted with `options` — a resourceVersion precondition moved to the
/// version the condition wrote.
async fn add_condition_and_delete(
    state: &State,
    ctx: &mut Ctx,
    rt: &ResourceType,
    ns: Option<&str>,
    name: &str,
    mut options: Value,
) -> ApiResult<()> {
    if !is_dry_run(&options) {
        let pod_kind = ResourceType {
            plural: "Pod".into(),
            group: String::new(),
            ..rt.clone()
        };
        for attempt in 0..RETRIES {
            let latest = state.get(rt, ns, name).await?;
            let latest_rv = meta::resource_version(&latest)
                .unwrap_or_default()
                .to_string();
            if let Some(uid) = options
                .pointer("/preconditions/uid")
                .and_then(Value::as_str)
                .filter(|u| !u.is_empty())
                && Some(uid) != meta::uid(&latest)
            {
                return Err(ApiError::conflict_msg(
                    &pod_kind,
                    name,
                    &format!(
                        "the UID in the precondition ({uid}) does not match the UID in record ({}). The object might have been deleted and then recreated",
                        meta::uid(&latest).unwrap_or_default()
                    ),
                ));
            }
            if let Some(rv) = precondition_rv(&options).filter(|r| !r.is_empty())
                && rv != latest_rv
            {
                return Err(ApiError::conflict_msg(
                    &pod_kind,
                    name,
                    &format!(
                        "the ResourceVersion in the precondition ({rv}) does not match the ResourceVersion in record ({latest_rv}). The object might have been modified"
                    ),
                ));
            }
            let now = tandem_core::time::now_rfc3339();
            let Some(updated) = with_disruption_target(&latest, &now) else {
                break;
            };
            let mut internal = Ctx::internal("system:apiserver");
            internal.webhooks_done = true;
            match state
                .update(&mut internal, rt, ns, name, updated, Some("status"))
                .await
            {
                Ok(Reply::Value(_, written)) => {
                    if precondition_rv(&options).is_some()
                        && let Some(rv) = meta::resource_version(&written)
                    {
                        let rv = rv.to_string();
                        set_precondition_rv(&mut options, &rv);
                    }
                    break;
                }
                Ok(Reply::Raw(..)) => break,
                Err(e) if e.code == 409 && attempt + 1 < RETRIES => continue,
                Err(e) => return Err(e),
            }
        }
    }
    let mut delete_ctx = Ctx {
        query: Query::default(),
        format: Format::Json,
        content_type: None,
        warnings: Vec::new(),
        user: ctx.user.clone(),
        user_agent: ctx.user_agent.clone(),
        applying: false,
        webhooks_done: true,
    };
    let result = state.delete(&mut delete_ctx, rt, ns, name, &options).await;
    ctx.warnings.append(&mut delete_ctx.warnings);
    result.map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: &str = "2026-11-28T06:00:00Z";

    fn pod(phase: &str, ready: bool) -> Value {
        json!({
            "metadata": {"name": "web-1", "namespace": "ns", "labels": {"app": "web"}, "resourceVersion": "7"},
            "status": {"phase": phase, "conditions": [
                {"type": "Ready", "status": if ready { "True" } else { "False" }}
            ]}
        })
    }

    fn pdb(status: Value) -> Value {
        json!({
            "metadata": {"name": "web-pdb", "namespace": "ns", "generation": 1, "resourceVersion": "9"},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}},
            "status": status
        })
    }

    #[test]
    fn an_exhausted_budget_answers_429_with_upstreams_status() {
        let budget = pdb(json!({"observedGeneration": 1, "disruptionsAllowed": 0,
            "currentHealthy": 2, "desiredHealthy": 2, "expectedPods": 2}));
        let Err(e) = check_and_decrement(&budget, "web-1", NOW) else {
            panic!("an exhausted budget must refuse");
        };
        assert_eq!(
            String::from_utf8(e.status_json()).unwrap_or_default(),
            "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\
             \"message\":\"Cannot evict pod as it would violate the pod's disruption budget.\",\
             \"reason\":\"TooManyRequests\",\"details\":{\"causes\":[{\"reason\":\"DisruptionBudget\",\
             \"message\":\"The disruption budget web-pdb needs 2 healthy pods and has 2 currently\"}]},\
             \"code\":429}\n"
        );
    }

    #[test]
    fn a_stale_budget_answers_429_and_asks_to_retry_later() {
        let mut budget = pdb(json!({"observedGeneration": 1, "disruptionsAllowed": 3}));
        budget["metadata"]["generation"] = json!(2);
        let Err(e) = check_and_decrement(&budget, "web-1", NOW) else {
            panic!("a stale budget must refuse");
        };
        assert_eq!((e.code, e.reason), (429, "TooManyRequests"));
        let d = e.details.unwrap_or_default();
        assert_eq!(d["retryAfterSeconds"], json!(10));
        assert_eq!(
            d["causes"][0]["message"],
            json!("The disruption budget web-pdb is still being processed by the server.")
        );
    }

    #[test]
    fn negative_or_overfull_budgets_are_forbidden() {
        let budget = pdb(json!({"observedGeneration": 1, "disruptionsAllowed": -1}));
        let e = check_and_decrement(&budget, "p", NOW).err();
        assert_eq!(
            e.map(|e| (e.code, e.message)),
            Some((
                403,
                "poddisruptionbudget.policy \"web-pdb\" is forbidden: pdb disruptions allowed is negative".to_string()
            ))
        );
        let many: serde_json::Map<String, Value> = (0..=MAX_DISRUPTED_POD_SIZE)
            .map(|i| (format!("p{i}"), json!(NOW)))
            .collect();
        let budget =
            pdb(json!({"observedGeneration": 1, "disruptionsAllowed": 1, "disruptedPods": many}));
        assert_eq!(
            check_and_decrement(&budget, "p", NOW).err().map(|e| e.code),
            Some(403)
        );
    }

    #[test]
    fn an_allowed_eviction_spends_one_disruption_and_records_the_pod() {
        let budget = pdb(json!({"observedGeneration": 1, "disruptionsAllowed": 2,
            "currentHealthy": 3, "desiredHealthy": 1, "expectedPods": 3,
            "conditions": [{"type": "DisruptionAllowed", "status": "True", "reason": "SufficientPods",
                "message": "", "observedGeneration": 1, "lastTransitionTime": "2026-11-28T05:00:00Z"}]}));
        let Ok(Some(one)) = check_and_decrement(&budget, "web-1", NOW) else {
            panic!("the first eviction is allowed");
        };
        assert_eq!(one["status"]["disruptionsAllowed"], json!(1));
        assert_eq!(one["status"]["disruptedPods"], json!({"web-1": NOW}));
        assert_eq!(
            one["status"]["conditions"][0]["reason"],
            json!("SufficientPods")
        );
        // The last disruption flips the condition to InsufficientPods.
        let Ok(Some(two)) = check_and_decrement(&one, "web-2", NOW) else {
            panic!("the second eviction is allowed");
        };
        assert_eq!(two["status"]["disruptionsAllowed"], json!(0));
        assert_eq!(
            two["status"]["disruptedPods"],
            json!({"web-1": NOW, "web-2": NOW})
        );
        let c = &two["status"]["conditions"][0];
        assert_eq!(
            (&c["status"], &c["reason"], &c["lastTransitionTime"]),
            (&json!("False"), &json!("InsufficientPods"), &json!(NOW))
        );
    }

    #[test]
    fn finished_pending_and_deleting_pods_skip_the_budget() {
        assert!(can_ignore_pdb(&pod("Succeeded", false)));
        assert!(can_ignore_pdb(&pod("Failed", false)));
        assert!(can_ignore_pdb(&pod("Pending", false)));
        let mut deleting = pod("Running", true);
        deleting["metadata"]["deletionTimestamp"] = json!(NOW);
        assert!(can_ignore_pdb(&deleting));
        assert!(!can_ignore_pdb(&pod("Running", true)));
        // Only a pending pod's deletion is pinned to its resourceVersion.
        assert!(should_enforce_resource_version(&pod("Pending", false)));
        assert!(!should_enforce_resource_version(&pod("Failed", false)));
        assert!(!should_enforce_resource_version(&deleting));
    }

    #[test]
    fn unready_pods_go_free_under_always_allow_or_a_met_budget() {
        let met = pdb(json!({"currentHealthy": 2, "desiredHealthy": 2}));
        let short = pdb(json!({"currentHealthy": 1, "desiredHealthy": 2}));
        assert!(unready_pod_may_go(&met));
        assert!(!unready_pod_may_go(&short));
        let mut always = short.clone();
        always["spec"]["unhealthyPodEvictionPolicy"] = json!("AlwaysAllow");
        assert!(unready_pod_may_go(&always));
        let mut if_healthy = short;
        if_healthy["spec"]["unhealthyPodEvictionPolicy"] = json!("IfHealthyBudget");
        assert!(!unready_pod_may_go(&if_healthy));
        // A budget that wants no healthy pods does not let unready pods skip it.
        assert!(!unready_pod_may_go(&pdb(
            json!({"currentHealthy": 0, "desiredHealthy": 0})
        )));
    }

    #[test]
    fn empty_missing_and_invalid_selectors_guard_nothing() {
        let p = pod("Running", true);
        assert!(pdb_selects(&pdb(json!({})), &p));
        for sel in [
            json!({}),
            Value::Null,
            json!({"matchExpressions": [{"key": "app", "operator": "Bogus"}]}),
        ] {
            let mut b = pdb(json!({}));
            b["spec"]["selector"] = sel.clone();
            assert!(!pdb_selects(&b, &p), "{sel}");
        }
        let mut other = pdb(json!({}));
        other["spec"]["selector"] = json!({"matchLabels": {"app": "db"}});
        assert!(!pdb_selects(&other, &p));
    }

    #[test]
    fn the_body_must_be_an_eviction_of_the_pod_in_the_url() {
        let v1 = json!({"apiVersion": "policy/v1", "kind": "Eviction",
            "metadata": {"name": "web-1"}, "deleteOptions": {"gracePeriodSeconds": 0}});
        assert_eq!(
            eviction_delete_options(&v1, "web-1").ok(),
            Some(json!({"gracePeriodSeconds": 0}))
        );
        let beta = json!({"apiVersion": "policy/v1beta1", "kind": "Eviction", "metadata": {"name": "web-1"}});
        assert_eq!(
            eviction_delete_options(&beta, "web-1").ok(),
            Some(json!({}))
        );
        let e = eviction_delete_options(&v1, "web-2").err();
        assert_eq!(
            e.map(|e| (e.code, e.message)),
            Some((
                400,
                "name in URL does not match name in Eviction object".to_string()
            ))
        );
        let wrong = json!({"apiVersion": "v1", "kind": "Eviction", "metadata": {"name": "web-1"}});
        assert_eq!(
            eviction_delete_options(&wrong, "web-1")
                .err()
                .map(|e| e.code),
            Some(400)
        );
    }

    #[test]
    fn dry_run_comes_from_the_query_or_the_options_and_must_agree() {
        let mut opts = json!({});
        assert!(propagate_dry_run(&mut opts, Some("All")).is_ok());
        assert_eq!(opts, json!({"dryRun": ["All"]}));
        let mut opts = json!({"dryRun": ["All"]});
        assert!(propagate_dry_run(&mut opts, None).is_ok());
        assert!(is_dry_run(&opts));
        let mut opts = json!({"dryRun": ["Other"]});
        assert_eq!(
            propagate_dry_run(&mut opts, Some("All"))
                .err()
                .map(|e| e.code),
            Some(500)
        );
    }

    #[test]
    fn the_disruption_target_condition_is_added_once() {
        let p = pod("Running", true);
        let Some(marked) = with_disruption_target(&p, NOW) else {
            panic!("the condition is added");
        };
        let c = marked["status"]["conditions"]
            .as_array()
            .and_then(|a| a.iter().find(|c| c["type"] == "DisruptionTarget"))
            .cloned()
            .unwrap_or_default();
        assert_eq!(
            c,
            json!({"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
                "message": "Eviction API: evicting", "lastTransitionTime": NOW})
        );
        assert!(with_disruption_target(&marked, "2026-11-28T07:00:00Z").is_none());
    }
}
