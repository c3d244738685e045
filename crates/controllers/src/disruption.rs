//! The disruption controller — upstream's `pkg/controller/disruption` — which keeps the status of
//! every policy/v1 PodDisruptionBudget current, so the eviction subresource can decide whether
//! one more voluntary disruption is allowed:
//!
//! - `expectedPods` and `desiredHealthy` follow upstream's `getExpectedPodCount`: an integer
//!   `minAvailable` counts the selected pods; a percentage `minAvailable` or any `maxUnavailable`
//!   takes the scale of the pods' controllers (ReplicationController, Deployment, ReplicaSet,
//!   StatefulSet, then any kind with a `scale` subresource), percentages rounded up;
//! - `currentHealthy` counts Ready pods that are neither being deleted nor recently evicted
//!   (`countHealthyPods`), `disruptionsAllowed` is the surplus (never negative, and 0 while no
//!   pods are expected);
//! - `disruptedPods` keeps the evictions the API server approved until the pod is seen being
//!   deleted or [`DELETION_TIMEOUT`] passes (`buildDisruptedPodMap`), and the PDB is looked at
//!   again when the oldest entry expires;
//! - the `DisruptionAllowed` condition says `SufficientPods` / `InsufficientPods`, or
//!   `SyncFailed` with the error when the status cannot be computed (upstream's `failSafe`, which
//!   also sets `disruptionsAllowed` to 0 so a broken budget fails closed);
//! - a `DisruptionTarget` pod condition left `True` on a pod that was not deleted within
//!   [`STALE_POD_DISRUPTION_TIMEOUT`] is reset to `False` (`syncStalePodDisruption`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Pod, PodCondition, ReplicationController};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use kube::core::GroupVersionKind;

use crate::clock::SharedClock;
use crate::controller_utils::{self as cu, Error, SyncResult, controller_of, pod_is_ready};
use crate::events::{self, EventType};
use crate::informer::{Informer, queue_key, split_key};
use crate::workqueue::WorkQueue;

/// Upstream's `DeletionTimeout`: how long an eviction approved by the API server counts the pod
/// as disrupted before the controller assumes the pod will not be deleted after all.
pub const DELETION_TIMEOUT: Duration = Duration::from_secs(120);

/// Upstream's `stalePodDisruptionTimeout`: how long a pod may carry a `DisruptionTarget`
/// condition without being deleted before the condition is reset to `False`.
pub const STALE_POD_DISRUPTION_TIMEOUT: Duration = Duration::from_secs(120);

/// The PDB condition this controller maintains, and its reasons (upstream `policy/v1`).
pub const DISRUPTION_ALLOWED: &str = "DisruptionAllowed";
pub const SUFFICIENT_PODS: &str = "SufficientPods";
pub const INSUFFICIENT_PODS: &str = "InsufficientPods";
pub const SYNC_FAILED: &str = "SyncFailed";

/// The pod condition the eviction subresource sets before deleting a pod.
pub const DISRUPTION_TARGET: &str = "DisruptionTarget";

/// The component name on the events this controller records (upstream's `controllermanager`).
const COMPONENT: &str = "controllermanager";

/// How the controller runs; tests shorten the timeouts and hand in a fake clock.
#[derive(Clone)]
pub struct DisruptionOptions {
    /// The time source for disruption and stale-condition deadlines.
    pub clock: SharedClock,
    /// See [`DELETION_TIMEOUT`].
    pub deletion_timeout: Duration,
    /// See [`STALE_POD_DISRUPTION_TIMEOUT`].
    pub stale_pod_disruption_timeout: Duration,
}

impl Default for DisruptionOptions {
    fn default() -> Self {
        DisruptionOptions {
            clock: crate::clock::system(),
            deletion_timeout: DELETION_TIMEOUT,
            stale_pod_disruption_timeout: STALE_POD_DISRUPTION_TIMEOUT,
        }
    }
}

struct Ctx {
    client: kube::Client,
    pods: Informer<Pod>,
    pdbs: Informer<PodDisruptionBudget>,
    replicasets: Informer<ReplicaSet>,
    options: DisruptionOptions,
    queue: WorkQueue,
    stale_pods: WorkQueue,
}

