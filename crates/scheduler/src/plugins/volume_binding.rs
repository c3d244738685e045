//! VolumeBinding: a pod's PersistentVolumeClaims constrain where it may run, and claims of
//! `WaitForFirstConsumer` classes are bound only once the pod has a node. Mirrors upstream
//! `pkg/scheduler/framework/plugins/volumebinding` (`PreFilter`, `Filter`, `PreBind`) with the
//! binder's `FindPodVolumes`/`BindPodVolumes`, reduced to what tandem's storage offers:
//!
//! - PreFilter: every `persistentVolumeClaim` volume's claim must exist and not be being
//!   deleted (`persistentvolumeclaim "x" not found` / `… is being deleted`), and an unbound
//!   claim must be of a `WaitForFirstConsumer` class (else `pod has unbound immediate
//!   PersistentVolumeClaims`: the binder or a provisioner binds those on their own). Until the
//!   scheduler has listed the claims once, pods are not held back for their claims.
//! - Filter: a bound claim's volume's required node affinity must admit the node (`node(s) had
//!   volume node affinity conflict`); a delayed claim's class's `allowedTopologies` must admit
//!   it, and a claim already given to another node (`volume.kubernetes.io/selected-node`) rules
//!   the node out (`node(s) didn't find available persistent volumes to bind`). Both are
//!   unresolvable: preemption cannot help.
//! - PreBind (in the binding task, before `pods/binding`): each delayed claim gets
//!   `volume.kubernetes.io/selected-node: <node>`, then the pod waits until every one of them is
//!   Bound (by the provisioner and the binder), for at most upstream's 600-second bind timeout;
//!   a claim deleted meanwhile, or whose selected node was reset, fails the binding, which is
//!   retried with back-off.
//!
//! tandem differences: upstream also matches free static volumes against the node and
//! pre-binds one (`FindPodVolumes`' static binding); here the binder chooses among free static
//! volumes once a node is selected (`crate`-external: `tandem_controllers::persistent_volume`).
//! Generic ephemeral volumes are not considered (their claims are the agent's to wait for), and
//! volume capacity (`CSIStorageCapacity`) is not checked.
//!
//! The cache ([`VolumeCache`]) and the plugin are pure; [`watch`] and [`pre_bind`] are the I/O
//! half the scheduling loop runs.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{
    NodeSelectorTerm, PersistentVolume, PersistentVolumeClaim, Pod, TopologySelectorTerm,
};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use tandem_core::local_path::claim_class;
use tandem_core::scheduling::node_affinity::match_node_selector_terms;
use tokio::sync::mpsc;

use crate::cycle_state::CycleState;
use crate::plugin::{Code, FilterPlugin, Plugin, PreFilterPlugin, Rejection, Status};
use crate::plugins::node_affinity::view;
use crate::snapshot::{NodeInfo, Snapshot};

/// Upstream `ErrReasonNodeConflict`.
pub const ERR_REASON_NODE_CONFLICT: &str = "node(s) had volume node affinity conflict";
/// Upstream `ErrReasonBindConflict`.
pub const ERR_REASON_BIND_CONFLICT: &str =
    "node(s) didn't find available persistent volumes to bind";
/// Upstream's PreFilter message for claims the scheduler must not wait for.
pub const ERR_UNBOUND_IMMEDIATE: &str = "pod has unbound immediate PersistentVolumeClaims";
/// The annotation naming the node chosen for a delayed claim.
pub const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// Upstream's default `bindTimeoutSeconds`.
pub const BIND_TIMEOUT: Duration = Duration::from_secs(600);
/// How often the binding task looks at the claims it waits for.
const POLL: Duration = Duration::from_secs(1);

type ClaimKey = (String, String);

/// The claims, volumes and classes the scheduler knows, from its watches.
#[derive(Debug, Default, Clone)]
pub struct VolumeCache {
    claims: HashMap<ClaimKey, Arc<PersistentVolumeClaim>>,
    volumes: HashMap<String, Arc<PersistentVolume>>,
    classes: HashMap<String, Arc<StorageClass>>,
    claims_relist: Option<HashMap<ClaimKey, Arc<PersistentVolumeClaim>>>,
    volumes_relist: Option<HashMap<String, Arc<PersistentVolume>>>,
    classes_relist: Option<HashMap<String, Arc<StorageClass>>>,
    claims_synced: bool,
}

/// One event of the storage watches.
#[derive(Debug)]
pub enum StorageEvent {
    Claim(Box<watcher::Event<PersistentVolumeClaim>>),
    Volume(Box<watcher::Event<PersistentVolume>>),
    Class(Box<watcher::Event<StorageClass>>),
}

