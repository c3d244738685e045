//! The node lifecycle controller — upstream's `pkg/controller/nodelifecycle` — with the taint
//! eviction controller (`pkg/controller/tainteviction`) folded in.
//!
//! Health: a node is heard from when its Lease (`kube-node-lease/<node>`) is renewed or its
//! `Ready` condition gets a new heartbeat. A node not heard from for `node_monitor_grace_period`
//! (40 s upstream) has `Ready`, `MemoryPressure`, `DiskPressure` and `PIDPressure` set to
//! `Unknown` with reason `NodeStatusUnknown` (`tryUpdateNodeHealth`). The time a node was last
//! heard from is taken from this controller's clock when the change is observed, never from the
//! timestamps in the objects, so clock skew between nodes and controller does not matter.
//!
//! Taints (`doNoScheduleTaintingPass`, `doNoExecuteTaintingPass`): `Ready=Unknown` gives
//! `node.kubernetes.io/unreachable`, `Ready=False` gives `node.kubernetes.io/not-ready`, each with
//! effects `NoSchedule` and `NoExecute` and a `timeAdded`; the other pair is removed, and a node
//! whose `Ready` is `True` again loses both (`SwapNodeControllerTaint`).
//!
//! Eviction (`tainteviction.processPodOnNode`): a pod bound to a node with `NoExecute` taints is
//! deleted at once when it does not tolerate all of them, and otherwise when the shortest
//! `tolerationSeconds` of the tolerations that match has passed since the taint's `timeAdded`
//! (a toleration without `tolerationSeconds` tolerates forever). Pods get the 300 s
//! not-ready/unreachable tolerations from the DefaultTolerationSeconds admission plugin.
//!
//! Not done: upstream's zone disruption modes (no evictions when a whole zone is down) and its
//! eviction rate limits; marking the pods of an unreachable node NotReady (`MarkPodsNotReady`).

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, NodeCondition, Pod, Taint, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams, Preconditions};
use tandem_core::scheduling::taints::tolerates;

use crate::clock::{self, SharedClock};
use crate::controller_utils::{self as cu};
use crate::events::{self, EventType};
use crate::informer::Informer;

/// The taint of a node whose `Ready` condition is `Unknown`.
pub const TAINT_UNREACHABLE: &str = "node.kubernetes.io/unreachable";
/// The taint of a node whose `Ready` condition is `False`.
pub const TAINT_NOT_READY: &str = "node.kubernetes.io/not-ready";
/// Namespace of the node Leases.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";
/// Reason of conditions set to `Unknown` because the node went silent.
pub const REASON_UNKNOWN: &str = "NodeStatusUnknown";
/// Message of conditions set to `Unknown` because the node went silent.
pub const MESSAGE_UNKNOWN: &str = "Kubelet stopped posting node status.";
/// The conditions the controller sets to `Unknown` (upstream `nodeConditionTypes` plus `Ready`).
pub const MONITORED_CONDITIONS: &[&str] =
    &["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"];

const COMPONENT: &str = "node-controller";

/// How the controller watches node health.
#[derive(Clone)]
pub struct NodeLifecycleOptions {
    /// How long a node may go unheard before it is `Unknown` (`--node-monitor-grace-period`, 40 s).
    pub node_monitor_grace_period: Duration,
    /// How often node health and evictions are checked (`--node-monitor-period`, 5 s).
    pub node_monitor_period: Duration,
    /// The time source for grace periods and `tolerationSeconds`.
    pub clock: SharedClock,
}

impl Default for NodeLifecycleOptions {
    fn default() -> Self {
        NodeLifecycleOptions {
            node_monitor_grace_period: Duration::from_secs(40),
            node_monitor_period: Duration::from_secs(5),
            clock: clock::system(),
        }
    }
}

/// What the controller last saw of a node (upstream `nodeHealthData`).
struct Health {
    /// When (controller clock) the node was last heard from.
    probe: Timestamp,
    ready_heartbeat: Option<Time>,
    lease_renew: Option<String>,
}

