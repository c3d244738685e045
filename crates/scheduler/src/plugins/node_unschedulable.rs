//! NodeUnschedulable: cordoned nodes (`spec.unschedulable`) take no new pods, unless the pod
//! tolerates the `node.kubernetes.io/unschedulable:NoSchedule` taint (as DaemonSet pods do).
//! Mirrors upstream `pkg/scheduler/framework/plugins/nodeunschedulable`.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Taint;
use tandem_core::scheduling::taints::tolerations_tolerate_taint;

use crate::cycle_state::CycleState;
use crate::plugin::{Code, FilterPlugin, Plugin, Rejection};
use crate::snapshot::NodeInfo;

/// Upstream `nodeunschedulable.ErrReasonUnschedulable`.
pub const ERR_REASON: &str = "node(s) were unschedulable";
/// The taint a cordoned node is treated as carrying.
pub const TAINT_UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";

/// The NodeUnschedulable plugin (filter, node-only).
#[derive(Debug, Clone, Copy, Default)]
pub struct NodeUnschedulable;

/// Whether the pod of `cs` tolerates the taint of a cordoned node.
fn tolerates_cordon(cs: &CycleState<'_>) -> bool {
    let taint = Taint {
        key: TAINT_UNSCHEDULABLE.into(),
        effect: "NoSchedule".into(),
        ..Taint::default()
    };
    tolerations_tolerate_taint(cs.tolerations, &taint)
}

impl Plugin for NodeUnschedulable {
    fn name(&self) -> &'static str {
        "NodeUnschedulable"
    }

    fn as_filter(self: Arc<Self>) -> Option<Arc<dyn FilterPlugin>> {
        Some(self)
    }
}

impl FilterPlugin for NodeUnschedulable {
    fn filter(&self, cs: &CycleState<'_>, node: &NodeInfo) -> Result<(), Rejection> {
        if !node.unschedulable || tolerates_cordon(cs) {
            return Ok(());
        }
        Err(Rejection::new(
            ERR_REASON,
            Code::UnschedulableAndUnresolvable,
        ))
    }

    fn node_only(&self) -> bool {
        true
    }

    fn sign(&self, cs: &CycleState<'_>, out: &mut Vec<u8>) -> Result<(), serde_json::Error> {
        serde_json::to_writer(out, &tolerates_cordon(cs))
    }
}
