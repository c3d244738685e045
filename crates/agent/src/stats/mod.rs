//! The node agent's stats and metrics endpoints, as the kubelet serves them on its port 10250
//! (and so reached through the API server's `nodes/NAME/proxy/…`):
//!
//! - `/metrics/resource` ([`resource`]): the kubelet's resource metrics (Prometheus text), the
//!   input of metrics-server and so of `kubectl top` and the HPA;
//! - `/stats/summary` ([`summary`]): the Summary API (`k8s.io/kubelet/pkg/apis/stats/v1alpha1`);
//! - `/metrics` ([`kubelet`]): the kubelet's own metrics.
//!
//! Figures come from the [`Runtime`]: CRI `ListContainerStats` and `/proc` ([`proc`]) on a real
//! node, the declared usage model ([`emulated`]) on an emulated one. A [`StatsSource`] per node
//! takes a [`Snapshot`] of them on each request; it keeps the previous CPU sample of every
//! container, pod and the node to give `usageNanoCores` as a rate over the last interval, as
//! the kubelet's CRI stats provider does (`getAndUpdateContainerUsageNanoCores`).

pub mod emulated;
pub mod exposition;
pub mod instrumented;
pub mod kubelet;
pub mod proc;
pub mod resource;
pub mod summary;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::Pod;

use crate::clock::Clock;
use crate::runtime::{ContainerStats, NodeResources, NodeStats, Runtime};
use emulated::{DeclaredPods, DeclaredUsage};

/// The shortest interval a CPU rate is taken over: a sample newer than this does not replace
/// the previous one, so two requests in quick succession do not give a rate over microseconds.
const MIN_RATE_WINDOW: Duration = Duration::from_secs(1);

/// The endpoints a [`StatsSource`] answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// `/metrics`
    Metrics,
    /// `/metrics/resource`
    ResourceMetrics,
    /// `/stats/summary`
    Summary,
}

impl Endpoint {
    /// The endpoint at a request path, split into segments.
    pub fn at(path: &[&str]) -> Option<Endpoint> {
        match path {
            ["metrics"] => Some(Endpoint::Metrics),
            ["metrics", "resource"] => Some(Endpoint::ResourceMetrics),
            ["stats", "summary"] => Some(Endpoint::Summary),
            _ => None,
        }
    }
}

