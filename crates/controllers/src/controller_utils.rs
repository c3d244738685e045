//! Helpers the workload controllers share, after upstream's `pkg/controller/controller_utils.go`:
//! label-selector matching on typed objects (an adapter over `tandem_core::selector`), pod readiness and availability, controller
//! references, expectations, slow-start batches, the ranking that decides which pods go first, and
//! status writes that let an object vanish under them.

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Debug;
use std::future::Future;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, ObjectMeta, OwnerReference, Time,
};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use serde::de::DeserializeOwned;
use tandem_core::selector::LabelSelector as Selector;

/// What a controller sync can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A call to the API server failed.
    #[error("api request failed")]
    Kube(#[from] kube::Error),
    /// An object could not be converted.
    #[error("object serialization failed")]
    Serde(#[from] serde_json::Error),
    /// The object's spec cannot be acted on (for example an unparsable percentage).
    #[error("invalid spec: {0}")]
    Invalid(String),
    /// A sync did part of its work and must be retried (hash collision, pending expectations).
    #[error("retry: {0}")]
    Retry(String),
}

/// The result of one sync: `Some(delay)` asks to see the object again after `delay`.
pub type SyncResult = Result<Option<Duration>, Error>;

/// The current time. Controllers read time only through this, so it is one place to change.
pub fn now() -> Timestamp {
    Timestamp::now()
}

/// Whether `labels` satisfy `selector`, through core's `metav1.LabelSelectorAsSelector`
/// ([`Selector::from_metav1`]): an empty selector matches everything, absent labels read as
/// none, and a selector that does not convert matches nothing (upstream's controllers skip the
/// object on the conversion error). Callers that must refuse empty selectors check
/// [`selector_is_empty`] first; a loop over many objects converts once and calls
/// [`Selector::matches_labels`] itself.
pub fn selector_matches(
    selector: &LabelSelector,
    labels: Option<&BTreeMap<String, String>>,
) -> bool {
    let none = BTreeMap::new();
    Selector::from_metav1(selector).is_ok_and(|s| s.matches_labels(labels.unwrap_or(&none)))
}

/// Whether `selector` selects nothing explicitly (no labels, no expressions).
pub fn selector_is_empty(selector: &LabelSelector) -> bool {
    selector.match_labels.as_ref().is_none_or(|m| m.is_empty())
        && selector
            .match_expressions
            .as_ref()
            .is_none_or(|e| e.is_empty())
}

/// Whether a map selector (ReplicationController, Service) matches `labels`; an empty map matches
/// nothing, as upstream's `labels.SelectorFromValidatedSet` of an empty set is used only after
/// callers refuse it.
pub fn map_selector_matches(
    selector: &BTreeMap<String, String>,
    labels: Option<&BTreeMap<String, String>>,
) -> bool {
    !selector.is_empty()
        && labels.is_some_and(|l| selector.iter().all(|(k, v)| l.get(k) == Some(v)))
}

/// The owner reference with `controller: true`, if any.
pub fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
}

/// The queue key (`namespace/name`) of `obj`'s controller when that controller is a `kind`:
/// how the workload controllers' event handlers map a changed pod or Job to its owner
/// (upstream's `resolveControllerRef` before the uid check, which `sync` does).
pub fn controller_key<K: kube::Resource>(obj: &K, kind: &str) -> Option<String> {
    let owner = controller_of(obj.meta()).filter(|r| r.kind == kind)?;
    Some(format!(
        "{}/{}",
        obj.meta().namespace.as_deref().unwrap_or_default(),
        owner.name
    ))
}