/// Runs the disruption controller on the shared pod and ReplicaSet caches until the runtime
/// stops. It waits, quietly, until the API server serves PodDisruptionBudgets.
pub async fn run(
    client: kube::Client,
    pods: Informer<Pod>,
    replicasets: Informer<ReplicaSet>,
    options: DisruptionOptions,
) {
    let pdbs = Informer::<PodDisruptionBudget>::start(client.clone());
    let ctx = Arc::new(Ctx {
        client,
        pods,
        pdbs,
        replicasets,
        options,
        queue: WorkQueue::named("disruption"),
        stale_pods: WorkQueue::named("stale_pod_disruption"),
    });
    let mut pdb_events = ctx.pdbs.subscribe();
    ctx.pdbs.wait_ready().await;
    // Subscribed only once budgets are served, so pod changes do not pile up meanwhile; the
    // first sync of every budget below covers what happened before.
    let mut pod_events = ctx.pods.subscribe();
    crate::informer::wait_for_cache_sync(&[&ctx.pods, &ctx.replicasets]).await;
    ctx.queue.add_keys(&ctx.pdbs.list());
    for pod in ctx.pods.list() {
        enqueue_stale_condition(&ctx, &pod);
    }
    ctx.queue
        .run_workers_for(2, "disruption", &ctx, |ctx, key| async move {
            sync(&ctx, &key).await
        });
    ctx.stale_pods
        .run_workers_for(1, "disruption-stale-pod", &ctx, |ctx, key| async move {
            sync_stale_pod_disruption(&ctx, &key).await
        });
    loop {
        tokio::select! {
            Some(change) = pdb_events.recv() => {
                ctx.queue.add_keys(change.objects());
            }
            Some(change) = pod_events.recv() => {
                // Upstream's add/update/delete pod handlers: the budget of the pod's latest
                // state is synced.
                if let Some(pod) = change.new.as_ref().or(change.old.as_ref())
                    && let Some(pdb) = pdb_for_pod(&ctx, pod).await
                {
                    ctx.queue.add(queue_key(pdb.as_ref()));
                }
                if let Some(pod) = &change.new {
                    enqueue_stale_condition(&ctx, pod);
                }
            }
            else => return,
        }
    }
}

/// Whether `pdb` selects pods labelled `labels`, as the PDB lister's `GetPodPodDisruptionBudgets`
/// decides for policy/v1: a missing selector selects nothing, an empty one selects every pod of
/// the namespace.
pub fn pdb_selects(pdb: &PodDisruptionBudget, labels: Option<&BTreeMap<String, String>>) -> bool {
    pdb.spec
        .as_ref()
        .and_then(|s| s.selector.as_ref())
        .is_some_and(|sel| cu::selector_matches(sel, labels))
}

/// Upstream's `getPdbForPod`: the first budget selecting the pod; a pod selected by several gets
/// a `MultiplePodDisruptionBudgets` warning.
async fn pdb_for_pod(ctx: &Ctx, pod: &Pod) -> Option<Arc<PodDisruptionBudget>> {
    let ns = pod.namespace().unwrap_or_default();
    let matching: Vec<Arc<PodDisruptionBudget>> = ctx
        .pdbs
        .list_namespace(&ns)
        .into_iter()
        .filter(|p| pdb_selects(p, pod.metadata.labels.as_ref()))
        .collect();
    let first = matching.first().cloned()?;
    if matching.len() > 1 {
        let message = format!(
            "Pod \"{ns}\"/\"{}\" matches multiple PodDisruptionBudgets.  Chose \"{}\" arbitrarily.",
            pod.name_any(),
            first.name_any()
        );
        events::record(
            &ctx.client,
            COMPONENT,
            pod,
            EventType::Warning,
            "MultiplePodDisruptionBudgets",
            &message,
        )
        .await;
    }
    Some(first)
}

/// Upstream's `sync`: compute and write the status; on any failure but a conflict, fail safe.
async fn sync(ctx: &Ctx, key: &str) -> SyncResult {
    let (ns, name) = split_key(key);
    let Some(pdb) = ctx.pdbs.get(ns, name) else {
        return Ok(None);
    };
    match try_sync(ctx, &pdb).await {
        Ok(recheck) => Ok(recheck),
        Err(Error::Kube(e)) if cu::is_conflict(&e) => Err(Error::Kube(e)),
        Err(Error::Kube(e)) if cu::is_not_found(&e) => Ok(None),
        Err(e) => {
            let message = sync_failure_message(&e);
            tracing::debug!(pdb = %key, error = %message, "PodDisruptionBudget sync failed; failing safe");
            let now = ctx.options.clock.now();
            let failed = fail_safe(&pdb, &message, now);
            write_status(ctx, &failed).await?;
            Err(e)
        }
    }
}

/// The text of a sync failure, as upstream puts `err.Error()` into the `SyncFailed` condition.
fn sync_failure_message(e: &Error) -> String {
    match e {
        Error::Invalid(m) | Error::Retry(m) => m.clone(),
        Error::Kube(kube::Error::Api(s)) => s.message.clone(),
        other => other.to_string(),
    }
}

