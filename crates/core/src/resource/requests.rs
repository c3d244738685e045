//! A pod's effective resource requests, for the scheduler's NodeResourcesFit and scoring plugins,
//! the node agent's admission and ResourceQuota. Follows upstream `k8s.io/component-helpers/resource`
//! `PodRequests` (regular containers add up; each init container runs alone beside the
//! restartable "sidecar" init containers started before it; the pod needs the larger of that peak
//! and its steady state; RuntimeClass overhead on top) with its `NonMissingContainerRequests` and
//! `ExcludeOverhead` options, and the scheduler's `framework.Resource` units.
//!
//! The container arithmetic ([`aggregate_containers`], upstream's `AggregateContainerRequests`
//! and `AggregateContainerLimits`) works on any [`ResourceAmounts`]: the scheduler's
//! [`Resources`] here, and `crate::quota`'s exact `ResourceList`, which keeps quantities as
//! written for `status.used` and LimitRanger (upstream has `v1.ResourceList` for both).
//!
//! Pod-level resources (`spec.resources`, upstream's `PodLevelResources` gate) are not supported
//! by tandem and are not read. Requests are read as given: API defaulting has already copied
//! limits into missing requests (upstream `SetDefaults_Pod`, `crate::defaults`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::validation::quantity::Quantity as Parsed;

/// An amount of each resource, in the units upstream's scheduler compares: milli-CPU, bytes of
/// memory and ephemeral storage, whole units of every other resource (`nvidia.com/gpu`,
/// `hugepages-2Mi`, …), kept by name in `scalar`. `pods` is not a resource here.
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
    /// Builds from a `resources.requests`/`allocatable`/`overhead` map. Unparseable quantities
    /// count as zero (validation rejects them before they reach a component); `pods` is skipped.
    pub fn from_map(map: Option<&BTreeMap<String, Quantity>>) -> Resources {
        let mut r = Resources::default();
        for (name, q) in map.into_iter().flatten() {
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

    /// Subtracts `other` from `self` (a pod leaving a node); scalars that reach zero go.
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

/// A quantity in milli-units, rounded up (upstream `Quantity.MilliValue`); 0 when unparseable.
pub fn milli_value(q: &Quantity) -> i64 {
    Parsed::parse(&q.0).map_or(0, |p| ceil_div(p.nanos(), 1_000_000))
}

/// A quantity in whole units, rounded up (upstream `Quantity.Value`); 0 when unparseable.
pub fn value(q: &Quantity) -> i64 {
    Parsed::parse(&q.0).map_or(0, |p| ceil_div(p.nanos(), 1_000_000_000))
}

fn ceil_div(n: i128, d: i128) -> i64 {
    let q = n / d + i128::from(n % d > 0);
    i64::try_from(q).unwrap_or(if q < 0 { i64::MIN } else { i64::MAX })
}

/// What a container that sets no CPU or memory request counts as requesting (upstream
/// `PodResourcesOptions.NonMissingContainerRequests`, which the scheduler's scoring fills with
/// its defaults so that best-effort pods still spread). An explicit request, even zero, stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NonMissingRequests {
    pub milli_cpu: i64,
    pub memory: i64,
}

/// Upstream `PodResourcesOptions`, for the options tandem uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PodResourcesOptions {
    /// Leave RuntimeClass overhead out (upstream `ExcludeOverhead`).
    pub exclude_overhead: bool,
    /// Stand-ins for missing container CPU and memory requests.
    pub non_missing_container_requests: Option<NonMissingRequests>,
}

fn container_requests(c: &Container, opts: &PodResourcesOptions) -> Resources {
    let requests = c.resources.as_ref().and_then(|r| r.requests.as_ref());
    let mut r = Resources::from_map(requests);
    if let Some(defaults) = opts.non_missing_container_requests {
        if requests.is_none_or(|m| !m.contains_key("cpu")) {
            r.milli_cpu = defaults.milli_cpu;
        }
        if requests.is_none_or(|m| !m.contains_key("memory")) {
            r.memory = defaults.memory;
        }
    }
    r
}

