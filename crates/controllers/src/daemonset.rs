//! The DaemonSet controller — upstream's `pkg/controller/daemon`: one pod per eligible node.
//!
//! A node is eligible when the pod template's `nodeName`, `nodeSelector` and required node
//! affinity select it and the pod (with the tolerations every daemon pod gets, see
//! [`add_daemon_tolerations`]) tolerates its NoSchedule and NoExecute taints. Unschedulable nodes
//! are not skipped: daemon pods tolerate `node.kubernetes.io/unschedulable`. Pods are created with
//! a required node affinity `metadata.name In [<node>]` (upstream's
//! `ReplaceDaemonSetPodNodeNameNodeAffinity`), so the scheduler binds them. Pods follow nodes as
//! they come and go; RollingUpdate replaces pods of an older template within `maxUnavailable`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{
    Affinity, Node, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod,
    PodSpec, Taint, Toleration,
};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use tandem_core::scheduling::node_affinity::{NodeView, RequiredNodeAffinity};
use tandem_core::scheduling::taints::{
    NO_EXECUTE, does_not_schedule, find_matching_untolerated_taint,
};

use crate::controller_utils::{
    self as cu, Error, Expectations, SyncResult, controller_of, controller_ref, pod_availability,
    pod_is_ready,
};
use crate::informer::{Informer, split_key};
use crate::replicaset::{BURST_REPLICAS, pod_from_template};
use crate::workqueue::WorkQueue;

/// Label on daemon pods naming the template revision they were created from.
pub const CONTROLLER_REVISION_HASH: &str = "controller-revision-hash";

struct Ctx {
    client: kube::Client,
    daemonsets: Informer<DaemonSet>,
    nodes: Informer<Node>,
    pods: Informer<Pod>,
    expectations: Expectations,
    queue: WorkQueue,
}

/// Runs the DaemonSet controller until the runtime stops.
pub async fn run(client: kube::Client, pods: Informer<Pod>, nodes: Informer<Node>) {
    let daemonsets = Informer::<DaemonSet>::start(client.clone());
    let ctx = Arc::new(Ctx {
        client,
        daemonsets,
        nodes,
        pods,
        expectations: Expectations::default(),
        queue: WorkQueue::named("daemonset"),
    });
    let mut ds_events = ctx.daemonsets.subscribe();
    let mut node_events = ctx.nodes.subscribe();
    let mut pod_events = ctx.pods.subscribe();
    crate::informer::wait_for_cache_sync(&[&ctx.daemonsets, &ctx.nodes, &ctx.pods]).await;
    ctx.queue.add_keys(&ctx.daemonsets.list());
    ctx.queue
        .run_workers_for(2, "daemonset", &ctx, |ctx, key| async move {
            sync(&ctx, &key).await
        });
    loop {
        tokio::select! {
            Some(change) = ds_events.recv() => {
                ctx.queue.add_keys(change.objects());
            }
            Some(change) = node_events.recv() => {
                // Heartbeats change node status every few seconds; only what decides
                // eligibility (labels, taints, existence) requeues every DaemonSet.
                let relevant = match (&change.old, &change.new) {
                    (Some(o), Some(n)) => o.metadata.labels != n.metadata.labels
                        || o.spec.as_ref().map(|s| &s.taints) != n.spec.as_ref().map(|s| &s.taints),
                    _ => true,
                };
                if relevant {
                    ctx.queue.add_keys(&ctx.daemonsets.list());
                }
            }
            Some(change) = pod_events.recv() => {
                ctx.queue.add_controller_keys(change.objects(), "DaemonSet");
            }
            else => return,
        }
    }
}

/// The tolerations upstream's `AddOrUpdateDaemonPodTolerations` gives every daemon pod.
pub fn add_daemon_tolerations(spec: &mut PodSpec) {
    let mut wanted = vec![
        ("node.kubernetes.io/not-ready", "NoExecute"),
        ("node.kubernetes.io/unreachable", "NoExecute"),
        ("node.kubernetes.io/disk-pressure", "NoSchedule"),
        ("node.kubernetes.io/memory-pressure", "NoSchedule"),
        ("node.kubernetes.io/pid-pressure", "NoSchedule"),
        ("node.kubernetes.io/unschedulable", "NoSchedule"),
    ];
    if spec.host_network == Some(true) {
        wanted.push(("node.kubernetes.io/network-unavailable", "NoSchedule"));
    }
    let tolerations = spec.tolerations.get_or_insert_default();
    for (key, effect) in wanted {
        if tolerations
            .iter()
            .any(|t| t.key.as_deref() == Some(key) && t.effect.as_deref() == Some(effect))
        {
            continue;
        }
        tolerations.push(Toleration {
            key: Some(key.into()),
            operator: Some("Exists".into()),
            effect: Some(effect.into()),
            ..Toleration::default()
        });
    }
}

