//! The scheduler's view of the cluster: every node with the aggregates the plugins need
//! precomputed (requested resources, used host ports, images, pods and their owners), kept up to
//! date incrementally as pods are assumed, bound and deleted.
//!
//! Mirrors upstream's scheduler cache and `framework.NodeInfo` (`pkg/scheduler/backend/cache`,
//! `pkg/scheduler/framework/types.go`). Pure: no I/O.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::os::{LABEL_WINDOWS_BUILD, Os, WindowsBuild};
use crate::plugins::image_locality::normalized_image_name;
use crate::plugins::inter_pod_affinity::AffinityTerm;
use crate::plugins::node_ports::HostPort;
use crate::plugins::volume_binding::VolumeCache;
use crate::resources::{Resources, allowed_pods, pod_non_zero_requests, pod_requests};

/// `namespace/name`, the identity of a pod in the scheduler.
pub type PodKey = String;

/// The key of a pod.
pub fn pod_key(pod: &Pod) -> PodKey {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

/// What the scheduler keeps of a pod assigned (or assumed) to a node.
#[derive(Debug, Clone)]
pub struct PodInfo {
    pub key: PodKey,
    pub uid: String,
    pub namespace: String,
    pub labels: BTreeMap<String, String>,
    pub node_name: String,
    /// Upstream `PodRequests`.
    pub requests: Resources,
    /// CPU and memory as the scoring plugins count them (defaults for missing requests).
    pub non_zero: (i64, i64),
    pub host_ports: Vec<HostPort>,
    /// The uid of the controller owning the pod (ReplicaSet, StatefulSet, …), for spreading.
    pub owner: Option<String>,
    /// Required anti-affinity terms, which constrain pods scheduled after this one.
    pub required_anti_affinity: Vec<AffinityTerm>,
    /// `spec.priority` (0 when unset, as upstream `corev1helpers.PodPriority`); preemption
    /// only evicts pods of lower priority.
    pub priority: i32,
    /// `status.startTime`, which breaks ties between victims of equal priority (upstream
    /// `GetPodStartTime`; `None` counts as "now").
    pub start_time: Option<Time>,
    /// Being deleted after the scheduler preempted it (`deletionTimestamp` set and a true
    /// `DisruptionTarget` condition with reason `PreemptionByScheduler`; upstream
    /// `podTerminatingByPreemption`).
    pub terminating_by_preemption: bool,
    /// `deletionTimestamp` is set: preemption does not delete it again.
    pub terminating: bool,
}

impl PodInfo {
    /// Summarises `pod` as placed on `node_name`.
    pub fn new(pod: &Pod, node_name: &str) -> PodInfo {
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let required_anti_affinity = pod
            .spec
            .as_ref()
            .and_then(|s| s.affinity.as_ref())
            .and_then(|a| a.pod_anti_affinity.as_ref())
            .and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .map(|terms| {
                terms
                    .iter()
                    .map(|t| AffinityTerm::new(t, &namespace))
                    .collect()
            })
            .unwrap_or_default();
        PodInfo {
            key: pod_key(pod),
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            labels: pod.metadata.labels.clone().unwrap_or_default(),
            node_name: node_name.to_string(),
            requests: pod_requests(pod),
            non_zero: pod_non_zero_requests(pod),
            host_ports: crate::plugins::node_ports::host_ports(pod),
            owner: controller_uid(pod),
            required_anti_affinity,
            namespace,
            priority: pod_priority(pod),
            start_time: pod.status.as_ref().and_then(|s| s.start_time.clone()),
            terminating_by_preemption: terminating_by_preemption(pod),
            terminating: pod.metadata.deletion_timestamp.is_some(),
        }
    }

    /// The pod's name (the part of its key after the namespace).
    pub fn name(&self) -> &str {
        self.key
            .split_once('/')
            .map_or(self.key.as_str(), |(_, n)| n)
    }
}

/// `spec.priority`, 0 when unset (upstream `corev1helpers.PodPriority`).
pub fn pod_priority(pod: &Pod) -> i32 {
    pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
}

/// Upstream `podTerminatingByPreemption`: deletion started and the first `DisruptionTarget`
/// condition is true with reason `PreemptionByScheduler`.
fn terminating_by_preemption(pod: &Pod) -> bool {
    if pod.metadata.deletion_timestamp.is_none() {
        return false;
    }
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "DisruptionTarget"))
        .is_some_and(|c| c.status == "True" && c.reason.as_deref() == Some("PreemptionByScheduler"))
}

