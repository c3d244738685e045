//! `/metrics`: the kubelet's own metrics that apply to tandem's agent, with upstream's names,
//! types, labels and buckets (`pkg/kubelet/metrics/metrics.go`):
//!
//! - `kubelet_node_name{node}` = 1;
//! - `kubelet_running_pods`: pods with a ready sandbox;
//! - `kubelet_running_containers{container_state}`: containers by state (`created`, `running`,
//!   `exited`), as the kubelet counts them from its pod lifecycle cache;
//! - `kubelet_pod_start_duration_seconds`: from the agent first seeing a pod to the pod being
//!   reported `Running` (the kubelet observes it in `syncPod`; here when the pod watch shows the
//!   agent's own Running status, see [`super::StatsSource::pod_applied`]);
//! - `kubelet_runtime_operations_total{operation_type}` and
//!   `kubelet_runtime_operations_errors_total{operation_type}`: calls to the runtime, named as the
//!   kubelet's `instrumentedRuntimeService` names its CRI calls (see [`super::instrumented`]);
//! - `process_start_time_seconds`, as Prometheus' process collector gives it.
//!
//! Each node has its own registry: many emulated nodes share one process, and each must show
//! its own figures. The gauges are read from the runtime at each scrape by a [`Collector`].

use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::{exposition, proc};
use crate::runtime::{ContainerState, Runtime};

/// The kubelet's `podStartupDurationBuckets`, in seconds.
pub const POD_START_BUCKETS: [f64; 25] = [
    0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 20.0, 30.0, 45.0, 60.0, 120.0, 180.0, 240.0,
    300.0, 360.0, 480.0, 600.0, 900.0, 1200.0, 1800.0, 2700.0, 3600.0,
];

type OperationLabels = [(&'static str, &'static str); 1];

/// One node's kubelet metrics.
pub struct KubeletMetrics {
    registry: Registry,
    pod_start: Histogram,
    operations: Family<OperationLabels, Counter>,
    operation_errors: Family<OperationLabels, Counter>,
}

/// The gauges read from the runtime at each scrape.
struct StateCollector {
    node_name: String,
    runtime: Arc<dyn Runtime>,
    process_start: f64,
}

impl std::fmt::Debug for StateCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateCollector")
            .field("node_name", &self.node_name)
            .finish_non_exhaustive()
    }
}

impl Collector for StateCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut family = encoder.encode_descriptor(
            "kubelet_node_name",
            "The node's name; the value is always 1",
            None,
            MetricType::Gauge,
        )?;
        ConstGauge::new(1).encode(family.encode_family(&[("node", self.node_name.as_str())])?)?;

        let sandboxes = self.runtime.list_sandboxes();
        let mut running_pods: Vec<&str> = sandboxes
            .iter()
            .filter(|s| s.ready)
            .map(|s| s.pod_uid.as_str())
            .collect();
        running_pods.sort_unstable();
        running_pods.dedup();
        let family = encoder.encode_descriptor(
            "kubelet_running_pods",
            "Number of pods that have a running pod sandbox",
            None,
            MetricType::Gauge,
        )?;
        ConstGauge::new(running_pods.len() as i64).encode(family)?;

        let (mut created, mut running, mut exited) = (0i64, 0i64, 0i64);
        for sb in &sandboxes {
            for c in self.runtime.list_containers(&sb.id) {
                match c.state {
                    ContainerState::Created => created += 1,
                    ContainerState::Running => running += 1,
                    ContainerState::Exited { .. } => exited += 1,
                }
            }
        }
        let mut family = encoder.encode_descriptor(
            "kubelet_running_containers",
            "Number of containers currently running",
            None,
            MetricType::Gauge,
        )?;
        for (state, n) in [
            ("created", created),
            ("exited", exited),
            ("running", running),
        ] {
            ConstGauge::new(n).encode(family.encode_family(&[("container_state", state)])?)?;
        }

        let family = encoder.encode_descriptor(
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds",
            None,
            MetricType::Gauge,
        )?;
        ConstGauge::new(self.process_start).encode(family)?;
        Ok(())
    }
}

impl KubeletMetrics {
    /// The metrics of node `node_name` running on `runtime`.
    pub fn new(node_name: &str, runtime: Arc<dyn Runtime>) -> KubeletMetrics {
        let mut registry = Registry::default();
        let pod_start = Histogram::new(POD_START_BUCKETS);
        registry.register(
            "kubelet_pod_start_duration_seconds",
            "Duration in seconds from the agent seeing a pod for the first time to the pod \
             starting to run",
            pod_start.clone(),
        );
        let operations = Family::<OperationLabels, Counter>::default();
        registry.register(
            "kubelet_runtime_operations",
            "Cumulative number of runtime operations by operation type",
            operations.clone(),
        );
        let operation_errors = Family::<OperationLabels, Counter>::default();
        registry.register(
            "kubelet_runtime_operations_errors",
            "Cumulative number of runtime operation errors by operation type",
            operation_errors.clone(),
        );
        // One process, one start time: read once for all the nodes it runs.
        static PROCESS_START: OnceLock<f64> = OnceLock::new();
        let process_start = *PROCESS_START.get_or_init(|| {
            proc::process_start_time()
                .unwrap_or_else(SystemTime::now)
                .duration_since(UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64())
        });
        registry.register_collector(Box::new(StateCollector {
            node_name: node_name.to_string(),
            runtime,
            process_start,
        }));
        KubeletMetrics {
            registry,
            pod_start,
            operations,
            operation_errors,
        }
    }

    /// Records a pod's start duration.
    pub fn observe_pod_start(&self, took: Duration) {
        self.pod_start.observe(took.as_secs_f64());
    }

    /// Records one runtime call of `operation` (the kubelet's CRI operation name) and whether
    /// it failed.
    pub fn record_operation(&self, operation: &'static str, failed: bool) {
        let labels = [("operation_type", operation)];
        self.operations.get_or_create(&labels).inc();
        if failed {
            self.operation_errors.get_or_create(&labels).inc();
        }
    }

    /// The metrics for a scraper that sent `accept`.
    pub fn encode(&self, accept: &str) -> Result<(&'static str, String), std::fmt::Error> {
        exposition::encode(&self.registry, accept)
    }
}