/// Why a stats response could not be written.
#[derive(Debug, thiserror::Error)]
pub enum StatsError {
    #[error("cannot encode the metrics")]
    Encode(#[from] std::fmt::Error),
    #[error("cannot encode the summary")]
    Json(#[from] serde_json::Error),
}

/// A pod as the stats know it: its declared usage and what the pod start metric needs.
#[derive(Debug)]
struct PodEntry {
    declared: DeclaredUsage,
    first_seen: SystemTime,
    running: bool,
}

/// One container's figures in a [`Snapshot`].
#[derive(Clone, Debug, PartialEq)]
pub struct ContainerSnapshot {
    pub stats: ContainerStats,
    /// CPU rate over the last interval, in nanocores.
    pub nano_cores: Option<u64>,
}

/// One pod's figures in a [`Snapshot`]: its ready sandbox and the containers running in it.
#[derive(Clone, Debug, PartialEq)]
pub struct PodSnapshot {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    /// When the sandbox was created (the Summary API's pod `startTime`, as the kubelet's CRI
    /// stats provider gives it).
    pub start_time: SystemTime,
    /// Sorted by name.
    pub containers: Vec<ContainerSnapshot>,
}

impl PodSnapshot {
    /// The newest timestamp of its containers.
    pub fn timestamp(&self) -> Option<SystemTime> {
        self.containers.iter().map(|c| c.stats.timestamp).max()
    }

    /// The sum of its containers' CPU time, core-nanoseconds.
    pub fn cpu_core_nanos(&self) -> u64 {
        self.containers
            .iter()
            .fold(0, |s, c| s.saturating_add(c.stats.cpu_core_nanos))
    }

    /// The sum of its containers' rates, when every one has one.
    pub fn nano_cores(&self) -> Option<u64> {
        self.containers
            .iter()
            .try_fold(0u64, |s, c| c.nano_cores.map(|r| s.saturating_add(r)))
    }

    /// The sum of its containers' working sets.
    pub fn memory_working_set_bytes(&self) -> u64 {
        self.containers
            .iter()
            .fold(0, |s, c| s.saturating_add(c.stats.memory_working_set_bytes))
    }
}

/// The node's figures at one moment.
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    pub node_name: String,
    /// `None` when the runtime could not give them.
    pub node: Option<NodeStats>,
    /// The node's CPU rate over the last interval, in nanocores.
    pub node_nano_cores: Option<u64>,
    /// Sorted by namespace and name.
    pub pods: Vec<PodSnapshot>,
    /// What went wrong reading the figures, if anything (`resource_scrape_error 1`).
    pub error: Option<String>,
    /// Whether the figures are declared by the emulated usage model rather than measured.
    pub emulated: bool,
    /// Bytes the node's images take, as the runtime reports them.
    pub image_bytes: u64,
}

#[derive(Clone, Copy, Debug)]
struct CpuSample {
    at: SystemTime,
    core_nanos: u64,
}

/// The stats of one node: the runtime to read, the node's size, and the pods the agent knows.
pub struct StatsSource {
    node_name: String,
    runtime: Arc<dyn Runtime>,
    node: NodeResources,
    clock: Clock,
    pods: Mutex<HashMap<String, PodEntry>>,
    /// The previous CPU sample per container id, pod UID (`pod/<uid>`) and of the node (`node`).
    samples: Mutex<HashMap<String, CpuSample>>,
    metrics: Arc<kubelet::KubeletMetrics>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The text of an error and its causes, `: `-separated.
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

fn is_running(pod: &Pod) -> bool {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

impl StatsSource {
    pub fn new(
        node_name: &str,
        runtime: Arc<dyn Runtime>,
        node: NodeResources,
        clock: Clock,
    ) -> StatsSource {
        StatsSource {
            node_name: node_name.to_string(),
            metrics: Arc::new(kubelet::KubeletMetrics::new(node_name, runtime.clone())),
            runtime,
            node,
            clock,
            pods: Mutex::new(HashMap::new()),
            samples: Mutex::new(HashMap::new()),
        }
    }

    /// The kubelet metrics of this node, for the agent to record into.
    pub fn kubelet_metrics(&self) -> &kubelet::KubeletMetrics {
        &self.metrics
    }

    /// The node's runtime with its operations counted in this node's
    /// `kubelet_runtime_operations_total`: what the pod workers should drive.
    pub fn instrumented_runtime(&self) -> Arc<dyn Runtime> {
        Arc::new(instrumented::InstrumentedRuntime::new(
            self.runtime.clone(),
            self.metrics.clone(),
        ))
    }

    /// Records the pod as the agent sees it now (from its pod watch). The first update that
    /// shows a pod the agent saw pending as `Running` is observed as its start duration
    /// (`kubelet_pod_start_duration_seconds`, from the agent first seeing the pod, as the
    /// kubelet's `syncPod` measures it).
    pub fn pod_applied(&self, pod: &Pod) {
        let Some(uid) = pod.metadata.uid.clone() else {
            return;
        };
        let now = self.clock.now();
        let containers = emulated::declared(pod);
        let running = is_running(pod);
        let started = {
            let mut pods = lock(&self.pods);
            match pods.get_mut(&uid) {
                Some(entry) => {
                    if entry.declared.containers != containers {
                        entry.declared = DeclaredUsage {
                            containers,
                            since: now,
                        };
                    }
                    let started = running && !entry.running;
                    entry.running = running;
                    started.then(|| now.duration_since(entry.first_seen).unwrap_or_default())
                }
                None => {
                    pods.insert(
                        uid,
                        PodEntry {
                            declared: DeclaredUsage {
                                containers,
                                since: now,
                            },
                            first_seen: now,
                            running,
                        },
                    );
                    None
                }
            }
        };
        if let Some(took) = started {
            self.metrics.observe_pod_start(took);
        }
    }

    /// Forgets a deleted pod.
    pub fn pod_removed(&self, uid: &str) {
        lock(&self.pods).remove(uid);
    }

    /// Forgets every pod not in `present` (after a relist of the pod watch).
    pub fn pods_listed(&self, present: &HashSet<String>) {
        lock(&self.pods).retain(|uid, _| present.contains(uid));
    }

    fn declared(&self) -> DeclaredPods {
        lock(&self.pods)
            .iter()
            .map(|(uid, e)| (uid.clone(), e.declared.clone()))
            .collect()
    }

    /// The rate since the previous sample under `key`, which this one may replace.
    fn rate(
        samples: &mut HashMap<String, CpuSample>,
        key: String,
        at: SystemTime,
        core_nanos: u64,
    ) -> Option<u64> {
        let prev = samples.get(&key).copied();
        let rate = prev.and_then(|p| {
            let window = at.duration_since(p.at).ok().filter(|d| !d.is_zero())?;
            let used = core_nanos.checked_sub(p.core_nanos)?;
            let rate = u128::from(used) * 1_000_000_000 / window.as_nanos();
            Some(u64::try_from(rate).unwrap_or(u64::MAX))
        });
        let replace = prev.is_none_or(|p| {
            core_nanos < p.core_nanos || at.duration_since(p.at).is_ok_and(|d| d >= MIN_RATE_WINDOW)
        });
        if replace {
            samples.insert(key, CpuSample { at, core_nanos });
        }
        rate
    }

    /// The node's figures now.
    pub async fn snapshot(&self) -> Snapshot {
        let emulated = self.runtime.emulated();
        let declared = self.declared();
        let mut errors = Vec::new();
        let result = self.runtime.container_stats(&declared).await;
        self.metrics
            .record_operation("list_container_stats", result.is_err());
        let containers = match result {
            Ok(c) => c,
            Err(e) => {
                errors.push(format!("container stats: {}", error_chain(&e)));
                Vec::new()
            }
        };
        let node = match self.runtime.node_stats(&self.node, &containers).await {
            Ok(n) => Some(n),
            Err(e) => {
                errors.push(format!("node stats: {}", error_chain(&e)));
                None
            }
        };
        // The newest ready sandbox of each pod.
        let mut sandboxes = BTreeMap::new();
        for sb in self.runtime.list_sandboxes() {
            if !sb.ready {
                continue;
            }
            let newer = sandboxes
                .get(&sb.pod_uid)
                .is_none_or(|s: &crate::runtime::SandboxInfo| s.created_at < sb.created_at);
            if newer {
                sandboxes.insert(sb.pod_uid.clone(), sb);
            }
        }
        let mut samples = lock(&self.samples);
        let mut live = HashSet::new();
        let mut by_pod: HashMap<String, Vec<ContainerSnapshot>> = HashMap::new();
        for stats in containers {
            let measured = Self::rate(
                &mut samples,
                stats.id.clone(),
                stats.timestamp,
                stats.cpu_core_nanos,
            );
            live.insert(stats.id.clone());
            // An emulated rate is declared exactly; a measured one is taken over the interval.
            let nano_cores = if emulated {
                stats.cpu_nano_cores.or(measured)
            } else {
                measured.or(stats.cpu_nano_cores)
            };
            by_pod
                .entry(stats.pod_uid.clone())
                .or_default()
                .push(ContainerSnapshot { stats, nano_cores });
        }
        let mut pods: Vec<PodSnapshot> = sandboxes
            .into_values()
            .map(|sb| {
                let mut containers = by_pod.remove(&sb.pod_uid).unwrap_or_default();
                containers.sort_by(|a, b| a.stats.name.cmp(&b.stats.name));
                PodSnapshot {
                    name: sb.name,
                    namespace: sb.namespace,
                    uid: sb.pod_uid,
                    start_time: sb.created_at,
                    containers,
                }
            })
            .collect();
        pods.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        let node_nano_cores = node.as_ref().and_then(|n| {
            live.insert("node".into());
            let measured = Self::rate(&mut samples, "node".into(), n.timestamp, n.cpu_core_nanos);
            if emulated {
                n.cpu_nano_cores.or(measured)
            } else {
                measured.or(n.cpu_nano_cores)
            }
        });
        samples.retain(|key, _| live.contains(key));
        drop(samples);
        Snapshot {
            node_name: self.node_name.clone(),
            node,
            node_nano_cores,
            pods,
            error: (!errors.is_empty()).then(|| errors.join("; ")),
            emulated,
            image_bytes: u64::try_from(self.runtime.stats().image_bytes).unwrap_or(0),
        }
    }

    /// The response to a GET of `endpoint` for a client that sent `accept`: its content type
    /// and body.
    pub async fn respond(
        &self,
        endpoint: Endpoint,
        accept: &str,
    ) -> Result<(&'static str, Vec<u8>), StatsError> {
        match endpoint {
            Endpoint::Metrics => {
                let (content_type, body) = self.metrics.encode(accept)?;
                Ok((content_type, body.into_bytes()))
            }
            Endpoint::ResourceMetrics => {
                let snapshot = self.snapshot().await;
                let (content_type, body) = resource::encode(snapshot, accept)?;
                Ok((content_type, body.into_bytes()))
            }
            Endpoint::Summary => {
                let snapshot = self.snapshot().await;
                let summary = summary::Summary::from_snapshot(&snapshot);
                Ok(("application/json", serde_json::to_vec(&summary)?))
            }
        }
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