/// The uid of the pod's controller owner reference, if it has one.
pub fn controller_uid(pod: &Pod) -> Option<String> {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| o.uid.clone())
}

/// One node and what is placed on it.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub unschedulable: bool,
    pub allocatable: Resources,
    /// The `pods` entry of allocatable.
    pub allowed_pods: i64,
    /// From the `kubernetes.io/os` label; a node without it is a Linux node (the kubelet always
    /// sets it).
    pub os: Os,
    /// From `node.kubernetes.io/windows-build`.
    pub windows_build: Option<WindowsBuild>,
    /// Normalised image name → size in bytes, from `status.images`.
    pub images: HashMap<String, i64>,
    /// Sum of the requests of the pods on the node.
    pub requested: Resources,
    /// Sum of the scoring (non-zero) CPU and memory requests.
    pub non_zero_requested: (i64, i64),
    pub pods: Vec<Arc<PodInfo>>,
    pub used_ports: Vec<HostPort>,
    /// Pods on the node per controller uid.
    pub owner_counts: HashMap<String, u32>,
    /// How many pods on the node carry required anti-affinity terms.
    pub pods_with_required_anti_affinity: usize,
}

impl NodeInfo {
    /// A node with nothing on it.
    pub fn new(node: &Node) -> NodeInfo {
        let mut n = NodeInfo {
            name: String::new(),
            labels: BTreeMap::new(),
            taints: Vec::new(),
            unschedulable: false,
            allocatable: Resources::default(),
            allowed_pods: 0,
            os: Os::Linux,
            windows_build: None,
            images: HashMap::new(),
            requested: Resources::default(),
            non_zero_requested: (0, 0),
            pods: Vec::new(),
            used_ports: Vec::new(),
            owner_counts: HashMap::new(),
            pods_with_required_anti_affinity: 0,
        };
        n.set_node(node);
        n
    }

    /// Replaces the node object's part, keeping the pods.
    fn set_node(&mut self, node: &Node) {
        self.name = node.metadata.name.clone().unwrap_or_default();
        self.labels = node.metadata.labels.clone().unwrap_or_default();
        let spec = node.spec.as_ref();
        self.taints = spec.and_then(|s| s.taints.clone()).unwrap_or_default();
        self.unschedulable = spec.and_then(|s| s.unschedulable).unwrap_or(false);
        let alloc = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
        self.allocatable = Resources::from_map(alloc);
        self.allowed_pods = allowed_pods(alloc);
        self.os = crate::os::node_os(&self.labels);
        self.windows_build = self
            .labels
            .get(LABEL_WINDOWS_BUILD)
            .and_then(|v| WindowsBuild::parse(v));
        self.images = node
            .status
            .as_ref()
            .and_then(|s| s.images.as_ref())
            .map(|imgs| {
                imgs.iter()
                    .flat_map(|i| {
                        let size = i.size_bytes.unwrap_or(0);
                        i.names
                            .iter()
                            .flatten()
                            .map(move |n| (normalized_image_name(n), size))
                    })
                    .collect()
            })
            .unwrap_or_default();
    }

    fn add_pod(&mut self, pod: Arc<PodInfo>) {
        self.requested.add(&pod.requests);
        self.non_zero_requested.0 += pod.non_zero.0;
        self.non_zero_requested.1 += pod.non_zero.1;
        self.used_ports.extend(pod.host_ports.iter().cloned());
        if let Some(o) = &pod.owner {
            *self.owner_counts.entry(o.clone()).or_insert(0) += 1;
        }
        if !pod.required_anti_affinity.is_empty() {
            self.pods_with_required_anti_affinity += 1;
        }
        self.pods.push(pod);
    }