fn claim_key(pvc: &PersistentVolumeClaim) -> ClaimKey {
    (
        pvc.metadata.namespace.clone().unwrap_or_default(),
        pvc.metadata.name.clone().unwrap_or_default(),
    )
}

fn name_key<K: kube::Resource>(obj: &K) -> String {
    obj.meta().name.clone().unwrap_or_default()
}

/// Applies one watch event to `map` (with `relist` collecting a fresh list); returns whether
/// the map changed in a way that may let pods fit (anything but the start of a relist).
fn apply<K, Q: std::hash::Hash + Eq>(
    map: &mut HashMap<Q, Arc<K>>,
    relist: &mut Option<HashMap<Q, Arc<K>>>,
    event: watcher::Event<K>,
    key: impl Fn(&K) -> Q,
) -> bool {
    match event {
        watcher::Event::Apply(o) => {
            map.insert(key(&o), Arc::new(o));
            true
        }
        watcher::Event::Delete(o) => {
            map.remove(&key(&o));
            true
        }
        watcher::Event::Init => {
            *relist = Some(HashMap::new());
            false
        }
        watcher::Event::InitApply(o) => {
            relist
                .get_or_insert_with(HashMap::new)
                .insert(key(&o), Arc::new(o));
            false
        }
        watcher::Event::InitDone => {
            *map = relist.take().unwrap_or_default();
            true
        }
    }
}

impl VolumeCache {
    /// Applies a watch event; `true` when unschedulable pods should be tried again.
    pub fn apply(&mut self, event: StorageEvent) -> bool {
        match event {
            StorageEvent::Claim(e) => {
                if matches!(*e, watcher::Event::InitDone) {
                    self.claims_synced = true;
                }
                apply(&mut self.claims, &mut self.claims_relist, *e, claim_key)
            }
            StorageEvent::Volume(e) => {
                apply(&mut self.volumes, &mut self.volumes_relist, *e, name_key)
            }
            StorageEvent::Class(e) => {
                apply(&mut self.classes, &mut self.classes_relist, *e, name_key)
            }
        }
    }

    /// A claim by namespace and name.
    pub fn claim(&self, namespace: &str, name: &str) -> Option<&Arc<PersistentVolumeClaim>> {
        self.claims.get(&(namespace.to_string(), name.to_string()))
    }
}

/// An unbound claim of a `WaitForFirstConsumer` class.
#[derive(Debug, Clone, PartialEq)]
pub struct DelayedClaim {
    pub namespace: String,
    pub name: String,
    /// The class's `allowedTopologies` (empty: everywhere).
    pub topologies: Vec<TopologySelectorTerm>,
    /// The node already selected for the claim.
    pub selected: Option<String>,
}

/// What this plugin knows of a pod with claims, once per scheduling cycle.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PreState {
    /// Why no node can take the pod (PreFilter's rejection), if so.
    pub failure: Option<String>,
    /// The required node affinity terms of each bound claim's volume.
    pub bound: Vec<Vec<NodeSelectorTerm>>,
    pub delayed: Vec<DelayedClaim>,
}

/// PreFilter: `None` for a pod without claims (or before the claims are listed).
pub fn pre_filter(pod: &Pod, namespace: &str, cache: &VolumeCache) -> Option<PreState> {
    let names: Vec<&str> = pod
        .spec
        .as_ref()?
        .volumes
        .iter()
        .flatten()
        .filter_map(|v| v.persistent_volume_claim.as_ref())
        .map(|c| c.claim_name.as_str())
        .collect();
    if names.is_empty() || !cache.claims_synced {
        return None;
    }
    let mut state = PreState::default();
    for name in names {
        let Some(pvc) = cache.claim(namespace, name) else {
            state.failure = Some(format!("persistentvolumeclaim \"{name}\" not found"));
            break;
        };
        if pvc.metadata.deletion_timestamp.is_some() {
            state.failure = Some(format!("persistentvolumeclaim \"{name}\" is being deleted"));
            break;
        }
        let volume = pvc
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.as_deref())
            .filter(|v| !v.is_empty());
        if let Some(volume) = volume {
            let terms = cache
                .volumes
                .get(volume)
                .and_then(|pv| pv.spec.as_ref())
                .and_then(|s| s.node_affinity.as_ref())
                .and_then(|a| a.required.as_ref())
                .map(|r| r.node_selector_terms.clone());
            if let Some(terms) = terms {
                state.bound.push(terms);
            }
            continue;
        }
        let class = claim_class(pvc).and_then(|c| cache.classes.get(c));
        match class {
            Some(c) if c.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer") => {
                state.delayed.push(DelayedClaim {
                    namespace: namespace.to_string(),
                    name: name.to_string(),
                    topologies: c.allowed_topologies.clone().unwrap_or_default(),
                    selected: pvc
                        .metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get(SELECTED_NODE))
                        .cloned(),
                });
            }
            _ => {
                state.failure = Some(ERR_UNBOUND_IMMEDIATE.to_string());
                break;
            }
        }
    }
    Some(state)
}

