//! Resource arithmetic: a pod's effective requests and a node's allocatable, in the units the
//! scheduler compares (milli-CPU, bytes, plain counts for extended resources).
//!
//! Mirrors upstream `k8s.io/component-helpers/resource.PodRequests` (init containers, restartable
//! "sidecar" init containers, pod overhead) and the scheduler's `framework.Resource`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use tandem_core::validation::quantity::Quantity as Parsed;

/// Upstream `DefaultMilliCPURequest`: the CPU a container without a request is scored as using.
pub const DEFAULT_MILLI_CPU_REQUEST: i64 = 100;
/// Upstream `DefaultMemoryRequest` (200 MiB): the memory a container without a request is scored
/// as using.
pub const DEFAULT_MEMORY_REQUEST: i64 = 200 * 1024 * 1024;

/// An amount of each resource the scheduler tracks. Extended resources (`nvidia.com/gpu`,
/// `hugepages-2Mi`, …) are kept by name in `scalar`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resources {
    /// CPU in thousandths of a core.
    pub milli_cpu: i64,
    /// Memory in bytes.
    pub memory: i64,
    /// Local ephemeral storage in bytes.
    pub ephemeral_storage: i64,
    /// Every other resource by name, in whole units.
    pub scalar: BTreeMap<String, i64>,
}

impl Resources {
    /// Builds from a `resources.requests`/`allocatable` map. Unparseable quantities count as zero
    /// (the API server's validation rejects them before they reach the scheduler). `pods` is not
    /// a resource here; see [`allowed_pods`].
    pub fn from_map(map: Option<&BTreeMap<String, Quantity>>) -> Resources {
        let mut r = Resources::default();
        let Some(map) = map else { return r };
        for (name, q) in map {
            r.add_named(name, q);
        }
        r
    }

    fn add_named(&mut self, name: &str, q: &Quantity) {
        match name {
            "cpu" => self.milli_cpu = self.milli_cpu.saturating_add(milli_value(q)),
            "memory" => self.memory = self.memory.saturating_add(value(q)),
            "ephemeral-storage" => {
                self.ephemeral_storage = self.ephemeral_storage.saturating_add(value(q))
            }
            "pods" => {}
            other => {
                let e = self.scalar.entry(other.to_string()).or_insert(0);
                *e = e.saturating_add(value(q));
            }
        }
    }

    /// Adds `other` to `self`, resource by resource.
    pub fn add(&mut self, other: &Resources) {
        self.milli_cpu = self.milli_cpu.saturating_add(other.milli_cpu);
        self.memory = self.memory.saturating_add(other.memory);
        self.ephemeral_storage = self
            .ephemeral_storage
            .saturating_add(other.ephemeral_storage);
        for (k, v) in &other.scalar {
            let e = self.scalar.entry(k.clone()).or_insert(0);
            *e = e.saturating_add(*v);
        }
    }

    /// Subtracts `other` from `self` (used when a pod leaves a node).
    pub fn sub(&mut self, other: &Resources) {
        self.milli_cpu = self.milli_cpu.saturating_sub(other.milli_cpu);
        self.memory = self.memory.saturating_sub(other.memory);
        self.ephemeral_storage = self
            .ephemeral_storage
            .saturating_sub(other.ephemeral_storage);
        for (k, v) in &other.scalar {
            if let Some(e) = self.scalar.get_mut(k) {
                *e = e.saturating_sub(*v);
            }
        }
        self.scalar.retain(|_, v| *v != 0);
    }

    /// Sets each resource to the larger of `self` and `other`.
    pub fn set_max(&mut self, other: &Resources) {
        self.milli_cpu = self.milli_cpu.max(other.milli_cpu);
        self.memory = self.memory.max(other.memory);
        self.ephemeral_storage = self.ephemeral_storage.max(other.ephemeral_storage);
        for (k, v) in &other.scalar {
            let e = self.scalar.entry(k.clone()).or_insert(0);
            *e = (*e).max(*v);
        }
    }

    /// Whether nothing at all is requested.
    pub fn is_zero(&self) -> bool {
        self.milli_cpu == 0
            && self.memory == 0
            && self.ephemeral_storage == 0
            && self.scalar.values().all(|v| *v == 0)
    }
}

/// A quantity in milli-units, rounded up (upstream `Quantity.MilliValue`).
pub fn milli_value(q: &Quantity) -> i64 {
    Parsed::parse(&q.0).map_or(0, |p| ceil_div(p.nanos(), 1_000_000))
}

/// A quantity in whole units, rounded up (upstream `Quantity.Value`).
pub fn value(q: &Quantity) -> i64 {
    Parsed::parse(&q.0).map_or(0, |p| ceil_div(p.nanos(), 1_000_000_000))
}

fn ceil_div(n: i128, d: i128) -> i64 {
    let q = n / d + i128::from(n % d > 0);
    i64::try_from(q).unwrap_or(if q < 0 { i64::MIN } else { i64::MAX })
}

/// The `pods` entry of a node's allocatable (how many pods it may run); 0 when absent.
pub fn allowed_pods(map: Option<&BTreeMap<String, Quantity>>) -> i64 {
    map.and_then(|m| m.get("pods")).map_or(0, value)
}

fn container_requests(c: &Container) -> Resources {
    Resources::from_map(c.resources.as_ref().and_then(|r| r.requests.as_ref()))
}