    fn remove_pod(&mut self, key: &str) -> Option<Arc<PodInfo>> {
        let i = self.pods.iter().position(|p| p.key == key)?;
        let pod = self.pods.swap_remove(i);
        self.requested.sub(&pod.requests);
        self.non_zero_requested.0 -= pod.non_zero.0;
        self.non_zero_requested.1 -= pod.non_zero.1;
        for hp in &pod.host_ports {
            if let Some(j) = self.used_ports.iter().position(|u| u == hp) {
                self.used_ports.swap_remove(j);
            }
        }
        if let Some(o) = &pod.owner
            && let Some(c) = self.owner_counts.get_mut(o)
        {
            *c -= 1;
            if *c == 0 {
                self.owner_counts.remove(o);
            }
        }
        if !pod.required_anti_affinity.is_empty() {
            self.pods_with_required_anti_affinity -= 1;
        }
        Some(pod)
    }
}

/// How a node update relates to scheduling, so the loop retries unschedulable pods only when
/// something they could be waiting for changed (upstream's queueing hints for Node events).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeChange {
    Added,
    /// Labels, taints, allocatable, images or cordoning changed.
    Relevant,
    /// Only status the scheduler ignores (conditions, heartbeats) changed.
    Irrelevant,
}

/// Every node and pod placement the scheduler knows.
#[derive(Debug, Default, Clone)]
pub struct Snapshot {
    nodes: Vec<NodeInfo>,
    by_name: HashMap<String, usize>,
    /// Where each accounted pod is: node name.
    pod_node: HashMap<PodKey, String>,
    /// Pods bound to nodes not (yet) known, attached when the node appears.
    orphans: HashMap<String, Vec<Arc<PodInfo>>>,
    /// Normalised image name → number of nodes reporting it (image locality's spread factor).
    image_nodes: HashMap<String, usize>,
    /// Accounted pods carrying required anti-affinity terms.
    anti_affinity_pods: usize,
    /// Bumped whenever a node is added or removed (positions in `nodes` change) or a node's
    /// scheduling-relevant fields change; answers remembered per node are valid for one value.
    node_generation: u64,
    /// Claims, volumes and storage classes (VolumeBinding).
    volumes: VolumeCache,
}

impl Snapshot {
    /// An empty snapshot.
    pub fn new() -> Snapshot {
        Snapshot::default()
    }

    /// The claims, volumes and storage classes the scheduler knows.
    pub fn volumes(&self) -> &VolumeCache {
        &self.volumes
    }

    /// The claims, volumes and storage classes, to apply watch events to.
    pub fn volumes_mut(&mut self) -> &mut VolumeCache {
        &mut self.volumes
    }

    /// Every node, in a stable order (insertion order, with removals swapped in).
    pub fn nodes(&self) -> &[NodeInfo] {
        &self.nodes
    }

    /// Changes whenever node positions or scheduling-relevant node fields may have changed.
    pub fn node_generation(&self) -> u64 {
        self.node_generation
    }

    /// A node by name.
    pub fn node(&self, name: &str) -> Option<&NodeInfo> {
        self.by_name.get(name).map(|i| &self.nodes[*i])
    }

    /// How many nodes report `image` (normalised name).
    pub fn image_node_count(&self, image: &str) -> usize {
        self.image_nodes.get(image).copied().unwrap_or(0)
    }

    /// The node a pod is accounted on, if any.
    pub fn pod_node(&self, key: &str) -> Option<&str> {
        self.pod_node.get(key).map(String::as_str)
    }