/// A controller reference to an owner, as upstream's `metav1.NewControllerRef`.
pub fn controller_ref(api_version: &str, kind: &str, name: &str, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: api_version.to_string(),
        kind: kind.to_string(),
        name: name.to_string(),
        uid: uid.to_string(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// `controller.IsPodActive`: not Succeeded, not Failed, not being deleted.
pub fn pod_is_active(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    !matches!(phase, Some("Succeeded" | "Failed")) && pod.metadata.deletion_timestamp.is_none()
}

/// The pod's `Ready` condition: whether it is true and since when.
pub fn pod_ready_condition(pod: &Pod) -> Option<(bool, Option<&Time>)> {
    pod.status
        .as_ref()?
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Ready")
        .map(|c| (c.status == "True", c.last_transition_time.as_ref()))
}

/// `podutil.IsPodReady`.
pub fn pod_is_ready(pod: &Pod) -> bool {
    pod_ready_condition(pod).is_some_and(|(ready, _)| ready)
}

/// `podutil.IsPodAvailable`: ready for at least `min_ready_seconds`. Returns availability and,
/// when ready but not yet available, how long until it will be.
pub fn pod_availability(
    pod: &Pod,
    min_ready_seconds: i32,
    now: Timestamp,
) -> (bool, Option<Duration>) {
    match pod_ready_condition(pod) {
        Some((true, since)) => {
            if min_ready_seconds <= 0 {
                return (true, None);
            }
            let Some(since) = since else {
                return (false, None);
            };
            let ready_for = now.as_second() - since.0.as_second();
            let need = i64::from(min_ready_seconds);
            if ready_for >= need {
                (true, None)
            } else {
                (
                    false,
                    Some(Duration::from_secs((need - ready_for).unsigned_abs())),
                )
            }
        }
        _ => (false, None),
    }
}

/// Runs `count` calls of `f` in batches of 1, 2, 4, … (upstream's `slowStartBatch` with
/// `SlowStartInitialBatchSize` 1), each batch concurrently; stops after the first batch with a
/// failure so a quota or admission refusal costs one call, not thousands. Returns the successful
/// results and the first error.
pub async fn slow_start_batch<T, E, F, Fut>(count: usize, mut f: F) -> (Vec<T>, Option<E>)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let mut done = Vec::with_capacity(count);
    let mut remaining = count;
    let mut batch = 1usize;
    while remaining > 0 {
        let size = batch.min(remaining);
        let results = futures::future::join_all((0..size).map(|_| f())).await;
        let mut first_err = None;
        for r in results {
            match r {
                Ok(v) => done.push(v),
                Err(e) => {
                    if first_err.is_none() {
                        first_err = Some(e);
                    }
                }
            }
        }
        if first_err.is_some() {
            return (done, first_err);
        }
        remaining -= size;
        batch = size * 2;
    }
    (done, None)
}

/// Expectations (upstream's `UIDTrackingControllerExpectations`, tracked by name): the pods a
/// controller created or deleted that its cache has not yet caught up with. While any are
/// outstanding the controller does not create or delete more, so a lagging watch cannot make it
/// act twice. Entries expire after five minutes, as upstream's `ExpectationsTimeout`.
#[derive(Default)]
pub struct Expectations {
    inner: Mutex<HashMap<String, Expected>>,
}

#[derive(Default)]
struct Expected {
    adds: HashSet<String>,
    deletes: HashSet<String>,
    since: Option<Instant>,
}

/// What the cache knows of a pod a controller expects to see or to see go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    Absent,
    Present,
    Terminating,
}

const EXPECTATIONS_TIMEOUT: Duration = Duration::from_secs(300);

impl Expectations {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Expected>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records pods created for `key`.
    pub fn expect_creations(&self, key: &str, names: impl IntoIterator<Item = String>) {
        let mut m = self.lock();
        let e = m.entry(key.to_string()).or_default();
        e.adds.extend(names);
        e.since = Some(Instant::now());
    }

    /// Records pods deleted for `key`.
    pub fn expect_deletions(&self, key: &str, names: impl IntoIterator<Item = String>) {
        let mut m = self.lock();
        let e = m.entry(key.to_string()).or_default();
        e.deletes.extend(names);
        e.since = Some(Instant::now());
    }

    /// Whether everything expected for `key` has been observed; `seen` says what the cache holds
    /// for a pod name. Observed entries are dropped.
    pub fn satisfied(&self, key: &str, seen: impl Fn(&str) -> Seen) -> bool {
        let mut m = self.lock();
        let Some(e) = m.get_mut(key) else { return true };
        e.adds.retain(|n| seen(n) == Seen::Absent);
        e.deletes.retain(|n| seen(n) == Seen::Present);
        let expired = e.since.is_some_and(|t| t.elapsed() > EXPECTATIONS_TIMEOUT);
        if e.adds.is_empty() && e.deletes.is_empty() || expired {
            m.remove(key);
            return true;
        }
        false
    }

    /// Records what the pod watch delivered for `name`, a pod controlled by `key` (upstream's
    /// `CreationObserved`/`DeletionObserved`, called from the informer's event handlers): any
    /// event shows the creation happened, and a deletion or a deletion timestamp shows the
    /// deletion did. Without it, a pod created and then deleted by someone else before the next
    /// sync looked at the cache would stay expected (absent from the cache) until the timeout,
    /// and the owner would make no replacement for five minutes.
    pub fn observe(&self, key: &str, name: &str, gone: bool) {
        let mut m = self.lock();
        let Some(e) = m.get_mut(key) else { return };
        e.adds.remove(name);
        if gone {
            e.deletes.remove(name);
        }
    }