fn is_restartable_init(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// What a pod asks of a node: upstream `resource.PodRequests`.
///
/// The regular containers run together, so their requests add up. Init containers run one at a
/// time before them, so each contributes its own requests plus those of the restartable
/// ("sidecar") init containers started before it; the pod needs the larger of the init peak and
/// the steady state (regular containers plus every sidecar). Pod overhead (RuntimeClass) is added
/// on top.
pub fn pod_requests(pod: &Pod) -> Resources {
    pod_requests_with(pod, container_requests)
}

/// Like [`pod_requests`], but a container without a CPU or memory request counts as
/// [`DEFAULT_MILLI_CPU_REQUEST`]/[`DEFAULT_MEMORY_REQUEST`] — what upstream's scoring plugins use
/// (`NonMissingContainerRequests`) so that best-effort pods still spread. Only CPU and memory are
/// returned.
pub fn pod_non_zero_requests(pod: &Pod) -> (i64, i64) {
    let r = pod_requests_with(pod, |c| {
        let mut r = container_requests(c);
        let requests = c.resources.as_ref().and_then(|r| r.requests.as_ref());
        if requests.is_none_or(|m| !m.contains_key("cpu")) {
            r.milli_cpu = DEFAULT_MILLI_CPU_REQUEST;
        }
        if requests.is_none_or(|m| !m.contains_key("memory")) {
            r.memory = DEFAULT_MEMORY_REQUEST;
        }
        r
    });
    (r.milli_cpu, r.memory)
}

fn pod_requests_with(pod: &Pod, per_container: impl Fn(&Container) -> Resources) -> Resources {
    let Some(spec) = pod.spec.as_ref() else {
        return Resources::default();
    };
    let mut reqs = Resources::default();
    for c in &spec.containers {
        reqs.add(&per_container(c));
    }
    let mut sidecars = Resources::default();
    let mut init_peak = Resources::default();
    for c in spec.init_containers.iter().flatten() {
        let mut this = per_container(c);
        if is_restartable_init(c) {
            sidecars.add(&this);
            this = sidecars.clone();
        } else {
            this.add(&sidecars);
        }
        init_peak.set_max(&this);
    }
    reqs.add(&sidecars);
    reqs.set_max(&init_peak);
    if let Some(overhead) = spec.overhead.as_ref() {
        reqs.add(&Resources::from_map(Some(overhead)));
    }
    reqs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(json: serde_json::Value) -> Pod {
        serde_json::from_value(json).expect("fixture pod")
    }

    fn c(name: &str, cpu: &str, mem: &str) -> serde_json::Value {
        serde_json::json!({"name": name, "image": "x", "resources": {"requests": {"cpu": cpu, "memory": mem}}})
    }

    #[test]
    fn quantities_round_up_like_upstream() {
        assert_eq!(milli_value(&Quantity("100m".into())), 100);
        assert_eq!(milli_value(&Quantity("1.5".into())), 1500);
        assert_eq!(milli_value(&Quantity("1n".into())), 1);
        assert_eq!(value(&Quantity("1Gi".into())), 1 << 30);
        assert_eq!(value(&Quantity("500Mi".into())), 500 << 20);
        assert_eq!(value(&Quantity("bogus".into())), 0);
    }

    #[test]
    fn init_containers_use_max_of_sum_rule() {
        let cases = [
            // (containers, init containers, expected cpu, expected memory)
            (
                vec![c("a", "100m", "100Mi"), c("b", "200m", "100Mi")],
                vec![c("i", "250m", "50Mi")],
                300,
                200 << 20,
            ),
            (
                vec![c("a", "100m", "100Mi")],
                vec![c("i", "1", "50Mi"), c("j", "500m", "1Gi")],
                1000,
                1 << 30,
            ),
            (vec![c("a", "100m", "100Mi")], vec![], 100, 100 << 20),
        ];
        for (containers, inits, cpu, mem) in cases {
            let p = pod(
                serde_json::json!({"spec": {"containers": containers, "initContainers": inits}}),
            );
            let r = pod_requests(&p);
            assert_eq!((r.milli_cpu, r.memory), (cpu, mem));
        }
    }

    #[test]
    fn sidecar_init_containers_add_to_the_steady_state() {
        let mut sidecar = c("s", "200m", "10Mi");
        sidecar["restartPolicy"] = "Always".into();
        let p = pod(serde_json::json!({"spec": {
            "containers": [c("a", "100m", "100Mi")],
            "initContainers": [sidecar, c("i", "250m", "10Mi")]
        }}));
        // Init peak: 250m + 200m sidecar = 450m; steady state: 100m + 200m = 300m.
        assert_eq!(pod_requests(&p).milli_cpu, 450);
    }

    #[test]
    fn overhead_is_added_to_requests() {
        let p = pod(serde_json::json!({"spec": {
            "containers": [c("a", "100m", "100Mi")],
            "overhead": {"cpu": "50m", "memory": "10Mi"}
        }}));
        let r = pod_requests(&p);
        assert_eq!((r.milli_cpu, r.memory), (150, 110 << 20));
    }

    #[test]
    fn containers_without_requests_score_as_defaults() {
        let p = pod(serde_json::json!({"spec": {"containers": [{"name": "a", "image": "x"}]}}));
        assert!(pod_requests(&p).is_zero());
        assert_eq!(
            pod_non_zero_requests(&p),
            (DEFAULT_MILLI_CPU_REQUEST, DEFAULT_MEMORY_REQUEST)
        );
    }
}
