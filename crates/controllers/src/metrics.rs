//! Prometheus metrics of the controllers' work queues: client-go's workqueue metrics as
//! kube-controller-manager registers them (`k8s.io/component-base/metrics/prometheus/
//! workqueue`): `workqueue_depth`, `workqueue_adds_total`, `workqueue_queue_duration_seconds`,
//! `workqueue_work_duration_seconds` and `workqueue_retries_total`, each by the queue's `name`
//! (upstream's queue names: `deployment`, `replicaset`, `endpoint_slice`, …).
//!
//! As client-go's `workqueue.SetProvider`, the families reach the queues through one provider
//! per process ([`set_provider`]), set by whoever runs the controller manager before it starts
//! its controllers; a queue made without one (a test, a controller run on its own) is not
//! measured. The semantics are client-go's `queue.go`/`delaying_queue.go`: an add counts when it
//! makes the key waiting (not when the key already waits), depth counts adds not yet taken,
//! queue duration runs from the first such add to the take, work duration from the take to
//! `done`, and every delayed add (a back-off retry or a requeue-after) is a retry.

use std::sync::{Arc, OnceLock};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NameLabel {
    name: String,
}

/// client-go's workqueue buckets: 10 ns to 10 s, by factors of ten.
fn duration_histogram() -> Histogram {
    Histogram::new(exponential_buckets(10e-9, 10.0, 10))
}

type HistogramFamily = Family<NameLabel, Histogram, fn() -> Histogram>;

/// The work queues' metric families; cheap to clone.
#[derive(Clone, Debug)]
pub struct WorkqueueMetrics {
    depth: Family<NameLabel, Gauge>,
    adds: Family<NameLabel, Counter>,
    queue_duration: HistogramFamily,
    work_duration: HistogramFamily,
    retries: Family<NameLabel, Counter>,
}

impl WorkqueueMetrics {
    /// Registers the work queue families in `registry`.
    pub fn new(registry: &mut Registry) -> WorkqueueMetrics {
        let m = WorkqueueMetrics {
            depth: Family::default(),
            adds: Family::default(),
            queue_duration: Family::new_with_constructor(duration_histogram as fn() -> _),
            work_duration: Family::new_with_constructor(duration_histogram as fn() -> _),
            retries: Family::default(),
        };
        registry.register(
            "workqueue_depth",
            "[STABLE] Current depth of workqueue",
            m.depth.clone(),
        );
        registry.register(
            "workqueue_adds",
            "[STABLE] Total number of adds handled by workqueue",
            m.adds.clone(),
        );
        registry.register(
            "workqueue_queue_duration_seconds",
            "[STABLE] How long in seconds an item stays in workqueue before being requested",
            m.queue_duration.clone(),
        );
        registry.register(
            "workqueue_work_duration_seconds",
            "[STABLE] How long in seconds processing an item from workqueue takes",
            m.work_duration.clone(),
        );
        registry.register(
            "workqueue_retries",
            "[STABLE] Total number of retries handled by workqueue",
            m.retries.clone(),
        );
        m
    }

    /// The handles of the queue called `name` (every queue of that name shares them).
    pub fn queue(&self, name: &str) -> QueueMetrics {
        let label = NameLabel {
            name: name.to_string(),
        };
        QueueMetrics(Arc::new(QueueHandles {
            depth: self.depth.get_or_create_owned(&label),
            adds: self.adds.get_or_create_owned(&label),
            queue_duration: self.queue_duration.get_or_create_owned(&label),
            work_duration: self.work_duration.get_or_create_owned(&label),
            retries: self.retries.get_or_create_owned(&label),
        }))
    }
}

/// One queue's metrics, looked up once when the queue is made; cheap to clone.
#[derive(Clone, Debug)]
pub struct QueueMetrics(Arc<QueueHandles>);

#[derive(Debug)]
struct QueueHandles {
    depth: Gauge,
    adds: Counter,
    queue_duration: Histogram,
    work_duration: Histogram,
    retries: Counter,
}

impl QueueMetrics {
    /// A key became waiting.
    pub(crate) fn added(&self) {
        self.0.adds.inc();
        self.0.depth.inc();
    }

