//! NodeName: a pod that names its node (`spec.nodeName`) fits only there. Mirrors upstream
//! `pkg/scheduler/framework/plugins/nodename`.

use crate::framework::{Code, CycleState, Rejection};
use crate::snapshot::NodeInfo;

/// Upstream `nodename.ErrReason`.
pub const ERR_REASON: &str = "node(s) didn't match the requested node name";

/// Filter.
pub fn filter(cs: &CycleState<'_>, node: &NodeInfo) -> Result<(), Rejection> {
    match cs.node_name {
        Some(n) if !n.is_empty() && n != node.name => Err(Rejection::Reason(
            ERR_REASON,
            Code::UnschedulableAndUnresolvable,
        )),
        _ => Ok(()),
    }
}
