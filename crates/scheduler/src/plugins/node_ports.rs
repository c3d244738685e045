//! NodePorts: two pods cannot take the same host port (per protocol; a `0.0.0.0` host IP
//! conflicts with every IP). Mirrors upstream `pkg/scheduler/framework/plugins/nodeports`.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use crate::cycle_state::CycleState;
use crate::plugin::{Code, FilterPlugin, Plugin, PreFilterPlugin, Rejection, Status};
use crate::snapshot::{NodeInfo, Snapshot};

/// Upstream `nodeports.ErrReason`.
pub const ERR_REASON: &str = "node(s) didn't have free ports for the requested pod ports";

/// A host port a container asks for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HostPort {
    pub protocol: String,
    pub ip: String,
    pub port: i32,
}

impl HostPort {
    /// Whether two host ports cannot both be bound.
    pub fn conflicts(&self, other: &HostPort) -> bool {
        self.port == other.port
            && self.protocol == other.protocol
            && (self.ip == other.ip || self.ip == "0.0.0.0" || other.ip == "0.0.0.0")
    }
}

/// The host ports of a pod's containers (init containers excluded, as upstream), defaulting the
/// protocol to TCP and the IP to `0.0.0.0`.
pub fn host_ports(pod: &Pod) -> Vec<HostPort> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    spec.containers
        .iter()
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(|p| {
            let port = p.host_port.filter(|hp| *hp > 0)?;
            Some(HostPort {
                protocol: p
                    .protocol
                    .clone()
                    .filter(|s| !s.is_empty())
                    .unwrap_or_else(|| "TCP".into()),
                ip: p
                    .host_ip
                    .clone()
                    .filter(|s| !s.is_empty())
                    .unwrap_or_else(|| "0.0.0.0".into()),
                port,
            })
        })
        .collect()
}

/// The NodePorts plugin (pre-filter, filter).
#[derive(Debug, Clone, Copy, Default)]
pub struct NodePorts;

/// The pod's host ports (upstream `preFilterState`).
#[derive(Debug)]
struct Wanted(Vec<HostPort>);

impl Plugin for NodePorts {
    fn name(&self) -> &'static str {
        "NodePorts"
    }

    fn as_pre_filter(self: Arc<Self>) -> Option<Arc<dyn PreFilterPlugin>> {
        Some(self)
    }

    fn as_filter(self: Arc<Self>) -> Option<Arc<dyn FilterPlugin>> {
        Some(self)
    }
}

impl PreFilterPlugin for NodePorts {
    /// A pod without host ports skips the filter.
    fn pre_filter(&self, cs: &mut CycleState<'_>, _: &Snapshot) -> Status {
        let ports = host_ports(cs.pod);
        if ports.is_empty() {
            return Status::Skip;
        }
        cs.write(Wanted(ports));
        Status::Success
    }
}

impl FilterPlugin for NodePorts {
    fn filter(&self, cs: &CycleState<'_>, node: &NodeInfo) -> Result<(), Rejection> {
        let Some(Wanted(wanted)) = cs.read() else {
            return Ok(());
        };
        let clash = wanted
            .iter()
            .any(|want| node.used_ports.iter().any(|used| used.conflicts(want)));
        if clash {
            Err(Rejection::new(ERR_REASON, Code::Unschedulable))
        } else {
            Ok(())
        }
    }
}
