//! TaintToleration: a pod lands only on nodes whose `NoSchedule`/`NoExecute` taints it tolerates;
//! untolerated `PreferNoSchedule` taints lower a node's score. Mirrors upstream
//! `pkg/scheduler/framework/plugins/tainttoleration`; the predicates are the shared ones of
//! `tandem_core::scheduling::taints` (upstream `v1helper.FindMatchingUntoleratedTaint`).

use k8s_openapi::api::core::v1::{Taint, Toleration};
use tandem_core::scheduling::taints::{
    PREFER_NO_SCHEDULE, does_not_schedule, find_matching_untolerated_taint, tolerates,
};

use crate::framework::{CycleState, Rejection};
use crate::snapshot::NodeInfo;

/// Filter: the first `NoSchedule`/`NoExecute` taint the pod does not tolerate.
pub fn filter(cs: &CycleState<'_>, node: &NodeInfo) -> Result<(), Rejection> {
    match find_matching_untolerated_taint(&node.taints, cs.tolerations, does_not_schedule) {
        Some((i, _)) => Err(Rejection::UntoleratedTaint(i)),
        None => Ok(()),
    }
}

/// The upstream message for an untolerated taint.
pub fn reason(taint: &Taint) -> String {
    format!(
        "node(s) had untolerated taint {{{}: {}}}",
        taint.key,
        taint.value.as_deref().unwrap_or("")
    )
}

/// Score (raw): how many `PreferNoSchedule` taints the pod does not tolerate with its
/// tolerations of that effect (or none), upstream `countIntolerableTaintsPreferNoSchedule`;
/// normalised in reverse (fewer is better).
pub fn score(cs: &CycleState<'_>, node: &NodeInfo) -> i64 {
    let prefer = |t: &&Toleration| {
        t.effect
            .as_deref()
            .is_none_or(|e| e.is_empty() || e == PREFER_NO_SCHEDULE)
    };
    node.taints
        .iter()
        .filter(|taint| {
            taint.effect == PREFER_NO_SCHEDULE
                && !cs
                    .tolerations
                    .iter()
                    .filter(prefer)
                    .any(|t| tolerates(t, taint))
        })
        .count() as i64
}
