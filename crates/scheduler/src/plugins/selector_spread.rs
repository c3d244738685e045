//! Spreading the pods of one owner (ReplicaSet, StatefulSet, …) across nodes: nodes running fewer
//! pods of the same controller score higher. Mirrors upstream's former `SelectorSpread` plugin
//! (`pkg/scheduler/framework/plugins/selectorspread`, node part), which today's default
//! `PodTopologySpread` system constraints replaced; counting by controller uid keeps it
//! proportional to the pods on one node.

use std::sync::Arc;

use crate::cycle_state::CycleState;
use crate::plugin::{Normalize, Plugin, ScorePlugin, Status};
use crate::snapshot::{NodeInfo, Snapshot, controller_uid};

/// The SelectorSpread plugin (score, normalised in reverse).
#[derive(Debug, Clone, Copy, Default)]
pub struct SelectorSpread;

/// The uid of the pod's controller (the plugin's PreScore state).
#[derive(Debug)]
struct Owner(String);

impl Plugin for SelectorSpread {
    fn name(&self) -> &'static str {
        "SelectorSpread"
    }

    fn as_score(self: Arc<Self>) -> Option<Arc<dyn ScorePlugin>> {
        Some(self)
    }
}

impl ScorePlugin for SelectorSpread {
    /// A pod without a controller has nothing to spread from.
    fn pre_score(&self, cs: &mut CycleState<'_>) -> Status {
        match controller_uid(cs.pod) {
            Some(owner) => {
                cs.write(Owner(owner));
                Status::Success
            }
            None => Status::Skip,
        }
    }

    /// Pods on the node with the same controller; fewer is better.
    fn score(&self, cs: &CycleState<'_>, node: &NodeInfo, _: &Snapshot) -> i64 {
        match cs.read::<Owner>() {
            Some(Owner(o)) => i64::from(node.owner_counts.get(o).copied().unwrap_or(0)),
            None => 0,
        }
    }

    fn normalize(&self) -> Normalize {
        Normalize::Reversed
    }
}
