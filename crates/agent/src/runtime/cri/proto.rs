//! The CRI v1 API (`runtime.v1`, k8s.io/cri-api `pkg/apis/runtime/v1/api.proto`): the messages
//! and the tonic clients the `k8s-cri` crate generates from upstream's `.proto` at build time
//! (prost/tonic code generation, so the build needs `protoc`; `scripts/install-deps.sh` installs
//! it, or `PROTOC` names one).
//!
//! Everything in `k8s_cri::v1` is re-exported here, so the backend reads `proto::PodSandboxConfig`
//! and the like. As prost generates them, enumerations are `i32` fields with typed accessors
//! (`namespace_options.pid()` / `set_pid(NamespaceMode::Container)`), optional messages are
//! `Option<…>`, and maps are `HashMap`s: sort before iterating where order shows.
//!
//! What the generated code does not have lives here too: the names of the two conditions every
//! runtime reports in `Status` (the kubelet's `runtimeapi.RuntimeReady`/`NetworkReady`) and a
//! lookup of a condition by type.

pub use k8s_cri::v1::*;

/// The condition type every runtime reports: containers can be run.
pub const RUNTIME_READY: &str = "RuntimeReady";
/// The condition type every runtime reports: pod networking (CNI) is initialised.
pub const NETWORK_READY: &str = "NetworkReady";

/// The condition of type `condition_type` (such as [`NETWORK_READY`]) in a runtime's status, if
/// the runtime reports it.
pub fn runtime_condition<'a>(
    status: &'a RuntimeStatus,
    condition_type: &str,
) -> Option<&'a RuntimeCondition> {
    status
        .conditions
        .iter()
        .find(|c| c.r#type == condition_type)
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;

    #[test]
    fn a_condition_is_found_by_its_type() {
        let status = RuntimeStatus {
            conditions: vec![
                RuntimeCondition {
                    r#type: RUNTIME_READY.into(),
                    status: true,
                    ..Default::default()
                },
                RuntimeCondition {
                    r#type: NETWORK_READY.into(),
                    status: false,
                    reason: "NetworkPluginNotReady".into(),
                    ..Default::default()
                },
            ],
        };
        let network = runtime_condition(&status, NETWORK_READY).expect("reported");
        assert!(!network.status);
        assert_eq!(network.reason, "NetworkPluginNotReady");
        assert!(runtime_condition(&status, "Other").is_none());
    }

    #[test]
    fn the_generated_messages_use_upstream_field_numbers() {
        // StopContainerRequest: field 1 (len) "ab", field 2 (varint) 30, as in api.proto.
        let request = StopContainerRequest {
            container_id: "ab".into(),
            timeout: 30,
        };
        assert_eq!(request.encode_to_vec(), [0x0a, 2, b'a', b'b', 0x10, 30]);
        // NamespaceOption: network (field 1) = NODE (2), pid (field 2) = CONTAINER (1).
        let mut options = NamespaceOption::default();
        options.set_pid(NamespaceMode::Container);
        options.set_network(NamespaceMode::Node);
        assert_eq!(options.encode_to_vec(), [0x08, 2, 0x10, 1]);
    }
}
