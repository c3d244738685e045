//! TaintToleration: a pod lands only on nodes whose `NoSchedule`/`NoExecute` taints it tolerates;
//! untolerated `PreferNoSchedule` taints lower a node's score. Mirrors upstream
//! `pkg/scheduler/framework/plugins/tainttoleration` and `v1helper.ToleratesTaint`.

use k8s_openapi::api::core::v1::{Taint, Toleration};

use crate::framework::{CycleState, Rejection};
use crate::snapshot::NodeInfo;

pub use tandem_core::taints::tolerates;

/// Filter: the first `NoSchedule`/`NoExecute` taint the pod does not tolerate.
pub fn filter(cs: &CycleState<'_>, node: &NodeInfo) -> Result<(), Rejection> {
    for (i, taint) in node.taints.iter().enumerate() {
        if taint.effect != "NoSchedule" && taint.effect != "NoExecute" {
            continue;
        }
        if !cs.tolerations.iter().any(|t| tolerates(t, taint)) {
            return Err(Rejection::UntoleratedTaint(i));
        }
    }
    Ok(())
}

/// The upstream message for an untolerated taint.
pub fn reason(taint: &Taint) -> String {
    format!(
        "node(s) had untolerated taint {{{}: {}}}",
        taint.key,
        taint.value.as_deref().unwrap_or("")
    )
}

/// Score (raw): how many `PreferNoSchedule` taints the pod does not tolerate; normalised in
/// reverse (fewer is better).
pub fn score(cs: &CycleState<'_>, node: &NodeInfo) -> i64 {
    let prefer = |t: &&Toleration| {
        t.effect
            .as_deref()
            .is_none_or(|e| e.is_empty() || e == "PreferNoSchedule")
    };
    node.taints
        .iter()
        .filter(|taint| {
            taint.effect == "PreferNoSchedule"
                && !cs
                    .tolerations
                    .iter()
                    .filter(prefer)
                    .any(|t| tolerates(t, taint))
        })
        .count() as i64
}
