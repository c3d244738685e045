//! The emulated usage model (issue 21, contract 2): what an emulated node reports as used,
//! since it runs no processes to measure. The figures are declared, never measured, and every
//! exposition of them says so (`tandem_resource_metrics_emulated 1`).
//!
//! - A pod's annotations [`CPU_ANNOTATION`] and [`MEMORY_ANNOTATION`] (quantities such as `250m`
//!   and `64Mi`) declare the usage of each of its containers. They are read from the pod as the
//!   agent knows it now, so `kubectl annotate --overwrite` changes the usage from the moment the
//!   agent sees the change.
//! - Without them a container uses half of its requests (requests default to limits, as API
//!   defaulting does), and nothing when it requests nothing.
//! - CPU counters are integrated over the wall time of the agent's clock at the declared rate:
//!   a container's counter grows at its rate from its start; a rate change is applied from the
//!   time the agent saw it ([`Integrator`]). Nothing sleeps; a scraper taking the rate between
//!   two scrapes (as metrics-server does) reads the declared rate back.
//! - The node uses its reservations (`capacity − allocatable`: kube-reserved, system-reserved
//!   and the hard eviction threshold, as the Windows node reference describes them) plus the
//!   sum of its containers.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::SystemTime;

use k8s_openapi::api::core::v1::{Container, Pod};
use tandem_core::validation::quantity::Quantity;

/// The annotation that declares each container's CPU usage on an emulated node.
pub const CPU_ANNOTATION: &str = "metrics.tandem.io/emulated-cpu";
/// The annotation that declares each container's memory usage (working set) on an emulated node.
pub const MEMORY_ANNOTATION: &str = "metrics.tandem.io/emulated-memory";

const NANOS_PER_SECOND: u128 = 1_000_000_000;

/// The declared usage of one container.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// CPU in nanocores (core-nanoseconds per second): `250m` is 250,000,000.
    pub cpu_nano_cores: u64,
    pub memory_bytes: u64,
}

/// The declared usage of one pod's containers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeclaredUsage {
    /// By container name (init containers included: sidecars run too).
    pub containers: BTreeMap<String, Usage>,
    /// When the agent saw the declaration take its current value.
    pub since: SystemTime,
}

/// Declared usage by pod UID: what [`crate::runtime::Runtime::container_stats`] of an emulated
/// backend reads.
pub type DeclaredPods = HashMap<String, DeclaredUsage>;

/// A quantity as a whole count of its nano-units, floored at zero.
fn nanos(q: &str) -> Option<u128> {
    Quantity::parse(q).map(|q| u128::try_from(q.nanos()).unwrap_or(0))
}

fn saturate(v: u128) -> u64 {
    u64::try_from(v).unwrap_or(u64::MAX)
}

/// A container's request for `resource`, or its limit when it sets only a limit.
fn request(c: &Container, resource: &str) -> Option<u128> {
    let res = c.resources.as_ref()?;
    let q = res
        .requests
        .as_ref()
        .and_then(|m| m.get(resource))
        .or_else(|| res.limits.as_ref().and_then(|m| m.get(resource)))?;
    nanos(&q.0)
}

/// The usage `pod` declares for each of its containers (see the module documentation). An
/// annotation that is not a quantity is ignored: the container falls back to half its requests.
pub fn declared(pod: &Pod) -> BTreeMap<String, Usage> {
    let annotations = pod.metadata.annotations.as_ref();
    let annotated = |key: &str| annotations.and_then(|a| a.get(key)).and_then(|v| nanos(v));
    let cpu = annotated(CPU_ANNOTATION);
    let memory = annotated(MEMORY_ANNOTATION);
    let Some(spec) = pod.spec.as_ref() else {
        return BTreeMap::new();
    };
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .map(|c| {
            let half = |resource| request(c, resource).unwrap_or(0) / 2;
            let usage = Usage {
                // A CPU quantity's nano-units are nanocores.
                cpu_nano_cores: saturate(cpu.unwrap_or_else(|| half("cpu"))),
                // A memory quantity's nano-units are nanobytes.
                memory_bytes: saturate(
                    memory
                        .map(|m| m.div_ceil(NANOS_PER_SECOND))
                        .unwrap_or_else(|| half("memory").div_ceil(NANOS_PER_SECOND)),
                ),
            };
            (c.name.clone(), usage)
        })
        .collect()
}