    /// Forgets `key` (its object was deleted).
    pub fn forget(&self, key: &str) {
        self.lock().remove(key);
    }
}

/// What the pod cache says about `name` in `namespace`, for [`Expectations::satisfied`].
pub fn seen_in(pods: &crate::informer::Informer<Pod>, namespace: &str, name: &str) -> Seen {
    match pods.get(namespace, name) {
        None => Seen::Absent,
        Some(p) if p.metadata.deletion_timestamp.is_some() => Seen::Terminating,
        Some(_) => Seen::Present,
    }
}

fn phase_rank(pod: &Pod) -> u8 {
    match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
        Some("Pending") => 0,
        Some("Unknown") => 1,
        Some("Running") => 2,
        _ => 0,
    }
}

fn deletion_cost(pod: &Pod) -> i64 {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("controller.kubernetes.io/pod-deletion-cost"))
        .and_then(|v| v.parse::<i32>().ok())
        .map(i64::from)
        .unwrap_or(0)
}

fn restarts(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map(|cs| cs.iter().map(|c| c.restart_count).max().unwrap_or(0))
        .unwrap_or(0)
}

/// Upstream's `ActivePodsWithRanks.Less`: the order in which surplus pods are deleted, first to
/// go first. Unassigned before assigned; Pending before Unknown before Running; not ready before
/// ready; lower `pod-deletion-cost` first; more pods of the same owner on the pod's node first
/// (`rank`); ready for less time first; more restarts first; newer first.
pub fn compare_for_deletion(a: &Pod, rank_a: usize, b: &Pod, rank_b: usize) -> Ordering {
    let node = |p: &Pod| {
        p.spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default()
    };
    let (na, nb) = (node(a), node(b));
    if na.is_empty() != nb.is_empty() {
        return if na.is_empty() {
            Ordering::Less
        } else {
            Ordering::Greater
        };
    }
    let (pa, pb) = (phase_rank(a), phase_rank(b));
    if pa != pb {
        return pa.cmp(&pb);
    }
    let (ra, rb) = (pod_is_ready(a), pod_is_ready(b));
    if ra != rb {
        return if ra {
            Ordering::Greater
        } else {
            Ordering::Less
        };
    }
    let (ca, cb) = (deletion_cost(a), deletion_cost(b));
    if ca != cb {
        return ca.cmp(&cb);
    }
    if rank_a != rank_b {
        return rank_b.cmp(&rank_a);
    }
    if ra && rb {
        let since = |p: &Pod| pod_ready_condition(p).and_then(|(_, t)| t.map(|t| t.0));
        if let (Some(sa), Some(sb)) = (since(a), since(b))
            && sa != sb
        {
            // Ready more recently goes first.
            return sb.cmp(&sa);
        }
    }
    let (xa, xb) = (restarts(a), restarts(b));
    if xa != xb {
        return xb.cmp(&xa);
    }
    let created = |p: &Pod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
    created(b).cmp(&created(a))
}

/// Whether a namespace takes new objects: not being deleted and not `Terminating` (what the
/// ServiceAccounts controller and the root CA publisher check before creating).
pub fn namespace_is_active(ns: &k8s_openapi::api::core::v1::Namespace) -> bool {
    ns.metadata.deletion_timestamp.is_none()
        && ns.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Terminating")
}

/// Whether namespace `name` is in the informer's cache and active: where the per-namespace
/// controllers (ServiceAccounts, the root CA publisher) start their sync; a missing or
/// terminating namespace is left alone.
pub fn active_namespace(
    namespaces: &crate::informer::Informer<k8s_openapi::api::core::v1::Namespace>,
    name: &str,
) -> bool {
    namespaces
        .get("", name)
        .is_some_and(|ns| namespace_is_active(&ns))
}