/// Amounts of resources that the container arithmetic adds up and compares, resource by
/// resource.
pub trait ResourceAmounts: Clone + Default {
    /// Adds `other` to `self`.
    fn add_amounts(&mut self, other: &Self);
    /// Sets each resource to the larger of `self` and `other` (`self`'s on a tie).
    fn max_amounts(&mut self, other: &Self);
}

impl ResourceAmounts for Resources {
    fn add_amounts(&mut self, other: &Self) {
        self.add(other);
    }
    fn max_amounts(&mut self, other: &Self) {
        self.set_max(other);
    }
}

/// What a pod's containers need together (upstream `AggregateContainerRequests`, and
/// `AggregateContainerLimits` over limits), from each regular container's amounts and each init
/// container's with whether it is restartable (`restartPolicy: Always`, a "sidecar").
///
/// The regular containers run together, so their amounts add up. Init containers run one at a
/// time before them, each beside the sidecars started before it; sidecars keep running, so they
/// add to the steady state too. The pod needs the larger of the init peak and the steady state.
pub fn aggregate_containers<R: ResourceAmounts>(
    containers: impl IntoIterator<Item = R>,
    init_containers: impl IntoIterator<Item = (R, bool)>,
) -> R {
    let mut total = R::default();
    for c in containers {
        total.add_amounts(&c);
    }
    let mut sidecars = R::default();
    let mut init_peak = R::default();
    for (own, restartable) in init_containers {
        let running = if restartable {
            sidecars.add_amounts(&own);
            sidecars.clone()
        } else {
            let mut running = own;
            running.add_amounts(&sidecars);
            running
        };
        init_peak.max_amounts(&running);
    }
    total.add_amounts(&sidecars);
    total.max_amounts(&init_peak);
    total
}