    /// Adds or updates a node, keeping the pods already accounted on it.
    pub fn upsert_node(&mut self, node: &Node) -> NodeChange {
        let Some(name) = node.metadata.name.as_deref() else {
            return NodeChange::Irrelevant;
        };
        if let Some(&i) = self.by_name.get(name) {
            let before = relevant_view(&self.nodes[i]);
            for img in self.nodes[i].images.keys() {
                dec(&mut self.image_nodes, img);
            }
            self.nodes[i].set_node(node);
            for img in self.nodes[i].images.keys() {
                *self.image_nodes.entry(img.clone()).or_insert(0) += 1;
            }
            return if before == relevant_view(&self.nodes[i]) {
                NodeChange::Irrelevant
            } else {
                self.node_generation += 1;
                NodeChange::Relevant
            };
        }
        let mut info = NodeInfo::new(node);
        for img in info.images.keys() {
            *self.image_nodes.entry(img.clone()).or_insert(0) += 1;
        }
        for pod in self.orphans.remove(name).into_iter().flatten() {
            info.add_pod(pod);
        }
        self.by_name.insert(name.to_string(), self.nodes.len());
        self.nodes.push(info);
        self.node_generation += 1;
        NodeChange::Added
    }

    /// Removes a node; its pods stay accounted (as orphans) until they are deleted or the node
    /// comes back.
    pub fn remove_node(&mut self, name: &str) -> bool {
        let Some(i) = self.by_name.remove(name) else {
            return false;
        };
        let info = self.nodes.swap_remove(i);
        self.node_generation += 1;
        if i < self.nodes.len() {
            self.by_name.insert(self.nodes[i].name.clone(), i);
        }
        for img in info.images.keys() {
            dec(&mut self.image_nodes, img);
        }
        if !info.pods.is_empty() {
            self.orphans.insert(name.to_string(), info.pods);
        }
        true
    }

    /// Accounts a pod on `pod.node_name`, replacing any earlier placement of the same key.
    pub fn add_pod(&mut self, pod: Arc<PodInfo>) {
        self.remove_pod(&pod.key);
        self.pod_node.insert(pod.key.clone(), pod.node_name.clone());
        if !pod.required_anti_affinity.is_empty() {
            self.anti_affinity_pods += 1;
        }
        match self.by_name.get(&pod.node_name) {
            Some(&i) => self.nodes[i].add_pod(pod),
            None => self
                .orphans
                .entry(pod.node_name.clone())
                .or_default()
                .push(pod),
        }
    }

    /// Stops accounting a pod; returns what was accounted.
    pub fn remove_pod(&mut self, key: &str) -> Option<Arc<PodInfo>> {
        let node = self.pod_node.remove(key)?;
        let pod = self.remove_accounted(&node, key);
        if pod
            .as_ref()
            .is_some_and(|p| !p.required_anti_affinity.is_empty())
        {
            self.anti_affinity_pods -= 1;
        }
        pod
    }

    fn remove_accounted(&mut self, node: &str, key: &str) -> Option<Arc<PodInfo>> {
        match self.by_name.get(node) {
            Some(&i) => self.nodes[i].remove_pod(key),
            None => {
                let list = self.orphans.get_mut(node)?;
                let j = list.iter().position(|p| p.key == key)?;
                let pod = list.swap_remove(j);
                if list.is_empty() {
                    self.orphans.remove(node);
                }
                Some(pod)
            }
        }
    }

    /// How many accounted pods carry required anti-affinity terms (when none do, the
    /// inter-pod affinity plugin has nothing to check for pods without terms of their own).
    pub fn pods_with_required_anti_affinity(&self) -> usize {
        self.anti_affinity_pods
    }

    /// Every accounted pod with its node (pods on unknown nodes excluded).
    pub fn pods(&self) -> impl Iterator<Item = (&NodeInfo, &Arc<PodInfo>)> {
        self.nodes
            .iter()
            .flat_map(|n| n.pods.iter().map(move |p| (n, p)))
    }
}

type RelevantView = (
    BTreeMap<String, String>,
    Vec<Taint>,
    bool,
    Resources,
    i64,
    usize,
);

/// What of a node scheduling depends on; a heartbeat changes none of it.
fn relevant_view(n: &NodeInfo) -> RelevantView {
    (
        n.labels.clone(),
        n.taints.clone(),
        n.unschedulable,
        n.allocatable.clone(),
        n.allowed_pods,
        n.images.len(),
    )
}

fn dec(map: &mut HashMap<String, usize>, key: &str) {
    if let Some(c) = map.get_mut(key) {
        *c -= 1;
        if *c == 0 {
            map.remove(key);
        }
    }
}
