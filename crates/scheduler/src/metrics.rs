//! Prometheus metrics of the scheduler, with upstream kube-scheduler's names and labels
//! (`pkg/scheduler/metrics`): `scheduler_schedule_attempts_total` and
//! `scheduler_scheduling_attempt_duration_seconds` by `result` (`scheduled`, `unschedulable`,
//! `error`) and `profile` (the scheduler name, `default-scheduler`), as `PodScheduled`,
//! `PodUnschedulable` and `PodScheduleError` record them — an attempt runs from the pod's
//! leaving the queue to its binding's answer; `scheduler_pending_pods` by `queue` (`active`,
//! `backoff`, `unschedulable`, `gated`); and `scheduler_preemption_attempts_total`, counted each
//! time a pod that fits nowhere looks for victims (upstream's PostFilter).
//!
//! tandem's scheduler does not hold pods back for scheduling gates, so `gated` is always 0.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// How a scheduling attempt ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttemptResult {
    Scheduled,
    Unschedulable,
    Error,
}

impl AttemptResult {
    fn as_str(self) -> &'static str {
        match self {
            AttemptResult::Scheduled => "scheduled",
            AttemptResult::Unschedulable => "unschedulable",
            AttemptResult::Error => "error",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AttemptLabels {
    result: &'static str,
    profile: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabel {
    queue: &'static str,
}

/// Upstream's attempt-duration buckets: 1 ms doubling 15 times (to about 16 s).
fn attempt_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

/// The scheduler's metric families; cheap to clone. [`Default`] makes families registered
/// nowhere (a scheduler whose figures nobody reads).
#[derive(Clone, Debug)]
pub struct SchedulerMetrics {
    attempts: Family<AttemptLabels, Counter>,
    durations: Family<AttemptLabels, Histogram, fn() -> Histogram>,
    active: Gauge,
    backoff: Gauge,
    unschedulable: Gauge,
    preemption_attempts: Counter,
}

impl Default for SchedulerMetrics {
    fn default() -> Self {
        SchedulerMetrics::new(&mut Registry::default())
    }
}

/// Metrics never change how pods are scheduled: options that differ only in where they report
/// compare equal.
impl PartialEq for SchedulerMetrics {
    fn eq(&self, _: &SchedulerMetrics) -> bool {
        true
    }
}

impl Eq for SchedulerMetrics {}

impl SchedulerMetrics {
    /// Registers the scheduler's families in `registry`.
    pub fn new(registry: &mut Registry) -> SchedulerMetrics {
        let attempts = Family::default();
        registry.register(
            "scheduler_schedule_attempts",
            "[STABLE] Number of attempts to schedule pods, by the result. 'unschedulable' means a pod could not be scheduled, while 'error' means an internal scheduler problem",
            attempts.clone(),
        );
        let durations = Family::new_with_constructor(attempt_histogram as fn() -> _);
        registry.register(
            "scheduler_scheduling_attempt_duration_seconds",
            "[STABLE] Scheduling attempt latency in seconds (scheduling algorithm + binding)",
            durations.clone(),
        );
        let pending = Family::<QueueLabel, Gauge>::default();
        registry.register(
            "scheduler_pending_pods",
            "[STABLE] Number of pending pods, by the queue type. 'active' means number of pods in activeQ; 'backoff' means number of pods in backoffQ; 'unschedulable' means number of pods in unschedulablePods that the scheduler attempted to schedule and failed; 'gated' is the number of unschedulable pods that the scheduler never attempted to schedule because they are gated",
            pending.clone(),
        );
        let gauge = |queue| pending.get_or_create_owned(&QueueLabel { queue });
        let (active, backoff, unschedulable) =
            (gauge("active"), gauge("backoff"), gauge("unschedulable"));
        gauge("gated");
        let preemption_attempts = Counter::default();
        registry.register(
            "scheduler_preemption_attempts",
            "[STABLE] Total preemption attempts in the cluster till now",
            preemption_attempts.clone(),
        );
        SchedulerMetrics {
            attempts,
            durations,
            active,
            backoff,
            unschedulable,
            preemption_attempts,
        }
    }

    /// Records an attempt of `profile` that ended with `result` after `seconds`.
    pub fn attempt(&self, profile: &str, result: AttemptResult, seconds: f64) {
        let labels = AttemptLabels {
            result: result.as_str(),
            profile: profile.to_string(),
        };
        self.durations.get_or_create(&labels).observe(seconds);
        self.attempts.get_or_create(&labels).inc();
    }

    /// Sets the pending pods of each queue.
    pub fn pending(&self, active: usize, backoff: usize, unschedulable: usize) {
        let n = |v: usize| i64::try_from(v).unwrap_or(i64::MAX);
        self.active.set(n(active));
        self.backoff.set(n(backoff));
        self.unschedulable.set(n(unschedulable));
    }

    /// Counts a preemption attempt.
    pub fn preemption_attempt(&self) {
        self.preemption_attempts.inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_pending_pods_and_preemptions_have_upstream_names_and_labels() {
        let mut registry = Registry::default();
        let m = SchedulerMetrics::new(&mut registry);
        m.attempt("default-scheduler", AttemptResult::Scheduled, 0.003);
        m.attempt("default-scheduler", AttemptResult::Unschedulable, 0.001);
        m.pending(2, 1, 3);
        m.preemption_attempt();
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodes");
        for line in [
            r#"scheduler_schedule_attempts_total{result="scheduled",profile="default-scheduler"} 1"#,
            r#"scheduler_schedule_attempts_total{result="unschedulable",profile="default-scheduler"} 1"#,
            r#"scheduler_scheduling_attempt_duration_seconds_count{result="scheduled",profile="default-scheduler"} 1"#,
            r#"scheduler_scheduling_attempt_duration_seconds_bucket{le="0.004",result="scheduled",profile="default-scheduler"} 1"#,
            r#"scheduler_pending_pods{queue="active"} 2"#,
            r#"scheduler_pending_pods{queue="backoff"} 1"#,
            r#"scheduler_pending_pods{queue="unschedulable"} 3"#,
            r#"scheduler_pending_pods{queue="gated"} 0"#,
            "scheduler_preemption_attempts_total 1",
        ] {
            assert!(text.contains(&format!("{line}\n")), "{line} not in\n{text}");
        }
    }
}