/// Upstream's `NodeShouldRunDaemonPod`: (should run, should continue running). The pod must fit
/// the node's name, its node selector and required node affinity
/// ([`RequiredNodeAffinity`]) and tolerate the node's NoSchedule and NoExecute taints; a pod
/// already there keeps running while it tolerates the NoExecute ones.
pub fn node_should_run(spec: &PodSpec, node: &Node) -> (bool, bool) {
    let view = NodeView::of(node);
    if spec
        .node_name
        .as_deref()
        .is_some_and(|n| !n.is_empty() && n != view.name)
    {
        return (false, false);
    }
    if !RequiredNodeAffinity::of(Some(spec)).matches(view) {
        return (false, false);
    }
    let mut spec = spec.clone();
    add_daemon_tolerations(&mut spec);
    let tolerations = spec.tolerations.unwrap_or_default();
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or_default();
    if find_matching_untolerated_taint(taints, &tolerations, does_not_schedule).is_none() {
        return (true, true);
    }
    let no_execute = |t: &Taint| t.effect == NO_EXECUTE;
    let keeps_running = find_matching_untolerated_taint(taints, &tolerations, no_execute).is_none();
    (false, keeps_running)
}

/// The node a daemon pod is for: its `nodeName`, or the name its node affinity pins.
fn target_node(pod: &Pod) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    if let Some(n) = spec.node_name.as_ref().filter(|n| !n.is_empty()) {
        return Some(n.clone());
    }
    spec.affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?
        .node_selector_terms
        .iter()
        .flat_map(|t| t.match_fields.iter().flatten())
        .find(|f| f.key == "metadata.name" && f.operator == "In")
        .and_then(|f| f.values.as_ref()?.first().cloned())
}

/// Pins `spec` to `node` — upstream's `ReplaceDaemonSetPodNodeNameNodeAffinity`.
fn pin_to_node(spec: &mut PodSpec, node: &str) {
    let affinity = spec.affinity.get_or_insert_with(Affinity::default);
    let na = affinity
        .node_affinity
        .get_or_insert_with(NodeAffinity::default);
    na.required_during_scheduling_ignored_during_execution = Some(NodeSelector {
        node_selector_terms: vec![NodeSelectorTerm {
            match_fields: Some(vec![NodeSelectorRequirement {
                key: "metadata.name".into(),
                operator: "In".into(),
                values: Some(vec![node.to_string()]),
            }]),
            match_expressions: None,
        }],
    });
}

fn pod_phase(p: &Pod) -> Option<&str> {
    p.status.as_ref().and_then(|s| s.phase.as_deref())
}

