//! The scheduler's view of resources: a pod's requests as fit and scoring count them, and a node's
//! allocatable pods. The [`Resources`] type and upstream's `resource.PodRequests` are the shared
//! ones of `tandem_core::resource` (the node agent admits pods with the same); this module adds
//! the scheduler's defaults for containers without requests (upstream
//! `pkg/scheduler/util.GetNonzeroRequests`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use tandem_core::resource::{NonMissingRequests, PodResourcesOptions};

pub use tandem_core::resource::{Resources, milli_value, value};

/// Upstream `DefaultMilliCPURequest`: the CPU a container without a request is scored as using.
pub const DEFAULT_MILLI_CPU_REQUEST: i64 = 100;
/// Upstream `DefaultMemoryRequest` (200 MiB): the memory a container without a request is scored
/// as using.
pub const DEFAULT_MEMORY_REQUEST: i64 = 200 * 1024 * 1024;

/// The `pods` entry of a node's allocatable (how many pods it may run); 0 when absent.
pub fn allowed_pods(map: Option<&BTreeMap<String, Quantity>>) -> i64 {
    map.and_then(|m| m.get("pods")).map_or(0, value)
}

/// What a pod asks of a node: upstream `resource.PodRequests`, the shared
/// [`tandem_core::resource::pod_requests`].
pub fn pod_requests(pod: &Pod) -> Resources {
    tandem_core::resource::pod_requests(pod, &PodResourcesOptions::default())
}

/// Like [`pod_requests`], but a container without a CPU or memory request counts as
/// [`DEFAULT_MILLI_CPU_REQUEST`]/[`DEFAULT_MEMORY_REQUEST`] — what upstream's scoring plugins use
/// (`NonMissingContainerRequests`) so that best-effort pods still spread. Only CPU and memory are
/// returned.
pub fn pod_non_zero_requests(pod: &Pod) -> (i64, i64) {
    let opts = PodResourcesOptions {
        non_missing_container_requests: Some(NonMissingRequests {
            milli_cpu: DEFAULT_MILLI_CPU_REQUEST,
            memory: DEFAULT_MEMORY_REQUEST,
        }),
        ..PodResourcesOptions::default()
    };
    let r = tandem_core::resource::pod_requests(pod, &opts);
    (r.milli_cpu, r.memory)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(json: serde_json::Value) -> Pod {
        serde_json::from_value(json).expect("fixture pod")
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

    #[test]
    fn allowed_pods_reads_the_pods_entry() {
        let alloc =
            std::collections::BTreeMap::from([("pods".to_string(), Quantity("110".into()))]);
        assert_eq!(allowed_pods(Some(&alloc)), 110);
        assert_eq!(allowed_pods(None), 0);
    }
}