/// Upstream's `trySync`.
async fn try_sync(ctx: &Ctx, pdb: &PodDisruptionBudget) -> SyncResult {
    let ns = pdb.namespace().unwrap_or_default();
    let pods: Vec<Arc<Pod>> = match pdb.spec.as_ref().and_then(|s| s.selector.as_ref()) {
        Some(sel) => match tandem_core::selector::LabelSelector::from_metav1(sel) {
            Ok(sel) => {
                let none = BTreeMap::new();
                ctx.pods
                    .list_namespace(&ns)
                    .into_iter()
                    .filter(|p| sel.matches_labels(p.metadata.labels.as_ref().unwrap_or(&none)))
                    .collect()
            }
            Err(_) => Vec::new(),
        },
        None => Vec::new(),
    };
    let expected = match expected_pod_count(ctx, pdb, &pods).await {
        Ok(e) => e,
        Err(e) => {
            let message = format!(
                "Failed to calculate the number of expected pods: {}",
                sync_failure_message(&e)
            );
            events::record(
                &ctx.client,
                COMPONENT,
                pdb,
                EventType::Warning,
                "CalculateExpectedPodCountFailed",
                &message,
            )
            .await;
            return Err(e);
        }
    };
    let now = ctx.options.clock.now();
    let (disrupted, recheck) = disrupted_pod_map(pdb, &pods, now, ctx.options.deletion_timeout);
    let current_healthy = count_healthy_pods(&pods, &disrupted, now, ctx.options.deletion_timeout);
    if let Some(new) = next_status(pdb, current_healthy, &expected, disrupted, now) {
        if pods.is_empty() {
            events::record(
                &ctx.client,
                COMPONENT,
                pdb,
                EventType::Normal,
                "NoPods",
                "No matching pods found",
            )
            .await;
        }
        if !expected.unmanaged.is_empty() {
            let message = format!(
                "Pods selected by this PodDisruptionBudget (selector: {}) were found to be unmanaged. As a result, the status of the PDB cannot be calculated correctly, which may result in undefined behavior. To account for these pods please set \".spec.minAvailable\" field of the PDB to an integer value.",
                selector_text(pdb)
            );
            events::record(
                &ctx.client,
                COMPONENT,
                pdb,
                EventType::Warning,
                "UnmanagedPods",
                &message,
            )
            .await;
        }
        write_status(ctx, &new).await?;
    }
    Ok(recheck.map(|at| duration_until(now, at)))
}

/// A label selector as text for messages (`app=web,tier in (a,b)`).
fn selector_text(pdb: &PodDisruptionBudget) -> String {
    let Some(sel) = pdb.spec.as_ref().and_then(|s| s.selector.as_ref()) else {
        return "<none>".into();
    };
    let mut parts: Vec<String> = sel
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    for e in sel.match_expressions.iter().flatten() {
        let values = e.values.clone().unwrap_or_default().join(",");
        parts.push(match e.operator.as_str() {
            "In" => format!("{} in ({values})", e.key),
            "NotIn" => format!("{} notin ({values})", e.key),
            "Exists" => e.key.clone(),
            "DoesNotExist" => format!("!{}", e.key),
            op => format!("{} {op} ({values})", e.key),
        });
    }
    parts.join(",")
}