/// Runs the node lifecycle and taint eviction controllers until the runtime stops.
pub async fn run(
    client: kube::Client,
    pods: Informer<Pod>,
    nodes: Informer<Node>,
    options: NodeLifecycleOptions,
) {
    let leases = Informer::<Lease>::start_with(
        Api::namespaced(client.clone(), NODE_LEASE_NAMESPACE),
        kube::runtime::watcher::Config::default(),
    );
    nodes.wait_ready().await;
    pods.wait_ready().await;
    leases.wait_ready().await;
    let mut health: HashMap<String, Health> = HashMap::new();
    let mut tick = tokio::time::interval(options.node_monitor_period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        monitor_node_health(&client, &nodes, &leases, &mut health, &options).await;
        evict_pods(&client, &nodes, &pods, options.clock.now()).await;
    }
}

fn condition<'a>(node: &'a Node, type_: &str) -> Option<&'a NodeCondition> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

/// The status of the node's `Ready` condition (`Unknown` when it has none).
pub fn ready_status(node: &Node) -> &str {
    condition(node, "Ready").map_or("Unknown", |c| c.status.as_str())
}

async fn monitor_node_health(
    client: &kube::Client,
    nodes: &Informer<Node>,
    leases: &Informer<Lease>,
    health: &mut HashMap<String, Health>,
    options: &NodeLifecycleOptions,
) {
    let now = options.clock.now();
    let grace = SignedDuration::try_from(options.node_monitor_grace_period)
        .unwrap_or(SignedDuration::from_secs(40));
    let current = nodes.list();
    health.retain(|name, _| current.iter().any(|n| n.name_any() == *name));
    for node in current {
        let name = node.name_any();
        let heartbeat = condition(&node, "Ready").and_then(|c| c.last_heartbeat_time.clone());
        let renew = leases.get(NODE_LEASE_NAMESPACE, &name).and_then(|l| {
            l.spec
                .as_ref()?
                .renew_time
                .as_ref()
                .map(|t| t.0.to_string())
        });
        let h = health.entry(name.clone()).or_insert_with(|| Health {
            probe: now,
            ready_heartbeat: heartbeat.clone(),
            lease_renew: renew.clone(),
        });
        if h.ready_heartbeat != heartbeat || h.lease_renew != renew {
            h.probe = now;
            h.ready_heartbeat = heartbeat;
            h.lease_renew = renew;
        }
        let silent = now.duration_since(h.probe) > grace;
        let mut node = node.as_ref().clone();
        if silent && mark_unknown(&mut node, now) {
            tracing::info!(node = %name, "node stopped posting status; marking it Unknown");
            let api: Api<Node> = Api::all(client.clone());
            match api
                .replace_status(&name, &PostParams::default(), &node)
                .await
            {
                Ok(n) => {
                    node = n;
                    events::record(
                        client,
                        COMPONENT,
                        &node,
                        EventType::Normal,
                        "NodeNotReady",
                        &format!("Node {name} status is now: NodeNotReady"),
                    )
                    .await;
                }
                Err(e) => {
                    tracing::debug!(node = %name, error = %e, "marking node Unknown failed; will retry");
                    continue;
                }
            }
        }
        if let Err(e) = swap_taints(client, &node, now).await {
            tracing::debug!(node = %name, error = %e, "updating node taints failed; will retry");
        }
    }
}

