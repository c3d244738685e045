//! TaintToleration: a pod lands only on nodes whose `NoSchedule`/`NoExecute` taints it tolerates;
//! untolerated `PreferNoSchedule` taints lower a node's score. Mirrors upstream
//! `pkg/scheduler/framework/plugins/tainttoleration`; the predicates are the shared ones of
//! `tandem_core::scheduling::taints` (upstream `v1helper.FindMatchingUntoleratedTaint`).

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Taint, Toleration};
use tandem_core::scheduling::taints::{
    PREFER_NO_SCHEDULE, does_not_schedule, find_matching_untolerated_taint, tolerates,
};

use crate::cycle_state::CycleState;
use crate::plugin::{Code, FilterPlugin, Normalize, Plugin, Rejection, ScorePlugin};
use crate::snapshot::{NodeInfo, Snapshot};

/// The TaintToleration plugin (filter, node-only; score, normalised in reverse).
#[derive(Debug, Clone, Copy, Default)]
pub struct TaintToleration;

/// The upstream message for an untolerated taint.
pub fn reason(taint: &Taint) -> String {
    format!(
        "node(s) had untolerated taint {{{}: {}}}",
        taint.key,
        taint.value.as_deref().unwrap_or("")
    )
}

/// The reason of a rejection by the taint at position `taint` of the node.
fn explain(_: &CycleState<'_>, node: &NodeInfo, taint: usize) -> Vec<String> {
    node.taints.get(taint).map(reason).into_iter().collect()
}

impl Plugin for TaintToleration {
    fn name(&self) -> &'static str {
        "TaintToleration"
    }

    fn as_filter(self: Arc<Self>) -> Option<Arc<dyn FilterPlugin>> {
        Some(self)
    }

    fn as_score(self: Arc<Self>) -> Option<Arc<dyn ScorePlugin>> {
        Some(self)
    }
}

impl FilterPlugin for TaintToleration {
    /// The first `NoSchedule`/`NoExecute` taint the pod does not tolerate.
    fn filter(&self, cs: &CycleState<'_>, node: &NodeInfo) -> Result<(), Rejection> {
        match find_matching_untolerated_taint(&node.taints, cs.tolerations, does_not_schedule) {
            Some((i, _)) => Err(Rejection::deferred(
                Code::UnschedulableAndUnresolvable,
                explain,
                i,
            )),
            None => Ok(()),
        }
    }

    fn node_only(&self) -> bool {
        true
    }

    fn sign(&self, cs: &CycleState<'_>, out: &mut Vec<u8>) -> Result<(), serde_json::Error> {
        serde_json::to_writer(out, cs.tolerations)
    }
}

impl ScorePlugin for TaintToleration {
    /// How many `PreferNoSchedule` taints the pod does not tolerate with its tolerations of that
    /// effect (or none), upstream `countIntolerableTaintsPreferNoSchedule`; fewer is better.
    fn score(&self, cs: &CycleState<'_>, node: &NodeInfo, _: &Snapshot) -> i64 {
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

    fn normalize(&self) -> Normalize {
        Normalize::Reversed
    }
}