/// Upstream's `writePdbStatus`: one `UpdateStatus` with the cached resourceVersion, so a budget
/// that changed meanwhile (an eviction decremented it) conflicts and is synced again.
async fn write_status(ctx: &Ctx, pdb: &PodDisruptionBudget) -> Result<(), Error> {
    let ns = pdb.namespace().unwrap_or_default();
    let api: Api<PodDisruptionBudget> = Api::namespaced(ctx.client.clone(), &ns);
    match api
        .replace_status(&pdb.name_any(), &PostParams::default(), pdb)
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if cu::is_not_found(&e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

fn duration_until(now: Timestamp, at: Timestamp) -> Duration {
    let d = at.duration_since(now);
    Duration::try_from(d).unwrap_or(Duration::ZERO)
}

fn add(t: Timestamp, d: Duration) -> Timestamp {
    let d = SignedDuration::try_from(d).unwrap_or(SignedDuration::MAX);
    t.saturating_add(d).unwrap_or(t)
}

/// What `getExpectedPodCount` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    /// `expectedPods`.
    pub count: i32,
    /// `desiredHealthy`.
    pub desired_healthy: i32,
    /// Selected pods without a controller (only looked for when the scale is needed).
    pub unmanaged: Vec<String>,
}

/// Upstream's `getExpectedPodCount`.
async fn expected_pod_count(
    ctx: &Ctx,
    pdb: &PodDisruptionBudget,
    pods: &[Arc<Pod>],
) -> Result<Expected, Error> {
    let spec = pdb.spec.clone().unwrap_or_default();
    if let Some(max_unavailable) = &spec.max_unavailable {
        let (count, unmanaged) = expected_scale(ctx, pods).await?;
        let max = scaled_value(max_unavailable, count, true)?;
        return Ok(Expected {
            count,
            desired_healthy: count.saturating_sub(max).max(0),
            unmanaged,
        });
    }
    match &spec.min_available {
        Some(IntOrString::Int(n)) => Ok(Expected {
            count: i32::try_from(pods.len()).unwrap_or(i32::MAX),
            desired_healthy: *n,
            unmanaged: Vec::new(),
        }),
        Some(percent @ IntOrString::String(_)) => {
            let (count, unmanaged) = expected_scale(ctx, pods).await?;
            Ok(Expected {
                count,
                desired_healthy: scaled_value(percent, count, true)?,
                unmanaged,
            })
        }
        None => Ok(Expected {
            count: 0,
            desired_healthy: 0,
            unmanaged: Vec::new(),
        }),
    }
}

/// Upstream's `intstr.GetScaledValueFromIntOrPercent` with its error texts: strings must be
/// percentages.
pub fn scaled_value(v: &IntOrString, total: i32, round_up: bool) -> Result<i32, Error> {
    let s = match v {
        IntOrString::Int(i) => return Ok(*i),
        IntOrString::String(s) => s,
    };
    let Some(number) = s.strip_suffix('%') else {
        return Err(Error::Invalid(
            "invalid value for IntOrString: invalid type: string is not a percentage".into(),
        ));
    };
    let percent: i64 = number.parse().map_err(|e| {
        Error::Invalid(format!(
            "invalid value for IntOrString: invalid value \"{s}\": {e}"
        ))
    })?;
    let product = percent.saturating_mul(i64::from(total));
    let value = if round_up {
        product.div_euclid(100) + i64::from(product.rem_euclid(100) != 0)
    } else {
        product.div_euclid(100)
    };
    Ok(i32::try_from(value).unwrap_or(if value < 0 { i32::MIN } else { i32::MAX }))
}

/// Upstream's `getExpectedScale`: the sum of the scales of the selected pods' controllers (each
/// counted once). Pods without a controller are reported, not counted; a pod whose controller
/// cannot be found fails the sync.
async fn expected_scale(ctx: &Ctx, pods: &[Arc<Pod>]) -> Result<(i32, Vec<String>), Error> {
    let mut scales: HashMap<String, i32> = HashMap::new();
    let mut unmanaged = Vec::new();
    for pod in pods {
        let Some(owner) = controller_of(&pod.metadata) else {
            unmanaged.push(pod.name_any());
            continue;
        };
        if scales.contains_key(&owner.uid) {
            continue;
        }
        let ns = pod.namespace().unwrap_or_default();
        match find_controller_scale(ctx, owner, &ns).await? {
            Some((uid, scale)) => {
                scales.insert(uid, scale);
            }
            None => {
                return Err(Error::Invalid(format!(
                    "found no controllers for pod \"{}\"",
                    pod.name_any()
                )));
            }
        }
    }
    let total = scales.values().fold(0i32, |acc, s| acc.saturating_add(*s));
    Ok((total, unmanaged))
}

/// The group of an `apiVersion` (`apps/v1` → `apps`, `v1` → the core group), or the error of
/// upstream's `schema.ParseGroupVersion`.
fn group_of(api_version: &str) -> Result<&str, Error> {
    match api_version.split('/').collect::<Vec<_>>().as_slice() {
        [_] => Ok(""),
        [group, _] => Ok(group),
        _ => Err(Error::Invalid(format!(
            "unexpected GroupVersion string: {api_version}"
        ))),
    }
}

/// Upstream's `finders()` in order: ReplicationController, Deployment (through its ReplicaSet),
/// ReplicaSet without a Deployment, StatefulSet, then the `scale` subresource of any other kind.
/// Returns the controller's UID and scale, or `None` when the reference leads nowhere.
async fn find_controller_scale(
    ctx: &Ctx,
    owner: &OwnerReference,
    ns: &str,
) -> Result<Option<(String, i32)>, Error> {
    let group = group_of(&owner.api_version)?;
    let is_apps = matches!(group, "apps" | "extensions");
    match owner.kind.as_str() {
        "ReplicationController" if group.is_empty() => {
            let api: Api<ReplicationController> = Api::namespaced(ctx.client.clone(), ns);
            Ok(get_opt(&api, &owner.name)
                .await?
                .filter(|rc| rc.uid().as_deref() == Some(owner.uid.as_str()))
                .map(|rc| {
                    let replicas = rc.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
                    (owner.uid.clone(), replicas)
                }))
        }
        "ReplicaSet" if is_apps => {
            let Some(rs) = ctx
                .replicasets
                .get(ns, &owner.name)
                .filter(|rs| rs.uid().as_deref() == Some(owner.uid.as_str()))
            else {
                return Ok(None);
            };
            match controller_of(&rs.metadata) {
                Some(d) if d.kind == "Deployment" => {
                    if !matches!(group_of(&d.api_version)?, "apps" | "extensions") {
                        return Ok(None);
                    }
                    let api: Api<Deployment> = Api::namespaced(ctx.client.clone(), ns);
                    Ok(get_opt(&api, &d.name)
                        .await?
                        .filter(|dep| dep.uid().as_deref() == Some(d.uid.as_str()))
                        .map(|dep| {
                            let replicas = dep.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
                            (d.uid.clone(), replicas)
                        }))
                }
                _ => {
                    let replicas = rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
                    Ok(Some((owner.uid.clone(), replicas)))
                }
            }
        }
        "StatefulSet" if group == "apps" => {
            let api: Api<StatefulSet> = Api::namespaced(ctx.client.clone(), ns);
            Ok(get_opt(&api, &owner.name)
                .await?
                .filter(|ss| ss.uid().as_deref() == Some(owner.uid.as_str()))
                .map(|ss| {
                    let replicas = ss.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
                    (owner.uid.clone(), replicas)
                }))
        }
        _ => scale_controller(ctx, owner, ns).await,
    }
}

/// Upstream's `getScaleController`: any other kind is asked for its `scale` subresource.
async fn scale_controller(
    ctx: &Ctx,
    owner: &OwnerReference,
    ns: &str,
) -> Result<Option<(String, i32)>, Error> {
    let (group, version) = match owner.api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", owner.api_version.as_str()),
    };
    let gvk = GroupVersionKind::gvk(group, version, &owner.kind);
    let (ar, caps): (ApiResource, _) = match kube::discovery::pinned_kind(&ctx.client, &gvk).await {
        Ok(found) => found,
        Err(e) => {
            return Err(Error::Invalid(format!(
                "no matches for kind \"{}\" in version \"{}\": {e}",
                owner.kind, owner.api_version
            )));
        }
    };
    let resource = if group.is_empty() {
        ar.plural.clone()
    } else {
        format!("{}.{group}", ar.plural)
    };
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, &ar);
    match api.get_scale(&owner.name).await {
        Ok(scale) => {
            if scale.metadata.uid.as_deref() != Some(owner.uid.as_str()) {
                return Ok(None);
            }
            let replicas = scale.spec.and_then(|s| s.replicas).unwrap_or(0);
            Ok(Some((owner.uid.clone(), replicas)))
        }
        Err(e) if cu::is_not_found(&e) => {
            let has_scale = caps
                .subresources
                .iter()
                .any(|(sub, _)| sub.plural == "scale" && sub.kind == "Scale");
            if has_scale {
                Ok(None)
            } else {
                Err(Error::Invalid(format!(
                    "{resource} does not implement the scale subresource"
                )))
            }
        }
        Err(e) => Err(e.into()),
    }
}