/// Sets the monitored conditions to `Unknown` as upstream's `tryUpdateNodeHealth` does; returns
/// whether anything changed.
pub fn mark_unknown(node: &mut Node, now: Timestamp) -> bool {
    let status = node.status.get_or_insert_default();
    let conditions = status.conditions.get_or_insert_default();
    let mut changed = false;
    for type_ in MONITORED_CONDITIONS {
        match conditions.iter_mut().find(|c| c.type_ == *type_) {
            Some(c) if c.status == "Unknown" => {}
            Some(c) => {
                c.status = "Unknown".into();
                c.reason = Some(REASON_UNKNOWN.into());
                c.message = Some(MESSAGE_UNKNOWN.into());
                c.last_transition_time = Some(Time(now));
                changed = true;
            }
            None => {
                conditions.push(NodeCondition {
                    type_: (*type_).to_string(),
                    status: "Unknown".into(),
                    reason: Some("NodeStatusNeverUpdated".into()),
                    message: Some("Kubelet never posted node status.".into()),
                    last_heartbeat_time: node
                        .metadata
                        .creation_timestamp
                        .clone()
                        .or(Some(Time(now))),
                    last_transition_time: Some(Time(now)),
                });
                changed = true;
            }
        }
    }
    changed
}

/// The controller taints a node should carry for its `Ready` status.
pub fn desired_taint_key(ready: &str) -> Option<&'static str> {
    match ready {
        "True" => None,
        "False" => Some(TAINT_NOT_READY),
        _ => Some(TAINT_UNREACHABLE),
    }
}

/// Adds the taints for the node's `Ready` status and removes the stale ones (upstream
/// `SwapNodeControllerTaint`), with a compare-and-swap on the node's resourceVersion.
async fn swap_taints(
    client: &kube::Client,
    node: &Node,
    now: Timestamp,
) -> Result<(), kube::Error> {
    // Taints follow an observed Ready condition only: a node that has not posted one yet gets
    // none until this controller itself marks it Unknown after the grace period, as upstream's
    // doNoScheduleTaintingPass maps only the conditions a node has.
    let Some(ready) = condition(node, "Ready").map(|c| c.status.as_str()) else {
        return Ok(());
    };
    let want = desired_taint_key(ready);
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    let is_ours = |t: &Taint| {
        (t.key == TAINT_UNREACHABLE || t.key == TAINT_NOT_READY)
            && (t.effect == "NoSchedule" || t.effect == "NoExecute")
    };
    let mut next: Vec<Taint> = taints
        .iter()
        .filter(|t| !is_ours(t) || Some(t.key.as_str()) == want)
        .cloned()
        .collect();
    if let Some(key) = want {
        for effect in ["NoSchedule", "NoExecute"] {
            if !next.iter().any(|t| t.key == key && t.effect == effect) {
                next.push(Taint {
                    key: key.to_string(),
                    effect: effect.to_string(),
                    value: None,
                    time_added: Some(Time(now)),
                });
            }
        }
    }
    if next == taints {
        return Ok(());
    }
    let mut updated = node.clone();
    updated.spec.get_or_insert_default().taints = (!next.is_empty()).then_some(next);
    let api: Api<Node> = Api::all(client.clone());
    api.replace(&node.name_any(), &PostParams::default(), &updated)
        .await?;
    Ok(())
}

/// When a pod with `tolerations` must leave a node with `taints` (only the `NoExecute` ones
/// count): `Some(now-or-earlier)` when it does not tolerate one of them, `Some(t)` when its
/// shortest `tolerationSeconds` runs out at `t`, `None` when it may stay for ever.
pub fn eviction_time(
    tolerations: &[Toleration],
    taints: &[Taint],
    now: Timestamp,
) -> Option<Timestamp> {
    let mut at: Option<Timestamp> = None;
    for taint in taints.iter().filter(|t| t.effect == "NoExecute") {
        let matching: Vec<&Toleration> =
            tolerations.iter().filter(|t| tolerates(t, taint)).collect();
        if matching.is_empty() {
            return Some(now);
        }
        // `getMinTolerationTime`: the shortest `tolerationSeconds` of the matching tolerations;
        // none set means for ever; zero or less means at once.
        let Some(secs) = matching.iter().filter_map(|t| t.toleration_seconds).min() else {
            continue;
        };
        let added = taint.time_added.as_ref().map_or(now, |t| t.0);
        let t = added
            .saturating_add(SignedDuration::from_secs(secs.max(0)))
            .unwrap_or(added);
        at = Some(at.map_or(t, |a| a.min(t)));
    }
    at
}

