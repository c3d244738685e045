//! Pod admission on the node, as the kubelet's `lifecycle.predicateAdmitHandler` does it: the
//! pod's OS (node selector label, then `spec.os.name`) must match the node, then the pod must fit
//! in allocatable minus the requests of the pods already admitted. A rejected pod is marked
//! `Failed` with the reason and `Pod was rejected: <message>` (upstream `rejectPod`).

use k8s_openapi::api::core::v1::Pod;
use tandem_core::resource::PodResourcesOptions;

use crate::config::{NodeOs, Resources};

/// Why a pod was not admitted: `reason` is the status reason and event reason, `message`
/// the upstream text (without the `Pod was rejected: ` prefix).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    pub reason: String,
    pub message: String,
}

impl Rejection {
    /// The pod status message the kubelet writes.
    pub fn status_message(&self) -> String {
        format!("Pod was rejected: {}", self.message)
    }
}

/// A pod's effective requests in the node's units: the shared upstream `resource.PodRequests`
/// ([`tandem_core::resource::pod_requests`], as the scheduler counts them), with `pods` 1.
pub fn pod_requests(pod: &Pod) -> Resources {
    let r = tandem_core::resource::pod_requests(pod, &PodResourcesOptions::default());
    Resources {
        cpu_millis: r.milli_cpu,
        memory: r.memory,
        ephemeral_storage: r.ephemeral_storage,
        pods: 1,
    }
}

/// The kubelet's OS checks: a `kubernetes.io/os` node selector naming another OS is
/// `PodOSSelectorNodeLabelDoesNotMatch`; a `spec.os.name` naming another OS is
/// `PodOSNotSupported`.
pub fn check_os(pod: &Pod, node_os: NodeOs) -> Result<(), Rejection> {
    let spec = pod.spec.as_ref();
    let selector = spec
        .and_then(|s| s.node_selector.as_ref())
        .and_then(|m| m.get("kubernetes.io/os"));
    if selector.is_some_and(|os| os != node_os.as_str()) {
        return Err(Rejection {
            reason: "PodOSSelectorNodeLabelDoesNotMatch".into(),
            message: "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label"
                .into(),
        });
    }
    let os_field = spec.and_then(|s| s.os.as_ref()).map(|o| o.name.as_str());
    if os_field.is_some_and(|os| os != node_os.as_str()) {
        return Err(Rejection {
            reason: "PodOSNotSupported".into(),
            message: "Failed to admit pod as the OS field doesn't match node OS".into(),
        });
    }
    Ok(())
}