async fn sync(ctx: &Ctx, key: &str) -> SyncResult {
    let (ns, name) = split_key(key);
    let Some(ds) = ctx.daemonsets.get(ns, name) else {
        ctx.expectations.forget(key);
        return Ok(None);
    };
    let uid = ds.uid().unwrap_or_default();
    let spec = ds.spec.clone().unwrap_or_default();
    let template = spec.template.clone();
    let pod_spec = template.spec.clone().unwrap_or_default();
    let collision = ds.status.as_ref().and_then(|s| s.collision_count);
    let hash = crate::deployment::compute_hash(&template, collision);
    let min_ready = spec.min_ready_seconds.unwrap_or(0);
    let now = cu::now();

    // Pods of this DaemonSet, grouped by the node they are for.
    let mut by_node: BTreeMap<String, Vec<Arc<Pod>>> = BTreeMap::new();
    for p in ctx.pods.list_namespace(ns) {
        if p.metadata.deletion_timestamp.is_some()
            || controller_of(&p.metadata).is_none_or(|r| r.uid != uid)
        {
            continue;
        }
        by_node
            .entry(target_node(&p).unwrap_or_default())
            .or_default()
            .push(p);
    }
    for pods in by_node.values_mut() {
        pods.sort_by_key(|p| p.metadata.creation_timestamp.as_ref().map(|t| t.0));
    }
    let nodes: HashMap<String, Arc<Node>> = ctx
        .nodes
        .list()
        .into_iter()
        .map(|n| (n.name_any(), n))
        .collect();

    let mut to_create: Vec<String> = Vec::new();
    let mut to_delete: Vec<Arc<Pod>> = Vec::new();
    let (mut desired, mut current, mut misscheduled, mut ready, mut available, mut updated) =
        (0, 0, 0, 0, 0, 0);
    let mut unavailable_nodes = 0;
    let mut old_pods: Vec<(Arc<Pod>, bool)> = Vec::new();
    let mut recheck: Option<Duration> = None;
    for (node_name, node) in &nodes {
        let (should_run, should_continue) = node_should_run(&pod_spec, node);
        let pods = by_node.remove(node_name).unwrap_or_default();
        if should_run {
            desired += 1;
        }
        if pods.is_empty() {
            if should_run {
                to_create.push(node_name.clone());
                unavailable_nodes += 1;
            }
            continue;
        }
        if !should_continue {
            to_delete.extend(pods);
            continue;
        }
        if should_run {
            current += 1;
        } else {
            misscheduled += 1;
        }
        // Failed daemon pods are deleted and replaced; extra pods beyond the oldest go.
        let (failed, running): (Vec<_>, Vec<_>) = pods
            .into_iter()
            .partition(|p| pod_phase(p) == Some("Failed"));
        to_delete.extend(failed);
        let mut running = running.into_iter();
        let Some(pod) = running.next() else {
            if should_run {
                unavailable_nodes += 1;
            }
            continue;
        };
        to_delete.extend(running);
        let is_ready = pod_is_ready(&pod);
        let (is_available, wait) = pod_availability(&pod, min_ready, now);
        if let Some(w) = wait {
            recheck = Some(recheck.map_or(w, |r| r.min(w)));
        }
        ready += i32::from(is_ready);
        available += i32::from(is_available);
        let is_updated = pod.labels().get(CONTROLLER_REVISION_HASH) == Some(&hash);
        updated += i32::from(is_updated);
        if should_run && !is_available {
            unavailable_nodes += 1;
        }
        if !is_updated {
            old_pods.push((pod, is_available));
        }
    }
    // Pods for nodes that no longer exist.
    to_delete.extend(by_node.into_values().flatten());

    // Rolling update: replace old pods, unavailable ones first, within maxUnavailable.
    let strategy = spec.update_strategy.clone().unwrap_or_default();
    if strategy.type_.as_deref() != Some("OnDelete") {
        let ru = strategy.rolling_update.unwrap_or_default();
        let mut max_unavailable = cu::scaled_value(ru.max_unavailable.as_ref(), 0, desired, true)
            .map_err(|e| Error::Invalid(e.to_string()))?;
        if ru.max_unavailable.is_none() {
            max_unavailable = 1;
        }
        let max_unavailable = max_unavailable.max(1);
        let mut budget = max_unavailable - unavailable_nodes;
        for (pod, is_available) in old_pods {
            if !is_available {
                to_delete.push(pod);
            } else if budget > 0 {
                budget -= 1;
                to_delete.push(pod);
            }
        }
    }

    let satisfied = ctx
        .expectations
        .satisfied(key, |n| cu::seen_in(&ctx.pods, ns, n));
    let mut result: SyncResult = Ok(recheck.map(|d| d + Duration::from_millis(100)));
    if satisfied && ds.metadata.deletion_timestamp.is_none() {
        result = manage(ctx, key, &ds, &uid, &hash, to_create, to_delete)
            .await
            .map(|more| more.or(result.ok().flatten()));
    }

    let status = json!({ "status": {
        "desiredNumberScheduled": desired,
        "currentNumberScheduled": current,
        "numberMisscheduled": misscheduled,
        "numberReady": ready,
        "numberAvailable": available,
        "numberUnavailable": (desired - available).max(0),
        "updatedNumberScheduled": updated,
        "observedGeneration": ds.metadata.generation,
    }});
    let old = ds.status.clone().unwrap_or_default();
    let changed = old.desired_number_scheduled != desired
        || old.current_number_scheduled != current
        || old.number_misscheduled != misscheduled
        || old.number_ready != ready
        || old.number_available.unwrap_or(0) != available
        || old.number_unavailable.unwrap_or(0) != (desired - available).max(0)
        || old.updated_number_scheduled.unwrap_or(0) != updated
        || old.observed_generation != ds.metadata.generation;
    if changed {
        let api: Api<DaemonSet> = Api::namespaced(ctx.client.clone(), ns);
        cu::merge_patch_status(&api, name, &status).await?;
    }
    result
}

