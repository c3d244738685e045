//! Spreading the pods of one owner (ReplicaSet, StatefulSet, …) across nodes: nodes running fewer
//! pods of the same controller score higher. Mirrors upstream's former `SelectorSpread` plugin
//! (`pkg/scheduler/framework/plugins/selectorspread`, node part), which today's default
//! `PodTopologySpread` system constraints replaced; counting by controller uid keeps it
//! proportional to the pods on one node.

use crate::framework::CycleState;
use crate::snapshot::NodeInfo;

/// Score (raw): pods on the node with the same controller; normalised in reverse.
pub fn score(cs: &CycleState<'_>, node: &NodeInfo) -> i64 {
    match &cs.owner {
        Some(o) => i64::from(node.owner_counts.get(o).copied().unwrap_or(0)),
        None => 0,
    }
}