/// Whether an API error is "not found".
pub fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// Merge-patches the status of the object `name`; `Ok(false)` when the object is gone. A
/// controller whose object was deleted during its sync has nothing left to write, as upstream's
/// controllers drop `IsNotFound` from their status updates.
pub async fn merge_patch_status<K>(
    api: &Api<K>,
    name: &str,
    patch: &serde_json::Value,
) -> Result<bool, kube::Error>
where
    K: Clone + DeserializeOwned + Debug,
{
    match api
        .patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
    {
        Ok(_) => Ok(true),
        Err(e) if is_not_found(&e) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Whether an API error is "already exists".
pub fn is_already_exists(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409 && s.reason == "AlreadyExists")
}

/// Whether an API error is a conflict (a stale resourceVersion or an existing name).
pub fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

/// Whether a create failed because the namespace is being deleted (upstream ignores these).
pub fn is_namespace_terminating(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 403 && s.message.contains("being terminated"))
}

/// Resolves an int-or-percent against `total` — upstream's `intstr.GetScaledValueFromIntOrPercent`.
pub fn scaled_value(
    v: Option<&k8s_openapi::apimachinery::pkg::util::intstr::IntOrString>,
    default_percent: i32,
    total: i32,
    round_up: bool,
) -> Result<i32, Error> {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    let percent = match v {
        Some(IntOrString::Int(i)) => return Ok(*i),
        Some(IntOrString::String(s)) => match s.strip_suffix('%').map(str::parse::<i32>) {
            Some(Ok(p)) => p,
            _ => s
                .parse::<i32>()
                .map_err(|_| Error::Invalid(format!("invalid value for IntOrString: {s:?}")))?,
        },
        None => default_percent,
    };
    let product = i64::from(percent) * i64::from(total);
    let value = if round_up {
        (product + 99).div_euclid(100)
    } else {
        product.div_euclid(100)
    };
    i32::try_from(value).map_err(|_| Error::Invalid(format!("scaled value {value} out of range")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    #[test]
    fn percentages_round_up_for_surge_and_down_for_unavailable() {
        let p = IntOrString::String("25%".into());
        assert_eq!(scaled_value(Some(&p), 25, 10, true).ok(), Some(3));
        assert_eq!(scaled_value(Some(&p), 25, 10, false).ok(), Some(2));
        assert_eq!(
            scaled_value(Some(&IntOrString::Int(4)), 25, 10, false).ok(),
            Some(4)
        );
        assert_eq!(scaled_value(None, 25, 1, false).ok(), Some(0));
    }

    #[test]
    fn a_created_pod_deleted_before_the_next_sync_is_not_expected_forever() {
        let e = Expectations::default();
        e.expect_creations("ns/rs", ["a".to_string(), "b".to_string()]);
        // The watch delivered both pods, then someone deleted `a`: the cache no longer has it.
        e.observe("ns/rs", "a", false);
        e.observe("ns/rs", "a", true);
        let cache = |n: &str| {
            if n == "b" {
                Seen::Present
            } else {
                Seen::Absent
            }
        };
        assert!(e.satisfied("ns/rs", cache));
        // Without the watch's word, an absent pod stays expected.
        e.expect_creations("ns/rs", ["c".to_string()]);
        assert!(!e.satisfied("ns/rs", cache));
        // A deletion is observed by the event, or by a deletion timestamp.
        e.forget("ns/rs");
        e.expect_deletions("ns/rs", ["b".to_string()]);
        e.observe("ns/rs", "b", false);
        assert!(!e.satisfied("ns/rs", cache));
        e.observe("ns/rs", "b", true);
        assert!(e.satisfied("ns/rs", |_| Seen::Present));
        // Events for keys with nothing expected change nothing.
        e.observe("ns/other", "x", true);
        assert!(e.satisfied("ns/other", |_| Seen::Absent));
    }

    #[tokio::test]
    async fn slow_start_batches_double_and_stop_at_first_failure() {
        let calls = std::sync::atomic::AtomicUsize::new(0);
        let (ok, err) = slow_start_batch(10, || {
            let n = calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async move { if n == 4 { Err("boom") } else { Ok(n) } }
        })
        .await;
        // Batches 1, 2, 4: the failure is in the third batch, so 7 calls and 6 successes.
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 7);
        assert_eq!(ok.len(), 6);
        assert_eq!(err, Some("boom"));
    }

    #[test]
    fn expressions_select_like_upstream() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
        let sel = LabelSelector {
            match_labels: Some([("app".to_string(), "web".to_string())].into()),
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "tier".into(),
                operator: "NotIn".into(),
                values: Some(vec!["db".into()]),
            }]),
        };
        let l = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>()
        };
        assert!(selector_matches(&sel, Some(&l(&[("app", "web")]))));
        assert!(!selector_matches(
            &sel,
            Some(&l(&[("app", "web"), ("tier", "db")]))
        ));
        assert!(!selector_matches(&sel, None));
    }
}