async fn get_opt<K>(api: &Api<K>, name: &str) -> Result<Option<K>, Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.get(name).await {
        Ok(o) => Ok(Some(o)),
        Err(e) if cu::is_not_found(&e) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Upstream's `buildDisruptedPodMap`: the entries of `status.disruptedPods` for pods that exist,
/// are not yet being deleted and were evicted less than `timeout` ago, and when the earliest of
/// them expires.
pub fn disrupted_pod_map(
    pdb: &PodDisruptionBudget,
    pods: &[Arc<Pod>],
    now: Timestamp,
    timeout: Duration,
) -> (BTreeMap<String, Time>, Option<Timestamp>) {
    let mut kept = BTreeMap::new();
    let mut recheck: Option<Timestamp> = None;
    let Some(disrupted) = pdb.status.as_ref().and_then(|s| s.disrupted_pods.as_ref()) else {
        return (kept, recheck);
    };
    for pod in pods {
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let name = pod.name_any();
        let Some(at) = disrupted.get(&name) else {
            continue;
        };
        let expires = add(at.0, timeout);
        if expires < now {
            tracing::info!(pod = %name, pdb = %pdb.name_any(), "pod was expected to be deleted but it wasn't");
        } else {
            recheck = Some(recheck.map_or(expires, |r| r.min(expires)));
            kept.insert(name, at.clone());
        }
    }
    (kept, recheck)
}

/// Upstream's `countHealthyPods`: Ready pods that are not being deleted and not recently evicted.
pub fn count_healthy_pods(
    pods: &[Arc<Pod>],
    disrupted: &BTreeMap<String, Time>,
    now: Timestamp,
    timeout: Duration,
) -> i32 {
    let healthy = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            disrupted
                .get(&p.name_any())
                .is_none_or(|at| add(at.0, timeout) <= now)
        })
        .filter(|p| pod_is_ready(p))
        .count();
    i32::try_from(healthy).unwrap_or(i32::MAX)
}

/// Upstream's `apimeta.SetStatusCondition`: the transition time moves only when the status does.
fn set_condition(conditions: &mut Vec<Condition>, mut new: Condition) {
    match conditions.iter_mut().find(|c| c.type_ == new.type_) {
        Some(existing) => {
            if existing.status != new.status {
                existing.status = new.status;
                existing.last_transition_time = new.last_transition_time;
            }
            existing.reason = new.reason;
            existing.message = new.message;
            existing.observed_generation = new.observed_generation;
        }
        None => {
            new.observed_generation = new.observed_generation.or(Some(0));
            conditions.push(new);
        }
    }
}