async fn evict_pods(
    client: &kube::Client,
    nodes: &Informer<Node>,
    pods: &Informer<Pod>,
    now: Timestamp,
) {
    let tainted: HashMap<String, Vec<Taint>> = nodes
        .list()
        .into_iter()
        .filter_map(|n| {
            let taints: Vec<Taint> = n
                .spec
                .as_ref()?
                .taints
                .iter()
                .flatten()
                .filter(|t| t.effect == "NoExecute")
                .cloned()
                .collect();
            (!taints.is_empty()).then(|| (n.name_any(), taints))
        })
        .collect();
    if tainted.is_empty() {
        return;
    }
    for pod in pods.list() {
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let Some(spec) = pod.spec.as_ref() else {
            continue;
        };
        let Some(taints) = spec.node_name.as_ref().and_then(|n| tainted.get(n)) else {
            continue;
        };
        let tolerations = spec.tolerations.as_deref().unwrap_or_default();
        match eviction_time(tolerations, taints, now) {
            Some(t) if t <= now => evict(client, &pod).await,
            _ => {}
        }
    }
}

async fn evict(client: &kube::Client, pod: &Pod) {
    let ns = pod.namespace().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: pod.uid(),
            resource_version: None,
        }),
        ..Default::default()
    };
    match api.delete(&pod.name_any(), &params).await {
        Ok(_) => {
            tracing::info!(pod = %pod.name_any(), namespace = %ns, "evicting pod from tainted node");
            events::record(
                client,
                "taint-eviction-controller",
                pod,
                EventType::Normal,
                "TaintManagerEviction",
                &format!("Marking for deletion Pod {ns}/{}", pod.name_any()),
            )
            .await;
        }
        Err(e) if cu::is_not_found(&e) => {}
        Err(e) => tracing::debug!(pod = %pod.name_any(), error = %e, "eviction failed; will retry"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, effect: &str, added: Timestamp) -> Taint {
        Taint {
            key: key.into(),
            effect: effect.into(),
            value: None,
            time_added: Some(Time(added)),
        }
    }

    fn toleration(key: &str, secs: Option<i64>) -> Toleration {
        Toleration {
            key: Some(key.into()),
            operator: Some("Exists".into()),
            effect: Some("NoExecute".into()),
            toleration_seconds: secs,
            value: None,
        }
    }

    #[test]
    fn eviction_waits_for_the_shortest_matching_toleration() {
        let t0 = Timestamp::UNIX_EPOCH;
        let taints = [taint(TAINT_UNREACHABLE, "NoExecute", t0)];
        let tol = [
            toleration(TAINT_UNREACHABLE, Some(300)),
            toleration("", Some(60)),
        ];
        assert_eq!(
            eviction_time(&tol, &taints, t0),
            Some(t0 + SignedDuration::from_secs(60))
        );
        assert_eq!(
            eviction_time(&[toleration(TAINT_UNREACHABLE, None)], &taints, t0),
            None
        );
        assert_eq!(eviction_time(&[], &taints, t0), Some(t0));
        // NoSchedule taints never evict.
        assert_eq!(
            eviction_time(&[], &[taint("x", "NoSchedule", t0)], t0),
            None
        );
    }

    #[test]
    fn silent_node_conditions_become_unknown_once() {
        let mut node = Node::default();
        let now = Timestamp::UNIX_EPOCH;
        assert!(mark_unknown(&mut node, now));
        assert!(!mark_unknown(&mut node, now));
        assert_eq!(ready_status(&node), "Unknown");
        assert_eq!(desired_taint_key("Unknown"), Some(TAINT_UNREACHABLE));
        assert_eq!(desired_taint_key("True"), None);
    }
}