/// What a pod asks of a node (upstream `resource.PodRequests`): its containers' requests as
/// [`aggregate_containers`] adds them up, plus its overhead.
pub fn pod_requests(pod: &Pod, opts: &PodResourcesOptions) -> Resources {
    let Some(spec) = pod.spec.as_ref() else {
        return Resources::default();
    };
    let mut reqs = aggregate_containers(
        spec.containers.iter().map(|c| container_requests(c, opts)),
        spec.init_containers.iter().flatten().map(|c| {
            let restartable = c.restart_policy.as_deref() == Some("Always");
            (container_requests(c, opts), restartable)
        }),
    );
    if !opts.exclude_overhead
        && let Some(overhead) = spec.overhead.as_ref()
    {
        reqs.add(&Resources::from_map(Some(overhead)));
    }
    reqs
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn pod(spec: Value) -> Pod {
        serde_json::from_value(json!({"spec": spec})).expect("pod fixture")
    }

    fn c(name: &str, requests: Value) -> Value {
        json!({"name": name, "image": "x", "resources": {"requests": requests}})
    }

    fn sidecar(name: &str, requests: Value) -> Value {
        let mut s = c(name, requests);
        s["restartPolicy"] = "Always".into();
        s
    }

    fn amounts(cpu: i64, memory: i64) -> Resources {
        Resources {
            milli_cpu: cpu,
            memory,
            ..Resources::default()
        }
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
    fn pod_requests_follow_upstreams_init_container_and_sidecar_rules() {
        // (name, pod spec, cpu, memory) — the shapes of upstream's TestPodRequestsAndLimits and
        // its restartable-init-container cases.
        let cases = [
            (
                "no spec containers",
                json!({"containers": []}),
                amounts(0, 0),
            ),
            (
                "regular containers add up",
                json!({"containers": [c("a", json!({"cpu": "100m", "memory": "100Mi"})), c("b", json!({"cpu": "200m", "memory": "100Mi"}))]}),
                amounts(300, 200 << 20),
            ),
            (
                "a small init container hides behind the containers",
                json!({"containers": [c("a", json!({"cpu": "100m", "memory": "100Mi"})), c("b", json!({"cpu": "200m", "memory": "100Mi"}))],
                       "initContainers": [c("i", json!({"cpu": "250m", "memory": "50Mi"}))]}),
                amounts(300, 200 << 20),
            ),
            (
                "init containers take the max per resource",
                json!({"containers": [c("a", json!({"cpu": "100m", "memory": "100Mi"}))],
                       "initContainers": [c("i", json!({"cpu": "1", "memory": "50Mi"})), c("j", json!({"cpu": "500m", "memory": "1Gi"}))]}),
                amounts(1000, 1 << 30),
            ),
            (
                "a sidecar adds to the steady state and to later init containers",
                json!({"containers": [c("a", json!({"cpu": "100m", "memory": "100Mi"}))],
                       "initContainers": [sidecar("s", json!({"cpu": "200m", "memory": "10Mi"})), c("i", json!({"cpu": "250m", "memory": "10Mi"}))]}),
                amounts(450, 110 << 20),
            ),
            (
                "an init container before a sidecar runs without it",
                json!({"containers": [c("a", json!({"cpu": "100m"}))],
                       "initContainers": [c("i", json!({"cpu": "1"})), sidecar("s", json!({"cpu": "200m"}))]}),
                amounts(1000, 0),
            ),
            (
                "sidecars alone add up",
                json!({"containers": [c("a", json!({"cpu": "100m"}))],
                       "initContainers": [sidecar("s1", json!({"cpu": "200m"})), sidecar("s2", json!({"cpu": "300m"}))]}),
                amounts(600, 0),
            ),
            (
                "overhead is added",
                json!({"containers": [c("a", json!({"cpu": "100m", "memory": "100Mi"}))], "overhead": {"cpu": "50m", "memory": "10Mi"}}),
                amounts(150, 110 << 20),
            ),
        ];
        for (name, spec, want) in cases {
            assert_eq!(
                pod_requests(&pod(spec), &PodResourcesOptions::default()),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn extended_resources_and_ephemeral_storage_are_kept_by_name() {
        let p = pod(json!({"containers": [
            c("a", json!({"nvidia.com/gpu": "1", "ephemeral-storage": "1Gi"})),
            c("b", json!({"nvidia.com/gpu": "2", "pods": "3"}))
        ]}));
        let r = pod_requests(&p, &PodResourcesOptions::default());
        assert_eq!(
            r.scalar,
            BTreeMap::from([("nvidia.com/gpu".to_string(), 3)])
        );
        assert_eq!(r.ephemeral_storage, 1 << 30);
    }

    #[test]
    fn options_exclude_overhead_and_fill_missing_requests() {
        let p = pod(
            json!({"containers": [{"name": "a", "image": "x"}, c("b", json!({"cpu": "0"}))],
                           "overhead": {"cpu": "50m"}}),
        );
        let plain = pod_requests(&p, &PodResourcesOptions::default());
        assert_eq!(plain, amounts(50, 0));
        let no_overhead = PodResourcesOptions {
            exclude_overhead: true,
            ..PodResourcesOptions::default()
        };
        assert!(pod_requests(&p, &no_overhead).is_zero());
        let filled = PodResourcesOptions {
            exclude_overhead: true,
            non_missing_container_requests: Some(NonMissingRequests {
                milli_cpu: 100,
                memory: 200,
            }),
        };
        // Container a gets both stand-ins; b keeps its explicit zero CPU but gets memory.
        assert_eq!(pod_requests(&p, &filled), amounts(100, 400));
    }

    #[test]
    fn arithmetic_saturates_and_drops_emptied_scalars() {
        let mut r = amounts(i64::MAX, 1);
        r.add(&amounts(1, 1));
        assert_eq!(r.milli_cpu, i64::MAX);
        let gpu = Resources {
            scalar: BTreeMap::from([("gpu".to_string(), 1)]),
            ..Resources::default()
        };
        let mut total = gpu.clone();
        total.sub(&gpu);
        assert!(total.scalar.is_empty() && total.is_zero());
    }
}
