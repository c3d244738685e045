//! NodeUnschedulable: cordoned nodes (`spec.unschedulable`) take no new pods, unless the pod
//! tolerates the `node.kubernetes.io/unschedulable:NoSchedule` taint (as DaemonSet pods do).
//! Mirrors upstream `pkg/scheduler/framework/plugins/nodeunschedulable`.

use k8s_openapi::api::core::v1::Taint;

use crate::framework::{Code, CycleState, Rejection};
use crate::snapshot::NodeInfo;
use tandem_core::scheduling::taints::tolerations_tolerate_taint;

/// Upstream `nodeunschedulable.ErrReasonUnschedulable`.
pub const ERR_REASON: &str = "node(s) were unschedulable";
/// The taint a cordoned node is treated as carrying.
pub const TAINT_UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";

/// Filter.
pub fn filter(cs: &CycleState<'_>, node: &NodeInfo) -> Result<(), Rejection> {
    if !node.unschedulable {
        return Ok(());
    }
    let taint = Taint {
        key: TAINT_UNSCHEDULABLE.into(),
        effect: "NoSchedule".into(),
        ..Taint::default()
    };
    if tolerations_tolerate_taint(cs.tolerations, &taint) {
        return Ok(());
    }
    Err(Rejection::Reason(
        ERR_REASON,
        Code::UnschedulableAndUnresolvable,
    ))
}