/// Nanoseconds from `from` to `to`, zero when `to` is earlier.
fn elapsed_nanos(from: SystemTime, to: SystemTime) -> u128 {
    to.duration_since(from).map_or(0, |d| d.as_nanos())
}

/// Core-nanoseconds used at `rate` nanocores for `nanos` nanoseconds.
fn core_nanos(rate: u64, nanos: u128) -> u128 {
    u128::from(rate).saturating_mul(nanos) / NANOS_PER_SECOND
}

#[derive(Clone, Copy, Debug)]
struct Accumulated {
    at: SystemTime,
    core_nanos: u128,
    rate: u64,
}

/// Integrates declared CPU rates into cumulative counters, per container id, so that counters
/// only grow and a scraper's rate between two samples is the declared rate.
#[derive(Debug, Default)]
pub struct Integrator {
    containers: HashMap<String, Accumulated>,
    /// The last counters of containers that are gone, so a node total built on them never
    /// goes back.
    retired: u128,
}

impl Integrator {
    /// The CPU time in core-nanoseconds container `id` (started at `started`) has used by
    /// `now`, when it is declared to use `rate` nanocores since `rate_since`.
    ///
    /// The first sample of a container assumes the current rate since its start (the agent
    /// knows no earlier declaration). Later samples add the time since the previous sample: at
    /// the previous rate up to `rate_since` and at `rate` after it, when the rate changed in
    /// between.
    pub fn cpu(
        &mut self,
        id: &str,
        started: SystemTime,
        rate: u64,
        rate_since: SystemTime,
        now: SystemTime,
    ) -> u64 {
        let next = match self.containers.get(id) {
            None => Accumulated {
                at: now,
                core_nanos: core_nanos(rate, elapsed_nanos(started, now)),
                rate,
            },
            Some(prev) if now <= prev.at => *prev,
            Some(prev) => {
                let added = if prev.rate != rate && rate_since > prev.at && rate_since < now {
                    core_nanos(prev.rate, elapsed_nanos(prev.at, rate_since))
                        + core_nanos(rate, elapsed_nanos(rate_since, now))
                } else {
                    core_nanos(rate, elapsed_nanos(prev.at, now))
                };
                Accumulated {
                    at: now,
                    core_nanos: prev.core_nanos.saturating_add(added),
                    rate,
                }
            }
        };
        self.containers.insert(id.to_string(), next);
        saturate(next.core_nanos)
    }

    /// Forgets the containers not in `live`, keeping their last counters in [`Self::retired`].
    pub fn retain(&mut self, live: &HashSet<&str>) {
        let mut retired = self.retired;
        self.containers.retain(|id, acc| {
            let keep = live.contains(id.as_str());
            if !keep {
                retired = retired.saturating_add(acc.core_nanos);
            }
            keep
        });
        self.retired = retired;
    }

    /// The CPU time of every container forgotten so far, in core-nanoseconds.
    pub fn retired(&self) -> u64 {
        saturate(self.retired)
    }
}