/// Resource fit against `allocatable` with `used` already taken by `running_pods` admitted
/// pods. Messages as upstream's `InsufficientResourceError` (cpu in millicores, bytes for
/// memory); the first failing resource, in the order pods, cpu, memory, ephemeral-storage.
pub fn check_fit(
    pod: &Pod,
    allocatable: Resources,
    used: Resources,
    running_pods: i64,
) -> Result<(), Rejection> {
    let req = pod_requests(pod);
    let insufficient = |name: &str, requested: i64, used: i64, capacity: i64| Rejection {
        reason: format!("OutOf{name}"),
        message: format!(
            "Node didn't have enough resource: {name}, requested: {requested}, used: {used}, capacity: {capacity}"
        ),
    };
    if running_pods + 1 > allocatable.pods {
        return Err(insufficient("pods", 1, running_pods, allocatable.pods));
    }
    if req.cpu_millis > 0 && used.cpu_millis + req.cpu_millis > allocatable.cpu_millis {
        return Err(insufficient(
            "cpu",
            req.cpu_millis,
            used.cpu_millis,
            allocatable.cpu_millis,
        ));
    }
    if req.memory > 0 && used.memory + req.memory > allocatable.memory {
        return Err(insufficient(
            "memory",
            req.memory,
            used.memory,
            allocatable.memory,
        ));
    }
    if req.ephemeral_storage > 0
        && used.ephemeral_storage + req.ephemeral_storage > allocatable.ephemeral_storage
    {
        return Err(insufficient(
            "ephemeral-storage",
            req.ephemeral_storage,
            used.ephemeral_storage,
            allocatable.ephemeral_storage,
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(json: serde_json::Value) -> Pod {
        serde_json::from_value(json).expect("pod fixture")
    }

    #[test]
    fn linux_pod_on_windows_node_is_pod_os_not_supported() {
        let p = pod(
            serde_json::json!({"metadata": {"name": "p"}, "spec": {"os": {"name": "linux"}, "containers": [{"name": "a"}]}}),
        );
        let r = check_os(&p, NodeOs::Windows).expect_err("rejected");
        assert_eq!(r.reason, "PodOSNotSupported");
        assert_eq!(
            r.status_message(),
            "Pod was rejected: Failed to admit pod as the OS field doesn't match node OS"
        );
        assert!(check_os(&p, NodeOs::Linux).is_ok());
    }

    #[test]
    fn os_selector_mismatch_is_checked_before_the_os_field() {
        let p = pod(
            serde_json::json!({"metadata": {"name": "p"}, "spec": {"os": {"name": "windows"},
            "nodeSelector": {"kubernetes.io/os": "windows"}, "containers": [{"name": "a"}]}}),
        );
        let r = check_os(&p, NodeOs::Linux).expect_err("rejected");
        assert_eq!(r.reason, "PodOSSelectorNodeLabelDoesNotMatch");
        assert!(
            r.message
                .contains("`kubernetes.io/os` label doesn't match node label")
        );
    }

    #[test]
    fn out_of_cpu_memory_and_pods_use_upstream_messages() {
        let alloc = Resources {
            cpu_millis: 1000,
            memory: 1 << 30,
            ephemeral_storage: 1 << 34,
            pods: 2,
        };
        let p = pod(
            serde_json::json!({"metadata": {"name": "p"}, "spec": {"containers": [
            {"name": "a", "resources": {"requests": {"cpu": "600m", "memory": "256Mi"}}}]}}),
        );
        let used = Resources {
            cpu_millis: 500,
            ..Resources::default()
        };
        let r = check_fit(&p, alloc, used, 1).expect_err("cpu");
        assert_eq!(r.reason, "OutOfcpu");
        assert_eq!(
            r.message,
            "Node didn't have enough resource: cpu, requested: 600, used: 500, capacity: 1000"
        );
        let used = Resources {
            memory: 900 << 20,
            ..Resources::default()
        };
        let r = check_fit(&p, alloc, used, 1).expect_err("memory");
        assert_eq!(r.reason, "OutOfmemory");
        assert_eq!(
            r.message,
            format!(
                "Node didn't have enough resource: memory, requested: {}, used: {}, capacity: {}",
                256 << 20,
                900 << 20,
                1 << 30
            )
        );
        let r = check_fit(&p, alloc, Resources::default(), 2).expect_err("pods");
        assert_eq!(
            (r.reason.as_str(), r.message.as_str()),
            (
                "OutOfpods",
                "Node didn't have enough resource: pods, requested: 1, used: 2, capacity: 2"
            )
        );
        assert!(check_fit(&p, alloc, Resources::default(), 0).is_ok());
    }

    #[test]
    fn requests_take_the_larger_of_containers_and_init_containers() {
        let p = pod(serde_json::json!({"metadata": {"name": "p"}, "spec": {
            "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "2"}}}],
            // Requests as API defaulting leaves them: copied from the limits.
            "containers": [{"name": "a", "resources": {"limits": {"cpu": "500m", "memory": "1Gi"},
                                                       "requests": {"cpu": "500m", "memory": "1Gi"}}},
                           {"name": "b", "resources": {"requests": {"cpu": "500m"}}}]}}));
        let r = pod_requests(&p);
        assert_eq!((r.cpu_millis, r.memory, r.pods), (2000, 1 << 30, 1));
    }
}