/// Whether the node's labels fit the class's `allowedTopologies` (any term; all of a term's
/// expressions), as upstream's `volumeutil.CheckNodeAffinity` over topology terms.
pub fn topologies_match(terms: &[TopologySelectorTerm], node: &NodeInfo) -> bool {
    terms.is_empty()
        || terms.iter().any(|t| {
            t.match_label_expressions.iter().flatten().all(|e| {
                node.labels
                    .get(&e.key)
                    .is_some_and(|v| e.values.iter().any(|x| x == v))
            })
        })
}

/// The VolumeBinding plugin (pre-filter, filter; its PreBind is [`pre_bind`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct VolumeBinding;

/// The words of a PreFilter rejection.
fn explain_pre_filter(cs: &CycleState<'_>, _: &NodeInfo, _: usize) -> Vec<String> {
    cs.read::<PreState>()
        .and_then(|s| s.failure.clone())
        .into_iter()
        .collect()
}

impl Plugin for VolumeBinding {
    fn name(&self) -> &'static str {
        "VolumeBinding"
    }

    fn as_pre_filter(self: Arc<Self>) -> Option<Arc<dyn PreFilterPlugin>> {
        Some(self)
    }

    fn as_filter(self: Arc<Self>) -> Option<Arc<dyn FilterPlugin>> {
        Some(self)
    }
}

impl PreFilterPlugin for VolumeBinding {
    /// A pod without claims (or before the claims are listed) skips the filter.
    fn pre_filter(&self, cs: &mut CycleState<'_>, snapshot: &Snapshot) -> Status {
        match pre_filter(cs.pod, cs.namespace, snapshot.volumes()) {
            Some(state) => {
                cs.write(state);
                Status::Success
            }
            None => Status::Skip,
        }
    }
}

impl FilterPlugin for VolumeBinding {
    fn filter(&self, cs: &CycleState<'_>, node: &NodeInfo) -> Result<(), Rejection> {
        let Some(state) = cs.read::<PreState>() else {
            return Ok(());
        };
        if state.failure.is_some() {
            // The pod's claims rule out every node: preemption cannot help.
            return Err(Rejection::deferred(
                Code::UnschedulableAndUnresolvable,
                explain_pre_filter,
                0,
            ));
        }
        for terms in &state.bound {
            if !match_node_selector_terms(terms, view(node)) {
                return Err(Rejection::new(
                    ERR_REASON_NODE_CONFLICT,
                    Code::UnschedulableAndUnresolvable,
                ));
            }
        }
        for claim in &state.delayed {
            let elsewhere = claim.selected.as_deref().is_some_and(|s| s != node.name);
            if elsewhere || !topologies_match(&claim.topologies, node) {
                return Err(Rejection::new(
                    ERR_REASON_BIND_CONFLICT,
                    Code::UnschedulableAndUnresolvable,
                ));
            }
        }
        Ok(())
    }
}

/// The delayed claims of `pod` the binding task must give a node to and wait for.
pub fn claims_to_bind(cache: &VolumeCache, pod: &Pod) -> Vec<DelayedClaim> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
    pre_filter(pod, ns, cache)
        .map(|s| s.delayed)
        .unwrap_or_default()
}

/// Starts the claim, volume and class watches, sending their events through `tx`.
pub fn watch<T: Send + 'static>(
    client: kube::Client,
    tx: mpsc::UnboundedSender<T>,
    wrap: fn(StorageEvent) -> T,
) -> Vec<tokio::task::JoinHandle<()>> {
    fn one<K, T: Send + 'static>(
        api: Api<K>,
        tx: mpsc::UnboundedSender<T>,
        wrap: impl Fn(watcher::Event<K>) -> T + Send + 'static,
    ) -> tokio::task::JoinHandle<()>
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
        K::DynamicType: Default,
    {
        tokio::spawn(async move {
            let mut stream = watcher(api, watcher::Config::default())
                .default_backoff()
                .boxed();
            while let Some(item) = stream.next().await {
                match item {
                    Ok(ev) => {
                        let ev = ev.modify(|o| o.meta_mut().managed_fields = None);
                        if tx.send(wrap(ev)).is_err() {
                            return;
                        }
                    }
                    // The type may not be served (yet): the back-off paces the retries.
                    Err(e) => tracing::debug!(error = %e, "scheduler storage watch error"),
                }
            }
        })
    }
    vec![
        one(
            Api::<PersistentVolumeClaim>::all(client.clone()),
            tx.clone(),
            move |e| wrap(StorageEvent::Claim(Box::new(e))),
        ),
        one(
            Api::<PersistentVolume>::all(client.clone()),
            tx.clone(),
            move |e| wrap(StorageEvent::Volume(Box::new(e))),
        ),
        one(Api::<StorageClass>::all(client), tx, move |e| {
            wrap(StorageEvent::Class(Box::new(e)))
        }),
    ]
}