    /// A key was taken after waiting `waited` seconds (if its add time is known).
    pub(crate) fn taken(&self, waited: Option<f64>) {
        self.0.depth.dec();
        if let Some(w) = waited {
            self.0.queue_duration.observe(w);
        }
    }

    /// A key's processing took `seconds`.
    pub(crate) fn worked(&self, seconds: f64) {
        self.0.work_duration.observe(seconds);
    }

    /// A delayed add was asked for.
    pub(crate) fn retried(&self) {
        self.0.retries.inc();
    }
}

static PROVIDER: OnceLock<WorkqueueMetrics> = OnceLock::new();

/// Makes `metrics` the families every named queue made from now on reports to (client-go's
/// `workqueue.SetProvider`: the first provider set stays). Returns whether this one was set.
pub fn set_provider(metrics: WorkqueueMetrics) -> bool {
    PROVIDER.set(metrics).is_ok()
}

/// The process's provider, if one was set.
pub(crate) fn provider() -> Option<&'static WorkqueueMetrics> {
    PROVIDER.get()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::workqueue::WorkQueue;

    fn scrape(registry: &Registry) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, registry).expect("encodes");
        text
    }

    fn value(text: &str, sample: &str) -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(sample)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no {sample} in {text}"))
    }

    #[tokio::test(start_paused = true)]
    async fn a_queue_reports_adds_depth_durations_and_retries_by_name() {
        let mut registry = Registry::default();
        let metrics = WorkqueueMetrics::new(&mut registry);
        let q = WorkQueue::with_metrics("deployment", &metrics);
        q.add("default/a");
        q.add("default/a"); // already waiting: not an add
        q.add("default/b");
        let text = scrape(&registry);
        assert_eq!(
            value(&text, r#"workqueue_adds_total{name="deployment"}"#),
            2.0
        );
        assert_eq!(value(&text, r#"workqueue_depth{name="deployment"}"#), 2.0);

        tokio::time::advance(Duration::from_millis(20)).await;
        let key = q.next().await;
        tokio::time::advance(Duration::from_millis(300)).await;
        q.done(&key);
        q.add_rate_limited("default/b");
        let text = scrape(&registry);
        assert_eq!(value(&text, r#"workqueue_depth{name="deployment"}"#), 1.0);
        assert_eq!(
            value(&text, r#"workqueue_retries_total{name="deployment"}"#),
            1.0
        );
        let waited = value(
            &text,
            r#"workqueue_queue_duration_seconds_sum{name="deployment"}"#,
        );
        assert!((0.019..0.05).contains(&waited), "{waited}");
        let worked = value(
            &text,
            r#"workqueue_work_duration_seconds_sum{name="deployment"}"#,
        );
        assert!((0.29..0.4).contains(&worked), "{worked}");
        assert_eq!(
            value(
                &text,
                r#"workqueue_work_duration_seconds_bucket{le="1.0",name="deployment"}"#
            ),
            1.0
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_added_while_processed_counts_once_and_waits_for_done() {
        let mut registry = Registry::default();
        let metrics = WorkqueueMetrics::new(&mut registry);
        let q = WorkQueue::with_metrics("replicaset", &metrics);
        q.add("k");
        let k = q.next().await;
        q.add("k");
        q.add("k");
        let text = scrape(&registry);
        assert_eq!(
            value(&text, r#"workqueue_adds_total{name="replicaset"}"#),
            2.0
        );
        assert_eq!(value(&text, r#"workqueue_depth{name="replicaset"}"#), 1.0);
        q.done(&k);
        assert_eq!(q.next().await, "k");
        let text = scrape(&registry);
        assert_eq!(value(&text, r#"workqueue_depth{name="replicaset"}"#), 0.0);
    }

    #[tokio::test]
    async fn a_queue_without_a_provider_is_not_measured() {
        let mut registry = Registry::default();
        let _metrics = WorkqueueMetrics::new(&mut registry);
        let q = WorkQueue::default();
        q.add("a");
        assert_eq!(q.next().await, "a");
        q.done("a");
        assert!(!scrape(&registry).contains("workqueue_adds_total{"));
    }
}
