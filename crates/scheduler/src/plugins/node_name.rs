//! NodeName: a pod that names its node (`spec.nodeName`) fits only there. Mirrors upstream
//! `pkg/scheduler/framework/plugins/nodename`.

use std::sync::Arc;

use crate::cycle_state::CycleState;
use crate::plugin::{Code, FilterPlugin, Plugin, Rejection};
use crate::snapshot::NodeInfo;

/// Upstream `nodename.ErrReason`.
pub const ERR_REASON: &str = "node(s) didn't match the requested node name";

/// The NodeName plugin (filter, node-only).
#[derive(Debug, Clone, Copy, Default)]
pub struct NodeName;

impl Plugin for NodeName {
    fn name(&self) -> &'static str {
        "NodeName"
    }

    fn as_filter(self: Arc<Self>) -> Option<Arc<dyn FilterPlugin>> {
        Some(self)
    }
}

impl FilterPlugin for NodeName {
    fn filter(&self, cs: &CycleState<'_>, node: &NodeInfo) -> Result<(), Rejection> {
        match cs.node_name {
            Some(n) if !n.is_empty() && n != node.name => Err(Rejection::new(
                ERR_REASON,
                Code::UnschedulableAndUnresolvable,
            )),
            _ => Ok(()),
        }
    }

    fn node_only(&self) -> bool {
        true
    }

    fn sign(&self, cs: &CycleState<'_>, out: &mut Vec<u8>) -> Result<(), serde_json::Error> {
        serde_json::to_writer(out, &cs.node_name)
    }
}