/// Core-nanoseconds used at `rate` nanocores from `from` to `to`.
pub fn integrate(rate: u64, from: SystemTime, to: SystemTime) -> u64 {
    saturate(core_nanos(rate, elapsed_nanos(from, to)))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn pod(json: serde_json::Value) -> Pod {
        serde_json::from_value(json).expect("pod")
    }

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs)
    }

    #[test]
    fn annotations_declare_each_containers_usage() {
        let p = pod(serde_json::json!({
            "metadata": {"annotations": {CPU_ANNOTATION: "300m", MEMORY_ANNOTATION: "64Mi"}},
            "spec": {"containers": [
                {"name": "a", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
                {"name": "b"}
            ]}
        }));
        let usage = declared(&p);
        let expected = Usage {
            cpu_nano_cores: 300_000_000,
            memory_bytes: 64 * 1024 * 1024,
        };
        assert_eq!(usage["a"], expected);
        assert_eq!(usage["b"], expected);
    }

    #[test]
    fn without_annotations_a_container_uses_half_its_requests_or_limits_or_nothing() {
        let p = pod(serde_json::json!({
            "metadata": {"annotations": {CPU_ANNOTATION: "lots"}},
            "spec": {
                "containers": [
                    {"name": "req", "resources": {"requests": {"cpu": "500m", "memory": "128Mi"}}},
                    {"name": "lim", "resources": {"limits": {"cpu": "1", "memory": "1Mi"}}},
                    {"name": "none"}
                ],
                "initContainers": [{"name": "side", "resources": {"requests": {"cpu": "100m"}}}]
            }
        }));
        let usage = declared(&p);
        assert_eq!(
            usage["req"],
            Usage {
                cpu_nano_cores: 250_000_000,
                memory_bytes: 64 * 1024 * 1024
            }
        );
        assert_eq!(
            usage["lim"],
            Usage {
                cpu_nano_cores: 500_000_000,
                memory_bytes: 512 * 1024
            }
        );
        assert_eq!(usage["none"], Usage::default());
        assert_eq!(usage["side"].cpu_nano_cores, 50_000_000);
    }

    #[test]
    fn a_counter_grows_at_the_declared_rate_from_the_containers_start() {
        let mut i = Integrator::default();
        // 300m since t=0: at t=10 it has used 3 core-seconds.
        assert_eq!(i.cpu("c", at(0), 300_000_000, at(0), at(10)), 3_000_000_000);
        assert_eq!(i.cpu("c", at(0), 300_000_000, at(0), at(25)), 7_500_000_000);
        // A sample at the same time (or earlier) changes nothing.
        assert_eq!(i.cpu("c", at(0), 300_000_000, at(0), at(25)), 7_500_000_000);
        assert_eq!(i.cpu("c", at(0), 300_000_000, at(0), at(20)), 7_500_000_000);
    }

    #[test]
    fn a_rate_change_counts_from_when_it_was_seen() {
        let mut i = Integrator::default();
        assert_eq!(i.cpu("c", at(0), 100_000_000, at(0), at(10)), 1_000_000_000);
        // At t=14 the pod is annotated 1 core; sampled at t=20: 4 s at 0.1 and 6 s at 1.
        let c = i.cpu("c", at(0), 1_000_000_000, at(14), at(20));
        assert_eq!(c, 1_000_000_000 + 400_000_000 + 6_000_000_000);
        // From then on the new rate alone.
        let d = i.cpu("c", at(0), 1_000_000_000, at(14), at(30));
        assert_eq!(d - c, 10_000_000_000);
    }

    #[test]
    fn forgotten_containers_keep_their_time_in_the_retired_total() {
        let mut i = Integrator::default();
        i.cpu("a", at(0), 1_000_000_000, at(0), at(2));
        i.cpu("b", at(0), 500_000_000, at(0), at(2));
        i.retain(&HashSet::from(["b"]));
        assert_eq!(i.retired(), 2_000_000_000);
        // A container id seen again starts from its start time, not from the old counter.
        assert_eq!(
            i.cpu("a", at(1), 1_000_000_000, at(1), at(2)),
            1_000_000_000
        );
        assert_eq!(integrate(250_000_000, at(0), at(4)), 1_000_000_000);
        assert_eq!(integrate(250_000_000, at(4), at(0)), 0);
    }
}