/// Upstream's `pdbhelper.UpdateDisruptionAllowedCondition`.
pub fn update_disruption_allowed_condition(status: &mut PodDisruptionBudgetStatus, now: Timestamp) {
    let (value, reason) = if status.disruptions_allowed > 0 {
        ("True", SUFFICIENT_PODS)
    } else {
        ("False", INSUFFICIENT_PODS)
    };
    let observed = status.observed_generation;
    set_condition(
        status.conditions.get_or_insert_default(),
        Condition {
            type_: DISRUPTION_ALLOWED.into(),
            status: value.into(),
            reason: reason.into(),
            message: String::new(),
            observed_generation: observed,
            last_transition_time: Time(now),
        },
    );
}

/// Upstream's `pdbhelper.ConditionsAreUpToDate`.
fn conditions_are_up_to_date(pdb: &PodDisruptionBudget) -> bool {
    let Some(status) = &pdb.status else {
        return false;
    };
    let Some(cond) = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == DISRUPTION_ALLOWED)
    else {
        return false;
    };
    if status.observed_generation.unwrap_or(0) != pdb.metadata.generation.unwrap_or(0) {
        return false;
    }
    if status.disruptions_allowed > 0 {
        cond.status == "True" && cond.reason == SUFFICIENT_PODS
    } else {
        cond.status == "False" && cond.reason == INSUFFICIENT_PODS
    }
}

/// Upstream's `updatePdbStatus`: the budget with its new status, or `None` when the stored
/// status already says the same.
pub fn next_status(
    pdb: &PodDisruptionBudget,
    current_healthy: i32,
    expected: &Expected,
    disrupted: BTreeMap<String, Time>,
    now: Timestamp,
) -> Option<PodDisruptionBudget> {
    let desired_healthy = expected.desired_healthy;
    let mut disruptions_allowed = current_healthy.saturating_sub(desired_healthy);
    if expected.count <= 0 || disruptions_allowed <= 0 {
        disruptions_allowed = 0;
    }
    let generation = pdb.metadata.generation.unwrap_or(0);
    let old = pdb.status.clone().unwrap_or_default();
    let unchanged = old.current_healthy == current_healthy
        && old.desired_healthy == desired_healthy
        && old.expected_pods == expected.count
        && old.disruptions_allowed == disruptions_allowed
        && old.disrupted_pods.clone().unwrap_or_default() == disrupted
        && old.observed_generation.unwrap_or(0) == generation
        && conditions_are_up_to_date(pdb);
    if unchanged {
        return None;
    }
    let mut status = PodDisruptionBudgetStatus {
        current_healthy,
        desired_healthy,
        expected_pods: expected.count,
        disruptions_allowed,
        disrupted_pods: (!disrupted.is_empty()).then_some(disrupted),
        observed_generation: Some(generation),
        conditions: old.conditions,
    };
    update_disruption_allowed_condition(&mut status, now);
    let mut new = pdb.clone();
    new.status = Some(status);
    Some(new)
}

/// Upstream's `failSafe`: no disruptions allowed, and a `SyncFailed` condition saying why.
pub fn fail_safe(pdb: &PodDisruptionBudget, message: &str, now: Timestamp) -> PodDisruptionBudget {
    let mut new = pdb.clone();
    let status = new.status.get_or_insert_default();
    status.disruptions_allowed = 0;
    let observed = status.observed_generation;
    set_condition(
        status.conditions.get_or_insert_default(),
        Condition {
            type_: DISRUPTION_ALLOWED.into(),
            status: "False".into(),
            reason: SYNC_FAILED.into(),
            message: message.into(),
            observed_generation: observed,
            last_transition_time: Time(now),
        },
    );
    new
}

/// How long until a pod's `DisruptionTarget` condition is stale — upstream's
/// `nonTerminatingPodHasStaleDisruptionCondition`: `None` when it never will be (no such
/// condition, not `True`, set by the node agent, the pod is being deleted or has finished).
pub fn stale_disruption_condition_in(
    pod: &Pod,
    now: Timestamp,
    timeout: Duration,
) -> Option<Duration> {
    if pod.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let status = pod.status.as_ref()?;
    if matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")) {
        return None;
    }
    let cond = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == DISRUPTION_TARGET)?;
    if cond.status != "True" || cond.reason.as_deref() == Some("TerminationByKubelet") {
        return None;
    }
    let since = cond.last_transition_time.as_ref().map_or(now, |t| t.0);
    Some(duration_until(now, add(since, timeout)))
}