fn pre_bind_error(message: &str) -> kube::Error {
    kube::Error::Api(
        kube::core::Status::failure(
            &format!("running PreBind plugin \"VolumeBinding\": {message}"),
            "InternalError",
        )
        .with_code(500)
        .boxed(),
    )
}

/// PreBind: selects `node` for each delayed claim, then waits until all are Bound (at most
/// [`BIND_TIMEOUT`]).
pub async fn pre_bind(
    client: &kube::Client,
    claims: &[DelayedClaim],
    node: &str,
) -> Result<(), kube::Error> {
    if claims.is_empty() {
        return Ok(());
    }
    let api = |ns: &str| Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns);
    for c in claims
        .iter()
        .filter(|c| c.selected.as_deref() != Some(node))
    {
        let patch = json!({"metadata": {"annotations": {SELECTED_NODE: node}}});
        api(&c.namespace)
            .patch(&c.name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map_err(|e| pre_bind_error(&format!("binding volumes: {e}")))?;
    }
    let deadline = tokio::time::Instant::now() + BIND_TIMEOUT;
    loop {
        let mut all_bound = true;
        for c in claims {
            let pvc = api(&c.namespace)
                .get(&c.name)
                .await
                .map_err(|e| pre_bind_error(&format!("binding volumes: {e}")))?;
            if pvc.metadata.deletion_timestamp.is_some() {
                return Err(pre_bind_error(&format!(
                    "binding volumes: persistentvolumeclaim \"{}\" is being deleted",
                    c.name
                )));
            }
            let selected = pvc
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(SELECTED_NODE));
            if selected.map(String::as_str) != Some(node) {
                return Err(pre_bind_error(&format!(
                    "binding volumes: selectedNode annotation reset for PVC \"{}\"",
                    c.name
                )));
            }
            let bound = pvc.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
                && pvc
                    .spec
                    .as_ref()
                    .and_then(|s| s.volume_name.as_deref())
                    .is_some();
            all_bound &= bound;
        }
        if all_bound {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(pre_bind_error(
                "binding volumes: timed out waiting for the condition",
            ));
        }
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use k8s_openapi::api::core::v1::Node;

    use super::*;
    use crate::snapshot::Snapshot;

    fn claim(
        name: &str,
        class: &str,
        volume: Option<&str>,
        selected: Option<&str>,
    ) -> StorageEvent {
        let mut c = json!({"metadata": {"name": name, "namespace": "default"},
                           "spec": {"storageClassName": class}});
        if let Some(v) = volume {
            c["spec"]["volumeName"] = json!(v);
        }
        if let Some(n) = selected {
            c["metadata"]["annotations"] = json!({ SELECTED_NODE: n });
        }
        StorageEvent::Claim(Box::new(watcher::Event::Apply(
            serde_json::from_value(c).unwrap(),
        )))
    }

    fn class(name: &str, mode: &str, zones: Option<&[&str]>) -> StorageEvent {
        let mut c = json!({"metadata": {"name": name}, "provisioner": "tandem.io/local-path",
                           "volumeBindingMode": mode});
        if let Some(z) = zones {
            c["allowedTopologies"] =
                json!([{"matchLabelExpressions": [{"key": "zone", "values": z}]}]);
        }
        StorageEvent::Class(Box::new(watcher::Event::Apply(
            serde_json::from_value(c).unwrap(),
        )))
    }

    fn volume_on(name: &str, host: &str) -> StorageEvent {
        let v = json!({"metadata": {"name": name}, "spec": {"nodeAffinity": {"required": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [host]}]}]}}}});
        StorageEvent::Volume(Box::new(watcher::Event::Apply(
            serde_json::from_value(v).unwrap(),
        )))
    }

    fn synced() -> VolumeCache {
        let mut c = VolumeCache::default();
        c.apply(StorageEvent::Claim(Box::new(watcher::Event::Init)));
        c.apply(StorageEvent::Claim(Box::new(watcher::Event::InitDone)));
        c
    }

    fn pod_using(claims: &[&str]) -> Pod {
        let volumes: Vec<_> = claims
            .iter()
            .map(|c| json!({"name": c, "persistentVolumeClaim": {"claimName": c}}))
            .collect();
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "busybox"}], "volumes": volumes}
        }))
        .unwrap()
    }

    fn snapshot(cache: VolumeCache, nodes: &[(&str, &str)]) -> Snapshot {
        let mut s = Snapshot::new();
        for (name, zone) in nodes {
            let n: Node = serde_json::from_value(json!({
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "zone": zone}},
                "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}
            }))
            .unwrap();
            s.upsert_node(&n);
        }
        *s.volumes_mut() = cache;
        s
    }

    fn verdicts(s: &Snapshot, pod: &Pod) -> Vec<Result<(), Vec<String>>> {
        let mut cs = CycleState::new(pod);
        let _ = PreFilterPlugin::pre_filter(&VolumeBinding, &mut cs, s);
        s.nodes()
            .iter()
            .map(|n| VolumeBinding.filter(&cs, n).map_err(|r| r.reasons(&cs, n)))
            .collect()
    }

    #[test]
    fn pods_without_claims_or_before_the_claims_are_listed_are_not_constrained() {
        let pod = pod_using(&["data"]);
        assert_eq!(pre_filter(&pod, "default", &VolumeCache::default()), None);
        assert_eq!(pre_filter(&pod_using(&[]), "default", &synced()), None);
    }

    #[test]
    fn missing_claims_and_unbound_immediate_claims_rule_out_every_node() {
        let mut cache = synced();
        let s = snapshot(cache.clone(), &[("a", "1"), ("b", "1")]);
        let v = verdicts(&s, &pod_using(&["data"]));
        assert_eq!(
            v,
            vec![Err(vec!["persistentvolumeclaim \"data\" not found".to_string()]); 2]
        );
        cache.apply(class("fast", "Immediate", None));
        cache.apply(claim("data", "fast", None, None));
        let s = snapshot(cache, &[("a", "1")]);
        assert_eq!(
            verdicts(&s, &pod_using(&["data"])),
            vec![Err(vec![ERR_UNBOUND_IMMEDIATE.to_string()])]
        );
    }

    #[test]
    fn bound_claims_follow_their_volume_node_affinity() {
        let mut cache = synced();
        cache.apply(claim("data", "local-path", Some("pvc-1"), None));
        cache.apply(volume_on("pvc-1", "b"));
        let s = snapshot(cache, &[("a", "1"), ("b", "1")]);
        assert_eq!(
            verdicts(&s, &pod_using(&["data"])),
            vec![Err(vec![ERR_REASON_NODE_CONFLICT.to_string()]), Ok(())]
        );
    }

    #[test]
    fn delayed_claims_follow_allowed_topologies_and_an_earlier_selection() {
        let mut cache = synced();
        cache.apply(class("zonal", "WaitForFirstConsumer", Some(&["2"])));
        cache.apply(claim("data", "zonal", None, None));
        let s = snapshot(cache.clone(), &[("a", "1"), ("b", "2"), ("c", "2")]);
        let pod = pod_using(&["data"]);
        assert_eq!(
            verdicts(&s, &pod),
            vec![
                Err(vec![ERR_REASON_BIND_CONFLICT.to_string()]),
                Ok(()),
                Ok(())
            ]
        );
        assert_eq!(claims_to_bind(s.volumes(), &pod).len(), 1);
        cache.apply(claim("data", "zonal", None, Some("c")));
        let s = snapshot(cache, &[("a", "1"), ("b", "2"), ("c", "2")]);
        assert_eq!(
            verdicts(&s, &pod),
            vec![
                Err(vec![ERR_REASON_BIND_CONFLICT.to_string()]),
                Err(vec![ERR_REASON_BIND_CONFLICT.to_string()]),
                Ok(())
            ]
        );
    }

    #[test]
    fn a_relist_replaces_what_was_known() {
        let mut cache = synced();
        cache.apply(claim("old", "x", Some("v"), None));
        cache.apply(StorageEvent::Claim(Box::new(watcher::Event::Init)));
        assert!(
            cache.claim("default", "old").is_some(),
            "kept until the relist ends"
        );
        cache.apply(StorageEvent::Claim(Box::new(watcher::Event::InitDone)));
        assert!(cache.claim("default", "old").is_none());
    }
}