/// Creates pods for `nodes` (slow-start batches) and deletes `victims`.
async fn manage(
    ctx: &Ctx,
    key: &str,
    ds: &DaemonSet,
    uid: &str,
    hash: &str,
    mut nodes: Vec<String>,
    victims: Vec<Arc<Pod>>,
) -> SyncResult {
    let ns = ds.namespace().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let mut requeue = None;
    if !victims.is_empty() {
        let names: Vec<String> = victims.iter().map(|p| p.name_any()).collect();
        ctx.expectations.expect_deletions(key, names.clone());
        for r in futures::future::join_all(names.iter().map(|n| {
            let api = api.clone();
            async move { api.delete(n, &DeleteParams::default()).await }
        }))
        .await
        {
            match r {
                Ok(_) => {}
                Err(e) if cu::is_not_found(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    if nodes.len() > BURST_REPLICAS {
        nodes.truncate(BURST_REPLICAS);
        requeue = Some(Duration::ZERO);
    }
    if nodes.is_empty() {
        return Ok(requeue);
    }
    let template = ds
        .spec
        .as_ref()
        .map(|s| s.template.clone())
        .unwrap_or_default();
    let mut base = pod_from_template(
        &template,
        &ds.name_any(),
        controller_ref("apps/v1", "DaemonSet", &ds.name_any(), uid),
    );
    base.metadata
        .labels
        .get_or_insert_default()
        .insert(CONTROLLER_REVISION_HASH.into(), hash.into());
    if let Some(spec) = base.spec.as_mut() {
        add_daemon_tolerations(spec);
    }
    let mut queue = nodes.into_iter();
    let (created, err) = cu::slow_start_batch(queue.len(), || {
        let mut pod = base.clone();
        let node = queue.next().unwrap_or_default();
        if let Some(spec) = pod.spec.as_mut() {
            pin_to_node(spec, &node);
        }
        let api = api.clone();
        async move { api.create(&PostParams::default(), &pod).await }
    })
    .await;
    ctx.expectations
        .expect_creations(key, created.into_iter().map(|p| p.name_any()));
    match err {
        Some(e) if cu::is_namespace_terminating(&e) => Ok(None),
        Some(e) => Err(e.into()),
        None => Ok(requeue),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(labels: &[(&str, &str)], taints: Vec<Taint>) -> Node {
        let mut n = Node::default();
        n.metadata.name = Some("n1".into());
        n.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        n.spec = Some(k8s_openapi::api::core::v1::NodeSpec {
            taints: Some(taints),
            ..Default::default()
        });
        n
    }

    fn taint(key: &str, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            effect: effect.into(),
            ..Taint::default()
        }
    }

    #[test]
    fn os_selector_excludes_windows_nodes() {
        let spec = PodSpec {
            node_selector: Some([("kubernetes.io/os".into(), "linux".into())].into()),
            ..PodSpec::default()
        };
        assert_eq!(
            node_should_run(&spec, &node(&[("kubernetes.io/os", "windows")], vec![])),
            (false, false)
        );
        assert_eq!(
            node_should_run(&spec, &node(&[("kubernetes.io/os", "linux")], vec![])),
            (true, true)
        );
    }

    #[test]
    fn unschedulable_nodes_still_run_daemon_pods_but_other_taints_need_tolerations() {
        let spec = PodSpec::default();
        assert_eq!(
            node_should_run(
                &spec,
                &node(
                    &[],
                    vec![taint("node.kubernetes.io/unschedulable", "NoSchedule")]
                )
            ),
            (true, true)
        );
        assert_eq!(
            node_should_run(&spec, &node(&[], vec![taint("dedicated", "NoSchedule")])),
            (false, true)
        );
        assert_eq!(
            node_should_run(&spec, &node(&[], vec![taint("dedicated", "NoExecute")])),
            (false, false)
        );
        let tolerant = PodSpec {
            tolerations: Some(vec![Toleration {
                operator: Some("Exists".into()),
                ..Toleration::default()
            }]),
            ..PodSpec::default()
        };
        assert_eq!(
            node_should_run(&tolerant, &node(&[], vec![taint("dedicated", "NoExecute")])),
            (true, true)
        );
    }
}