fn enqueue_stale_condition(ctx: &Ctx, pod: &Pod) {
    let now = ctx.options.clock.now();
    if let Some(wait) =
        stale_disruption_condition_in(pod, now, ctx.options.stale_pod_disruption_timeout)
    {
        ctx.stale_pods.add_after(queue_key(pod), wait);
    }
}

/// Upstream's `syncStalePodDisruption`: resets a stale `DisruptionTarget` condition to `False`.
async fn sync_stale_pod_disruption(ctx: &Ctx, key: &str) -> SyncResult {
    let (ns, name) = split_key(key);
    let Some(pod) = ctx.pods.get(ns, name) else {
        return Ok(None);
    };
    let now = ctx.options.clock.now();
    match stale_disruption_condition_in(&pod, now, ctx.options.stale_pod_disruption_timeout) {
        None => return Ok(None),
        Some(wait) if !wait.is_zero() => return Ok(Some(wait)),
        Some(_) => {}
    }
    let mut new = (*pod).clone();
    let conditions = new
        .status
        .get_or_insert_default()
        .conditions
        .get_or_insert_default();
    conditions.retain(|c| c.type_ != DISRUPTION_TARGET);
    conditions.push(PodCondition {
        type_: DISRUPTION_TARGET.into(),
        status: "False".into(),
        last_transition_time: Some(Time(now)),
        ..PodCondition::default()
    });
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    match api.replace_status(name, &PostParams::default(), &new).await {
        Ok(_) => Ok(None),
        Err(e) if cu::is_not_found(&e) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap_or(Timestamp::UNIX_EPOCH)
    }

    fn pod(name: &str, ready: bool, deleting: bool) -> Arc<Pod> {
        let mut v = json!({
            "metadata": { "name": name, "namespace": "ns", "labels": { "app": "web" } },
            "status": { "phase": "Running", "conditions": [
                { "type": "Ready", "status": if ready { "True" } else { "False" } }
            ] }
        });
        if deleting {
            v["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        Arc::new(serde_json::from_value(v).unwrap_or_default())
    }

    fn pdb(status: serde_json::Value) -> PodDisruptionBudget {
        serde_json::from_value(json!({
            "metadata": { "name": "budget", "namespace": "ns", "generation": 2 },
            "spec": { "minAvailable": 1, "selector": { "matchLabels": { "app": "web" } } },
            "status": status
        }))
        .unwrap_or_default()
    }

    #[test]
    fn percentages_round_up_and_plain_strings_are_refused_with_upstreams_text() {
        let p = IntOrString::String("50%".into());
        assert_eq!(scaled_value(&p, 3, true).ok(), Some(2));
        assert_eq!(scaled_value(&p, 3, false).ok(), Some(1));
        assert_eq!(scaled_value(&IntOrString::Int(4), 10, true).ok(), Some(4));
        let err = scaled_value(&IntOrString::String("5".into()), 10, true)
            .err()
            .map(|e| sync_failure_message(&e));
        assert_eq!(
            err.as_deref(),
            Some("invalid value for IntOrString: invalid type: string is not a percentage")
        );
    }

    #[test]
    fn healthy_pods_exclude_unready_deleting_and_recently_disrupted_pods() {
        let now = ts("2026-01-01T00:10:00Z");
        let pods = vec![
            pod("a", true, false),
            pod("b", true, false),
            pod("c", false, false),
            pod("d", true, true),
            pod("e", true, false),
        ];
        let mut disrupted = BTreeMap::new();
        // Evicted a minute ago: still counted as disrupted.
        disrupted.insert("b".to_string(), Time(ts("2026-01-01T00:09:00Z")));
        // Evicted five minutes ago: the timeout has passed, the pod counts again.
        disrupted.insert("e".to_string(), Time(ts("2026-01-01T00:05:00Z")));
        assert_eq!(
            count_healthy_pods(&pods, &disrupted, now, DELETION_TIMEOUT),
            2
        );
    }

    #[test]
    fn disrupted_pods_drop_expired_deleting_and_missing_entries_and_recheck_at_the_earliest() {
        let now = ts("2026-01-01T00:10:00Z");
        let budget = pdb(json!({
            "currentHealthy": 0, "desiredHealthy": 0, "disruptionsAllowed": 0, "expectedPods": 0,
            "disruptedPods": {
                "fresh": "2026-01-01T00:09:30Z",
                "fresher": "2026-01-01T00:09:50Z",
                "expired": "2026-01-01T00:05:00Z",
                "deleting": "2026-01-01T00:09:00Z",
                "gone": "2026-01-01T00:09:00Z"
            }
        }));
        let pods = vec![
            pod("fresh", true, false),
            pod("fresher", true, false),
            pod("expired", true, false),
            pod("deleting", true, true),
        ];
        let (kept, recheck) = disrupted_pod_map(&budget, &pods, now, DELETION_TIMEOUT);
        assert_eq!(
            kept.keys().map(String::as_str).collect::<Vec<_>>(),
            ["fresh", "fresher"]
        );
        assert_eq!(recheck, Some(ts("2026-01-01T00:11:30Z")));
    }

    #[test]
    fn status_is_rewritten_only_when_it_changes_and_carries_the_condition() {
        let now = ts("2026-01-01T00:10:00Z");
        let budget = pdb(serde_json::Value::Null);
        let expected = Expected {
            count: 3,
            desired_healthy: 1,
            unmanaged: Vec::new(),
        };
        let Some(new) = next_status(&budget, 3, &expected, BTreeMap::new(), now) else {
            panic!("a budget without status gets one");
        };
        let s = new.status.clone().unwrap_or_default();
        assert_eq!(
            (
                s.current_healthy,
                s.desired_healthy,
                s.expected_pods,
                s.disruptions_allowed,
                s.observed_generation
            ),
            (3, 1, 3, 2, Some(2))
        );
        let cond = s.conditions.unwrap_or_default();
        assert_eq!(cond.len(), 1);
        assert_eq!(
            (cond[0].status.as_str(), cond[0].reason.as_str()),
            ("True", SUFFICIENT_PODS)
        );
        // The same numbers again: nothing to write.
        assert!(next_status(&new, 3, &expected, BTreeMap::new(), now).is_none());
        // Fewer healthy pods than desired: 0 allowed, InsufficientPods, transition time moves.
        let later = ts("2026-01-01T00:11:00Z");
        let Some(short) = next_status(&new, 1, &expected, BTreeMap::new(), later) else {
            panic!("the change is written");
        };
        let s = short.status.unwrap_or_default();
        assert_eq!(s.disruptions_allowed, 0);
        let cond = &s.conditions.unwrap_or_default()[0];
        assert_eq!(
            (
                cond.status.as_str(),
                cond.reason.as_str(),
                cond.last_transition_time.0
            ),
            ("False", INSUFFICIENT_PODS, later)
        );
    }

    #[test]
    fn no_disruptions_are_allowed_while_no_pods_are_expected() {
        let now = ts("2026-01-01T00:10:00Z");
        let expected = Expected {
            count: 0,
            desired_healthy: -5,
            unmanaged: Vec::new(),
        };
        let new = next_status(
            &pdb(serde_json::Value::Null),
            0,
            &expected,
            BTreeMap::new(),
            now,
        );
        assert_eq!(
            new.and_then(|p| p.status).map(|s| s.disruptions_allowed),
            Some(0)
        );
    }

    #[test]
    fn fail_safe_allows_nothing_and_says_why() {
        let now = ts("2026-01-01T00:10:00Z");
        let budget = pdb(json!({
            "currentHealthy": 3, "desiredHealthy": 1, "disruptionsAllowed": 2, "expectedPods": 3,
            "observedGeneration": 1
        }));
        let failed = fail_safe(&budget, "found no controllers for pod \"a\"", now);
        let s = failed.status.unwrap_or_default();
        assert_eq!(s.disruptions_allowed, 0);
        let cond = &s.conditions.unwrap_or_default()[0];
        assert_eq!(
            (
                cond.status.as_str(),
                cond.reason.as_str(),
                cond.message.as_str(),
                cond.observed_generation
            ),
            (
                "False",
                SYNC_FAILED,
                "found no controllers for pod \"a\"",
                Some(1)
            )
        );
    }

    #[test]
    fn a_disruption_target_condition_is_stale_after_the_timeout_unless_set_by_the_node() {
        let now = ts("2026-01-01T00:10:00Z");
        let with = |reason: &str, since: &str, phase: &str| -> Pod {
            serde_json::from_value(json!({
                "metadata": { "name": "p" },
                "status": { "phase": phase, "conditions": [{
                    "type": "DisruptionTarget", "status": "True", "reason": reason,
                    "lastTransitionTime": since
                }] }
            }))
            .unwrap_or_default()
        };
        let t = STALE_POD_DISRUPTION_TIMEOUT;
        assert_eq!(
            stale_disruption_condition_in(
                &with("EvictionByEvictionAPI", "2026-01-01T00:09:00Z", "Running"),
                now,
                t
            ),
            Some(Duration::from_secs(60))
        );
        assert_eq!(
            stale_disruption_condition_in(
                &with("EvictionByEvictionAPI", "2026-01-01T00:00:00Z", "Running"),
                now,
                t
            ),
            Some(Duration::ZERO)
        );
        assert_eq!(
            stale_disruption_condition_in(
                &with("TerminationByKubelet", "2026-01-01T00:00:00Z", "Running"),
                now,
                t
            ),
            None
        );
        assert_eq!(
            stale_disruption_condition_in(
                &with("EvictionByEvictionAPI", "2026-01-01T00:00:00Z", "Failed"),
                now,
                t
            ),
            None
        );
    }
}
